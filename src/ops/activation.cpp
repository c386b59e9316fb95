// Pointwise activation functions.
#include <cmath>

#include "ops/elementwise.hpp"
#include "ops/registry.hpp"

namespace graft::ops {
namespace {

KernelFactory clipKernel() {
  return [](CompileContext& c) -> KernelFn {
    std::string what = c.node().describe();
    return [what](KernelContext& k) {
      const NDArray& x = k.input(0);
      dispatch<kNumeric>(x.dtype(), what, [&](auto tag) {
        using T = typename decltype(tag)::type;
        using C = ComputeType<T>;
        C lo = std::numeric_limits<C>::lowest(), hi = std::numeric_limits<C>::max();
        if (k.hasInput(1)) lo = static_cast<C>(k.input(1).data<T>()[0]);
        if (k.hasInput(2)) hi = static_cast<C>(k.input(2).data<T>()[0]);
        NDArray& y = k.allocOutputUninit(0, x.dtype(), x.shape());
        for (int64_t i = 0; i < x.numel(); ++i) {
          C v = static_cast<C>(x.data<T>()[i]);
          y.data<T>()[i] = static_cast<T>(v < lo ? lo : (v > hi ? hi : v));
        }
      });
    };
  };
}

}  // namespace

GRAFT_REGISTER_OPS(activation) {
  r.add("Relu").setReference(unaryKernel<kSignedNumeric>([](auto x) { return x > decltype(x)(0) ? x : decltype(x)(0); }))
      .elementwise().inplace(0);
  r.add("Sigmoid").setReference(unaryKernel<kFloats>([](auto x) {
    using C = decltype(x);
    return x >= C(0) ? C(1) / (C(1) + std::exp(-x)) : std::exp(x) / (C(1) + std::exp(x));
  })).elementwise().inplace(0);
  r.add("Tanh").setReference(unaryKernel<kFloats>([](auto x) { return std::tanh(x); })).elementwise().inplace(0);
  r.add("LeakyRelu").setReference(unaryKernelWith<kFloats>([](CompileContext& c) {
    float alpha = c.node().attrFloat("alpha", 0.01f);
    return [alpha](auto x) { return x >= decltype(x)(0) ? x : static_cast<decltype(x)>(alpha) * x; };
  })).elementwise().inplace(0);
  r.add("Elu").setReference(unaryKernelWith<kFloats>([](CompileContext& c) {
    float alpha = c.node().attrFloat("alpha", 1.0f);
    return [alpha](auto x) { return x >= decltype(x)(0) ? x : static_cast<decltype(x)>(alpha) * (std::exp(x) - decltype(x)(1)); };
  })).elementwise().inplace(0);
  r.add("Selu").setReference(unaryKernelWith<kFloats>([](CompileContext& c) {
    float alpha = c.node().attrFloat("alpha", 1.67326319217681884765625f);
    float gamma = c.node().attrFloat("gamma", 1.05070102214813232421875f);
    return [alpha, gamma](auto x) {
      using C = decltype(x);
      return static_cast<C>(gamma) * (x > C(0) ? x : static_cast<C>(alpha) * (std::exp(x) - C(1)));
    };
  })).elementwise().inplace(0);
  r.add("Celu").setReference(unaryKernelWith<kFloats>([](CompileContext& c) {
    float alpha = c.node().attrFloat("alpha", 1.0f);
    return [alpha](auto x) {
      using C = decltype(x);
      C a = static_cast<C>(alpha);
      return std::max(C(0), x) + std::min(C(0), a * (std::exp(x / a) - C(1)));
    };
  })).elementwise().inplace(0);
  r.add("HardSigmoid").setReference(unaryKernelWith<kFloats>([](CompileContext& c) {
    float alpha = c.node().attrFloat("alpha", 0.2f), beta = c.node().attrFloat("beta", 0.5f);
    return [alpha, beta](auto x) {
      using C = decltype(x);
      return std::max(C(0), std::min(C(1), static_cast<C>(alpha) * x + static_cast<C>(beta)));
    };
  })).elementwise().inplace(0);
  r.add("HardSwish").setReference(unaryKernel<kFloats>([](auto x) {
    using C = decltype(x);
    return x * std::max(C(0), std::min(C(1), x / C(6) + C(0.5)));
  })).elementwise().inplace(0);
  r.add("Softplus").setReference(unaryKernel<kFloats>([](auto x) {
    using C = decltype(x);
    return x > C(0) ? x + std::log1p(std::exp(-x)) : std::log1p(std::exp(x));
  })).elementwise().inplace(0);
  r.add("Softsign").setReference(unaryKernel<kFloats>([](auto x) { return x / (decltype(x)(1) + std::abs(x)); }))
      .elementwise().inplace(0);
  r.add("ThresholdedRelu").setReference(unaryKernelWith<kFloats>([](CompileContext& c) {
    float alpha = c.node().attrFloat("alpha", 1.0f);
    return [alpha](auto x) { return x > static_cast<decltype(x)>(alpha) ? x : decltype(x)(0); };
  })).elementwise().inplace(0);
  r.add("PRelu").setReference(binaryKernel<kSignedNumeric>([](auto x, auto s) { return x < decltype(x)(0) ? s * x : x; }))
      .elementwise();
  r.add("Clip").setReference(clipKernel()).elementwise().noGradient({1, 2});
  // PopART's Gelu (ai.graphcore): the tanh approximation, as PopART computes it.
  r.add("Gelu", kGraphcoreDomain).setReference(unaryKernel<kFloats>([](auto x) {
    using C = decltype(x);
    const C k = C(0.7978845608028654);  // sqrt(2/pi)
    return C(0.5) * x * (C(1) + std::tanh(k * (x + C(0.044715) * x * x * x)));
  })).elementwise().setInfer([](const ir::Node&, const std::vector<ir::ValueType>& in, const std::vector<const NDArray*>&) {
    return std::vector<ir::ValueType>{in.at(0)};
  });
}

}  // namespace graft::ops
