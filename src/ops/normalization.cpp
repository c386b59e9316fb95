// Normalizations: BatchNormalization (inference and training mode), InstanceNormalization,
// LayerNormalization, LRN and MeanVarianceNormalization. Statistics accumulate in double; the
// per-channel parameters may have another float type than the data (BatchNormalization's T1, T2).
#include <array>
#include <cmath>

#include "ops/dtype_dispatch.hpp"
#include "ops/registry.hpp"
#include "ops/shape_util.hpp"

namespace graft::ops {
namespace {

std::vector<double> readDoubles(const NDArray& a, const std::string& what) {
  std::vector<double> v(static_cast<size_t>(a.numel()));
  dispatch<kFloats>(a.dtype(), what, [&](auto tag) {
    using T = typename decltype(tag)::type;
    for (int64_t i = 0; i < a.numel(); ++i) v[i] = static_cast<double>(static_cast<ComputeType<T>>(a.data<T>()[i]));
  });
  return v;
}

NDArray fromDoubles(const std::vector<double>& v, DataType dt, const Shape& shape, const std::string& what) {
  NDArray out = NDArray::uninitialized(dt, shape);
  dispatch<kFloats>(dt, what, [&](auto tag) {
    using T = typename decltype(tag)::type;
    for (int64_t i = 0; i < out.numel(); ++i) out.data<T>()[i] = static_cast<T>(static_cast<ComputeType<T>>(v[i]));
  });
  return out;
}

// A per-channel parameter: a [C] tensor (any float type) read as doubles.
std::vector<double> channelParam(const NDArray& p, int64_t C, const std::string& what, const char* name) {
  GRAFT_CHECK(p.rank() == 1 && p.dim(0) == C, "{}: {} must have shape [{}] (one value per channel), got {}", what, name, C,
              shapeToString(p.shape()));
  return readDoubles(p, what);
}

// The flat offset into `p` of each element of `target`, p broadcasting (numpy-style) to it.
std::vector<int64_t> broadcastOffsets(const Shape& p, const Shape& target, const std::string& what, const char* name) {
  GRAFT_CHECK(p.size() <= target.size() && broadcastShapes(p, target, what) == target,
              "{}: {} of shape {} does not broadcast to {}", what, name, shapeToString(p), shapeToString(target));
  std::vector<int64_t> offs;
  offs.reserve(static_cast<size_t>(shapeNumel(target)));
  std::array<std::vector<int64_t>, 1> st{broadcastStrides(p, target)};
  forEachBroadcastRun<1>(target, st, [&](const auto& off, const auto& inner, int64_t len) {
    for (int64_t j = 0; j < len; ++j) offs.push_back(off[0] + j * inner[0]);
  });
  return offs;
}

// ---- BatchNormalization ------------------------------------------------------------------------

KernelFn batchNormKernel(CompileContext& c) {
  const ir::Node& n = c.node();
  std::string what = n.describe();
  double eps = n.attrFloat("epsilon", 1e-5f);
  double momentum = n.attrFloat("momentum", 0.9f);
  bool training = n.attrInt("training_mode", 0) != 0;
  return [=](KernelContext& k) {
    const NDArray& x = k.input(0);
    GRAFT_CHECK(x.rank() >= 1, "{}: X must have rank >= 1, got a scalar", what);
    // A 1-D input is N samples of one channel.
    int64_t N = x.dim(0), C = x.rank() >= 2 ? x.dim(1) : 1;
    int64_t inner = x.rank() >= 2 ? shapeProduct(x.shape(), 2, x.rank()) : 1;
    auto scale = channelParam(k.input(1), C, what, "scale");
    auto bias = channelParam(k.input(2), C, what, "B");
    auto mean = channelParam(k.input(3), C, what, "input_mean");
    auto var = channelParam(k.input(4), C, what, "input_var");
    auto xs = readDoubles(x, what);
    auto at = [&](int64_t b, int64_t ch, int64_t i) { return (b * C + ch) * inner + i; };
    std::vector<double> useMean = mean, useVar = var;
    if (training) {
      double count = static_cast<double>(N * inner);
      for (int64_t ch = 0; ch < C; ++ch) {
        double s = 0, sq = 0;
        for (int64_t b = 0; b < N; ++b)
          for (int64_t i = 0; i < inner; ++i) s += xs[at(b, ch, i)];
        double m = s / count;
        for (int64_t b = 0; b < N; ++b)
          for (int64_t i = 0; i < inner; ++i) sq += (xs[at(b, ch, i)] - m) * (xs[at(b, ch, i)] - m);
        useMean[ch] = m;
        useVar[ch] = sq / count;  // the population variance, as ONNX specifies
      }
    }
    std::vector<double> ys(xs.size());
    for (int64_t b = 0; b < N; ++b)
      for (int64_t ch = 0; ch < C; ++ch) {
        double a = scale[ch] / std::sqrt(useVar[ch] + eps);
        for (int64_t i = 0; i < inner; ++i) ys[at(b, ch, i)] = (xs[at(b, ch, i)] - useMean[ch]) * a + bias[ch];
      }
    k.setOutput(0, fromDoubles(ys, x.dtype(), x.shape(), what));
    // Outside training mode the running statistics do not move; models converted from opsets
    // before 14 may still name those outputs, so they get the inputs' values.
    std::vector<double> rm = mean, rv = var;
    if (training)
      for (int64_t ch = 0; ch < C; ++ch) {
        rm[ch] = mean[ch] * momentum + useMean[ch] * (1 - momentum);
        rv[ch] = var[ch] * momentum + useVar[ch] * (1 - momentum);
      }
    if (k.wantsOutput(1)) k.setOutput(1, fromDoubles(rm, k.input(3).dtype(), {C}, what));
    if (k.wantsOutput(2)) k.setOutput(2, fromDoubles(rv, k.input(4).dtype(), {C}, what));
  };
}

// ---- InstanceNormalization -----------------------------------------------------------------------

KernelFn instanceNormKernel(CompileContext& c) {
  const ir::Node& n = c.node();
  std::string what = n.describe();
  double eps = n.attrFloat("epsilon", 1e-5f);
  return [=](KernelContext& k) {
    const NDArray& x = k.input(0);
    GRAFT_CHECK(x.rank() >= 2, "{}: input must have shape [N, C, ...], got {}", what, shapeToString(x.shape()));
    int64_t C = x.dim(1), groups = x.dim(0) * C, inner = shapeProduct(x.shape(), 2, x.rank());
    auto scale = channelParam(k.input(1), C, what, "scale");
    auto bias = channelParam(k.input(2), C, what, "B");
    auto xs = readDoubles(x, what);
    std::vector<double> ys(xs.size());
    for (int64_t g = 0; g < groups; ++g) {
      const double* p = xs.data() + g * inner;
      double s = 0, sq = 0;
      for (int64_t i = 0; i < inner; ++i) s += p[i];
      double m = inner ? s / static_cast<double>(inner) : 0.0;
      for (int64_t i = 0; i < inner; ++i) sq += (p[i] - m) * (p[i] - m);
      double v = inner ? sq / static_cast<double>(inner) : 0.0;
      double a = scale[g % C] / std::sqrt(v + eps);
      for (int64_t i = 0; i < inner; ++i) ys[g * inner + i] = (p[i] - m) * a + bias[g % C];
    }
    k.setOutput(0, fromDoubles(ys, x.dtype(), x.shape(), what));
  };
}

// ---- LayerNormalization --------------------------------------------------------------------------

KernelFn layerNormKernel(CompileContext& c) {
  const ir::Node& n = c.node();
  std::string what = n.describe();
  int64_t axisAttr = n.attrInt("axis", -1);
  double eps = n.attrFloat("epsilon", 1e-5f);
  int64_t stash = n.attrInt("stash_type", static_cast<int64_t>(DataType::Float));
  auto stashType = static_cast<DataType>(stash);
  GRAFT_CHECK(stash >= 0 && stash < 32 && ((kFloats >> stash) & 1u),
              "{}: stash_type must be a floating-point type (1 = FLOAT), got {}", what, stash);
  return [=](KernelContext& k) {
    const NDArray& x = k.input(0);
    GRAFT_CHECK(x.rank() >= 1, "{}: X must have rank >= 1, got a scalar", what);
    int64_t axis = normalizeAxis(axisAttr, x.rank(), what);
    Shape norm(x.shape().begin() + axis, x.shape().end());
    int64_t rows = shapeProduct(x.shape(), 0, axis), cols = shapeNumel(norm);
    auto sOff = broadcastOffsets(k.input(1).shape(), norm, what, "Scale");
    auto scale = readDoubles(k.input(1), what);
    std::vector<int64_t> bOff;
    std::vector<double> bias;
    if (k.hasInput(2)) {
      bOff = broadcastOffsets(k.input(2).shape(), norm, what, "B");
      bias = readDoubles(k.input(2), what);
    }
    auto xs = readDoubles(x, what);
    std::vector<double> ys(xs.size()), means(rows), invStd(rows);
    for (int64_t r = 0; r < rows; ++r) {
      const double* p = xs.data() + r * cols;
      double s = 0, sq = 0;
      for (int64_t j = 0; j < cols; ++j) s += p[j];
      double m = cols ? s / static_cast<double>(cols) : 0.0;
      for (int64_t j = 0; j < cols; ++j) sq += (p[j] - m) * (p[j] - m);
      double inv = 1.0 / std::sqrt((cols ? sq / static_cast<double>(cols) : 0.0) + eps);
      means[r] = m;
      invStd[r] = inv;
      for (int64_t j = 0; j < cols; ++j) {
        double y = (p[j] - m) * inv * scale[sOff[j]];
        if (!bias.empty()) y += bias[bOff[j]];
        ys[r * cols + j] = y;
      }
    }
    k.setOutput(0, fromDoubles(ys, x.dtype(), x.shape(), what));
    Shape statShape(x.shape().begin(), x.shape().begin() + axis);
    statShape.resize(x.shape().size(), 1);
    if (k.wantsOutput(1)) k.setOutput(1, fromDoubles(means, stashType, statShape, what));
    if (k.wantsOutput(2)) k.setOutput(2, fromDoubles(invStd, stashType, statShape, what));
  };
}

// ---- LRN -----------------------------------------------------------------------------------------

KernelFn lrnKernel(CompileContext& c) {
  const ir::Node& n = c.node();
  std::string what = n.describe();
  double alpha = n.attrFloat("alpha", 1e-4f), beta = n.attrFloat("beta", 0.75f), bias = n.attrFloat("bias", 1.0f);
  int64_t size = n.attrInt("size");
  GRAFT_CHECK(size >= 1, "{}: size must be >= 1, got {}", what, size);
  return [=](KernelContext& k) {
    const NDArray& x = k.input(0);
    GRAFT_CHECK(x.rank() >= 2, "{}: input must have shape [N, C, ...], got {}", what, shapeToString(x.shape()));
    int64_t N = x.dim(0), C = x.dim(1), inner = shapeProduct(x.shape(), 2, x.rank());
    // The window over channels is [c - floor((size-1)/2), c + ceil((size-1)/2)], clipped.
    int64_t lo = (size - 1) / 2, hi = size - 1 - lo;
    auto xs = readDoubles(x, what);
    std::vector<double> ys(xs.size());
    for (int64_t b = 0; b < N; ++b)
      for (int64_t ch = 0; ch < C; ++ch)
        for (int64_t i = 0; i < inner; ++i) {
          double sq = 0;
          for (int64_t j = std::max<int64_t>(0, ch - lo); j <= std::min(C - 1, ch + hi); ++j) {
            double v = xs[(b * C + j) * inner + i];
            sq += v * v;
          }
          int64_t o = (b * C + ch) * inner + i;
          ys[o] = xs[o] / std::pow(bias + alpha / static_cast<double>(size) * sq, beta);
        }
    k.setOutput(0, fromDoubles(ys, x.dtype(), x.shape(), what));
  };
}

// ---- MeanVarianceNormalization -------------------------------------------------------------------

KernelFn mvnKernel(CompileContext& c) {
  const ir::Node& n = c.node();
  std::string what = n.describe();
  std::vector<int64_t> axesAttr = n.attrInts("axes", {0, 2, 3});
  return [=](KernelContext& k) {
    const NDArray& x = k.input(0);
    std::vector<bool> reduced(static_cast<size_t>(x.rank()), false);
    for (int64_t a : normalizeAxes(axesAttr, x.rank(), what)) reduced[static_cast<size_t>(a)] = true;
    // Each output element's group is identified by its coordinates on the kept axes.
    Shape keptShape;
    for (size_t d = 0; d < reduced.size(); ++d) keptShape.push_back(reduced[d] ? 1 : x.dim(static_cast<int64_t>(d)));
    auto group = broadcastOffsets(keptShape, x.shape(), what, "statistics");
    int64_t groups = shapeNumel(keptShape);
    auto xs = readDoubles(x, what);
    std::vector<double> sum(groups, 0.0), sq(groups, 0.0), cnt(groups, 0.0);
    for (size_t i = 0; i < xs.size(); ++i) {
      sum[group[i]] += xs[i];
      cnt[group[i]] += 1;
    }
    for (int64_t g = 0; g < groups; ++g) sum[g] = cnt[g] > 0 ? sum[g] / cnt[g] : 0.0;
    for (size_t i = 0; i < xs.size(); ++i) sq[group[i]] += (xs[i] - sum[group[i]]) * (xs[i] - sum[group[i]]);
    std::vector<double> ys(xs.size());
    // ONNX's function body adds 1e-9 to the standard deviation.
    for (size_t i = 0; i < xs.size(); ++i) {
      int64_t g = group[i];
      ys[i] = (xs[i] - sum[g]) / (std::sqrt(sq[g] / cnt[g]) + 1e-9);
    }
    k.setOutput(0, fromDoubles(ys, x.dtype(), x.shape(), what));
  };
}

}  // namespace

GRAFT_REGISTER_OPS(normalization) {
  r.add("BatchNormalization").setReference(batchNormKernel).noGradient({3, 4});
  r.add("InstanceNormalization").setReference(instanceNormKernel);
  r.add("LayerNormalization").setReference(layerNormKernel);
  r.add("LRN").setReference(lrnKernel);
  r.add("MeanVarianceNormalization").setReference(mvnKernel);
}

}  // namespace graft::ops
