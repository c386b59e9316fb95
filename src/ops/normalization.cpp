// Normalizations: BatchNormalization (inference and training mode), InstanceNormalization,
// LayerNormalization, GroupNormalization, RMSNormalization, LpNormalization, LRN and
// MeanVarianceNormalization. Statistics accumulate in double; the
// per-channel parameters may have another float type than the data (BatchNormalization's T1, T2).
#include <array>
#include <cmath>

#include "onnx/schema_infer.hpp"
#include "ops/cost.hpp"
#include "ops/dtype_dispatch.hpp"
#include "ops/fallback_infer.hpp"
#include "ops/registry.hpp"
#include "ops/shape_util.hpp"

namespace graft::ops {
namespace {

// A per-channel parameter: a [C] tensor (any float type) read as doubles.
std::vector<double> channelParam(const NDArray& p, int64_t C, const std::string& what, const char* name) {
  GRAFT_CHECK(p.rank() == 1 && p.dim(0) == C, "{}: {} must have shape [{}] (one value per channel), got {}", what, name,
              C, shapeToString(p.shape()));
  return readAsDoubles(p, what);
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
    auto xs = readAsDoubles(x, what);
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
    k.setOutput(0, arrayFromDoubles(ys, x.dtype(), x.shape(), what));
    // Outside training mode the running statistics do not move; models converted from opsets
    // before 14 may still name those outputs, so they get the inputs' values.
    std::vector<double> rm = mean, rv = var;
    if (training)
      for (int64_t ch = 0; ch < C; ++ch) {
        rm[ch] = mean[ch] * momentum + useMean[ch] * (1 - momentum);
        rv[ch] = var[ch] * momentum + useVar[ch] * (1 - momentum);
      }
    if (k.wantsOutput(1)) k.setOutput(1, arrayFromDoubles(rm, k.input(3).dtype(), {C}, what));
    if (k.wantsOutput(2)) k.setOutput(2, arrayFromDoubles(rv, k.input(4).dtype(), {C}, what));
  };
}

// The statistics of one contiguous run of n values, in double: the mean (0 when not `centred`)
// and 1 / sqrt(variance + eps), the variance being the mean squared deviation from it (the
// population variance; with centred = false, the mean square: RMSNormalization's).
struct Moments {
  double mean = 0, invStd = 0;
};
Moments moments(const double* p, int64_t n, double eps, bool centred = true) {
  double m = 0, sq = 0;
  if (centred && n) {
    for (int64_t i = 0; i < n; ++i) m += p[i];
    m /= static_cast<double>(n);
  }
  for (int64_t i = 0; i < n; ++i) sq += (p[i] - m) * (p[i] - m);
  return {m, 1.0 / std::sqrt((n ? sq / static_cast<double>(n) : 0.0) + eps)};
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
    auto xs = readAsDoubles(x, what);
    std::vector<double> ys(xs.size());
    for (int64_t g = 0; g < groups; ++g) {
      const double* p = xs.data() + g * inner;
      Moments st = moments(p, inner, eps);
      double a = scale[g % C] * st.invStd;
      for (int64_t i = 0; i < inner; ++i) ys[g * inner + i] = (p[i] - st.mean) * a + bias[g % C];
    }
    k.setOutput(0, arrayFromDoubles(ys, x.dtype(), x.shape(), what));
  };
}

// ---- LayerNormalization --------------------------------------------------------------------------

// The stash_type attribute: the statistics are computed in double whatever it says, so any
// floating-point type is accepted (a narrower stash would only lose precision).
void checkStashType(const ir::Node& n, const std::string& what) {
  int64_t stash = n.attrInt("stash_type", static_cast<int64_t>(DataType::Float));
  GRAFT_CHECK(stash >= 0 && stash < 32 && ((kFloats >> stash) & 1u),
              "{}: stash_type must be a floating-point type (1 = FLOAT), got {}", what, stash);
}

KernelFn layerNormKernel(CompileContext& c) {
  const ir::Node& n = c.node();
  std::string what = n.describe();
  int64_t axisAttr = n.attrInt("axis", -1);
  double eps = n.attrFloat("epsilon", 1e-5f);
  checkStashType(n, what);
  auto stashType = static_cast<DataType>(n.attrInt("stash_type", static_cast<int64_t>(DataType::Float)));
  return [=](KernelContext& k) {
    const NDArray& x = k.input(0);
    AxisRows v = axisRows(x, axisAttr, what);
    const int64_t axis = v.axis, rows = v.rows, cols = v.cols;
    const Shape& norm = v.norm;
    auto sOff = broadcastOffsets(k.input(1).shape(), norm, what, "Scale");
    auto scale = readAsDoubles(k.input(1), what);
    std::vector<int64_t> bOff;
    std::vector<double> bias;
    if (k.hasInput(2)) {
      bOff = broadcastOffsets(k.input(2).shape(), norm, what, "B");
      bias = readAsDoubles(k.input(2), what);
    }
    auto xs = readAsDoubles(x, what);
    std::vector<double> ys(xs.size()), means(rows), invStd(rows);
    for (int64_t r = 0; r < rows; ++r) {
      const double* p = xs.data() + r * cols;
      Moments st = moments(p, cols, eps);
      means[r] = st.mean;
      invStd[r] = st.invStd;
      for (int64_t j = 0; j < cols; ++j) {
        double y = (p[j] - st.mean) * st.invStd * scale[sOff[j]];
        if (!bias.empty()) y += bias[bOff[j]];
        ys[r * cols + j] = y;
      }
    }
    k.setOutput(0, arrayFromDoubles(ys, x.dtype(), x.shape(), what));
    Shape statShape(x.shape().begin(), x.shape().begin() + axis);
    statShape.resize(x.shape().size(), 1);
    if (k.wantsOutput(1)) k.setOutput(1, arrayFromDoubles(means, stashType, statShape, what));
    if (k.wantsOutput(2)) k.setOutput(2, arrayFromDoubles(invStd, stashType, statShape, what));
  };
}

