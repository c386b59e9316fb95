// ai.graft LSTMTrain (rnn.cpp) and LSTMGrad (rnn_grad.cpp) for training: graft's kernels, ahead of
// oneDNN's backward primitive, and the lstm-save-gates pass of the cpu training pipeline.
//
// oneDNN 2.6 runs an LSTM's backward as its training forward (again, the whole sequence, one step
// at a time, to save the gates) and then its backward primitive: on the 2-vCPU AVX-512 EPYC of
// issue 12 the two took 2/3 of a zoo lstm2 b32 training step, at about half the FMA roof. When the
// forward's Y is an input (the VJP adds it), every step's previous state is known, so the
// recomputed gate pre-activations are two large matrix products, not T small ones:
//   Hprev[t]  = Y[t -/+ 1] (initial_h at the first step of the direction)
//   pre       = X W^T + Hprev R^T + Wb + Rb                         (sgemm, [T*N, 4H])
//   gates, C  : the cell, walked in processing order; independent over (batch, unit), so one
//               parallel pass over the batch rows with no barrier between steps
//   backward  : per step, elementwise, then dh_prev = dG_t R                  (sgemm, [N, H])
//   dX = dG W, dW = dG^T X, dR = dG^T Hprev, dB = column sums of dG   (sgemm over all steps)
// The only sequential products are the T small dh_prev ones; oneDNN's backward has 2T.
//
// Where the batch is large enough (kSaveMinBatch), the pass lstm-save-gates replaces the forward
// LSTM by LSTMTrain, whose extra output Saved holds every step's gates and cell state, and gives
// Saved to the LSTMGrad, which then skips the recomputation (the two products above were 43 of
// ~150 ms per layer of lstm2 b32). LSTMTrain's kernel: X W^T for all steps in one sgemm, then per
// step h R^T and the cell, each thread for its hidden units with R's rows of them packed once
// per run into a single-threaded oneDNN matmul (lstm_recurrence.hpp; against dnnl_sgemm per gate
// block, which packs R at every call: lstm2 b32's two LSTMTrains 116 -> 96 ms a step); the gates
// stay in Saved, where the backward pass reads them.
//
// Both take ONNX's default activations (sigmoid, tanh, tanh), layout 0, no clip, no input_forget,
// no peepholes and no sequence_lens, float with static shapes; the rest goes to oneDNN's
// primitive or the reference. dP, the peepholes' gradient, is zeros, as the reference gives for
// an absent P.
#include <omp.h>

#include <algorithm>
#include <cstring>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include <dnnl.h>

#include "backends/cpu/cpu_kernels.hpp"
#include "backends/cpu/lstm_recurrence.hpp"
#include "backends/cpu/onednn_common.hpp"
#include "backends/cpu/vec_common.hpp"
#include "backends/cpu/vec_math.hpp"
#include "ops/infer.hpp"
#include "ops/registry.hpp"
#include "ops/rnn_cell.hpp"
#include "passes/fuse_util.hpp"
#include "passes/pass.hpp"
#include "support/check.hpp"

