// ai.graft ops that the training-mode pass (passes/training_mode.cpp) puts into training graphs:
//
// - Dropout(data, ratio?, training_mode?, seed) -> (output, mask): ONNX's Dropout whose mask is
//   a pure function of a seed tensor (INT64 [2]: seed, step), the node's `stream` attribute, its
//   `replica` attribute (replication's global replica index, 0 when absent) and the element's
//   position. The step advances once per training step, in the graph; since the
//   seed tensor is a Variable saved with the weights, a run resumed from a checkpoint draws the
//   masks the uninterrupted run would have drawn. (ONNX's own Dropout draws from a generator
//   held by the kernel, which no checkpoint captures.)
// - Assign(target, value): writes value into the Variable target, in place (running statistics,
//   the dropout step). It has side effects and no outputs; whoever adds it orders it after the
//   target's readers.
#include <cstring>

#include "ops/dtype_dispatch.hpp"
#include "ops/grad.hpp"
#include "ops/registry.hpp"
#include "ops/shape_util.hpp"

namespace graft::ops {
namespace {

// SplitMix64's output function: a bijective mix with good avalanche, so consecutive counters
// give independent-looking 64-bit values.
uint64_t mix64(uint64_t z) {
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
  return z ^ (z >> 31);
}
constexpr uint64_t kGolden = 0x9e3779b97f4a7c15ULL;

double scalarOf(const NDArray& a, const std::string& what, const char* name) {
  GRAFT_CHECK(a.numel() == 1, "{}: input '{}' must hold one value, got shape {}", what, name, shapeToString(a.shape()));
  return dispatch<kNumericBool>(a.dtype(), what, [&](auto tag) {
    using T = typename decltype(tag)::type;
    return static_cast<double>(static_cast<ComputeType<T>>(a.data<T>()[0]));
  });
}

KernelFn dropoutKernel(CompileContext& c) {
  const ir::Node& n = c.node();
  std::string what = n.describe();
  auto stream = static_cast<uint64_t>(n.attrInt("stream", 0));
  // Replication sets `replica` (the global replica index) on each replica's copy, so that every
  // replica draws its own masks from the one session seed.
  auto replica = static_cast<uint64_t>(n.attrInt("replica", 0));
  return [=](KernelContext& k) {
    const NDArray& x = k.input(0);
    const NDArray& seed = k.input(3);
    GRAFT_CHECK(seed.dtype() == DataType::Int64 && seed.shape() == Shape{2},
                "{}: the seed must be INT64 [2] (seed, step), got {} {}", what, dtypeName(seed.dtype()),
                shapeToString(seed.shape()));
    bool training = !k.hasInput(2) || scalarOf(k.input(2), what, "training_mode") != 0.0;
    double ratio = k.hasInput(1) ? scalarOf(k.input(1), what, "ratio") : 0.5;
    NDArray& mask = k.allocOutputUninit(1, DataType::Bool, x.shape());
    bool* m = mask.data<bool>();
    if (!training || ratio == 0.0) {
      k.setOutput(0, x);
      std::fill(m, m + mask.numel(), true);
      return;
    }
    GRAFT_CHECK(ratio > 0.0 && ratio < 1.0, "{}: ratio value {} is not valid. Please use a value in the interval [0,1)",
                what, ratio);
    const auto* s = seed.data<int64_t>();
    uint64_t key = mix64(mix64(mix64(static_cast<uint64_t>(s[0]) + kGolden) ^ static_cast<uint64_t>(s[1])) ^ stream);
    if (replica) key = mix64(key ^ mix64(replica * kGolden));
    for (int64_t i = 0; i < x.numel(); ++i) {
      // 53 random bits as a double in [0, 1).
      double u = static_cast<double>(mix64(key + static_cast<uint64_t>(i + 1) * kGolden) >> 11) * 0x1.0p-53;
      m[i] = u >= ratio;
    }
    NDArray& y = k.allocOutputUninit(0, x.dtype(), x.shape());
    dispatch<kFloats>(x.dtype(), what, [&](auto tag) {
      using T = typename decltype(tag)::type;
      using C = ComputeType<T>;
      auto scale = static_cast<C>(1.0 / (1.0 - ratio));
      const T* xs = x.data<T>();
      T* ys = y.data<T>();
      for (int64_t i = 0; i < x.numel(); ++i) ys[i] = m[i] ? static_cast<T>(static_cast<C>(xs[i]) * scale) : T(C(0));
    });
  };
}

KernelFn assignKernel(CompileContext& c) {
  std::string what = c.node().describe();
  return [what](KernelContext& k) {
    NDArray target = k.input(0);
    const NDArray& value = k.input(1);
    GRAFT_CHECK(target.dtype() == value.dtype() && target.shape() == value.shape(),
                "{}: cannot assign {} {} to a tensor of {} {}", what, dtypeName(value.dtype()),
                shapeToString(value.shape()), dtypeName(target.dtype()), shapeToString(target.shape()));
    if (target.rawData() != value.rawData()) target.copyFrom(value);
  };
}

// dy / (1 - ratio) where the mask kept the element, 0 elsewhere; outside training mode the mask
// keeps everything and the scale is 1. `trainsWithoutMode`: whether a missing training_mode
// input means training (ai.graft's Dropout) or not (ONNX's).
VjpFn dropoutVjp(bool trainsWithoutMode) {
  return [trainsWithoutMode](GradBuilder& g) {
    if (!g.in(2) && !trainsWithoutMode) {
      g.setDx(0, g.dy());
      return;
    }
    GRAFT_CHECK(g.out(1), "{}: the gradient in training mode needs the mask output", g.node().describe());
    ir::Tensor* x = g.in(0);
    ir::Tensor* one = g.scalarLike(1, x);
    ir::Tensor* scale = g.in(1) ? g.op("Reciprocal", {g.sub(one, g.op("CastLike", {g.in(1), x}))}) : g.scalarLike(2, x);
    if (g.in(2)) {
      ir::Attributes toBool;
      toBool.set("to", static_cast<int64_t>(DataType::Bool));
      scale = g.where(g.op("Cast", {g.in(2)}, toBool), scale, one);
    }
    g.setDx(0, g.where(g.out(1), g.mul(g.dy(), scale), g.scalarLike(0, x)));
  };
}

}  // namespace

GRAFT_REGISTER_OPS(training_mode_ops) {
  r.add("Dropout", kGraftDomain)
      .setReference(dropoutKernel)
      .nondeterministic()
      .noGradient({1, 2, 3})
      .setInfer([](const ir::Node&, const std::vector<ir::ValueType>& in, const std::vector<const NDArray*>&) {
        ir::ValueType mask = in.at(0);
        mask.info.setDataType(DataType::Bool);
        return std::vector<ir::ValueType>{in.at(0), mask};
      })
      .setVjp(dropoutVjp(true));
  // ONNX's Dropout (src/ops/random.cpp has its kernel): without a training_mode input it is the
  // identity; TrainingSession replaces it by the op above.
  r.add("Dropout").noGradient({1, 2}).setVjp(dropoutVjp(false));
  r.add("Assign", kGraftDomain)
      .setReference(assignKernel)
      .sideEffects()
      .setInfer([](const ir::Node&, const std::vector<ir::ValueType>&, const std::vector<const NDArray*>&) {
        return std::vector<ir::ValueType>{};
      });
}

}  // namespace graft::ops
