// graft's own matrix-vector products: Gemm, FusedGemm (no activation or Relu), MatMul and
// FusedMatMul of at most kMaxRows rows of A' by a constant float B (an inference weight), in
// float32. At batch 1 an MLP's or a decoder's linear layers are such products: bound by reading
// B once, and too short (0.05-0.3 ms) for an OpenMP region, which under passive waits costs two
// wakes (~60 us, docs/cpu-backend.md "What a passive region costs").
//
// - B' is packed once into panels of kWidth columns, K rows each (gemm_geometry.hpp), so that a
//   panel is one contiguous stream and each output column sums its K products in one fixed order
//   (results do not depend on the thread count).
// - A panel's columns accumulate in registers (FloatVec: zmm, ymm or xmm by variant), up to 4 rows
//   of A at a time (panelsW); fewer rows run independent sums over k mod 2 or 4, added at the end.
// - alpha, beta * C (any broadcast to [M, N]) and Relu are applied per panel before the store.
// - Tasks are runs of panels: on the pool's spin team under passive OpenMP waits (no wake when
//   a helper is still spinning from the previous product), in a parallelFor otherwise; a product
//   with less than kMinParallelBytes of B runs on the calling thread.
#include <algorithm>
#include <cstring>
#include <memory>

#include "backends/cpu/bf16.hpp"
#include "backends/cpu/cpu_kernels.hpp"
#include "backends/cpu/gemm_geometry.hpp"
#include "backends/cpu/vec_common.hpp"
#include "ops/registry.hpp"
#include "support/check.hpp"
#include "support/spin_team.hpp"
#include "support/thread_pool.hpp"

