// fuse-matmul (cpu inference pipeline): MatMul -> [Add of a tensor that broadcasts to the
// product without growing it] -> [activation] becomes ai.graft::FusedMatMul, and Gemm ->
// activation becomes ai.graft::FusedGemm (oneDNN matmul with bias and eltwise post-ops). Each
// intermediate must be read by the next node only.
#include "ops/infer.hpp"
#include "ops/registry.hpp"
#include "passes/fuse_util.hpp"

namespace graft::passes {
namespace {

using fuse::isOnnx;

// True when `b` broadcasts to `y` (both with known ranks) and the result keeps y's shape.
bool broadcastsInto(const TensorInfo& b, const TensorInfo& y) {
  if (!b.isStatic() || !y.isStatic() || b.rank() > y.rank()) return false;
  Shape bs = b.shape(), ys = y.shape();
  for (size_t i = 0; i < bs.size(); ++i) {
    int64_t bd = bs[bs.size() - 1 - i], yd = ys[ys.size() - 1 - i];
    if (bd != 1 && bd != yd) return false;
  }
  return true;
}

class FuseMatMul : public Pass {
 public:
  std::string_view name() const override { return "fuse-matmul"; }
  bool run(ir::Graph& g, PassContext& ctx) override {
    bool changed = false;
    // Collected first: fusing deletes nodes later in the schedule (never a MatMul or Gemm).
    std::vector<ir::Node*> heads;
    for (ir::Node* n : g.schedule())
      if (isOnnx(n, "MatMul") || isOnnx(n, "Gemm")) heads.push_back(n);
    for (ir::Node* head : heads) {
      if (head->numOutputs() != 1 || !fuse::isFloat(head->output(0))) continue;
      bool gemm = head->type() == "Gemm";
      std::vector<ir::Node*> chain{head};
      std::vector<ir::Tensor*> ins(head->inputs().begin(), head->inputs().end());
      ir::Attributes attrs = gemm ? head->attrs() : ir::Attributes{};
      ir::Node* next = fuse::soleConsumer(head->output(0));
      if (!gemm && isOnnx(next, "Add") && next->numInputs() == 2) {
        ir::Tensor* other = next->input(0) == head->output(0) ? next->input(1) : next->input(0);
        if (other != head->output(0) && fuse::isFloat(other) && broadcastsInto(other->info(), head->output(0)->info()) &&
            next->output(0)->info() == head->output(0)->info()) {
          ins.push_back(other);
          chain.push_back(next);
          next = fuse::soleConsumer(next->output(0));
        }
      }
      if (next && next->input(0) == chain.back()->output(0) && fuse::activationAttrs(*next, ctx, attrs))
        chain.push_back(next);
      if (chain.size() == 1) continue;
      ir::Node* n = fuse::replaceChain(g, chain, gemm ? "FusedGemm" : "FusedMatMul", ins, std::move(attrs));
      ops::inferNode(*n, ctx.weightsAreConstant);
      changed = true;
    }
    return changed;
  }
};

GRAFT_REGISTER_PASS("fuse-matmul", FuseMatMul);

}  // namespace
}  // namespace graft::passes
