// graft's 1x1 convolution for AVX-512 hosts: ai.graft FusedConv with a 1x1 kernel, stride 1, no
// padding, one group, float32, constant weights, an optional bias, residual sum and Relu, on the
// layouts the cpu-layout pass gives convolution graphs there: channels last or 16-channel blocks
// (X in any channel block that divides C; Y in blocks of whole 16-float vectors). Per image such a
// convolution is a matrix product, Y (pixels x M) = X (pixels x C) W', computed on register blocks
// of up to 6 pixels by 64 output channels (24 zmm accumulators; more pixels where the outputs fill
// fewer vectors), the weights packed once into panels of 64 columns, X broadcast from its layout in
// place and Y written in its layout in place.
//
// What it adds over oneDNN's brgconv_1x1 / jit_1x1: faster small-C shapes (its rule, `gains`), and
// the store. Where the output is about as large as the last-level cache, every line oneDNN writes
// is first read from memory (a write-allocate) and the convolution is memory-bound; this kernel
// then writes Y with streaming stores. resnet's 64->256 at 56x56, batch 8 (25.7 MB out):
// layers_bench 62-72% -> 81-88% of the FMA roof on a half-rate AVX-512 host (docs/cpu-backend.md,
// "1x1 convolutions on AVX-512").
#include <immintrin.h>

#include <algorithm>
#include <array>
#include <cstdint>
#include <memory>
#include <optional>
#include <utility>
#include <vector>

#include "backends/cpu/conv_avx2.hpp"
#include "backends/cpu/cpu_kernels.hpp"
#include "backends/cpu/gemm_geometry.hpp"
#include "backends/cpu/onednn_common.hpp"
#include "backends/cpu/onednn_conv.hpp"
#include "ops/registry.hpp"
#include "support/check.hpp"
#include "support/cpu_features.hpp"
#include "support/thread_pool.hpp"

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#define GRAFT_CONV1X1_AVX512 1
#define GRAFT_AVX512 __attribute__((target("avx512f")))
#endif

