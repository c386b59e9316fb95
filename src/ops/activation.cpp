// Pointwise activation functions.
#include <cmath>

#include "ops/elementwise.hpp"
#include "ops/fallback_infer.hpp"
#include "ops/registry.hpp"

namespace graft::ops {
namespace {

KernelFactory clipKernel() {
  return [](CompileContext& c) -> KernelFn {
    std::string what = c.node().describe();
    return [what](KernelContext& k) {
      const NDArray& x = k.input(0);
      auto bound = [&](size_t i, const char* name) {
        const NDArray& b = k.input(i);
        GRAFT_CHECK(b.numel() == 1 && b.rank() <= 1, "{}: {} must be a scalar, got shape {}", what, name,
                    shapeToString(b.shape()));
        GRAFT_CHECK(b.dtype() == x.dtype(), "{}: {} must have the input's type {}, got {}", what, name,
                    dtypeName(x.dtype()), dtypeName(b.dtype()));
      };
      if (k.hasInput(1)) bound(1, "min");
      if (k.hasInput(2)) bound(2, "max");
      dispatch<kNumeric>(x.dtype(), what, [&](auto tag) {
        using T = typename decltype(tag)::type;
        using C = ComputeType<T>;
        bool hasLo = k.hasInput(1), hasHi = k.hasInput(2);
        C lo = hasLo ? static_cast<C>(k.input(1).data<T>()[0]) : C(0);
        C hi = hasHi ? static_cast<C>(k.input(2).data<T>()[0]) : C(0);
        NDArray& y = k.allocOutputUninit(0, x.dtype(), x.shape());
        const T* xp = x.data<T>();
        T* yp = y.data<T>();
        // min(max(x, lo), hi), as numpy.clip: when lo > hi every element becomes hi. NaN stays NaN.
        for (int64_t i = 0; i < x.numel(); ++i) {
          C v = static_cast<C>(xp[i]);
          if (hasLo && v < lo) v = lo;
          if (hasHi && v > hi) v = hi;
          yp[i] = static_cast<T>(v);
        }
      });
    };
  };
}

// PRelu: the slope broadcasts to X one way (the output always has X's shape).
KernelFactory preluKernel() {
  return [](CompileContext& c) -> KernelFn {
    std::string what = c.node().describe();
    return [what](KernelContext& k) {
      const NDArray& x = k.input(0);
      const NDArray& slope = k.input(1);
      GRAFT_CHECK(slope.dtype() == x.dtype(), "{}: slope must have the input's type {}, got {}", what,
                  dtypeName(x.dtype()), dtypeName(slope.dtype()));
      GRAFT_CHECK(slope.rank() <= x.rank() && broadcastShapes(x.shape(), slope.shape(), what) == x.shape(),
                  "{}: slope of shape {} does not broadcast to the input's shape {}", what,
                  shapeToString(slope.shape()), shapeToString(x.shape()));
      dispatch<kNumeric>(x.dtype(), what, [&](auto tag) {
        using T = typename decltype(tag)::type;
        NDArray& y = k.allocOutputUninit(0, x.dtype(), x.shape());
        broadcastBinary<T, T>(x, slope, y, [](auto v, auto s) {
          using C = decltype(v);
          if constexpr (std::is_unsigned_v<C>) return v;
          // Integer products wrap (no signed-overflow UB); floats multiply normally.
          else if constexpr (std::is_integral_v<C>)
            return v < 0 ? static_cast<C>(static_cast<uint64_t>(s) * static_cast<uint64_t>(v)) : v;
          else
            return v < C(0) ? s * v : v;
        });
      });
    };
  };
}

}  // namespace

// Relu, Sigmoid, Tanh, LeakyRelu, Elu, Selu, HardSigmoid, HardSwish, Softplus, Softsign,
// ThresholdedRelu, Mish, Swish, Gelu (ai.onnx: approximate none / tanh), SwiGLU and ai.graphcore
// Gelu are rows of the elementwise table (elementwise_table.hpp): their reference kernels come
// from there, their VJPs are below. The ops registered here need more than a formula.
GRAFT_REGISTER_OPS(activation) {
  r.add("Celu")
      .setReference(unaryKernelWith<kFloats>([](CompileContext& c) {
        float alpha = c.node().attrFloat("alpha", 1.0f);
        GRAFT_CHECK(alpha != 0.0f, "{}: alpha must be nonzero (it divides x)", c.node().describe());
        return [alpha](auto x) {
          using C = decltype(x);
          C a = static_cast<C>(alpha);
          return std::max(C(0), x) + std::min(C(0), a * (std::exp(x / a) - C(1)));
        };
      }))
      .elementwise()
      .inplace(0);
  r.add("PRelu").setReference(preluKernel()).elementwise();
  r.add("Clip").setReference(clipKernel()).elementwise().noGradient({1, 2});
  // Until the linked onnx has their schemas (opset > 17).
  setFallbackInfer("", "Mish", sameTypeAsInput(0));
  setFallbackInfer("", "Swish", sameTypeAsInput(0));
  setFallbackInfer("", "Gelu", sameTypeAsInput(0));
  setFallbackInfer("", "SwiGLU", sameTypeAsInput(0));
}

}  // namespace graft::ops

