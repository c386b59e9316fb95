// fuse-sgd-outer (cpu training pipeline): an SGDUpdate whose gradient is a matrix product over a
// single row (a Gemm with K = 1, alpha 1 and no C: the weight gradient of a fully connected layer
// at batch 1, dW = dY^T x, read by the update alone, directly or through the Identity that names
// it) becomes ai.graft::SGDOuterUpdate(w, a, b,
// ...), which forms each gradient element a[i] * b[j] as it updates w[i, j] (ops/optimizer_ops.cpp):
// the gradient, as large as the weight, is neither written nor read back. The products are the
// Gemm's (one rounding each), so the weights are bit for bit those of the unfused step.
#include <optional>

#include "ops/registry.hpp"
#include "passes/fuse_util.hpp"

namespace graft::passes {
namespace {

using fuse::isOnnx;

// The vectors a and b whose outer product Gemm node p computes exactly (K = 1, alpha 1, no C), in
// that order; nullopt for any other Gemm.
std::optional<std::pair<ir::Tensor*, ir::Tensor*>> outerOperands(const ir::Node* p) {
  if (!isOnnx(p, "Gemm") || p->numInputs() < 2 || (p->numInputs() > 2 && p->input(2))) return std::nullopt;
  if (p->attrFloat("alpha", 1.f) != 1.f) return std::nullopt;
  ir::Tensor* a = p->input(0);
  ir::Tensor* b = p->input(1);
  if (!fuse::isFloat(a) || !fuse::isFloat(b) || !a->info().isStatic() || !b->info().isStatic()) return std::nullopt;
  const Shape& as = a->info().shape();
  const Shape& bs = b->info().shape();
  if (as.size() != 2 || bs.size() != 2) return std::nullopt;
  const int64_t ka = p->attrInt("transA", 0) ? as[0] : as[1];
  const int64_t kb = p->attrInt("transB", 0) ? bs[1] : bs[0];
  if (ka != 1 || kb != 1) return std::nullopt;
  return std::make_pair(a, b);
}

class FuseSgdOuter : public Pass {
 public:
  std::string_view name() const override { return "fuse-sgd-outer"; }
  bool run(ir::Graph& g, PassContext&) override {
    std::vector<ir::Node*> updates;
    for (ir::Node* n : g.nodes())
      if (fuse::isGraftOp(n, "SGDUpdate")) updates.push_back(n);
    bool changed = false;
    for (ir::Node* u : updates) {
      if (u->numInputs() < 8 || !u->input(0) || !u->input(1)) continue;
      // The gradient, through the Identity that names it (Gradient___<weight>), read by the
      // update alone.
      std::vector<ir::Node*> chain;  // the update's gradient back to the Gemm
      ir::Tensor* grad = u->input(1);
      ir::Node* user = u;
      while (grad && fuse::soleConsumer(grad) == user && isOnnx(grad->producer(), "Identity")) {
        user = grad->producer();
        chain.push_back(user);
        grad = user->input(0);
      }
      if (!grad || fuse::soleConsumer(grad) != user) continue;
      ir::Node* p = grad->producer();
      auto ab = outerOperands(p);
      if (!ab) continue;
      const ir::Tensor* w = u->input(0);
      if (!fuse::isFloat(w) || !w->info().isStatic() || w->info().shape() != grad->info().shape()) continue;
      chain.push_back(p);
      std::vector<ir::Tensor*> inputs{u->input(0), ab->first, ab->second};
      for (size_t i = 2; i < u->numInputs(); ++i) inputs.push_back(u->input(i));
      fuse::replaceNodeInPlace(g, u, "SGDOuterUpdate", ops::kGraftDomain, inputs, {}, u->attrs());
      fuse::removeNodes(g, chain);
      changed = true;
    }
    return changed;
  }
};

}  // namespace

GRAFT_REGISTER_PASS("fuse-sgd-outer", FuseSgdOuter);

}  // namespace graft::passes
