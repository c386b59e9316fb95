// graft's own matrix-vector products: Gemm, FusedGemm (no activation or Relu), MatMul and
// FusedMatMul of at most kMaxRows rows of A' by a float B. At batch 1 an MLP's or a decoder's
// linear layers are such products: bound by reading B once, and too short (0.05-0.3 ms) for an
// OpenMP region, which under passive waits costs two wakes (~60 us, docs/cpu-backend.md "What a
// passive region costs"). oneDNN 2.6 reads B at 12-35 GB/s there; this kernel at 50-110.
//
// B comes in one of three forms (BForm), and every output column sums its K products in one
// fixed order whatever the split, so results do not depend on the thread count:
// - Panels: a constant B (an inference weight), packed once into panels of kWidth columns, K rows
//   each (gemm_geometry.hpp): one contiguous stream per panel. A panel's columns accumulate in
//   registers (FloatVec: zmm, ymm or xmm by variant), up to 4 rows of A at a time (panelsW);
//   fewer rows run independent sums over k mod 2 or 4, added at the end.
// - Rows: a B fed at run time as [K, N] (training's input gradients, dX = dY . W): the same
//   panel loop over B in place (row stride N); the last N mod kWidth columns by a plain loop.
// - Columns: a B fed at run time as [N, K] (transB, torch's Linear weight, in training's forward
//   pass): dot products of A's rows with 4 rows of B at a time, lanes summed in a fixed order.
// - Outer: K = 1 and any M (training's weight gradient at batch 1, dW = dY^T . X): each row of Y
//   is a multiple of B's one row, written in one pass (oneDNN: 12 GB/s).
// alpha, beta * C (any broadcast to [M, N]) and Relu are applied before the store. Tasks are runs
// of panels, columns or rows, claimed one at a time by the pool's threads (ThreadPool::runTasks:
// on its spin team under passive OpenMP waits, no wake when a helper is still spinning from the
// previous product); a product with less than kMinParallelBytes of B runs on the calling thread.
#include <algorithm>
#include <cstring>
#include <memory>
#include <vector>

#include "backends/cpu/bf16.hpp"
#include "backends/cpu/cpu_kernels.hpp"
#include "backends/cpu/gemm_geometry.hpp"
#include "backends/cpu/vec_common.hpp"
#include "ops/registry.hpp"
#include "support/check.hpp"
#include "support/thread_pool.hpp"

namespace graft::backends::cpu::gemv {
namespace {

constexpr int64_t kMaxRows = 4;
constexpr int64_t kWidth = 32;                              // columns of a panel
constexpr int64_t kTaskBytes = int64_t{256} * 1024;         // of B per task, at most (where there are enough)
constexpr int64_t kMinParallelBytes = int64_t{128} * 1024;  // below: one thread

enum class BForm { Panels, Rows, Columns, Outer };

struct GemvState {
  GemmGeometry g;
  Shape yShape;
  BForm form = BForm::Panels;
  AlignedFloats packed;  // Panels
};

struct Operands {
  const float* a;
  int64_t rs, cs;            // A'(m, k) = a[m * rs + k * cs]; cs = 1 in the Columns form
  const float* b;            // packed panels, or B as fed
  int64_t panelStride, ldb;  // panel p's row k at b + p * panelStride + k * ldb (Panels, Rows)
  const float* c;            // beta * C's term, or nullptr
  float* y;
};

// Y(m, j) from the sum of A'(m, :) . B'(:, j).
inline void storeOutput(const GemmGeometry& g, const Operands& o, int64_t m, int64_t j, float sum) {
  float v = g.alpha == 1.f ? sum : g.alpha * sum;
  if (o.c) v += g.beta * o.c[m * g.cRowStride + j * g.cColStride];
  // This order keeps NaN (as the reference's Relu does: max(0, NaN) is NaN there too).
  if (g.relu) v = v < 0.f ? 0.f : v;
  o.y[m * g.N + j] = v;
}

// Rows [r0, r0 + R) of Y for panel p. U independent sums per column (over k mod U).
template <int R, int U, int W>
GRAFT_VEC_LOOP void panelRows(const GemmGeometry& g, const Operands& o, int64_t p, int64_t r0) {
  using V = typename FloatVec<W>::type;
  using VU = typename FloatVec<W>::unaligned;
  constexpr int kParts = kWidth / W;
  const int64_t K = g.K;
  const float* bp = o.b + p * o.panelStride;
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
        V b = *reinterpret_cast<const VU*>(bp + (k + u) * o.ldb + int64_t{q} * W);
#pragma GCC unroll 4
        for (int r = 0; r < R; ++r) acc[u][r][q] += a[r * o.rs + (k + u) * o.cs] * b;
      }
    }
  }
  for (; k < K; ++k) {
#pragma GCC unroll 8
    for (int q = 0; q < kParts; ++q) {
      V b = *reinterpret_cast<const VU*>(bp + k * o.ldb + int64_t{q} * W);
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
    for (int64_t j = 0; j < cols; ++j) storeOutput(g, o, r0 + r, j0 + j, sum[j]);
  }
}

