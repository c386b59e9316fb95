// Elementwise arithmetic, comparison and logical ops with numpy broadcasting, the variadic
// Sum/Mean/Max/Min, Where, and unary math functions.
#include <cmath>
#include <limits>

#include "ops/elementwise.hpp"
#include "ops/fallback_infer.hpp"
#include "ops/registry.hpp"

namespace graft::ops {
namespace {

template <class C>
C safeDiv(C a, C b) {
  if constexpr (std::is_integral_v<C>) {
    if (b == 0) return 0;  // integer division by zero: 0 instead of a trap
    if constexpr (std::is_signed_v<C>)
      if (b == -1) return static_cast<C>(0 - static_cast<std::make_unsigned_t<C>>(a));  // no INT_MIN/-1 trap
    return a / b;
  } else {
    return a / b;
  }
}

template <class C>
C intMod(C a, C b, bool fmodSemantics) {
  if (b == 0) return 0;
  if constexpr (std::is_signed_v<C>) {
    if (b == -1) return 0;
    C r = a % b;
    if (!fmodSemantics && r != 0 && ((r < 0) != (b < 0))) r += b;  // sign of the divisor, like Python
    return r;
  } else {
    return a % b;
  }
}

// Pow: the exponent may have another type than the base.
KernelFactory powKernel() {
  return [](CompileContext& c) -> KernelFn {
    std::string what = c.node().describe();
    return [what](KernelContext& k) {
      const NDArray& a = k.input(0);
      const NDArray& b = k.input(1);
      Shape os = broadcastShapes(a.shape(), b.shape(), what);
      // Convert the exponent to double once, then broadcast over (base, exponent-as-double).
      NDArray bd(DataType::Double, b.shape());
      dispatch<kNumeric>(b.dtype(), what, [&](auto tb) {
        using TB = typename decltype(tb)::type;
        for (int64_t i = 0; i < b.numel(); ++i)
          bd.data<double>()[i] = static_cast<double>(static_cast<ComputeType<TB>>(b.data<TB>()[i]));
      });
      dispatch<kNumeric>(a.dtype(), what, [&](auto ta) {
        using T = typename decltype(ta)::type;
        using C = ComputeType<T>;
        NDArray ad(DataType::Double, a.shape());
        for (int64_t i = 0; i < a.numel(); ++i)
          ad.data<double>()[i] = static_cast<double>(static_cast<C>(a.data<T>()[i]));
        NDArray tmp(DataType::Double, os);
        broadcastBinary<double, double>(ad, bd, tmp, [](double x, double y) { return std::pow(x, y); });
        NDArray& y = k.allocOutputUninit(0, a.dtype(), os);
        for (int64_t i = 0; i < tmp.numel(); ++i) {
          double v = tmp.data<double>()[i];
          if constexpr (std::is_integral_v<C>)
            y.data<T>()[i] = static_cast<T>(static_cast<int64_t>(v));
          else
            y.data<T>()[i] = static_cast<T>(static_cast<C>(v));
        }
      });
    };
  };
}

// Sum, Mean, Max, Min over any number of broadcast inputs.
template <class F>
KernelFactory variadicKernel(F f, bool mean) {
  return [f, mean](CompileContext& c) -> KernelFn {
    std::string what = c.node().describe();
    return [f, mean, what](KernelContext& k) {
      size_t n = k.numInputs();
      std::vector<Shape> shapes;
      for (size_t i = 0; i < n; ++i) shapes.push_back(k.input(i).shape());
      Shape os = broadcastShapes(shapes, what);
      DataType dt = k.input(0).dtype();
      dispatch<kNumeric>(dt, what, [&](auto tag) {
        using T = typename decltype(tag)::type;
        using C = ComputeType<T>;
        NDArray acc = NDArray::uninitialized(dt, os);
        // acc = input0 broadcast, then fold the others in.
        NDArray zero(dt, {});
        broadcastBinary<T, T>(k.input(0), zero, acc, [](C x, C) { return x; });
        for (size_t i = 1; i < n; ++i) {
          NDArray next = NDArray::uninitialized(dt, os);
          broadcastBinary<T, T>(acc, k.input(i), next, f);
          acc = next;
        }
        if (mean) {
          T* p = acc.data<T>();
          for (int64_t i = 0; i < acc.numel(); ++i) p[i] = static_cast<T>(static_cast<C>(p[i]) / static_cast<C>(n));
        }
        k.setOutput(0, acc);
      });
    };
  };
}

KernelFactory whereKernel() {
  return [](CompileContext& c) -> KernelFn {
    std::string what = c.node().describe();
    return [what](KernelContext& k) {
      const NDArray& cond = k.input(0);
      const NDArray& x = k.input(1);
      const NDArray& y = k.input(2);
      Shape os = broadcastShapes({cond.shape(), x.shape(), y.shape()}, what);
      dispatch<kAll>(x.dtype(), what, [&](auto tag) {
        using T = typename decltype(tag)::type;
        NDArray& out = k.allocOutput(0, x.dtype(), os);
        std::array<std::vector<int64_t>, 3> st{broadcastStrides(cond.shape(), os), broadcastStrides(x.shape(), os),
                                               broadcastStrides(y.shape(), os)};
        const bool* cp = cond.data<bool>();
        const T* xp = x.data<T>();
        const T* yp = y.data<T>();
        T* op = out.data<T>();
        int64_t o = 0;
        forEachBroadcastRun<3>(os, st, [&](const auto& off, const auto& inner, int64_t len) {
          for (int64_t j = 0; j < len; ++j, ++o)
            op[o] = cp[off[0] + j * inner[0]] ? xp[off[1] + j * inner[1]] : yp[off[2] + j * inner[2]];
        });
      });
    };
  };
}

KernelFactory isInfKernel() {
  return [](CompileContext& c) -> KernelFn {
    bool pos = c.node().attrInt("detect_positive", 1) != 0;
    bool neg = c.node().attrInt("detect_negative", 1) != 0;
    std::string what = c.node().describe();
    return [=](KernelContext& k) {
      const NDArray& x = k.input(0);
      NDArray& y = k.allocOutputUninit(0, DataType::Bool, x.shape());
      dispatch<kFloats>(x.dtype(), what, [&](auto tag) {
        using T = typename decltype(tag)::type;
        for (int64_t i = 0; i < x.numel(); ++i) {
          float v = static_cast<float>(static_cast<ComputeType<T>>(x.data<T>()[i]));
          y.data<bool>()[i] = std::isinf(v) && ((v > 0 && pos) || (v < 0 && neg));
        }
      });
    };
  };
}

KernelFactory isNanKernel() {
  return [](CompileContext& c) -> KernelFn {
    std::string what = c.node().describe();
    return [what](KernelContext& k) {
      const NDArray& x = k.input(0);
      NDArray& y = k.allocOutputUninit(0, DataType::Bool, x.shape());
      dispatch<kFloats>(x.dtype(), what, [&](auto tag) {
        using T = typename decltype(tag)::type;
        for (int64_t i = 0; i < x.numel(); ++i)
          y.data<bool>()[i] = std::isnan(static_cast<double>(static_cast<ComputeType<T>>(x.data<T>()[i])));
      });
    };
  };
}

template <class C>
C roundHalfEven(C x) {
  return std::nearbyint(x);  // the default rounding mode rounds half to even
}

// GreaterOrEqual and LessOrEqual (opset 16) are ONNX functions without an inference function of
// their own in the ONNX library graft links: BOOL of the inputs' broadcast shape, a known size
// other than 1 winning over a symbolic one.
std::vector<ir::ValueType> inferCompare(const ir::Node& n, const std::vector<ir::ValueType>& in,
                                        const std::vector<const NDArray*>&) {
  GRAFT_CHECK(in.size() == 2, "{}: expected 2 inputs, got {}", n.describe(), in.size());
  DataType a = in[0].info.dataType(), b = in[1].info.dataType();
  GRAFT_CHECK(a == DataType::Undefined || b == DataType::Undefined || a == b,
              "{}: both inputs must have one type, got {} and {}", n.describe(), dtypeName(a), dtypeName(b));
  if (!in[0].info.hasShape() || !in[1].info.hasShape())
    return {ir::ValueType::tensor(TensorInfo::unranked(DataType::Bool))};
  size_t rank = std::max(in[0].info.dims().size(), in[1].info.dims().size());
  std::vector<Dim> dims(rank, Dim(1));
  for (const auto& t : in) {
    const auto& d = t.info.dims();
    for (size_t i = 0; i < d.size(); ++i) {
      Dim& o = dims[rank - d.size() + i];
      if (d[i].known() && d[i].value == 1) continue;
      if (d[i].known()) {
        GRAFT_CHECK(!o.known() || o.value == 1 || o.value == d[i].value,
                    "{}: input dimensions {} and {} do not broadcast", n.describe(), o.value, d[i].value);
        o = d[i];
      } else if (o.known() && o.value == 1) {
        o = d[i];
      }
    }
  }
  return {ir::ValueType::tensor(TensorInfo(DataType::Bool, dims))};
}

}  // namespace

GRAFT_REGISTER_OPS(math) {
  r.add("Add").setReference(binaryKernel<kNumeric>([](auto a, auto b) { return a + b; })).elementwise().inplace(0);
  r.add("Sub").setReference(binaryKernel<kNumeric>([](auto a, auto b) { return a - b; })).elementwise().inplace(0);
  r.add("Mul").setReference(binaryKernel<kNumeric>([](auto a, auto b) { return a * b; })).elementwise().inplace(0);
  r.add("Div")
      .setReference(binaryKernel<kNumeric>([](auto a, auto b) { return safeDiv(a, b); }))
      .elementwise()
      .inplace(0);
  r.add("Pow").setReference(powKernel()).elementwise();
  r.add("Mod")
      .setReference([](CompileContext& c) -> KernelFn {
        bool fmodSem = c.node().attrInt("fmod", 0) != 0;
        std::string what = c.node().describe();
        // Opset 28: fmod=0 is defined for floats too, as a - floor(a / b) * b (the sign of b; a zero
        // result takes b's sign; x = +-inf or y = +-0 give NaN, as std::fmod does).
        return binaryKernel<kNumeric>([fmodSem](auto a, auto b) {
          using C = decltype(a);
          if constexpr (std::is_integral_v<C>) {
            return intMod(a, b, fmodSem);
          } else {
            C r = static_cast<C>(std::fmod(a, b));
            if (fmodSem || std::isnan(r)) return r;
            if (r == 0) return static_cast<C>(std::copysign(0.0, static_cast<double>(b)));
            if ((r < 0) != (b < 0)) r = static_cast<C>(r + b);
            return r;
          }
        })(c);
      })
      .elementwise();
  r.add("BitShift")
      .setReference([](CompileContext& c) -> KernelFn {
        bool left = c.node().attrString("direction") == "LEFT";
        // Opset 28: signed integers too. A shift count < 0 or >= the bit width gives 0 (left) or the
        // sign fill (right); a signed right shift is arithmetic, a signed left shift wraps as the
        // unsigned type of the same width would.
        return binaryKernel<kInts>([left](auto a, auto b) {
          using C = decltype(a);
          using U = std::make_unsigned_t<C>;
          constexpr int kBits = static_cast<int>(sizeof(C) * 8);
          bool outOfRange = static_cast<U>(b) >= static_cast<U>(kBits);  // a negative count wraps above too
          if (outOfRange) {
            if constexpr (std::is_signed_v<C>)
              if (!left && a < C(0)) return static_cast<C>(-1);
            return C(0);
          }
          int sh = static_cast<int>(b);
          if (left) return static_cast<C>(static_cast<U>(static_cast<U>(a) << sh));
          return static_cast<C>(a >> sh);
        })(c);
      })
      .elementwise();

  r.add("Equal").setReference(compareKernel<kAll>([](const auto& a, const auto& b) { return a == b; })).elementwise();
  r.add("Less").setReference(compareKernel<kNumeric>([](auto a, auto b) { return a < b; })).elementwise();
  r.add("LessOrEqual")
      .setReference(compareKernel<kNumeric>([](auto a, auto b) { return a <= b; }))
      .elementwise()
      .setInfer(inferCompare);
  r.add("Greater").setReference(compareKernel<kNumeric>([](auto a, auto b) { return a > b; })).elementwise();
  r.add("GreaterOrEqual")
      .setReference(compareKernel<kNumeric>([](auto a, auto b) { return a >= b; }))
      .elementwise()
      .setInfer(inferCompare);
  r.add("And").setReference(compareKernel<kBool>([](bool a, bool b) { return a && b; })).elementwise();
  r.add("Or").setReference(compareKernel<kBool>([](bool a, bool b) { return a || b; })).elementwise();
  r.add("Xor").setReference(compareKernel<kBool>([](bool a, bool b) { return a != b; })).elementwise();

  // Bitwise ops (opset 18) on integer tensors, broadcasting as the arithmetic ops.
  r.add("BitwiseAnd").setReference(binaryKernel<kInts>([](auto a, auto b) { return a & b; })).elementwise();
  r.add("BitwiseOr").setReference(binaryKernel<kInts>([](auto a, auto b) { return a | b; })).elementwise();
  r.add("BitwiseXor").setReference(binaryKernel<kInts>([](auto a, auto b) { return a ^ b; })).elementwise();
  r.add("BitwiseNot")
      .setReference(unaryKernel<kInts>([](auto a) { return static_cast<decltype(a)>(~a); }))
      .elementwise();

  r.add("Sum").setReference(variadicKernel([](auto a, auto b) { return a + b; }, false)).elementwise();
  r.add("Mean").setReference(variadicKernel([](auto a, auto b) { return a + b; }, true)).elementwise();
  r.add("Max")
      .setReference(variadicKernel(
          [](auto a, auto b) {
            if constexpr (std::is_floating_point_v<decltype(a)>)
              if (std::isnan(a) || std::isnan(b)) return std::numeric_limits<decltype(a)>::quiet_NaN();
            return a > b ? a : b;
          },
          false))
      .elementwise();
  r.add("Min")
      .setReference(variadicKernel(
          [](auto a, auto b) {
            if constexpr (std::is_floating_point_v<decltype(a)>)
              if (std::isnan(a) || std::isnan(b)) return std::numeric_limits<decltype(a)>::quiet_NaN();
            return a < b ? a : b;
          },
          false))
      .elementwise();
  r.add("Where").setReference(whereKernel()).elementwise().inplace(1).noGradient({0});

  // Unary math: Abs, Neg, Sign, Exp, Log, Sqrt, Reciprocal, Floor, Ceil, Not, Erf and the
  // trigonometric and hyperbolic functions are rows of the elementwise table
  // (elementwise_table.hpp), which registers their reference kernels.
  r.add("Round").setReference(unaryKernel<kFloats>([](auto x) { return roundHalfEven(x); })).elementwise();
  r.add("IsNaN").setReference(isNanKernel()).elementwise();
  r.add("IsInf").setReference(isInfKernel()).elementwise();
  // Until the linked onnx has their schemas (opset > 17).
  setFallbackInfer("", "BitwiseAnd", broadcastOfInputs());
  setFallbackInfer("", "BitwiseOr", broadcastOfInputs());
  setFallbackInfer("", "BitwiseXor", broadcastOfInputs());
  setFallbackInfer("", "BitwiseNot", sameTypeAsInput(0));
}

}  // namespace graft::ops