// ai.graft LayerNormalizationGrad(dY, X, Scale) -> dX, dScale, dB (attributes axis, epsilon), the
// gradient of LayerNormalization whose Scale (and B) have the normalised shape: per row, with
// x-hat = (x - mean) inv and g = dY Scale,
//   dX = inv (g - mean(g) - x-hat mean(g x-hat)),
// and over the rows dScale = sum dY x-hat, dB = sum dY. The statistics are recomputed from X.
KernelFn layerNormGradKernel(CompileContext& c) {
  const ir::Node& n = c.node();
  std::string what = n.describe();
  int64_t axisAttr = n.attrInt("axis", -1);
  double eps = n.attrFloat("epsilon", 1e-5f);
  return [=](KernelContext& k) {
    const NDArray &dyA = k.input(0), &x = k.input(1), &scaleA = k.input(2);
    GRAFT_CHECK(dyA.shape() == x.shape(), "{}: dY has shape {}, X has {}", what, shapeToString(dyA.shape()),
                shapeToString(x.shape()));
    AxisRows v = axisRows(x, axisAttr, what);
    GRAFT_CHECK(scaleA.shape() == v.norm, "{}: Scale must have the normalised shape {}, got {}", what,
                shapeToString(v.norm), shapeToString(scaleA.shape()));
    auto xs = readAsDoubles(x, what), dy = readAsDoubles(dyA, what), scale = readAsDoubles(scaleA, what);
    const int64_t rows = v.rows, cols = v.cols;
    std::vector<double> dx(xs.size()), dScale(cols, 0.0), dB(cols, 0.0), xhat(cols);
    for (int64_t r = 0; r < rows; ++r) {
      const double* p = xs.data() + r * cols;
      const double* d = dy.data() + r * cols;
      Moments st = moments(p, cols, eps);
      double sumG = 0, sumGX = 0;
      for (int64_t j = 0; j < cols; ++j) {
        xhat[j] = (p[j] - st.mean) * st.invStd;
        sumG += d[j] * scale[j];
        sumGX += d[j] * scale[j] * xhat[j];
        dScale[j] += d[j] * xhat[j];
        dB[j] += d[j];
      }
      double meanG = sumG / static_cast<double>(cols), meanGX = sumGX / static_cast<double>(cols);
      for (int64_t j = 0; j < cols; ++j) dx[r * cols + j] = st.invStd * (d[j] * scale[j] - meanG - xhat[j] * meanGX);
    }
    k.setOutput(0, arrayFromDoubles(dx, x.dtype(), x.shape(), what));
    if (k.wantsOutput(1)) k.setOutput(1, arrayFromDoubles(dScale, scaleA.dtype(), v.norm, what));
    if (k.wantsOutput(2)) k.setOutput(2, arrayFromDoubles(dB, scaleA.dtype(), v.norm, what));
  };
}

// ---- GroupNormalization (opset 21), RMSNormalization (23), LpNormalization (22) -----------------

KernelFn groupNormKernel(CompileContext& c) {
  const ir::Node& n = c.node();
  std::string what = n.describe();
  int64_t groups = n.attrInt("num_groups");
  double eps = n.attrFloat("epsilon", 1e-5f);
  checkStashType(n, what);
  GRAFT_CHECK(groups >= 1, "{}: num_groups must be >= 1, got {}", what, groups);
  return [=](KernelContext& k) {
    const NDArray& x = k.input(0);
    GRAFT_CHECK(x.rank() >= 2, "{}: X must have shape [N, C, ...], got {}", what, shapeToString(x.shape()));
    int64_t N = x.dim(0), C = x.dim(1), inner = shapeProduct(x.shape(), 2, x.rank());
    GRAFT_CHECK(C % groups == 0, "{}: the {} channels do not divide into num_groups = {}", what, C, groups);
    auto scale = channelParam(k.input(1), C, what, "scale");
    auto bias = channelParam(k.input(2), C, what, "bias");
    auto xs = readAsDoubles(x, what);
    std::vector<double> ys(xs.size());
    int64_t perGroup = (C / groups) * inner;
    for (int64_t b = 0; b < N * groups; ++b) {
      const double* p = xs.data() + b * perGroup;
      Moments st = moments(p, perGroup, eps);
      for (int64_t i = 0; i < perGroup; ++i) {
        int64_t ch = (b % groups) * (C / groups) + i / std::max<int64_t>(inner, 1);
        ys[b * perGroup + i] = (p[i] - st.mean) * st.invStd * scale[ch] + bias[ch];
      }
    }
    k.setOutput(0, arrayFromDoubles(ys, x.dtype(), x.shape(), what));
  };
}

