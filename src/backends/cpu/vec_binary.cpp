// Vectorised binary elementwise kernels with broadcasting (arithmetic, comparisons, logic),
// the variadic Sum/Mean/Max/Min, PRelu, Pow, Where, Cast and CastLike. Broadcasting merges
// adjacent dimensions (vec_common.hpp), so that same-shape, scalar, row and column patterns all
// run as inner loops whose operands are contiguous (stride 1) or scalars (stride 0).
// Integer arithmetic wraps around instead of overflowing (no undefined behaviour).
#include <array>
#include <cmath>
#include <limits>
#include <utility>

#include "backends/cpu/cpu_kernels.hpp"
#include "backends/cpu/vec_common.hpp"
#include "ops/cast_util.hpp"
#include "ops/registry.hpp"
#include "ops/shape_util.hpp"

namespace graft::backends::cpu {
namespace {

template <class C>
using Wide = std::conditional_t<(sizeof(C) < 4), uint32_t, std::make_unsigned_t<C>>;

struct AddF {
  template <class C>
  C operator()(C a, C b) const {
    if constexpr (std::is_integral_v<C> && !std::is_same_v<C, bool>) return static_cast<C>(static_cast<Wide<C>>(a) + static_cast<Wide<C>>(b));
    else return a + b;
  }
};
struct SubF {
  template <class C>
  C operator()(C a, C b) const {
    if constexpr (std::is_integral_v<C>) return static_cast<C>(static_cast<Wide<C>>(a) - static_cast<Wide<C>>(b));
    else return a - b;
  }
};
struct MulF {
  template <class C>
  C operator()(C a, C b) const {
    if constexpr (std::is_integral_v<C>) return static_cast<C>(static_cast<Wide<C>>(a) * static_cast<Wide<C>>(b));
    else return a * b;
  }
};
struct DivF {
  template <class C>
  C operator()(C a, C b) const {
    if constexpr (std::is_integral_v<C>) {
      if (b == 0) return 0;  // as the reference: 0 instead of a trap
      if constexpr (std::is_signed_v<C>)
        if (b == -1) return static_cast<C>(Wide<C>(0) - static_cast<Wide<C>>(a));
      return static_cast<C>(a / b);
    } else {
      return a / b;
    }
  }
};
struct MaxF {
  template <class C>
  C operator()(C a, C b) const {
    if constexpr (std::is_floating_point_v<C>)
      if (a != a || b != b) return std::numeric_limits<C>::quiet_NaN();
    return a > b ? a : b;
  }
};
struct MinF {
  template <class C>
  C operator()(C a, C b) const {
    if constexpr (std::is_floating_point_v<C>)
      if (a != a || b != b) return std::numeric_limits<C>::quiet_NaN();
    return a < b ? a : b;
  }
};
struct PReluF {
  template <class C>
  C operator()(C x, C s) const {
    return x < C(0) ? MulF{}(s, x) : x;
  }
};
struct SquareF {  // Pow with the exponent 2: exact in double, so it rounds as the reference does
  template <class C>
  C operator()(C x, C) const {
    return x * x;
  }
};
struct PowF {
  template <class C>
  C operator()(C a, C b) const {
    return static_cast<C>(std::pow(static_cast<double>(a), static_cast<double>(b)));
  }
};
#define GRAFT_COMPARE(Name, op)           \
  struct Name {                           \
    template <class C>                    \
    bool operator()(C a, C b) const {     \
      return a op b;                      \
    }                                     \
  };
GRAFT_COMPARE(EqualF, ==)
GRAFT_COMPARE(LessF, <)
GRAFT_COMPARE(LessEqualF, <=)
GRAFT_COMPARE(GreaterF, >)
GRAFT_COMPARE(GreaterEqualF, >=)
GRAFT_COMPARE(AndF, &&)
GRAFT_COMPARE(OrF, ||)
GRAFT_COMPARE(XorF, !=)

// ---- loops -----------------------------------------------------------------------------------

template <int SA, int SB, class R, class F>
GRAFT_VEC_LOOP void zipFloat(const float* a, const float* b, R* o, int64_t n, F f) {
  for (int64_t i = 0; i < n; ++i) o[i] = f(a[i * SA], b[i * SB]);
}

template <int SA, int SB, class T, class R, class F>
void zipPlain(const T* a, const T* b, R* o, int64_t n, F f) {
  using C = ops::ComputeType<T>;
  for (int64_t i = 0; i < n; ++i) o[i] = static_cast<R>(f(static_cast<C>(a[i * SA]), static_cast<C>(b[i * SB])));
}

template <class T, class R, class F>
void zipRun(const T* a, int64_t sa, const T* b, int64_t sb, R* o, int64_t n, F f) {
  if constexpr (std::is_same_v<T, float>) {
    if (sa && sb)
      GRAFT_VEC_RUN(zipFloat<1, 1>(a, b, o, n, f));
    else if (sa)
      GRAFT_VEC_RUN(zipFloat<1, 0>(a, b, o, n, f));
    else if (sb)
      GRAFT_VEC_RUN(zipFloat<0, 1>(a, b, o, n, f));
    else
      GRAFT_VEC_RUN(zipFloat<0, 0>(a, b, o, n, f));
  } else if constexpr (kIsHalfType<T>) {
    float fa[kBlock], fb[kBlock], fo[kBlock];
    if (!sa) fa[0] = static_cast<float>(a[0]);
    if (!sb) fb[0] = static_cast<float>(b[0]);
    for (int64_t s = 0; s < n; s += kBlock) {
      int64_t len = std::min(kBlock, n - s);
      if (sa) toFloat(a + s, fa, len);
      if (sb) toFloat(b + s, fb, len);
      if constexpr (std::is_same_v<R, T>) {
        zipRun<float, float>(fa, sa, fb, sb, fo, len, f);
        fromFloat(fo, o + s, len);
      } else {
        zipRun<float, R>(fa, sa, fb, sb, o + s, len, f);
      }
    }
  } else {
    if (sa && sb) zipPlain<1, 1>(a, b, o, n, f);
    else if (sa) zipPlain<1, 0>(a, b, o, n, f);
    else if (sb) zipPlain<0, 1>(a, b, o, n, f);
    else zipPlain<0, 0>(a, b, o, n, f);
  }
}

// out = f(a, b) with broadcasting into an allocated output of element type R.
template <class T, class R, class F>
void broadcastInto(support::ThreadPool& pool, const NDArray& a, const NDArray& b, NDArray& out, F f, int64_t grain) {
  Broadcast bc = Broadcast::make(out.shape(), {&a.shape(), &b.shape()});
  if (bc.numel == 0) return;
  const T* ap = a.data<T>();
  const T* bp = b.data<T>();
  R* op = out.data<R>();
  int64_t sa = bc.innerStride(0), sb = bc.innerStride(1);
  parallelRanges(pool, bc.numel, grain, [&](int64_t begin, int64_t end) {
    bc.forEachRun(begin, end, [&](int64_t o, const int64_t* off, int64_t len) {
      zipRun<T, R>(ap + off[0], sa, bp + off[1], sb, op + o, len, f);
    });
  });
}

void checkSameType(const NDArray& a, const NDArray& b, const std::string& what) {
  GRAFT_CHECK(a.dtype() == b.dtype(), "{}: both inputs must have the same type, got {} and {}", what, dtypeName(a.dtype()),
              dtypeName(b.dtype()));
}

template <uint32_t Set, bool Compare, class F>
ops::KernelFactory binary(F f, int64_t grain = kGrainCheap) {
  return [f, grain](ops::CompileContext& c) -> ops::KernelFn {
    std::string what = c.node().describe();
    return [f, grain, what](ops::KernelContext& k) {
      const NDArray& a = k.input(0);
      const NDArray& b = k.input(1);
      checkSameType(a, b, what);
      Shape os = ops::broadcastShapes(a.shape(), b.shape(), what);
      ops::dispatch<Set>(a.dtype(), what, [&](auto tag) {
        using T = typename decltype(tag)::type;
        using R = std::conditional_t<Compare, bool, T>;
        NDArray& y = k.allocOutputUninit(0, Compare ? DataType::Bool : a.dtype(), os);
        broadcastInto<T, R>(k.pool(), a, b, y, f, grain);
      });
    };
  };
}

// Pow: a float base and exponent of the same type; an exponent of exactly 2 squares.
ops::KernelFn powKernel(ops::CompileContext& c) {
  std::string what = c.node().describe();
  return [what](ops::KernelContext& k) {
    const NDArray& a = k.input(0);
    const NDArray& b = k.input(1);
    checkSameType(a, b, what);
    Shape os = ops::broadcastShapes(a.shape(), b.shape(), what);
    ops::dispatch<ops::kFloats>(a.dtype(), what, [&](auto tag) {
      using T = typename decltype(tag)::type;
      NDArray& y = k.allocOutputUninit(0, a.dtype(), os);
      bool square = b.numel() == 1 && static_cast<double>(static_cast<ops::ComputeType<T>>(b.data<T>()[0])) == 2.0;
      if (square) broadcastInto<T, T>(k.pool(), a, b, y, SquareF{}, kGrainCheap);
      else broadcastInto<T, T>(k.pool(), a, b, y, PowF{}, kGrainCostly);
    });
  };
}

ops::KernelFn preluKernel(ops::CompileContext& c) {
  std::string what = c.node().describe();
  return [what](ops::KernelContext& k) {
    const NDArray& x = k.input(0);
    const NDArray& s = k.input(1);
    checkSameType(x, s, what);
    Shape os = ops::broadcastShapes(x.shape(), s.shape(), what);
    GRAFT_CHECK(os == x.shape(), "{}: the slope {} must broadcast to the input {}", what, shapeToString(s.shape()),
                shapeToString(x.shape()));
    ops::dispatch<ops::kNumeric>(x.dtype(), what, [&](auto tag) {
      using T = typename decltype(tag)::type;
      NDArray& y = k.allocOutputUninit(0, x.dtype(), os);
      broadcastInto<T, T>(k.pool(), x, s, y, PReluF{}, kGrainCheap);
    });
  };
}

// Sum, Mean, Max, Min over one or more broadcast inputs, folded left to right as the reference.
template <class F>
ops::KernelFactory variadic(F f, bool mean) {
  return [f, mean](ops::CompileContext& c) -> ops::KernelFn {
    std::string what = c.node().describe();
    return [f, mean, what](ops::KernelContext& k) {
      size_t n = k.numInputs();
      std::vector<Shape> shapes;
      for (size_t i = 0; i < n; ++i) {
        checkSameType(k.input(0), k.input(i), what);
        shapes.push_back(k.input(i).shape());
      }
      Shape os = ops::broadcastShapes(shapes, what);
      DataType dt = k.input(0).dtype();
      ops::dispatch<ops::kNumeric>(dt, what, [&](auto tag) {
        using T = typename decltype(tag)::type;
        using C = ops::ComputeType<T>;
        NDArray& y = k.allocOutputUninit(0, dt, os);
        if (n == 1) {
          broadcastInto<T, T>(k.pool(), k.input(0), k.input(0), y, [](C x, C) { return x; }, kGrainCheap);
        } else {
          broadcastInto<T, T>(k.pool(), k.input(0), k.input(1), y, f, kGrainCheap);
          for (size_t i = 2; i < n; ++i) broadcastInto<T, T>(k.pool(), y, k.input(i), y, f, kGrainCheap);
        }
        if (mean) {
          T* p = y.data<T>();
          C d = static_cast<C>(n);
          parallelRanges(k.pool(), y.numel(), kGrainCheap, [&](int64_t b, int64_t e) {
            for (int64_t i = b; i < e; ++i) p[i] = static_cast<T>(static_cast<C>(p[i]) / d);
          });
        }
      });
    };
  };
}

// ---- Where -----------------------------------------------------------------------------------

template <int SC, int SX, int SY, class U>
GRAFT_VEC_LOOP void selectRun(const bool* c, const U* x, const U* y, U* o, int64_t n) {
  for (int64_t i = 0; i < n; ++i) o[i] = c[i * SC] ? x[i * SX] : y[i * SY];
}

// selectRun with condition, x and y strides given by the bits of Code (4, 2, 1).
template <class U, int Code>
void selectStrided(const bool* c, const U* x, const U* y, U* o, int64_t n) {
  GRAFT_VEC_RUN(selectRun<(Code >> 2) & 1, (Code >> 1) & 1, Code & 1>(c, x, y, o, n));
}

template <class U, int... Codes>
constexpr auto selectTable(std::integer_sequence<int, Codes...>) {
  return std::array{&selectStrided<U, Codes>...};
}

template <class U>
void selectAny(const bool* c, int64_t sc, const U* x, int64_t sx, const U* y, int64_t sy, U* o, int64_t n) {
  static constexpr auto kVariants = selectTable<U>(std::make_integer_sequence<int, 8>{});
  kVariants[(sc ? 4 : 0) | (sx ? 2 : 0) | (sy ? 1 : 0)](c, x, y, o, n);
}

ops::KernelFn whereKernel(ops::CompileContext& c) {
  std::string what = c.node().describe();
  return [what](ops::KernelContext& k) {
    const NDArray& cond = k.input(0);
    const NDArray& x = k.input(1);
    const NDArray& y = k.input(2);
    checkSameType(x, y, what);
    GRAFT_CHECK(cond.dtype() == DataType::Bool, "{}: the condition must be BOOL, got {}", what, dtypeName(cond.dtype()));
    Shape os = ops::broadcastShapes({cond.shape(), x.shape(), y.shape()}, what);
    NDArray& out = k.allocOutputUninit(0, x.dtype(), os);
    Broadcast bc = Broadcast::make(os, {&cond.shape(), &x.shape(), &y.shape()});
    if (bc.numel == 0) return;
    // Selection moves elements: only their size matters.
    auto run = [&](auto tag) {
      using U = typename decltype(tag)::type;
      const bool* cp = cond.data<bool>();
      const U* xp = static_cast<const U*>(x.rawData());
      const U* yp = static_cast<const U*>(y.rawData());
      U* op = static_cast<U*>(out.rawData());
      parallelRanges(k.pool(), bc.numel, kGrainCheap, [&](int64_t b, int64_t e) {
        bc.forEachRun(b, e, [&](int64_t o, const int64_t* off, int64_t len) {
          selectAny<U>(cp + off[0], bc.innerStride(0), xp + off[1], bc.innerStride(1), yp + off[2], bc.innerStride(2), op + o,
                       len);
        });
      });
    };
    switch (dtypeSize(x.dtype())) {
      case 1: run(ops::TypeTag<uint8_t>{}); break;
      case 2: run(ops::TypeTag<uint16_t>{}); break;
      case 4: run(ops::TypeTag<uint32_t>{}); break;
      case 8: run(ops::TypeTag<uint64_t>{}); break;
      default: GRAFT_THROW("{}: unsupported data type {}", what, dtypeName(x.dtype()));
    }
  };
}

// ---- Cast ------------------------------------------------------------------------------------

void castInto(support::ThreadPool& pool, const NDArray& x, NDArray& y, const std::string& what) {
  int64_t n = x.numel();
  if (x.dtype() == y.dtype()) {
    if (n) std::memcpy(y.rawData(), x.rawData(), x.nbytes());
    return;
  }
  ops::dispatch<kVecTypes>(x.dtype(), what, [&](auto tf) {
    using From = typename decltype(tf)::type;
    ops::dispatch<kVecTypes>(y.dtype(), what, [&](auto tt) {
      using To = typename decltype(tt)::type;
      const From* s = x.data<From>();
      To* d = y.data<To>();
      parallelRanges(pool, n, kGrainCheap, [&](int64_t b, int64_t e) {
        if constexpr (std::is_same_v<From, float> && kIsHalfType<To>) {
          fromFloat(s + b, d + b, e - b);
        } else if constexpr (kIsHalfType<From> && std::is_same_v<To, float>) {
          toFloat(s + b, d + b, e - b);
        } else {
          for (int64_t i = b; i < e; ++i) d[i] = ops::convertElement<To>(s[i]);
        }
      });
    });
  });
}

ops::KernelFn castKernel(ops::CompileContext& c) {
  auto to = static_cast<DataType>(c.node().attrInt("to"));
  std::string what = c.node().describe();
  return [to, what](ops::KernelContext& k) {
    const NDArray& x = k.input(0);
    NDArray& y = k.allocOutputUninit(0, to, x.shape());
    castInto(k.pool(), x, y, what);
  };
}

ops::KernelFn castLikeKernel(ops::CompileContext& c) {
  std::string what = c.node().describe();
  return [what](ops::KernelContext& k) {
    const NDArray& x = k.input(0);
    NDArray& y = k.allocOutputUninit(0, k.input(1).dtype(), x.shape());
    castInto(k.pool(), x, y, what);
  };
}

// Predicates: every tensor input typed, in `set`, and (for binary ops) of one type.
std::function<bool(const ir::Node&)> inputsIn(uint32_t set) {
  return [set](const ir::Node& n) {
    for (size_t i = 0; i < n.numInputs(); ++i)
      if (!typeIn(n.input(i), set) || n.input(i)->info().dataType() != n.input(0)->info().dataType()) return false;
    return n.numInputs() > 0;
  };
}

bool whereSupported(const ir::Node& n) {
  return typeIn(n.input(0), ops::kBool) && typeIn(n.input(1), kVecTypes) && typeIn(n.input(2), kVecTypes) &&
         n.input(1)->info().dataType() == n.input(2)->info().dataType();
}

bool castSupported(const ir::Node& n) {
  if (!typeIn(n.input(0), kVecTypes)) return false;
  if (n.type() == "CastLike") return typeIn(n.input(1), kVecTypes);
  auto code = static_cast<uint32_t>(n.attrInt("to", 0));
  return code < 32 && ((kVecTypes >> code) & 1u);
}

}  // namespace

GRAFT_REGISTER_CPU_KERNELS(vec_binary) {
  auto add = [&](const char* type, std::function<bool(const ir::Node&)> pred, ops::KernelFactory f) {
    r.add({"", type, "vec_binary", std::move(pred), std::move(f)});
  };
  using ops::kBool;
  using ops::kNumeric;
  add("Add", inputsIn(kNumeric), binary<kNumeric, false>(AddF{}));
  add("Sub", inputsIn(kNumeric), binary<kNumeric, false>(SubF{}));
  add("Mul", inputsIn(kNumeric), binary<kNumeric, false>(MulF{}));
  add("Div", inputsIn(kNumeric), binary<kNumeric, false>(DivF{}));
  add("Pow", inputsIn(ops::kFloats), powKernel);
  add("PRelu", inputsIn(ops::kSignedNumeric), preluKernel);
  add("Equal", inputsIn(kVecTypes), binary<kVecTypes, true>(EqualF{}));
  add("Less", inputsIn(kNumeric), binary<kNumeric, true>(LessF{}));
  add("LessOrEqual", inputsIn(kNumeric), binary<kNumeric, true>(LessEqualF{}));
  add("Greater", inputsIn(kNumeric), binary<kNumeric, true>(GreaterF{}));
  add("GreaterOrEqual", inputsIn(kNumeric), binary<kNumeric, true>(GreaterEqualF{}));
  add("And", inputsIn(kBool), binary<kBool, true>(AndF{}));
  add("Or", inputsIn(kBool), binary<kBool, true>(OrF{}));
  add("Xor", inputsIn(kBool), binary<kBool, true>(XorF{}));
  add("Sum", inputsIn(kNumeric), variadic(AddF{}, false));
  add("Mean", inputsIn(kNumeric), variadic(AddF{}, true));
  add("Max", inputsIn(kNumeric), variadic(MaxF{}, false));
  add("Min", inputsIn(kNumeric), variadic(MinF{}, false));
  add("Where", whereSupported, whereKernel);
  add("Cast", castSupported, castKernel);
  add("CastLike", castSupported, castLikeKernel);
}

}  // namespace graft::backends::cpu