// ---- gradients ----------------------------------------------------------------------------------
#include "ops/grad.hpp"

namespace graft::ops {
namespace {

// d/dx of a unary op as dy * f'(x), with f' built from forward ops.
template <class F>
VjpFn unaryVjp(F derivative) {
  return [derivative](GradBuilder& g) { g.setDx(0, g.mul(g.dy(), derivative(g))); };
}

}  // namespace

GRAFT_REGISTER_OPS(math_vjp) {
  r.add("Add").setVjp([](GradBuilder& g) {
    if (g.wants(0)) g.setDx(0, g.unbroadcast(g.dy(), g.in(0)));
    if (g.wants(1)) g.setDx(1, g.unbroadcast(g.dy(), g.in(1)));
  });
  r.add("Sub").setVjp([](GradBuilder& g) {
    if (g.wants(0)) g.setDx(0, g.unbroadcast(g.dy(), g.in(0)));
    if (g.wants(1)) g.setDx(1, g.unbroadcast(g.neg(g.dy()), g.in(1)));
  });
  r.add("Mul").setVjp([](GradBuilder& g) {
    if (g.wants(0)) g.setDx(0, g.unbroadcast(g.mul(g.dy(), g.in(1)), g.in(0)));
    if (g.wants(1)) g.setDx(1, g.unbroadcast(g.mul(g.dy(), g.in(0)), g.in(1)));
  });
  r.add("Div").setVjp([](GradBuilder& g) {
    if (g.wants(0)) g.setDx(0, g.unbroadcast(g.div(g.dy(), g.in(1)), g.in(0)));
    if (g.wants(1)) g.setDx(1, g.unbroadcast(g.neg(g.div(g.mul(g.dy(), g.out(0)), g.in(1))), g.in(1)));
  });
  r.add("Pow").setVjp([](GradBuilder& g) {
    // d/da a^b = b a^(b-1); d/db a^b = a^b log a. Where b = 0, a^b is the constant 1, so d/da is
    // 0 (also at a = 0 or NaN, where the formula gives 0 * inf or NaN); where a = 0 and b >= 0,
    // a^b is 0 or 1 on b's side of the limit, so d/db is 0 (not 0 * -inf). PyTorch's pow does so.
    ir::Tensor* a = g.in(0);
    ir::Tensor* b = g.in(1);
    if (g.wants(0)) {
      ir::Tensor* bf = g.op("CastLike", {b, a});
      ir::Tensor* d = g.mul(bf, g.op("Pow", {a, g.sub(bf, g.scalarLike(1, a))}));
      d = g.where(g.op("Equal", {bf, g.scalarLike(0, a)}), g.scalarLike(0, a), d);
      g.setDx(0, g.unbroadcast(g.mul(g.dy(), d), a));
    }
    if (g.wants(1)) {
      ir::Tensor* d = g.mul(g.out(0), g.op("Log", {a}));
      ir::Tensor* bf = g.op("CastLike", {b, a});
      ir::Tensor* flat =
          g.op("And", {g.op("Equal", {a, g.scalarLike(0, a)}), g.op("GreaterOrEqual", {bf, g.scalarLike(0, a)})});
      d = g.where(flat, g.scalarLike(0, a), d);
      g.setDx(1, g.unbroadcast(g.mul(g.dy(), d), b));
    }
  });
  // Mod (both fmod = 0 and 1): a - k b with k piecewise constant in a, so d/da = 1 (PopART's and
  // PyTorch's gradient); the divisor gets none, as in PopART.
  r.add("Mod").noGradient({1}).setVjp([](GradBuilder& g) { g.setDx(0, g.unbroadcast(g.dy(), g.in(0))); });
  r.add("Sum").setVjp([](GradBuilder& g) {
    for (size_t i = 0; i < g.node().numInputs(); ++i)
      if (g.wants(i)) g.setDx(i, g.unbroadcast(g.dy(), g.in(i)));
  });
  r.add("Mean").setVjp([](GradBuilder& g) {
    ir::Tensor* d = g.scale(g.dy(), 1.0 / static_cast<double>(g.node().numInputs()));
    for (size_t i = 0; i < g.node().numInputs(); ++i)
      if (g.wants(i)) g.setDx(i, g.unbroadcast(d, g.in(i)));
  });
  auto minMaxVjp = [](GradBuilder& g) {
    // The gradient goes to the input(s) equal to the result.
    for (size_t i = 0; i < g.node().numInputs(); ++i)
      if (g.wants(i)) {
        ir::Tensor* mask = g.op("Equal", {g.in(i), g.out(0)});
        g.setDx(i, g.unbroadcast(g.where(mask, g.dy(), g.zerosLike(g.dy())), g.in(i)));
      }
  };
  r.add("Max").setVjp(minMaxVjp);
  r.add("Min").setVjp(minMaxVjp);
  r.add("Where").setVjp([](GradBuilder& g) {
    ir::Tensor* zeros = g.zerosLike(g.dy());
    if (g.wants(1)) g.setDx(1, g.unbroadcast(g.where(g.in(0), g.dy(), zeros), g.in(1)));
    if (g.wants(2)) g.setDx(2, g.unbroadcast(g.where(g.in(0), zeros, g.dy()), g.in(2)));
  });
  r.add("Neg").setVjp([](GradBuilder& g) { g.setDx(0, g.neg(g.dy())); });
  r.add("Abs").setVjp(unaryVjp([](GradBuilder& g) { return g.op("Sign", {g.in(0)}); }));
  r.add("Exp").setVjp(unaryVjp([](GradBuilder& g) { return g.out(0); }));
  r.add("Log").setVjp([](GradBuilder& g) { g.setDx(0, g.div(g.dy(), g.in(0))); });
  r.add("Sqrt").setVjp([](GradBuilder& g) { g.setDx(0, g.div(g.scale(g.dy(), 0.5), g.out(0))); });
  r.add("Reciprocal").setVjp(unaryVjp([](GradBuilder& g) { return g.neg(g.mul(g.out(0), g.out(0))); }));
  r.add("Sin").setVjp(unaryVjp([](GradBuilder& g) { return g.op("Cos", {g.in(0)}); }));
  r.add("Cos").setVjp(unaryVjp([](GradBuilder& g) { return g.neg(g.op("Sin", {g.in(0)})); }));
  r.add("Tan").setVjp(
      unaryVjp([](GradBuilder& g) { return g.add(g.scalarLike(1, g.out(0)), g.mul(g.out(0), g.out(0))); }));
  r.add("Asin").setVjp(unaryVjp([](GradBuilder& g) {
    ir::Tensor* x = g.in(0);
    return g.op("Reciprocal", {g.op("Sqrt", {g.sub(g.scalarLike(1, x), g.mul(x, x))})});
  }));
  r.add("Acos").setVjp(unaryVjp([](GradBuilder& g) {
    ir::Tensor* x = g.in(0);
    return g.neg(g.op("Reciprocal", {g.op("Sqrt", {g.sub(g.scalarLike(1, x), g.mul(x, x))})}));
  }));
  r.add("Atan").setVjp(unaryVjp([](GradBuilder& g) {
    ir::Tensor* x = g.in(0);
    return g.op("Reciprocal", {g.add(g.scalarLike(1, x), g.mul(x, x))});
  }));
  r.add("Sinh").setVjp(unaryVjp([](GradBuilder& g) { return g.op("Cosh", {g.in(0)}); }));
  r.add("Cosh").setVjp(unaryVjp([](GradBuilder& g) { return g.op("Sinh", {g.in(0)}); }));
  r.add("Asinh").setVjp(unaryVjp([](GradBuilder& g) {
    ir::Tensor* x = g.in(0);
    return g.op("Reciprocal", {g.op("Sqrt", {g.add(g.mul(x, x), g.scalarLike(1, x))})});
  }));
  r.add("Acosh").setVjp(unaryVjp([](GradBuilder& g) {
    ir::Tensor* x = g.in(0);
    return g.op("Reciprocal", {g.op("Sqrt", {g.sub(g.mul(x, x), g.scalarLike(1, x))})});
  }));
  r.add("Atanh").setVjp(unaryVjp([](GradBuilder& g) {
    ir::Tensor* x = g.in(0);
    return g.op("Reciprocal", {g.sub(g.scalarLike(1, x), g.mul(x, x))});
  }));
  r.add("Erf").setVjp(unaryVjp([](GradBuilder& g) {
    ir::Tensor* x = g.in(0);
    // 2/sqrt(pi) * exp(-x^2)
    return g.scale(g.op("Exp", {g.neg(g.mul(x, x))}), 1.1283791670955126);
  }));
  // Piecewise-constant functions: zero gradient almost everywhere.
  for (const char* op : {"Floor", "Ceil", "Round", "Sign"})
    r.add(op).setVjp([](GradBuilder& g) { g.setDx(0, g.zerosLike(g.in(0))); });
}

}  // namespace graft::ops