KernelFn rmsNormKernel(CompileContext& c) {
  const ir::Node& n = c.node();
  std::string what = n.describe();
  int64_t axisAttr = n.attrInt("axis", -1);
  double eps = n.attrFloat("epsilon", 1e-5f);
  checkStashType(n, what);
  return [=](KernelContext& k) {
    const NDArray& x = k.input(0);
    AxisRows v = axisRows(x, axisAttr, what);
    const int64_t rows = v.rows, cols = v.cols;
    auto sOff = broadcastOffsets(k.input(1).shape(), v.norm, what, "scale");
    auto scale = readAsDoubles(k.input(1), what);
    auto xs = readAsDoubles(x, what);
    std::vector<double> ys(xs.size());
    for (int64_t r = 0; r < rows; ++r) {
      const double* p = xs.data() + r * cols;
      double inv = moments(p, cols, eps, /*centred=*/false).invStd;
      for (int64_t j = 0; j < cols; ++j) ys[r * cols + j] = p[j] * inv * scale[sOff[j]];
    }
    k.setOutput(0, arrayFromDoubles(ys, x.dtype(), x.shape(), what));
  };
}

KernelFn lpNormKernel(CompileContext& c) {
  const ir::Node& n = c.node();
  std::string what = n.describe();
  int64_t axisAttr = n.attrInt("axis", -1), p = n.attrInt("p", 2);
  GRAFT_CHECK(p == 1 || p == 2, "{}: p must be 1 or 2, got {}", what, p);
  return [=](KernelContext& k) {
    const NDArray& x = k.input(0);
    GRAFT_CHECK(x.rank() >= 1, "{}: input must have rank >= 1, got a scalar", what);
    int64_t axis = normalizeAxis(axisAttr, x.rank(), what);
    int64_t outer = shapeProduct(x.shape(), 0, axis), len = x.dim(axis),
            inner = shapeProduct(x.shape(), axis + 1, x.rank());
    auto xs = readAsDoubles(x, what);
    std::vector<double> ys(xs.size());
    for (int64_t o = 0; o < outer; ++o)
      for (int64_t i = 0; i < inner; ++i) {
        double acc = 0;
        for (int64_t j = 0; j < len; ++j) {
          double v = xs[(o * len + j) * inner + i];
          acc += p == 1 ? std::abs(v) : v * v;
        }
        double norm = p == 1 ? acc : std::sqrt(acc);
        // A zero vector stays zero (instead of 0/0).
        for (int64_t j = 0; j < len; ++j) {
          int64_t at = (o * len + j) * inner + i;
          ys[at] = norm == 0 ? 0.0 : xs[at] / norm;
        }
      }
    k.setOutput(0, arrayFromDoubles(ys, x.dtype(), x.shape(), what));
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
    auto xs = readAsDoubles(x, what);
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
    k.setOutput(0, arrayFromDoubles(ys, x.dtype(), x.shape(), what));
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
    auto xs = readAsDoubles(x, what);
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
    k.setOutput(0, arrayFromDoubles(ys, x.dtype(), x.shape(), what));
  };
}

// ---- gradient ops --------------------------------------------------------------------------------

