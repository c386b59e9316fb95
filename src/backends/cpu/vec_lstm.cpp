// ai.onnx LSTM at small batch (N <= 4), inference: graft's own kernel, ahead of oneDNN's.
//
// At batch 1 an LSTM step is a matrix-vector product with the recurrent weights R [4H, H]
// (4 MB for H = 512), read once per time step: the step is bound by how fast R streams from
// the caches, and by how fast the threads agree that h_t is complete. oneDNN 2.6's brgemm LSTM
// took 70 us per step and layer on the 2-vCPU AVX-512 EPYC of issue 12 (lstm2 b1, 7.4 ms; ONNX
// Runtime 5.1 ms), and with passive OpenMP waiting every step woke a sleeping thread.
//
// This kernel:
// - computes the input projection of every time step at once, X [T*N, I] x W^T + Wb + Rb, with
//   oneDNN's sgemm;
// - packs R once at compile time (at each run when it is not a constant) by blocks of 16 hidden units: for each
//   block, the four gates' rows interleaved as [k][gate][16 units], so that a block's gate
//   pre-activations are 4 x N vectors of 16 accumulated from contiguous loads while h[n][k] is
//   broadcast, and a block is one sequential stream (R, 4 MB a layer at H = 512, comes from L3
//   at every step: with the gates as four streams, [gate][k][16], lstm2 b1 took 3-4% longer);
// - splits the blocks over the threads of one OpenMP region for the whole sequence, with a
//   spinning barrier between time steps (one wake-up per call, not one per step);
// - applies the cell (ONNX's default activations: sigmoid, tanh, tanh; gates iofc) in the same
//   pass, with the vectorisable sigmoid and tanh of vec_math.hpp.
// Weights known only at run time (a training graph's forward LSTM) are packed at each run.
// Anything else (larger batches, clip, input_forget, other activations, peepholes,
// sequence_lens, layout 1) goes to oneDNN or the reference.
#include <omp.h>
#include <sched.h>

#include <algorithm>
#include <atomic>
#include <cstring>
#include <memory>
#include <optional>
#include <vector>

#include <dnnl.h>

#include <fmt/format.h>

#include "backends/cpu/bf16.hpp"
#include "backends/cpu/cpu_kernels.hpp"
#include "backends/cpu/gemm_geometry.hpp"
#include "backends/cpu/lstm_recurrence.hpp"
#include "backends/cpu/onednn_common.hpp"
#include "backends/cpu/sgemm_avx2.hpp"
#include "backends/cpu/vec_common.hpp"
#include "backends/cpu/vec_math.hpp"
#include "ops/registry.hpp"
#include "ops/rnn_cell.hpp"
#include "support/check.hpp"

