// Vectorised batch normalisation for training, float data: BatchNormalization in training mode
// (batch statistics, running-statistics outputs) and its gradient ai.graft::BatchNormalizationGrad,
// on NCHW arrays and (as ai.graft::ChannelBlocked, from the cpu-layout-training pass) channels last.
//
// Why loops rather than oneDNN's batch_normalization forward_training/backward: graft's training
// graph keeps activations plain (NCHW), where oneDNN's statistics accumulate in float; these
// accumulate every channel sum in double, as the reference does, for about the same memory
// traffic. Channels are split over the threads; each channel is folded by one thread in a fixed
// order, so results do not depend on the thread count. A channel's values are N rows of
// H*W... contiguous floats; channels go in blocks small enough that the second pass over a
// block finds it still in cache.
#include <algorithm>
#include <cmath>
#include <vector>

#include "backends/cpu/cpu_kernels.hpp"
#include "backends/cpu/vec_common.hpp"
#include "ops/registry.hpp"
#include "ops/shape_util.hpp"

namespace graft::backends::cpu {
namespace {

constexpr int kLanes = 16;

// sum(x - k) and sum((x - k)^2) over n positions, in one pass. The shift k (a value of the
// channel) keeps the variance from cancelling when the mean is large against the spread.
GRAFT_VEC_LOOP void shiftedSums(const float* p, int64_t n, double k, double& s1, double& s2) {
  double a[kLanes] = {}, b[kLanes] = {};
  int64_t i = 0;
  for (; i + kLanes <= n; i += kLanes)
    for (int l = 0; l < kLanes; ++l) {
      double d = static_cast<double>(p[i + l]) - k;
      a[l] += d;
      b[l] += d * d;
    }
  for (int w = kLanes / 2; w >= 1; w /= 2)
    for (int l = 0; l < w; ++l) a[l] += a[l + w], b[l] += b[l + w];
  for (; i < n; ++i) {
    double d = static_cast<double>(p[i]) - k;
    a[0] += d;
    b[0] += d * d;
  }
  s1 += a[0];
  s2 += b[0];
}

// sum(dy) and sum(dy * (x - mean)) over n positions.
GRAFT_VEC_LOOP void gradSums(const float* dy, const float* x, int64_t n, double mean, double& sDy, double& sDyX) {
  double a[kLanes] = {}, b[kLanes] = {};
  int64_t i = 0;
  for (; i + kLanes <= n; i += kLanes)
    for (int l = 0; l < kLanes; ++l) {
      double g = static_cast<double>(dy[i + l]);
      a[l] += g;
      b[l] += g * (static_cast<double>(x[i + l]) - mean);
    }
  for (int w = kLanes / 2; w >= 1; w /= 2)
    for (int l = 0; l < w; ++l) a[l] += a[l + w], b[l] += b[l + w];
  for (; i < n; ++i) {
    double g = static_cast<double>(dy[i]);
    a[0] += g;
    b[0] += g * (static_cast<double>(x[i]) - mean);
  }
  sDy += a[0];
  sDyX += b[0];
}

GRAFT_VEC_LOOP void normalize(const float* x, float* y, int64_t n, float mean, float a, float b) {
  for (int64_t i = 0; i < n; ++i) y[i] = (x[i] - mean) * a + b;
}

// dx = a * dy - k * (x - mean) - c.
GRAFT_VEC_LOOP void gradRow(const float* dy, const float* x, float* dx, int64_t n, float mean, float a, float k,
                            float c) {
  for (int64_t i = 0; i < n; ++i) dx[i] = a * dy[i] - k * (x[i] - mean) - c;
}

// X as [N, C, inner] (a 1-D X is N samples of one channel). A channel's values are `rows` runs of
// `len` contiguous floats, `stride` apart (one run when C is 1).
struct Layout {
  int64_t C = 1, rows = 0, len = 0, stride = 0;
  double count = 0;