// BatchNormalizationGrad(dY, X, scale[, mean, var]) -> dX, dScale, dB: the gradient of batch
// normalization with batch statistics. A dedicated op rather than forward ops because the
// statistics, the two channel sums and dX are each one pass over X, and fast libraries have a
// primitive for it (oneDNN's batch-norm backward). Without mean and var it computes them.
KernelFn batchNormGradKernel(CompileContext& c) {
  const ir::Node& n = c.node();
  std::string what = n.describe();
  double eps = n.attrFloat("epsilon", 1e-5f);
  return [=](KernelContext& k) {
    const NDArray& dyA = k.input(0);
    const NDArray& x = k.input(1);
    GRAFT_CHECK(x.rank() >= 1, "{}: X must have rank >= 1, got a scalar", what);
    GRAFT_CHECK(dyA.shape() == x.shape(), "{}: dY has shape {}, X has {}", what, shapeToString(dyA.shape()),
                shapeToString(x.shape()));
    int64_t N = x.dim(0), C = x.rank() >= 2 ? x.dim(1) : 1;
    int64_t inner = x.rank() >= 2 ? shapeProduct(x.shape(), 2, x.rank()) : 1;
    auto scale = channelParam(k.input(2), C, what, "scale");
    auto xs = readAsDoubles(x, what);
    auto dy = readAsDoubles(dyA, what);
    auto at = [&](int64_t b, int64_t ch, int64_t i) { return (b * C + ch) * inner + i; };
    auto count = static_cast<double>(N * inner);
    std::vector<double> mean(C, 0.0), var(C, 0.0);
    if (k.hasInput(3) && k.hasInput(4)) {
      mean = channelParam(k.input(3), C, what, "mean");
      var = channelParam(k.input(4), C, what, "var");
    } else if (count > 0) {
      for (int64_t ch = 0; ch < C; ++ch) {
        double s = 0, sq = 0;
        for (int64_t b = 0; b < N; ++b)
          for (int64_t i = 0; i < inner; ++i) s += xs[at(b, ch, i)];
        mean[ch] = s / count;
        for (int64_t b = 0; b < N; ++b)
          for (int64_t i = 0; i < inner; ++i) sq += (xs[at(b, ch, i)] - mean[ch]) * (xs[at(b, ch, i)] - mean[ch]);
        var[ch] = sq / count;
      }
    }
    std::vector<double> dx(xs.size()), dScale(C, 0.0), dB(C, 0.0);
    for (int64_t ch = 0; ch < C; ++ch) {
      double inv = 1.0 / std::sqrt(var[ch] + eps);
      for (int64_t b = 0; b < N; ++b)
        for (int64_t i = 0; i < inner; ++i) {
          int64_t o = at(b, ch, i);
          dB[ch] += dy[o];
          dScale[ch] += dy[o] * (xs[o] - mean[ch]) * inv;
        }
      for (int64_t b = 0; b < N; ++b)
        for (int64_t i = 0; i < inner; ++i) {
          int64_t o = at(b, ch, i);
          double xhat = (xs[o] - mean[ch]) * inv;
          dx[o] = scale[ch] * inv * (dy[o] - dB[ch] / count - xhat * dScale[ch] / count);
        }
    }
    k.setOutput(0, arrayFromDoubles(dx, x.dtype(), x.shape(), what));
    if (k.wantsOutput(1)) k.setOutput(1, arrayFromDoubles(dScale, k.input(2).dtype(), {C}, what));
    if (k.wantsOutput(2)) k.setOutput(2, arrayFromDoubles(dB, k.input(2).dtype(), {C}, what));
  };
}

// LRNGrad(dY, X) -> dX with LRN's attributes. Each input channel reaches the outputs of the
// channels whose window holds it; forward ops would need a padded prefix sum over channels for
// that window, so one loop is both shorter and faster.
KernelFn lrnGradKernel(CompileContext& c) {
  const ir::Node& n = c.node();
  std::string what = n.describe();
  double alpha = n.attrFloat("alpha", 1e-4f), beta = n.attrFloat("beta", 0.75f), bias = n.attrFloat("bias", 1.0f);
  int64_t size = n.attrInt("size");
  GRAFT_CHECK(size >= 1, "{}: size must be >= 1, got {}", what, size);
  return [=](KernelContext& k) {
    const NDArray& dyA = k.input(0);
    const NDArray& x = k.input(1);
    GRAFT_CHECK(x.rank() >= 2, "{}: X must have shape [N, C, ...], got {}", what, shapeToString(x.shape()));
    GRAFT_CHECK(dyA.shape() == x.shape(), "{}: dY has shape {}, X has {}", what, shapeToString(dyA.shape()),
                shapeToString(x.shape()));
    int64_t N = x.dim(0), C = x.dim(1), inner = shapeProduct(x.shape(), 2, x.rank());
    int64_t lo = (size - 1) / 2, hi = size - 1 - lo;
    double a = alpha / static_cast<double>(size);
    auto xs = readAsDoubles(x, what);
    auto dy = readAsDoubles(dyA, what);
    std::vector<double> d(xs.size()), t(xs.size()), dx(xs.size());
    auto at = [&](int64_t b, int64_t ch, int64_t i) { return (b * C + ch) * inner + i; };
    // d = bias + a * (window sum of x^2); t = dy * x * d^(-beta-1).
    for (int64_t b = 0; b < N; ++b)
      for (int64_t ch = 0; ch < C; ++ch)
        for (int64_t i = 0; i < inner; ++i) {
          double sq = 0;
          for (int64_t j = std::max<int64_t>(0, ch - lo); j <= std::min(C - 1, ch + hi); ++j)
            sq += xs[at(b, j, i)] * xs[at(b, j, i)];
          int64_t o = at(b, ch, i);
          d[o] = bias + a * sq;
          t[o] = dy[o] * xs[o] * std::pow(d[o], -beta - 1);
        }
    // Channel k is in the window of channels c in [k - hi, k + lo].
    for (int64_t b = 0; b < N; ++b)
      for (int64_t ch = 0; ch < C; ++ch)
        for (int64_t i = 0; i < inner; ++i) {
          double s = 0;
          for (int64_t j = std::max<int64_t>(0, ch - hi); j <= std::min(C - 1, ch + lo); ++j) s += t[at(b, j, i)];
          int64_t o = at(b, ch, i);
          dx[o] = dy[o] * std::pow(d[o], -beta) - 2.0 * beta * a * xs[o] * s;
        }
    k.setOutput(0, arrayFromDoubles(dx, x.dtype(), x.shape(), what));
  };
}