// The last N mod kWidth columns of the Rows form (a whole panel would read past B's rows).
inline void rowsTail(const GemmGeometry& g, const Operands& o, int64_t j0) {
  for (int64_t m = 0; m < g.M; ++m)
    for (int64_t j = j0; j < g.N; ++j) {
      float s = 0.f;
      for (int64_t k = 0; k < g.K; ++k) s += o.a[m * o.rs + k * o.cs] * o.b[k * o.ldb + j];
      storeOutput(g, o, m, j, s);
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

// Columns [n, n + C) of rows [r0, r0 + R) in the Columns form: B's rows n.. are contiguous over k,
// as A's rows are (cs = 1).
template <int R, int C, int W>
GRAFT_VEC_LOOP void dotBlock(const GemmGeometry& g, const Operands& o, int64_t n, int64_t r0) {
  using V = typename FloatVec<W>::type;
  using VU = typename FloatVec<W>::unaligned;
  const int64_t K = g.K, kv = K / W * W;
  const float* b = o.b + n * K;
  const float* a = o.a + r0 * o.rs;
  V acc[R][C];
  for (int r = 0; r < R; ++r)
    for (int c = 0; c < C; ++c) acc[r][c] = V{};
  for (int64_t k = 0; k < kv; k += W) {
    V bv[C];
#pragma GCC unroll 4
    for (int c = 0; c < C; ++c) bv[c] = *reinterpret_cast<const VU*>(b + c * K + k);
#pragma GCC unroll 4
    for (int r = 0; r < R; ++r) {
      V av = *reinterpret_cast<const VU*>(a + r * o.rs + k);
#pragma GCC unroll 4
      for (int c = 0; c < C; ++c) acc[r][c] += av * bv[c];
    }
  }
  for (int r = 0; r < R; ++r)
    for (int c = 0; c < C; ++c) {
      float lanes[W];
      std::memcpy(lanes, &acc[r][c], sizeof lanes);
      float s = 0.f;
      for (int l = 0; l < W; ++l) s += lanes[l];
      for (int64_t k = kv; k < K; ++k) s += a[r * o.rs + k] * b[c * K + k];
      storeOutput(g, o, r0 + r, n + c, s);
    }
}

// Columns [n0, n1) for every row, 4 at a time: 4 x 4 accumulators in the AVX-512 variant, 2 x 4
// in the AVX2 one, 1 x 4 in the baseline (with the 4 rows of B and one of A: within 32, 16 and
// 16 registers).
template <int W>
GRAFT_VEC_LOOP void columnsW(const GemmGeometry& g, const Operands& o, int64_t n0, int64_t n1) {
  constexpr int64_t kRows = W == 16 ? 4 : W == 8 ? 2 : 1;
  int64_t n = n0;
  for (; n + 4 <= n1; n += 4) {
    int64_t r = 0;
    for (; r + kRows <= g.M; r += kRows) dotBlock<kRows, 4, W>(g, o, n, r);
    for (; r < g.M; ++r) dotBlock<1, 4, W>(g, o, n, r);
  }
  for (; n < n1; ++n)
    for (int64_t r = 0; r < g.M; ++r) dotBlock<1, 1, W>(g, o, n, r);
}

// Rows [m0, m1) of Y in the Outer form: Y(m, :) = act(alpha * A'(m, 0) * B'(0, :) + beta * C(m, :)).
GRAFT_VEC_LOOP void outerRows(const GemmGeometry& g, const Operands& o, int64_t m0, int64_t m1) {
  const int64_t N = g.N;
  const float* __restrict b = o.b;
  for (int64_t m = m0; m < m1; ++m) {
    const float s = g.alpha * o.a[m * o.rs];
    float* __restrict y = o.y + m * N;
    if (!o.c) {
      for (int64_t j = 0; j < N; ++j) y[j] = s * b[j];
    } else if (g.cColStride == 0) {
      const float c = g.beta * o.c[m * g.cRowStride];
      for (int64_t j = 0; j < N; ++j) y[j] = s * b[j] + c;
    } else {
      const float* __restrict c = o.c + m * g.cRowStride;
      for (int64_t j = 0; j < N; ++j) y[j] = s * b[j] + g.beta * c[j];
    }
    if (g.relu)
      for (int64_t j = 0; j < N; ++j) y[j] = y[j] < 0.f ? 0.f : y[j];
  }
}

// Units [u0, u1) of form f: panels (Panels, Rows), columns (Columns) or rows of Y (Outer).
void units(BForm f, const GemmGeometry& g, const Operands& o, int64_t u0, int64_t u1) {
  if (f == BForm::Outer) return GRAFT_VEC_RUN(outerRows(g, o, u0, u1));
  if (f == BForm::Rows && u1 * kWidth > g.N) {
    rowsTail(g, o, (u1 - 1) * kWidth);
    if (--u1 == u0) return;
  }
  vecRunWidth([&](auto w) __attribute__((always_inline)) {
    constexpr int kW = decltype(w)::value;
    f == BForm::Columns ? columnsW<kW>(g, o, u0, u1) : panelsW<kW>(g, o, u0, u1);
  });
}

void run(const GemvState& st, ops::KernelContext& k) {
  const GemmGeometry& g = st.g;
  NDArray& y = k.allocOutputUninit(0, DataType::Float, st.yShape);
  Operands o{k.input(0).data<float>(),
             g.transA ? 1 : g.K,
             g.transA ? g.M : 1,
             nullptr,
             0,
             0,
             g.hasC ? k.input(2).data<float>() : nullptr,
             y.data<float>()};
  int64_t count = 0, unitBytes = 0;  // units of work (panels or columns) and the bytes of B each reads
  std::vector<float> aRows;
  switch (st.form) {
    case BForm::Panels:
      o.b = st.packed.data;
      o.panelStride = g.K * kWidth;
      o.ldb = kWidth;
      count = numPanels(g.N, kWidth);
      unitBytes = g.K * kWidth * int64_t{sizeof(float)};
      break;
    case BForm::Rows:
      o.b = k.input(1).data<float>();
      o.panelStride = kWidth;
      o.ldb = g.N;
      count = numPanels(g.N, kWidth);
      unitBytes = g.K * kWidth * int64_t{sizeof(float)};
      break;
    case BForm::Columns:
      o.b = k.input(1).data<float>();
      if (o.cs != 1) {  // A' strided over k (transA with M > 1): its rows copied contiguous
        aRows.resize(static_cast<size_t>(g.M * g.K));
        for (int64_t m = 0; m < g.M; ++m)
          for (int64_t kk = 0; kk < g.K; ++kk) aRows[static_cast<size_t>(m * g.K + kk)] = o.a[m * o.rs + kk * o.cs];
        o.a = aRows.data();
        o.rs = g.K;
        o.cs = 1;
      }
      count = g.N;
      unitBytes = g.K * int64_t{sizeof(float)};
      break;
    case BForm::Outer:
      o.b = k.input(1).data<float>();  // B' (1 x N) is B's N floats, as fed or constant
      count = g.M;
      unitBytes = g.N * int64_t{sizeof(float)};  // written
      break;
  }
  support::ThreadPool& pool = k.pool();
  const int threads = pool.numThreads();
  if (threads == 1 || count == 1 || count * unitBytes < kMinParallelBytes) return units(st.form, g, o, 0, count);
  // Tasks of at most kTaskBytes, at least two a thread where B has that many units (a helper that
  // wakes late then still finds work); columns in multiples of 4 (columnsW's block).
  const int64_t align = st.form == BForm::Columns ? 4 : 1;
  int64_t perTask = std::max<int64_t>(1, kTaskBytes / unitBytes);
  perTask = std::min(perTask, std::max<int64_t>(1, count / (int64_t{2} * threads)));
  perTask = (perTask + align - 1) / align * align;
  const int64_t tasks = (count + perTask - 1) / perTask;
  pool.runTasks(static_cast<int>(tasks),
                [&](int t) { units(st.form, g, o, t * perTask, std::min(count, (t + 1) * perTask)); });
}

bool supports(const ir::Node& n) {
  if (n.numInputs() < 2) return false;
  auto g = gemmGeometry(n);
  return g && (g->M <= kMaxRows || g->K == 1);
}

ops::KernelFn make(ops::CompileContext& ctx) {
  // A bf16 backend reads the weights as bf16 through oneDNN: half the bytes of this kernel's.
  if (bf16Compute()) return {};
  auto g = gemmGeometry(ctx.node());
  GRAFT_ASSERT(g, "{}: vec_gemv on an unsupported node", ctx.node().describe());
  auto st = std::make_shared<GemvState>();
  st->g = *g;
  st->yShape = ctx.node().output(0)->info().shape();
  const NDArray* b = ctx.constantInput(1);
  if (g->K == 1 && g->M > kMaxRows) {
    st->form = BForm::Outer;
  } else if (b) {
    st->form = BForm::Panels;
    st->packed.allocate(numPanels(g->N, kWidth) * g->K * kWidth);
    packPanels(b->data<float>(), *g, kWidth, st->packed.data);
  } else {
    st->form = g->transB ? BForm::Columns : BForm::Rows;
  }
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
