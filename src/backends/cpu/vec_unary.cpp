// Vectorised unary elementwise kernels: every unary row of the elementwise table
// (ops/elementwise_table.hpp: math functions, activations, Not), and Round, Celu, Clip, IsNaN and
// IsInf. Each op is a functor over the compute type; float uses vecmath's vectorisable
// functions, double the std:: ones. Half types are converted in blocks.
#include <cmath>
#include <limits>

#include "backends/cpu/cpu_kernels.hpp"
#include "backends/cpu/fused_activation.hpp"
#include "backends/cpu/vec_common.hpp"
#include "backends/cpu/vec_math.hpp"
#include "ops/registry.hpp"

namespace graft::backends::cpu {
namespace {

// ---- functors --------------------------------------------------------------------------------
// The rows of the elementwise table come as ops::ew::Unary<Op, VecMath>; the ops below are not in
// the table.

template <class C>
C vexp(C x) {
  return VecMath::exp(x);
}

struct CeluF {
  float alpha;
  template <class C>
  C operator()(C x) const {
    C a = static_cast<C>(alpha);
    C e = vexp(x / a);
    return std::max(C(0), x) + std::min(C(0), a * (e - C(1)));
  }
};
struct RoundF {
  template <class C>
  C operator()(C x) const {
    return std::nearbyint(x);
  }
};
struct ClipF {
  double lo, hi;
  template <class C>
  C operator()(C v) const {
    // numpy's clip: min(max(v, lo), hi), so hi wins when lo > hi; NaN stays NaN.
    C l = static_cast<C>(lo), h = static_cast<C>(hi);
    C t = v < l ? l : v;
    return t > h ? h : t;
  }
};

// ---- loops -----------------------------------------------------------------------------------

template <class F>
GRAFT_VEC_LOOP void mapFloat(const float* x, float* y, int64_t n, F f) {
  for (int64_t i = 0; i < n; ++i) y[i] = f(x[i]);
}

template <class T, class F>
void mapRange(const T* x, T* y, int64_t n, F f) {
  if constexpr (std::is_same_v<T, float>) {
    GRAFT_VEC_RUN(mapFloat(x, y, n, f));
  } else if constexpr (kIsHalfType<T>) {
    float buf[kBlock];
    for (int64_t b = 0; b < n; b += kBlock) {
      int64_t len = std::min(kBlock, n - b);
      toFloat(x + b, buf, len);
      GRAFT_VEC_RUN(mapFloat(buf, buf, len, f));
      fromFloat(buf, y + b, len);
    }
  } else {
    for (int64_t i = 0; i < n; ++i) y[i] = f(x[i]);
  }
}

// y = f(x) over a whole tensor of one of the types in Set.
template <uint32_t Set, class F>
void runUnary(ops::KernelContext& k, const std::string& what, F f, int64_t grain) {
  const NDArray& x = k.input(0);
  ops::dispatch<Set>(x.dtype(), what, [&](auto tag) {
    using T = typename decltype(tag)::type;
    NDArray& y = k.allocOutputUninit(0, x.dtype(), x.shape());
    const T* xp = x.data<T>();
    T* yp = y.data<T>();
    parallelRanges(k.pool(), x.numel(), grain, [&](int64_t b, int64_t e) { mapRange(xp + b, yp + b, e - b, f); });
  });
}

template <uint32_t Set, class F>
ops::KernelFactory unary(F f, int64_t grain) {
  return [f, grain](ops::CompileContext& c) -> ops::KernelFn {
    std::string what = c.node().describe();
    return [f, grain, what](ops::KernelContext& k) { runUnary<Set>(k, what, f, grain); };
  };
}

// Like unary(), with a functor built from the node's attributes.
template <uint32_t Set, class Make>
ops::KernelFactory unaryWith(Make make, int64_t grain) {
  return [make, grain](ops::CompileContext& c) -> ops::KernelFn {
    auto f = make(c.node());
    std::string what = c.node().describe();
    return [f, grain, what](ops::KernelContext& k) { runUnary<Set>(k, what, f, grain); };
  };
}

ops::KernelFn clipKernel(ops::CompileContext& c) {
  std::string what = c.node().describe();
  return [what](ops::KernelContext& k) {
    const NDArray& x = k.input(0);
    ops::dispatch<ops::kNumeric>(x.dtype(), what, [&](auto tag) {
      using T = typename decltype(tag)::type;
      using C = ops::ComputeType<T>;
      C lo = std::numeric_limits<C>::lowest(), hi = std::numeric_limits<C>::max();
      for (size_t i : {size_t{1}, size_t{2}}) {
        if (!k.hasInput(i)) continue;
        const NDArray& b = k.input(i);
        GRAFT_CHECK(b.numel() == 1 && b.dtype() == x.dtype(), "{}: {} must be a scalar of type {}, got {} {}", what,
                    i == 1 ? "min" : "max", dtypeName(x.dtype()), dtypeName(b.dtype()), shapeToString(b.shape()));
        (i == 1 ? lo : hi) = static_cast<C>(b.data<T>()[0]);
      }
      ClipF f{static_cast<double>(lo), static_cast<double>(hi)};
      NDArray& y = k.allocOutputUninit(0, x.dtype(), x.shape());
      const T* xp = x.data<T>();
      T* yp = y.data<T>();
      if constexpr (std::is_integral_v<C> && sizeof(C) == 8) {
        // 64-bit bounds do not survive a round trip through double.
        for (int64_t i = 0; i < x.numel(); ++i) {
          C t = xp[i] < lo ? lo : xp[i];
          yp[i] = t > hi ? hi : t;
        }
      } else {
        parallelRanges(k.pool(), x.numel(), kGrainCheap, [&](int64_t b, int64_t e) { mapRange(xp + b, yp + b, e - b, f); });
      }
    });
  };
}

// IsNaN / IsInf: float types to BOOL.
template <class Pred>
ops::KernelFactory classify(Pred pred) {
  return [pred](ops::CompileContext& c) -> ops::KernelFn {
    bool pos = c.node().attrInt("detect_positive", 1) != 0;
    bool neg = c.node().attrInt("detect_negative", 1) != 0;
    std::string what = c.node().describe();
    return [=](ops::KernelContext& k) {
      const NDArray& x = k.input(0);
      NDArray& y = k.allocOutputUninit(0, DataType::Bool, x.shape());
      bool* yp = y.data<bool>();
      ops::dispatch<ops::kFloats>(x.dtype(), what, [&](auto tag) {
        using T = typename decltype(tag)::type;
        const T* xp = x.data<T>();
        parallelRanges(k.pool(), x.numel(), kGrainCheap, [&](int64_t b, int64_t e) {
          if constexpr (kIsHalfType<T>) {
            float buf[kBlock];
            for (int64_t s = b; s < e; s += kBlock) {
              int64_t len = std::min(kBlock, e - s);
              toFloat(xp + s, buf, len);
              for (int64_t i = 0; i < len; ++i) yp[s + i] = pred(buf[i], pos, neg);
            }
          } else {
            for (int64_t i = b; i < e; ++i) yp[i] = pred(xp[i], pos, neg);
          }
        });
      });
    };
  };
}

bool floatInput(const ir::Node& n) { return typeIn(n.input(0), ops::kFloats); }
bool numericInput(const ir::Node& n) { return typeIn(n.input(0), ops::kNumeric); }

// Registers row R's kernel when it is a unary op (Set: its element types).
template <ops::ew::Op R, uint32_t Set, class Add>
void addRow(Add& add, int64_t grain) {
  constexpr const ops::ew::Row& kRow = ops::ew::row(R);
  if constexpr (kRow.arity == 1 && kRow.type[0] != 0) {
    auto pred = [](const ir::Node& n) { return typeIn(n.input(0), Set); };
    add(kRow.type, kRow.domain, pred,
        unaryWith<Set>(
            [](const ir::Node& n) {
              ops::ew::Row::Params p = ops::ew::params(kRow, n);
              return ops::ew::Unary<R, VecMath>{p.p0, p.p1};
            },
            grain));
  }
}

}  // namespace

namespace {

template <class F>
ActivationFn inPlace(F f, int64_t grain) {
  return [f, grain](support::ThreadPool& pool, float* y, int64_t count) {
    parallelRanges(pool, count, grain, [&](int64_t b, int64_t e) { GRAFT_VEC_RUN(mapFloat(y + b, y + b, e - b, f)); });
  };
}

// Row R's formula as a fused activation (the rows that fuse: unary, with a post-op).
template <ops::ew::Op R>
ActivationFn rowActivation(float alpha, float beta) {
  constexpr const ops::ew::Row& kRow = ops::ew::row(R);
  if constexpr (kRow.arity == 1 && kRow.postOp())
    return inPlace(ops::ew::Unary<R, VecMath>{alpha, beta}, kRow.costly ? kGrainCostly : kGrainCheap);
  else
    return {};
}

}  // namespace

bool isPlainRelu(const ir::Node& n) {
  return n.attrString("activation", "") == "Relu" && n.attrString("activation_domain", "").empty();
}

ActivationFn fusedActivation(const ir::Node& n) {
  std::string act = n.attrString("activation", ""), dom = n.attrString("activation_domain", "");
  if (act.empty()) return {};
  float alpha = n.attrFloat("activation_alpha", 0.f), beta = n.attrFloat("activation_beta", 0.f);
  if (dom.empty() && act == "Clip") return inPlace(ClipF{alpha, beta}, kGrainCheap);
  const ops::ew::Row* row = ops::ew::find(dom, act);
  ActivationFn f;
  if (row) {
    static constexpr ActivationFn (*kMake[])(float, float) = {
#define GRAFT_EW_X(Id, ...) &rowActivation<ops::ew::Op::Id>,
        GRAFT_EW_ALL(GRAFT_EW_X)
#undef GRAFT_EW_X
    };
    f = kMake[static_cast<int>(row->op)](alpha, beta);
  }
  GRAFT_CHECK(f, "{}: unsupported activation '{}{}'", n.describe(), dom.empty() ? "" : dom + "::", act);
  return f;
}

GRAFT_REGISTER_CPU_KERNELS(vec_unary) {
  auto add = [&](const char* type, const std::string& domain, std::function<bool(const ir::Node&)> pred, ops::KernelFactory f) {
    r.add({domain, type, "vec_unary", std::move(pred), std::move(f)});
  };
  // Every unary row of the elementwise table, with the row's parameters from the node.
#define GRAFT_EW_X(Id, Type, Dom, Code, Ar, Pred, Zero, Ty, Cost, ...) \
  addRow<ops::ew::Op::Id, ops::k##Ty>(add, Cost ? kGrainCostly : kGrainCheap);
  GRAFT_EW_ALL(GRAFT_EW_X)
#undef GRAFT_EW_X
  constexpr auto kF = ops::kFloats;
  add("Round", "", floatInput, unary<kF>(RoundF{}, kGrainCheap));
  add("Celu", "", floatInput,
      unaryWith<kF>(
          [](const ir::Node& n) {
            float a = n.attrFloat("alpha", 1.0f);
            GRAFT_CHECK(a != 0.0f, "{}: alpha must not be 0", n.describe());
            return CeluF{a};
          },
          kGrainCostly));
  add("Clip", "", numericInput, clipKernel);
  add("IsNaN", "", floatInput, classify([](auto v, bool, bool) { return v != v; }));
  add("IsInf", "", floatInput, classify([](auto v, bool pos, bool neg) {
        using V = decltype(v);
        const V inf = std::numeric_limits<V>::infinity();
        return (v == inf && pos) || (v == -inf && neg);
      }));
}

}  // namespace graft::backends::cpu