// ONNX's inference of opset-9 BatchNormalization types only Y; the training outputs (running
// mean and variance, saved mean and variance) have the types of the mean and var inputs.
std::vector<ir::ValueType> inferBatchNorm(const ir::Node& n, const std::vector<ir::ValueType>& in,
                                          const std::vector<const NDArray*>& consts) {
  std::vector<ir::ValueType> out = onnxio::inferWithOnnxSchema(n, in, consts);
  out.resize(n.numOutputs());
  for (size_t i = 1; i < out.size(); ++i) {
    size_t from = i % 2 == 1 ? 3 : 4;  // 1, 3: mean; 2, 4: var
    if (!out[i].known() && from < in.size() && in[from].known()) out[i] = in[from];
  }
  return out;
}

}  // namespace

GRAFT_REGISTER_OPS(normalization) {
  r.add("BatchNormalization").setReference(batchNormKernel).setInfer(inferBatchNorm).noGradient({3, 4});
  r.add("InstanceNormalization").setReference(instanceNormKernel);
  r.add("LayerNormalization").setReference(layerNormKernel);
  r.add("LRN").setReference(lrnKernel);
  r.add("GroupNormalization").setReference(groupNormKernel);
  r.add("RMSNormalization").setReference(rmsNormKernel);
  r.add("LpNormalization").setReference(lpNormKernel);
  // ONNX defines MeanVarianceNormalization by a function body, without an inference function of
  // its own: the output has the input's type and shape.
  r.add("MeanVarianceNormalization")
      .setReference(mvnKernel)
      .setInfer([](const ir::Node&, const std::vector<ir::ValueType>& in, const std::vector<const NDArray*>&) {
        return std::vector<ir::ValueType>{in.at(0)};
      });
  r.add("BatchNormalizationGrad", kGraftDomain)
      .setReference(batchNormGradKernel)
      // Per element of X: the two channel sums (dY, dY * x-hat) and dX's formula.
      .setCost([](const ir::Node& n) { return 6.0 * cost::numel(n.input(1)); })
      .setInfer([](const ir::Node&, const std::vector<ir::ValueType>& in, const std::vector<const NDArray*>&) {
        const ir::ValueType& channel = in.at(2);  // dScale and dB: scale's type and shape
        return std::vector<ir::ValueType>{in.at(1), channel, channel};
      });
  r.add("LayerNormalizationGrad", kGraftDomain)
      .setReference(layerNormGradKernel)
      // Per element of X: the statistics, the row sums and dScale, dB, and dX's formula.
      .setCost([](const ir::Node& n) { return 8.0 * cost::numel(n.input(1)); })
      .setInfer([](const ir::Node&, const std::vector<ir::ValueType>& in, const std::vector<const NDArray*>&) {
        return std::vector<ir::ValueType>{in.at(1), in.at(2), in.at(2)};  // dX like X; dScale, dB like Scale
      });
  r.add("LRNGrad", kGraftDomain)
      .setReference(lrnGradKernel)
      .setInfer([](const ir::Node&, const std::vector<ir::ValueType>& in, const std::vector<const NDArray*>&) {
        return std::vector<ir::ValueType>{in.at(1)};
      });
  // Until the linked onnx has their schemas (opset > 17).
  setFallbackInfer("", "GroupNormalization", sameTypeAsInput(0));
  setFallbackInfer("", "RMSNormalization", sameTypeAsInput(0));
  setFallbackInfer("", "LpNormalization", sameTypeAsInput(0));
}

}  // namespace graft::ops

// ---- gradients ----------------------------------------------------------------------------------
#include "ops/grad.hpp"

