// graft's own bf16 Winograd convolution for bf16 sessions (SessionOptions.enableBf16) on hosts
// with avx512_bf16: ai.graft FusedConv of 3x3 kernels, stride 1, no dilation, one group, constant
// weights, X and Y (and the residual Sum, typed like Y) float32 or bf16, channels last or in
// 16-channel blocks, bias, residual sum, Relu or no activation.
//
// Why: in a bf16 session oneDNN runs 3x3 convolutions directly, at the bf16 dot-product roof, while
// a float32 session runs them on Winograd's F(4x4, 3x3) with 4x fewer multiplications; on
// half-rate AVX-512 hosts (where vdpbf16ps is twice the float32 FMA rate) the two come out level,
// and bf16 gains nothing on the 3x3 layers. Winograd in bf16 takes both savings.
//
// F(2x2, 3x3) (Lavin and Gray, 2015): each 2x2 tile of outputs from a 4x4 tile of inputs,
// Y = A' [ sum_c (G g_c G') . (B' d_c B) ] A, 16 multiplications per input channel where the direct
// convolution takes 36. Not F(4x4, 3x3): with its transformed operands rounded to bf16, F(4x4)'s
// results were off by 1.3-2% of the outputs' RMS (every choice of interpolation points tried),
// against 0.2% for the direct bf16 convolution and 0.3% for F(2x2), whose transforms add and
// subtract only (docs/cpu-backend.md, "bf16 Winograd"). The transforms run in float32; V = B' d B and
// U = G g G' are rounded to bf16 (to nearest even), their products summed in float32 by vdpbf16ps.
//
// The tiles of the batch run in blocks, a block on one thread (its V and products stay in that
// core's caches), in three phases:
// 1. input transform: each tile's 4x4 x 16-channel patches (zero outside the padded image) into
//    V[xi][tile][channel] (bf16), xi the 16 positions of the transformed tile;
// 2. 16 products P[xi] = V[xi] (tiles x C) x U[xi] (C x M) on register blocks of 6 tiles x 64
//    outputs (vdpbf16ps: a pair of channels per lane), U packed in 64-column panels of channel
//    pairs, in slices of 128 channels;
// 3. output transform: P's 4x4 tiles into the 2x2 outputs, bias, residual, Relu, into Y.
// A tile whose outputs are not all finite is summed directly (as winograd_avx2 does: the
// transforms would spread a NaN or an infinity over the whole tile).
// Which shapes take it: winogradBf16Gains (measured); GRAFT_CONV_WINOGRAD=on takes every shape it
// can serve (tests), off none.
#include "backends/cpu/winograd_bf16.hpp"

#include <immintrin.h>

#include <algorithm>
#include <array>
#include <cstring>
#include <memory>
#include <vector>

#include "backends/cpu/bf16.hpp"
#include "backends/cpu/conv_avx2.hpp"
#include "backends/cpu/cpu_kernels.hpp"
#include "backends/cpu/onednn_conv.hpp"
#include "ops/registry.hpp"
#include "support/check.hpp"
#include "support/cpu_features.hpp"
#include "support/float16.hpp"
#include "support/thread_pool.hpp"

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#define GRAFT_WINO_BF16 1
#define GRAFT_AVX512_BF16 __attribute__((target("avx512f,avx512bw,avx512vl,avx512bf16")))
#endif

