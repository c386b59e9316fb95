// Softmax, LogSoftmax and Hardmax along one axis (opset-13 semantics: only that axis is
// normalized), and the losses built on them: NegativeLogLikelihoodLoss and
// SoftmaxCrossEntropyLoss. Everything is computed in double and rounded once.
#include <cmath>
#include <limits>
#include <optional>

#include "ops/dtype_dispatch.hpp"
#include "ops/registry.hpp"
#include "ops/shape_util.hpp"

namespace graft::ops {
namespace {



enum class SoftmaxKind { Softmax, LogSoftmax, Hardmax };

// Applies the kind along `axis` of `x` (as doubles laid out in `shape`), in place.
void softmaxInPlace(std::vector<double>& x, const Shape& shape, int64_t axis, SoftmaxKind kind) {
  if (x.empty()) return;
  int64_t outer = shapeProduct(shape, 0, axis), len = shape[axis];
  int64_t inner = shapeProduct(shape, axis + 1, static_cast<int64_t>(shape.size()));
  for (int64_t o = 0; o < outer; ++o)
    for (int64_t in = 0; in < inner; ++in) {
      double* p = x.data() + o * len * inner + in;
      auto at = [&](int64_t j) -> double& { return p[j * inner]; };
      if (kind == SoftmaxKind::Hardmax) {
        // The first maximum wins (a NaN counts as the maximum, as numpy's argmax has it).
        int64_t best = 0;
        for (int64_t j = 1; j < len && !std::isnan(at(best)); ++j)
          if (std::isnan(at(j)) || at(j) > at(best)) best = j;
        for (int64_t j = 0; j < len; ++j) at(j) = j == best ? 1.0 : 0.0;
        continue;
      }
      // Subtracting the maximum keeps exp() finite; an infinite maximum is left to propagate.
      double m = -std::numeric_limits<double>::infinity();
      for (int64_t j = 0; j < len; ++j) m = std::max(m, at(j));
      if (std::isinf(m)) m = 0;
      double s = 0;
      for (int64_t j = 0; j < len; ++j) s += std::exp(at(j) - m);
      double logS = std::log(s);
      for (int64_t j = 0; j < len; ++j)
        at(j) = kind == SoftmaxKind::Softmax ? std::exp(at(j) - m) / s : at(j) - m - logS;
    }
}

KernelFactory softmaxKernel(SoftmaxKind kind) {
  return [kind](CompileContext& c) -> KernelFn {
    std::string what = c.node().describe();
    int64_t axisAttr = c.node().attrInt("axis", -1);
    return [=](KernelContext& k) {
      const NDArray& x = k.input(0);
      int64_t axis = normalizeAxis(axisAttr, x.rank(), what);
      auto v = readAsDoubles(x, what);
      softmaxInPlace(v, x.shape(), axis, kind);
      k.setOutput(0, arrayFromDoubles(v, x.dtype(), x.shape(), what));
    };
  };
}

// ---- losses --------------------------------------------------------------------------------------

enum class Reduction { None, Sum, Mean };

Reduction parseReduction(const ir::Node& n, const std::string& what) {
  std::string r = n.attrString("reduction", "mean");
  if (r == "none") return Reduction::None;
  if (r == "sum") return Reduction::Sum;
  if (r == "mean") return Reduction::Mean;
  GRAFT_THROW("{}: reduction must be 'none', 'sum' or 'mean', got '{}'", what, r);
}

struct LossAttrs {
  Reduction reduction;
  std::optional<int64_t> ignoreIndex;
};

LossAttrs parseLossAttrs(const ir::Node& n, const std::string& what) {
  LossAttrs a{parseReduction(n, what), std::nullopt};
  if (n.attrs().has("ignore_index")) a.ignoreIndex = n.attrInt("ignore_index");
  return a;
}

// The weighted negative log-likelihood of log-probabilities `logp` ([N, C, d...]) at `target`
// ([N, d...]); writes output 0 (reduced as asked) in dtype `dt`.
void nllLoss(KernelContext& k, const std::vector<double>& logp, const Shape& inShape, DataType dt, const LossAttrs& a,
             const std::string& what) {
  GRAFT_CHECK(inShape.size() >= 2, "{}: the input must have shape [N, C, ...], got {}", what, shapeToString(inShape));
  const NDArray& target = k.input(1);
  Shape want = inShape;
  want.erase(want.begin() + 1);
  GRAFT_CHECK(target.shape() == want, "{}: the target must have shape {} (the input's without the class axis), got {}", what,
              shapeToString(want), shapeToString(target.shape()));
  int64_t N = inShape[0], C = inShape[1], D = shapeProduct(inShape, 2, static_cast<int64_t>(inShape.size()));
  auto t = toInt64Vector(target);
  std::vector<double> w;
  if (k.hasInput(2)) {
    const NDArray& wt = k.input(2);
    GRAFT_CHECK(wt.rank() == 1 && wt.dim(0) == C, "{}: the weight must have shape [{}] (one per class), got {}", what, C,
                shapeToString(wt.shape()));
    w = readAsDoubles(wt, what);
  }
  std::vector<double> loss(t.size()), lw(t.size());
  for (int64_t b = 0; b < N; ++b)
    for (int64_t d = 0; d < D; ++d) {
      size_t i = static_cast<size_t>(b * D + d);
      int64_t cls = t[i];
      if (a.ignoreIndex && cls == *a.ignoreIndex) {
        loss[i] = 0;
        lw[i] = 0;
        continue;
      }
      GRAFT_CHECK(cls >= 0 && cls < C, "{}: target value {} at flat position {} is not a class index in [0, {})", what, cls,
                  i, C);
      lw[i] = w.empty() ? 1.0 : w[cls];
      loss[i] = -logp[(b * C + cls) * D + d] * lw[i];
    }
  if (a.reduction == Reduction::None) {
    k.setOutput(0, arrayFromDoubles(loss, dt, want, what));
    return;
  }
  double s = 0, ws = 0;
  for (size_t i = 0; i < loss.size(); ++i) {
    s += loss[i];
    ws += lw[i];
  }
  // Mean divides by the total weight of the counted elements (0/0 = NaN when none count).
  double r = a.reduction == Reduction::Sum ? s : (ws != 0 ? s / ws : std::numeric_limits<double>::quiet_NaN());
  k.setOutput(0, arrayFromDoubles({r}, dt, {}, what));
}

KernelFn nllLossKernel(CompileContext& c) {
  std::string what = c.node().describe();
  LossAttrs a = parseLossAttrs(c.node(), what);
  return [=](KernelContext& k) {
    const NDArray& x = k.input(0);
    nllLoss(k, readAsDoubles(x, what), x.shape(), x.dtype(), a, what);
  };
}

KernelFn sceLossKernel(CompileContext& c) {
  std::string what = c.node().describe();
  LossAttrs a = parseLossAttrs(c.node(), what);
  return [=](KernelContext& k) {
    const NDArray& x = k.input(0);
    GRAFT_CHECK(x.rank() >= 2, "{}: the scores must have shape [N, C, ...], got {}", what, shapeToString(x.shape()));
    auto logp = readAsDoubles(x, what);
    softmaxInPlace(logp, x.shape(), 1, SoftmaxKind::LogSoftmax);
    nllLoss(k, logp, x.shape(), x.dtype(), a, what);
    if (k.wantsOutput(1)) k.setOutput(1, arrayFromDoubles(logp, x.dtype(), x.shape(), what));
  };
}

}  // namespace

GRAFT_REGISTER_OPS(softmax) {
  r.add("Softmax").setReference(softmaxKernel(SoftmaxKind::Softmax));
  r.add("LogSoftmax").setReference(softmaxKernel(SoftmaxKind::LogSoftmax));
  r.add("Hardmax").setReference(softmaxKernel(SoftmaxKind::Hardmax));
  r.add("NegativeLogLikelihoodLoss").setReference(nllLossKernel).noGradient({1, 2});
  r.add("SoftmaxCrossEntropyLoss").setReference(sceLossKernel).noGradient({1, 2});
}

}  // namespace graft::ops