namespace graft::backends::cpu {
namespace {

// LSTMGrad's inputs: dY, dY_h, dY_c, then the forward's X, W, R, B, sequence_lens, initial_h,
// initial_c, P, then the forward's Y and, from LSTMTrain, Saved.
constexpr size_t kFwd = 3;
constexpr size_t kY = kFwd + 8;
constexpr size_t kSaved = kY + 1;
// The FLOPs of one step's recurrent product (h R^T forward, dG_t R backward) from which it runs
// on every thread: measured at the two ends only (batch 1: one thread better; batch 32: both),
// the cut between them is batch 8 at H = 512.
constexpr double kParallelStepFlops = 16e6;
// The smallest batch at which lstm-save-gates uses LSTMTrain. lstm2 training steps (H = 512, 64
// steps, 2 threads, half-rate AVX-512 EPYC), saved/recomputed: batch 32 0.71-0.80, batch 8
// 0.73-0.91, batch 4 0.82-1.11, batch 1 1.08-1.24 (the small-batch forward, vec_lstm.cpp, wakes
// the threads once per sequence; LSTMTrain's step products once per step).
constexpr int64_t kSaveMinBatch = 8;

struct LstmShape {
  int64_t T = 0, N = 0, I = 0, H = 0, D = 1;
  bool reverse = false;  // direction "reverse" (D = 1)
  bool bias = false, h0 = false, c0 = false;
  bool dy = false, dyh = false, dyc = false;  // LSTMGrad: which output gradients are given
  bool saved = false;                         // LSTMGrad: Saved is an input
};

// The forward inputs X, W, R, B, sequence_lens, initial_h, initial_c, P of `n` from input `o`.
std::optional<LstmShape> forwardShape(const ir::Node& n, size_t o) {
  using onednn::isStaticFloat;
  // The attributes as the reference kernel reads them (ops/rnn_cell.hpp).
  std::optional<ops::rnn::RnnParams> params = ops::rnn::plainLstmParams(n);
  if (!params) return std::nullopt;
  const ops::rnn::RnnParams& p = *params;
  LstmShape s;
  s.D = p.numDirections;
  s.reverse = !p.forward;
  auto in = [&](size_t i) { return n.hasInput(i) ? n.input(i) : nullptr; };
  if (!isStaticFloat(in(o)) || !isStaticFloat(in(o + 1)) || !isStaticFloat(in(o + 2))) return std::nullopt;
  Shape x = in(o)->info().shape(), w = in(o + 1)->info().shape(), r = in(o + 2)->info().shape();
  if (x.size() != 3 || w.size() != 3 || r.size() != 3) return std::nullopt;
  s.T = x[0];
  s.N = x[1];
  s.I = x[2];
  s.H = r[2];
  if (s.T <= 0 || s.N <= 0 || s.I <= 0 || s.H <= 0) return std::nullopt;
  if (p.hiddenSize >= 0 && p.hiddenSize != s.H) return std::nullopt;
  if (w != Shape{s.D, 4 * s.H, s.I} || r != Shape{s.D, 4 * s.H, s.H}) return std::nullopt;
  auto optional = [&](size_t i, const Shape& shape, bool& present) {
    present = in(i) != nullptr;
    return !present || (isStaticFloat(in(i)) && in(i)->info().shape() == shape);
  };
  Shape hs{s.D, s.N, s.H};
  if (!optional(o + 3, {s.D, 8 * s.H}, s.bias)) return std::nullopt;
  if (in(o + 4) != nullptr || in(o + 7) != nullptr) return std::nullopt;  // sequence_lens, P
  if (!optional(o + 5, hs, s.h0) || !optional(o + 6, hs, s.c0)) return std::nullopt;
  return s;
}

Shape savedShape(const LstmShape& s) { return {s.D, s.T, s.N, 5 * s.H}; }

bool outputsAre(const ir::Node& n, const std::vector<Shape>& outs) {
  if (n.numOutputs() > outs.size()) return false;
  for (size_t i = 0; i < n.numOutputs(); ++i)
    if (n.hasOutput(i) && !(onednn::isStaticFloat(n.output(i)) && n.output(i)->info().shape() == outs[i])) return false;
  return true;
}

std::optional<LstmShape> trainShape(const ir::Node& n) {
  if (n.domain() != ops::kGraftDomain || n.type() != "LSTMTrain" || n.numInputs() > 8) return std::nullopt;
  auto s = forwardShape(n, 0);
  if (!s) return std::nullopt;
  Shape hs{s->D, s->N, s->H};
  if (!outputsAre(n, {{s->T, s->D, s->N, s->H}, hs, hs, savedShape(*s)})) return std::nullopt;
  return s;
}

std::optional<LstmShape> gradShape(const ir::Node& n) {
  using onednn::isStaticFloat;
  if (n.domain() != ops::kGraftDomain || n.type() != "LSTMGrad") return std::nullopt;
  auto in = [&](size_t i) { return n.hasInput(i) ? n.input(i) : nullptr; };
  if (n.numInputs() < kY + 1 || n.numInputs() > kSaved + 1 || !isStaticFloat(in(kY))) return std::nullopt;  // no Y
  auto shape = forwardShape(n, kFwd);
  if (!shape) return std::nullopt;
  LstmShape& s = *shape;
  Shape hs{s.D, s.N, s.H}, y{s.T, s.D, s.N, s.H};
  auto optional = [&](size_t i, const Shape& want, bool& present) {
    present = in(i) != nullptr;
    return !present || (isStaticFloat(in(i)) && in(i)->info().shape() == want);
  };
  if (!optional(0, y, s.dy) || !optional(1, hs, s.dyh) || !optional(2, hs, s.dyc)) return std::nullopt;
  if (in(kY)->info().shape() != y) return std::nullopt;
  if (!optional(kSaved, savedShape(s), s.saved)) return std::nullopt;
  if (!outputsAre(n,
                  {{s.T, s.N, s.I}, {s.D, 4 * s.H, s.I}, {s.D, 4 * s.H, s.H}, {s.D, 8 * s.H}, hs, hs, {s.D, 3 * s.H}}))
    return std::nullopt;
  return s;
}

bool supportsLstmTrain(const ir::Node& n) { return trainShape(n).has_value(); }
bool supportsLstmGrad(const ir::Node& n) { return gradShape(n).has_value(); }

void sgemm(char ta, char tb, int64_t m, int64_t n, int64_t k, const float* a, int64_t lda, const float* b, int64_t ldb,
           float beta, float* c, int64_t ldc) {
  if (dnnl_sgemm(ta, tb, m, n, k, 1.0f, a, lda, b, ldb, beta, c, ldc) != dnnl_success)
    throw InternalError("LSTM: oneDNN's sgemm failed");
}

// One batch row of one step in Saved's layout, units [j0, j1): g [5H] holds the gate
// pre-activations (iofc) and receives the activated gates and, after them, the new cell state;
// cp: the previous cell state; h (may be null): receives the new hidden state.
[[gnu::always_inline]] inline void cellRow(float* __restrict g, const float* __restrict cp, float* __restrict h,
                                           int64_t H, int64_t j0, int64_t j1) {
  float* __restrict gi = g;
  float* __restrict go = g + H;
  float* __restrict gf = g + 2 * H;
  float* __restrict gz = g + 3 * H;
  float* __restrict cn = g + 4 * H;
  for (int64_t j = j0; j < j1; ++j) {
    float i = vecmath::sigmoid(gi[j]), o = vecmath::sigmoid(go[j]);
    float f = vecmath::sigmoid(gf[j]), z = vecmath::tanh(gz[j]);
    float cv = f * cp[j] + i * z;
    gi[j] = i;
    go[j] = o;
    gf[j] = f;
    gz[j] = z;
    cn[j] = cv;
  }
  if (h)
    for (int64_t j = j0; j < j1; ++j) h[j] = go[j] * vecmath::tanh(cn[j]);
}

// The cell for batch rows [n0, n1) over the whole sequence, in processing order, from the gate
// pre-activations in sv [T, N, 5H] (Saved's layout of one direction); c0: the initial state [N, H].
GRAFT_VEC_LOOP void cellSequence(float* sv, const float* c0, int64_t T, int64_t N, int64_t H, bool backward, int64_t n0,
                                 int64_t n1) {
  for (int64_t step = 0; step < T; ++step) {
    int64_t t = backward ? T - 1 - step : step;
    int64_t tp = backward ? t + 1 : t - 1;  // the step before, in time
    for (int64_t n = n0; n < n1; ++n) {
      const float* cp = step == 0 ? c0 + n * H : sv + (tp * N + n) * 5 * H + 4 * H;
      cellRow(sv + (t * N + n) * 5 * H, cp, nullptr, H, 0, H);
    }
  }
}

// One step of the forward for all N rows, units [j0, j1): g [N, 5H], previous cell states cp
// (row stride cps), new hidden states h [N, H].
GRAFT_VEC_LOOP void cellStep(float* g, const float* cp, int64_t cps, float* h, int64_t N, int64_t H, int64_t j0,
                             int64_t j1) {
  for (int64_t n = 0; n < N; ++n) cellRow(g + n * 5 * H, cp + n * cps, h + n * H, H, j0, j1);
}

// One step backwards, for one batch row, units [j0, j1): from the step's gates and cell state
// g [5H], dh (dY_t already added) and dc, the gradients of the gate pre-activations go to dg
// [4H]; dc becomes that of the previous cell state cp.
[[gnu::always_inline]] inline void cellRowBackward(const float* __restrict g, const float* __restrict dh,
                                                   float* __restrict dc, const float* __restrict cp,
                                                   float* __restrict dg, int64_t H, int64_t j0, int64_t j1) {
  const float* __restrict gi = g;
  const float* __restrict go = g + H;
  const float* __restrict gf = g + 2 * H;
  const float* __restrict gz = g + 3 * H;
  const float* __restrict cn = g + 4 * H;
  for (int64_t j = j0; j < j1; ++j) {
    float i = gi[j], o = go[j], f = gf[j], z = gz[j], t = vecmath::tanh(cn[j]);
    float d = dc[j] + dh[j] * o * (1.0f - t * t);
    dg[j] = d * z * i * (1.0f - i);
    dg[H + j] = dh[j] * t * o * (1.0f - o);
    dg[2 * H + j] = d * cp[j] * f * (1.0f - f);
    dg[3 * H + j] = d * i * (1.0f - z * z);
    dc[j] = d * f;
  }
}

// One step backwards for all N rows, units [j0, j1): g [N, 5H], dh, dc, cp (previous cell
// states, row stride cps), dg [N, 4H].
GRAFT_VEC_LOOP void cellBackward(const float* g, const float* dh, float* dc, const float* cp, int64_t cps, float* dg,
                                 int64_t N, int64_t H, int64_t j0, int64_t j1) {
  for (int64_t n = 0; n < N; ++n)
    cellRowBackward(g + n * 5 * H, dh + n * H, dc + n * H, cp + n * cps, dg + n * 4 * H, H, j0, j1);
}

// Runs body(tid, team, barrier) on `team` threads in one OpenMP region (the threads wake once
// for the whole sequence, not once per step), or on the calling thread alone (team 1, or when
// OpenMP gives the region fewer threads than asked: then the barrier is not needed).
template <class Body>
void onTeam(int team, const Body& body) {
  if (team <= 1) {
    body(0, 1, nullptr);
    return;
  }
  SpinBarrier barrier(team);
#pragma omp parallel num_threads(team)
  {
    if (omp_get_num_threads() == team)
      body(omp_get_thread_num(), team, &barrier);
    else if (omp_get_thread_num() == 0)
      body(0, 1, nullptr);
  }
}

// Column sums of a [rows, cols] matrix into out[cols], for columns [c0, c1).
GRAFT_VEC_LOOP void columnSums(const float* a, int64_t rows, int64_t cols, float* out, int64_t c0, int64_t c1) {
  std::fill(out + c0, out + c1, 0.0f);
  for (int64_t r = 0; r < rows; ++r) {
    const float* row = a + r * cols;
    for (int64_t c = c0; c < c1; ++c) out[c] += row[c];
  }
}

// The backward step's product at small batch, dh[:, j] = dG_t R[:, j] for the columns [j0, j1):
// dg [N, G] (this step's gate gradients), r: R [G, H] row-major, dh [N, H]. Column chunks of C
// floats whose N x C accumulators stay in registers (16 vectors of W), each chunk streaming R's
// rows. oneDNN's sgemm took 77 us for lstm2 b1's 1 x 2048 x 512 on two threads (27 GFLOP/s, about
// half of what L3 streams), and its per-call overhead kept the step on one thread.
template <int N, int W>
GRAFT_VEC_LOOP void stepProductN(const float* dg, int64_t G, const float* r, int64_t H, float* dh, int64_t j0,
                                 int64_t j1) {
  using V = typename FloatVec<W>::type;
  using VU = typename FloatVec<W>::unaligned;
  constexpr int kVecs = 16 / N;  // accumulators per batch row
  constexpr int64_t kCols = int64_t{kVecs} * W;
  int64_t j = j0;
  for (; j + kCols <= j1; j += kCols) {
    V acc[N][kVecs];
    for (int n = 0; n < N; ++n)
      for (int v = 0; v < kVecs; ++v) acc[n][v] = V{} + 0.0f;
    for (int64_t q = 0; q < G; ++q) {
      const float* row = r + q * H + j;
#pragma GCC unroll 16
      for (int v = 0; v < kVecs; ++v) {
        V w = *reinterpret_cast<const VU*>(row + v * int64_t{W});
#pragma GCC unroll 4
        for (int n = 0; n < N; ++n) acc[n][v] += dg[n * G + q] * w;
      }
    }
    for (int n = 0; n < N; ++n)
      for (int v = 0; v < kVecs; ++v) *reinterpret_cast<VU*>(dh + n * H + j + v * int64_t{W}) = acc[n][v];
  }
  // The last columns (fewer than a chunk): one at a time.
  for (; j < j1; ++j)
    for (int n = 0; n < N; ++n) {
      float sum = 0.0f;
      for (int64_t q = 0; q < G; ++q) sum += dg[n * G + q] * r[q * H + j];
      dh[n * H + j] = sum;
    }
}

template <int N>
void stepProductFor(const float* dg, int64_t G, const float* r, int64_t H, float* dh, int64_t j0, int64_t j1) {
  vecRunWidth([&](auto w)
                  __attribute__((always_inline)) { stepProductN<N, decltype(w)::value>(dg, G, r, H, dh, j0, j1); });
}

// dh[:, j0:j1] = dg R[:, j0:j1] for N <= kMaxStepProductBatch rows.
constexpr int64_t kMaxStepProductBatch = 4;
void stepProduct(const float* dg, int64_t N, int64_t G, const float* r, int64_t H, float* dh, int64_t j0, int64_t j1) {
  switch (N) {
    case 1:
      return stepProductFor<1>(dg, G, r, H, dh, j0, j1);
    case 2:
      return stepProductFor<2>(dg, G, r, H, dh, j0, j1);
    case 3:
      return stepProductFor<3>(dg, G, r, H, dh, j0, j1);
    default:
      return stepProductFor<4>(dg, G, r, H, dh, j0, j1);
  }
}

// b [cols, rows] = a^T for a row-major a [rows, cols], in tiles.
void transpose(const float* a, int64_t rows, int64_t cols, float* b) {
  constexpr int64_t kTile = 32;
  for (int64_t r0 = 0; r0 < rows; r0 += kTile)
    for (int64_t c0 = 0; c0 < cols; c0 += kTile)
      for (int64_t r = r0; r < std::min(rows, r0 + kTile); ++r)
        for (int64_t c = c0; c < std::min(cols, c0 + kTile); ++c) b[c * rows + r] = a[r * cols + c];
}

// The products of LSTMGrad's recomputed gate pre-activations, pre = X W^T + Wb + Rb + Hprev R^T,
// with W and R read transposed as they are given. oneDNN 2.6's sgemm takes such products ('N',
// 'T') with few rows slowly on AVX-512 hosts: lstm2 b1's 64 x 2048 x 512 in 1.46 ms (92 GFLOP/s;
// 0.68 ms with its AVX2 kernels), where the matmul primitive (brgemm) takes 0.70 ms. The matmul
// writes a dense [T*N, 4H] (with a row stride of 5H, Saved's layout, oneDNN gives its slow gemm
// again), copied into the recomputed gates' rows after.
using onednn::memory;

struct Recompute {
  dnnl::matmul xw, hr;
  memory::desc xDesc, wDesc, hDesc, rDesc, yDesc;
  memory bias;
};

std::optional<Recompute> makeRecompute(int64_t TN, int64_t I, int64_t H) {
  auto f32 = memory::data_type::f32;
  const int64_t G = 4 * H;
  Recompute rc;
  rc.xDesc = memory::desc({TN, I}, f32, memory::dims{I, 1});
  rc.wDesc = memory::desc({I, G}, f32, memory::dims{1, I});  // W [G, I] read transposed
  rc.hDesc = memory::desc({TN, H}, f32, memory::dims{H, 1});
  rc.rDesc = memory::desc({H, G}, f32, memory::dims{1, H});  // R [G, H] read transposed
  rc.yDesc = memory::desc({TN, G}, f32, memory::dims{G, 1});
  memory::desc biasDesc({1, G}, f32, memory::dims{G, 1});
  try {
    auto& eng = onednn::engine();
    dnnl::matmul::primitive_desc xpd(dnnl::matmul::desc(rc.xDesc, rc.wDesc, biasDesc, rc.yDesc), eng);
    dnnl::primitive_attr sum;
    dnnl::post_ops po;
    po.append_sum(1.0f);
    sum.set_post_ops(po);
    dnnl::matmul::primitive_desc hpd(dnnl::matmul::desc(rc.hDesc, rc.rDesc, rc.yDesc), sum, eng);
    // Only where both are oneDNN's brgemm matmuls: its gemm-based ones are the slow sgemm again.
    if (std::string(xpd.impl_info_str()).rfind("brg", 0) != 0 || std::string(hpd.impl_info_str()).rfind("brg", 0) != 0)
      return std::nullopt;
    rc.xw = dnnl::matmul(xpd);
    rc.hr = dnnl::matmul(hpd);
    rc.bias = memory(biasDesc, eng);
  } catch (const dnnl::error&) {
    return std::nullopt;
  }
  return rc;
}

struct LstmState {
  LstmShape s;
  int threads = 1;
  // The threads of a step's recurrent product (h R^T forward, dG_t R backward): all of them from
  // kParallelStepFlops or, in LSTMGrad, at batch kMaxStepProductBatch or less; else one.
  int stepThreads = 1;
  // LSTMTrain: the step products' per-thread matmuls, [direction][thread] (lstm_recurrence.hpp);
  // empty: dnnl_sgemm per gate block instead.
  std::vector<std::vector<RecurrentSlice>> slices;
  // LSTMGrad without Saved: the recomputed pre-activations' two products, X W^T + Wb + Rb and
  // + Hprev R^T, as oneDNN matmuls into a dense [T*N, 4H] (makeRecompute), or empty: dnnl_sgemm
  // into Saved's rows instead.
  std::optional<Recompute> recompute;
};

std::shared_ptr<LstmState> startKernel(ops::CompileContext& ctx, const std::optional<LstmShape>& shape, bool grad) {
  GRAFT_ASSERT(shape, "{}: LSTM kernel on an unsupported node", ctx.node().describe());
  auto st = std::make_shared<LstmState>();
  st->s = *shape;
  st->threads = std::max(1, ctx.pool().numThreads());
  // LSTMGrad's step product at batch 4 or less is graft's stepProduct, split over the threads at
  // any size (lstm2 b1's training step 33.6 -> 30.3 ms with it on two threads; with oneDNN's sgemm
  // one thread had been faster).
  const bool ownStepProduct = grad && shape->N <= kMaxStepProductBatch;
  st->stepThreads = ownStepProduct || 2.0 * shape->N * 4 * shape->H * shape->H >= kParallelStepFlops ? st->threads : 1;
  return st;
}

// Fills the gate part of sv's T*N rows [5H] with Wb + Rb of direction d (zeros without bias)
// and adds X W^T.
void inputProjection(const LstmShape& s, const float* x, const float* wd, const float* b, int64_t d, float* sv) {
  const int64_t G = 4 * s.H, TN = s.T * s.N;
  std::vector<float> bias(static_cast<size_t>(G));
  gateBias(b, s.H, d, bias.data());
  for (int64_t i = 0; i < TN; ++i) std::memcpy(sv + i * 5 * s.H, bias.data(), sizeof(float) * G);
  sgemm('N', 'T', TN, G, s.I, x, s.I, wd, s.I, 1.0f, sv, 5 * s.H);
}

// One step of the forward for all N rows, units [u0, u0 + nu): adds the recurrent product acc
// [N, 4nu] (gate q of unit u0 + l at q * nu + l) to the gate pre-activations in g [N, 5H], then
// the cell (previous cell states cp, row stride cps; new hidden states h [N, H]).
GRAFT_VEC_LOOP void addGatesAndCell(float* g, const float* acc, int64_t nu, const float* cp, int64_t cps, float* h,
                                    int64_t N, int64_t H, int64_t u0) {
  for (int64_t n = 0; n < N; ++n) {
    float* __restrict gr = g + n * 5 * H + u0;
    const float* __restrict ar = acc + n * 4 * nu;
    for (int64_t q = 0; q < 4; ++q)
      for (int64_t l = 0; l < nu; ++l) gr[q * H + l] += ar[q * nu + l];
    cellRow(g + n * 5 * H, cp + n * cps, h + n * H, H, u0, u0 + nu);
  }
}

ops::KernelFn makeLstmTrain(ops::CompileContext& ctx) {
  auto st = startKernel(ctx, trainShape(ctx.node()), false);
  {
    // Each direction's R packs into its own per-thread weights at each run.
    const LstmShape& s = st->s;
    for (int64_t d = 0; d < s.D; ++d) {
      std::vector<RecurrentSlice> slices = makeRecurrentSlices(s.N, s.H, st->stepThreads);
      if (slices.empty()) {
        st->slices.clear();
        break;
      }
      st->slices.push_back(std::move(slices));
    }
    onednn::setThreads(st->threads);
  }
  return [st](ops::KernelContext& k) {
    const LstmShape& s = st->s;
    const int64_t T = s.T, N = s.N, I = s.I, H = s.H, D = s.D, G = 4 * H, NH = N * H;
    const int nt = st->threads;
    const float* x = k.input(0).data<float>();
    const float* w = k.input(1).data<float>();
    const float* r = k.input(2).data<float>();
    const float* b = s.bias ? k.input(3).data<float>() : nullptr;
    const float* h0 = s.h0 ? k.input(5).data<float>() : nullptr;
    const float* c0 = s.c0 ? k.input(6).data<float>() : nullptr;
    std::vector<float> scratchY, scratchSaved;
    auto out = [&](size_t i, Shape shape, std::vector<float>& scratch) -> float* {
      if (k.wantsOutput(i)) return k.allocOutputUninit(i, DataType::Float, std::move(shape)).data<float>();
      scratch.resize(static_cast<size_t>(shapeNumel(shape)));
      return scratch.data();
    };
    float* y = out(0, {T, D, N, H}, scratchY);
    float* saved = out(3, savedShape(s), scratchSaved);
    float* yh = k.wantsOutput(1) ? k.allocOutputUninit(1, DataType::Float, {D, N, H}).data<float>() : nullptr;
    float* yc = k.wantsOutput(2) ? k.allocOutputUninit(2, DataType::Float, {D, N, H}).data<float>() : nullptr;
    std::vector<float> zeros(static_cast<size_t>(NH), 0.0f), rt;
    // Y_h and Y_c of direction d from its last step processed.
    auto writeLast = [&](int64_t d, bool backward) {
      const int64_t last = backward ? 0 : T - 1;
      const float* sv = saved + d * T * N * 5 * H;
      if (yh) std::memcpy(yh + d * NH, y + (last * D + d) * NH, sizeof(float) * NH);
      if (yc)
        for (int64_t n = 0; n < N; ++n)
          std::memcpy(yc + d * NH + n * H, sv + (last * N + n) * 5 * H + 4 * H, sizeof(float) * H);
    };
    onednn::setThreads(nt);
    for (int64_t d = 0; d < D; ++d) {
      const bool backward = s.reverse || d == 1;
      const float* rd = r + d * G * H;
      float* sv = saved + d * T * N * 5 * H;
      onednn::setThreads(nt);
      inputProjection(s, x, w + d * G * I, b, d, sv);
      // Each thread takes its hidden units: with the packed step products (st->slices), it packs
      // its units' rows of R and per step multiplies h by them; without, one sgemm per gate block
      // on R^T (oneDNN's sgemm packs a transposed B at every call, which made the T step products
      // 2-3x slower: 64 steps of lstm2 b32, 80-90 ms against 30-40), on one thread each (oneDNN
      // runs sequentially inside a parallel region). Then the units' cell; a spinning barrier
      // ends the step, since the next one reads every unit of h.
      const std::vector<RecurrentSlice>* slices = st->slices.empty() ? nullptr : &st->slices[d];
      if (!slices) {
        rt.resize(static_cast<size_t>(G * H));
        transpose(rd, G, H, rt.data());
      }
      onTeam(slices ? static_cast<int>(slices->size()) : st->stepThreads, [&](int tid, int team, SpinBarrier* barrier) {
        std::vector<const RecurrentSlice*> mine;  // all of them when OpenMP gave fewer threads
        std::vector<std::vector<float>> acc;
        if (slices)
          for (size_t j = tid; j < slices->size(); j += team) {
            mine.push_back(&(*slices)[j]);
            mine.back()->packFrom(rd);
            acc.emplace_back(static_cast<size_t>(N * 4 * mine.back()->nu));
          }
        // (Not a structured binding: GRAFT_VEC_RUN's lambda captures them, which clang 14 refuses.)
        const std::pair<int64_t, int64_t> units = hiddenUnitRange(H, tid, team);
        const int64_t u0 = units.first, u1 = units.second;
        const float* hp = h0 ? h0 + d * NH : zeros.data();
        const float* cp = c0 ? c0 + d * NH : zeros.data();
        int64_t cps = H;  // the previous cell states' row stride: H in c0, 5H in Saved
        for (int64_t step = 0; step < T; ++step) {
          int64_t t = backward ? T - 1 - step : step;
          float* g = sv + t * N * 5 * H;
          float* h = y + (t * D + d) * NH;
          for (size_t i = 0; i < mine.size(); ++i) {
            const RecurrentSlice& m = *mine[i];
            float* a = acc[i].data();
            m.run(hp, a);
            GRAFT_VEC_RUN(addGatesAndCell(g, a, m.nu, cp, cps, h, N, H, m.u0));
          }
          if (!slices && u1 > u0) {
            for (int64_t q = 0; q < 4; ++q)
              sgemm('N', 'N', N, u1 - u0, H, hp, H, rt.data() + q * H + u0, G, 1.0f, g + q * H + u0, 5 * H);
            GRAFT_VEC_RUN(cellStep(g, cp, cps, h, N, H, u0, u1));
          }
          if (barrier) barrier->wait();
          hp = h;
          cp = g + 4 * H;
          cps = 5 * H;
        }
      });
      writeLast(d, backward);
    }
  };
}

ops::KernelFn makeLstmGrad(ops::CompileContext& ctx) {
  auto st = startKernel(ctx, gradShape(ctx.node()), true);
  if (!st->s.saved) {
    onednn::setThreads(st->threads);
    st->recompute = makeRecompute(st->s.T * st->s.N, st->s.I, st->s.H);
  }
  return [st](ops::KernelContext& k) {
    const LstmShape& s = st->s;
    const int64_t T = s.T, N = s.N, I = s.I, H = s.H, D = s.D, G = 4 * H, TN = T * N, NH = N * H;
    const int nt = st->threads;
    const int rowThreads = static_cast<int>(std::min<int64_t>(nt, N));  // the cell splits batch rows
    const float* x = k.input(kFwd).data<float>();
    const float* w = k.input(kFwd + 1).data<float>();
    const float* r = k.input(kFwd + 2).data<float>();
    const float* b = s.bias ? k.input(kFwd + 3).data<float>() : nullptr;
    const float* h0 = s.h0 ? k.input(kFwd + 5).data<float>() : nullptr;
    const float* c0 = s.c0 ? k.input(kFwd + 6).data<float>() : nullptr;
    const float* y = k.input(kY).data<float>();
    const float* saved = s.saved ? k.input(kSaved).data<float>() : nullptr;
    const float* dy = s.dy ? k.input(0).data<float>() : nullptr;
    const float* dyh = s.dyh ? k.input(1).data<float>() : nullptr;
    const float* dyc = s.dyc ? k.input(2).data<float>() : nullptr;
    auto out = [&](size_t i, Shape shape) -> float* {
      return k.wantsOutput(i) ? k.allocOutputUninit(i, DataType::Float, std::move(shape)).data<float>() : nullptr;
    };
    float* dX = out(0, {T, N, I});
    float* dW = out(1, {D, G, I});
    float* dR = out(2, {D, G, H});
    float* dB = out(3, {D, 8 * H});
    float* dh0 = out(4, {D, N, H});
    float* dc0 = out(5, {D, N, H});
    float* dP = out(6, {D, 3 * H});
    if (dP) std::fill(dP, dP + D * 3 * H, 0.0f);

    // Without Saved, one direction's gates and cell states are recomputed into `recomputed`.
    std::vector<float> recomputed(saved ? 0 : static_cast<size_t>(TN * 5 * H)), pre;
    std::vector<float> dgates(static_cast<size_t>(TN * G)), hPrev(static_cast<size_t>(TN * H));
    std::vector<float> dh(static_cast<size_t>(NH)), dc(dh.size()), zeros(dh.size(), 0.0f);
    for (int64_t d = 0; d < D; ++d) {
      const bool backward = s.reverse || d == 1;
      const float* wd = w + d * G * I;
      const float* rd = r + d * G * H;
      // The state each step starts from, in time order.
      for (int64_t t = 0; t < T; ++t) {
        bool first = backward ? t == T - 1 : t == 0;
        float* dst = hPrev.data() + t * NH;
        if (first) {
          if (h0)
            std::memcpy(dst, h0 + d * NH, sizeof(float) * NH);
          else
            std::fill(dst, dst + NH, 0.0f);
        } else {
          int64_t tp = backward ? t + 1 : t - 1;
          std::memcpy(dst, y + (tp * D + d) * NH, sizeof(float) * NH);
        }
      }
      const float* c0d = c0 ? c0 + d * NH : zeros.data();
      onednn::setThreads(nt);
      const float* sv = saved ? saved + d * TN * 5 * H : recomputed.data();
      if (!saved) {
        // pre = Wb + Rb + X W^T + Hprev R^T, then the cell.
        float* rv = recomputed.data();
        if (st->recompute) {
          Recompute& rc = *st->recompute;
          gateBias(b, H, d, static_cast<float*>(rc.bias.get_data_handle()));
          auto& eng = onednn::engine();
          auto mem = [&](const memory::desc& md, const float* p) { return memory(md, eng, const_cast<float*>(p)); };
          pre.resize(static_cast<size_t>(TN * G));
          memory dense = mem(rc.yDesc, pre.data());
          onednn::execute(rc.xw, {{DNNL_ARG_SRC, mem(rc.xDesc, x)},
                                  {DNNL_ARG_WEIGHTS, mem(rc.wDesc, wd)},
                                  {DNNL_ARG_BIAS, rc.bias},
                                  {DNNL_ARG_DST, dense}});
          onednn::execute(rc.hr, {{DNNL_ARG_SRC, mem(rc.hDesc, hPrev.data())},
                                  {DNNL_ARG_WEIGHTS, mem(rc.rDesc, rd)},
                                  {DNNL_ARG_DST, dense}});
          for (int64_t i = 0; i < TN; ++i) std::memcpy(rv + i * 5 * H, pre.data() + i * G, sizeof(float) * G);
        } else {
          inputProjection(s, x, wd, b, d, rv);
          sgemm('N', 'T', TN, G, H, hPrev.data(), H, rd, H, 1.0f, rv, 5 * H);
        }
        if (rowThreads > 1) {
#pragma omp parallel num_threads(rowThreads)
          {
            int tid = omp_get_thread_num(), team = omp_get_num_threads();
            GRAFT_VEC_RUN(cellSequence(rv, c0d, T, N, H, backward, N * tid / team, N * (tid + 1) / team));
          }
        } else {
          GRAFT_VEC_RUN(cellSequence(rv, c0d, T, N, H, backward, 0, N));
        }
      }
      // Backwards through the steps. A small step's product runs on one thread: at batch 1 each
      // call otherwise woke a second, sleeping thread for a 2 MFLOP product (lstm2 b1 training
      // step 54-75 ms on 2 threads, 49-50 on one). Larger ones on every thread, in one region:
      // each thread takes the cell of its hidden units, then (after a barrier: the product reads
      // every unit's dG_t) its units' columns of dh_prev = dG_t R.
      if (dyh)
        std::memcpy(dh.data(), dyh + d * NH, sizeof(float) * NH);
      else
        std::fill(dh.begin(), dh.end(), 0.0f);
      if (dyc)
        std::memcpy(dc.data(), dyc + d * NH, sizeof(float) * NH);
      else
        std::fill(dc.begin(), dc.end(), 0.0f);
      onTeam(st->stepThreads, [&](int tid, int team, SpinBarrier* barrier) {
        // (Not a structured binding: GRAFT_VEC_RUN's lambda captures them, which clang 14 refuses.)
        const std::pair<int64_t, int64_t> units = hiddenUnitRange(H, tid, team);
        const int64_t u0 = units.first, u1 = units.second;
        for (int64_t step = T - 1; step >= 0; --step) {
          int64_t t = backward ? T - 1 - step : step;
          if (dy) {
            const float* dyt = dy + (t * D + d) * NH;
            for (int64_t n = 0; n < N; ++n)
              for (int64_t j = u0; j < u1; ++j) dh[n * H + j] += dyt[n * H + j];
          }
          const float* cp = step == 0 ? c0d : sv + (backward ? t + 1 : t - 1) * N * 5 * H + 4 * H;
          float* dgt = dgates.data() + t * N * G;
          GRAFT_VEC_RUN(
              cellBackward(sv + t * N * 5 * H, dh.data(), dc.data(), cp, step == 0 ? H : 5 * H, dgt, N, H, u0, u1));
          if (barrier) barrier->wait();
          if (u1 > u0) {
            if (N <= kMaxStepProductBatch)
              stepProduct(dgt, N, G, rd, H, dh.data(), u0, u1);
            else
              sgemm('N', 'N', N, u1 - u0, G, dgt, G, rd + u0, H, 0.0f, dh.data() + u0, H);
          }
        }
      });
      if (dh0) std::memcpy(dh0 + d * NH, dh.data(), sizeof(float) * NH);
      if (dc0) std::memcpy(dc0 + d * NH, dc.data(), sizeof(float) * NH);
      // The products over every step at once.
      onednn::setThreads(nt);
      const float* dg = dgates.data();
      if (dX) sgemm('N', 'N', TN, I, G, dg, G, wd, I, d == 0 ? 0.0f : 1.0f, dX, I);
      if (dW) sgemm('T', 'N', G, I, TN, dg, G, x, I, 0.0f, dW + d * G * I, I);
      if (dR) sgemm('T', 'N', G, H, TN, dg, G, hPrev.data(), H, 0.0f, dR + d * G * H, H);
      if (dB) {
        float* dbd = dB + d * 8 * H;
        if (nt > 1) {
#pragma omp parallel num_threads(nt)
          {
            int tid = omp_get_thread_num(), team = omp_get_num_threads();
            GRAFT_VEC_RUN(columnSums(dg, TN, G, dbd, G * tid / team, G * (tid + 1) / team));
          }
        } else {
          GRAFT_VEC_RUN(columnSums(dg, TN, G, dbd, 0, G));
        }
        std::memcpy(dbd + G, dbd, sizeof(float) * G);  // dRb = dWb
      }
    }
  };
}

// lstm-save-gates (cpu training pipeline): an LSTM whose every LSTMGrad reads its Y, at a batch of
// kSaveMinBatch or more, becomes LSTMTrain, and its Saved output an input of those LSTMGrads,
// where both kernels above take the nodes. The node keeps its name, place in the schedule,
// placement and control dependencies. An LSTM marked for recomputation is left alone.
class LstmSaveGates : public passes::Pass {
 public:
  std::string_view name() const override { return "lstm-save-gates"; }
  bool run(ir::Graph& g, passes::PassContext&) override {
    bool changed = false;
    std::vector<ir::Node*> lstms;
    for (ir::Node* n : g.nodes())
      if (n->domain().empty() && n->type() == "LSTM") lstms.push_back(n);
    for (ir::Node* n : lstms)
      if (std::vector<ir::Node*> grads = gradientsToFeed(*n); !grads.empty()) {
        replace(g, n, grads);
        changed = true;
      }
    return changed;
  }

