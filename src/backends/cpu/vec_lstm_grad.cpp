// ai.graft LSTMGrad (rnn_grad.cpp) from the forward's own output Y: graft's kernel, ahead of
// oneDNN's backward primitive.
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
// Takes ONNX's default activations (sigmoid, tanh, tanh), layout 0, no clip, no input_forget,
// no peepholes and no sequence_lens, float with static shapes; the rest goes to oneDNN's
// primitive or the reference. dP, the peepholes' gradient, is zeros, as the reference gives for
// an absent P.
#include <omp.h>

#include <algorithm>
#include <cstring>
#include <memory>
#include <optional>
#include <vector>

#include <dnnl.h>

#include "backends/cpu/cpu_kernels.hpp"
#include "backends/cpu/onednn_common.hpp"
#include "backends/cpu/vec_common.hpp"
#include "backends/cpu/vec_math.hpp"
#include "ops/registry.hpp"
#include "ops/rnn_cell.hpp"
#include "support/check.hpp"

namespace graft::backends::cpu {
namespace {

// LSTMGrad's inputs: dY, dY_h, dY_c, then the forward's X, W, R, B, sequence_lens, initial_h,
// initial_c, P, then the forward's Y.
constexpr size_t kFwd = 3;
constexpr size_t kY = kFwd + 8;
// The FLOPs of one backward step's product (dh_prev = dG_t R) from which it runs on every thread:
// measured at the two ends only (batch 1: one thread better; batch 32: both), the cut between
// them is batch 8 at H = 512.
constexpr double kParallelStepFlops = 16e6;

struct GradShape {
  int64_t T = 0, N = 0, I = 0, H = 0, D = 1;
  bool reverse = false;  // direction "reverse" (D = 1)
  bool bias = false, h0 = false, c0 = false;
  bool dy = false, dyh = false, dyc = false;
};

std::optional<GradShape> gradShape(const ir::Node& n) {
  using onednn::isStaticFloat;
  if (n.domain() != ops::kGraftDomain || n.type() != "LSTMGrad") return std::nullopt;
  // The attributes as the reference kernel reads them (ops/rnn_cell.hpp).
  std::optional<ops::rnn::RnnParams> params = ops::rnn::plainLstmParams(n);
  if (!params) return std::nullopt;
  const ops::rnn::RnnParams& p = *params;
  GradShape s;
  s.D = p.numDirections;
  s.reverse = !p.forward;
  auto in = [&](size_t i) { return n.hasInput(i) ? n.input(i) : nullptr; };
  if (n.numInputs() != kY + 1 || !isStaticFloat(in(kY))) return std::nullopt;  // no Y: oneDNN's
  if (!isStaticFloat(in(kFwd)) || !isStaticFloat(in(kFwd + 1)) || !isStaticFloat(in(kFwd + 2))) return std::nullopt;
  Shape x = in(kFwd)->info().shape(), w = in(kFwd + 1)->info().shape(), r = in(kFwd + 2)->info().shape();
  if (x.size() != 3 || w.size() != 3 || r.size() != 3) return std::nullopt;
  s.T = x[0];
  s.N = x[1];
  s.I = x[2];
  s.H = r[2];
  if (s.T <= 0 || s.N <= 0 || s.I <= 0 || s.H <= 0) return std::nullopt;
  if (p.hiddenSize >= 0 && p.hiddenSize != s.H) return std::nullopt;
  if (w != Shape{s.D, 4 * s.H, s.I} || r != Shape{s.D, 4 * s.H, s.H}) return std::nullopt;
  Shape hs{s.D, s.N, s.H}, y{s.T, s.D, s.N, s.H};
  auto optional = [&](size_t i, const Shape& shape, bool& present) {
    present = in(i) != nullptr;
    return !present || (isStaticFloat(in(i)) && in(i)->info().shape() == shape);
  };
  if (!optional(kFwd + 3, {s.D, 8 * s.H}, s.bias)) return std::nullopt;
  if (in(kFwd + 4) != nullptr || in(kFwd + 7) != nullptr) return std::nullopt;  // sequence_lens, P
  if (!optional(kFwd + 5, hs, s.h0) || !optional(kFwd + 6, hs, s.c0)) return std::nullopt;
  if (!optional(0, y, s.dy) || !optional(1, hs, s.dyh) || !optional(2, hs, s.dyc)) return std::nullopt;
  if (in(kY)->info().shape() != y) return std::nullopt;
  if (n.numOutputs() > 7) return std::nullopt;
  const std::vector<Shape> outs{x, w, r, {s.D, 8 * s.H}, hs, hs, {s.D, 3 * s.H}};
  for (size_t i = 0; i < n.numOutputs(); ++i)
    if (n.hasOutput(i) && !(isStaticFloat(n.output(i)) && n.output(i)->info().shape() == outs[i])) return std::nullopt;
  return s;
}

bool supportsLstmGrad(const ir::Node& n) { return gradShape(n).has_value(); }

void sgemm(char ta, char tb, int64_t m, int64_t n, int64_t k, const float* a, int64_t lda, const float* b, int64_t ldb,
           float beta, float* c, int64_t ldc) {
  if (dnnl_sgemm(ta, tb, m, n, k, 1.0f, a, lda, b, ldb, beta, c, ldc) != dnnl_success)
    throw InternalError("LSTMGrad: oneDNN's sgemm failed");
}

// One batch row of one step: the gate pre-activations g [4H] (iofc) become the activated gates;
// cn and tcn receive the cell state and its tanh; cp: the previous cell state.
[[gnu::always_inline]] inline void cellRow(float* __restrict g, const float* __restrict cp, float* __restrict cn,
                                           float* __restrict tcn, int64_t H) {
  float* __restrict gi = g;
  float* __restrict go = g + H;
  float* __restrict gf = g + 2 * H;
  float* __restrict gz = g + 3 * H;
  for (int64_t j = 0; j < H; ++j) {
    float i = vecmath::sigmoid(gi[j]), o = vecmath::sigmoid(go[j]);
    float f = vecmath::sigmoid(gf[j]), z = vecmath::tanh(gz[j]);
    float cv = f * cp[j] + i * z;
    gi[j] = i;
    go[j] = o;
    gf[j] = f;
    gz[j] = z;
    cn[j] = cv;
    tcn[j] = vecmath::tanh(cv);
  }
}

// The cell for batch rows [n0, n1) over the whole sequence, in processing order. pre [T, N, 4H]
// holds the gate pre-activations and is overwritten with the activated gates; c [T, N, H] and
// tc [T, N, H] receive each step's cell state and its tanh; c0: the initial state [N, H].
GRAFT_VEC_CLONES void cellForward(float* pre, float* c, float* tc, const float* c0, int64_t T, int64_t N, int64_t H,
                                  bool backward, int64_t n0, int64_t n1) {
  const int64_t G = 4 * H;
  for (int64_t step = 0; step < T; ++step) {
    int64_t t = backward ? T - 1 - step : step;
    int64_t tp = backward ? t + 1 : t - 1;  // the step before, in time
    for (int64_t n = n0; n < n1; ++n) {
      const float* cp = step == 0 ? c0 + n * H : c + (tp * N + n) * H;
      cellRow(pre + (t * N + n) * G, cp, c + (t * N + n) * H, tc + (t * N + n) * H, H);
    }
  }
}

// One step backwards, for one batch row: from dh (dY_t already added) and dc, the gradients of
// the gate pre-activations replace the gates in place (g [4H]); dc becomes that of the previous
// cell state cp.
[[gnu::always_inline]] inline void cellRowBackward(float* __restrict g, const float* __restrict dh,
                                                   float* __restrict dc, const float* __restrict cp,
                                                   const float* __restrict tc, int64_t H) {
  float* __restrict gi = g;
  float* __restrict go = g + H;
  float* __restrict gf = g + 2 * H;
  float* __restrict gz = g + 3 * H;
  for (int64_t j = 0; j < H; ++j) {
    float i = gi[j], o = go[j], f = gf[j], z = gz[j], t = tc[j];
    float d = dc[j] + dh[j] * o * (1.0f - t * t);
    gi[j] = d * z * i * (1.0f - i);
    go[j] = dh[j] * t * o * (1.0f - o);
    gf[j] = d * cp[j] * f * (1.0f - f);
    gz[j] = d * i * (1.0f - z * z);
    dc[j] = d * f;
  }
}

// One step backwards for all N rows: g [N, 4H], dh, dc, cp (previous cell state), tc [N, H].
GRAFT_VEC_CLONES void cellBackward(float* g, const float* dh, float* dc, const float* cp, const float* tc, int64_t N,
                                   int64_t H) {
  for (int64_t n = 0; n < N; ++n) cellRowBackward(g + n * 4 * H, dh + n * H, dc + n * H, cp + n * H, tc + n * H, H);
}

// Column sums of a [rows, cols] matrix into out[cols], for columns [c0, c1).
GRAFT_VEC_CLONES void columnSums(const float* a, int64_t rows, int64_t cols, float* out, int64_t c0, int64_t c1) {
  std::fill(out + c0, out + c1, 0.0f);
  for (int64_t r = 0; r < rows; ++r) {
    const float* row = a + r * cols;
    for (int64_t c = c0; c < c1; ++c) out[c] += row[c];
  }
}

struct GradState {
  GradShape s;
  int threads = 1;
};

ops::KernelFn makeLstmGrad(ops::CompileContext& ctx) {
  auto shape = gradShape(ctx.node());
  GRAFT_ASSERT(shape, "{}: makeLstmGrad on an unsupported node", ctx.node().describe());
  auto st = std::make_shared<GradState>();
  st->s = *shape;
  st->threads = std::max(1, ctx.pool().numThreads());
  return [st](ops::KernelContext& k) {
    const GradShape& s = st->s;
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

    std::vector<float> gates(static_cast<size_t>(TN * G)), hPrev(static_cast<size_t>(TN * H));
    std::vector<float> cell(static_cast<size_t>(TN * H)), tanhCell(cell.size());
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
      // pre = Wb + Rb + X W^T + Hprev R^T.
      onednn::setThreads(nt);
      {
        std::vector<float> bias(static_cast<size_t>(G), 0.0f);
        if (b)
          for (int64_t j = 0; j < G; ++j) bias[j] = b[d * 8 * H + j] + b[d * 8 * H + G + j];
        for (int64_t i = 0; i < TN; ++i) std::memcpy(gates.data() + i * G, bias.data(), sizeof(float) * G);
      }
      sgemm('N', 'T', TN, G, I, x, I, wd, I, 1.0f, gates.data(), G);
      sgemm('N', 'T', TN, G, H, hPrev.data(), H, rd, H, 1.0f, gates.data(), G);
      const float* c0d = c0 ? c0 + d * NH : zeros.data();
      if (rowThreads > 1) {
#pragma omp parallel num_threads(rowThreads)
        {
          int tid = omp_get_thread_num(), team = omp_get_num_threads();
          cellForward(gates.data(), cell.data(), tanhCell.data(), c0d, T, N, H, backward, N * tid / team,
                      N * (tid + 1) / team);
        }
      } else {
        cellForward(gates.data(), cell.data(), tanhCell.data(), c0d, T, N, H, backward, 0, N);
      }
      // Backwards through the steps. A small step's product runs on one thread: at batch 1 each
      // call otherwise woke a second, sleeping thread for a 2 MFLOP product (lstm2 b1 training
      // step 54-75 ms on 2 threads, 49-50 on one; at batch 32, 67 MFLOP per step, both threads).
      onednn::setThreads(2 * N * G * H >= kParallelStepFlops ? nt : 1);
      if (dyh)
        std::memcpy(dh.data(), dyh + d * NH, sizeof(float) * NH);
      else
        std::fill(dh.begin(), dh.end(), 0.0f);
      if (dyc)
        std::memcpy(dc.data(), dyc + d * NH, sizeof(float) * NH);
      else
        std::fill(dc.begin(), dc.end(), 0.0f);
      for (int64_t step = T - 1; step >= 0; --step) {
        int64_t t = backward ? T - 1 - step : step;
        if (dy) {
          const float* dyt = dy + (t * D + d) * NH;
          for (int64_t i = 0; i < NH; ++i) dh[i] += dyt[i];
        }
        const float* cp = step == 0 ? c0d : cell.data() + (backward ? t + 1 : t - 1) * NH;
        float* gt = gates.data() + t * N * G;
        cellBackward(gt, dh.data(), dc.data(), cp, tanhCell.data() + t * NH, N, H);
        sgemm('N', 'N', N, H, G, gt, G, rd, H, 0.0f, dh.data(), H);
      }
      if (dh0) std::memcpy(dh0 + d * NH, dh.data(), sizeof(float) * NH);
      if (dc0) std::memcpy(dc0 + d * NH, dc.data(), sizeof(float) * NH);
      // The products over every step at once.
      onednn::setThreads(nt);
      const float* dg = gates.data();
      if (dX) sgemm('N', 'N', TN, I, G, dg, G, wd, I, d == 0 ? 0.0f : 1.0f, dX, I);
      if (dW) sgemm('T', 'N', G, I, TN, dg, G, x, I, 0.0f, dW + d * G * I, I);
      if (dR) sgemm('T', 'N', G, H, TN, dg, G, hPrev.data(), H, 0.0f, dR + d * G * H, H);
      if (dB) {
        float* dbd = dB + d * 8 * H;
        if (nt > 1) {
#pragma omp parallel num_threads(nt)
          {
            int tid = omp_get_thread_num(), team = omp_get_num_threads();
            columnSums(dg, TN, G, dbd, G * tid / team, G * (tid + 1) / team);
          }
        } else {
          columnSums(dg, TN, G, dbd, 0, G);
        }
        std::memcpy(dbd + G, dbd, sizeof(float) * G);  // dRb = dWb
      }
    }
  };
}

}  // namespace

GRAFT_REGISTER_CPU_KERNELS(vec_lstm_grad) {
  // Ahead of oneDNN's backward primitive (priority 0) wherever the forward's Y is an input.
  r.add({ops::kGraftDomain, "LSTMGrad", "vec_lstm_grad", supportsLstmGrad, makeLstmGrad, 1});
}

}  // namespace graft::backends::cpu
