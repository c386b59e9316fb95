// constant-weights (cpu inference pipeline): when the compilation may treat weights as constant
// (PassContext::weightsAreConstant: inference sessions with SessionOptions.constantWeights),
// the plan graph's Variables become Constants, so that kernels see them as constant
// (CompileContext::constantInput) and pack them once. The buffers stay shared with the
// session's model, whose tensors keep their kind: WeightsIO still finds them, and writing
// weights recompiles such sessions.
#include "passes/pass.hpp"

namespace graft::passes {
namespace {

class ConstantWeights : public Pass {
 public:
  std::string_view name() const override { return "constant-weights"; }
  bool run(ir::Graph& g, PassContext& ctx) override {
    if (!ctx.weightsAreConstant) return false;
    bool changed = false;
    for (ir::Tensor* t : g.tensors())
      if (t->kind() == ir::TensorKind::Variable && t->data()) {
        t->setKind(ir::TensorKind::Constant);
        changed = true;
      }
    return changed;
  }
};

GRAFT_REGISTER_PASS("constant-weights", ConstantWeights);

}  // namespace
}  // namespace graft::passes
