// graft's max pooling of channel-blocked and channels-last activations (ai.graft::ChannelBlocked
// of a 2-D MaxPool without Indices, from the cpu-layout pass): every window of a block of B
// channels (B = C: channels last) is B contiguous floats per input pixel, so the max runs along
// the channels, vectorised (maxRows: the window's rows, then its columns), output rows (batch,
// channel block, output row) split over the pool's threads. NaN propagates as in the reference (and PyTorch), without
// the second pass over a NaN mask that oneDNN's max pooling needs. oneDNN 2.6's jit pooling of squeezenet1_1's first
// channels-last MaxPool (8 x 64 x 111 x 111, 3x3 stride 2, ceil_mode) took 2.1 ms, plus a NaN scan
// of its input; docs/cpu-backend.md "Max pooling".
#include <algorithm>
#include <limits>
#include <memory>
#include <vector>

#include "backends/cpu/cpu_kernels.hpp"
#include "backends/cpu/onednn_common.hpp"
#include "backends/cpu/vec_common.hpp"
#include "ops/registry.hpp"
#include "support/check.hpp"

namespace graft::backends::cpu::pool {
namespace {

struct MaxPoolConfig {
  Shape x, y;     // logical [N, C, H, W]
  Shape yStored;  // y as stored (blocked)
  int64_t block = 0, blocks = 0;
  onednn::Window win;
};

std::optional<MaxPoolConfig> maxPoolConfig(const ir::Node& n) {
  if (n.type() != "ChannelBlocked") return std::nullopt;
  onednn::NodeLayout l = onednn::nodeLayout(n);
  if (l.op != "MaxPool" || l.block == 0 || n.numInputs() != 1 || n.numOutputs() < 1) return std::nullopt;
  if (n.numOutputs() > 1 && n.hasOutput(1)) return std::nullopt;  // Indices
  if (!onednn::isStaticFloat(n.input(0)) || !onednn::isStaticFloat(n.output(0))) return std::nullopt;
  auto x = l.logical(n.input(0)), y = l.logical(n.output(0));
  if (!x || !y || x->size() != 4 || y->size() != 4) return std::nullopt;
  for (int64_t d : *x)
    if (d == 0) return std::nullopt;
  auto ks = n.attrInts("kernel_shape", {});
  if (ks.size() != 2) return std::nullopt;
  // Every window holds at least one input pixel (windows over padding only are the reference's).
  auto w = onednn::resolveWindow(n, Shape{(*x)[2], (*x)[3]}, Shape(ks.begin(), ks.end()),
                                 n.attrInt("ceil_mode", 0) != 0, /*paddingOnlyWindows=*/false);
  if (!w) return std::nullopt;
  MaxPoolConfig c;
  c.x = *x;
  c.y = *y;
  c.block = l.block;
  c.blocks = (c.x[1] + c.block - 1) / c.block;
  c.win = *w;
  c.yStored = n.output(0)->info().shape();
  if (c.y != Shape{c.x[0], c.x[1], c.win.out[0], c.win.out[1]}) return std::nullopt;
  return c;
}

bool supports(const ir::Node& n) { return maxPoolConfig(n).has_value(); }

// The max that keeps NaN: the running value once it is NaN, or a NaN v.
GRAFT_VEC_LOOP float maxNan(float r, float v) { return v > r || v != v ? v : r; }

using V8 = FloatVec<8>::type;
GRAFT_VEC_LOOP V8 load8(const float* p) { return *reinterpret_cast<const FloatVec<8>::unaligned*>(p); }
GRAFT_VEC_LOOP void store8(float* p, V8 v) { *reinterpret_cast<FloatVec<8>::unaligned*>(p) = v; }
GRAFT_VEC_LOOP V8 maxNan8(V8 r, V8 v) { return ((v > r) | (v != v)) ? v : r; }

// Output rows [r0, r1) of (batch, channel block, output row), each OW x B floats, in two passes
// per chunk of output columns: the max of the window's input rows over the chunk's input columns
// into t (one contiguous stretch: vectorised whatever B is), then of each window's columns of t.
// Max is associative, and maxNan keeps a NaN in either operand, so the order changes nothing but
// the sign of a zero tie. BT: B known at compile time (8, 16: one vector per pixel), 0: B =
// c.block (channels last). The chunks keep t within kChunkBytes, in L1 beside the input rows
// streaming through: a channels-last row of squeezenet1_1's first pool (111 pixels x 64
// channels, 28 KB) as one stretch was evicted to L2 by its own input rows between the passes.
constexpr int64_t kChunkBytes = 8192;

template <int64_t BT>
GRAFT_VEC_LOOP void maxRows(const MaxPoolConfig& c, const float* __restrict x, float* __restrict y, int64_t r0,
                            int64_t r1, float* __restrict t) {
  const int64_t B = BT ? BT : c.block, H = c.x[2], W = c.x[3], OH = c.y[2], OW = c.y[3];
  const int64_t kh = c.win.kernel[0], kw = c.win.kernel[1], sh = c.win.strides[0], sw = c.win.strides[1];
  const int64_t dh = c.win.dilation[0] + 1, dw = c.win.dilation[1] + 1, ph = c.win.padBegin[0], pw = c.win.padBegin[1];
  const int64_t WB = W * B;
  const int64_t chunk = std::max<int64_t>(1, kChunkBytes / static_cast<int64_t>(sizeof(float) * sw * B));
  for (int64_t r = r0; r < r1; ++r) {
    const int64_t plane = r / OH, oh = r % OH;  // plane: batch x channel block
    const float* xp = x + plane * H * WB;
    for (int64_t oc0 = 0; oc0 < OW; oc0 += chunk) {
      const int64_t oc1 = std::min(OW, oc0 + chunk);
      // The chunk's input columns [s0, s1): its windows' first to last column inside the row.
      const int64_t s0 = std::max<int64_t>(0, oc0 * sw - pw);
      const int64_t s1 = std::min(W, (oc1 - 1) * sw - pw + (kw - 1) * dw + 1);
      const int64_t n = (s1 - s0) * B;
      bool first = true;
      for (int64_t i = 0; i < kh; ++i) {
        const int64_t ih = oh * sh - ph + i * dh;
        if (ih < 0 || ih >= H) continue;
        const float* __restrict xr = xp + ih * WB + s0 * B;
        if (first) {
          for (int64_t k = 0; k < n; ++k) t[k] = xr[k];
          first = false;
        } else {
          for (int64_t k = 0; k < n; ++k) t[k] = maxNan(t[k], xr[k]);
        }
      }
      for (int64_t ow = oc0; ow < oc1; ++ow) {
        float* __restrict yo = y + (r * OW + ow) * B;
        const int64_t iw0 = ow * sw - pw;
        int64_t j0 = 0, j1 = kw;  // the window's columns inside the row
        while (j0 < kw && iw0 + j0 * dw < 0) ++j0;
        while (j1 > j0 && iw0 + (j1 - 1) * dw >= W) --j1;
        const float* __restrict tc = t + (iw0 + j0 * dw - s0) * B;
        if (B % 8 == 0) {
          // Eight channels at a time in explicit vectors: with B a constant, GCC unrolled the scalar
          // loop below into eight compares and branches a column (5x slower under AVX2).
          for (int64_t b = 0; b < B; b += 8) {
            V8 acc = load8(tc + b);
            for (int64_t j = j0 + 1; j < j1; ++j) acc = maxNan8(acc, load8(t + (iw0 + j * dw - s0) * B + b));
            store8(yo + b, acc);
          }
          continue;
        }
        for (int64_t b = 0; b < B; ++b) yo[b] = tc[b];
        for (int64_t j = j0 + 1; j < j1; ++j) {
          const float* __restrict tj = t + (iw0 + j * dw - s0) * B;
          for (int64_t b = 0; b < B; ++b) yo[b] = maxNan(yo[b], tj[b]);
        }
      }
    }
  }
}

ops::KernelFn make(ops::CompileContext& ctx) {
  auto c = maxPoolConfig(ctx.node());
  GRAFT_ASSERT(c, "{}: vec_maxpool on an unsupported node", ctx.node().describe());
  auto st = std::make_shared<MaxPoolConfig>(*c);
  return [st](ops::KernelContext& k) {
    const MaxPoolConfig& c = *st;
    const NDArray& x = k.input(0);
    NDArray& y = k.allocOutputUninit(0, DataType::Float, c.yStored);
    const float* xp = x.data<float>();
    float* yp = y.data<float>();
    const int64_t rows = c.x[0] * c.blocks * c.y[2], rowFloats = c.y[3] * c.block * c.win.kernel[0] * c.win.kernel[1];
    parallelRanges(k.pool(), rows, std::max<int64_t>(1, kGrainCheap / std::max<int64_t>(1, rowFloats)),
                   [&](int64_t r0, int64_t r1) {
                     thread_local std::vector<float> t;  // one input row's window max, per thread
                     const auto need = static_cast<size_t>(c.x[3] * c.block);
                     if (t.size() < need) t.resize(need);
                     float* tp = t.data();
                     if (c.block == 8) {
                       GRAFT_VEC_RUN(maxRows<8>(c, xp, yp, r0, r1, tp));
                     } else if (c.block == 16) {
                       GRAFT_VEC_RUN(maxRows<16>(c, xp, yp, r0, r1, tp));
                     } else {
                       GRAFT_VEC_RUN(maxRows<0>(c, xp, yp, r0, r1, tp));
                     }
                   });
  };
}

}  // namespace
}  // namespace graft::backends::cpu::pool

GRAFT_REGISTER_CPU_KERNELS(vec_pool) {
  using namespace graft::backends::cpu::pool;
  // Ahead of onednn_pool (0) for the channel-blocked 2-D MaxPool.
  r.add({graft::ops::kGraftDomain, "ChannelBlocked", "vec_maxpool", supports, make, 1});
}