 private:
  // The LSTMGrads that would read n's Saved; empty where the rewrite does not apply.
  static std::vector<ir::Node*> gradientsToFeed(const ir::Node& n) {
    ir::Tensor* y = n.output(0);
    auto shape = forwardShape(n, 0);
    if (n.recompute || !y || n.numInputs() > 8 || n.numOutputs() > 3 || !shape || shape->N < kSaveMinBatch) return {};
    std::vector<ir::Node*> grads;
    for (const ir::Use& u : y->uses()) {
      const ir::Node* m = u.node;
      // Other readers of Y (the next layer) are unaffected.
      if (u.implicit || u.index != static_cast<int>(kY) || m->domain() != ops::kGraftDomain || m->type() != "LSTMGrad")
        continue;
      std::optional<LstmShape> gs = m->numInputs() == kY + 1 ? gradShape(*m) : std::nullopt;
      // The same inputs and directions (the VJP copies the attributes).
      bool fits = gs && gs->D == shape->D && gs->reverse == shape->reverse;
      for (size_t i = 0; fits && i < 8; ++i) fits = m->input(kFwd + i) == n.input(i);
      if (!fits) return {};
      grads.push_back(u.node);
    }
    return grads;
  }

  static void replace(ir::Graph& g, ir::Node* n, const std::vector<ir::Node*>& grads) {
    std::vector<ir::Tensor*> outputs = n->outputs();
    std::string savedId = g.uniqueId(outputs[0]->id() + "_saved");
    ir::Node* m = passes::fuse::replaceNodeInPlace(g, n, "LSTMTrain", ops::kGraftDomain, n->inputs(),
                                                   {"", "", "", savedId}, n->attrs());
    for (size_t i = 0; i < outputs.size(); ++i)
      if (outputs[i]) g.setOutput(m, i, outputs[i]);
    ops::inferNode(*m, false);
    for (ir::Node* grad : grads) grad->setInput(kSaved, m->output(3));
  }
};

}  // namespace

GRAFT_REGISTER_PASS("lstm-save-gates", LstmSaveGates);

GRAFT_REGISTER_CPU_KERNELS(vec_lstm_grad) {
  // Ahead of oneDNN's backward primitive (priority 0) wherever the forward's Y is an input.
  r.add({ops::kGraftDomain, "LSTMGrad", "vec_lstm_grad", supportsLstmGrad, makeLstmGrad, 1});
  // LSTMTrain has no other fast kernel: lstm-save-gates creates it only where this one applies.
  r.add({ops::kGraftDomain, "LSTMTrain", "vec_lstm_train", supportsLstmTrain, makeLstmTrain, 1});
}

}  // namespace graft::backends::cpu