namespace graft::backends::cpu::winograd {

using onednn::Dims;

namespace {

constexpr int64_t kVec = 16;              // channels of a vector (16 floats, 16 bf16 in half a zmm)
constexpr int64_t kTile = 2;              // outputs per tile side
constexpr int64_t kPatch = 4;             // inputs per tile side
constexpr int64_t kXi = 16;               // positions of a transformed tile
constexpr int64_t kNr = 64;               // output channels of a register block and of a panel
constexpr int64_t kMr = 6;                // tiles of a register block
constexpr int64_t kSliceK = 128;          // input channels of a product slice (a panel's slice: 16 KB)
constexpr int64_t kBf16MinChannels = 32;  // winogradBf16Gains

// Geometry of a convolution this kernel serves.
struct Geometry : WinogradPlane {
  int64_t xb = 0, yb = 0;  // channel blocks of X and Y (C, M where channels last)
  bool xBf16 = false, yBf16 = false;
  int64_t cPad = 0, mPad = 0;      // C and M rounded up to whole vectors
  int64_t tilesH = 0, tilesW = 0;  // per image
  int64_t tiles() const { return N * tilesH * tilesW; }
};

bool hostHasBf16() {
#ifdef GRAFT_WINO_BF16
  return support::cpuFeatures().avx512bf16;
#else
  return false;
#endif
}

// The node's geometry where this kernel can serve it (whatever the gain), else nullopt.
std::optional<Geometry> geometry(const ir::Node& n) {
  // The switch first, on every host: a bad value is an error wherever a convolution is compiled.
  if (onednn::winogradMode() == onednn::WinogradMode::Off) return std::nullopt;
  if (!bf16Compute() || !hostHasBf16()) return std::nullopt;
  auto cfg = ownConv(n);
  if (!cfg) return std::nullopt;
  const onednn::ConvConfig& c = *cfg;
  using dt = onednn::memory::data_type;
  auto floatOrBf16 = [](dt t) { return t == dt::f32 || t == dt::bf16; };
  if (!floatOrBf16(c.xType) || !floatOrBf16(c.yType)) return std::nullopt;
  auto plane = winogradPlane(c);
  if (!plane) return std::nullopt;
  Geometry g;
  static_cast<WinogradPlane&>(g) = *plane;
  g.xb = c.xBlock;
  g.yb = c.yBlock;
  g.xBf16 = c.xType == dt::bf16;
  g.yBf16 = c.yType == dt::bf16;
  // Channels last, or whole 16-channel blocks (no padding lanes): a vector of 16 channels never
  // straddles two blocks.
  auto layoutOk = [](int64_t block, int64_t channels) {
    return block == channels || (block == kVec && channels % kVec == 0);
  };
  if (!layoutOk(g.xb, g.C) || !layoutOk(g.yb, g.M)) return std::nullopt;
  g.cPad = (g.C + kVec - 1) / kVec * kVec;
  g.mPad = (g.M + kVec - 1) / kVec * kVec;
  g.tilesH = (g.OH + kTile - 1) / kTile;
  g.tilesW = (g.OW + kTile - 1) / kTile;
  return g;
}

bool supports(const ir::Node& n) {
  auto g = geometry(n);
  if (!g) return false;
  return onednn::winogradMode() == onednn::WinogradMode::On ||
         winogradBf16Gains(g->C, Dims{g->N, g->M, g->OH, g->OW}, support::cpuFeatures().avx512HalfRate);
}

struct State {
  Geometry g;
  ConvEpilogue e;
  // U[xi] in panels of 64 output channels: panel p holds channel pairs [cPad / 2][width][2], width
  // the panel's outputs (64, the last panel fewer: mPad - 64 p), at p * cPad * 64.
  std::vector<uint16_t> u;
  int64_t uStride = 0;  // bf16 values per xi
  // The weights rounded to bf16, for the direct sums of non-finite tiles: [mPad / 16][C][9][16].
  std::vector<float> wDirect;
  int64_t blockTiles = 0;
  bool shared = false;  // one block of every tile, its phases split over the pool (blockTiles)
};

// U[xi](c, m) = (G g G')[xi] for F(2x2, 3x3), g = W[m, c] (3x3), computed in double and rounded to
// bf16 once; zero past C and M.
void transformWeights(const float* w, State& st) {
  const Geometry& g = st.g;
  static const double G[4][3] = {{1, 0, 0}, {0.5, 0.5, 0.5}, {0.5, -0.5, 0.5}, {0, 0, 1}};
  const int64_t panels = (g.mPad + kNr - 1) / kNr;
  st.uStride = panels * g.cPad * kNr;
  st.u.assign(static_cast<size_t>(kXi * st.uStride), 0);
  for (int64_t m = 0; m < g.M; ++m) {
    const int64_t p = m / kNr, width = std::min(kNr, g.mPad - p * kNr);
    for (int64_t c = 0; c < g.C; ++c) {
      const float* k = w + (m * g.C + c) * 9;
      double gk[4][3];
      for (int i = 0; i < 4; ++i)
        for (int j = 0; j < 3; ++j) gk[i][j] = G[i][0] * k[j] + G[i][1] * k[3 + j] + G[i][2] * k[6 + j];
      for (int i = 0; i < 4; ++i)
        for (int j = 0; j < 4; ++j) {
          const double v = gk[i][0] * G[j][0] + gk[i][1] * G[j][1] + gk[i][2] * G[j][2];
          st.u[static_cast<size_t>((i * 4 + j) * st.uStride + p * g.cPad * kNr + ((c / 2) * width + (m - p * kNr)) * 2 +
                                   (c & 1))] = BFloat16::fromFloat(static_cast<float>(v));
        }
    }
  }
  st.wDirect.assign(static_cast<size_t>(g.mPad * g.C * 9), 0.f);
  for (int64_t m = 0; m < g.M; ++m)
    for (int64_t c = 0; c < g.C; ++c)
      for (int64_t k = 0; k < 9; ++k)
        st.wDirect[static_cast<size_t>((((m / kVec) * g.C + c) * 9 + k) * kVec + m % kVec)] =
            BFloat16::toFloat(BFloat16::fromFloat(w[(m * g.C + c) * 9 + k]));
}

// Tiles per block: as many as keep a block's V (bf16) and products (float32) within kBlockBytes,
// the core's share of the caches, and at least kMinBlockTiles (each block reads all of U).
constexpr double kBlockBytes = 1.0 * 1024 * 1024;
constexpr int64_t kMinBlockTiles = 48;

void chooseBlocks(State& st, int64_t threads) {
  const Geometry& g = st.g;
  const double perTile = static_cast<double>(kXi * (g.cPad * 2 + g.mPad * 4));
  int64_t fit = std::max(kMinBlockTiles, static_cast<int64_t>(kBlockBytes / perTile));
  // Enough blocks to keep every thread busy where the batch has the tiles.
  const int64_t share = (g.tiles() + 2 * threads - 1) / (2 * threads);
  fit = std::min(fit, std::max(kMinBlockTiles, share));
  st.blockTiles = std::max<int64_t>(1, std::min(g.tiles(), fit));
  // Too few blocks for the threads: one shared block instead.
  st.shared = threads > 1 && (g.tiles() + st.blockTiles - 1) / st.blockTiles < 2 * threads;
}

#ifdef GRAFT_WINO_BF16

// 16 channels of X at `p` as float32 (the lanes outside `mask` zero).
template <bool Bf16>
GRAFT_AVX512_BF16 inline __m512 loadVec(const void* p, __mmask16 mask) {
  if constexpr (Bf16) {
    const __m256i h = _mm256_maskz_loadu_epi16(mask, p);
    // The masked forms: GCC 12 warns about the plain ones' undefined pass-through.
    return _mm512_castsi512_ps(_mm512_maskz_slli_epi32(0xFFFF, _mm512_maskz_cvtepu16_epi32(0xFFFF, h), 16));
  } else {
    return _mm512_maskz_loadu_ps(mask, p);
  }
}

template <bool Bf16>
GRAFT_AVX512_BF16 inline void storeVec(void* p, __m512 v, __mmask16 mask) {
  if constexpr (Bf16) {
    _mm256_mask_storeu_epi16(p, mask, reinterpret_cast<__m256i>(_mm512_cvtneps_pbh(v)));
  } else {
    _mm512_mask_storeu_ps(p, mask, v);
  }
}

// Element offset of channel c at (n, h, w) in an activation of `channels` channels in blocks of
// `block` ([N, channels / block, H, W, block]; channels last where block == channels).
inline int64_t offsetOf(int64_t n, int64_t c, int64_t h, int64_t w, int64_t channels, int64_t block, int64_t H,
                        int64_t W) {
  return ((n * (channels / block) + c / block) * H * W + h * W + w) * block + c % block;
}

// Phase 1 for tiles [t0, t1) of the block of `rows` tiles from `base`: V[xi][t - base][c] (bf16;
// vRow = cPad per tile).
template <bool XBf16>
GRAFT_AVX512_BF16 void inputTransform(const Geometry& g, const void* xv, uint16_t* v, int64_t base, int64_t rows,
                                      int64_t t0, int64_t t1) {
  const auto* x = static_cast<const std::conditional_t<XBf16, uint16_t, float>*>(xv);
  const int64_t perImage = g.tilesH * g.tilesW, vRow = g.cPad;
  for (int64_t t = t0; t < t1; ++t) {
    const int64_t n = t / perImage, th = (t % perImage) / g.tilesW, tw = t % g.tilesW;
    const int64_t h0 = th * kTile - g.padT, w0 = tw * kTile - g.padL;
    bool rowIn[kPatch], colIn[kPatch];
    for (int i = 0; i < kPatch; ++i) {
      rowIn[i] = h0 + i >= 0 && h0 + i < g.H;
      colIn[i] = w0 + i >= 0 && w0 + i < g.W;
    }
    uint16_t* dst = v + (t - base) * vRow;
    for (int64_t c = 0; c < g.cPad; c += kVec) {
      const __mmask16 mask =
          g.C - c >= kVec ? static_cast<__mmask16>(0xffff) : static_cast<__mmask16>((1u << (g.C - c)) - 1);
      __m512 d[kPatch][kPatch];
      for (int i = 0; i < kPatch; ++i)
        for (int j = 0; j < kPatch; ++j)
          d[i][j] = rowIn[i] && colIn[j] ? loadVec<XBf16>(x + offsetOf(n, c, h0 + i, w0 + j, g.C, g.xb, g.H, g.W), mask)
                                         : _mm512_setzero_ps();
      // B' d: rows (t0 = d0 - d2, t1 = d1 + d2, t2 = d2 - d1, t3 = d1 - d3), then the columns.
      __m512 r[kPatch][kPatch];
      for (int j = 0; j < kPatch; ++j) {
        r[0][j] = _mm512_sub_ps(d[0][j], d[2][j]);
        r[1][j] = _mm512_add_ps(d[1][j], d[2][j]);
        r[2][j] = _mm512_sub_ps(d[2][j], d[1][j]);
        r[3][j] = _mm512_sub_ps(d[1][j], d[3][j]);
      }
      for (int i = 0; i < kPatch; ++i) {
        const __m512 o[kPatch] = {_mm512_sub_ps(r[i][0], r[i][2]), _mm512_add_ps(r[i][1], r[i][2]),
                                  _mm512_sub_ps(r[i][2], r[i][1]), _mm512_sub_ps(r[i][1], r[i][3])};
        for (int j = 0; j < kPatch; ++j)
          _mm256_storeu_si256(reinterpret_cast<__m256i*>(dst + (i * kPatch + j) * rows * vRow + c),
                              reinterpret_cast<__m256i>(_mm512_cvtneps_pbh(o[j])));
      }
    }
  }
}

// One register block of phase 2: R tiles x J vectors of outputs over `pairs` channel pairs.
// a: R rows of V (bf16, aRow apart), at the slice's first channel; b: the panel's slice ([pairs]
// [J * 16][2]); c: R rows of products (float32, cRow apart), added into unless `first`.
template <int R, int J>
GRAFT_AVX512_BF16 void microKernel(const uint16_t* a, int64_t aRow, const uint16_t* b, int64_t pairs, float* c,
                                   int64_t cRow, bool first) {
  __m512 acc[R][J];
#pragma GCC unroll 8
  for (int r = 0; r < R; ++r)
#pragma GCC unroll 4
    for (int j = 0; j < J; ++j) acc[r][j] = first ? _mm512_setzero_ps() : _mm512_loadu_ps(c + r * cRow + j * kVec);
  for (int64_t k = 0; k < pairs; ++k, b += J * kVec * 2) {
    __m512bh bv[J];
#pragma GCC unroll 4
    for (int j = 0; j < J; ++j) bv[j] = reinterpret_cast<__m512bh>(_mm512_loadu_si512(b + j * kVec * 2));
#pragma GCC unroll 8
    for (int r = 0; r < R; ++r) {
      int32_t pair;
      std::memcpy(&pair, a + r * aRow + 2 * k, sizeof(pair));
      const __m512bh av = reinterpret_cast<__m512bh>(_mm512_set1_epi32(pair));
#pragma GCC unroll 4
      for (int j = 0; j < J; ++j) acc[r][j] = _mm512_dpbf16_ps(acc[r][j], av, bv[j]);
    }
  }
#pragma GCC unroll 8
  for (int r = 0; r < R; ++r)
#pragma GCC unroll 4
    for (int j = 0; j < J; ++j) _mm512_storeu_ps(c + r * cRow + j * kVec, acc[r][j]);
}

using MicroKernel = void (*)(const uint16_t*, int64_t, const uint16_t*, int64_t, float*, int64_t, bool);

template <int R>
constexpr std::array<MicroKernel, 4> kernelsOfRows() {
  return {microKernel<R, 1>, microKernel<R, 2>, microKernel<R, 3>, microKernel<R, 4>};
}

// [R - 1][J - 1]
constexpr std::array<std::array<MicroKernel, 4>, kMr> kMicroKernels = {kernelsOfRows<1>(), kernelsOfRows<2>(),
                                                                       kernelsOfRows<3>(), kernelsOfRows<4>(),
                                                                       kernelsOfRows<5>(), kernelsOfRows<6>()};

// Phase 2 for a block of `rows` tiles: P[xi] = V[xi] x U[xi] for xi in [xi0, xi1).
void products(const State& st, const uint16_t* v, float* p, int64_t rows, int64_t xi0, int64_t xi1) {
  const Geometry& g = st.g;
  const int64_t vRow = g.cPad, pRow = g.mPad, panels = (g.mPad + kNr - 1) / kNr;
  for (int64_t xi = xi0; xi < xi1; ++xi) {
    const uint16_t* a = v + xi * rows * vRow;
    float* c = p + xi * rows * pRow;
    for (int64_t k0 = 0; k0 < g.cPad; k0 += kSliceK) {
      const int64_t pairs = std::min(kSliceK, g.cPad - k0) / 2;
      for (int64_t pn = 0; pn < panels; ++pn) {
        const int64_t width = std::min(kNr, g.mPad - pn * kNr), J = width / kVec;
        const uint16_t* b = st.u.data() + xi * st.uStride + pn * g.cPad * kNr + k0 * width;
        for (int64_t r0 = 0; r0 < rows; r0 += kMr) {
          const int64_t R = std::min(kMr, rows - r0);
          kMicroKernels[static_cast<size_t>(R - 1)][static_cast<size_t>(J - 1)](
              a + r0 * vRow + k0, vRow, b, pairs, c + r0 * pRow + pn * kNr, pRow, k0 == 0);
        }
      }
    }
  }
}

// The outputs [oh0, oh0 + outRows) x [ow0, ow0 + outCols) of image n, outputs [m, m + 16), before
// bias, residual and activation, summed directly from X and the bf16-rounded W (out[i][j]).
template <bool XBf16>
GRAFT_AVX512_BF16 void directTile(const State& st, const void* xv, int64_t n, int64_t oh0, int64_t ow0, int64_t outRows,
                                  int64_t outCols, int64_t m, __m512 (&out)[kTile][kTile]) {
  const Geometry& g = st.g;
  const auto* x = static_cast<const std::conditional_t<XBf16, uint16_t, float>*>(xv);
  for (int64_t i = 0; i < outRows; ++i)
    for (int64_t j = 0; j < outCols; ++j) {
      __m512 acc = _mm512_setzero_ps();
      for (int64_t c = 0; c < g.C; ++c) {
        const float* wc = st.wDirect.data() + ((m / kVec) * g.C + c) * 9 * kVec;
        for (int64_t kh = 0; kh < 3; ++kh) {
          const int64_t h = oh0 + i - g.padT + kh;
          if (h < 0 || h >= g.H) continue;
          for (int64_t kw = 0; kw < 3; ++kw) {
            const int64_t w = ow0 + j - g.padL + kw;
            if (w < 0 || w >= g.W) continue;
            const auto xs = x[offsetOf(n, c, h, w, g.C, g.xb, g.H, g.W)];
            float xf;
            if constexpr (XBf16)
              xf = BFloat16::toFloat(xs);
            else
              xf = xs;
            acc = _mm512_fmadd_ps(_mm512_set1_ps(xf), _mm512_loadu_ps(wc + (kh * 3 + kw) * kVec), acc);
          }
        }
      }
      out[i][j] = acc;
    }
}

// Phase 3 for tiles [t0, t1) of the block of `rows` tiles from `base`.
template <bool XBf16, bool YBf16>
GRAFT_AVX512_BF16 void outputTransform(const State& st, const void* x, const float* p, const float* bias,
                                       const void* sumv, void* yv, int64_t base, int64_t rows, int64_t t0, int64_t t1) {
  const Geometry& g = st.g;
  using YT = std::conditional_t<YBf16, uint16_t, float>;
  const auto* sum = static_cast<const YT*>(sumv);
  auto* y = static_cast<YT*>(yv);
  const int64_t perImage = g.tilesH * g.tilesW, pRow = g.mPad;
  for (int64_t t = t0; t < t1; ++t) {
    const int64_t n = t / perImage, th = (t % perImage) / g.tilesW, tw = t % g.tilesW;
    const int64_t oh0 = th * kTile, ow0 = tw * kTile;
    const int64_t outRows = std::min(kTile, g.OH - oh0), outCols = std::min(kTile, g.OW - ow0);
    const float* src = p + (t - base) * pRow;
    for (int64_t m = 0; m < g.mPad; m += kVec) {
      const int64_t live = std::min(kVec, g.M - m);
      const auto mask = static_cast<__mmask16>(live >= kVec ? 0xffffu : (1u << live) - 1);
      __m512 q[kPatch][kPatch];
      for (int i = 0; i < kPatch; ++i)
        for (int j = 0; j < kPatch; ++j) q[i][j] = _mm512_loadu_ps(src + (i * kPatch + j) * rows * pRow + m);
      // A' q A: rows (s0 = q0 + q1 + q2, s1 = q1 - q2 - q3), then the columns.
      __m512 s[kTile][kPatch];
      for (int j = 0; j < kPatch; ++j) {
        s[0][j] = _mm512_add_ps(_mm512_add_ps(q[0][j], q[1][j]), q[2][j]);
        s[1][j] = _mm512_sub_ps(_mm512_sub_ps(q[1][j], q[2][j]), q[3][j]);
      }
      __m512 out[kTile][kTile];
      __m512 nonFinite = _mm512_setzero_ps();
      for (int i = 0; i < kTile; ++i) {
        out[i][0] = _mm512_add_ps(_mm512_add_ps(s[i][0], s[i][1]), s[i][2]);
        out[i][1] = _mm512_sub_ps(_mm512_sub_ps(s[i][1], s[i][2]), s[i][3]);
        // x * 0 is NaN exactly where x is NaN or infinite.
        for (int j = 0; j < kTile; ++j)
          nonFinite = _mm512_add_ps(nonFinite, _mm512_mul_ps(out[i][j], _mm512_setzero_ps()));
      }
      if (_mm512_mask_cmp_ps_mask(mask, nonFinite, nonFinite, _CMP_UNORD_Q))
        directTile<XBf16>(st, x, n, oh0, ow0, outRows, outCols, m, out);
      const __m512 b = bias ? _mm512_maskz_loadu_ps(mask, bias + m) : _mm512_setzero_ps();
      for (int64_t i = 0; i < outRows; ++i)
        for (int64_t j = 0; j < outCols; ++j) {
          const int64_t at = offsetOf(n, m, oh0 + i, ow0 + j, g.M, g.yb, g.OH, g.OW);
          __m512 o = _mm512_add_ps(out[i][j], b);
          if (sum) o = _mm512_add_ps(o, loadVec<YBf16>(sum + at, mask));
          // This operand order keeps NaN: max returns its second operand when one is NaN.
          if (st.e.relu) o = _mm512_maskz_max_ps(0xFFFF, _mm512_setzero_ps(), o);
          storeVec<YBf16>(y + at, o, mask);
        }
    }
  }
}

template <bool XBf16, bool YBf16>
void runTyped(const State& st, ops::KernelContext& k) {
  const Geometry& g = st.g;
  NDArray& y = k.allocOutputUninit(0, YBf16 ? DataType::BFloat16 : DataType::Float, st.e.yShape);
  const void* x = k.input(0).rawData();
  const float* bias = st.e.bias ? k.input(2).data<float>() : nullptr;
  // Y may share the residual's memory: each output is read from Sum before it is written.
  const void* sum = st.e.sum ? k.input(3).rawData() : nullptr;
  void* yp = y.rawData();
  const int64_t T = g.tiles();
  support::ThreadPool& pool = k.pool();
  if (st.shared) {
    // One block of every tile, each phase split over the pool: the products by positions xi, so
    // that U is read once.
    thread_local std::vector<uint16_t> vScratch;
    thread_local std::vector<float> pScratch;
    vScratch.resize(std::max(vScratch.size(), static_cast<size_t>(kXi * T * g.cPad)));
    pScratch.resize(std::max(pScratch.size(), static_cast<size_t>(kXi * T * g.mPad)));
    uint16_t* v = vScratch.data();
    float* p = pScratch.data();
    const int64_t threads = pool.numThreads();
    const int64_t chunk = (T + 2 * threads - 1) / (2 * threads);
    const auto chunks = static_cast<int>((T + chunk - 1) / chunk);
    pool.runTasks(chunks,
                  [&](int i) { inputTransform<XBf16>(g, x, v, 0, T, i * chunk, std::min(T, (i + 1) * chunk)); });
    pool.runTasks(static_cast<int>(kXi), [&](int xi) { products(st, v, p, T, xi, xi + 1); });
    pool.runTasks(chunks, [&](int i) {
      outputTransform<XBf16, YBf16>(st, x, p, bias, sum, yp, 0, T, i * chunk, std::min(T, (i + 1) * chunk));
    });
    return;
  }
  // Blocks of st.blockTiles tiles, each on one thread through its three phases.
  const int64_t blockTiles = std::min(T, st.blockTiles);
  const int64_t blocks = (T + blockTiles - 1) / blockTiles;
  pool.runTasks(static_cast<int>(blocks), [&](int i) {
    const int64_t base = i * blockTiles, rows = std::min(blockTiles, T - base);
    thread_local std::vector<uint16_t> vScratch;
    thread_local std::vector<float> pScratch;
    const auto vNeed = static_cast<size_t>(kXi * blockTiles * g.cPad),
               pNeed = static_cast<size_t>(kXi * blockTiles * g.mPad);
    if (vScratch.size() < vNeed) vScratch.resize(vNeed);
    if (pScratch.size() < pNeed) pScratch.resize(pNeed);
    inputTransform<XBf16>(g, x, vScratch.data(), base, rows, base, base + rows);
    products(st, vScratch.data(), pScratch.data(), rows, 0, kXi);
    outputTransform<XBf16, YBf16>(st, x, pScratch.data(), bias, sum, yp, base, rows, base, base + rows);
  });
}

#endif  // GRAFT_WINO_BF16

void run(const State& st, ops::KernelContext& k) {
#ifdef GRAFT_WINO_BF16
  const Geometry& g = st.g;
  if (g.xBf16)
    g.yBf16 ? runTyped<true, true>(st, k) : runTyped<true, false>(st, k);
  else
    g.yBf16 ? runTyped<false, true>(st, k) : runTyped<false, false>(st, k);
#else
  (void)st, (void)k;
  GRAFT_ASSERT(false, "winograd_bf16 run without avx512_bf16 support compiled in");
#endif
}

ops::KernelFn make(ops::CompileContext& ctx) {
  const ir::Node& n = ctx.node();
  auto g = geometry(n);
  GRAFT_ASSERT(g.has_value(), "{}: winograd_bf16 on a node it cannot serve", n.describe());
  const NDArray* w = ctx.constantInput(1);
  GRAFT_ASSERT(w, "{}: winograd_bf16 without constant weights", n.describe());
  auto st = std::make_shared<State>();
  st->g = *g;
  st->e = convEpilogue(n);
  transformWeights(w->data<float>(), *st);
  chooseBlocks(*st, ctx.pool().numThreads());
  noteImplementation(bf16ImplementationNote("winograd_bf16 F(2x2,3x3)", true));
  return [st](ops::KernelContext& k) { run(*st, k); };
}

}  // namespace

bool winogradBf16Gains(int64_t inChannels, const Dims& y, bool avx512HalfRate) {
  (void)y;
  // Half-rate AVX-512 hosts: every shape of resnet18/50 and squeezenet1_1 with at least 32 input
  // channels gained against oneDNN's bf16 brgconv (per node, alternated runs; docs/cpu-backend.md,
  // "bf16 Winograd"), 16 input channels lost (squeezenet's 16->64 at 55x55). Full-rate hosts run
  // the direct bf16 convolution at twice this rate and the transforms at the same cost: not
  // measured there, so they keep oneDNN's.
  return avx512HalfRate && inChannels >= kBf16MinChannels;
}

}  // namespace graft::backends::cpu::winograd

GRAFT_REGISTER_CPU_KERNELS(winograd_bf16) {
  using namespace graft::backends::cpu::winograd;
  // Ahead of oneDNN's bf16 convolution (priority 0), in bf16 sessions only.
  graft::backends::cpu::CpuKernelDef d{graft::ops::kGraftDomain, "FusedConv", "winograd_bf16", supports, make, 1};
  d.bf16 = true;
  d.bf16Only = true;
  r.add(d);
}
