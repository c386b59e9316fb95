#include "passes/fuse_util.hpp"

#include <limits>

#include "ops/elementwise_table.hpp"
#include "ops/registry.hpp"
#include "support/check.hpp"

namespace graft::passes::fuse {

bool isGraftOp(const ir::Node* n, const char* type) {
  return n && n->domain() == ops::kGraftDomain && n->type() == type;
}

bool isOnnx(const ir::Node* n, const char* type) { return n && n->domain().empty() && n->type() == type; }

ir::Node* soleConsumer(const ir::Tensor* t) {
  if (!t || t->isGraphOutput() || t->uses().size() != 1) return nullptr;
  const ir::Use& u = t->uses()[0];
  return u.implicit ? nullptr : u.node;
}

bool isConstant(const ir::Tensor* t, const PassContext& ctx) {
  if (!t || !t->data()) return false;
  return t->kind() == ir::TensorKind::Constant || (ctx.weightsAreConstant && t->kind() == ir::TensorKind::Variable);
}

bool isFloat(const ir::Tensor* t) {
  return t && t->type().isTensor() && t->info().dataType() == DataType::Float && t->info().hasShape();
}

namespace {
// The float value of a constant scalar (one element) input, or nullopt.
std::optional<float> constScalar(const ir::Tensor* t, const PassContext& ctx) {
  if (!isConstant(t, ctx) || t->data()->numel() != 1 || t->data()->dtype() != DataType::Float) return std::nullopt;
  return t->data()->data<float>()[0];
}
}  // namespace

bool activationAttrs(const ir::Node& act, const PassContext& ctx, ir::Attributes& attrs) {
  if (act.numOutputs() != 1 || !isFloat(act.output(0))) return false;
  float alpha = 0.f, beta = 0.f;
  const std::string& t = act.type();
  if (act.domain().empty() && t == "Clip") {
    // Clip's bounds are inputs: constant ones become the post-op's.
    alpha = -std::numeric_limits<float>::infinity();
    beta = std::numeric_limits<float>::infinity();
    if (act.hasInput(1)) {
      auto v = constScalar(act.input(1), ctx);
      if (!v) return false;
      alpha = *v;
    }
    if (act.hasInput(2)) {
      auto v = constScalar(act.input(2), ctx);
      if (!v) return false;
      beta = *v;
    }
    // NaN bounds, or min > max (every element becomes max): leave those to Clip itself.
    if (!(alpha <= beta)) return false;
  } else {
    // The activations of the elementwise table with a oneDNN post-op.
    const ops::ew::Row* row = ops::ew::find(act.domain(), t);
    if (!row || !row->postOp() || act.numInputs() != 1) return false;
    ops::ew::Row::Params p = ops::ew::params(*row, act);
    alpha = p.p0;
    beta = p.p1;
  }
  attrs.set("activation", t);
  if (!act.domain().empty()) attrs.set("activation_domain", act.domain());
  if (alpha != 0.f) attrs.set("activation_alpha", alpha);
  if (beta != 0.f) attrs.set("activation_beta", beta);
  return true;
}

ir::Node* replaceChain(ir::Graph& g, const std::vector<ir::Node*>& chain, const std::string& type,
                       const std::vector<ir::Tensor*>& inputs, ir::Attributes attrs) {
  GRAFT_ASSERT(!chain.empty(), "replaceChain of an empty chain");
  ir::Tensor* out = chain.back()->output(0);
  std::string name = chain.front()->name();
  std::vector<ir::Tensor*> intermediates;
  for (size_t i = 0; i + 1 < chain.size(); ++i) intermediates.push_back(chain[i]->output(0));
  for (auto it = chain.rbegin(); it != chain.rend(); ++it) g.removeNode(*it);
  for (ir::Tensor* t : intermediates)
    if (t && !t->producer() && t->uses().empty() && !t->isGraphOutput()) g.removeTensor(t);
  if (!g.otherOpsets.count(ops::kGraftDomain)) g.otherOpsets[ops::kGraftDomain] = 1;
  ir::Node* n = g.addNode(type, ops::kGraftDomain, inputs, {""}, std::move(attrs), name);
  g.setOutput(n, 0, out);
  return n;
}

ir::Node* replaceNodeInPlace(ir::Graph& g, ir::Node* n, const std::string& type, const std::string& domain,
                             const std::vector<ir::Tensor*>& inputs, const std::vector<std::string>& outputIds,
                             ir::Attributes attrs) {
  // A copy before n goes: `inputs` may be n's own vector.
  const std::vector<ir::Tensor*> in = inputs;  // NOLINT(performance-unnecessary-copy-initialization)
  std::string name = n->name();
  int64_t id = n->id();
  auto vg = n->virtualGraph;
  auto stage = n->pipelineStage;
  bool eager = n->eager;
  std::vector<ir::Node*> after = n->runsAfter(), before;
  for (ir::Node* x : g.nodes())
    for (ir::Node* a : x->runsAfter())
      if (a == n) before.push_back(x);
  g.removeNode(n);
  if (!domain.empty() && !g.otherOpsets.count(domain)) g.otherOpsets[domain] = 1;
  ir::Node* m = g.addNode(type, domain, in, outputIds, std::move(attrs), name);
  g.reuseNodeId(m, id);
  m->virtualGraph = vg;
  m->pipelineStage = stage;
  m->eager = eager;
  for (ir::Node* a : after) m->addRunsAfter(a);
  for (ir::Node* b : before) b->addRunsAfter(m);
  return m;
}

void removeNodes(ir::Graph& g, const std::vector<ir::Node*>& nodes) {
  std::vector<ir::Tensor*> outs;
  for (ir::Node* n : nodes)
    for (ir::Tensor* t : n->outputs())
      if (t) outs.push_back(t);
  for (ir::Node* n : nodes) g.removeNode(n);
  for (ir::Tensor* t : outs)
    if (!t->producer() && t->uses().empty() && !t->isGraphOutput()) g.removeTensor(t);
}

}  // namespace graft::passes::fuse