namespace graft::backends::cpu {
namespace {

using onednn::memory;

constexpr int64_t kLanes = 16;    // hidden units per block
constexpr int64_t kMaxBatch = 4;  // N above this: the batched kernel (below)

struct LstmShape {
  int64_t T = 0, N = 0, I = 0, H = 0, D = 1;
  bool reverse = false;  // direction "reverse" (D = 1)
  bool bias = false, h0 = false, c0 = false;
};

std::optional<LstmShape> lstmShape(const ir::Node& n) {
  using onednn::isStaticFloat;
  if (!n.domain().empty() || n.type() != "LSTM") return std::nullopt;
  // The attributes as the reference kernel reads them (ops/rnn_cell.hpp).
  std::optional<ops::rnn::RnnParams> params = ops::rnn::plainLstmParams(n);
  if (!params) return std::nullopt;
  const ops::rnn::RnnParams& p = *params;
  LstmShape s;
  s.D = p.numDirections;
  s.reverse = !p.forward;
  auto in = [&](size_t i) { return n.hasInput(i) ? n.input(i) : nullptr; };
  if (!isStaticFloat(in(0)) || !isStaticFloat(in(1)) || !isStaticFloat(in(2))) return std::nullopt;
  Shape x = in(0)->info().shape(), w = in(1)->info().shape(), r = in(2)->info().shape();
  if (x.size() != 3 || w.size() != 3 || r.size() != 3) return std::nullopt;
  s.T = x[0];
  s.N = x[1];
  s.I = x[2];
  s.H = r[2];
  if (s.T <= 0 || s.N <= 0 || s.I <= 0 || s.H <= 0) return std::nullopt;
  if (p.hiddenSize >= 0 && p.hiddenSize != s.H) return std::nullopt;
  if (w != Shape{s.D, 4 * s.H, s.I} || r != Shape{s.D, 4 * s.H, s.H}) return std::nullopt;
  s.bias = in(3) != nullptr;
  if (s.bias && !(isStaticFloat(in(3)) && in(3)->info().shape() == Shape{s.D, 8 * s.H})) return std::nullopt;
  if (in(4) != nullptr || in(7) != nullptr) return std::nullopt;  // sequence_lens, peepholes
  Shape hs{s.D, s.N, s.H};
  s.h0 = in(5) != nullptr;
  if (s.h0 && !(isStaticFloat(in(5)) && in(5)->info().shape() == hs)) return std::nullopt;
  s.c0 = in(6) != nullptr;
  if (s.c0 && !(isStaticFloat(in(6)) && in(6)->info().shape() == hs)) return std::nullopt;
  if (n.numInputs() > 8 || n.numOutputs() > 3) return std::nullopt;
  Shape y{s.T, s.D, s.N, s.H};
  for (size_t i = 0; i < n.numOutputs(); ++i) {
    if (!n.hasOutput(i)) continue;
    if (!isStaticFloat(n.output(i)) || n.output(i)->info().shape() != (i == 0 ? y : hs)) return std::nullopt;
  }
  return s;
}

bool supportsLstm(const ir::Node& n) {
  auto s = lstmShape(n);
  return s && s->N <= kMaxBatch;
}
bool supportsBatchedLstm(const ir::Node& n) {
  auto s = lstmShape(n);
  return s && s->N > kMaxBatch;
}

// The input projection of every time step and direction at once:
// xw [T*N, D*4H] = X [T*N, I] x [W_0; W_1]^T + Wb + Rb. Constant weights are packed once: on AVX2
// hosts (sgemm::available()) into sgemm_avx2's panels (oneDNN 2.6's AVX2 jit gemm ran lstm2 b32's
// 2048 x 512 x 2048 in 27 ms where sgemm_avx2 takes 22; GRAFT_CPU_ISA=avx2 on the half-rate
// AVX-512 host; docs/cpu-backend.md, "Batched LSTM"), elsewhere into a oneDNN matmul's layout.
// Weights known only at run time (a training graph's forward) run on the oneDNN matmul, repacked
// at each run. Both LSTM kernels use it; the small-batch kernel called dnnl_sgemm on the unpacked
// W instead, and lstm2 b1's 64 x 512 x 2048 per layer took 1.6 ms there (41 GFLOP/s; docs/
// cpu-backend.md, "LSTM").
struct InputProjection {
  GemmGeometry geometry;  // sgemm_avx2
  AlignedFloats packed;
  std::vector<float> biasRow;
  dnnl::matmul prim;  // oneDNN
  onednn::PackedOperand weights;
  memory bias;
  memory::desc xDesc, xwDesc;

  // W [DG, I] (DG = D*4H): its data where it is a constant, else nullptr. Throws dnnl::error
  // where oneDNN has no matmul for it. setBias gives the biases.
  InputProjection(const NDArray* w, int64_t TN, int64_t I, int64_t DG) {
    auto f32 = memory::data_type::f32;
    xDesc = memory::desc({TN, I}, f32, memory::format_tag::ab);
    xwDesc = memory::desc({TN, DG}, f32, memory::format_tag::ab);
    if (w && sgemm::available()) {
      geometry.M = TN;
      geometry.K = I;
      geometry.N = DG;
      geometry.transB = true;
      packed.allocate(numPanels(DG, sgemm::panelWidth()) * I * sgemm::panelWidth());
      packPanels(w->data<float>(), geometry, sgemm::panelWidth(), packed.data);
      biasRow.assign(static_cast<size_t>(DG), 0.0f);
      return;
    }
    auto& eng = onednn::engine();
    memory::desc wUser({I, DG}, f32, memory::format_tag::ba), biasDesc({1, DG}, f32, memory::format_tag::ab);
    dnnl::matmul::primitive_desc pd(
        dnnl::matmul::desc(xDesc, memory::desc({I, DG}, f32, memory::format_tag::any), biasDesc, xwDesc), eng);
    prim = dnnl::matmul(pd);
    weights.init(wUser, pd.weights_desc(), w);
    bias = memory(biasDesc, eng);
  }

