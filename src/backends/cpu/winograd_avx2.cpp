// graft's own Winograd convolution for AVX2 hosts: ai.graft FusedConv of 3x3 kernels, stride 1,
// no dilation, one group, float32, activations in 8-channel blocks ([N, C/8, H, W, 8], the layout
// the cpu-layout pass gives convolution graphs on AVX2 hosts), constant weights, an optional
// residual sum and Relu. oneDNN 2.6 has Winograd kernels only for AVX-512 (onednn_conv.cpp); on
// AVX2 its direct kernels (jit:avx2) run at about 90% of the FMA roof, as ONNX Runtime's do, so
// fewer multiplications are the only way past them.
//
// F(4x4, 3x3) (Lavin and Gray, "Fast Algorithms for Convolutional Neural Networks", 2015): every
// 4x4 tile of outputs comes from a 6x6 tile of inputs, Y = A' [ sum_c (G g_c G') . (B' d_c B) ] A,
// 36 multiplications per input channel where the direct convolution takes 144. In three phases
// over all the tiles of the batch, each split over the session's pool:
// 1. input transform: each tile's 6x6 x 8-channel patch (zero outside the padded image) into
//    V[xi][tile][channel], xi the 36 positions of the transformed tile;
// 2. 36 products M[xi] = V[xi] (tiles x C) x U[xi] (C x M), on sgemm_avx2's register blocks, U the
//    transformed weights (G g G', computed in double once when the kernel is built) packed into
//    its panels; split into tasks of (xi, rows of tiles);
// 3. output transform: M's 6x6 tiles into the 4x4 outputs, plus bias, residual and Relu, written
//    into Y's blocks (the lanes past the last channel zero, as graft's blocked kernels expect).
// Which shapes take it is measured (winogradAvx2Gains, docs/cpu-backend.md "Winograd on AVX2");
// GRAFT_CONV_WINOGRAD=on takes every shape it can serve (tests), off none.
#include <immintrin.h>

#include <algorithm>
#include <cstring>
#include <memory>
#include <vector>

#include "backends/cpu/conv_avx2.hpp"
#include "backends/cpu/cpu_kernels.hpp"
#include "backends/cpu/gemm_geometry.hpp"
#include "backends/cpu/onednn_common.hpp"
#include "backends/cpu/onednn_conv.hpp"
#include "backends/cpu/sgemm_avx2.hpp"
#include "backends/cpu/winograd_avx2.hpp"
#include "ops/registry.hpp"
#include "support/check.hpp"
#include "support/thread_pool.hpp"

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#define GRAFT_WINO_AVX2 1
#define GRAFT_AVX2_FMA __attribute__((target("avx2,fma")))
#endif