namespace graft::backends::cpu::conv1x1_avx512 {
namespace {

constexpr int64_t kVec = 16;           // floats of a zmm
constexpr int64_t kNr = 64;            // output channels of a register block and of a packed panel
constexpr int64_t kRowBlock = 48;      // pixels whose X rows a task reuses across its panels
constexpr int64_t kRowsPerTask = 192;  // pixels of a task

struct Geometry {
  int64_t N = 0, C = 0, M = 0, pixels = 0;
  int64_t xb = 0, yb = 0;  // channel blocks of X and Y (C, M where channels last)
};

#ifdef GRAFT_CONV1X1_AVX512
bool hostHasAvx512() { return support::cpuFeatures().avx512f; }
#else
bool hostHasAvx512() { return false; }
#endif

std::optional<Geometry> geometry(const ir::Node& n) {
  // The switch first, on every host: a bad value is an error wherever a convolution is compiled.
  if (onednn::conv1x1Mode() == onednn::KernelMode::Off) return std::nullopt;
  if (!hostHasAvx512()) return std::nullopt;
  auto cfg = ownFloatConv(n);
  if (!cfg || !isPointwiseWindow(*cfg)) return std::nullopt;
  const onednn::ConvConfig& c = *cfg;
  Geometry g;
  g.N = c.x[0];
  g.C = c.x[1];
  g.M = c.y[1];
  g.pixels = c.x[2] * c.x[3];
  g.xb = c.xBlock;
  g.yb = c.yBlock;
  // X: whole blocks (no padding lanes to read); Y: whole blocks of whole vectors.
  if (g.pixels < 1 || g.xb < 1 || g.yb < 1 || g.C % g.xb != 0 || g.M % g.yb != 0 || g.yb % kVec != 0)
    return std::nullopt;
  return g;
}

// Where it takes a convolution under GRAFT_CONV_1X1=auto (on: wherever it can): inputs of at most
// 64 channels into at least 48 outputs. Measured per node against oneDNN's jit_1x1 / brgconv_1x1 on
// a half-rate AVX-512 host (docs/cpu-backend.md, "1x1 convolutions on AVX-512"): ahead on every
// such shape of resnet50 and squeezenet1_1 (16->64 at 55x55 b8 0.79 -> 0.67 ms, 48->192 at 13x13
// 0.32 -> 0.26, resnet50's 64->256 at 56x56 b8 166 -> 180 GFLOP/s); level or behind with more
// input channels (512->128 at 28x28: 215 against 176-182 GFLOP/s); behind on narrow outputs
// (128->16 at 55x55: 0.55 against 1.05 ms: a step of one vector of outputs per broadcast input).
constexpr int64_t kMaxInputChannels = 64;
constexpr int64_t kMinOutputChannels = 48;

bool gains(const Geometry& g) { return g.C <= kMaxInputChannels && g.M >= kMinOutputChannels; }

bool supports(const ir::Node& n) {
  auto g = geometry(n);
  return g && (onednn::conv1x1Mode() == onednn::KernelMode::On || gains(*g));
}

struct State {
  Geometry g;
  ConvEpilogue e;
  AlignedFloats w;  // W' (C x M) in panels of 64 columns: [M / 64 rounded up][C][64], zero-padded
  bool stream = false;
};

#ifdef GRAFT_CONV1X1_AVX512

struct Tile {
  const float* x;        // X at the tile's first pixel, channel block 0
  int64_t xRow;          // floats between pixels (X's channel block)
  int64_t xBlockStride;  // floats between X's channel blocks
  int64_t xb, C;
  const float* w;        // the panel
  float* y[kNr / kVec];  // Y at the tile's first pixel, for each vector of output channels
  int64_t yRow;          // floats between pixels (Y's channel block)
  const float* bias;     // the tile's first output channel, or null
  bool accumulate, relu, stream;
};

// One register block: R pixels by J vectors of output channels.
template <int R, int J>
GRAFT_AVX512 void microKernel(const Tile& t) {
  __m512 acc[R][J];
#pragma GCC unroll 8
  for (int r = 0; r < R; ++r)
#pragma GCC unroll 4
    for (int j = 0; j < J; ++j) {
      __m512 v = t.bias ? _mm512_loadu_ps(t.bias + j * kVec) : _mm512_setzero_ps();
      if (t.accumulate) v = _mm512_add_ps(v, _mm512_loadu_ps(t.y[j] + r * t.yRow));
      acc[r][j] = v;
    }
  const float* w = t.w;
  for (int64_t k0 = 0; k0 < t.C; k0 += t.xb) {
    const float* x = t.x + (k0 / t.xb) * t.xBlockStride;
    for (int64_t kk = 0; kk < t.xb; ++kk, w += kNr) {
      __m512 b[J];
#pragma GCC unroll 4
      for (int j = 0; j < J; ++j) b[j] = _mm512_load_ps(w + j * kVec);
#pragma GCC unroll 8
      for (int r = 0; r < R; ++r) {
        const __m512 a = _mm512_set1_ps(x[r * t.xRow + kk]);
#pragma GCC unroll 4
        for (int j = 0; j < J; ++j) acc[r][j] = _mm512_fmadd_ps(a, b[j], acc[r][j]);
      }
    }
  }
  const __m512 zero = _mm512_setzero_ps();
#pragma GCC unroll 8
  for (int r = 0; r < R; ++r)
#pragma GCC unroll 4
    for (int j = 0; j < J; ++j) {
      // max(0, v) keeps NaN (as the reference Relu); the masked form because GCC 12 warns about
      // _mm512_max_ps's undefined pass-through.
      const __m512 v = t.relu ? _mm512_maskz_max_ps(0xFFFF, zero, acc[r][j]) : acc[r][j];
      if (t.stream)
        _mm512_stream_ps(t.y[j] + r * t.yRow, v);
      else
        _mm512_storeu_ps(t.y[j] + r * t.yRow, v);
    }
}

using MicroKernel = void (*)(const Tile&);

// Rows of a register block by its vectors of output channels: 24 accumulators where the output
// channels fill 3 or 4 vectors; 12 rows of 1 or 2 vectors (squeezenet's squeezes, M = 16 or 32),
// where 6 rows of one vector spent more of each step on its broadcasts than on its FMAs.
constexpr int kMaxRows[kNr / kVec] = {12, 12, 8, 6};
constexpr int kMostRows = 12;

template <int J, int... R>
constexpr std::array<MicroKernel, kMostRows> kernelsFor(std::integer_sequence<int, R...>) {
  return {microKernel<(R + 1 <= kMaxRows[J - 1] ? R + 1 : 1), J>...};
}
constexpr std::array<MicroKernel, kMostRows> kKernels[kNr / kVec] = {
    kernelsFor<1>(std::make_integer_sequence<int, kMostRows>{}),
    kernelsFor<2>(std::make_integer_sequence<int, kMostRows>{}),
    kernelsFor<3>(std::make_integer_sequence<int, kMostRows>{}),
    kernelsFor<4>(std::make_integer_sequence<int, kMostRows>{})};

// Pixels [r0, r1) of image n by panels [p0, p1).
GRAFT_AVX512 void runTask(const State& st, bool stream, const float* x, float* y, const float* bias, int64_t n,
                          int64_t r0, int64_t r1, int64_t p0, int64_t p1) {
  const Geometry& g = st.g;
  const int64_t P = g.pixels;
  Tile t;
  t.xRow = g.xb;
  t.xBlockStride = P * g.xb;
  t.xb = g.xb;
  t.C = g.C;
  t.yRow = g.yb;
  t.accumulate = st.e.sum;
  t.relu = st.e.relu;
  t.stream = stream;
  const float* xImage = x + n * g.C * P;
  float* yImage = y + n * g.M * P;
  for (int64_t rb = r0; rb < r1; rb += kRowBlock) {
    const int64_t rbEnd = std::min(r1, rb + kRowBlock);
    for (int64_t p = p0; p < p1; ++p) {
      const int64_t col0 = p * kNr;
      const int J = static_cast<int>(std::min<int64_t>(kNr, g.M - col0) / kVec);
      t.w = st.w.data + p * g.C * kNr;
      t.bias = bias ? bias + col0 : nullptr;
      const int most = kMaxRows[J - 1];
      for (int64_t r = rb; r < rbEnd; r += most) {
        const int R = static_cast<int>(std::min<int64_t>(most, rbEnd - r));
        t.x = xImage + r * g.xb;
        for (int j = 0; j < J; ++j) {
          const int64_t col = col0 + j * kVec;
          t.y[j] = yImage + (col / g.yb) * P * g.yb + r * g.yb + col % g.yb;
        }
        kKernels[J - 1][static_cast<size_t>(R - 1)](t);
      }
    }
  }
  if (stream) _mm_sfence();
}

#endif  // GRAFT_CONV1X1_AVX512

void run(const State& st, ops::KernelContext& k) {
#ifdef GRAFT_CONV1X1_AVX512
  const Geometry& g = st.g;
  NDArray& y = convOutput(st.e, k);
  const float* x = k.input(0).data<float>();
  float* yp = y.data<float>();
  const float* bias = st.e.bias ? k.input(2).data<float>() : nullptr;
  const int64_t panels = (g.M + kNr - 1) / kNr;
  const int64_t threads = k.pool().numThreads();
  // Tasks: images x pixel chunks x panel chunks, the panels split until the tasks fill whole
  // rounds of the threads (or there are enough of them to balance anyway).
  // (in whole register blocks of every height: multiples of 24 pixels)
  int64_t rowChunks = (g.pixels + kRowsPerTask - 1) / kRowsPerTask;
  const int64_t rows = ((g.pixels + rowChunks - 1) / rowChunks + 23) / 24 * 24;
  rowChunks = (g.pixels + rows - 1) / rows;
  int64_t colChunks = 1;
  while (colChunks < panels && (g.N * rowChunks * colChunks) % threads != 0 &&
         g.N * rowChunks * colChunks < 8 * threads)
    ++colChunks;
  const int64_t panelsPerTask = (panels + colChunks - 1) / colChunks;
  colChunks = (panels + panelsPerTask - 1) / panelsPerTask;
  // Streaming stores need 64-byte aligned rows; Y's rows are whole vectors, so its base decides.
  const bool stream = st.stream && reinterpret_cast<uintptr_t>(yp) % 64 == 0;
  k.pool().runTasks(static_cast<int>(g.N * rowChunks * colChunks), [&](int i) {
    const int64_t n = i / (rowChunks * colChunks), rc = (i / colChunks) % rowChunks, cc = i % colChunks;
    const int64_t r0 = rc * rows, r1 = std::min(g.pixels, r0 + rows);
    const int64_t p0 = cc * panelsPerTask, p1 = std::min(panels, p0 + panelsPerTask);
    runTask(st, stream, x, yp, bias, n, r0, r1, p0, p1);
  });
#else
  (void)st;
  (void)k;
  GRAFT_ASSERT(false, "conv1x1_avx512 without AVX-512 support in this build");
#endif
}

ops::KernelFn make(ops::CompileContext& ctx) {
  const ir::Node& n = ctx.node();
  auto g = geometry(n);
  GRAFT_ASSERT(g.has_value(), "{}: conv1x1_avx512 on a node it cannot serve", n.describe());
  const NDArray* w = ctx.constantInput(1);
  GRAFT_ASSERT(w, "{}: conv1x1_avx512 without constant weights", n.describe());
  auto st = std::make_shared<State>();
  st->g = *g;
  st->e = convEpilogue(n);
  // W [M, C] -> panels [M / 64][C][64] of W' = W^T, the last one zero-padded.
  const int64_t panels = (g->M + kNr - 1) / kNr;
  st->w.allocate(panels * g->C * kNr);
  std::fill(st->w.data, st->w.data + panels * g->C * kNr, 0.f);
  const float* wp = w->data<float>();
  for (int64_t m = 0; m < g->M; ++m)
    for (int64_t c = 0; c < g->C; ++c) st->w.data[((m / kNr) * g->C + c) * kNr + m % kNr] = wp[m * g->C + c];
  st->stream = onednn::conv1x1Streams(g->N * g->M * g->pixels * static_cast<int64_t>(sizeof(float)), st->e.sum);
  return [st](ops::KernelContext& k) { run(*st, k); };
}

}  // namespace
}  // namespace graft::backends::cpu::conv1x1_avx512

GRAFT_REGISTER_CPU_KERNELS(conv1x1_avx512) {
  using namespace graft::backends::cpu::conv1x1_avx512;
  // Ahead of oneDNN's convolution (priority 0), where it takes the node.
  r.add({graft::ops::kGraftDomain, "FusedConv", "conv1x1_avx512", supports, make, 1});
}
