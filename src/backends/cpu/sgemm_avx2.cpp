// graft's own float GEMM for ai.onnx Gemm and ai.graft FusedGemm (no activation or Relu) on
// CPUs with AVX2 and FMA: Y = act(alpha * A' @ B' + beta * C); also MatMul / FusedMatMul of
// A [..., M, K] by a 2-D B (the rows of A merged).
//
// Design (the usual BLIS-style blocking, sized for AVX2's 16 ymm registers):
// - B' is packed into panels of 16 columns (two ymm), K consecutive rows per panel, the last
//   panel zero-padded, once when the kernel is built: only a constant B (an inference weight)
//   runs here (supportsGemm); a B fed at run time is left to oneDNN.
// - A 6x16 register block (12 accumulators, 2 for B, 1 for the broadcast A element) runs over
//   K blocks of kKc. Per task (at most kMc rows x kNc columns) and K block, the rows of A are
//   packed 6 at a time k-major (up to 264 KiB, in L2); each 16-column slice of B (32 KiB) then
//   sweeps all of them.
// - Tasks (column chunks x row chunks) are split over the session's pool; every output element
//   is computed by the same sequence of FMAs whatever the split, so results do not depend on
//   the thread count.
// - alpha, beta * C (any shape that broadcasts to [M, N]) and Relu are applied to the registers
//   after the last K block, before the single store.
// The functions holding AVX2 code carry target attributes, and the kernel registers as
// supporting nodes only when the CPU has AVX2 and FMA, so the library still runs elsewhere.
#include <immintrin.h>

#include <algorithm>
#include <cstring>
#include <memory>
#include <optional>
#include <vector>

#include "backends/cpu/cpu_kernels.hpp"
#include "backends/cpu/fused_activation.hpp"
#include "backends/cpu/gemm_geometry.hpp"
#include "backends/cpu/onednn_common.hpp"
#include "backends/cpu/sgemm_avx2.hpp"
#include "ops/registry.hpp"
#include "support/check.hpp"
#include "support/cpu_features.hpp"
#include "support/thread_pool.hpp"

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#define GRAFT_SGEMM_AVX2 1
#define GRAFT_AVX2_FMA __attribute__((target("avx2,fma")))
#endif