namespace graft::backends::cpu::winograd {

using onednn::Dims;

namespace {

// winogradAvx2Gains: at least this many input channels and 4x4 output tiles; where the
// transformed weights (36 x C x M floats) pass kLargeWeightBytes, which no cache keeps from one
// step to the next in a whole model, kMinTilesLargeWeights tiles (each product reads U once a
// block: half a FLOP per byte of U per tile). 16 since 2026-12-07: resnet50 b1's five 256 x 256
// convolutions at 14x14 (16 tiles, U 9.4 MB) ran in the whole model at 0.67-1.17 ms each against
// 1.23-2.14 direct, four alternated runs in a noisy stretch (docs/cpu-backend.md, "Winograd on
// AVX2"); 512 x 512 at 7x7 (4 tiles) stays direct.
constexpr int64_t kMinChannels = 32;
constexpr int64_t kMinTiles = 8;
constexpr double kLargeWeightBytes = 4.0 * 1024 * 1024;
constexpr int64_t kMinTilesLargeWeights = 16;

constexpr int64_t kBlock = 8;         // channels per block (one ymm)
constexpr int64_t kTile = 4;          // outputs per tile side
constexpr int64_t kPatch = 6;         // inputs per tile side
constexpr int64_t kXi = 36;           // positions of a transformed tile
constexpr int64_t kRowsPerTask = 96;  // tiles per product task

// Geometry of a convolution this kernel serves.
struct Geometry : WinogradPlane {
  int64_t Cb = 0, Mb = 0;          // channel blocks in and out
  int64_t tilesH = 0, tilesW = 0;  // per image
  int64_t tiles() const { return N * tilesH * tilesW; }
};

// The node's geometry where this kernel can serve it (whatever the gain), else nullopt.
std::optional<Geometry> geometry(const ir::Node& n) {
  if (onednn::winogradMode() == onednn::WinogradMode::Off) return std::nullopt;
  auto cfg = avx2BlockedConv(n);
  if (!cfg) return std::nullopt;
  auto plane = winogradPlane(*cfg);
  if (!plane) return std::nullopt;
  Geometry g;
  static_cast<WinogradPlane&>(g) = *plane;
  g.Cb = (g.C + kBlock - 1) / kBlock;
  g.Mb = (g.M + kBlock - 1) / kBlock;
  g.tilesH = (g.OH + kTile - 1) / kTile;
  g.tilesW = (g.OW + kTile - 1) / kTile;
  return g;
}

bool supports(const ir::Node& n) {
  auto g = geometry(n);
  if (!g) return false;
  return onednn::winogradMode() == onednn::WinogradMode::On || n.attrInt("winograd", 0) == 1 ||
         winogradAvx2Gains(g->C, Dims{g->N, g->M, g->OH, g->OW});
}

struct State {
  Geometry g;
  ConvEpilogue e;
  AlignedFloats u;         // U[xi], each C x mPad packed into sgemm_avx2's panels
  int64_t uStride = 0;     // floats per xi in u
  int64_t blockTiles = 0;  // tiles per block (run)
  // The weights for the direct fallback (directTile): [Mb][C][3][3][8], zero past M.
  std::vector<float> wDirect;
};

// Tiles per block: as many as keep V and M within kBlockBytes, at least kMinBlockTiles (the products
// read all of U once per block: with many channels, 36 x C x M floats, 9.4 MB at 256 in and out,
// fewer tiles a block cost more in U's traffic than V and M spilling from the caches do). Measured
// per shape on the half-rate AVX-512 host under GRAFT_CPU_ISA=avx2, budgets of 0.5, 2 and 8 MB:
// 2 MB was best or within noise for up to 64 channels (resnet 64x56x56 b8 5.4 ms against 6.5 at
// 0.5 MB and 6.4 at 8 MB), the larger channel counts gained from the larger blocks (128x28x28 b8
// 4.4 at 8 MB, 6.0 at 2 MB).
constexpr double kBlockBytes = 2.0 * 1024 * 1024;
constexpr int64_t kMinBlockTiles = 96;
constexpr int64_t kMaxInPlaceChannels = 64;

int64_t blockTiles(const Geometry& g) {
  const auto fit = static_cast<int64_t>(kBlockBytes / (sizeof(float) * kXi * (g.Cb + g.Mb) * kBlock));
  return std::min(g.tiles(), std::max(fit, kMinBlockTiles));
}

// U[xi](c, m) = (G g G')[xi], g = W[m, c] (3x3), for F(4x4, 3x3); m < M, zero up to mPad.
void transformWeights(const float* w, State& st) {
  const Geometry& g = st.g;
  static const double G[6][3] = {{1.0 / 4, 0, 0},
                                 {-1.0 / 6, -1.0 / 6, -1.0 / 6},
                                 {-1.0 / 6, 1.0 / 6, -1.0 / 6},
                                 {1.0 / 24, 1.0 / 12, 1.0 / 6},
                                 {1.0 / 24, -1.0 / 12, 1.0 / 6},
                                 {0, 0, 1}};
  const int64_t mPad = g.Mb * kBlock;
  std::vector<float> plain(static_cast<size_t>(kXi * g.C * mPad), 0.f);  // [xi][c][m]
  for (int64_t m = 0; m < g.M; ++m)
    for (int64_t c = 0; c < g.C; ++c) {
      const float* k = w + (m * g.C + c) * 9;
      double gk[6][3];
      for (int i = 0; i < 6; ++i)
        for (int j = 0; j < 3; ++j) gk[i][j] = G[i][0] * k[j] + G[i][1] * k[3 + j] + G[i][2] * k[6 + j];
      for (int i = 0; i < 6; ++i)
        for (int j = 0; j < 6; ++j) {
          double v = gk[i][0] * G[j][0] + gk[i][1] * G[j][1] + gk[i][2] * G[j][2];
          plain[static_cast<size_t>(((i * 6 + j) * g.C + c) * mPad + m)] = static_cast<float>(v);
        }
    }
  st.wDirect.assign(static_cast<size_t>(g.Mb * g.C * 9 * kBlock), 0.f);
  for (int64_t m = 0; m < g.M; ++m)
    for (int64_t c = 0; c < g.C; ++c)
      for (int64_t k = 0; k < 9; ++k)
        st.wDirect[static_cast<size_t>((((m / kBlock) * g.C + c) * 9 + k) * kBlock + m % kBlock)] =
            w[(m * g.C + c) * 9 + k];
  GemmGeometry gg;
  gg.M = 1;
  gg.K = g.C;
  gg.N = mPad;
  st.uStride = numPanels(mPad, sgemm::panelWidth()) * g.C * sgemm::panelWidth();
  st.u.allocate(kXi * st.uStride);
  for (int64_t xi = 0; xi < kXi; ++xi)
    packPanels(plain.data() + xi * g.C * mPad, gg, sgemm::panelWidth(), st.u.data + xi * st.uStride);
}

#ifdef GRAFT_WINO_AVX2

// B' d B over one row or column of six vectors (in place semantics: d -> t).
GRAFT_AVX2_FMA inline void inputRow(const __m256* d, __m256* t) {
  const __m256 four = _mm256_set1_ps(4.f), five = _mm256_set1_ps(5.f), two = _mm256_set1_ps(2.f);
  // t0 = 4 d0 - 5 d2 + d4
  t[0] = _mm256_fnmadd_ps(five, d[2], _mm256_fmadd_ps(four, d[0], d[4]));
  // t1 = -4 (d1 + d2) + d3 + d4;  t2 = 4 (d1 - d2) - d3 + d4
  __m256 d34 = _mm256_add_ps(d[3], d[4]), d4m3 = _mm256_sub_ps(d[4], d[3]);
  t[1] = _mm256_fnmadd_ps(four, _mm256_add_ps(d[1], d[2]), d34);
  t[2] = _mm256_fmadd_ps(four, _mm256_sub_ps(d[1], d[2]), d4m3);
  // t3 = 2 (d3 - d1) + d4 - d2;  t4 = 2 (d1 - d3) + d4 - d2
  __m256 d4m2 = _mm256_sub_ps(d[4], d[2]), d1m3 = _mm256_sub_ps(d[1], d[3]);
  t[3] = _mm256_fnmadd_ps(two, d1m3, d4m2);
  t[4] = _mm256_fmadd_ps(two, d1m3, d4m2);
  // t5 = 4 d1 - 5 d3 + d5
  t[5] = _mm256_fnmadd_ps(five, d[3], _mm256_fmadd_ps(four, d[1], d[5]));
}

// A' m A over one row or column of six vectors into four.
GRAFT_AVX2_FMA inline void outputRow(const __m256* m, __m256* s) {
  const __m256 two = _mm256_set1_ps(2.f), four = _mm256_set1_ps(4.f), eight = _mm256_set1_ps(8.f);
  __m256 p12 = _mm256_add_ps(m[1], m[2]), m12 = _mm256_sub_ps(m[1], m[2]);
  __m256 p34 = _mm256_add_ps(m[3], m[4]), m34 = _mm256_sub_ps(m[3], m[4]);
  s[0] = _mm256_add_ps(_mm256_add_ps(m[0], p12), p34);
  s[1] = _mm256_fmadd_ps(two, m34, m12);
  s[2] = _mm256_fmadd_ps(four, p34, p12);
  s[3] = _mm256_add_ps(_mm256_fmadd_ps(eight, m34, m12), m[5]);
}

// Phase 1 for tiles [t0, t1) of the block starting at tile `base` (`rows` tiles) and channel
// blocks [cb0, cb1): V[xi][t - base][cb * 8 + lane]. A task writes whole cache lines of V (a
// tile's channel blocks side by side), so that the threads never write into the same line.
GRAFT_AVX2_FMA void inputTransform(const Geometry& g, const float* x, float* v, int64_t vRow, int64_t base,
                                   int64_t rows, int64_t t0, int64_t t1, int64_t cb0, int64_t cb1) {
  const int64_t perImage = g.tilesH * g.tilesW;
  for (int64_t t = t0; t < t1; ++t)
    for (int64_t cb = cb0; cb < cb1; ++cb) {
      const int64_t n = t / perImage, th = (t % perImage) / g.tilesW, tw = t % g.tilesW;
      const float* xb = x + (n * g.Cb + cb) * g.H * g.W * kBlock;
      const int64_t h0 = th * kTile - g.padT, w0 = tw * kTile - g.padL;
      __m256 d[kPatch][kPatch];
      const bool inside = h0 >= 0 && w0 >= 0 && h0 + kPatch <= g.H && w0 + kPatch <= g.W;
      for (int i = 0; i < kPatch; ++i) {
        const int64_t h = h0 + i;
        const float* row = xb + (h * g.W + w0) * kBlock;
        for (int j = 0; j < kPatch; ++j) {
          const int64_t w = w0 + j;
          d[i][j] = inside || (h >= 0 && h < g.H && w >= 0 && w < g.W) ? _mm256_loadu_ps(row + j * kBlock)
                                                                       : _mm256_setzero_ps();
        }
      }
      __m256 r[kPatch][kPatch];  // rows transformed: r[i] = B' applied down column j
      for (int j = 0; j < kPatch; ++j) {
        __m256 col[kPatch], out[kPatch];
        for (int i = 0; i < kPatch; ++i) col[i] = d[i][j];
        inputRow(col, out);
        for (int i = 0; i < kPatch; ++i) r[i][j] = out[i];
      }
      float* dst = v + (t - base) * vRow + cb * kBlock;
      for (int i = 0; i < kPatch; ++i) {
        __m256 out[kPatch];
        inputRow(r[i], out);
        for (int j = 0; j < kPatch; ++j) _mm256_storeu_ps(dst + (i * kPatch + j) * rows * vRow, out[j]);
      }
    }
}

// The outputs [oh0, oh0 + rows) x [ow0, ow0 + cols) of image n, channel block ob, before bias,
// residual and activation, summed directly from X and W (out[i][j]).
GRAFT_AVX2_FMA void directTile(const State& st, const float* x, int64_t n, int64_t oh0, int64_t ow0, int64_t rows,
                               int64_t cols, int64_t ob, __m256 (&out)[kTile][kTile]) {
  const Geometry& g = st.g;
  for (int64_t i = 0; i < rows; ++i)
    for (int64_t j = 0; j < cols; ++j) {
      __m256 acc = _mm256_setzero_ps();
      for (int64_t c = 0; c < g.C; ++c) {
        const float* xc = x + ((n * g.Cb + c / kBlock) * g.H * g.W) * kBlock + c % kBlock;
        const float* wc = st.wDirect.data() + ((ob * g.C + c) * 9) * kBlock;
        for (int64_t kh = 0; kh < 3; ++kh) {
          const int64_t h = oh0 + i - g.padT + kh;
          if (h < 0 || h >= g.H) continue;
          for (int64_t kw = 0; kw < 3; ++kw) {
            const int64_t w = ow0 + j - g.padL + kw;
            if (w < 0 || w >= g.W) continue;
            acc = _mm256_fmadd_ps(_mm256_set1_ps(xc[(h * g.W + w) * kBlock]),
                                  _mm256_loadu_ps(wc + (kh * 3 + kw) * kBlock), acc);
          }
        }
      }
      out[i][j] = acc;
    }
}

// Phase 3 for tiles [t0, t1) of the block starting at tile `base` (`rows` tiles) and output
// channel block ob.
GRAFT_AVX2_FMA void outputTransform(const State& st, const float* x, const float* mbuf, int64_t mRow, const float* bias,
                                    const float* sum, float* y, int64_t base, int64_t rows, int64_t t0, int64_t t1,
                                    int64_t ob) {
  const Geometry& g = st.g;
  const int64_t perImage = g.tilesH * g.tilesW;
  alignas(32) float lanes[kBlock];
  const int64_t live = std::min(kBlock, g.M - ob * kBlock);
  for (int64_t l = 0; l < kBlock; ++l) lanes[l] = l < live ? 1.f : 0.f;
  const __m256 keep = _mm256_cmp_ps(_mm256_load_ps(lanes), _mm256_setzero_ps(), _CMP_NEQ_OQ);
  __m256 b = _mm256_setzero_ps();
  if (bias) {
    alignas(32) float bl[kBlock] = {};
    for (int64_t l = 0; l < live; ++l) bl[l] = bias[ob * kBlock + l];
    b = _mm256_load_ps(bl);
  }
  for (int64_t t = t0; t < t1; ++t) {
    const int64_t n = t / perImage, th = (t % perImage) / g.tilesW, tw = t % g.tilesW;
    const float* src = mbuf + (t - base) * mRow + ob * kBlock;
    __m256 r[kTile][kPatch];
    for (int j = 0; j < kPatch; ++j) {
      __m256 col[kPatch], out[kTile];
      for (int i = 0; i < kPatch; ++i) col[i] = _mm256_loadu_ps(src + (i * kPatch + j) * rows * mRow);
      outputRow(col, out);
      for (int i = 0; i < kTile; ++i) r[i][j] = out[i];
    }
    const int64_t oh0 = th * kTile, ow0 = tw * kTile;
    const int64_t outRows = std::min(kTile, g.OH - oh0), outCols = std::min(kTile, g.OW - ow0);
    const int64_t yBase = (n * g.Mb + ob) * g.OH * g.OW * kBlock;
    __m256 out[kTile][kTile];
    // x * 0 is NaN exactly where x is NaN or infinite: summed over the tile's outputs, NaN where
    // any of them is (a NaN or infinity among the tile's inputs, or an overflow in a transform).
    __m256 nonFinite = _mm256_setzero_ps();
    for (int i = 0; i < kTile; ++i) {
      outputRow(r[i], out[i]);
      for (int j = 0; j < kTile; ++j)
        nonFinite = _mm256_add_ps(nonFinite, _mm256_mul_ps(out[i][j], _mm256_setzero_ps()));
    }
    if (_mm256_movemask_ps(_mm256_cmp_ps(nonFinite, nonFinite, _CMP_UNORD_Q)) & ((1 << live) - 1)) {
      // The transforms spread a NaN or an infinity over the whole tile (inf - inf): the tile's
      // outputs are summed directly instead, as the direct convolution's IEEE arithmetic has them.
      directTile(st, x, n, oh0, ow0, outRows, outCols, ob, out);
    }
    for (int i = 0; i < outRows; ++i) {
      for (int j = 0; j < outCols; ++j) {
        const int64_t at = yBase + ((oh0 + i) * g.OW + ow0 + j) * kBlock;
        __m256 o = _mm256_add_ps(out[i][j], b);
        if (sum) o = _mm256_add_ps(o, _mm256_loadu_ps(sum + at));
        // This operand order keeps NaN: max returns its second operand when one is NaN.
        if (st.e.relu) o = _mm256_max_ps(_mm256_setzero_ps(), o);
        _mm256_storeu_ps(y + at, _mm256_and_ps(o, keep));
      }
    }
  }
}

#endif  // GRAFT_WINO_AVX2

void run(const State& st, ops::KernelContext& k) {
#ifdef GRAFT_WINO_AVX2
  const Geometry& g = st.g;
  NDArray& y = k.allocOutputUninit(0, DataType::Float, st.e.yShape);
  const float* x = k.input(0).data<float>();
  const float* bias = st.e.bias ? k.input(2).data<float>() : nullptr;
  const float* sum = st.e.sum ? k.input(3).data<float>() : nullptr;
  float* yp = y.data<float>();
  const int64_t T = g.tiles(), vRow = g.Cb * kBlock, mRow = g.Mb * kBlock;
  // The tiles in blocks of st.blockTiles: V and M of a block (36 x tiles x (C + M) floats) stay in
  // the caches between the phases.
  const int64_t blockTiles = std::min(T, st.blockTiles);
  thread_local std::vector<float> scratch;
  const size_t need = static_cast<size_t>(kXi * blockTiles * (vRow + mRow));
  if (scratch.size() < need) scratch.resize(need);
  float* v = scratch.data();
  float* m = v + kXi * blockTiles * vRow;
  support::ThreadPool& pool = k.pool();
  // Tasks of kTilesPerTask tiles, by kBlocksPerTask input channel blocks (phase 1: 256 bytes of
  // each row of V) or one output channel block (phase 3).
  constexpr int64_t kTilesPerTask = 16, kBlocksPerTask = 8;
  // Up to kMaxInPlaceChannels input channels the products read V in place: copying it into
  // sgemm's micro-panels cost more than it saved (resnet 64x56x56, step minima under
  // GRAFT_CPU_ISA=avx2: b1 0.51-0.53 ms against 0.60, b8 5.4-5.6 against 6.4-6.5); with more,
  // within noise either way (128-512 channels), and the copy avoids the strided rows' L1 conflicts.
  const auto product = g.C <= kMaxInPlaceChannels ? sgemm::gemmSerialInPlace : sgemm::gemmSerial;
  for (int64_t base = 0; base < T; base += blockTiles) {
    const int64_t rows = std::min(blockTiles, T - base);
    const int64_t tileChunks = (rows + kTilesPerTask - 1) / kTilesPerTask;
    auto chunk = [&](int64_t c) {
      return std::pair<int64_t, int64_t>{base + c * kTilesPerTask,
                                         std::min(base + rows, base + (c + 1) * kTilesPerTask)};
    };
    const int64_t cbGroups = (g.Cb + kBlocksPerTask - 1) / kBlocksPerTask;
    pool.runTasks(static_cast<int>(tileChunks * cbGroups), [&](int i) {
      auto [t0, t1] = chunk(i / cbGroups);
      const int64_t cb0 = (i % cbGroups) * kBlocksPerTask;
      inputTransform(g, x, v, vRow, base, rows, t0, t1, cb0, std::min(g.Cb, cb0 + kBlocksPerTask));
    });
    const int64_t rowChunks = (rows + kRowsPerTask - 1) / kRowsPerTask;
    pool.runTasks(static_cast<int>(kXi * rowChunks), [&](int i) {
      const int64_t xi = i / rowChunks, r0 = (i % rowChunks) * kRowsPerTask, r1 = std::min(rows, r0 + kRowsPerTask);
      GemmGeometry gg;
      gg.M = r1 - r0;
      gg.K = g.C;
      gg.N = mRow;
      product(gg, v + (xi * rows + r0) * vRow, vRow, st.u.data + xi * st.uStride, m + (xi * rows + r0) * mRow);
    });
    pool.runTasks(static_cast<int>(tileChunks * g.Mb), [&](int i) {
      auto [t0, t1] = chunk(i / g.Mb);
      outputTransform(st, x, m, mRow, bias, sum, yp, base, rows, t0, t1, i % g.Mb);
    });
  }
#else
  (void)st, (void)k;
  GRAFT_ASSERT(false, "winograd_avx2 run without AVX2 support compiled in");
#endif
}

ops::KernelFn make(ops::CompileContext& ctx) {
  const ir::Node& n = ctx.node();
  auto g = geometry(n);
  GRAFT_ASSERT(g.has_value(), "{}: winograd_avx2 on a node it cannot serve", n.describe());
  const NDArray* w = ctx.constantInput(1);
  GRAFT_ASSERT(w, "{}: winograd_avx2 without constant weights", n.describe());
  auto st = std::make_shared<State>();
  st->g = *g;
  st->e = convEpilogue(n);
  transformWeights(w->data<float>(), *st);
  st->blockTiles = blockTiles(*g);
  return [st](ops::KernelContext& k) { run(*st, k); };
}

}  // namespace

bool winogradAvx2Gains(int64_t inChannels, const Dims& y) {
  const int64_t tiles = y[0] * ((y[2] + kTile - 1) / kTile) * ((y[3] + kTile - 1) / kTile);
  const double uBytes = 36.0 * sizeof(float) * static_cast<double>(inChannels) * static_cast<double>(y[1]);
  return inChannels >= kMinChannels && tiles >= (uBytes > kLargeWeightBytes ? kMinTilesLargeWeights : kMinTiles);
}

}  // namespace graft::backends::cpu::winograd

GRAFT_REGISTER_CPU_KERNELS(winograd_avx2) {
  using namespace graft::backends::cpu::winograd;
  // Ahead of oneDNN's direct convolution (priority 0), where it takes the node.
  r.add({graft::ops::kGraftDomain, "FusedConv", "winograd_avx2", supports, make, 1});
}
