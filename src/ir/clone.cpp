#include <unordered_map>

#include "ir/graph.hpp"
#include "support/check.hpp"

namespace graft::ir {
namespace {

void copyGraph(const Graph& g, Graph& out);

AttrValue cloneAttr(const AttrValue& v, Graph* parent) {
  auto one = [&](const GraphPtr& g) {
    auto c = std::make_shared<Graph>(g->name(), parent);
    copyGraph(*g, *c);
    return c;
  };
  if (const auto* g = std::get_if<GraphPtr>(&v)) return one(*g);
  if (const auto* gs = std::get_if<std::vector<GraphPtr>>(&v)) {
    std::vector<GraphPtr> out;
    for (const auto& g : *gs) out.push_back(one(g));
    return out;
  }
  return v;
}

void copyGraph(const Graph& g, Graph& out) {
  out.setOpsetVersion(g.opsetVersion());
  out.otherOpsets = g.otherOpsets;
  for (Tensor* t : g.tensors()) {
    Tensor* c = out.addTensor(t->id(), t->type(), t->kind());
    if (t->data()) c->setData(*t->data());
    c->docString = t->docString;
  }
  for (Tensor* t : g.inputs()) out.addInput(&out.tensor(t->id()));
  std::unordered_map<const Node*, Node*> copies;
  for (Node* n : g.nodes()) {
    std::vector<Tensor*> ins;
    for (Tensor* t : n->inputs()) ins.push_back(t ? &out.tensor(t->id()) : nullptr);
    std::vector<std::string> outs;
    for (Tensor* t : n->outputs()) outs.push_back(t ? t->id() : "");
    Attributes attrs;
    for (const auto& [k, v] : n->attrs().all()) attrs.set(k, cloneAttr(v, &out));
    Node* c = out.addNode(n->type(), n->domain(), ins, outs, std::move(attrs), n->name());
    std::vector<Tensor*> imp;
    for (Tensor* t : n->implicitInputs()) imp.push_back(&out.tensor(t->id()));
    c->setImplicitInputs(imp);
    c->virtualGraph = n->virtualGraph;
    c->pipelineStage = n->pipelineStage;
    c->recompute = n->recompute;
    c->eager = n->eager;
    copies[n] = c;
  }
  for (Node* n : g.nodes())
    for (Node* a : n->runsAfter()) copies.at(n)->addRunsAfter(copies.at(a));
  for (Tensor* t : g.outputs()) out.addOutput(&out.tensor(t->id()));
}

}  // namespace

std::unique_ptr<Graph> cloneGraph(const Graph& g) {
  auto out = std::make_unique<Graph>(g.name(), g.parent());
  copyGraph(g, *out);
  return out;
}

}  // namespace graft::ir