  static Layout of(const NDArray& x) {
    Layout l;
    int64_t N = x.dim(0);
    l.C = x.rank() >= 2 ? x.dim(1) : 1;
    int64_t inner = x.rank() >= 2 ? ops::shapeProduct(x.shape(), 2, x.rank()) : 1;
    l.rows = l.C == 1 ? 1 : N;
    l.len = l.C == 1 ? N * inner : inner;
    l.stride = l.C * inner;
    l.count = static_cast<double>(N * inner);
    return l;
  }
  int64_t offset(int64_t ch, int64_t row) const { return row * stride + ch * len; }
  // Channels per thread range: about kGrainCheap elements.
  int64_t grain() const { return std::max<int64_t>(1, kGrainCheap / std::max<int64_t>(1, rows * len)); }
  // Channels folded and then written together: `arrays` inputs of theirs fit in about 256 KiB
  // (half of this machine's L2), so the second pass reads them from cache. Walking a block row
  // by row reads memory in order, which matters when a channel's rows are short (7x7 maps).
  int64_t block(int arrays) const {
    return std::max<int64_t>(1, (int64_t{256} << 10) / std::max<int64_t>(1, rows * len * 4 * arrays));
  }
};

// The statistics of a channel from its sums s1 = sum(x - k), s2 = sum((x - k)^2) over `count`
// values shifted by k: the mean and the biased variance (NaN for an empty batch, as the reference).
void finishStats(double k, double s1, double s2, double count, double& mean, double& var) {
  double d = s1 / count;
  double v = s2 / count - d * d;
  mean = k + d;
  var = v < 0 ? 0.0 : v;  // rounding may leave a tiny negative; NaN stays NaN
}

// The batch mean and biased variance of channels [c0, c1) (NaN for an empty batch, as the
// reference), from one pass. Each channel folds its rows in order, whatever the block.
void blockStats(const float* x, const Layout& l, int64_t c0, int64_t c1, double* mean, double* var) {
  for (int64_t ch = c0; ch < c1; ++ch) {
    double k = l.rows * l.len > 0 ? static_cast<double>(x[l.offset(ch, 0)]) : 0.0;
    mean[ch] = std::isfinite(k) ? k : 0.0;  // the shift; infinities then reach the statistics as in the reference
    var[ch] = 0;
  }
  std::vector<double> s1(static_cast<size_t>(c1 - c0), 0.0);
  for (int64_t r = 0; r < l.rows; ++r)
    for (int64_t ch = c0; ch < c1; ++ch)
      GRAFT_VEC_RUN(shiftedSums(x + l.offset(ch, r), l.len, mean[ch], s1[ch - c0], var[ch]));
  for (int64_t ch = c0; ch < c1; ++ch) finishStats(mean[ch], s1[ch - c0], var[ch], l.count, mean[ch], var[ch]);
}

const float* channelParam(const NDArray& p, int64_t C, const std::string& what, const char* name) {
  GRAFT_CHECK(p.dtype() == DataType::Float, "{}: {} must be FLOAT, got {}", what, name, dtypeName(p.dtype()));
  GRAFT_CHECK(p.rank() == 1 && p.dim(0) == C, "{}: {} must have shape [{}] (one value per channel), got {}", what, name,
              C, shapeToString(p.shape()));
  return p.data<float>();
}

// Training-mode BatchNormalization's per-channel values, from a channel's batch statistics: the
// normalisation y = (x - mean) a + B with a = scale / sqrt(var + eps), and the running outputs
// input * momentum + statistic * (1 - momentum) (each when wanted).
struct TrainChannel {
  float mean, a;
};
TrainChannel trainChannel(double mean, double var, float scale, float inMean, float inVar, double eps, double momentum,
                          float* rm, float* rv) {
  if (rm) *rm = static_cast<float>(static_cast<double>(inMean) * momentum + mean * (1 - momentum));
  if (rv) *rv = static_cast<float>(static_cast<double>(inVar) * momentum + var * (1 - momentum));
  return {static_cast<float>(mean), static_cast<float>(static_cast<double>(scale) / std::sqrt(var + eps))};
}

// BatchNormalizationGrad's per-channel values, from a channel's statistics and its sums sDy =
// sum(dy), sDyX = sum(dy (x - mean)) over `count` values: dx = a dy - k (x - mean) - c, and dScale,
// dB (each when wanted). An empty batch has no rows to write and zero sums, whatever its (NaN)
// statistics.
struct GradChannel {
  float mean, a, k, c;
};
GradChannel gradChannel(double mean, double var, double sDy, double sDyX, float scale, double count, double eps,
                        float* dScale, float* dB) {
  double inv = count > 0 ? 1.0 / std::sqrt(var + eps) : 0.0;
  double ds = sDyX * inv;
  double a = static_cast<double>(scale) * inv;
  if (dScale) *dScale = static_cast<float>(ds);
  if (dB) *dB = static_cast<float>(sDy);
  return {static_cast<float>(mean), static_cast<float>(a), static_cast<float>(count > 0 ? a * inv * ds / count : 0.0),
          static_cast<float>(count > 0 ? a * sDy / count : 0.0)};
}

// BatchNormalization(X, scale, B, input_mean, input_var) -> Y[, running_mean, running_var] in
// training mode: normalises with the batch statistics; the running outputs are
// input * momentum + batch statistic * (1 - momentum), the variance biased as ONNX specifies
// (the training-mode pass sets momentum 0 to read the batch statistics themselves).
ops::KernelFn batchNormTrainKernel(ops::CompileContext& c) {
  const ir::Node& n = c.node();
  std::string what = n.describe();
  double eps = n.attrFloat("epsilon", 1e-5f);
  double momentum = n.attrFloat("momentum", 0.9f);
  return [=](ops::KernelContext& k) {
    const NDArray& x = k.input(0);
    GRAFT_CHECK(x.dtype() == DataType::Float, "{}: X must be FLOAT, got {}", what, dtypeName(x.dtype()));
    GRAFT_CHECK(x.rank() >= 1, "{}: X must have rank >= 1, got a scalar", what);
    Layout l = Layout::of(x);
    const float* scale = channelParam(k.input(1), l.C, what, "scale");
    const float* bias = channelParam(k.input(2), l.C, what, "B");
    const float* inMean = channelParam(k.input(3), l.C, what, "input_mean");
    const float* inVar = channelParam(k.input(4), l.C, what, "input_var");
    NDArray& y = k.allocOutputUninit(0, DataType::Float, x.shape());
    float* rm = k.wantsOutput(1) ? k.allocOutputUninit(1, DataType::Float, {l.C}).data<float>() : nullptr;
    float* rv = k.wantsOutput(2) ? k.allocOutputUninit(2, DataType::Float, {l.C}).data<float>() : nullptr;
    const float* xp = x.data<float>();
    float* yp = y.data<float>();
    std::vector<double> mean(static_cast<size_t>(l.C)), var(static_cast<size_t>(l.C));
    std::vector<TrainChannel> tc(static_cast<size_t>(l.C));
    parallelRanges(k.pool(), l.C, l.grain(), [&](int64_t c0, int64_t c1) {
      for (int64_t b0 = c0, b1; b0 < c1; b0 = b1) {
        b1 = std::min(c1, b0 + l.block(1));
        blockStats(xp, l, b0, b1, mean.data(), var.data());
        for (int64_t ch = b0; ch < b1; ++ch)
          tc[ch] = trainChannel(mean[ch], var[ch], scale[ch], inMean[ch], inVar[ch], eps, momentum,
                                rm ? rm + ch : nullptr, rv ? rv + ch : nullptr);
        for (int64_t r = 0; r < l.rows; ++r)
          for (int64_t ch = b0; ch < b1; ++ch)
            GRAFT_VEC_RUN(
                normalize(xp + l.offset(ch, r), yp + l.offset(ch, r), l.len, tc[ch].mean, tc[ch].a, bias[ch]));
      }
    });
  };
}

// BatchNormalizationGrad(dY, X, scale[, mean, var]) -> dX, dScale, dB (ops/normalization.cpp):
// with inv = 1 / sqrt(var + eps), dB = sum(dy), dScale = inv * sum(dy (x - mean)) and
// dx = scale inv (dy - dB / M - (x - mean) inv dScale / M) over the M values of a channel.
ops::KernelFn batchNormGradKernel(ops::CompileContext& c) {
  const ir::Node& n = c.node();
  std::string what = n.describe();
  double eps = n.attrFloat("epsilon", 1e-5f);
  return [=](ops::KernelContext& k) {
    const NDArray& dyA = k.input(0);
    const NDArray& x = k.input(1);
    GRAFT_CHECK(x.dtype() == DataType::Float && dyA.dtype() == DataType::Float,
                "{}: dY and X must be FLOAT, got {} and {}", what, dtypeName(dyA.dtype()), dtypeName(x.dtype()));
    GRAFT_CHECK(x.rank() >= 1, "{}: X must have rank >= 1, got a scalar", what);
    GRAFT_CHECK(dyA.shape() == x.shape(), "{}: dY has shape {}, X has {}", what, shapeToString(dyA.shape()),
                shapeToString(x.shape()));
    Layout l = Layout::of(x);
    const float* scale = channelParam(k.input(2), l.C, what, "scale");
    bool given = k.hasInput(3) && k.hasInput(4);
    const float* meanIn = given ? channelParam(k.input(3), l.C, what, "mean") : nullptr;
    const float* varIn = given ? channelParam(k.input(4), l.C, what, "var") : nullptr;
    NDArray& dx = k.allocOutputUninit(0, DataType::Float, x.shape());
    float* dScale = k.wantsOutput(1) ? k.allocOutputUninit(1, DataType::Float, {l.C}).data<float>() : nullptr;
    float* dB = k.wantsOutput(2) ? k.allocOutputUninit(2, DataType::Float, {l.C}).data<float>() : nullptr;
    const float* xp = x.data<float>();
    const float* dyp = dyA.data<float>();
    float* dxp = dx.data<float>();
    std::vector<double> mean(static_cast<size_t>(l.C), 0.0), var(static_cast<size_t>(l.C), 0.0);
    std::vector<double> sDy(static_cast<size_t>(l.C), 0.0), sDyX(static_cast<size_t>(l.C), 0.0);
    std::vector<GradChannel> gc(static_cast<size_t>(l.C));
    parallelRanges(k.pool(), l.C, l.grain(), [&](int64_t c0, int64_t c1) {
      for (int64_t b0 = c0, b1; b0 < c1; b0 = b1) {
        b1 = std::min(c1, b0 + l.block(2));
        // The reference leaves the statistics of an empty batch at 0 when it computes them.
        if (given) {
          for (int64_t ch = b0; ch < b1; ++ch) mean[ch] = meanIn[ch], var[ch] = varIn[ch];
        } else if (l.count > 0) {
          blockStats(xp, l, b0, b1, mean.data(), var.data());
        }
        for (int64_t r = 0; r < l.rows; ++r)
          for (int64_t ch = b0; ch < b1; ++ch)
            GRAFT_VEC_RUN(gradSums(dyp + l.offset(ch, r), xp + l.offset(ch, r), l.len, mean[ch], sDy[ch], sDyX[ch]));
        for (int64_t ch = b0; ch < b1; ++ch)
          gc[ch] = gradChannel(mean[ch], var[ch], sDy[ch], sDyX[ch], scale[ch], l.count, eps,
                               dScale ? dScale + ch : nullptr, dB ? dB + ch : nullptr);
        for (int64_t r = 0; r < l.rows; ++r)
          for (int64_t ch = b0; ch < b1; ++ch) {
            const GradChannel& g = gc[ch];
            GRAFT_VEC_RUN(gradRow(dyp + l.offset(ch, r), xp + l.offset(ch, r), dxp + l.offset(ch, r), l.len, g.mean,
                                  g.a, g.k, g.c));
          }
      }
    });
  };
}

// ---- channels last (ai.graft::ChannelBlocked from the cpu-layout-training pass) ----------------
// X is [rows, C] (NHWC: the blocked layout whose block is the channel count). The rows go in
// chunks whose size depends on rows and C only; each chunk's per-channel sums (double) are folded
// in chunk order, so results do not depend on the thread count either.

// s1[c] += x[r][c] - k[c], s2[c] += (x[r][c] - k[c])^2 over rows [0, n).
GRAFT_VEC_LOOP void rowSums(const float* x, int64_t n, int64_t C, const double* k, double* s1, double* s2) {
  for (int64_t r = 0; r < n; ++r) {
    const float* p = x + r * C;
    for (int64_t c = 0; c < C; ++c) {
      double d = static_cast<double>(p[c]) - k[c];
      s1[c] += d;
      s2[c] += d * d;
    }
  }
}

// s1[c] += dy[r][c], s2[c] += dy[r][c] (x[r][c] - mean[c]).
GRAFT_VEC_LOOP void rowGradSums(const float* dy, const float* x, int64_t n, int64_t C, const double* mean, double* s1,
                                double* s2) {
  for (int64_t r = 0; r < n; ++r) {
    const float* g = dy + r * C;
    const float* p = x + r * C;
    for (int64_t c = 0; c < C; ++c) {
      double v = static_cast<double>(g[c]);
      s1[c] += v;
      s2[c] += v * (static_cast<double>(p[c]) - mean[c]);
    }
  }
}

// y = (x - mean) a + b per channel.
GRAFT_VEC_LOOP void rowsNormalize(const float* x, float* y, int64_t n, int64_t C, const float* mean, const float* a,
                                  const float* b) {
  for (int64_t r = 0; r < n; ++r)
    for (int64_t c = 0; c < C; ++c) y[r * C + c] = (x[r * C + c] - mean[c]) * a[c] + b[c];
}

// dx = a dy - k (x - mean) - c0 per channel (coefficients as gradRow's).
GRAFT_VEC_LOOP void rowsGrad(const float* dy, const float* x, float* dx, int64_t n, int64_t C, const float* mean,
                             const float* a, const float* k, const float* c0) {
  for (int64_t r = 0; r < n; ++r)
    for (int64_t c = 0; c < C; ++c) {
      int64_t i = r * C + c;
      dx[i] = a[c] * dy[i] - k[c] * (x[i] - mean[c]) - c0[c];
    }
}

struct RowsLayout {
  int64_t rows = 0, C = 0, chunk = 1, chunks = 0;
  RowsLayout(int64_t numel, int64_t channels) : C(channels) {
    rows = C > 0 ? numel / C : 0;
    chunk = std::max<int64_t>(1, kGrainCheap / std::max<int64_t>(1, C));
    chunks = (rows + chunk - 1) / chunk;
  }
  int64_t end(int64_t i) const { return std::min(rows, (i + 1) * chunk); }
};

// Per-channel sums over all rows: fold(i, s1, s2) adds chunk i's into s1/s2 (each [C], zeroed);
// the chunks' sums are then added in chunk order.
template <class Fold>
void chunkedSums(support::ThreadPool& pool, const RowsLayout& l, Fold fold, std::vector<double>& s1,
                 std::vector<double>& s2) {
  size_t C = static_cast<size_t>(l.C);
  std::vector<double> part(static_cast<size_t>(l.chunks) * C * 2, 0.0);
  parallelRanges(pool, l.chunks, 1, [&](int64_t i0, int64_t i1) {
    for (int64_t i = i0; i < i1; ++i) fold(i, part.data() + i * C * 2, part.data() + i * C * 2 + C);
  });
  s1.assign(C, 0.0);
  s2.assign(C, 0.0);
  for (int64_t i = 0; i < l.chunks; ++i)
    for (size_t c = 0; c < C; ++c) {
      s1[c] += part[i * C * 2 + c];
      s2[c] += part[i * C * 2 + C + c];
    }
}

// Batch mean and biased variance per channel of X [rows, C] (shifted by X's first row).
void rowStats(support::ThreadPool& pool, const float* x, const RowsLayout& l, std::vector<double>& mean,
              std::vector<double>& var) {
  std::vector<double> k(static_cast<size_t>(l.C), 0.0);
  if (l.rows > 0)
    for (int64_t c = 0; c < l.C; ++c) k[c] = std::isfinite(x[c]) ? static_cast<double>(x[c]) : 0.0;
  std::vector<double> s1, s2;
  chunkedSums(
      pool, l,
      [&](int64_t i, double* a, double* b) {
        GRAFT_VEC_RUN(rowSums(x + i * l.chunk * l.C, l.end(i) - i * l.chunk, l.C, k.data(), a, b));
      },
      s1, s2);
  mean.resize(static_cast<size_t>(l.C));
  var.resize(static_cast<size_t>(l.C));
  for (int64_t c = 0; c < l.C; ++c) finishStats(k[c], s1[c], s2[c], static_cast<double>(l.rows), mean[c], var[c]);
}

// Rows [0, rows) split over the pool for an elementwise pass.
template <class F>
void overRows(support::ThreadPool& pool, const RowsLayout& l, F fn) {
  int64_t grain = std::max<int64_t>(1, kGrainCheap / std::max<int64_t>(1, l.C));
  parallelRanges(pool, l.rows, grain, fn);
}

// ChannelBlocked(BatchNormalization, training mode) on channels-last X: as batchNormTrainKernel.
ops::KernelFn batchNormTrainNhwcKernel(ops::CompileContext& c) {
  const ir::Node& n = c.node();
  std::string what = n.describe();
  double eps = n.attrFloat("epsilon", 1e-5f);
  double momentum = n.attrFloat("momentum", 0.9f);
  int64_t C = n.attrInt("channels");
  return [=](ops::KernelContext& k) {
    const NDArray& x = k.input(0);
    RowsLayout l(x.numel(), C);
    const float* scale = channelParam(k.input(1), C, what, "scale");
    const float* bias = channelParam(k.input(2), C, what, "B");
    const float* inMean = channelParam(k.input(3), C, what, "input_mean");
    const float* inVar = channelParam(k.input(4), C, what, "input_var");
    NDArray& y = k.allocOutputUninit(0, DataType::Float, x.shape());
    float* rm = k.wantsOutput(1) ? k.allocOutputUninit(1, DataType::Float, {C}).data<float>() : nullptr;
    float* rv = k.wantsOutput(2) ? k.allocOutputUninit(2, DataType::Float, {C}).data<float>() : nullptr;
    const float* xp = x.data<float>();
    float* yp = y.data<float>();
    std::vector<double> mean, var;
    rowStats(k.pool(), xp, l, mean, var);
    // rowsNormalize reads the per-channel values as arrays (one vector lane per channel).
    std::vector<float> meanF(static_cast<size_t>(C)), a(static_cast<size_t>(C));
    for (int64_t ch = 0; ch < C; ++ch) {
      TrainChannel t = trainChannel(mean[ch], var[ch], scale[ch], inMean[ch], inVar[ch], eps, momentum,
                                    rm ? rm + ch : nullptr, rv ? rv + ch : nullptr);
      meanF[ch] = t.mean;
      a[ch] = t.a;
    }
    overRows(k.pool(), l, [&](int64_t r0, int64_t r1) {
      GRAFT_VEC_RUN(rowsNormalize(xp + r0 * C, yp + r0 * C, r1 - r0, C, meanF.data(), a.data(), bias));
    });
  };
}

// ChannelBlocked(ai.graft BatchNormalizationGrad) on channels-last dY and X: as batchNormGradKernel.
ops::KernelFn batchNormGradNhwcKernel(ops::CompileContext& c) {
  const ir::Node& n = c.node();
  std::string what = n.describe();
  double eps = n.attrFloat("epsilon", 1e-5f);
  int64_t C = n.attrInt("channels");
  return [=](ops::KernelContext& k) {
    const NDArray& dyA = k.input(0);
    const NDArray& x = k.input(1);
    GRAFT_CHECK(dyA.shape() == x.shape(), "{}: dY has shape {}, X has {}", what, shapeToString(dyA.shape()),
                shapeToString(x.shape()));
    RowsLayout l(x.numel(), C);
    const float* scale = channelParam(k.input(2), C, what, "scale");
    bool given = k.hasInput(3) && k.hasInput(4);
    NDArray& dx = k.allocOutputUninit(0, DataType::Float, x.shape());
    float* dScale = k.wantsOutput(1) ? k.allocOutputUninit(1, DataType::Float, {C}).data<float>() : nullptr;
    float* dB = k.wantsOutput(2) ? k.allocOutputUninit(2, DataType::Float, {C}).data<float>() : nullptr;
    const float* xp = x.data<float>();
    const float* dyp = dyA.data<float>();
    float* dxp = dx.data<float>();
    std::vector<double> mean(static_cast<size_t>(C), 0.0), var(static_cast<size_t>(C), 0.0);
    if (given) {
      const float* meanIn = channelParam(k.input(3), C, what, "mean");
      const float* varIn = channelParam(k.input(4), C, what, "var");
      for (int64_t ch = 0; ch < C; ++ch) mean[ch] = meanIn[ch], var[ch] = varIn[ch];
    } else if (l.rows > 0) {
      rowStats(k.pool(), xp, l, mean, var);
    }
    std::vector<double> sDy, sDyX;
    chunkedSums(
        k.pool(), l,
        [&](int64_t i, double* a, double* b) {
          int64_t r0 = i * l.chunk;
          GRAFT_VEC_RUN(rowGradSums(dyp + r0 * C, xp + r0 * C, l.end(i) - r0, C, mean.data(), a, b));
        },
        sDy, sDyX);
    // rowsGrad reads the per-channel values as arrays (one vector lane per channel).
    std::vector<float> cm(static_cast<size_t>(C)), ca(static_cast<size_t>(C)), ck(static_cast<size_t>(C)),
        cc(static_cast<size_t>(C));
    for (int64_t ch = 0; ch < C; ++ch) {
      GradChannel g = gradChannel(mean[ch], var[ch], sDy[ch], sDyX[ch], scale[ch], static_cast<double>(l.rows), eps,
                                  dScale ? dScale + ch : nullptr, dB ? dB + ch : nullptr);
      cm[ch] = g.mean, ca[ch] = g.a, ck[ch] = g.k, cc[ch] = g.c;
    }
    overRows(k.pool(), l, [&](int64_t r0, int64_t r1) {
      GRAFT_VEC_RUN(
          rowsGrad(dyp + r0 * C, xp + r0 * C, dxp + r0 * C, r1 - r0, C, cm.data(), ca.data(), ck.data(), cc.data()));
    });
  };
}

bool allFloat(const ir::Node& n, size_t from, size_t to) {
  for (size_t i = from; i < to; ++i)
    if (!n.input(i) || !typeIn(n.input(i), 1u << static_cast<int>(DataType::Float))) return false;
  return true;
}

bool supportsTrain(const ir::Node& n) {
  return n.numInputs() == 5 && n.attrInt("training_mode", 0) != 0 && allFloat(n, 0, 5);
}

bool supportsGrad(const ir::Node& n) {
  if (n.numInputs() != 3 && n.numInputs() != 5) return false;
  return allFloat(n, 0, n.numInputs());
}

// A ChannelBlocked node whose blocked tensors are channels last ([N, 1, spatial..., C]): op
// BatchNormalization in training mode (X blocked), or ai.graft BatchNormalizationGrad (dY, X).
bool channelsLastTensor(const ir::Tensor* t, int64_t C) {
  if (!t || !typeIn(t, 1u << static_cast<int>(DataType::Float)) || !t->info().isStatic()) return false;
  const Shape& s = t->info().shape();
  return s.size() >= 4 && s[1] == 1 && s.back() == C;
}

bool supportsNhwc(const ir::Node& n, bool grad) {
  std::string op = n.attrString("op", ""), dom = n.attrString("op_domain", "");
  int64_t C = n.attrInt("channels", 0);
  if (C <= 0 || n.attrInt("block", 0) != C || n.attrInt("blocked_output", 1) != 1) return false;
  std::vector<int64_t> blocked = n.attrInts("blocked_inputs", {0});
  if (grad) {
    if (op != "BatchNormalizationGrad" || dom != ops::kGraftDomain || blocked != std::vector<int64_t>{0, 1})
      return false;
    if (n.attrInts("input_channels", {C, C}) != std::vector<int64_t>{C, C}) return false;
    if ((n.numInputs() != 3 && n.numInputs() != 5) || !allFloat(n, 0, n.numInputs())) return false;
    return channelsLastTensor(n.input(0), C) && channelsLastTensor(n.input(1), C) && channelsLastTensor(n.output(0), C);
  }
  if (op != "BatchNormalization" || !dom.empty() || blocked != std::vector<int64_t>{0}) return false;
  if (n.attrInts("input_channels", {C}) != std::vector<int64_t>{C}) return false;
  if (n.numInputs() != 5 || n.attrInt("training_mode", 0) == 0 || !allFloat(n, 0, 5)) return false;
  return channelsLastTensor(n.input(0), C) && channelsLastTensor(n.output(0), C);
}

}  // namespace

GRAFT_REGISTER_CPU_KERNELS(vec_batchnorm) {
  r.add({"", "BatchNormalization", "vec_batchnorm_train", supportsTrain, batchNormTrainKernel});
  r.add({graft::ops::kGraftDomain, "BatchNormalizationGrad", "vec_batchnorm_grad", supportsGrad, batchNormGradKernel});
  r.add({graft::ops::kGraftDomain, "ChannelBlocked", "vec_batchnorm_train_nhwc",
         [](const graft::ir::Node& n) { return supportsNhwc(n, false); }, batchNormTrainNhwcKernel});
  r.add({graft::ops::kGraftDomain, "ChannelBlocked", "vec_batchnorm_grad_nhwc",
         [](const graft::ir::Node& n) { return supportsNhwc(n, true); }, batchNormGradNhwcKernel});
}

}  // namespace graft::backends::cpu