namespace graft::ops {
namespace {

std::vector<int64_t> range(int64_t from, int64_t to) {
  std::vector<int64_t> v;
  for (int64_t i = from; i < to; ++i) v.push_back(i);
  return v;
}

// Reductions over fixed axes, keeping them or not; over no axis they are the identity.
ir::Tensor* sumOver(GradBuilder& g, ir::Tensor* t, const std::vector<int64_t>& axes, bool keep) {
  if (axes.empty()) return t;
  ir::Attributes a;
  a.set("keepdims", int64_t{keep});
  return g.op("ReduceSum", {t, g.int64s(axes)}, a);
}
ir::Tensor* meanOver(GradBuilder& g, ir::Tensor* t, const std::vector<int64_t>& axes) {
  if (axes.empty()) return t;
  ir::Attributes a;
  a.set("keepdims", int64_t{1});
  return g.op("ReduceMean", {t, g.int64s(axes)}, a);
}

ir::Tensor* castLike(GradBuilder& g, ir::Tensor* t, ir::Tensor* like) {
  if (t->info().dataType() == like->info().dataType()) return t;
  return g.op("CastLike", {t, like});
}

// A [C] parameter shaped [C, 1, ...] to broadcast over X of the given rank ([N, C, ...]).
ir::Tensor* perChannel(GradBuilder& g, ir::Tensor* p, int64_t rank) {
  if (rank <= 2) return p;
  return g.op("Unsqueeze", {p, g.int64s(range(1, rank - 1))});
}

// numel(b) / numel(a) in a's type: 1/count of the elements behind each statistic.
ir::Tensor* sizeRatio(GradBuilder& g, ir::Tensor* b, ir::Tensor* a) {
  if (a->info().isStatic() && b->info().isStatic()) {
    int64_t na = a->info().nelms(), nb = b->info().nelms();
    return g.scalarLike(na == 0 ? 0.0 : static_cast<double>(nb) / static_cast<double>(na), a);
  }
  return g.div(g.op("CastLike", {g.op("Size", {b}), a}), g.op("CastLike", {g.op("Size", {a}), a}));
}

int64_t rankOf(GradBuilder& g, ir::Tensor* x) {
  GRAFT_CHECK(x->info().hasShape(), "{}: the gradient needs the rank of '{}', which is not known", g.node().describe(),
              x->id());
  return x->info().rank();
}

// dX of y = xhat * gamma + beta, xhat = (x - mean) * inv over `axes`, given gy = dy * gamma:
// inv * (gy - mean(gy) - xhat * mean(gy * xhat)).
ir::Tensor* normalizedGrad(GradBuilder& g, ir::Tensor* gy, ir::Tensor* xhat, ir::Tensor* inv,
                           const std::vector<int64_t>& axes) {
  ir::Tensor* centred = g.sub(gy, meanOver(g, gy, axes));
  return g.mul(inv, g.sub(centred, g.mul(xhat, meanOver(g, g.mul(gy, xhat), axes))));
}

void batchNormVjp(GradBuilder& g) {
  const ir::Node& n = g.node();
  ir::Tensor *x = g.in(0), *scale = g.in(1), *bias = g.in(2);
  int64_t rank = rankOf(g, x);
  std::vector<int64_t> axes = range(0, rank);
  if (rank >= 2) axes.erase(axes.begin() + 1);  // every axis but the channels
  ir::Tensor* dy = g.dy(0);
  if (n.attrInt("training_mode", 0) != 0) {
    float momentum = n.attrFloat("momentum", 0.9f);
    std::vector<ir::Tensor*> ins{dy, x, scale};
    // With momentum 0 the "running" outputs are the batch statistics (the training-mode pass
    // asks for that): the gradient op reads them instead of computing them again.
    if (momentum == 0.0f && g.out(1) && g.out(2)) {
      ins.push_back(g.out(1));
      ins.push_back(g.out(2));
    }
    ir::Attributes a;
    a.set("epsilon", n.attrFloat("epsilon", 1e-5f));
    auto d = g.opN("BatchNormalizationGrad", ins, 3, a, kGraftDomain);
    ir::Tensor* dx = d[0];
    // The running outputs are input * momentum + batch statistic * (1 - momentum); X reaches
    // them through the batch mean (d/dx = 1/M) and the biased batch variance (2 (x - mean)/M).
    if (g.hasDy(1) || g.hasDy(2)) {
      ir::Tensor* k = g.mul(sizeRatio(g, scale, x), g.scalarLike(1.0 - static_cast<double>(momentum), x));
      if (g.hasDy(1)) dx = g.add(dx, g.mul(perChannel(g, castLike(g, g.dy(1), x), rank), k));
      if (g.hasDy(2)) {
        ir::Tensor* centred = g.sub(x, meanOver(g, x, axes));
        ir::Tensor* dv = perChannel(g, castLike(g, g.dy(2), x), rank);
        dx = g.add(dx, g.mul(g.mul(dv, g.scale(k, 2.0)), centred));
      }
    }
    g.setDx(0, dx);
    g.setDx(1, d[1]);
    g.setDx(2, castLike(g, d[2], bias));
    return;
  }
  // Inference mode: an affine map per channel.
  ir::Tensor* mean = perChannel(g, castLike(g, g.in(3), x), rank);
  ir::Tensor* var = castLike(g, g.in(4), x);
  ir::Tensor* inv = perChannel(
      g, g.op("Reciprocal", {g.op("Sqrt", {g.add(var, g.scalarLike(n.attrFloat("epsilon", 1e-5f), x))})}), rank);
  if (g.wants(0)) g.setDx(0, g.mul(dy, g.mul(perChannel(g, castLike(g, scale, x), rank), inv)));
  bool keep = rank == 1;  // a 1-D X is one channel: the parameters are [1]
  if (g.wants(1)) g.setDx(1, castLike(g, sumOver(g, g.mul(dy, g.mul(g.sub(x, mean), inv)), axes, keep), scale));
  if (g.wants(2)) g.setDx(2, castLike(g, sumOver(g, dy, axes, keep), bias));
}

void instanceNormVjp(GradBuilder& g) {
  ir::Tensor *x = g.in(0), *scale = g.in(1);
  int64_t rank = rankOf(g, x);
  std::vector<int64_t> axes = range(2, rank), channelAxes = range(0, rank);
  channelAxes.erase(channelAxes.begin() + 1);
  ir::Tensor* centred = g.sub(x, meanOver(g, x, axes));
  ir::Tensor* var = meanOver(g, g.mul(centred, centred), axes);
  ir::Tensor* eps = g.scalarLike(g.node().attrFloat("epsilon", 1e-5f), x);
  ir::Tensor* inv = g.op("Reciprocal", {g.op("Sqrt", {g.add(var, eps)})});
  ir::Tensor* xhat = g.mul(centred, inv);
  ir::Tensor* dy = g.dy(0);
  if (g.wants(1)) g.setDx(1, sumOver(g, g.mul(dy, xhat), channelAxes, false));
  if (g.wants(2)) g.setDx(2, sumOver(g, dy, channelAxes, false));
  if (g.wants(0)) g.setDx(0, normalizedGrad(g, g.mul(dy, perChannel(g, scale, rank)), xhat, inv, axes));
}

void layerNormVjp(GradBuilder& g) {
  const ir::Node& n = g.node();
  ir::Tensor *x = g.in(0), *scale = g.in(1);
  int64_t rank = rankOf(g, x);
  int64_t axis = normalizeAxis(n.attrInt("axis", -1), rank, n.describe());
  std::vector<int64_t> axes = range(axis, rank);
  DataType dt = x->info().dataType();
  // One gradient op (a kernel that reads X and dY once) where Scale and B have the normalised
  // shape and nothing reads the statistics' gradients; the composition below otherwise.
  if (!g.hasDy(1) && !g.hasDy(2) && (dt == DataType::Float || dt == DataType::Double) && x->info().isStatic()) {
    const Shape& xs = x->info().shape();
    Shape norm(xs.begin() + axis, xs.end());
    auto normShaped = [&](const ir::Tensor* t) {
      return t->info().isStatic() && t->info().shape() == norm && t->info().dataType() == dt;
    };
    if (normShaped(scale) && (!g.in(2) || normShaped(g.in(2)))) {
      ir::Attributes a;
      a.set("axis", axis);
      a.set("epsilon", n.attrFloat("epsilon", 1e-5f));
      auto d = g.opN("LayerNormalizationGrad", {g.dy(0), x, scale}, 3, a, kGraftDomain);
      if (g.wants(0)) g.setDx(0, d[0]);
      if (g.wants(1)) g.setDx(1, d[1]);
      if (g.in(2) && g.wants(2)) g.setDx(2, d[2]);
      return;
    }
  }
  ir::Tensor *mean = g.out(1), *inv = g.out(2);
  // The saved statistics serve when they are in X's type (stash_type may be narrower).
  if (!mean || !inv || mean->info().dataType() != dt || inv->info().dataType() != dt) {
    mean = meanOver(g, x, axes);
    ir::Tensor* c = g.sub(x, mean);
    ir::Tensor* eps = g.scalarLike(n.attrFloat("epsilon", 1e-5f), x);
    inv = g.op("Reciprocal", {g.op("Sqrt", {g.add(meanOver(g, g.mul(c, c), axes), eps)})});
  }
  ir::Tensor* centred = g.sub(x, mean);
  ir::Tensor* xhat = g.mul(centred, inv);
  ir::Tensor* dy = g.dy(0);
  if (g.wants(1)) g.setDx(1, g.unbroadcast(g.mul(dy, xhat), scale));
  if (g.in(2) && g.wants(2)) g.setDx(2, g.unbroadcast(dy, g.in(2)));
  if (!g.wants(0)) return;
  ir::Tensor* dx = normalizedGrad(g, g.mul(dy, scale), xhat, inv, axes);
  // The Mean and InvStdDev outputs: d mean/dx = 1/K, d inv/dx = -inv^3 (x - mean)/K.
  if (g.hasDy(1) || g.hasDy(2)) {
    ir::Tensor* invK = sizeRatio(g, mean, x);
    if (g.hasDy(1)) dx = g.add(dx, g.mul(castLike(g, g.dy(1), x), invK));
    if (g.hasDy(2)) {
      ir::Tensor* inv3 = g.mul(inv, g.mul(inv, inv));
      dx = g.sub(dx, g.mul(g.mul(castLike(g, g.dy(2), x), inv3), g.mul(centred, invK)));
    }
  }
  g.setDx(0, dx);
}

void mvnVjp(GradBuilder& g) {
  // y = c / (s + 1e-9) with c = x - mean(x), s = sqrt(mean(c^2)):
  // dx = (dy - mean(dy)) / d - mean(dy c) c / (d^2 s), d = s + 1e-9; the second term is 0 where
  // s is (then c is 0 too).
  ir::Tensor* x = g.in(0);
  std::vector<int64_t> axes = g.node().attrInts("axes", {0, 2, 3});
  ir::Tensor* c = g.sub(x, meanOver(g, x, axes));
  ir::Tensor* s = g.op("Sqrt", {meanOver(g, g.mul(c, c), axes)});
  ir::Tensor* d = g.add(s, g.scalarLike(1e-9, x));
  ir::Tensor* dy = g.dy(0);
  ir::Tensor* first = g.div(g.sub(dy, meanOver(g, dy, axes)), d);
  ir::Tensor* zero = g.scalarLike(0, x);
  ir::Tensor* k =
      g.where(g.op("Equal", {s, zero}), zero, g.div(meanOver(g, g.mul(dy, c), axes), g.mul(g.mul(d, d), s)));
  g.setDx(0, g.sub(first, g.mul(k, c)));
}

void groupNormVjp(GradBuilder& g) {
  const ir::Node& n = g.node();
  ir::Tensor *x = g.in(0), *scale = g.in(1), *bias = g.in(2);
  int64_t rank = rankOf(g, x);
  GRAFT_CHECK(rank >= 2, "{}: X must have shape [N, C, ...]", n.describe());
  int64_t groups = n.attrInt("num_groups");
  // Statistics per (sample, group): X viewed as [N, G, C/G * spatial].
  ir::Tensor* xr = g.op("Reshape", {x, g.int64s({0, groups, -1})});
  std::vector<int64_t> axes{2};
  ir::Tensor* centred = g.sub(xr, meanOver(g, xr, axes));
  ir::Tensor* eps = g.scalarLike(n.attrFloat("epsilon", 1e-5f), x);
  ir::Tensor* inv = g.op("Reciprocal", {g.op("Sqrt", {g.add(meanOver(g, g.mul(centred, centred), axes), eps)})});
  ir::Tensor* xhat = g.mul(centred, inv);
  ir::Tensor* dy = g.dy(0);
  std::vector<int64_t> channelAxes = range(0, rank);
  channelAxes.erase(channelAxes.begin() + 1);
  if (g.wants(1)) g.setDx(1, sumOver(g, g.mul(dy, g.reshapeLike(xhat, x)), channelAxes, false));
  if (g.wants(2)) g.setDx(2, castLike(g, sumOver(g, dy, channelAxes, false), bias));
  if (!g.wants(0)) return;
  ir::Tensor* gy = g.op("Reshape", {g.mul(dy, perChannel(g, castLike(g, scale, x), rank)), g.int64s({0, groups, -1})});
  g.setDx(0, g.reshapeLike(normalizedGrad(g, gy, xhat, inv, axes), x));
}

void rmsNormVjp(GradBuilder& g) {
  // y = x inv scale, inv = (mean(x^2) + eps)^-1/2: dx = inv (gy - xhat mean(gy xhat)), gy = dy scale.
  const ir::Node& n = g.node();
  ir::Tensor *x = g.in(0), *scale = g.in(1);
  int64_t rank = rankOf(g, x);
  std::vector<int64_t> axes = range(normalizeAxis(n.attrInt("axis", -1), rank, n.describe()), rank);
  ir::Tensor* eps = g.scalarLike(n.attrFloat("epsilon", 1e-5f), x);
  ir::Tensor* inv = g.op("Reciprocal", {g.op("Sqrt", {g.add(meanOver(g, g.mul(x, x), axes), eps)})});
  ir::Tensor* xhat = g.mul(x, inv);
  ir::Tensor* dy = g.dy(0);
  if (g.wants(1)) g.setDx(1, g.unbroadcast(g.mul(dy, xhat), scale));
  if (!g.wants(0)) return;
  ir::Tensor* gy = g.mul(dy, scale);
  g.setDx(0, g.mul(inv, g.sub(gy, g.mul(xhat, meanOver(g, g.mul(gy, xhat), axes)))));
}

void lpNormVjp(GradBuilder& g) {
  // y = x / r along the axis, r = ||x||_p: dx = (dy - sum(dy y) dr/dx) / r with dr/dx = x / r
  // (p = 2) or sign(x) (p = 1); zero where r is 0 (the kernel's y is 0 there).
  const ir::Node& n = g.node();
  ir::Tensor* x = g.in(0);
  int64_t rank = rankOf(g, x);
  int64_t axis = normalizeAxis(n.attrInt("axis", -1), rank, n.describe());
  bool l1 = n.attrInt("p", 2) == 1;
  ir::Tensor* r =
      l1 ? sumOver(g, g.op("Abs", {x}), {axis}, true) : g.op("Sqrt", {sumOver(g, g.mul(x, x), {axis}, true)});
  ir::Tensor* zero = g.scalarLike(0, x);
  ir::Tensor* isZero = g.op("Equal", {r, zero});
  ir::Tensor* safeR = g.where(isZero, g.scalarLike(1, x), r);
  ir::Tensor* y = g.div(x, safeR);
  ir::Tensor* dy = g.dy(0);
  ir::Tensor* dr = l1 ? g.op("Sign", {x}) : y;
  ir::Tensor* dx = g.div(g.sub(dy, g.mul(sumOver(g, g.mul(dy, y), {axis}, true), dr)), safeR);
  g.setDx(0, g.where(isZero, g.zerosLike(x), dx));
}

}  // namespace

GRAFT_REGISTER_OPS(normalization_vjp) {
  r.add("BatchNormalization").setVjp(batchNormVjp);
  r.add("InstanceNormalization").setVjp(instanceNormVjp);
  r.add("LayerNormalization").setVjp(layerNormVjp);
  r.add("GroupNormalization").setVjp(groupNormVjp);
  r.add("RMSNormalization").setVjp(rmsNormVjp);
  r.add("LpNormalization").setVjp(lpNormVjp);
  r.add("MeanVarianceNormalization").setVjp(mvnVjp);
  r.add("LRN").setVjp([](GradBuilder& g) {
    ir::Attributes a;
    const ir::Node& n = g.node();
    a.set("alpha", n.attrFloat("alpha", 1e-4f));
    a.set("beta", n.attrFloat("beta", 0.75f));
    a.set("bias", n.attrFloat("bias", 1.0f));
    a.set("size", n.attrInt("size"));
    g.setDx(0, g.op("LRNGrad", {g.dy(), g.in(0)}, a, kGraftDomain));
  });
}

}  // namespace graft::ops