namespace graft::backends::cpu::sgemm {
namespace {

constexpr int kMr = 6;        // rows of the register block
constexpr int kNr = 16;       // columns of a packed panel (two ymm)
// Depth of a K block and most rows of a task: the packed 132 x 512 block of A (264 KiB) stays in
// a 512 KiB L2 (an AVX2 EPYC's; 1 MiB on Zen 4), and each column panel of B (32 KiB) sweeps it.
// Measured under GRAFT_CPU_ISA=avx2 on the half-rate AVX-512 EPYC (layers_bench, 2 threads, 15
// timings, two alternated rounds; 2026-12-06): mlp b256's 256x2048x2048 best 191 -> 196 GFLOP/s
// (median 176-189 -> 186-190), bert's 512x768x3072 197-204 -> 202-206 against 96 x 256; 258 x 512
// measured about the same here but would spill a 512 KiB L2. Whole models (four alternated runs):
// mlp b256 15.8 -> 15.35 ms, lstm2 b32 91.3 -> 90.1, bert4 b1 unchanged.
constexpr int64_t kKc = 512;
constexpr int64_t kNc = 512;  // most columns of a task (32 panels)
constexpr int64_t kMc = int64_t{22} * kMr;

bool cpuHasAvx2Fma() {
#ifdef GRAFT_SGEMM_AVX2
  // support::cpuFeatures(): GRAFT_CPU_ISA=baseline turns this kernel off on any host.
  // Not where the kernels may use AVX-512: oneDNN's sgemm runs there at about twice this
  // kernel's speed (mlp b256 on an AVX-512 EPYC: sgemm_avx2 222 GFLOP/s, oneDNN ~450, issue 12).
  // GRAFT_CPU_ISA=avx2 on such a host caps oneDNN to AVX2 as well, and this kernel runs again.
  const support::CpuFeatures& f = support::cpuFeatures();
  return f.avx2 && f.fma && !f.avx512f;
#else
  return false;
#endif
}

// Where this kernel beats oneDNN 2.6: products of up to 512 rows and at least 512 columns. (First
// measured single-threaded on an AVX2-only EPYC: 256 x 2048 x 2048 at ~70 GFLOP/s against
// oneDNN's ~35, from 1024 columns. With balanced column chunks, on 2 threads under
// GRAFT_CPU_ISA=avx2 on the half-rate AVX-512 EPYC, layers_bench, two rounds, 2026-12-06: bert's
// 768-column products gained too, 128x768x768 146-183 -> 206-212 GFLOP/s, 128x3072x768 185-191
// -> 194-209, 512x768x768 191-205 -> 209-213, and 512x3072x768 stayed within noise, 164-204 ->
// 183-192.) With more rows oneDNN is as fast or faster (its blocking reuses B better), and
// matrix-vector products (M < 6), bound by reading B, favour its gemv.
bool worthIt(const GemmGeometry& g) { return g.M >= kMr && g.M <= 512 && g.N >= 512; }

// Only a constant B (an inference weight): a B fed at run time (training) would be packed on
// every run, which measured slower than oneDNN reading it in place.
// An activation other than Relu runs after each task's part of the product, graft's own formula
// over the task's rows (fusedActivation): bert4's GELU, which oneDNN 2.6's AVX2 gemm applied as a
// post-op at half the product's speed (docs/cpu-backend.md, "Kernel choice by ISA").
bool supportsGemm(const ir::Node& n) {
  if (!cpuHasAvx2Fma()) return false;
  const ir::Tensor* b = n.numInputs() > 1 ? n.input(1) : nullptr;
  if (!b || b->kind() != ir::TensorKind::Constant) return false;
  auto g = gemmGeometry(n, /*anyActivation=*/true);
  if (!g || !worthIt(*g)) return false;
  if (g->otherActivation) {
    try {
      return static_cast<bool>(fusedActivation(n));
    } catch (const Error&) {
      return false;
    }
  }
  return true;
}

// What the register block needs after the last K block.
struct Epilogue {
  float alpha, beta;
  const float* c;  // nullptr when there is no C term
  int64_t cRowStride, cColStride;
  bool relu;
};

#ifdef GRAFT_SGEMM_AVX2

GRAFT_AVX2_FMA inline __m256i laneMask(int n) {
  // Lanes [0, n) set (n clamped to [0, 8]).
  alignas(32) static const int32_t ramp[8] = {0, 1, 2, 3, 4, 5, 6, 7};
  __m256i idx = _mm256_load_si256(reinterpret_cast<const __m256i*>(ramp));
  return _mm256_cmpgt_epi32(_mm256_set1_epi32(std::clamp(n, 0, 8)), idx);
}

GRAFT_AVX2_FMA inline __m256 loadPart(const float* p, bool full, __m256i mask) {
  return full ? _mm256_loadu_ps(p) : _mm256_maskload_ps(p, mask);
}

GRAFT_AVX2_FMA inline void storePart(float* p, bool full, __m256i mask, __m256 v) {
  if (full)
    _mm256_storeu_ps(p, v);
  else
    _mm256_maskstore_ps(p, mask, v);
}

// C[0:MR, 0:cols] (op)= the block's product over kc columns of A, packed k-major with 6 rows per
// k (a[k * 6 + r]; Packed) or row-major in place (a[r * lda + k]), and of the packed panel of B.
// `accumulate`: add to what C holds (a later K block); `ep`: the last K block's epilogue, for
// rows starting at global row `row` and columns at global column `col`.
template <int MR, bool Packed>
GRAFT_AVX2_FMA void microKernel(int64_t kc, const float* a, int64_t lda, const float* bp, float* c, int64_t ldc,
                                int cols, bool accumulate, const Epilogue* ep, int64_t row, int64_t col) {
  // Named accumulators rather than an array indexed in the loop: GCC keeps an array in memory
  // in sync on every iteration (a store per FMA), which halves the throughput.
  __m256 z = _mm256_setzero_ps();
  __m256 a00 = z, a01 = z, a10 = z, a11 = z, a20 = z, a21 = z, a30 = z, a31 = z, a40 = z, a41 = z, a50 = z, a51 = z;
  const int64_t rs = Packed ? 1 : lda, ks = Packed ? kMr : 1;
  const float *a0 = a, *a1 = a + rs, *a2 = a + 2 * rs, *a3 = a + 3 * rs, *a4 = a + 4 * rs, *a5 = a + 5 * rs;
  for (int64_t k = 0; k < kc; ++k) {
    __m256 b0 = _mm256_load_ps(bp + k * kNr), b1 = _mm256_load_ps(bp + k * kNr + 8);
    __m256 av = _mm256_broadcast_ss(a0 + k * ks);
    a00 = _mm256_fmadd_ps(av, b0, a00);
    a01 = _mm256_fmadd_ps(av, b1, a01);
    if constexpr (MR > 1) {
      av = _mm256_broadcast_ss(a1 + k * ks);
      a10 = _mm256_fmadd_ps(av, b0, a10);
      a11 = _mm256_fmadd_ps(av, b1, a11);
    }
    if constexpr (MR > 2) {
      av = _mm256_broadcast_ss(a2 + k * ks);
      a20 = _mm256_fmadd_ps(av, b0, a20);
      a21 = _mm256_fmadd_ps(av, b1, a21);
    }
    if constexpr (MR > 3) {
      av = _mm256_broadcast_ss(a3 + k * ks);
      a30 = _mm256_fmadd_ps(av, b0, a30);
      a31 = _mm256_fmadd_ps(av, b1, a31);
    }
    if constexpr (MR > 4) {
      av = _mm256_broadcast_ss(a4 + k * ks);
      a40 = _mm256_fmadd_ps(av, b0, a40);
      a41 = _mm256_fmadd_ps(av, b1, a41);
    }
    if constexpr (MR > 5) {
      av = _mm256_broadcast_ss(a5 + k * ks);
      a50 = _mm256_fmadd_ps(av, b0, a50);
      a51 = _mm256_fmadd_ps(av, b1, a51);
    }
  }
  const __m256 acc0[6] = {a00, a10, a20, a30, a40, a50}, acc1[6] = {a01, a11, a21, a31, a41, a51};
  bool full = cols == kNr;
  __m256i m0 = laneMask(cols), m1 = laneMask(cols - 8);
  for (int r = 0; r < MR; ++r) {
    float* cr = c + r * ldc;
    __m256 v0 = acc0[r], v1 = acc1[r];
    if (accumulate) {
      v0 = _mm256_add_ps(v0, loadPart(cr, full, m0));
      v1 = _mm256_add_ps(v1, loadPart(cr + 8, full, m1));
    }
    if (ep) {
      if (ep->alpha != 1.f) {
        __m256 al = _mm256_set1_ps(ep->alpha);
        v0 = _mm256_mul_ps(v0, al);
        v1 = _mm256_mul_ps(v1, al);
      }
      if (ep->c) {
        const float* crow = ep->c + (row + r) * ep->cRowStride;
        __m256 c0, c1;
        if (ep->cColStride == 0) {
          c0 = c1 = _mm256_set1_ps(crow[0]);
        } else {
          c0 = loadPart(crow + col, full, m0);
          c1 = loadPart(crow + col + 8, full, m1);
        }
        __m256 be = _mm256_set1_ps(ep->beta);
        v0 = _mm256_fmadd_ps(be, c0, v0);
        v1 = _mm256_fmadd_ps(be, c1, v1);
      }
      if (ep->relu) {
        // This operand order keeps NaN: max returns its second operand when one is NaN.
        v0 = _mm256_max_ps(_mm256_setzero_ps(), v0);
        v1 = _mm256_max_ps(_mm256_setzero_ps(), v1);
      }
    }
    storePart(cr, full, m0, v0);
    storePart(cr + 8, full, m1, v1);
  }
}

using MicroFn = void (*)(int64_t, const float*, int64_t, const float*, float*, int64_t, int, bool, const Epilogue*,
                         int64_t, int64_t);
constexpr MicroFn kMicro[kMr + 1] = {nullptr,
                                     microKernel<1, true>,
                                     microKernel<2, true>,
                                     microKernel<3, true>,
                                     microKernel<4, true>,
                                     microKernel<5, true>,
                                     microKernel<6, true>};
constexpr MicroFn kMicroInPlace[kMr + 1] = {nullptr,
                                            microKernel<1, false>,
                                            microKernel<2, false>,
                                            microKernel<3, false>,
                                            microKernel<4, false>,
                                            microKernel<5, false>,
                                            microKernel<6, false>};

// The register blocks over rows [r0, r1): f(b, first row, rows) for the b-th block, 6 rows at a
// time, except that the last 7 to 9 rows are two blocks of 3 to 5 (4 + 3, 4 + 4, 5 + 4): a block
// of 1 to 3 rows has too few accumulators to hide the FMAs' latency (6 + 2 rows: the 2-row block
// ran at about half speed). A packed block b sits at b * kMr * kc in the packing buffer, which
// holds (rows / kMr + 1) blocks.
template <class F>
inline void forRowBlocks(int64_t r0, int64_t r1, F&& f) {
  int64_t b = 0;
  for (int64_t i = r0; i < r1; ++b) {
    const int64_t left = r1 - i;
    const int64_t mr = left > kMr && left < kMr + 4 ? (left + 1) / 2 : std::min<int64_t>(kMr, left);
    f(b, i, static_cast<int>(mr));
    i += mr;
  }
}

// Six rows of A (row stride rs, contiguous along k) k-major into dst[k * 6 + r], k in [0, kc):
// eight k at a time through an 8x8 transpose (rows 6 and 7 zero), each k's eight lanes stored at
// dst + 6k in increasing k, so the two lanes past a k's six are overwritten by the next k's store;
// the last store's two spill past dst + 6 kc, into the next block's place (written after this one)
// or the buffer's spare block. The scalar copy it replaces took 4% of mlp b256's step under
// GRAFT_CPU_ISA=avx2 (perf); with it, six alternated runs, lowest medians: mlp b256 15.2 -> 14.7 ms,
// bert4 b1 42.2 -> 41.6 (half-rate AVX-512 host, 2026-12-07).
GRAFT_AVX2_FMA void packSix(const float* src, int64_t rs, int64_t kc, float* dst) {
  int64_t k = 0;
  const __m256 z = _mm256_setzero_ps();
  for (; k + 8 <= kc; k += 8) {
    const float* s0 = src + k;
    __m256 r0 = _mm256_loadu_ps(s0), r1 = _mm256_loadu_ps(s0 + rs), r2 = _mm256_loadu_ps(s0 + 2 * rs),
           r3 = _mm256_loadu_ps(s0 + 3 * rs), r4 = _mm256_loadu_ps(s0 + 4 * rs), r5 = _mm256_loadu_ps(s0 + 5 * rs);
    // 8x8 transpose of rows r0..r5, z, z: the j-th store below holds k + j's six values in lanes 0-5.
    __m256 u0 = _mm256_unpacklo_ps(r0, r1), u1 = _mm256_unpackhi_ps(r0, r1);
    __m256 u2 = _mm256_unpacklo_ps(r2, r3), u3 = _mm256_unpackhi_ps(r2, r3);
    __m256 u4 = _mm256_unpacklo_ps(r4, r5), u5 = _mm256_unpackhi_ps(r4, r5);
    __m256 u6 = _mm256_unpacklo_ps(z, z), u7 = u6;
    __m256 v0 = _mm256_shuffle_ps(u0, u2, 0x44), v1 = _mm256_shuffle_ps(u0, u2, 0xEE);
    __m256 v2 = _mm256_shuffle_ps(u1, u3, 0x44), v3 = _mm256_shuffle_ps(u1, u3, 0xEE);
    __m256 v4 = _mm256_shuffle_ps(u4, u6, 0x44), v5 = _mm256_shuffle_ps(u4, u6, 0xEE);
    __m256 v6 = _mm256_shuffle_ps(u5, u7, 0x44), v7 = _mm256_shuffle_ps(u5, u7, 0xEE);
    float* d = dst + k * kMr;
    constexpr int64_t kRow = kMr;
    _mm256_storeu_ps(d + 0 * kRow, _mm256_permute2f128_ps(v0, v4, 0x20));
    _mm256_storeu_ps(d + 1 * kRow, _mm256_permute2f128_ps(v1, v5, 0x20));
    _mm256_storeu_ps(d + 2 * kRow, _mm256_permute2f128_ps(v2, v6, 0x20));
    _mm256_storeu_ps(d + 3 * kRow, _mm256_permute2f128_ps(v3, v7, 0x20));
    _mm256_storeu_ps(d + 4 * kRow, _mm256_permute2f128_ps(v0, v4, 0x31));
    _mm256_storeu_ps(d + 5 * kRow, _mm256_permute2f128_ps(v1, v5, 0x31));
    _mm256_storeu_ps(d + 6 * kRow, _mm256_permute2f128_ps(v2, v6, 0x31));
    _mm256_storeu_ps(d + 7 * kRow, _mm256_permute2f128_ps(v3, v7, 0x31));
  }
  for (; k < kc; ++k)
    for (int r = 0; r < kMr; ++r) dst[k * kMr + r] = src[r * rs + k];
}

// Rows [r0, r1) (at most kMc) x panels [p0, p1) of Y = act(alpha * A' @ packedB + beta * C).
// A'(m, k) is a[m * rs + k * cs]. Each K block of the rows is first copied into `ap`, 6 rows
// k-major per micro-panel (contiguous broadcasts, no L1 set conflicts between the rows of a
// long K), then every panel of B sweeps all row blocks while it sits in L1: the register block
// streams the small A micro-panel from L2 rather than the wider B panel.
GRAFT_AVX2_FMA void gemmBlock(const GemmGeometry& g, const float* a, int64_t rs, int64_t cs, const float* packed,
                              float* y, const Epilogue& ep, int64_t r0, int64_t r1, int64_t p0, int64_t p1, float* ap) {
  for (int64_t k0 = 0; k0 < g.K; k0 += kKc) {
    int64_t kc = std::min(kKc, g.K - k0);
    bool last = k0 + kc == g.K;
    forRowBlocks(r0, r1, [&](int64_t b, int64_t i, int mr) {
      float* dst = ap + b * kMr * kc;
      if (mr == kMr && cs == 1) {
        packSix(a + i * rs + k0, rs, kc, dst);
        return;
      }
      for (int r = 0; r < mr; ++r) {
        const float* src = a + (i + r) * rs + k0 * cs;
        for (int64_t k = 0; k < kc; ++k) dst[k * kMr + r] = src[k * cs];
      }
    });
    for (int64_t p = p0; p < p1; ++p) {
      int64_t j = p * kNr;
      int cols = static_cast<int>(std::min<int64_t>(kNr, g.N - j));
      const float* bp = packed + (p * g.K + k0) * kNr;
      forRowBlocks(r0, r1, [&](int64_t b, int64_t i, int mr) {
        kMicro[mr](kc, ap + b * kMr * kc, 0, bp, y + i * g.N + j, g.N, cols, k0 > 0, last ? &ep : nullptr, i, j);
      });
    }
  }
}

// The register block of products over 8-channel blocked activations (gemmBlocked8): rows are
// pixels r (8 floats apart), the depth runs over channel blocks cb (xBlockStride apart) and their 8
// lanes; the 16 columns of the panel are two blocks of output channels, stored yBlockStride apart.
// `ep`: bias (8 or 16 floats from col), Relu and the last block's live lanes, after the last K block.
// Its row unrolling repeats microKernel's on purpose: the two sharing one inlined step over a struct
// of accumulators ran 256x2048x2048 at 133-137 GFLOP/s against 186-200 (GCC kept the struct in
// memory).
template <int MR>
GRAFT_AVX2_FMA void microKernelBlocked8(int64_t blocks, const float* a, int64_t xBlockStride, const float* bp, float* c,
                                        int64_t yBlockStride, bool twoBlocks, bool accumulate,
                                        const Blocked8Epilogue* ep, int64_t col) {
  __m256 z = _mm256_setzero_ps();
  __m256 a00 = z, a01 = z, a10 = z, a11 = z, a20 = z, a21 = z, a30 = z, a31 = z, a40 = z, a41 = z, a50 = z, a51 = z;
  for (int64_t cb = 0; cb < blocks; ++cb) {
    const float* ab = a + cb * xBlockStride;
    const float* bb = bp + cb * 8 * kNr;
    for (int64_t kk = 0; kk < 8; ++kk) {
      __m256 b0 = _mm256_load_ps(bb + kk * kNr), b1 = _mm256_load_ps(bb + kk * kNr + 8);
      __m256 av = _mm256_broadcast_ss(ab + kk);
      a00 = _mm256_fmadd_ps(av, b0, a00);
      a01 = _mm256_fmadd_ps(av, b1, a01);
      if constexpr (MR > 1) {
        av = _mm256_broadcast_ss(ab + 8 + kk);
        a10 = _mm256_fmadd_ps(av, b0, a10);
        a11 = _mm256_fmadd_ps(av, b1, a11);
      }
      if constexpr (MR > 2) {
        av = _mm256_broadcast_ss(ab + 16 + kk);
        a20 = _mm256_fmadd_ps(av, b0, a20);
        a21 = _mm256_fmadd_ps(av, b1, a21);
      }
      if constexpr (MR > 3) {
        av = _mm256_broadcast_ss(ab + 24 + kk);
        a30 = _mm256_fmadd_ps(av, b0, a30);
        a31 = _mm256_fmadd_ps(av, b1, a31);
      }
      if constexpr (MR > 4) {
        av = _mm256_broadcast_ss(ab + 32 + kk);
        a40 = _mm256_fmadd_ps(av, b0, a40);
        a41 = _mm256_fmadd_ps(av, b1, a41);
      }
      if constexpr (MR > 5) {
        av = _mm256_broadcast_ss(ab + 40 + kk);
        a50 = _mm256_fmadd_ps(av, b0, a50);
        a51 = _mm256_fmadd_ps(av, b1, a51);
      }
    }
  }
  const __m256 acc0[6] = {a00, a10, a20, a30, a40, a50}, acc1[6] = {a01, a11, a21, a31, a41, a51};
  float* c1 = c + yBlockStride;
  __m256 bias0 = z, bias1 = z, keep0 = _mm256_castsi256_ps(_mm256_set1_epi32(-1)), keep1 = keep0;
  if (ep) {
    if (ep->bias) {
      bias0 = _mm256_loadu_ps(ep->bias + col);
      if (twoBlocks) bias1 = _mm256_loadu_ps(ep->bias + col + 8);
    }
    // The lanes past the last output channel: zero, whatever the sums (NaN * 0 is NaN).
    if (col + 8 > ep->channels) keep0 = _mm256_castsi256_ps(laneMask(static_cast<int>(ep->channels - col)));
    if (twoBlocks && col + 16 > ep->channels)
      keep1 = _mm256_castsi256_ps(laneMask(static_cast<int>(ep->channels - col - 8)));
  }
  for (int64_t r = 0; r < MR; ++r) {
    __m256 v0 = acc0[r], v1 = acc1[r];
    if (accumulate) {
      v0 = _mm256_add_ps(v0, _mm256_loadu_ps(c + r * 8));
      if (twoBlocks) v1 = _mm256_add_ps(v1, _mm256_loadu_ps(c1 + r * 8));
    }
    if (ep) {
      v0 = _mm256_add_ps(v0, bias0);
      v1 = _mm256_add_ps(v1, bias1);
      if (ep->relu) {
        // This operand order keeps NaN: max returns its second operand when one is NaN.
        v0 = _mm256_max_ps(_mm256_setzero_ps(), v0);
        v1 = _mm256_max_ps(_mm256_setzero_ps(), v1);
      }
      v0 = _mm256_and_ps(v0, keep0);
      v1 = _mm256_and_ps(v1, keep1);
    }
    if (ep && ep->stream) {
      _mm256_stream_ps(c + r * 8, v0);
      if (twoBlocks) _mm256_stream_ps(c1 + r * 8, v1);
    } else {
      _mm256_storeu_ps(c + r * 8, v0);
      if (twoBlocks) _mm256_storeu_ps(c1 + r * 8, v1);
    }
  }
}

using MicroBlocked8Fn = void (*)(int64_t, const float*, int64_t, const float*, float*, int64_t, bool, bool,
                                 const Blocked8Epilogue*, int64_t);
constexpr MicroBlocked8Fn kMicroBlocked8[kMr + 1] = {nullptr,
                                                     microKernelBlocked8<1>,
                                                     microKernelBlocked8<2>,
                                                     microKernelBlocked8<3>,
                                                     microKernelBlocked8<4>,
                                                     microKernelBlocked8<5>,
                                                     microKernelBlocked8<6>};

// gemmBlock's loops over A read in place (row-major, row stride lda): no copy, for a small A
// that the caller has just written (it sits in L1 / L2), of all rows and panels.
GRAFT_AVX2_FMA void gemmBlockInPlace(const GemmGeometry& g, const float* a, int64_t lda, const float* packed, float* y,
                                     const Epilogue& ep) {
  const int64_t P = numPanels(g.N, kNr);
  for (int64_t k0 = 0; k0 < g.K; k0 += kKc) {
    int64_t kc = std::min(kKc, g.K - k0);
    bool last = k0 + kc == g.K;
    for (int64_t p = 0; p < P; ++p) {
      int64_t j = p * kNr;
      int cols = static_cast<int>(std::min<int64_t>(kNr, g.N - j));
      const float* bp = packed + (p * g.K + k0) * kNr;
      forRowBlocks(0, g.M, [&](int64_t, int64_t i, int mr) {
        kMicroInPlace[mr](kc, a + i * lda + k0, lda, bp, y + i * g.N + j, g.N, cols, k0 > 0, last ? &ep : nullptr, i,
                          j);
      });
    }
  }
}

#endif  // GRAFT_SGEMM_AVX2

struct GemmState {
  GemmGeometry g;
  Shape yShape;
  AlignedFloats constB;  // B packed into panels
  ActivationFn act;      // an activation other than Relu, over each task's rows (product)
};

// Y = A' x B' (B' packed) with `ep`, split over the pool: column chunks of up to kNc, and row
// chunks too where the columns alone leave threads idle.
void product(const GemmGeometry& g, const float* a, int64_t rs, int64_t cs, const float* packed, const Epilogue& ep,
             float* yp, support::ThreadPool& pool, const ActivationFn* act = nullptr) {
  int64_t panelsPerTask = kNc / kNr, P = numPanels(g.N, kNr);
  int64_t colTasks = (P + panelsPerTask - 1) / panelsPerTask;
  // Few column chunks: split rows too (in multiples of the register block) so that every thread
  // has work.
  int64_t rowTasks = 1;
  while (colTasks * rowTasks < int64_t{2} * pool.numThreads() && g.M / (rowTasks * 2) >= int64_t{4} * kMr)
    rowTasks *= 2;
  int64_t rowsPerTask = (g.M + rowTasks - 1) / rowTasks;
  rowsPerTask = std::min(kMc, (rowsPerTask + kMr - 1) / kMr * kMr);
  rowTasks = (g.M + rowsPerTask - 1) / rowsPerTask;
  panelsPerTask = panelsPerChunk(P, rowTasks, pool.numThreads());
  colTasks = (P + panelsPerTask - 1) / panelsPerTask;
  auto task = [&](int64_t b, int64_t e) {
#ifdef GRAFT_SGEMM_AVX2
    thread_local std::vector<float> ap;
    ap.resize(static_cast<size_t>((kMc + kMr) * kKc));
    for (int64_t t = b; t < e; ++t) {
      int64_t ct = t / rowTasks, rt = t % rowTasks;
      int64_t r0 = rt * rowsPerTask, r1 = std::min(g.M, r0 + rowsPerTask);
      int64_t p0 = ct * panelsPerTask, p1 = std::min(P, p0 + panelsPerTask);
      gemmBlock(g, a, rs, cs, packed, yp, ep, r0, r1, p0, p1, ap.data());
      if (act) {
        // The activation over the task's rows and columns while they sit in L2 (within a task
        // the pool runs it serially), not as a pass of its own over Y after the product: bert4
        // b1's GELU products under GRAFT_CPU_ISA=avx2 3.56-3.70 -> 3.46-3.62 ms, steps 42.5-44.2
        // -> 41.6-42.7 (three alternated per-node profiles, 2026-12-07).
        const int64_t c0 = p0 * kNr, c1 = std::min(g.N, p1 * kNr);
        for (int64_t r = r0; r < r1; ++r) (*act)(pool, yp + r * g.N + c0, c1 - c0);
      }
    }
#else
    (void)b, (void)e, (void)a, (void)rs, (void)cs, (void)packed, (void)ep, (void)yp;
    GRAFT_ASSERT(false, "sgemm_avx2 run without AVX2 support compiled in");
#endif
  };
  int64_t tasks = colTasks * rowTasks;
  if (tasks == 1 || pool.numThreads() == 1)
    task(0, tasks);
  else
    pool.parallelFor(tasks, 1, task);
}

void run(const GemmState& st, ops::KernelContext& k) {
  const GemmGeometry& g = st.g;
  NDArray& y = k.allocOutputUninit(0, DataType::Float, st.yShape);
  const float* a = k.input(0).data<float>();
  int64_t rs = g.transA ? 1 : g.K, cs = g.transA ? g.M : 1;
  Epilogue ep{g.alpha, g.beta, g.hasC ? k.input(2).data<float>() : nullptr, g.cRowStride, g.cColStride, g.relu};
  float* yp = y.data<float>();
  product(g, a, rs, cs, st.constB.data, ep, yp, k.pool(), st.act ? &st.act : nullptr);
}

}  // namespace

bool available() { return cpuHasAvx2Fma(); }

int64_t panelWidth() { return kNr; }

// Column chunks of equal width, in whole rounds for the threads: bert b1's 128 x 768 x 2304 (144
// panels) ran as 4 chunks of 32 and one of 16, 3 on one thread against 1.5 on the other (144 -> 151
// GFLOP/s under GRAFT_CPU_ISA=avx2, 6 chunks of 24: 169-180 with the neighbouring sizes).
int64_t panelsPerChunk(int64_t panels, int64_t otherTasks, int64_t threads) {
  const int64_t most = kNc / kNr;
  int64_t chunks = (panels + most - 1) / most;
  while ((chunks * otherTasks) % threads != 0 && chunks < panels) ++chunks;
  return (panels + chunks - 1) / chunks;
}

void gemm(const GemmGeometry& g, const float* a, const float* packed, const float* bias, float* y,
          support::ThreadPool& pool) {
  GRAFT_ASSERT(cpuHasAvx2Fma() && !g.transA, "sgemm::gemm without AVX2 and FMA, or with a transposed A");
  const Epilogue ep{1.f, bias ? 1.f : 0.f, bias, 0, 1, false};
  product(g, a, g.K, 1, packed, ep, y, pool);
}

void gemmSerial(const GemmGeometry& g, const float* a, int64_t lda, const float* packed, float* y) {
#ifdef GRAFT_SGEMM_AVX2
  GRAFT_ASSERT(cpuHasAvx2Fma() && !g.transA, "sgemm::gemmSerial without AVX2 and FMA, or with a transposed A");
  thread_local std::vector<float> ap;
  ap.resize(static_cast<size_t>((kMc + kMr) * kKc));
  const Epilogue ep{1.f, 0.f, nullptr, 0, 0, false};
  const int64_t P = numPanels(g.N, kNr);
  for (int64_t r0 = 0; r0 < g.M; r0 += kMc)
    gemmBlock(g, a, lda, 1, packed, y, ep, r0, std::min(g.M, r0 + kMc), 0, P, ap.data());
#else
  (void)g, (void)a, (void)lda, (void)packed, (void)y;
  GRAFT_ASSERT(false, "sgemm::gemmSerial without AVX2 support compiled in");
#endif
}

void gemmBlocked8(const Blocked8Task& t, const float* packed, const Blocked8Epilogue& ep) {
#ifdef GRAFT_SGEMM_AVX2
  GRAFT_ASSERT(cpuHasAvx2Fma() && t.channelBlocks > 0, "sgemm::gemmBlocked8 without AVX2 and FMA");
  // K blocks of kKc / 8 channel blocks: each panel of B (16 columns x K block) sweeps the rows.
  const int64_t kBlocks = kKc / 8;
  for (int64_t cb0 = 0; cb0 < t.channelBlocks; cb0 += kBlocks) {
    const int64_t blocks = std::min(kBlocks, t.channelBlocks - cb0);
    const bool last = cb0 + blocks == t.channelBlocks;
    for (int64_t p = t.p0; p < t.p1; ++p) {
      const int64_t col = p * kNr;
      const bool two = col + 8 < t.columns;
      const float* bp = packed + (p * t.channelBlocks * 8 + cb0 * 8) * kNr;
      float* yc = t.y + (col / 8) * t.yBlockStride;
      forRowBlocks(t.r0, t.r1, [&](int64_t, int64_t i, int mr) {
        kMicroBlocked8[mr](blocks, t.x + cb0 * t.xBlockStride + i * 8, t.xBlockStride, bp, yc + i * 8, t.yBlockStride,
                           two, cb0 > 0 || t.accumulate, last ? &ep : nullptr, col);
      });
    }
  }
  if (ep.stream) _mm_sfence();
#else
  (void)t, (void)packed, (void)ep;
  GRAFT_ASSERT(false, "sgemm::gemmBlocked8 without AVX2 support compiled in");
#endif
}

void gemmSerialInPlace(const GemmGeometry& g, const float* a, int64_t lda, const float* packed, float* y) {
#ifdef GRAFT_SGEMM_AVX2
  GRAFT_ASSERT(cpuHasAvx2Fma() && !g.transA, "sgemm::gemmSerialInPlace without AVX2 and FMA, or with a transposed A");
  const Epilogue ep{1.f, 0.f, nullptr, 0, 0, false};
  gemmBlockInPlace(g, a, lda, packed, y, ep);
#else
  (void)g, (void)a, (void)lda, (void)packed, (void)y;
  GRAFT_ASSERT(false, "sgemm::gemmSerialInPlace without AVX2 support compiled in");
#endif
}

namespace {

ops::KernelFn makeGemm(ops::CompileContext& ctx) {
  auto g = gemmGeometry(ctx.node(), /*anyActivation=*/true);
  GRAFT_ASSERT(g && cpuHasAvx2Fma(), "{}: sgemm_avx2 on an unsupported node", ctx.node().describe());
  auto st = std::make_shared<GemmState>();
  st->g = *g;
  st->yShape = ctx.node().output(0)->info().shape();
  const NDArray* b = ctx.constantInput(1);
  GRAFT_ASSERT(b, "{}: sgemm_avx2 without a constant B", ctx.node().describe());
  st->constB.allocate(numPanels(g->N, kNr) * g->K * kNr);
  packPanels(b->data<float>(), *g, kNr, st->constB.data);
  if (g->otherActivation) st->act = fusedActivation(ctx.node());
  return [st](ops::KernelContext& k) { run(*st, k); };
}

}  // namespace
}  // namespace graft::backends::cpu::sgemm

GRAFT_REGISTER_CPU_KERNELS(sgemm_avx2) {
  using namespace graft::backends::cpu::sgemm;
  // Ahead of oneDNN's matmul (priority 0), which is about half as fast on AVX2-only CPUs.
  r.add({"", "Gemm", "sgemm_avx2", supportsGemm, makeGemm, 1});
  r.add({graft::ops::kGraftDomain, "FusedGemm", "sgemm_avx2", supportsGemm, makeGemm, 1});
  r.add({"", "MatMul", "sgemm_avx2_matmul", supportsGemm, makeGemm, 1});
  r.add({graft::ops::kGraftDomain, "FusedMatMul", "sgemm_avx2_matmul", supportsGemm, makeGemm, 1});
}
