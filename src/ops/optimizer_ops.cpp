// In-place optimizer updates (domain ai.graft): one op per optimizer family updates a weight and
// its optimizer state from its gradient and hyper-parameter tensors (scalars). They run after
// every other reader of the weight (control dependencies added by the optimizer builder).
// Equations follow PopART's documentation of SGD, Adam and Adaptive (see docs/training.md).
#include <cmath>

#include "ops/dtype_dispatch.hpp"
#include "ops/optimizer_util.hpp"
#include "ops/registry.hpp"

namespace graft::ops {
namespace {

std::vector<ir::ValueType> noOutputs(const ir::Node&, const std::vector<ir::ValueType>&,
                                     const std::vector<const NDArray*>&) {
  return {};
}

// Typed element access for the float types of weights (state is kept in the weight's type).
template <class T>
double ld(const T* p, int64_t i) {
  return static_cast<double>(static_cast<ComputeType<T>>(p[i]));
}
template <class T>
void st(T* p, int64_t i, double v) {
  p[i] = static_cast<T>(static_cast<ComputeType<T>>(v));
}

// One SGD step of element i of w (and its velocity v, when vp is set) from its gradient gi.
template <class T>
void sgdElement(T* wp, T* vp, int64_t i, double gi, double lr, double wd, double mm, double dm, double vs, double ls,
                bool nesterov) {
  double wi = ld(wp, i);
  if (!vp) {
    st(wp, i, wi - lr * (1 - dm) * (gi / ls + wd * wi));
    return;
  }
  double vi = ld(vp, i) * mm + (1 - dm) * vs * (gi / ls + wd * wi);
  st(vp, i, vi);
  if (nesterov)
    st(wp, i, wi - lr / vs * (vs * (gi / ls + wd * wi) + mm * vi));
  else
    st(wp, i, wi - lr / vs * vi);
}

// SGDUpdate(w, g, lr, wd, mm, dm, vs, ls [, v]) {nesterov}; SGDOuterUpdate(w, a, b, lr, wd, mm, dm,
// vs, ls [, v]) {nesterov}: the same with the gradient g = a (x) b, g[i, j] = a[i] * b[j] in w's type
// for a 2-D w [I, J], a of I elements and b of J (the weight gradient of a matrix product over
// one row, fused with its update by fuse-sgd-outer so that it is never stored).
template <bool Outer>
KernelFn sgdKernel(CompileContext& c) {
  bool nesterov = c.node().attrInt("nesterov", 0) != 0;
  std::string what = c.node().describe();
  return [=](KernelContext& k) {
    NDArray w = k.input(0);
    const size_t h = Outer ? 3 : 2;  // the first hyper-parameter
    const NDArray& g = k.input(1);
    if constexpr (Outer)
      checkOuterFactors(w, g, k.input(2), what);
    else
      checkLikeWeight(w, g, what, "the gradient");
    double lr = optimizerScalar(k, h), wd = optimizerScalar(k, h + 1), mm = optimizerScalar(k, h + 2),
           dm = optimizerScalar(k, h + 3), vs = optimizerScalar(k, h + 4), ls = optimizerScalar(k, h + 5);
    bool momentum = k.hasInput(h + 6);
    NDArray v = momentum ? k.input(h + 6) : NDArray();
    if (momentum) checkLikeWeight(w, v, what, "the velocity");
    dispatch<kFloats>(w.dtype(), what, [&](auto tag) {
      using T = typename decltype(tag)::type;
      T* wp = w.data<T>();
      const T* gp = g.data<T>();
      T* vp = momentum ? v.data<T>() : nullptr;
      if constexpr (Outer) {
        const T* bp = k.input(2).data<T>();
        const int64_t J = w.dim(1);
        for (int64_t i = 0; i < w.dim(0); ++i)
          for (int64_t j = 0; j < J; ++j) {
            T gij = static_cast<T>(static_cast<ComputeType<T>>(gp[i]) * static_cast<ComputeType<T>>(bp[j]));
            sgdElement(wp, vp, i * J + j, ld(&gij, 0), lr, wd, mm, dm, vs, ls, nesterov);
          }
      } else {
        for (int64_t i = 0; i < w.numel(); ++i) sgdElement(wp, vp, i, ld(gp, i), lr, wd, mm, dm, vs, ls, nesterov);
      }
    });
  };
}

// AdamUpdate(w, g, m, v, t, lr, wd, b1, b2, eps, ls, mwn) {mode, decay_mode}
KernelFn adamKernel(CompileContext& c) {
  int mode = static_cast<int>(c.node().attrInt("mode", 0));  // AdamMode
  bool l2 = c.node().attrInt("decay_mode", 0) == 1;          // WeightDecayMode::L2Regularization
  std::string what = c.node().describe();
  return [=](KernelContext& k) {
    NDArray w = k.input(0), m = k.input(2), v = k.input(3);
    const NDArray& g = k.input(1);
    const AdamStep s = beginAdamStep(k, mode, what);
    const double lr = s.lr, wd = s.wd, b1 = s.b1, b2 = s.b2, eps = s.eps, ls = s.ls, mwn = s.mwn, c1 = s.c1, c2 = s.c2;
    const bool lamb = s.lamb, adamax = s.adamax;
    dispatch<kFloats>(w.dtype(), what, [&](auto tag) {
      using T = typename decltype(tag)::type;
      T *wp = w.data<T>(), *mp = m.data<T>(), *vp = v.data<T>();
      const T* gp = g.data<T>();
      int64_t n = w.numel();
      std::vector<double> x(static_cast<size_t>(n));
      double r1 = 0, r2 = 0;
      for (int64_t i = 0; i < n; ++i) {
        double wi = ld(wp, i);
        double s = ld(gp, i) / ls;
        if (l2) s += wd * wi;
        double mi = b1 * ld(mp, i) + (1 - b1) * s;
        double vi = adamax ? std::max(b2 * ld(vp, i), std::abs(s)) : b2 * ld(vp, i) + (1 - b2) * s * s;
        st(mp, i, mi);
        st(vp, i, vi);
        double xi = (mi / c1) / (std::sqrt(vi / c2) + eps);
        if (!l2) xi += wd * wi;
        x[i] = xi;
        r1 += wi * wi;
        r2 += xi * xi;
      }
      double ratio = 1.0;
      if (lamb) {
        double phi = std::min(std::sqrt(r1), mwn);
        r2 = std::sqrt(r2);
        ratio = (phi == 0.0 || r2 == 0.0) ? 1.0 : phi / r2;
      }
      for (int64_t i = 0; i < n; ++i) st(wp, i, ld(wp, i) - ratio * lr * x[i]);
    });
  };
}

// AdaptiveUpdate(w, g, v1, v2?, v3?, lr, wd, alpha, mm, eps, ls) {mode, decay_mode, tf_variant}
KernelFn adaptiveKernel(CompileContext& c) {
  int mode = static_cast<int>(c.node().attrInt("mode", 1));  // AdaptiveMode
  bool l2 = c.node().attrInt("decay_mode", 0) == 1;
  bool tf = c.node().attrInt("tf_variant", 0) != 0;
  std::string what = c.node().describe();
  return [=](KernelContext& k) {
    NDArray w = k.input(0), v1 = k.input(2);
    const NDArray& g = k.input(1);
    NDArray v2 = k.hasInput(3) ? k.input(3) : NDArray();
    NDArray v3 = k.hasInput(4) ? k.input(4) : NDArray();
    checkLikeWeight(w, g, what, "the gradient");
    checkLikeWeight(w, v1, what, "accumulator 1");
    bool centered = mode == 2, adadelta = mode == 3, adagrad = mode == 0;
    GRAFT_ASSERT(!(centered || adadelta) || v2.valid(), "{}: mode needs a second accumulator", what);
    double lr = optimizerScalar(k, 5), wd = optimizerScalar(k, 6), a = optimizerScalar(k, 7),
           mm = optimizerScalar(k, 8), eps = optimizerScalar(k, 9), ls = optimizerScalar(k, 10);
    dispatch<kFloats>(w.dtype(), what, [&](auto tag) {
      using T = typename decltype(tag)::type;
      T *wp = w.data<T>(), *p1 = v1.data<T>();
      T* p2 = v2.valid() ? v2.data<T>() : nullptr;
      T* p3 = v3.valid() ? v3.data<T>() : nullptr;
      const T* gp = g.data<T>();
      for (int64_t i = 0; i < w.numel(); ++i) {
        double wi = ld(wp, i);
        double s = ld(gp, i) / ls;
        if (l2) s += wd * wi;
        double a1 = adagrad ? ld(p1, i) + s * s : a * ld(p1, i) + (1 - a) * s * s;
        st(p1, i, a1);
        double x;
        if (adadelta) {
          double a2 = ld(p2, i);
          x = s * std::sqrt(a2 + eps) / std::sqrt(a1 + eps);
          st(p2, i, a * a2 + (1 - a) * x * x);
        } else if (centered) {
          double a2 = a * ld(p2, i) + (1 - a) * s;
          st(p2, i, a2);
          x = tf ? s / std::sqrt(a1 - a2 * a2 + eps) : s / (std::sqrt(a1 - a2 * a2) + eps);
        } else {
          x = (tf && !adagrad) ? s / std::sqrt(a1 + eps) : s / (std::sqrt(a1) + eps);
        }
        bool tfMomentum = tf && mm > 0 && (mode == 1 || centered);
        double step = tfMomentum ? lr * x : x;
        double u = p3 ? mm * ld(p3, i) + step : step;
        if (p3) st(p3, i, u);
        double decay = l2 ? 0.0 : wd * wi;
        st(wp, i, tfMomentum ? wi - (decay + u) : wi - lr * (decay + u));
      }
    });
  };
}

// GlobalNormScale(ls, maxNorm, g1, g2, ...) -> scale: min(1, maxNorm / (||g / ls|| + 1e-6)).
KernelFn globalNormKernel(CompileContext& c) {
  std::string what = c.node().describe();
  return [what](KernelContext& k) {
    double ls = optimizerScalar(k, 0), maxNorm = optimizerScalar(k, 1);
    double sq = 0;
    for (size_t i = 2; i < k.numInputs(); ++i) {
      const NDArray& g = k.input(i);
      dispatch<kFloats>(g.dtype(), what, [&](auto tag) {
        using T = typename decltype(tag)::type;
        for (int64_t j = 0; j < g.numel(); ++j) {
          double v = ld(g.data<T>(), j) / ls;
          sq += v * v;
        }
      });
    }
    double scale = std::min(1.0, maxNorm / (std::sqrt(sq) + 1e-6));
    k.setOutput(0, NDArray::scalar<float>(DataType::Float, static_cast<float>(scale)));
  };
}

}  // namespace

GRAFT_REGISTER_OPS(optimizer_ops) {
  r.add("SGDUpdate", kGraftDomain).setReference(sgdKernel<false>).sideEffects().setInfer(noOutputs);
  r.add("SGDOuterUpdate", kGraftDomain).setReference(sgdKernel<true>).sideEffects().setInfer(noOutputs);
  r.add("AdamUpdate", kGraftDomain).setReference(adamKernel).sideEffects().setInfer(noOutputs);
  r.add("AdaptiveUpdate", kGraftDomain).setReference(adaptiveKernel).sideEffects().setInfer(noOutputs);
  r.add("GlobalNormScale", kGraftDomain)
      .setReference(globalNormKernel)
      .setInfer([](const ir::Node&, const std::vector<ir::ValueType>&, const std::vector<const NDArray*>&) {
        return std::vector<ir::ValueType>{ir::ValueType::tensor(TensorInfo(DataType::Float, Shape{}))};
      });
}

}  // namespace graft::ops
