// Vectorised unary elementwise kernels: math functions, activations, Clip, IsNaN/IsInf, Not.
// Each op is a functor over the compute type; float uses vecmath's vectorisable functions,
// double the std:: ones. Half types are converted in blocks.
#include <cmath>
#include <limits>

#include "backends/cpu/cpu_kernels.hpp"
#include "backends/cpu/vec_common.hpp"
#include "backends/cpu/vec_math.hpp"
#include "ops/registry.hpp"

namespace graft::backends::cpu {
namespace {

namespace vm = vecmath;

// ---- functors --------------------------------------------------------------------------------

#define GRAFT_UNARY(Name, expr)                  \
  struct Name {                                  \
    template <class C>                           \
    C operator()(C x) const {                    \
      return expr;                               \
    }                                            \
  };

template <class C>
constexpr bool kF = std::is_same_v<C, float>;

GRAFT_UNARY(ExpF, kF<C> ? static_cast<C>(vm::exp(static_cast<float>(x))) : std::exp(x))
GRAFT_UNARY(LogF, kF<C> ? static_cast<C>(vm::log(static_cast<float>(x))) : std::log(x))
GRAFT_UNARY(TanhF, kF<C> ? static_cast<C>(vm::tanh(static_cast<float>(x))) : std::tanh(x))
GRAFT_UNARY(ErfF, kF<C> ? static_cast<C>(vm::erf(static_cast<float>(x))) : std::erf(x))
GRAFT_UNARY(SqrtF, std::sqrt(x))
GRAFT_UNARY(ReciprocalF, C(1) / x)
GRAFT_UNARY(FloorF, std::floor(x))
GRAFT_UNARY(CeilF, std::ceil(x))
GRAFT_UNARY(RoundF, std::nearbyint(x))
GRAFT_UNARY(SinF, std::sin(x))
GRAFT_UNARY(CosF, std::cos(x))
GRAFT_UNARY(TanF, std::tan(x))
GRAFT_UNARY(AsinF, std::asin(x))
GRAFT_UNARY(AcosF, std::acos(x))
GRAFT_UNARY(AtanF, std::atan(x))
GRAFT_UNARY(SinhF, std::sinh(x))
GRAFT_UNARY(CoshF, std::cosh(x))
GRAFT_UNARY(AsinhF, std::asinh(x))
GRAFT_UNARY(AcoshF, std::acosh(x))
GRAFT_UNARY(AtanhF, std::atanh(x))
GRAFT_UNARY(SoftsignF, x / (C(1) + std::abs(x)))
GRAFT_UNARY(HardSwishF, x * std::max(C(0), std::min(C(1), x / C(6) + C(0.5))))
GRAFT_UNARY(ReluF, x > C(0) ? x : C(0))
GRAFT_UNARY(NegF, static_cast<C>(-x))
GRAFT_UNARY(NotF, !x)

struct SigmoidF {
  template <class C>
  C operator()(C x) const {
    if constexpr (kF<C>) return vm::sigmoid(x);
    else return x >= C(0) ? C(1) / (C(1) + std::exp(-x)) : std::exp(x) / (C(1) + std::exp(x));
  }
};
struct SoftplusF {
  template <class C>
  C operator()(C x) const {
    if constexpr (kF<C>) return vm::softplus(x);
    else return x > C(0) ? x + std::log1p(std::exp(-x)) : std::log1p(std::exp(x));
  }
};
struct GeluTanhF {
  template <class C>
  C operator()(C x) const {
    if constexpr (kF<C>) return vm::geluTanh(x);
    const C k = C(0.7978845608028654);
    return C(0.5) * x * (C(1) + std::tanh(k * (x + C(0.044715) * x * x * x)));
  }
};
struct GeluErfF {
  template <class C>
  C operator()(C x) const {
    if constexpr (kF<C>) return vm::geluErf(x);
    else return C(0.5) * x * (C(1) + std::erf(x * C(0.70710678118654752440)));
  }
};
struct AbsF {
  template <class C>
  C operator()(C x) const {
    if constexpr (std::is_unsigned_v<C>) return x;
    else return static_cast<C>(x < 0 ? -x : x);
  }
};
struct SignF {
  template <class C>
  C operator()(C x) const {
    return static_cast<C>(x > C(0) ? 1 : (x < C(0) ? -1 : 0));
  }
};
struct LeakyReluF {
  float alpha;
  template <class C>
  C operator()(C x) const {
    return x >= C(0) ? x : static_cast<C>(alpha) * x;
  }
};
struct ThresholdedReluF {
  float alpha;
  template <class C>
  C operator()(C x) const {
    return x > static_cast<C>(alpha) ? x : C(0);
  }
};
struct EluF {
  float alpha;
  template <class C>
  C operator()(C x) const {
    C e = ExpF{}(x);
    return x >= C(0) ? x : static_cast<C>(alpha) * (e - C(1));
  }
};
struct SeluF {
  float alpha, gamma;
  template <class C>
  C operator()(C x) const {
    C e = ExpF{}(x);
    return static_cast<C>(gamma) * (x > C(0) ? x : static_cast<C>(alpha) * (e - C(1)));
  }
};
struct CeluF {
  float alpha;
  template <class C>
  C operator()(C x) const {
    C a = static_cast<C>(alpha);
    C e = ExpF{}(x / a);
    return std::max(C(0), x) + std::min(C(0), a * (e - C(1)));
  }
};
struct HardSigmoidF {
  float alpha, beta;
  template <class C>
  C operator()(C x) const {
    return std::max(C(0), std::min(C(1), static_cast<C>(alpha) * x + static_cast<C>(beta)));
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
GRAFT_VEC_CLONES void mapFloat(const float* x, float* y, int64_t n, F f) {
  for (int64_t i = 0; i < n; ++i) y[i] = f(x[i]);
}

template <class T, class F>
void mapRange(const T* x, T* y, int64_t n, F f) {
  if constexpr (std::is_same_v<T, float>) {
    mapFloat(x, y, n, f);
  } else if constexpr (kIsHalfType<T>) {
    float buf[kBlock];
    for (int64_t b = 0; b < n; b += kBlock) {
      int64_t len = std::min(kBlock, n - b);
      toFloat(x + b, buf, len);
      mapFloat(buf, buf, len, f);
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
bool signedInput(const ir::Node& n) { return typeIn(n.input(0), ops::kSignedNumeric); }
bool numericInput(const ir::Node& n) { return typeIn(n.input(0), ops::kNumeric); }
bool boolInput(const ir::Node& n) { return typeIn(n.input(0), ops::kBool); }

}  // namespace

GRAFT_REGISTER_CPU_KERNELS(vec_unary) {
  auto add = [&](const char* type, const std::string& domain, std::function<bool(const ir::Node&)> pred, ops::KernelFactory f) {
    r.add({domain, type, "vec_unary", std::move(pred), std::move(f)});
  };
  constexpr auto F = ops::kFloats;
  add("Exp", "", floatInput, unary<F>(ExpF{}, kGrainCostly));
  add("Log", "", floatInput, unary<F>(LogF{}, kGrainCostly));
  add("Tanh", "", floatInput, unary<F>(TanhF{}, kGrainCostly));
  add("Erf", "", floatInput, unary<F>(ErfF{}, kGrainCostly));
  add("Sigmoid", "", floatInput, unary<F>(SigmoidF{}, kGrainCostly));
  add("Softplus", "", floatInput, unary<F>(SoftplusF{}, kGrainCostly));
  add("Gelu", ops::kGraphcoreDomain, floatInput, unary<F>(GeluTanhF{}, kGrainCostly));
  add("GeluErf", ops::kGraftDomain, floatInput, unary<F>(GeluErfF{}, kGrainCostly));
  add("Sqrt", "", floatInput, unary<F>(SqrtF{}, kGrainCheap));
  add("Reciprocal", "", floatInput, unary<F>(ReciprocalF{}, kGrainCheap));
  add("Floor", "", floatInput, unary<F>(FloorF{}, kGrainCheap));
  add("Ceil", "", floatInput, unary<F>(CeilF{}, kGrainCheap));
  add("Round", "", floatInput, unary<F>(RoundF{}, kGrainCheap));
  add("Softsign", "", floatInput, unary<F>(SoftsignF{}, kGrainCheap));
  add("HardSwish", "", floatInput, unary<F>(HardSwishF{}, kGrainCheap));
  add("Sin", "", floatInput, unary<F>(SinF{}, kGrainCostly));
  add("Cos", "", floatInput, unary<F>(CosF{}, kGrainCostly));
  add("Tan", "", floatInput, unary<F>(TanF{}, kGrainCostly));
  add("Asin", "", floatInput, unary<F>(AsinF{}, kGrainCostly));
  add("Acos", "", floatInput, unary<F>(AcosF{}, kGrainCostly));
  add("Atan", "", floatInput, unary<F>(AtanF{}, kGrainCostly));
  add("Sinh", "", floatInput, unary<F>(SinhF{}, kGrainCostly));
  add("Cosh", "", floatInput, unary<F>(CoshF{}, kGrainCostly));
  add("Asinh", "", floatInput, unary<F>(AsinhF{}, kGrainCostly));
  add("Acosh", "", floatInput, unary<F>(AcoshF{}, kGrainCostly));
  add("Atanh", "", floatInput, unary<F>(AtanhF{}, kGrainCostly));
  add("Relu", "", signedInput, unary<ops::kSignedNumeric>(ReluF{}, kGrainCheap));
  add("Neg", "", signedInput, unary<ops::kSignedNumeric>(NegF{}, kGrainCheap));
  add("Abs", "", numericInput, unary<ops::kNumeric>(AbsF{}, kGrainCheap));
  add("Sign", "", numericInput, unary<ops::kNumeric>(SignF{}, kGrainCheap));
  add("Not", "", boolInput, unary<ops::kBool>(NotF{}, kGrainCheap));
  add("LeakyRelu", "", floatInput, unaryWith<F>([](const ir::Node& n) { return LeakyReluF{n.attrFloat("alpha", 0.01f)}; }, kGrainCheap));
  add("ThresholdedRelu", "", floatInput,
      unaryWith<F>([](const ir::Node& n) { return ThresholdedReluF{n.attrFloat("alpha", 1.0f)}; }, kGrainCheap));
  add("Elu", "", floatInput, unaryWith<F>([](const ir::Node& n) { return EluF{n.attrFloat("alpha", 1.0f)}; }, kGrainCostly));
  add("Selu", "", floatInput, unaryWith<F>([](const ir::Node& n) {
        return SeluF{n.attrFloat("alpha", 1.67326319217681884765625f), n.attrFloat("gamma", 1.05070102214813232421875f)};
      }, kGrainCostly));
  add("Celu", "", floatInput, unaryWith<F>([](const ir::Node& n) {
        float a = n.attrFloat("alpha", 1.0f);
        GRAFT_CHECK(a != 0.0f, "{}: alpha must not be 0", n.describe());
        return CeluF{a};
      }, kGrainCostly));
  add("HardSigmoid", "", floatInput, unaryWith<F>([](const ir::Node& n) {
        return HardSigmoidF{n.attrFloat("alpha", 0.2f), n.attrFloat("beta", 0.5f)};
      }, kGrainCheap));
  add("Clip", "", numericInput, clipKernel);
  add("IsNaN", "", floatInput, classify([](auto v, bool, bool) { return v != v; }));
  add("IsInf", "", floatInput, classify([](auto v, bool pos, bool neg) {
        using V = decltype(v);
        const V inf = std::numeric_limits<V>::infinity();
        return (v == inf && pos) || (v == -inf && neg);
      }));
}

}  // namespace graft::backends::cpu