namespace graft::backends::cpu::gemv {
namespace {

constexpr int64_t kMaxRows = 4;
constexpr int64_t kWidth = 32;                              // columns of a panel
constexpr int64_t kTaskBytes = int64_t{256} * 1024;         // of B per task, at most (where there are enough)
constexpr int64_t kMinParallelBytes = int64_t{128} * 1024;  // below: one thread

struct GemvState {
  GemmGeometry g;
  Shape yShape;
  AlignedFloats packed;
};

struct Operands {
  const float* a;
  int64_t rs, cs;  // A'(m, k) = a[m * rs + k * cs]
  const float* packed;
  const float* c;  // beta * C's term, or nullptr
  float* y;
};

// Rows [r0, r0 + R) of Y for panel p. U independent sums per column (over k mod U).
template <int R, int U, int W>
GRAFT_VEC_LOOP void panelRows(const GemmGeometry& g, const Operands& o, int64_t p, int64_t r0) {
  using V = typename FloatVec<W>::type;
  constexpr int kParts = kWidth / W;
  const int64_t K = g.K;
  const float* bp = o.packed + p * K * kWidth;
  const float* a = o.a + r0 * o.rs;
  V acc[U][R][kParts];
  for (int u = 0; u < U; ++u)
    for (int r = 0; r < R; ++r)
      for (int q = 0; q < kParts; ++q) acc[u][r][q] = V{};
  int64_t k = 0;
  for (; k + U <= K; k += U) {
    // Unrolled whole, so that every accumulator is a register (a loop indexes them in memory).
#pragma GCC unroll 4
    for (int u = 0; u < U; ++u) {
#pragma GCC unroll 8
      for (int q = 0; q < kParts; ++q) {
        V b = *reinterpret_cast<const V*>(bp + (k + u) * kWidth + int64_t{q} * W);  // 64-byte aligned panel rows
#pragma GCC unroll 4
        for (int r = 0; r < R; ++r) acc[u][r][q] += a[r * o.rs + (k + u) * o.cs] * b;
      }
    }
  }
  for (; k < K; ++k) {
#pragma GCC unroll 8
    for (int q = 0; q < kParts; ++q) {
      V b = *reinterpret_cast<const V*>(bp + k * kWidth + int64_t{q} * W);
#pragma GCC unroll 4
      for (int r = 0; r < R; ++r) acc[0][r][q] += a[r * o.rs + k * o.cs] * b;
    }
  }
  const int64_t j0 = p * kWidth, cols = std::min(kWidth, g.N - j0);
  for (int r = 0; r < R; ++r) {
    float sum[kWidth];
    for (int q = 0; q < kParts; ++q) {
      V s = acc[0][r][q];
      for (int u = 1; u < U; ++u) s += acc[u][r][q];
      std::memcpy(sum + int64_t{q} * W, &s, sizeof s);
    }
    const int64_t m = r0 + r;
    float* y = o.y + m * g.N + j0;
    for (int64_t j = 0; j < cols; ++j) {
      float v = g.alpha == 1.f ? sum[j] : g.alpha * sum[j];
      if (o.c) v += g.beta * o.c[m * g.cRowStride + (j0 + j) * g.cColStride];
      // This order keeps NaN (as the reference's Relu does: max(0, NaN) is NaN there too).
      if (g.relu) v = v < 0.f ? 0.f : v;
      y[j] = v;
    }
  }
}

// Panels [p0, p1) for every row: as many rows at a time over a panel (while it is in L2) as
// keep 8 accumulators (FMA latency x throughput) in registers: 4 rows in the AVX-512 variant
// (2 zmm a row), 2 in the AVX2 one (4 ymm a row), 1 in the baseline (8 xmm); fewer rows sum over
// k in 2 or 4 independent chains.
template <int W>
GRAFT_VEC_LOOP void panelsW(const GemmGeometry& g, const Operands& o, int64_t p0, int64_t p1) {
  for (int64_t p = p0; p < p1; ++p) {
    int64_t r = 0;
    if constexpr (W == 16) {
      for (; r + 4 <= g.M; r += 4) panelRows<4, 1, W>(g, o, p, r);
      if (g.M - r == 3) panelRows<3, 1, W>(g, o, p, r);
      if (g.M - r == 2) panelRows<2, 2, W>(g, o, p, r);
      if (g.M - r == 1) panelRows<1, 4, W>(g, o, p, r);
    } else if constexpr (W == 8) {
      for (; r + 2 <= g.M; r += 2) panelRows<2, 1, W>(g, o, p, r);
      if (r < g.M) panelRows<1, 2, W>(g, o, p, r);
    } else {
      for (; r < g.M; ++r) panelRows<1, 1, W>(g, o, p, r);
    }
  }
}

void panels(const GemmGeometry& g, const Operands& o, int64_t p0, int64_t p1) {
#if GRAFT_VEC_VARIANTS
  switch (support::vecLoopIsa()) {
    case support::CpuIsa::Avx512:
      return vecRunAvx512([&]() __attribute__((always_inline)) { panelsW<16>(g, o, p0, p1); });
    case support::CpuIsa::Avx2:
      return vecRunAvx2([&]() __attribute__((always_inline)) { panelsW<8>(g, o, p0, p1); });
    default:
      break;
  }
#endif
  panelsW<4>(g, o, p0, p1);
}

void run(const GemvState& st, ops::KernelContext& k) {
  const GemmGeometry& g = st.g;
  NDArray& y = k.allocOutputUninit(0, DataType::Float, st.yShape);
  Operands o{k.input(0).data<float>(),
             g.transA ? 1 : g.K,
             g.transA ? g.M : 1,
             st.packed.data,
             g.hasC ? k.input(2).data<float>() : nullptr,
             y.data<float>()};
  const int64_t P = numPanels(g.N, kWidth), panelBytes = g.K * kWidth * int64_t{sizeof(float)};
  support::ThreadPool& pool = k.pool();
  const int threads = pool.numThreads();
  if (threads == 1 || P == 1 || P * panelBytes < kMinParallelBytes) return panels(g, o, 0, P);
  // Tasks of at most kTaskBytes, at least two a thread where B has that many panels (a helper
  // that wakes late then still finds work).
  int64_t perTask = std::max<int64_t>(1, kTaskBytes / panelBytes);
  perTask = std::min(perTask, std::max<int64_t>(1, P / (int64_t{2} * threads)));
  const int64_t tasks = (P + perTask - 1) / perTask;
  auto task = [&](int64_t t) { panels(g, o, t * perTask, std::min(P, (t + 1) * perTask)); };
  if (support::ThreadPool::openMpWaitsPassively()) {
    pool.team().run(static_cast<int>(tasks), [&](int t) { task(t); });
  } else {
    pool.parallelFor(tasks, 1, [&](int64_t b, int64_t e) {
      for (int64_t t = b; t < e; ++t) task(t);
    });
  }
}

bool supports(const ir::Node& n) {
  const ir::Tensor* b = n.numInputs() > 1 ? n.input(1) : nullptr;
  if (!b || b->kind() != ir::TensorKind::Constant) return false;
  auto g = gemmGeometry(n);
  return g && g->M <= kMaxRows;
}

ops::KernelFn make(ops::CompileContext& ctx) {
  // A bf16 backend reads the weights as bf16 through oneDNN: half the bytes of this kernel's.
  if (bf16Compute()) return {};
  auto g = gemmGeometry(ctx.node());
  const NDArray* b = ctx.constantInput(1);
  GRAFT_ASSERT(g && b, "{}: vec_gemv on an unsupported node", ctx.node().describe());
  auto st = std::make_shared<GemvState>();
  st->g = *g;
  st->yShape = ctx.node().output(0)->info().shape();
  st->packed.allocate(numPanels(g->N, kWidth) * g->K * kWidth);
  packPanels(b->data<float>(), *g, kWidth, st->packed.data);
  return [st](ops::KernelContext& k) { run(*st, k); };
}

}  // namespace
}  // namespace graft::backends::cpu::gemv

GRAFT_REGISTER_CPU_KERNELS(vec_gemv) {
  using namespace graft::backends::cpu::gemv;
  // Ahead of sgemm_avx2 (1) and oneDNN's matmul (0).
  r.add({"", "Gemm", "vec_gemv", supports, make, 2});
  r.add({graft::ops::kGraftDomain, "FusedGemm", "vec_gemv", supports, make, 2});
  r.add({"", "MatMul", "vec_gemv", supports, make, 2});
  r.add({graft::ops::kGraftDomain, "FusedMatMul", "vec_gemv", supports, make, 2});
}
