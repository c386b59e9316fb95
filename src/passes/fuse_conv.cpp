// Convolution fusions of the cpu inference pipeline.
//
// fold-batchnorm: BatchNormalization (inference mode) right after a Conv whose weights, bias and
// the normalisation's parameters are all constant is folded into the Conv's weights and bias:
//   s = scale / sqrt(var + eps);  W'[m] = W[m] * s[m];  B'[m] = (B[m] - mean[m]) * s[m] + bias[m]
//
// fuse-conv: Conv -> [Add of a same-shaped tensor] -> [activation], each intermediate read by
// the next node only, becomes one ai.graft::FusedConv (oneDNN post-ops: sum, eltwise).
#include <cmath>

#include "ops/dtype_dispatch.hpp"
#include "ops/infer.hpp"
#include "ops/registry.hpp"
#include "passes/fuse_util.hpp"
#include "support/check.hpp"

namespace graft::passes {
namespace {

using fuse::isOnnx;

bool isFloating(const ir::Tensor* t) {
  return t && t->info().hasShape() && (t->info().dataType() == DataType::Float || t->info().dataType() == DataType::Double);
}

std::vector<ir::Node*> convNodes(const ir::Graph& g) {
  std::vector<ir::Node*> out;
  for (ir::Node* n : g.schedule())
    if (isOnnx(n, "Conv")) out.push_back(n);
  return out;
}

class FoldBatchNorm : public Pass {
 public:
  std::string_view name() const override { return "fold-batchnorm"; }
  bool run(ir::Graph& g, PassContext& ctx) override {
    bool changed = false;
    // Collected first: folding deletes nodes that come later in the schedule.
    for (ir::Node* conv : convNodes(g)) {
      if (conv->numOutputs() != 1) continue;
      ir::Node* bn = fuse::soleConsumer(conv->output(0));
      if (!isOnnx(bn, "BatchNormalization") || bn->input(0) != conv->output(0)) continue;
      if (bn->attrInt("training_mode", 0) != 0) continue;
      bool extraOutputs = false;
      for (size_t i = 1; i < bn->numOutputs(); ++i)
        if (bn->output(i) && (!bn->output(i)->uses().empty() || bn->output(i)->isGraphOutput())) extraOutputs = true;
      if (extraOutputs || bn->numInputs() != 5) continue;
      ir::Tensor* w = conv->input(1);
      ir::Tensor* b = conv->hasInput(2) ? conv->input(2) : nullptr;
      if (!fuse::isConstant(w, ctx) || (b && !fuse::isConstant(b, ctx)) || !isFloating(w)) continue;
      DataType dt = w->data()->dtype();
      if (w->data()->rank() < 3 || (b && b->data()->dtype() != dt)) continue;
      int64_t M = w->data()->dim(0);
      if (b && b->data()->shape() != Shape{M}) continue;
      bool ok = true;
      for (size_t i = 1; i < 5; ++i) {
        const ir::Tensor* p = bn->input(i);
        ok = ok && fuse::isConstant(p, ctx) && p->data()->dtype() == dt && p->data()->shape() == Shape{M};
      }
      if (!ok) continue;
      double eps = bn->attrFloat("epsilon", 1e-5f);
      NDArray w2(dt, w->data()->shape()), b2(dt, {M});
      ops::dispatch<(1u << 1) | (1u << 11)>(dt, "fold-batchnorm", [&](auto tag) {
        using T = typename decltype(tag)::type;
        auto at = [&](size_t i, int64_t m) { return static_cast<double>(bn->input(i)->data()->data<T>()[m]); };
        int64_t per = w->data()->numel() / std::max<int64_t>(M, 1);
        const T* wp = w->data()->data<T>();
        for (int64_t m = 0; m < M; ++m) {
          double s = at(1, m) / std::sqrt(at(4, m) + eps);
          for (int64_t j = 0; j < per; ++j) w2.data<T>()[m * per + j] = static_cast<T>(wp[m * per + j] * s);
          double bias = b ? static_cast<double>(b->data()->data<T>()[m]) : 0.0;
          b2.data<T>()[m] = static_cast<T>((bias - at(3, m)) * s + at(2, m));
        }
      });
      ir::Tensor* wt = g.addInitializer(g.uniqueId(w->id() + "_bnfolded"), std::move(w2), ir::TensorKind::Constant);
      ir::Tensor* bt = g.addInitializer(g.uniqueId(conv->output(0)->id() + "_bnbias"), std::move(b2), ir::TensorKind::Constant);
      ir::Tensor* y = bn->output(0);
      ir::Tensor* mid = conv->output(0);
      std::vector<ir::Tensor*> ins{conv->input(0), wt, bt};
      ir::Attributes attrs = conv->attrs();
      std::string name = conv->name();
      g.removeNode(bn);
      g.removeNode(conv);
      g.removeTensor(mid);
      ir::Node* n = g.addNode("Conv", "", ins, {""}, std::move(attrs), name);
      g.setOutput(n, 0, y);
      changed = true;
    }
    return changed;
  }
};

class FuseConv : public Pass {
 public:
  std::string_view name() const override { return "fuse-conv"; }
  bool run(ir::Graph& g, PassContext& ctx) override {
    bool changed = false;
    // Collected first: fusing deletes nodes that come later in the schedule (never a Conv).
    for (ir::Node* conv : convNodes(g)) {
      if (conv->numOutputs() != 1 || !fuse::isFloat(conv->output(0))) continue;
      std::vector<ir::Node*> chain{conv};
      ir::Tensor* sum = nullptr;
      ir::Attributes attrs = conv->attrs();
      ir::Node* next = fuse::soleConsumer(conv->output(0));
      if (isOnnx(next, "Add") && next->numInputs() == 2) {
        ir::Tensor* other = next->input(0) == conv->output(0) ? next->input(1) : next->input(0);
        const TensorInfo& yi = conv->output(0)->info();
        if (other != conv->output(0) && fuse::isFloat(other) && yi.isStatic() && other->info() == yi &&
            next->output(0)->info() == yi) {
          sum = other;
          chain.push_back(next);
          next = fuse::soleConsumer(next->output(0));
        }
      }
      if (next && next->input(0) == chain.back()->output(0) && fuse::activationAttrs(*next, ctx, attrs))
        chain.push_back(next);
      if (chain.size() == 1) continue;
      std::vector<ir::Tensor*> ins{conv->input(0), conv->input(1), conv->hasInput(2) ? conv->input(2) : nullptr};
      if (sum) ins.push_back(sum);
      else if (!ins.back()) ins.pop_back();
      ir::Node* n = fuse::replaceChain(g, chain, "FusedConv", ins, std::move(attrs));
      ops::inferNode(*n, ctx.weightsAreConstant);
      changed = true;
    }
    return changed;
  }
};

GRAFT_REGISTER_PASS("fold-batchnorm", FoldBatchNorm);
GRAFT_REGISTER_PASS("fuse-conv", FuseConv);

}  // namespace
}  // namespace graft::passes
