// Vectorised LayerNormalization (ai.onnx opset 17) for float data: one pass for the mean, one
// for the variance (both accumulated in double), one that normalises, scales and shifts; its
// gradient ai.graft LayerNormalizationGrad (the statistics again, then two passes per row); and
// Softmax / LogSoftmax (opset 13: along one axis) for float data, the cpu table's only softmax
// (measured against oneDNN's: see onednn_norm.cpp). Rows are split over the
// threads; each row is computed by one thread in a fixed order.
#include <cmath>

#include "backends/cpu/cpu_kernels.hpp"
#include "backends/cpu/vec_common.hpp"
#include "backends/cpu/vec_math.hpp"
#include "ops/registry.hpp"
#include "ops/shape_util.hpp"

namespace graft::backends::cpu {
namespace {

GRAFT_VEC_LOOP double rowSum(const float* p, int64_t n) {
  constexpr int kW = 16;
  double acc[kW] = {};
  int64_t i = 0;
  for (; i + kW <= n; i += kW)
    for (int l = 0; l < kW; ++l) acc[l] += static_cast<double>(p[i + l]);
  for (int w = kW / 2; w >= 1; w /= 2)
    for (int l = 0; l < w; ++l) acc[l] += acc[l + w];
  for (; i < n; ++i) acc[0] += static_cast<double>(p[i]);
  return acc[0];
}

GRAFT_VEC_LOOP double rowSquaredDeviation(const float* p, int64_t n, double mean) {
  constexpr int kW = 16;
  double acc[kW] = {};
  int64_t i = 0;
  for (; i + kW <= n; i += kW)
    for (int l = 0; l < kW; ++l) {
      double d = static_cast<double>(p[i + l]) - mean;
      acc[l] += d * d;
    }
  for (int w = kW / 2; w >= 1; w /= 2)
    for (int l = 0; l < w; ++l) acc[l] += acc[l + w];
  for (; i < n; ++i) {
    double d = static_cast<double>(p[i]) - mean;
    acc[0] += d * d;
  }
  return acc[0];
}

// A row's mean and 1 / sqrt(variance + eps), both accumulated in double (0 and 1 / sqrt(eps) for
// an empty row).
struct RowStats {
  double mean = 0, inv = 0;
};
RowStats rowStats(const float* row, int64_t cols, double eps) {
  double m = cols ? GRAFT_VEC_RUN(rowSum(row, cols)) / static_cast<double>(cols) : 0.0;
  double var = cols ? GRAFT_VEC_RUN(rowSquaredDeviation(row, cols, m)) / static_cast<double>(cols) : 0.0;
  return {m, 1.0 / std::sqrt(var + eps)};
}

GRAFT_VEC_LOOP void normalizeRow(const float* x, float* y, const float* g, const float* b, int64_t n, float mean,
                                 float inv) {
  for (int64_t j = 0; j < n; ++j) y[j] = (x[j] - mean) * inv * g[j] + b[j];
}

// A parameter broadcast to the normalized shape, as a dense float row.
std::vector<float> expandParam(const NDArray& p, const Shape& norm, float fill, const std::string& what,
                               const char* name) {
  int64_t cols = shapeNumel(norm);
  std::vector<float> out(static_cast<size_t>(cols), fill);
  if (!p.valid()) return out;
  GRAFT_CHECK(p.dtype() == DataType::Float, "{}: {} must be FLOAT, got {}", what, name, dtypeName(p.dtype()));
  GRAFT_CHECK(p.rank() <= static_cast<int64_t>(norm.size()) && ops::broadcastShapes(p.shape(), norm, what) == norm,
              "{}: {} of shape {} does not broadcast to {}", what, name, shapeToString(p.shape()), shapeToString(norm));
  std::array<std::vector<int64_t>, 1> st{ops::broadcastStrides(p.shape(), norm)};
  const float* src = p.data<float>();
  int64_t o = 0;
  ops::forEachBroadcastRun<1>(norm, st, [&](const auto& off, const auto& inner, int64_t len) {
    for (int64_t j = 0; j < len; ++j) out[o++] = src[off[0] + j * inner[0]];
  });
  return out;
}

ops::KernelFn layerNormKernel(ops::CompileContext& c) {
  const ir::Node& n = c.node();
  std::string what = n.describe();
  int64_t axisAttr = n.attrInt("axis", -1);
  double eps = n.attrFloat("epsilon", 1e-5f);
  return [=](ops::KernelContext& k) {
    const NDArray& x = k.input(0);
    GRAFT_CHECK(x.dtype() == DataType::Float, "{}: X must be FLOAT, got {}", what, dtypeName(x.dtype()));
    const ops::AxisRows v = ops::axisRows(x, axisAttr, what);
    const int64_t axis = v.axis, rows = v.rows, cols = v.cols;
    const Shape& norm = v.norm;
    std::vector<float> g = expandParam(k.input(1), norm, 1.0f, what, "Scale");
    std::vector<float> b = expandParam(k.hasInput(2) ? k.input(2) : NDArray(), norm, 0.0f, what, "B");
    Shape statShape(x.shape().begin(), x.shape().begin() + axis);
    statShape.resize(x.shape().size(), 1);
    NDArray& y = k.allocOutputUninit(0, DataType::Float, x.shape());
    float* meanOut = k.wantsOutput(1) ? k.allocOutputUninit(1, DataType::Float, statShape).data<float>() : nullptr;
    float* invOut = k.wantsOutput(2) ? k.allocOutputUninit(2, DataType::Float, statShape).data<float>() : nullptr;
    const float* xp = x.data<float>();
    float* yp = y.data<float>();
    int64_t grain = std::max<int64_t>(1, kGrainCheap / std::max<int64_t>(1, cols));
    parallelRanges(k.pool(), rows, grain, [&](int64_t r0, int64_t r1) {
      for (int64_t r = r0; r < r1; ++r) {
        const float* row = xp + r * cols;
        RowStats st = rowStats(row, cols, eps);
        auto m = static_cast<float>(st.mean), inv = static_cast<float>(st.inv);
        GRAFT_VEC_RUN(normalizeRow(row, yp + r * cols, g.data(), b.data(), cols, m, inv));
        if (meanOut) meanOut[r] = m;
        if (invOut) invOut[r] = inv;
      }
    });
  };
}

// ---- LayerNormalizationGrad -------------------------------------------------------------------

struct RowSums {
  double g = 0, gx = 0;  // sum of dY Scale and of dY Scale x-hat over the row
};

// x-hat into xh; dS += dY x-hat and dB += dY (the chunk's double partials); the row's sums.
GRAFT_VEC_LOOP RowSums layerNormGradSums(const float* x, const float* dy, const float* s, float* xh, double* dS,
                                         double* dB, int64_t n, float mean, float inv) {
  constexpr int kW = 16;
  double accG[kW] = {}, accGX[kW] = {};
  int64_t i = 0;
  for (; i + kW <= n; i += kW)
    for (int l = 0; l < kW; ++l) {
      float h = (x[i + l] - mean) * inv, d = dy[i + l], g = d * s[i + l];
      xh[i + l] = h;
      accG[l] += static_cast<double>(g);
      accGX[l] += static_cast<double>(g * h);
      dS[i + l] += static_cast<double>(d * h);
      dB[i + l] += static_cast<double>(d);
    }
  for (; i < n; ++i) {
    float h = (x[i] - mean) * inv, d = dy[i], g = d * s[i];
    xh[i] = h;
    accG[0] += static_cast<double>(g);
    accGX[0] += static_cast<double>(g * h);
    dS[i] += static_cast<double>(d * h);
    dB[i] += static_cast<double>(d);
  }
  for (int w = kW / 2; w >= 1; w /= 2)
    for (int l = 0; l < w; ++l) accG[l] += accG[l + w], accGX[l] += accGX[l + w];
  return {accG[0], accGX[0]};
}

GRAFT_VEC_LOOP void layerNormGradRow(const float* dy, const float* s, const float* xh, float* dx, int64_t n, float inv,
                                     float meanG, float meanGX) {
  for (int64_t j = 0; j < n; ++j) dx[j] = inv * ((dy[j] * s[j] - meanG) - xh[j] * meanGX);
}

// ai.graft LayerNormalizationGrad(dY, X, Scale) -> dX, dScale, dB (ops/normalization.cpp) for
// float: rows in a fixed number of chunks (whatever the thread count), each chunk's dScale and dB
// partial sums in double, added in chunk order, so the result does not depend on the threads.
ops::KernelFn layerNormGradKernel(ops::CompileContext& c) {
  const ir::Node& n = c.node();
  std::string what = n.describe();
  int64_t axisAttr = n.attrInt("axis", -1);
  double eps = n.attrFloat("epsilon", 1e-5f);
  return [=](ops::KernelContext& k) {
    const NDArray &dyA = k.input(0), &x = k.input(1), &scaleA = k.input(2);
    for (const NDArray* a : {&dyA, &x, &scaleA})
      GRAFT_CHECK(a->dtype() == DataType::Float, "{}: expected FLOAT inputs, got {}", what, dtypeName(a->dtype()));
    GRAFT_CHECK(dyA.shape() == x.shape(), "{}: dY has shape {}, X has {}", what, shapeToString(dyA.shape()),
                shapeToString(x.shape()));
    const ops::AxisRows v = ops::axisRows(x, axisAttr, what);
    const int64_t rows = v.rows, cols = v.cols;
    const Shape& norm = v.norm;
    GRAFT_CHECK(scaleA.shape() == norm, "{}: Scale must have the normalised shape {}, got {}", what,
                shapeToString(norm), shapeToString(scaleA.shape()));
    float* dx = k.allocOutputUninit(0, DataType::Float, x.shape()).data<float>();
    // dScale and dB are always summed (the same loop); those nobody reads go to a local buffer.
    std::vector<float> unread(static_cast<size_t>(2 * cols));
    float* dS = k.wantsOutput(1) ? k.allocOutputUninit(1, DataType::Float, norm).data<float>() : unread.data();
    float* dB = k.wantsOutput(2) ? k.allocOutputUninit(2, DataType::Float, norm).data<float>() : unread.data() + cols;
    constexpr int64_t kChunks = 64;
    int64_t perChunk = std::max<int64_t>(1, (rows + kChunks - 1) / kChunks);
    int64_t chunks = rows ? (rows + perChunk - 1) / perChunk : 0;
    std::vector<double> partial(static_cast<size_t>(chunks * 2 * cols), 0.0);
    const float *xp = x.data<float>(), *dyp = dyA.data<float>(), *sp = scaleA.data<float>();
    int64_t grain = std::max<int64_t>(1, kGrainCheap / std::max<int64_t>(1, perChunk * cols));
    parallelRanges(k.pool(), chunks, grain, [&](int64_t c0, int64_t c1) {
      std::vector<float> xh(static_cast<size_t>(cols));
      for (int64_t ch = c0; ch < c1; ++ch) {
        double* pS = partial.data() + ch * 2 * cols;
        double* pB = pS + cols;
        for (int64_t r = ch * perChunk; r < std::min(rows, (ch + 1) * perChunk); ++r) {
          const float* row = xp + r * cols;
          const float* d = dyp + r * cols;
          RowStats st = rowStats(row, cols, eps);
          auto inv = static_cast<float>(st.inv);
          RowSums t =
              GRAFT_VEC_RUN(layerNormGradSums(row, d, sp, xh.data(), pS, pB, cols, static_cast<float>(st.mean), inv));
          GRAFT_VEC_RUN(layerNormGradRow(d, sp, xh.data(), dx + r * cols, cols, inv,
                                         static_cast<float>(t.g / static_cast<double>(cols)),
                                         static_cast<float>(t.gx / static_cast<double>(cols))));
        }
      }
    });
    for (int64_t j = 0; j < cols; ++j) {
      double s = 0, b = 0;
      for (int64_t ch = 0; ch < chunks; ++ch) {
        s += partial[ch * 2 * cols + j];
        b += partial[ch * 2 * cols + cols + j];
      }
      dS[j] = static_cast<float>(s);
      dB[j] = static_cast<float>(b);
    }
  };
}

// ---- Softmax, LogSoftmax ---------------------------------------------------------------------

// exp(x - m) into e; returns the sum (in double, 16 interleaved accumulators).
GRAFT_VEC_LOOP double expShiftSum(const float* x, float* e, int64_t n, float m) {
  for (int64_t j = 0; j < n; ++j) e[j] = vecmath::exp(x[j] - m);
  constexpr int kW = 16;
  double acc[kW] = {};
  int64_t i = 0;
  for (; i + kW <= n; i += kW)
    for (int l = 0; l < kW; ++l) acc[l] += static_cast<double>(e[i + l]);
  for (int w = kW / 2; w >= 1; w /= 2)
    for (int l = 0; l < w; ++l) acc[l] += acc[l + w];
  for (; i < n; ++i) acc[0] += static_cast<double>(e[i]);
  return acc[0];
}

// The maximum as std::max folds it (NaNs are skipped), in 16 lanes so that it vectorises.
GRAFT_VEC_LOOP float rowMax(const float* x, int64_t n) {
  constexpr int kW = 16;
  float m[kW];
  for (int l = 0; l < kW; ++l) m[l] = -vecmath::kInf;
  int64_t i = 0;
  for (; i + kW <= n; i += kW)
    for (int l = 0; l < kW; ++l) m[l] = m[l] < x[i + l] ? x[i + l] : m[l];
  for (; i < n; ++i) m[0] = m[0] < x[i] ? x[i] : m[0];
  float r = m[0];
  for (int l = 1; l < kW; ++l) r = r < m[l] ? m[l] : r;
  return r;
}

GRAFT_VEC_LOOP void scaleRow(float* y, int64_t n, float s) {
  for (int64_t j = 0; j < n; ++j) y[j] *= s;
}

// (x - m) - log(s): subtracting m + log(s) in one step would round that sum at the magnitude of
// m (rows of large values, [10000, 10003], would lose their fraction).
GRAFT_VEC_LOOP void logSoftmaxRow(const float* x, float* y, int64_t n, float m, float logS) {
  for (int64_t j = 0; j < n; ++j) y[j] = (x[j] - m) - logS;
}

ops::KernelFactory softmaxKernel(bool log) {
  return [log](ops::CompileContext& c) -> ops::KernelFn {
    std::string what = c.node().describe();
    int64_t axisAttr = c.node().attrInt("axis", -1);
    return [=](ops::KernelContext& k) {
      const NDArray& x = k.input(0);
      GRAFT_CHECK(x.dtype() == DataType::Float, "{}: expected FLOAT, got {}", what, dtypeName(x.dtype()));
      int64_t axis = ops::normalizeAxis(axisAttr, x.rank(), what);
      int64_t len = x.dim(axis), inner = ops::shapeProduct(x.shape(), axis + 1, x.rank());
      int64_t rows = ops::shapeProduct(x.shape(), 0, axis) * inner;
      NDArray& y = k.allocOutputUninit(0, DataType::Float, x.shape());
      if (y.numel() == 0) return;
      const float* xp = x.data<float>();
      float* yp = y.data<float>();
      int64_t grain = std::max<int64_t>(1, kGrainCostly / std::max<int64_t>(1, len));
      parallelRanges(k.pool(), rows, grain, [&](int64_t r0, int64_t r1) {
        std::vector<float> in, out;
        if (inner > 1) in.resize(static_cast<size_t>(len)), out.resize(static_cast<size_t>(len));
        for (int64_t r = r0; r < r1; ++r) {
          int64_t base = (r / inner) * len * inner + r % inner;
          // Rows along a non-innermost axis are strided: gather them first.
          const float* row = xp + base;
          float* dst = yp + base;
          if (inner > 1) {
            for (int64_t j = 0; j < len; ++j) in[j] = xp[base + j * inner];
            row = in.data();
            dst = out.data();
          }
          float m = GRAFT_VEC_RUN(rowMax(row, len));
          if (std::isinf(m)) m = 0;  // an infinite maximum propagates, as in the reference
          double s = GRAFT_VEC_RUN(expShiftSum(row, dst, len, m));
          if (log)
            GRAFT_VEC_RUN(logSoftmaxRow(row, dst, len, m, static_cast<float>(std::log(s))));
          else
            GRAFT_VEC_RUN(scaleRow(dst, len, static_cast<float>(1.0 / s)));
          if (inner > 1)
            for (int64_t j = 0; j < len; ++j) yp[base + j * inner] = out[j];
        }
      });
    };
  };
}

bool isFloat(const ir::Tensor* t) { return typeIn(t, 1u << static_cast<int>(DataType::Float)); }

bool layerNormSupported(const ir::Node& n) {
  return isFloat(n.input(0)) && isFloat(n.input(1)) && (!n.input(2) || isFloat(n.input(2))) &&
         n.attrInt("stash_type", static_cast<int64_t>(DataType::Float)) == static_cast<int64_t>(DataType::Float);
}

bool layerNormGradSupported(const ir::Node& n) {
  return isFloat(n.input(0)) && isFloat(n.input(1)) && isFloat(n.input(2));
}

bool inputIsFloat(const ir::Node& n) { return isFloat(n.input(0)); }

}  // namespace

GRAFT_REGISTER_CPU_KERNELS(vec_norm) {
  r.add({"", "LayerNormalization", "vec_layernorm", layerNormSupported, layerNormKernel});
  r.add(
      {ops::kGraftDomain, "LayerNormalizationGrad", "vec_layernorm_grad", layerNormGradSupported, layerNormGradKernel});
  // The only softmax kernels of the cpu table (see onednn_norm.cpp for the measurements).
  r.add({"", "Softmax", "vec_softmax", inputIsFloat, softmaxKernel(false)});
  r.add({"", "LogSoftmax", "vec_logsoftmax", inputIsFloat, softmaxKernel(true)});
}

}  // namespace graft::backends::cpu