// ---- gradients ----------------------------------------------------------------------------------
#include "ops/grad.hpp"
#include "ops/grad_util.hpp"

namespace graft::ops {

namespace {
// GELU, erf form (ai.onnx Gelu, ai.graft GeluErf): y = x Phi(x).
void geluErfVjp(GradBuilder& g) { g.setDx(0, g.mul(g.dy(), gradutil::geluErfDerivative(g, g.in(0), g.out(0)))); }

// GELU, tanh form (ai.onnx Gelu approximate=tanh, ai.graphcore Gelu): y = 0.5 x (1 + tanh(u)),
// u = k (x + c x^3): dy/dx = 0.5 (1 + t) + 0.5 x (1 - t^2) k (1 + 3 c x^2).
void geluTanhVjp(GradBuilder& g) {
  const double k = 0.7978845608028654, c = 0.044715;
  ir::Tensor* x = g.in(0);
  ir::Tensor* one = g.scalarLike(1, x);
  ir::Tensor* x2 = g.mul(x, x);
  ir::Tensor* t = g.op("Tanh", {g.scale(g.add(x, g.scale(g.mul(x2, x), c)), k)});
  ir::Tensor* a = g.scale(g.add(one, t), 0.5);
  ir::Tensor* b = g.mul(g.scale(x, 0.5 * k), g.mul(g.sub(one, g.mul(t, t)), g.add(one, g.scale(x2, 3 * c))));
  g.setDx(0, g.mul(g.dy(), g.add(a, b)));
}
}  // namespace

GRAFT_REGISTER_OPS(activation_vjp) {
  auto positive = [](GradBuilder& g) { return g.op("Greater", {g.in(0), g.scalarLike(0, g.in(0))}); };
  r.add("Relu").setVjp([positive](GradBuilder& g) { g.setDx(0, g.where(positive(g), g.dy(), g.zerosLike(g.dy()))); });
  r.add("Sigmoid").setVjp([](GradBuilder& g) {
    ir::Tensor* y = g.out(0);
    g.setDx(0, g.mul(g.dy(), g.mul(y, g.sub(g.scalarLike(1, y), y))));
  });
  r.add("Tanh").setVjp([](GradBuilder& g) {
    ir::Tensor* y = g.out(0);
    g.setDx(0, g.mul(g.dy(), g.sub(g.scalarLike(1, y), g.mul(y, y))));
  });
  r.add("LeakyRelu").setVjp([positive](GradBuilder& g) {
    double alpha = g.node().attrFloat("alpha", 0.01f);
    g.setDx(0, g.where(positive(g), g.dy(), g.scale(g.dy(), alpha)));
  });
  r.add("Elu").setVjp([positive](GradBuilder& g) {
    double alpha = g.node().attrFloat("alpha", 1.0f);
    // x > 0: 1; otherwise y + alpha.
    ir::Tensor* neg = g.mul(g.dy(), g.add(g.out(0), g.scalarLike(alpha, g.out(0))));
    g.setDx(0, g.where(positive(g), g.dy(), neg));
  });
  r.add("Selu").setVjp([positive](GradBuilder& g) {
    double alpha = g.node().attrFloat("alpha", 1.67326319217681884765625f);
    double gamma = g.node().attrFloat("gamma", 1.05070102214813232421875f);
    ir::Tensor* neg = g.mul(g.dy(), g.scale(g.op("Exp", {g.in(0)}), alpha * gamma));
    g.setDx(0, g.where(positive(g), g.scale(g.dy(), gamma), neg));
  });
  r.add("Celu").setVjp([positive](GradBuilder& g) {
    double alpha = g.node().attrFloat("alpha", 1.0f);
    ir::Tensor* neg = g.mul(g.dy(), g.op("Exp", {g.scale(g.in(0), 1.0 / alpha)}));
    g.setDx(0, g.where(positive(g), g.dy(), neg));
  });
  r.add("HardSigmoid").setVjp([](GradBuilder& g) {
    double alpha = g.node().attrFloat("alpha", 0.2f), beta = g.node().attrFloat("beta", 0.5f);
    ir::Tensor* x = g.in(0);
    ir::Tensor* t = g.add(g.scale(x, alpha), g.scalarLike(beta, x));
    ir::Tensor* inside = g.op("And", {g.op("Greater", {t, g.scalarLike(0, x)}), g.op("Less", {t, g.scalarLike(1, x)})});
    g.setDx(0, g.where(inside, g.scale(g.dy(), alpha), g.zerosLike(g.dy())));
  });
  r.add("HardSwish").setVjp([](GradBuilder& g) {
    // y = x * clamp(x/6 + 1/2, 0, 1): 0 below -3, 1 above 3, (2x + 3)/6 between (as PyTorch).
    ir::Tensor* x = g.in(0);
    ir::Tensor* mid = g.add(g.scale(x, 1.0 / 3.0), g.scalarLike(0.5, x));
    ir::Tensor* d = g.where(
        g.op("Less", {x, g.scalarLike(-3, x)}), g.zerosLike(x),
        g.where(g.op("Greater", {x, g.scalarLike(3, x)}), g.op("Add", {g.zerosLike(x), g.scalarLike(1, x)}), mid));
    g.setDx(0, g.mul(g.dy(), d));
  });
  r.add("Softplus").setVjp([](GradBuilder& g) { g.setDx(0, g.mul(g.dy(), g.op("Sigmoid", {g.in(0)}))); });
  r.add("Softsign").setVjp([](GradBuilder& g) {
    ir::Tensor* x = g.in(0);
    ir::Tensor* d = g.add(g.scalarLike(1, x), g.op("Abs", {x}));
    g.setDx(0, g.div(g.dy(), g.mul(d, d)));
  });
  r.add("ThresholdedRelu").setVjp([](GradBuilder& g) {
    double alpha = g.node().attrFloat("alpha", 1.0f);
    ir::Tensor* on = g.op("Greater", {g.in(0), g.scalarLike(alpha, g.in(0))});
    g.setDx(0, g.where(on, g.dy(), g.zerosLike(g.dy())));
  });
  r.add("PRelu").setVjp([](GradBuilder& g) {
    ir::Tensor* x = g.in(0);
    ir::Tensor* s = g.in(1);
    ir::Tensor* negative = g.op("Less", {x, g.scalarLike(0, x)});
    if (g.wants(0)) g.setDx(0, g.unbroadcast(g.where(negative, g.mul(g.dy(), s), g.dy()), x));
    if (g.wants(1)) g.setDx(1, g.unbroadcast(g.where(negative, g.mul(g.dy(), x), g.zerosLike(g.dy())), s));
  });
  r.add("Clip").setVjp([](GradBuilder& g) {
    // The gradient passes where min <= x <= max (as PyTorch's clamp).
    ir::Tensor* x = g.in(0);
    ir::Tensor* inside = nullptr;
    if (g.in(1)) inside = g.op("GreaterOrEqual", {x, g.in(1)});
    if (g.in(2)) {
      ir::Tensor* le = g.op("LessOrEqual", {x, g.in(2)});
      inside = inside ? g.op("And", {inside, le}) : le;
    }
    g.setDx(0, inside ? g.where(inside, g.dy(), g.zerosLike(g.dy())) : g.dy());
  });
  r.add("Mish").setVjp([](GradBuilder& g) {
    // y = x tanh(sp(x)), sp = softplus: dy/dx = t + x (1 - t^2) sigmoid(x), t = tanh(sp(x)).
    ir::Tensor* x = g.in(0);
    ir::Tensor* t = g.op("Tanh", {g.op("Softplus", {x})});
    ir::Tensor* one = g.scalarLike(1, x);
    ir::Tensor* d = g.add(t, g.mul(x, g.mul(g.sub(one, g.mul(t, t)), g.op("Sigmoid", {x}))));
    g.setDx(0, g.mul(g.dy(), d));
  });
  r.add("Swish").setVjp([](GradBuilder& g) {
    // y = x s(a x): dy/dx = s + a x s (1 - s).
    double alpha = g.node().attrFloat("alpha", 1.0f);
    ir::Tensor* x = g.in(0);
    ir::Tensor* s = g.op("Sigmoid", {g.scale(x, alpha)});
    ir::Tensor* d = g.add(s, g.mul(g.scale(x, alpha), g.mul(s, g.sub(g.scalarLike(1, x), s))));
    g.setDx(0, g.mul(g.dy(), d));
  });
  r.add("Gelu").setVjp([](GradBuilder& g) {
    if (g.node().attrString("approximate", "none") == "tanh")
      geluTanhVjp(g);
    else
      geluErfVjp(g);
  });
  // ai.graft GeluErf: what fuse-gelu makes of an exported x/2 (1 + erf(x / sqrt 2)), before the
  // backward pass too (training sessions), so that the backward reads x alone.
  r.add("GeluErf", kGraftDomain).setVjp(geluErfVjp);
  r.add("SwiGLU").setVjp([](GradBuilder& g) {
    // y = a s(alpha a) b: dA = dy b (s + alpha a s (1 - s)), dB = dy a s.
    double alpha = g.node().attrFloat("alpha", 1.0f);
    ir::Tensor *a = g.in(0), *b = g.in(1);
    ir::Tensor* s = g.op("Sigmoid", {g.scale(a, alpha)});
    if (g.wants(0)) {
      ir::Tensor* d = g.add(s, g.mul(g.scale(a, alpha), g.mul(s, g.sub(g.scalarLike(1, a), s))));
      g.setDx(0, g.mul(g.mul(g.dy(), b), d));
    }
    if (g.wants(1)) g.setDx(1, g.mul(g.dy(), g.mul(a, s)));
  });
  r.add("Gelu", kGraphcoreDomain).setVjp(geluTanhVjp);  // PopART's GELU is the tanh form
}

}  // namespace graft::ops