  // Wb + Rb of each gate and direction ([DG]), added to every row.
  void setBias(const std::vector<float>& b) {
    float* dst = packed.data ? biasRow.data() : static_cast<float*>(bias.get_data_handle());
    std::copy(b.begin(), b.end(), dst);
  }

  // xw = the projection of x ([T*N, I] dense); w: the node's W input (read when not a constant).
  void run(const NDArray& x, const NDArray& w, NDArray& xw, support::ThreadPool& pool) {
    if (packed.data) {
      sgemm::gemm(geometry, x.data<float>(), packed.data, biasRow.data(), xw.data<float>(), pool);
      return;
    }
    onednn::execute(prim, {{DNNL_ARG_SRC, onednn::wrap(xDesc, x)},
                           {DNNL_ARG_WEIGHTS, weights.get(w)},
                           {DNNL_ARG_BIAS, bias},
                           {DNNL_ARG_DST, onednn::wrap(xwDesc, xw)}});
  }
};

// Wb + Rb of each gate and direction ([D*4H]; zeros without B).
std::vector<float> gateBiases(const LstmShape& s, const NDArray* b) {
  std::vector<float> bias(static_cast<size_t>(s.D * 4 * s.H));
  for (int64_t d = 0; d < s.D; ++d) gateBias(b ? b->data<float>() : nullptr, s.H, d, bias.data() + d * 4 * s.H);
  return bias;
}

// Y_h and Y_c (outputs 1 and 2, [D, N, H]) where wanted, from every direction's last states.
void writeFinalStates(ops::KernelContext& k, const LstmShape& s, const float* yh, const float* yc) {
  const size_t bytes = sizeof(float) * static_cast<size_t>(s.D * s.N * s.H);
  if (k.wantsOutput(1)) std::memcpy(k.allocOutputUninit(1, DataType::Float, {s.D, s.N, s.H}).rawData(), yh, bytes);
  if (k.wantsOutput(2)) std::memcpy(k.allocOutputUninit(2, DataType::Float, {s.D, s.N, s.H}).rawData(), yc, bytes);
}

// One time step for hidden-unit blocks [b0, b1): gates = xw[n] + h[n] . R^T, then the cell.
// rp: the direction's packed R ([block][k][gate][16]); xw: [N, 4H] of this step and direction,
// rows ldx apart; h, c: [N, H]
// of the previous step (c is updated in place: each unit belongs to one thread); hOut: [N, H].
// N is a template argument so that the 4 x N accumulators of 16 stay in registers, each as
// 16 / W vectors of W floats (FloatVec<W>, each variant's register width).

template <int N, int W>
GRAFT_VEC_LOOP void stepBlocksN(const float* rp, const float* xw, int64_t ldx, const float* h, float* c, float* hOut,
                                int64_t H, int64_t b0, int64_t b1) {
  using V = typename FloatVec<W>::type;
  using VU = typename FloatVec<W>::unaligned;
  constexpr int kParts = kLanes / W;
  const int64_t blockFloats = 4 * H * kLanes;
  for (int64_t b = b0; b < b1; ++b) {
    const float* r = rp + b * blockFloats;
    int64_t u0 = b * kLanes, lanes = std::min(kLanes, H - u0);
    V acc[N][4][kParts];
    for (int n = 0; n < N; ++n)
      for (int g = 0; g < 4; ++g) {
        float init[kLanes];
        for (int64_t l = 0; l < kLanes; ++l) init[l] = l < lanes ? xw[n * ldx + g * H + u0 + l] : 0.0f;
        std::memcpy(&acc[n][g], init, sizeof init);
      }
    const float* rg[4] = {r, r + kLanes, r + 2 * kLanes, r + 3 * kLanes};
    for (int64_t k = 0; k < H; ++k) {
      // Unrolled whole, so that every accumulator is a register (a loop indexes them in memory).
#pragma GCC unroll 4
      for (int g = 0; g < 4; ++g) {
#pragma GCC unroll 4
        for (int q = 0; q < kParts; ++q) {
          V w = *reinterpret_cast<const VU*>(rg[g] + k * 4 * kLanes + q * int64_t{W});
#pragma GCC unroll 4
          for (int n = 0; n < N; ++n) acc[n][g][q] += h[n * H + k] * w;
        }
      }
    }
    for (int n = 0; n < N; ++n) {
      float a[4][kLanes];
      std::memcpy(a, acc[n], sizeof a);
      float hn[kLanes], cn[kLanes];
      for (int64_t l = 0; l < kLanes; ++l) {
        float i = vecmath::sigmoid(a[0][l]), o = vecmath::sigmoid(a[1][l]);
        float f = vecmath::sigmoid(a[2][l]), g = vecmath::tanh(a[3][l]);
        float cp = l < lanes ? c[n * H + u0 + l] : 0.0f;
        cn[l] = f * cp + i * g;
        hn[l] = o * vecmath::tanh(cn[l]);
      }
      for (int64_t l = 0; l < lanes; ++l) {
        c[n * H + u0 + l] = cn[l];
        hOut[n * H + u0 + l] = hn[l];
      }
    }
  }
}

// Each variant with its own vector width (vecRunWidth).
template <int N>
void stepBlocksFor(const float* rp, const float* xw, int64_t ldx, const float* h, float* c, float* hOut, int64_t H,
                   int64_t b0, int64_t b1) {
  vecRunWidth([&](auto w) __attribute__((always_inline)) {
    stepBlocksN<N, decltype(w)::value>(rp, xw, ldx, h, c, hOut, H, b0, b1);
  });
}

void stepBlocks(const float* rp, const float* xw, int64_t ldx, const float* h, float* c, float* hOut, int64_t N,
                int64_t H, int64_t b0, int64_t b1) {
  switch (N) {
    case 1:
      return stepBlocksFor<1>(rp, xw, ldx, h, c, hOut, H, b0, b1);
    case 2:
      return stepBlocksFor<2>(rp, xw, ldx, h, c, hOut, H, b0, b1);
    case 3:
      return stepBlocksFor<3>(rp, xw, ldx, h, c, hOut, H, b0, b1);
    default:
      return stepBlocksFor<4>(rp, xw, ldx, h, c, hOut, H, b0, b1);
  }
}

// The weights in the kernel's form: per direction R packed by unit blocks, Wb + Rb, and W.
struct LstmWeights {
  std::vector<std::vector<float>> rp;    // per direction, packed R
  std::vector<std::vector<float>> bias;  // per direction, Wb + Rb [4H]
  NDArray w;                             // W [D, 4H, I] (dnnl_sgemm's, without an InputProjection)
};

LstmWeights packWeights(const LstmShape& s, int64_t blocks, const NDArray& w, const NDArray& r, const NDArray* b) {
  LstmWeights out;
  out.w = w;
  for (int64_t d = 0; d < s.D; ++d) {
    // R [4H, H] of direction d -> [block][k][gate][16], zero rows for the units past H. A tile
    // of 16 rows (units) by 16 columns (k) at a time, so that both the rows read and the packed
    // lines written stay in L1 (a training graph's forward repacks R at every run: lstm2 b1's
    // 4 MB a layer, column by column, took ~1.5 ms).
    std::vector<float> p(static_cast<size_t>(blocks * 4 * s.H * kLanes), 0.0f);
    const float* rd = r.data<float>() + d * 4 * s.H * s.H;
    constexpr int64_t kTile = 16;
    for (int64_t blk = 0; blk < blocks; ++blk)
      for (int64_t g = 0; g < 4; ++g) {
        const int64_t lanes = std::min(kLanes, s.H - blk * kLanes);
        const float* rows = rd + (g * s.H + blk * kLanes) * s.H;
        float* dst = p.data() + (blk * s.H * 4 + g) * kLanes;
        for (int64_t k0 = 0; k0 < s.H; k0 += kTile) {
          const int64_t k1 = std::min(s.H, k0 + kTile);
          for (int64_t l = 0; l < lanes; ++l)
            for (int64_t k = k0; k < k1; ++k) dst[k * 4 * kLanes + l] = rows[l * s.H + k];
        }
      }
    out.rp.push_back(std::move(p));
    std::vector<float> bd(static_cast<size_t>(4 * s.H));
    gateBias(b ? b->data<float>() : nullptr, s.H, d, bd.data());
    out.bias.push_back(std::move(bd));
  }
  return out;
}

struct LstmState {
  LstmShape s;
  int64_t blocks = 0;
  int threads = 1;
  std::optional<LstmWeights> constant;  // packed once when W, R and B are constants
  std::optional<InputProjection> proj;  // the input projection (W packed once where constant)
};

ops::KernelFn makeLstm(ops::CompileContext& ctx) {
  const ir::Node& n = ctx.node();
  auto shape = lstmShape(n);
  GRAFT_ASSERT(shape && shape->N <= kMaxBatch, "{}: makeLstm on an unsupported node", n.describe());
  auto st = std::make_shared<LstmState>();
  st->s = *shape;
  const LstmShape& s = st->s;
  st->blocks = (s.H + kLanes - 1) / kLanes;
  st->threads = static_cast<int>(std::max<int64_t>(1, std::min<int64_t>(ctx.pool().numThreads(), st->blocks)));
  // Constant weights (inference) are packed here; weights that change between runs (the
  // trained weights of a training graph) are packed at each run: 4H x H floats per direction,
  // cheap next to the T steps that each read all of them.
  const NDArray* w = ctx.constantInput(1);
  const NDArray* r = ctx.constantInput(2);
  const NDArray* b = s.bias ? ctx.constantInput(3) : nullptr;
  const bool constant = w && r && (!s.bias || b);
  try {
    onednn::setThreads(st->threads);
    st->proj.emplace(constant ? w : nullptr, s.T * s.N, s.I, s.D * 4 * s.H);
    if (constant) st->proj->setBias(gateBiases(s, b));
  } catch (const dnnl::error&) {
    st->proj.reset();  // dnnl_sgemm at each run
  }
  // W itself only for dnnl_sgemm, where the projection could not be made.
  if (constant) st->constant = packWeights(s, st->blocks, st->proj ? NDArray() : w->clone(), *r, b);
  return [st](ops::KernelContext& k) {
    const LstmShape& s = st->s;
    const NDArray& x = k.input(0);
    std::optional<LstmWeights> perRun;
    if (!st->constant) perRun = packWeights(s, st->blocks, k.input(1), k.input(2), s.bias ? &k.input(3) : nullptr);
    const LstmWeights& wts = st->constant ? *st->constant : *perRun;
    const int64_t G = 4 * s.H, TN = s.T * s.N;
    NDArray* y = k.wantsOutput(0) ? &k.allocOutputUninit(0, DataType::Float, {s.T, s.D, s.N, s.H}) : nullptr;
    // The input projection: of every direction at once (xw [T*N, D*4H]), or, where oneDNN had no
    // matmul for it at compile time, one direction at a time on dnnl_sgemm (xw [T*N, 4H], below).
    const int64_t ldx = st->proj ? s.D * G : G;
    NDArray xwAll;
    if (st->proj) {
      onednn::setThreads(st->threads);
      if (!st->constant) st->proj->setBias(gateBiases(s, s.bias ? &k.input(3) : nullptr));
      xwAll = NDArray::uninitialized(DataType::Float, {TN, ldx});
      st->proj->run(x, k.input(1), xwAll, k.pool());
    }
    std::vector<float> xw(st->proj ? 0 : static_cast<size_t>(TN * G));
    std::vector<float> hBuf(static_cast<size_t>(2 * s.N * s.H)), cBuf(static_cast<size_t>(s.N * s.H));
    std::vector<float> yh(static_cast<size_t>(s.D * s.N * s.H)), yc(static_cast<size_t>(s.D * s.N * s.H));
    for (int64_t d = 0; d < s.D; ++d) {
      // The input projection of every step: xw = X W_d^T + Wb + Rb.
      const float* xwd = st->proj ? xwAll.data<float>() + d * G : xw.data();
      if (!st->proj) {
        for (int64_t i = 0; i < TN; ++i) std::memcpy(xw.data() + i * G, wts.bias[d].data(), sizeof(float) * G);
        onednn::setThreads(st->threads);
        dnnl_status_t status = dnnl_sgemm('N', 'T', TN, G, s.I, 1.0f, x.data<float>(), s.I,
                                          wts.w.data<float>() + d * G * s.I, s.I, 1.0f, xw.data(), G);
        if (status != dnnl_success) throw InternalError("LSTM: oneDNN's sgemm failed");
      }
      float* h = hBuf.data();
      float* hNext = hBuf.data() + s.N * s.H;
      if (s.h0)
        std::memcpy(h, k.input(5).data<float>() + d * s.N * s.H, sizeof(float) * s.N * s.H);
      else
        std::fill(h, h + s.N * s.H, 0.0f);
      if (s.c0)
        std::memcpy(cBuf.data(), k.input(6).data<float>() + d * s.N * s.H, sizeof(float) * s.N * s.H);
      else
        std::fill(cBuf.begin(), cBuf.end(), 0.0f);
      bool backward = s.reverse || d == 1;
      const float* rp = wts.rp[d].data();
      float* c = cBuf.data();
      int nt = st->threads;
      SpinBarrier barrier(nt);
      float* yd = y ? y->data<float>() : nullptr;
      auto run = [&](int tid, int team) {
        int64_t b0 = st->blocks * tid / team, b1 = st->blocks * (tid + 1) / team;
        float* hr = h;
        float* hw = hNext;
        for (int64_t step = 0; step < s.T; ++step) {
          int64_t t = backward ? s.T - 1 - step : step;
          stepBlocks(rp, xwd + t * s.N * ldx, ldx, hr, c, hw, s.N, s.H, b0, b1);
          if (yd)
            for (int64_t nn = 0; nn < s.N; ++nn)
              std::memcpy(yd + ((t * s.D + d) * s.N + nn) * s.H + b0 * kLanes, hw + nn * s.H + b0 * kLanes,
                          sizeof(float) * static_cast<size_t>(std::min(s.H, b1 * kLanes) - b0 * kLanes));
          if (team > 1) barrier.wait();
          std::swap(hr, hw);
        }
      };
      if (nt > 1) {
#pragma omp parallel num_threads(nt)
        run(omp_get_thread_num(), omp_get_num_threads());
      } else {
        run(0, 1);
      }
      // After T steps the last h is in the buffer the final swap left as the read side.
      const float* hLast = (s.T % 2 == 0) ? h : hNext;
      std::memcpy(yh.data() + d * s.N * s.H, hLast, sizeof(float) * s.N * s.H);
      std::memcpy(yc.data() + d * s.N * s.H, cBuf.data(), sizeof(float) * s.N * s.H);
    }
    writeFinalStates(k, s, yh.data(), yc.data());
  };
}

// ---- Batched LSTM (N > kMaxBatch), inference -------------------------------------------------
// From batch 5 a step's recurrent product h R^T is a real matrix product ([N, H] x [H, 4H]), which
// oneDNN's matmul runs near the FMA roof; what oneDNN's own LSTM adds is a parallel region per
// time step, and under passive OpenMP waits each of them wakes a sleeping thread (lstm2 b32 on
// the AVX-512 EPYC: 49 ms passive against 37 ms spinning, ONNX Runtime 40). This kernel:
// - computes the input projection of every step at once, X [T*N, I] x [W_f; W_b]^T + Wb + Rb, with
//   one oneDNN matmul on all threads (weights packed once);
// - gives each thread of the team a slice of the hidden units (blocks of 16) and its own
//   single-threaded matmul primitive over R's rows of those units (the four gates' columns side
//   by side, packed once into the primitive's layout; lstm_recurrence.hpp, shared with
//   LSTMTrain), so that a thread computes its units' gate pre-activations for all N rows, then
//   their cell;
// - runs the whole sequence of a direction in one OpenMP region with the spinning barrier between
//   steps (each step reads every unit of h_{t-1}): one wake-up per direction and call.
// Constant W, R and B only (inference with constant weights; a training graph's forward LSTM from
// batch 8 is LSTMTrain, vec_lstm_grad.cpp); bf16 backends keep oneDNN's bf16 LSTM (its brgemm
// cells run in bf16, this kernel in float32).

// The cell of one step for the units [u0, u0 + nu) of all N rows: g [N, 4nu] (the recurrent
// product, gates side by side), xw [N, ldx] (the input projection with both biases, this
// direction's gates at its offset), c [N, H] in place, h [N, H].
GRAFT_VEC_LOOP void batchedCell(const float* __restrict g, const float* __restrict xw, int64_t ldx, float* __restrict c,
                                float* __restrict h, int64_t N, int64_t H, int64_t u0, int64_t nu) {
  for (int64_t n = 0; n < N; ++n) {
    const float* gr = g + n * 4 * nu;
    const float* xr = xw + n * ldx + u0;
    float* cr = c + n * H + u0;
    float* hr = h + n * H + u0;
    for (int64_t l = 0; l < nu; ++l) {
      float i = vecmath::sigmoidCell(gr[l] + xr[l]);
      float f = vecmath::sigmoidCell(gr[2 * nu + l] + xr[2 * H + l]);
      float z = vecmath::tanhCell(gr[3 * nu + l] + xr[3 * H + l]);
      cr[l] = f * cr[l] + i * z;
    }
    for (int64_t l = 0; l < nu; ++l) hr[l] = vecmath::sigmoidCell(gr[nu + l] + xr[H + l]) * vecmath::tanhCell(cr[l]);
  }
}

struct BatchedState {
  LstmShape s;
  int team = 1, threads = 1;
  std::optional<InputProjection> proj;
  std::vector<std::vector<RecurrentSlice>> slices;  // [direction][thread], R packed
};

ops::KernelFn makeBatchedLstm(ops::CompileContext& ctx) {
  using onednn::execute;
  using onednn::setThreads;
  const ir::Node& n = ctx.node();
  auto shape = lstmShape(n);
  GRAFT_ASSERT(shape && shape->N > kMaxBatch, "{}: makeBatchedLstm on an unsupported node", n.describe());
  // Weights known only at run time (a training graph's forward at batch 5-7) and bf16 backends
  // go to oneDNN's LSTM.
  const NDArray* w = ctx.constantInput(1);
  const NDArray* r = ctx.constantInput(2);
  const NDArray* b = shape->bias ? ctx.constantInput(3) : nullptr;
  if (!w || !r || (shape->bias && !b) || bf16Compute()) return onednn::decline();
  auto st = std::make_shared<BatchedState>();
  st->s = *shape;
  const LstmShape& s = st->s;
  const int64_t G = 4 * s.H, TN = s.T * s.N, blocks = (s.H + kLanes - 1) / kLanes;
  st->threads = std::max(1, ctx.pool().numThreads());
  st->team = static_cast<int>(std::min<int64_t>(st->threads, blocks));
  try {
    // The input projection, on every thread.
    setThreads(st->threads);
    st->proj.emplace(w, TN, s.I, s.D * G);
    st->proj->setBias(gateBiases(s, b));
    std::string recurrentImpl;
    for (int64_t d = 0; d < s.D; ++d) {
      std::vector<RecurrentSlice> slices = makeRecurrentSlices(s.N, s.H, st->team, &recurrentImpl);
      if (slices.empty()) {
        setThreads(st->threads);
        return onednn::decline();
      }
      for (const RecurrentSlice& m : slices) m.packFrom(r->data<float>() + d * G * s.H);
      st->slices.push_back(std::move(slices));
    }
    setThreads(st->threads);
    noteImplementation(fmt::format("{} x {} threads", recurrentImpl, st->team));
  } catch (const dnnl::error&) {
    setThreads(st->threads);
    return onednn::decline();
  }
  return [st](ops::KernelContext& k) {
    const LstmShape& s = st->s;
    const int64_t G = 4 * s.H, DG = s.D * G, NH = s.N * s.H;
    setThreads(st->threads);
    NDArray xw = NDArray::uninitialized(DataType::Float, {s.T * s.N, DG});
    st->proj->run(k.input(0), k.input(1), xw, k.pool());
    float* y = k.wantsOutput(0) ? k.allocOutputUninit(0, DataType::Float, {s.T, s.D, s.N, s.H}).data<float>() : nullptr;
    std::vector<float> ring(y ? 0 : static_cast<size_t>(2 * NH)), zeros(static_cast<size_t>(NH), 0.0f);
    std::vector<float> cBuf(static_cast<size_t>(s.D * NH)), yh(static_cast<size_t>(s.D * NH));
    for (int64_t d = 0; d < s.D; ++d) {
      const bool backward = s.reverse || d == 1;
      float* c = cBuf.data() + d * NH;
      if (s.c0)
        std::memcpy(c, k.input(6).data<float>() + d * NH, sizeof(float) * NH);
      else
        std::fill(c, c + NH, 0.0f);
      const float* h0 = s.h0 ? k.input(5).data<float>() + d * NH : zeros.data();
      // Where step `step` (in processing order) writes h: Y[t, d], or the ring when Y is not wanted.
      auto hOut = [&](int64_t step) {
        int64_t t = backward ? s.T - 1 - step : step;
        return y ? y + (t * s.D + d) * NH : ring.data() + (step % 2) * NH;
      };
      const std::vector<RecurrentSlice>& slices = st->slices[d];
      SpinBarrier barrier(st->team);
      auto run = [&](int tid, int team) {
        // A thread runs the slices tid, tid + team, ... (all of them when OpenMP gave the region
        // fewer threads than the team).
        std::vector<NDArray> gates;
        for (int j = tid; j < st->team; j += team)
          gates.push_back(NDArray::uninitialized(DataType::Float, {s.N, 4 * slices[j].nu}));
        for (int64_t step = 0; step < s.T; ++step) {
          int64_t t = backward ? s.T - 1 - step : step;
          const float* hp = step == 0 ? h0 : hOut(step - 1);
          float* h = hOut(step);
          const float* xwt = xw.data<float>() + t * s.N * DG + d * G;
          for (int j = tid, i = 0; j < st->team; j += team, ++i) {
            const RecurrentSlice& m = slices[j];
            float* g = gates[i].data<float>();
            m.run(hp, g);
            GRAFT_VEC_RUN(batchedCell(g, xwt, DG, c, h, s.N, s.H, m.u0, m.nu));
          }
          if (team > 1) barrier.wait();
        }
      };
      if (st->team > 1) {
        int team = st->team;
#pragma omp parallel num_threads(team)
        run(omp_get_thread_num(), omp_get_num_threads());
      } else {
        run(0, 1);
      }
      std::memcpy(yh.data() + d * NH, hOut(s.T - 1), sizeof(float) * NH);
    }
    writeFinalStates(k, s, yh.data(), cBuf.data());
  };
}

}  // namespace

GRAFT_REGISTER_CPU_KERNELS(vec_lstm) {
  // Ahead of oneDNN's LSTM (priority 0) at the batches it takes.
  r.add({"", "LSTM", "vec_lstm_small_batch", supportsLstm, makeLstm, 1});
  r.add({"", "LSTM", "vec_lstm_batched", supportsBatchedLstm, makeBatchedLstm, 1});
}

}  // namespace graft::backends::cpu