// ---- gradients ----------------------------------------------------------------------------------
#include "ops/grad.hpp"

namespace graft::ops {
namespace {

ir::Tensor* sumAlong(GradBuilder& g, ir::Tensor* t, int64_t axis) {
  ir::Attributes a;
  a.set("keepdims", int64_t{1});
  return g.op("ReduceSum", {t, g.int64s({axis})}, a);
}

// The gradient with respect to the log-probabilities ([N, C, d...], like `logp`) of the NLL loss
// of node g (targets [N, d...] as input 1, optional class weights as input 2): -w[t] * dL/dloss
// at each target class, 0 elsewhere. Ignored targets get 0 even where a Mean over no element
// divided by 0, as in PyTorch.
ir::Tensor* nllGradOfLogProb(GradBuilder& g, ir::Tensor* logp) {
  const ir::Node& n = g.node();
  std::string what = n.describe();
  Reduction red = parseReduction(n, what);
  ir::Tensor* target = g.in(1);
  ir::Tensor* zero = g.scalarLike(0, logp);
  ir::Tensor* valid = nullptr;
  ir::Tensor* safeTarget = target;
  if (n.attrs().has("ignore_index")) {
    NDArray ignore(target->info().dataType(), {});
    dispatch<kInts>(ignore.dtype(), what, [&](auto tag) {
      using T = typename decltype(tag)::type;
      *ignore.data<T>() = static_cast<T>(n.attrInt("ignore_index"));
    });
    valid = g.op("Not", {g.op("Equal", {target, g.constant(std::move(ignore))})});
    // An ignored target may be any number (-100): it indexes class 0 instead, masked below.
    safeTarget = g.where(valid, target, g.zerosLike(target));
  }
  ir::Tensor* w = g.in(2) ? g.op("CastLike", {g.op("Gather", {g.in(2), safeTarget}), logp})
                          : g.add(g.op("CastLike", {g.zerosLike(target), logp}), g.scalarLike(1, logp));
  if (valid) w = g.where(valid, w, zero);
  ir::Tensor* dl = g.dy(0);  // [N, d...] for none, a scalar otherwise
  if (red == Reduction::Mean) {
    ir::Attributes a;
    a.set("keepdims", int64_t{0});
    dl = g.div(dl, g.op("ReduceSum", {w}, a));
  }
  ir::Tensor* coef = g.neg(g.mul(w, dl));
  if (valid) coef = g.where(valid, coef, zero);
  NDArray offOn(DataType::Bool, {2});
  offOn.data<bool>()[1] = true;
  ir::Attributes a;
  a.set("axis", int64_t{1});
  ir::Tensor* depth = g.op("Gather", {g.op("Shape", {logp}), g.int64s({1})});
  ir::Tensor* isTarget = g.op("OneHot", {safeTarget, depth, g.constant(std::move(offOn))}, a);
  return g.where(isTarget, g.op("Unsqueeze", {coef, g.int64s({1})}), zero);
}

// Softmax's gradient as a function of log-probabilities: d - softmax * sum(d) along the axis.
ir::Tensor* logSoftmaxGrad(GradBuilder& g, ir::Tensor* dlogp, ir::Tensor* logp, int64_t axis) {
  return g.sub(dlogp, g.mul(g.op("Exp", {logp}), sumAlong(g, dlogp, axis)));
}

}  // namespace

GRAFT_REGISTER_OPS(softmax_vjp) {
  r.add("Softmax").setVjp([](GradBuilder& g) {
    ir::Tensor* y = g.out(0);
    int64_t axis = g.node().attrInt("axis", -1);
    g.setDx(0, g.mul(y, g.sub(g.dy(), sumAlong(g, g.mul(g.dy(), y), axis))));
  });
  r.add("LogSoftmax").setVjp([](GradBuilder& g) {
    g.setDx(0, logSoftmaxGrad(g, g.dy(), g.out(0), g.node().attrInt("axis", -1)));
  });
  // Piecewise constant: zero gradient almost everywhere.
  r.add("Hardmax").setVjp([](GradBuilder& g) { g.setDx(0, g.zerosLike(g.in(0))); });
  r.add("NegativeLogLikelihoodLoss").setVjp([](GradBuilder& g) { g.setDx(0, nllGradOfLogProb(g, g.in(0))); });
  r.add("SoftmaxCrossEntropyLoss").setVjp([](GradBuilder& g) {
    ir::Tensor* logp = g.out(1);
    if (!logp) {
      ir::Attributes a;
      a.set("axis", int64_t{1});
      logp = g.op("LogSoftmax", {g.in(0)}, a);
    }
    ir::Tensor* dlogp = nllGradOfLogProb(g, logp);
    if (g.hasDy(1)) dlogp = g.add(dlogp, g.dy(1));
    g.setDx(0, logSoftmaxGrad(g, dlogp, logp, 1));
  });
}

}  // namespace graft::ops
