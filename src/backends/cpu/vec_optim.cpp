// Vectorised training kernels: the in-place optimizer updates (SGDUpdate, AdamUpdate,
// AdaptiveUpdate, as in ops/optimizer_ops.cpp) and the gradient helpers UnbroadcastTo,
// ZerosLike and Accumulate. Updates compute in double per element with the reference's
// formulas, split by position over the threads (so results do not depend on the thread count);
// Lamb's norms fold fixed blocks in order.
#include <algorithm>
#include <cmath>
#include <cstring>

#include "backends/cpu/cpu_kernels.hpp"
#include "backends/cpu/vec_common.hpp"
#include "backends/cpu/vec_reduce.hpp"
#include "ops/optimizer_util.hpp"
#include "ops/registry.hpp"
#include "ops/shape_util.hpp"

namespace graft::backends::cpu {
namespace {

using ops::checkLikeWeight;
using ops::optimizerScalar;

constexpr int64_t kUpdateGrain = 16384;

// ---- SGD -------------------------------------------------------------------------------------

struct SgdParams {
  double lr, wd, mm, dm, vs, ls;
  double rls = 0;  ///< 1 / ls, exact when ls is a power of two (loss scales usually are; 1 by default)
};

// g / ls as the reference computes it: a multiplication by the reciprocal where that is exact
// (ls a power of two), which spares the loop a division per element (a divider-bound loop
// otherwise, 3-4 times slower than the memory traffic of the update).
bool exactReciprocal(double ls) {
  int e = 0;
  return std::isfinite(ls) && ls != 0 && std::fabs(std::frexp(ls, &e)) == 0.5 && std::abs(e) < 1000;
}

template <bool Reciprocal>
inline double unscaled(double g, const SgdParams& p) {
  if constexpr (Reciprocal)
    return g * p.rls;
  else
    return g / p.ls;
}

// Element i's gradient: g[i], or with Outer the product a * g[i] in T (SGDOuterUpdate's row of
// a (x) b, rounded as the Gemm it replaces rounds it).
template <bool Outer, class T>
inline double gradientAt(const T* g, T a, int64_t i) {
  if constexpr (Outer)
    return static_cast<double>(static_cast<T>(a * g[i]));
  else
    return static_cast<double>(g[i]);
}

template <bool Reciprocal, bool Outer, class T>
GRAFT_VEC_LOOP void sgdPlain(T* w, const T* g, T a, int64_t n, SgdParams p) {
  const double k = p.lr * (1 - p.dm);
  for (int64_t i = 0; i < n; ++i) {
    double wi = static_cast<double>(w[i]), gi = gradientAt<Outer>(g, a, i);
    w[i] = static_cast<T>(wi - k * (unscaled<Reciprocal>(gi, p) + p.wd * wi));
  }
}

template <bool Reciprocal, bool Outer, class T>
GRAFT_VEC_LOOP void sgdMomentum(T* w, const T* g, T a, T* v, int64_t n, SgdParams p, bool nesterov) {
  const double step = p.lr / p.vs;
  for (int64_t i = 0; i < n; ++i) {
    double wi = static_cast<double>(w[i]), gi = gradientAt<Outer>(g, a, i);
    double si = unscaled<Reciprocal>(gi, p) + p.wd * wi;
    double vi = static_cast<double>(v[i]) * p.mm + (1 - p.dm) * p.vs * si;
    v[i] = static_cast<T>(vi);
    w[i] = static_cast<T>(nesterov ? wi - step * (p.vs * si + p.mm * vi) : wi - step * vi);
  }
}

// n elements of w (and v) from their gradient g (Outer: from a * g[i]), in the variant for the
// loss scale's reciprocal and momentum.
template <bool Outer, class T>
void sgdRun(T* w, const T* g, T a, T* v, int64_t n, const SgdParams& p, bool reciprocal, bool nesterov) {
  if (v && reciprocal)
    GRAFT_VEC_RUN(sgdMomentum<true, Outer>(w, g, a, v, n, p, nesterov));
  else if (v)
    GRAFT_VEC_RUN(sgdMomentum<false, Outer>(w, g, a, v, n, p, nesterov));
  else if (reciprocal)
    GRAFT_VEC_RUN(sgdPlain<true, Outer>(w, g, a, n, p));
  else
    GRAFT_VEC_RUN(sgdPlain<false, Outer>(w, g, a, n, p));
}

// SGDUpdate(w, g, lr, wd, mm, dm, vs, ls [, v]); Outer: SGDOuterUpdate(w, a, b, lr, ...), the
// gradient a (x) b formed row by row (ops/optimizer_ops.cpp).
template <bool Outer>
ops::KernelFn sgdKernel(ops::CompileContext& c) {
  bool nesterov = c.node().attrInt("nesterov", 0) != 0;
  std::string what = c.node().describe();
  return [=](ops::KernelContext& k) {
    NDArray w = k.input(0);
    const NDArray& g = k.input(1);
    const size_t h = Outer ? 3 : 2;  // the first hyper-parameter
    if constexpr (Outer)
      ops::checkOuterFactors(w, g, k.input(2), what);
    else
      checkLikeWeight(w, g, what, "the gradient");
    SgdParams p{optimizerScalar(k, h),     optimizerScalar(k, h + 1), optimizerScalar(k, h + 2),
                optimizerScalar(k, h + 3), optimizerScalar(k, h + 4), optimizerScalar(k, h + 5)};
    const bool reciprocal = exactReciprocal(p.ls);
    p.rls = 1.0 / p.ls;
    bool momentum = k.hasInput(h + 6);
    NDArray v = momentum ? k.input(h + 6) : NDArray();
    if (momentum) checkLikeWeight(w, v, what, "the velocity");
    ops::dispatch<ops::kFloats>(w.dtype(), what, [&](auto tag) {
      using T = typename decltype(tag)::type;
      if constexpr (std::is_same_v<T, float> || std::is_same_v<T, double>) {
        T* wp = w.data<T>();
        const T* gp = g.data<T>();
        T* vp = momentum ? v.data<T>() : nullptr;
        if constexpr (Outer) {
          // Rows of w: row i is w[i, :] -= ... of a[i] * b.
          const T* bp = k.input(2).data<T>();
          const int64_t I = w.dim(0), J = w.dim(1);
          parallelRanges(k.pool(), I, std::max<int64_t>(1, kUpdateGrain / std::max<int64_t>(1, J)),
                         [&](int64_t r0, int64_t r1) {
                           for (int64_t i = r0; i < r1; ++i)
                             sgdRun<true>(wp + i * J, bp, gp[i], vp ? vp + i * J : nullptr, J, p, reciprocal, nesterov);
                         });
        } else {
          parallelRanges(k.pool(), w.numel(), kUpdateGrain, [&](int64_t b, int64_t e) {
            sgdRun<false>(wp + b, gp + b, T(0), vp ? vp + b : nullptr, e - b, p, reciprocal, nesterov);
          });
        }
      } else {
        GRAFT_THROW("{}: unsupported data type {}", what, dtypeName(w.dtype()));
      }
    });
  };
}

// ---- Adam family -----------------------------------------------------------------------------

struct AdamParams {
  double lr, wd, b1, b2, eps, ls, c1, c2;
  bool l2, adamax;
};

// Updates m and v and returns the step direction x of one element.
template <class T>
inline double adamDirection(const T* w, const T* g, T* m, T* v, int64_t i, const AdamParams& p) {
  double wi = static_cast<double>(w[i]);
  double s = static_cast<double>(g[i]) / p.ls;
  if (p.l2) s += p.wd * wi;
  double mi = p.b1 * static_cast<double>(m[i]) + (1 - p.b1) * s;
  double vprev = static_cast<double>(v[i]);
  double vi = p.adamax ? std::max(p.b2 * vprev, std::fabs(s)) : p.b2 * vprev + (1 - p.b2) * s * s;
  m[i] = static_cast<T>(mi);
  v[i] = static_cast<T>(vi);
  double xi = (mi / p.c1) / (std::sqrt(vi / p.c2) + p.eps);
  if (!p.l2) xi += p.wd * wi;
  return xi;
}

template <class T>
GRAFT_VEC_LOOP void adamRange(T* w, const T* g, T* m, T* v, int64_t n, AdamParams p) {
  for (int64_t i = 0; i < n; ++i) {
    double xi = adamDirection(w, g, m, v, i, p);
    w[i] = static_cast<T>(static_cast<double>(w[i]) - p.lr * xi);
  }
}

ops::KernelFn adamKernel(ops::CompileContext& c) {
  int mode = static_cast<int>(c.node().attrInt("mode", 0));
  bool l2 = c.node().attrInt("decay_mode", 0) == 1;
  std::string what = c.node().describe();
  return [=](ops::KernelContext& k) {
    NDArray w = k.input(0), m = k.input(2), v = k.input(3);
    const NDArray& g = k.input(1);
    const ops::AdamStep s = ops::beginAdamStep(k, mode, what);
    const double lr = s.lr, mwn = s.mwn;
    const bool lamb = s.lamb;
    AdamParams p{s.lr, s.wd, s.b1, s.b2, s.eps, s.ls, s.c1, s.c2, l2, s.adamax};
    ops::dispatch<ops::kFloats>(w.dtype(), what, [&](auto tag) {
      using T = typename decltype(tag)::type;
      if constexpr (std::is_same_v<T, float> || std::is_same_v<T, double>) {
        T *wp = w.data<T>(), *mp = m.data<T>(), *vp = v.data<T>();
        const T* gp = g.data<T>();
        int64_t n = w.numel();
        if (!lamb) {
          parallelRanges(k.pool(), n, kUpdateGrain, [&](int64_t b, int64_t e) {
            GRAFT_VEC_RUN(adamRange(wp + b, gp + b, mp + b, vp + b, e - b, p));
          });
          return;
        }
        // Lamb scales the step by ||w|| / ||x||: directions first, norms over fixed blocks.
        constexpr int64_t kB = 8192;
        int64_t nb = (n + kB - 1) / kB;
        std::vector<double> x(static_cast<size_t>(n)), r1(static_cast<size_t>(nb)), r2(static_cast<size_t>(nb));
        parallelRanges(k.pool(), nb, 1, [&](int64_t b, int64_t e) {
          for (int64_t blk = b; blk < e; ++blk) {
            double s1 = 0, s2 = 0;
            for (int64_t i = blk * kB; i < std::min(n, (blk + 1) * kB); ++i) {
              double wi = static_cast<double>(wp[i]);
              x[i] = adamDirection(wp, gp, mp, vp, i, p);
              s1 += wi * wi;
              s2 += x[i] * x[i];
            }
            r1[blk] = s1;
            r2[blk] = s2;
          }
        });
        double n1 = 0, n2 = 0;
        for (int64_t blk = 0; blk < nb; ++blk) n1 += r1[blk], n2 += r2[blk];
        double phi = std::min(std::sqrt(n1), mwn);
        n2 = std::sqrt(n2);
        double ratio = (phi == 0.0 || n2 == 0.0) ? 1.0 : phi / n2;
        parallelRanges(k.pool(), n, kUpdateGrain, [&](int64_t b, int64_t e) {
          for (int64_t i = b; i < e; ++i) wp[i] = static_cast<T>(static_cast<double>(wp[i]) - ratio * lr * x[i]);
        });
      } else {
        GRAFT_THROW("{}: unsupported data type {}", what, dtypeName(w.dtype()));
      }
    });
  };
}

// ---- Adaptive (Adagrad, RMSProp, centered RMSProp, AdaDelta) -----------------------------------

struct AdaptiveParams {
  double lr, wd, a, mm, eps, ls;
  bool l2, tf, centered, adadelta, adagrad, rmsMode;
};

template <class T>
GRAFT_VEC_LOOP void adaptiveRange(T* w, const T* g, T* p1, T* p2, T* p3, int64_t n, AdaptiveParams q) {
  for (int64_t i = 0; i < n; ++i) {
    double wi = static_cast<double>(w[i]);
    double s = static_cast<double>(g[i]) / q.ls;
    if (q.l2) s += q.wd * wi;
    double a1 = q.adagrad ? static_cast<double>(p1[i]) + s * s : q.a * static_cast<double>(p1[i]) + (1 - q.a) * s * s;
    p1[i] = static_cast<T>(a1);
    double x;
    if (q.adadelta) {
      double a2 = static_cast<double>(p2[i]);
      x = s * std::sqrt(a2 + q.eps) / std::sqrt(a1 + q.eps);
      p2[i] = static_cast<T>(q.a * a2 + (1 - q.a) * x * x);
    } else if (q.centered) {
      double a2 = q.a * static_cast<double>(p2[i]) + (1 - q.a) * s;
      p2[i] = static_cast<T>(a2);
      x = q.tf ? s / std::sqrt(a1 - a2 * a2 + q.eps) : s / (std::sqrt(a1 - a2 * a2) + q.eps);
    } else {
      x = (q.tf && !q.adagrad) ? s / std::sqrt(a1 + q.eps) : s / (std::sqrt(a1) + q.eps);
    }
    bool tfMomentum = q.tf && q.mm > 0 && (q.rmsMode || q.centered);
    double step = tfMomentum ? q.lr * x : x;
    double u = p3 ? q.mm * static_cast<double>(p3[i]) + step : step;
    if (p3) p3[i] = static_cast<T>(u);
    double decay = q.l2 ? 0.0 : q.wd * wi;
    w[i] = static_cast<T>(tfMomentum ? wi - (decay + u) : wi - q.lr * (decay + u));
  }
}

ops::KernelFn adaptiveKernel(ops::CompileContext& c) {
  int mode = static_cast<int>(c.node().attrInt("mode", 1));
  bool l2 = c.node().attrInt("decay_mode", 0) == 1;
  bool tf = c.node().attrInt("tf_variant", 0) != 0;
  std::string what = c.node().describe();
  return [=](ops::KernelContext& k) {
    NDArray w = k.input(0), v1 = k.input(2);
    const NDArray& g = k.input(1);
    NDArray v2 = k.hasInput(3) ? k.input(3) : NDArray();
    NDArray v3 = k.hasInput(4) ? k.input(4) : NDArray();
    checkLikeWeight(w, g, what, "the gradient");
    checkLikeWeight(w, v1, what, "accumulator 1");
    if (v2.valid()) checkLikeWeight(w, v2, what, "accumulator 2");
    if (v3.valid()) checkLikeWeight(w, v3, what, "accumulator 3");
    AdaptiveParams q{optimizerScalar(k, 5),
                     optimizerScalar(k, 6),
                     optimizerScalar(k, 7),
                     optimizerScalar(k, 8),
                     optimizerScalar(k, 9),
                     optimizerScalar(k, 10),
                     l2,
                     tf,
                     mode == 2,
                     mode == 3,
                     mode == 0,
                     mode == 1};
    GRAFT_ASSERT(!(q.centered || q.adadelta) || v2.valid(), "{}: mode needs a second accumulator", what);
    ops::dispatch<ops::kFloats>(w.dtype(), what, [&](auto tag) {
      using T = typename decltype(tag)::type;
      if constexpr (std::is_same_v<T, float> || std::is_same_v<T, double>) {
        T *wp = w.data<T>(), *a1 = v1.data<T>();
        T* a2 = v2.valid() ? v2.data<T>() : nullptr;
        T* a3 = v3.valid() ? v3.data<T>() : nullptr;
        const T* gp = g.data<T>();
        parallelRanges(k.pool(), w.numel(), kUpdateGrain, [&](int64_t b, int64_t e) {
          GRAFT_VEC_RUN(adaptiveRange(wp + b, gp + b, a1 + b, a2 ? a2 + b : nullptr, a3 ? a3 + b : nullptr, e - b, q));
        });
      } else {
        GRAFT_THROW("{}: unsupported data type {}", what, dtypeName(w.dtype()));
      }
    });
  };
}

// ---- gradient helpers ------------------------------------------------------------------------

template <class T>
GRAFT_VEC_LOOP void addInto(T* a, const T* b, int64_t n) {
  for (int64_t i = 0; i < n; ++i) a[i] = a[i] + b[i];
}

ops::KernelFn accumulateKernel(ops::CompileContext& c) {
  std::string what = c.node().describe();
  const bool overwrite = c.node().attrInt("overwrite", 0) != 0;  // acc = g (ops/graft_internal.cpp)
  return [what, overwrite](ops::KernelContext& k) {
    NDArray acc = k.input(0);
    const NDArray& g = k.input(1);
    GRAFT_CHECK(acc.shape() == g.shape() && acc.dtype() == g.dtype(), "{}: accumulator {} {} vs gradient {} {}", what,
                dtypeName(acc.dtype()), shapeToString(acc.shape()), dtypeName(g.dtype()), shapeToString(g.shape()));
    ops::dispatch<ops::kFloats>(acc.dtype(), what, [&](auto tag) {
      using T = typename decltype(tag)::type;
      if constexpr (std::is_same_v<T, float> || std::is_same_v<T, double>) {
        T* a = acc.data<T>();
        const T* b = g.data<T>();
        if (overwrite && a == b) return;  // the gradient was computed in place (plan/executable.cpp)
        parallelRanges(k.pool(), acc.numel(), kGrainCheap, [&](int64_t s, int64_t e) {
          if (overwrite)
            std::memcpy(a + s, b + s, static_cast<size_t>(e - s) * sizeof(T));
          else
            GRAFT_VEC_RUN(addInto(a + s, b + s, e - s));
        });
      } else {
        GRAFT_THROW("{}: unsupported data type {}", what, dtypeName(acc.dtype()));
      }
    });
  };
}

ops::KernelFn zerosLikeKernel(ops::CompileContext&) {
  return [](ops::KernelContext& k) {
    const NDArray& x = k.input(0);
    NDArray& y = k.allocOutputUninit(0, x.dtype(), x.shape());
    auto* p = static_cast<unsigned char*>(y.rawData());
    size_t bytes = y.nbytes();
    parallelRanges(k.pool(), static_cast<int64_t>(bytes), int64_t{1} << 20,
                   [&](int64_t b, int64_t e) { std::memset(p + b, 0, static_cast<size_t>(e - b)); });
  };
}

// Sums the R rows of the row-major [R, C] array `g` into `y` ([C]), each column in row order
// in double (as reduceAxes does), so the result does not depend on how columns are split.
template <class T>
GRAFT_VEC_LOOP void sumRowsInto(const T* g, int64_t R, int64_t C, int64_t c0, int64_t c1, T* y) {
  constexpr int64_t kW = 256;
  double acc[kW];
  for (int64_t b = c0; b < c1; b += kW) {
    int64_t w = std::min(kW, c1 - b);
    for (int64_t j = 0; j < w; ++j) acc[j] = 0;
    for (int64_t r = 0; r < R; ++r) {
      const T* row = g + r * C + b;
      for (int64_t j = 0; j < w; ++j) acc[j] += static_cast<double>(row[j]);
    }
    for (int64_t j = 0; j < w; ++j) y[b + j] = static_cast<T>(acc[j]);
  }
}

// UnbroadcastTo(g, like): the sum of g over the axes along which `like` was broadcast. Two
// common cases skip the general engine: only unit axes differ (a copy), and the gradient of a
// bias ([..., C] summed over every leading axis into [C] or [1, ..., C]).
ops::KernelFn unbroadcastKernel(ops::CompileContext& c) {
  std::string what = c.node().describe();
  return [what](ops::KernelContext& k) {
    const NDArray& g = k.input(0);
    const Shape& target = k.input(1).shape();
    GRAFT_CHECK(ops::broadcastShapes(target, g.shape(), what) == g.shape(), "{}: {} does not broadcast to {}", what,
                shapeToString(target), shapeToString(g.shape()));
    std::vector<bool> reduced(g.shape().size(), false);
    size_t lead = g.shape().size() - target.size();
    for (size_t d = 0; d < g.shape().size(); ++d) reduced[d] = d < lead || (target[d - lead] == 1 && g.shape()[d] != 1);
    // Axes of g without its unit axes, adjacent ones of the same kind merged.
    std::vector<int64_t> dims;
    std::vector<bool> red;
    for (size_t d = 0; d < g.shape().size(); ++d) {
      if (g.shape()[d] == 1) continue;
      if (!dims.empty() && red.back() == reduced[d])
        dims.back() *= g.shape()[d];
      else
        dims.push_back(g.shape()[d]), red.push_back(reduced[d]);
    }
    ops::dispatch<ops::kFloats>(g.dtype(), what, [&](auto tag) {
      using T = typename decltype(tag)::type;
      if constexpr (std::is_same_v<T, float> || std::is_same_v<T, double>) {
        NDArray& y = k.allocOutputUninit(0, g.dtype(), target);
        if (g.numel() == y.numel()) {
          if (g.nbytes()) std::memcpy(y.rawData(), g.rawData(), g.nbytes());
          return;
        }
        if (dims.size() == 2 && red[0] && !red[1]) {
          int64_t R = dims[0], C = dims[1];
          const T* gp = g.data<T>();
          T* yp = y.data<T>();
          // Threads only for large gradients: a bias gradient is typically a few hundred
          // thousand elements, read once, cheaper than waking a worker.
          parallelRanges(k.pool(), C, std::max<int64_t>(256, (int64_t{1} << 19) / std::max<int64_t>(1, R)),
                         [&](int64_t b, int64_t e) { GRAFT_VEC_RUN(sumRowsInto(gp, R, C, b, e, yp)); });
          return;
        }
        std::vector<double> acc(static_cast<size_t>(y.numel()));
        reduceAxes<T>(k.pool(), g.data<T>(), g.shape(), reduced, FoldKind::Sum, acc.data());
        T* yp = y.data<T>();
        for (int64_t i = 0; i < y.numel(); ++i) yp[i] = static_cast<T>(acc[i]);
      } else {
        GRAFT_THROW("{}: unsupported data type {}", what, dtypeName(g.dtype()));
      }
    });
  };
}

bool floatOrDouble(const ir::Tensor* t) {
  return typeIn(t, (1u << static_cast<int>(DataType::Float)) | (1u << static_cast<int>(DataType::Double)));
}

}  // namespace

GRAFT_REGISTER_CPU_KERNELS(vec_optim) {
  const std::string d = ops::kGraftDomain;
  auto weightTyped = [](const ir::Node& n) { return floatOrDouble(n.input(0)); };
  r.add({d, "SGDUpdate", "vec_sgd", weightTyped, sgdKernel<false>});
  r.add({d, "SGDOuterUpdate", "vec_sgd_outer", weightTyped, sgdKernel<true>});
  r.add({d, "AdamUpdate", "vec_adam", weightTyped, adamKernel});
  r.add({d, "AdaptiveUpdate", "vec_adaptive", weightTyped, adaptiveKernel});
  r.add({d, "Accumulate", "vec_accumulate", weightTyped, accumulateKernel});
  r.add({d, "UnbroadcastTo", "vec_unbroadcast", weightTyped, unbroadcastKernel});
  r.add(
      {d, "ZerosLike", "vec_zeros", [](const ir::Node& n) { return typeIn(n.input(0), kVecTypes); }, zerosLikeKernel});
}

}  // namespace graft::backends::cpu
