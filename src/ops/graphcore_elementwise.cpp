// PopART's ai.graphcore elementwise ops, with PopART's semantics:
//   unary:  Log1p, Expm1, GeluErf (x/2 (1 + erf(x/sqrt 2))), Swish (x sigmoid(x)), Scale (x * scale),
//           Detach (x; no gradient flows back), Nop (x), Round (half away from zero), NearbyInt
//           (half to even), BitwiseNot (integers), IncrementMod ((x + increment) mod modulus, for
//           counters; the result of fmod, as PopART computes it)
//   binary: Atan2 (atan2(a, b), numpy broadcasting), Fmod (C's fmod: the sign of a), Remainder
//           (Python's %: the sign of b), ScaledAdd (scale0 * a + scale1 * b)
// Rounding ops have zero gradient, as in PopART; Fmod and Remainder pass the gradient to a only.
#include <cmath>

#include "ops/dtype_dispatch.hpp"
#include "ops/elementwise.hpp"
#include "ops/grad.hpp"
#include "ops/grad_util.hpp"
#include "ops/registry.hpp"
#include "ops/shape_util.hpp"

namespace graft::ops {
namespace {

std::vector<ir::ValueType> sameAsInput0(const ir::Node& n, const std::vector<ir::ValueType>& in,
                                        const std::vector<const NDArray*>&) {
  GRAFT_CHECK(!in.empty() && in[0].known(), "{}: input 0 is required", n.describe());
  return {in[0]};
}

// Numpy broadcasting of two typed inputs; an unknown dimension stays unknown.
std::vector<ir::ValueType> broadcastInfer(const ir::Node& n, const std::vector<ir::ValueType>& in,
                                          const std::vector<const NDArray*>&) {
  GRAFT_CHECK(in.size() >= 2 && in[0].known() && in[1].known(), "{}: takes 2 inputs", n.describe());
  const TensorInfo& a = in[0].info;
  const TensorInfo& b = in[1].info;
  GRAFT_CHECK(a.dataType() == b.dataType(), "{}: inputs must have the same type, got {} and {}", n.describe(),
              dtypeName(a.dataType()), dtypeName(b.dataType()));
  if (!a.hasShape() || !b.hasShape()) return {ir::ValueType::tensor(TensorInfo::unranked(a.dataType()))};
  size_t rank = std::max(a.dims().size(), b.dims().size());
  std::vector<Dim> out(rank);
  for (size_t i = 0; i < rank; ++i) {
    auto at = [&](const TensorInfo& t) {
      size_t r = t.dims().size();
      return i + r >= rank ? t.dims()[i + r - rank] : Dim(1);
    };
    Dim x = at(a), y = at(b);
    if (x.known() && y.known()) {
      GRAFT_CHECK(x.value == y.value || x.value == 1 || y.value == 1, "{}: shapes {} and {} do not broadcast",
                  n.describe(), a.str(), b.str());
      out[i] = Dim(std::max(x.value, y.value) == 0 || x.value == 0 || y.value == 0 ? 0 : std::max(x.value, y.value));
    } else if (x.known() && x.value != 1) {
      out[i] = x;
    } else if (y.known() && y.value != 1) {
      out[i] = y;
    } else {
      out[i] = x.known() ? y : x;
    }
  }
  return {ir::ValueType::tensor(TensorInfo(a.dataType(), out))};
}

// Round half to even, in the compute type.
template <class C>
C nearbyInt(C x) {
  return std::nearbyint(x);  // the default rounding mode is to nearest, ties to even
}

// Python's modulo: the result has the sign of the divisor.
template <class C>
C remainderOf(C a, C b) {
  if constexpr (std::is_floating_point_v<C>) {
    C r = std::fmod(a, b);
    return (r != C(0) && ((r < C(0)) != (b < C(0)))) ? r + b : r;
  } else {
    if (b == C(0)) return C(0);
    C r = static_cast<C>(a % b);
    if constexpr (std::is_signed_v<C>) return (r != 0 && ((r < 0) != (b < 0))) ? static_cast<C>(r + b) : r;
    return r;
  }
}

template <class C>
C fmodOf(C a, C b) {
  if constexpr (std::is_floating_point_v<C>)
    return std::fmod(a, b);
  else
    return b == C(0) ? C(0) : static_cast<C>(a % b);
}

void zeroGradient(GradBuilder& g) { g.setDx(0, g.zerosLike(g.in(0))); }

}  // namespace

GRAFT_REGISTER_OPS(graphcore_elementwise) {
  const char* d = kGraphcoreDomain;
  r.add("Log1p", d)
      .setReference(unaryKernel<kFloats>([](auto x) { return std::log1p(x); }))
      .setInfer(sameAsInput0)
      .setVjp([](GradBuilder& g) { g.setDx(0, g.div(g.dy(), g.add(g.in(0), g.scalarLike(1.0, g.in(0))))); });
  r.add("Expm1", d)
      .setReference(unaryKernel<kFloats>([](auto x) { return std::expm1(x); }))
      .setInfer(sameAsInput0)
      .setVjp([](GradBuilder& g) { g.setDx(0, g.mul(g.dy(), g.op("Exp", {g.in(0)}))); });
  r.add("GeluErf", d)
      .setReference(unaryKernel<kFloats>([](auto x) {
        using C = decltype(x);
        return C(0.5) * x * (C(1) + std::erf(x * C(0.70710678118654752440)));
      }))
      .setInfer(sameAsInput0)
      .setVjp([](GradBuilder& g) { g.setDx(0, g.mul(g.dy(), gradutil::geluErfDerivative(g, g.in(0), g.out(0)))); });
  r.add("Swish", d)
      .setReference(unaryKernel<kFloats>([](auto x) {
        using C = decltype(x);
        return x / (C(1) + std::exp(-x));
      }))
      .setInfer(sameAsInput0)
      .setVjp([](GradBuilder& g) {
        // d/dx x s(x) = s(x) (1 + x (1 - s(x)))
        ir::Tensor* x = g.in(0);
        ir::Tensor* s = g.op("Sigmoid", {x});
        ir::Tensor* one = g.scalarLike(1.0, x);
        g.setDx(0, g.mul(g.dy(), g.mul(s, g.add(one, g.mul(x, g.sub(one, s))))));
      });
  r.add("Scale", d)
      .setReference(unaryKernelWith<kNumeric>([](CompileContext& c) {
        double s = c.node().attrFloat("scale");
        return [s](auto x) { return static_cast<decltype(x)>(static_cast<double>(x) * s); };
      }))
      .setInfer(sameAsInput0)
      .setVjp([](GradBuilder& g) { g.setDx(0, g.scale(g.dy(), g.node().attrFloat("scale"))); });
  r.add("Detach", d)
      .setReference(unaryKernel<kNumericBool>([](auto x) { return x; }))
      .setInfer(sameAsInput0)
      .noGradient({0})
      .setVjp([](GradBuilder&) {});  // blocks the gradient: input 0 gets none
  r.add("Nop", d)
      .setReference(unaryKernel<kNumericBool>([](auto x) { return x; }))
      .setInfer(sameAsInput0)
      .setVjp([](GradBuilder& g) { g.setDx(0, g.dy()); });
  r.add("Round", d)
      .setReference(unaryKernel<kFloats>([](auto x) { return std::round(x); }))
      .setInfer(sameAsInput0)
      .setVjp(zeroGradient);
  r.add("NearbyInt", d)
      .setReference(unaryKernel<kFloats>([](auto x) { return nearbyInt(x); }))
      .setInfer(sameAsInput0)
      .setVjp(zeroGradient);
  r.add("IncrementMod", d)
      .setReference(unaryKernelWith<kNumeric>([](CompileContext& c) {
        double inc = c.node().attrFloat("increment"), mod = c.node().attrFloat("modulus");
        GRAFT_CHECK(mod != 0.0, "{}: modulus must be nonzero", c.node().describe());
        return [inc, mod](auto x) { return static_cast<decltype(x)>(std::fmod(static_cast<double>(x) + inc, mod)); };
      }))
      .setInfer(sameAsInput0)
      .setVjp([](GradBuilder& g) { g.setDx(0, g.dy()); });
  r.add("BitwiseNot", d)
      .setReference(unaryKernel<kInts>([](auto x) { return static_cast<decltype(x)>(~x); }))
      .setInfer(sameAsInput0);

  r.add("Atan2", d)
      .setReference(binaryKernel<kFloats>([](auto a, auto b) { return std::atan2(a, b); }))
      .setInfer(broadcastInfer)
      .setVjp([](GradBuilder& g) {
        ir::Tensor* a = g.in(0);
        ir::Tensor* b = g.in(1);
        // At the origin atan2 has no derivative; both partials are taken as 0 there (PyTorch's
        // convention) rather than 0/0.
        ir::Tensor* den = g.add(g.mul(a, a), g.mul(b, b));
        ir::Tensor* origin = g.op("Equal", {den, g.scalarLike(0, den)});
        ir::Tensor* safe = g.where(origin, g.scalarLike(1, den), den);
        if (g.wants(0)) g.setDx(0, g.unbroadcast(g.mul(g.dy(), g.div(b, safe)), a));
        if (g.wants(1)) g.setDx(1, g.unbroadcast(g.neg(g.mul(g.dy(), g.div(a, safe))), b));
      });
  r.add("Fmod", d)
      .setReference(binaryKernel<kNumeric>([](auto a, auto b) { return fmodOf(a, b); }))
      .setInfer(broadcastInfer)
      .noGradient({1})
      .setVjp([](GradBuilder& g) { g.setDx(0, g.unbroadcast(g.dy(), g.in(0))); });
  r.add("Remainder", d)
      .setReference(binaryKernel<kNumeric>([](auto a, auto b) { return remainderOf(a, b); }))
      .setInfer(broadcastInfer)
      .noGradient({1})
      .setVjp([](GradBuilder& g) { g.setDx(0, g.unbroadcast(g.dy(), g.in(0))); });
  r.add("ScaledAdd", d)
      .setReference([](CompileContext& c) -> KernelFn {
        double s0 = c.node().attrFloat("scale0", 1.0f), s1 = c.node().attrFloat("scale1", 1.0f);
        return binaryKernel<kFloats>([s0, s1](auto a, auto b) {
          using C = decltype(a);
          return static_cast<C>(s0 * static_cast<double>(a) + s1 * static_cast<double>(b));
        })(c);
      })
      .setInfer(broadcastInfer)
      .setVjp([](GradBuilder& g) {
        double s0 = g.node().attrFloat("scale0", 1.0f), s1 = g.node().attrFloat("scale1", 1.0f);
        if (g.wants(0)) g.setDx(0, g.unbroadcast(g.scale(g.dy(), s0), g.in(0)));
        if (g.wants(1)) g.setDx(1, g.unbroadcast(g.scale(g.dy(), s1), g.in(1)));
      });
}

}  // namespace graft::ops
