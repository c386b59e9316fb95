// dce: removes nodes whose outputs nothing needs (no use, not a graph output), then tensors left
// without producer and uses. Weights (Variables) and graph inputs stay.
#include "ops/registry.hpp"
#include "passes/pass.hpp"

namespace graft::passes {
namespace {

class DeadCodeElimination : public Pass {
 public:
  std::string_view name() const override { return "dce"; }
  bool run(ir::Graph& g, PassContext&) override {
    bool changed = false;
    auto order = g.schedule();
    for (auto it = order.rbegin(); it != order.rend(); ++it) {
      ir::Node* n = *it;
      const ops::OpDef* def = ops::Registry::instance().find(*n);
      bool needed = def && def->traits.sideEffects;
      for (ir::Tensor* t : n->outputs())
        if (t && (!t->uses().empty() || t->isGraphOutput())) needed = true;
      if (!needed) {
        g.removeNode(n);
        changed = true;
      }
    }
    std::vector<ir::Tensor*> inputs = g.inputs();
    for (ir::Tensor* t : g.tensors()) {
      if (t->producer() || !t->uses().empty() || t->isGraphOutput()) continue;
      if (t->kind() == ir::TensorKind::Variable || t->kind() == ir::TensorKind::Input) continue;
      g.removeTensor(t);
      changed = true;
    }
    return changed;
  }
};

GRAFT_REGISTER_PASS("dce", DeadCodeElimination);

}  // namespace
}  // namespace graft::passes
