#include <algorithm>
#include <set>

#include "ir/graph.hpp"
#include "support/check.hpp"

namespace graft::ir {

void verifyGraph(const Graph& g) {
  std::set<const Tensor*> owned;
  for (Tensor* t : g.tensors()) {
    owned.insert(t);
    GRAFT_CHECK(&t->graph() == &g, "tensor '{}' is listed in graph '{}' but belongs to another graph", t->id(), g.name());
    if (t->kind() == TensorKind::Activation) {
      GRAFT_CHECK(t->producer() || t->uses().empty(), "graph '{}': tensor '{}' is used but produced by no node", g.name(),
                  t->id());
    } else {
      GRAFT_CHECK(!t->producer(), "graph '{}': {} tensor '{}' must not be produced by {}", g.name(), tensorKindName(t->kind()),
                  t->id(), t->producer()->describe());
    }
    if (t->kind() == TensorKind::OuterScope) {
      const Tensor* outer = nullptr;
      for (Graph* p = g.parent(); p && !outer; p = p->parent()) outer = p->findTensor(t->id());
      GRAFT_CHECK(outer, "graph '{}' reads '{}' from an outer scope, but no enclosing graph defines it", g.name(), t->id());
    }
    for (const Use& u : t->uses()) {
      GRAFT_CHECK(&u.node->graph() == &g, "tensor '{}' is used by {} of another graph", t->id(), u.node->describe());
      const auto& list = u.implicit ? u.node->implicitInputs() : u.node->inputs();
      GRAFT_CHECK(u.index >= 0 && static_cast<size_t>(u.index) < list.size() && list[u.index] == t,
                  "tensor '{}': use by {} is not mirrored by the node", t->id(), u.node->describe());
    }
    if (t->producer()) {
      GRAFT_CHECK(t->producer()->output(t->producerIndex()) == t, "tensor '{}': producer link is not mirrored", t->id());
    }
  }
  for (Node* n : g.nodes()) {
    for (size_t i = 0; i < n->numInputs(); ++i) {
      Tensor* t = n->input(i);
      if (!t) continue;
      GRAFT_CHECK(owned.count(t), "{}: input {} ('{}') is not a tensor of graph '{}'", n->describe(), i, t->id(), g.name());
      const auto& uses = t->uses();
      GRAFT_CHECK(std::find(uses.begin(), uses.end(), Use{n, static_cast<int>(i), false}) != uses.end(),
                  "{}: input '{}' does not record the use", n->describe(), t->id());
    }
    for (Tensor* t : n->implicitInputs())
      GRAFT_CHECK(owned.count(t), "{}: implicit input '{}' is not a tensor of graph '{}'", n->describe(), t->id(), g.name());
    for (size_t i = 0; i < n->numOutputs(); ++i) {
      Tensor* t = n->output(i);
      if (!t) continue;
      GRAFT_CHECK(t->producer() == n && t->producerIndex() == static_cast<int>(i), "{}: output '{}' does not record its producer",
                  n->describe(), t->id());
    }
    for (Graph* sub : n->subgraphs()) {
      GRAFT_CHECK(sub->parent() == &g, "{}: subgraph '{}' does not point back to graph '{}'", n->describe(), sub->name(), g.name());
      verifyGraph(*sub);
    }
  }
  for (Tensor* t : g.outputs())
    GRAFT_CHECK(owned.count(t), "graph '{}': output '{}' is not a tensor of the graph", g.name(), t->id());
  for (Tensor* t : g.inputs())
    GRAFT_CHECK(owned.count(t), "graph '{}': input '{}' is not a tensor of the graph", g.name(), t->id());
  (void)g.schedule();  // throws on cycles
}

}  // namespace graft::ir
