// Gradients of RNN, GRU and LSTM: backpropagation through time as the ai.graft ops RNNGrad,
// GRUGrad and LSTMGrad, and the VJPs that add them.
//
// A dedicated op rather than forward ops: the recurrence would unroll into a graph as long as the
// sequence (and a Loop's gradient is not available), while one op walks the steps backwards, and
// fast libraries have a primitive for it (oneDNN's RNN backward). The reference recomputes each
// (direction, batch element) sequence forward, keeping its states, then runs the steps backwards
// recomputing each step's gates from its saved state (rnn_cell.hpp shares the cells with the
// forward kernel, so both compute the same function).
//
//   RNNGrad(dY, dY_h, X, W, R, B, sequence_lens, initial_h)                -> dX, dW, dR, dB, dinitial_h
//   GRUGrad(dY, dY_h, X, W, R, B, sequence_lens, initial_h)                -> dX, dW, dR, dB, dinitial_h
//   LSTMGrad(dY, dY_h, dY_c, X, W, R, B, sequence_lens, initial_h, initial_c, P, Y)
//                                                   -> dX, dW, dR, dB, dinitial_h, dinitial_c, dP
//
// with the forward op's attributes. Absent gradients of outputs (dY...) are zeros; absent
// optional forward inputs are zeros, and their gradients are still produced (shaped as the input
// would be). LSTMGrad's last input, optional, is the forward's own output Y: the reference and
// oneDNN recompute the states and ignore it; the cpu backend's vec_lstm_grad reads every step's
// previous state from it, so that the recomputation is one matrix product (vec_lstm_grad.cpp).
#include <algorithm>

#include "ops/cost.hpp"
#include "ops/dtype_dispatch.hpp"
#include "ops/grad.hpp"
#include "ops/registry.hpp"
#include "ops/rnn_cell.hpp"
#include "ops/shape_util.hpp"

namespace graft::ops::rnn {

void cellBackward(const RnnParams& p, const DirWeights& w, int64_t H, int64_t I, const double* xt,
                  const std::vector<double>& h, const std::vector<double>& c, const std::vector<double>& cNew,
                  const StepCache& s, std::vector<double>& dh, std::vector<double>& dc, const DirGrads& g,
                  double* dxt) {
  const int64_t G = p.gates;
  // Gradients of W x + Wb and of R h + Rb, per gate row.
  std::vector<double> dwx(G * H, 0.0), drh(G * H, 0.0);
  // The gradient of a gate's input from that of its activation: clipping passes the gradient
  // only where it did not clip.
  auto gateGrad = [&](int64_t block, int64_t j, const Activation& f, double dOut) {
    double v = s.pre[block * H + j];
    if (p.clip && (v > *p.clip || v < -*p.clip)) return 0.0;
    return dOut * f.derivative(v);
  };
  std::vector<double> dhPrev(H, 0.0), dcPrev(H, 0.0);
  if (p.cell == Cell::Rnn) {
    for (int64_t j = 0; j < H; ++j) dwx[j] = drh[j] = gateGrad(0, j, w.acts[0], dh[j]);
  } else if (p.cell == Cell::Gru) {
    const Activation &f = w.acts[0], &gAct = w.acts[1];
    std::vector<double> dr(H, 0.0);
    for (int64_t j = 0; j < H; ++j) {
      double z = s.gate[j], hh = s.gate[2 * H + j];
      double dz = dh[j] * (h[j] - hh);
      dhPrev[j] += dh[j] * z;
      double dah = gateGrad(2, j, gAct, dh[j] * (1 - z));
      dwx[2 * H + j] = dah;
      if (p.linearBeforeReset) {
        dr[j] = dah * s.rh[2 * H + j];
        drh[2 * H + j] = dah * s.gate[H + j];
      } else {
        drh[2 * H + j] = dah;
      }
      dwx[j] = drh[j] = gateGrad(0, j, f, dz);
    }
    if (!p.linearBeforeReset) {
      // R_h multiplies r (.) h: its gradient splits between r and h.
      for (int64_t k = 0; k < H; ++k) {
        double d = 0;
        for (int64_t j = 0; j < H; ++j) d += w.R[(2 * H + j) * H + k] * drh[2 * H + j];
        dr[k] = d * h[k];
        dhPrev[k] += d * s.gate[H + k];
      }
    }
    for (int64_t j = 0; j < H; ++j) dwx[H + j] = drh[H + j] = gateGrad(1, j, f, dr[j]);
  } else {
    const Activation &f = w.acts[0], &gAct = w.acts[1], &hAct = w.acts[2];
    for (int64_t j = 0; j < H; ++j) {
      double i = s.gate[j], o = s.gate[H + j], cc = s.gate[3 * H + j];
      double fg = p.inputForget ? 1 - i : s.gate[2 * H + j];
      double dcN = dc[j] + dh[j] * o * hAct.derivative(cNew[j]);
      double dao = gateGrad(1, j, f, dh[j] * hAct(cNew[j]));
      if (w.P) {
        dcN += dao * w.P[H + j];
        g.dP[H + j] += dao * cNew[j];
      }
      double dfg = dcN * c[j], di = dcN * cc;
      dcPrev[j] = dcN * fg;
      double daf = 0;
      if (p.inputForget)
        di -= dfg;
      else
        daf = gateGrad(2, j, f, dfg);
      double dai = gateGrad(0, j, f, di);
      double dac = gateGrad(3, j, gAct, dcN * i);
      if (w.P) {
        g.dP[j] += dai * c[j];
        g.dP[2 * H + j] += daf * c[j];
        dcPrev[j] += dai * w.P[j] + daf * w.P[2 * H + j];
      }
      dwx[j] = drh[j] = dai;
      dwx[H + j] = drh[H + j] = dao;
      dwx[2 * H + j] = drh[2 * H + j] = daf;
      dwx[3 * H + j] = drh[3 * H + j] = dac;
    }
  }
  for (int64_t r = 0; r < G * H; ++r) {
    // GRU's h block (linear_before_reset 0) reads r (.) h, whose gradient was taken above.
    bool resetInput = p.cell == Cell::Gru && !p.linearBeforeReset && r >= 2 * H;
    const std::vector<double>& hIn = resetInput ? s.rHid : h;
    for (int64_t i = 0; i < I; ++i) {
      g.dW[r * I + i] += dwx[r] * xt[i];
      dxt[i] += w.W[r * I + i] * dwx[r];
    }
    for (int64_t k = 0; k < H; ++k) {
      g.dR[r * H + k] += drh[r] * hIn[k];
      if (!resetInput) dhPrev[k] += w.R[r * H + k] * drh[r];
    }
    if (g.dWb) g.dWb[r] += dwx[r];
    if (g.dRb) g.dRb[r] += drh[r];
  }
  dh.swap(dhPrev);
  dc.swap(dcPrev);
}

namespace {

size_t numDys(Cell cell) { return cell == Cell::Lstm ? 3 : 2; }
size_t numGrads(Cell cell) { return cell == Cell::Lstm ? 7 : 5; }

KernelFactory recurrentGradKernel(Cell cell) {
  return [cell](CompileContext& cc) -> KernelFn {
    const ir::Node& node = cc.node();
    std::string what = node.describe();
    RnnParams p = parseParams(node, cell);
    return [p, what, cell](KernelContext& k) {
      const size_t nd = numDys(cell);
      RnnInputs in = RnnInputs::read(p, k, nd, what);
      const int64_t D = in.D, N = in.N, H = in.H, I = in.I, G = in.G;
      auto dyOf = [&](size_t i, const Shape& shape, const char* name) -> std::vector<double> {
        if (!k.hasInput(i)) return {};
        const NDArray& a = k.input(i);
        GRAFT_CHECK(a.shape() == shape, "{}: {} must have shape {}, got {}", what, name, shapeToString(shape),
                    shapeToString(a.shape()));
        return readAsDoubles(a, what);
      };
      std::vector<double> dY = dyOf(0, in.yShape(), "dY");
      std::vector<double> dYh = dyOf(1, in.stateShape(), "dY_h");
      std::vector<double> dYc = cell == Cell::Lstm ? dyOf(2, in.stateShape(), "dY_c") : std::vector<double>{};

      std::vector<double> dX(in.x.size(), 0.0), dW(in.W.size(), 0.0), dR(in.R.size(), 0.0);
      std::vector<double> dB(static_cast<size_t>(D * 2 * G * H), 0.0), dP(static_cast<size_t>(D * 3 * H), 0.0);
      std::vector<double> dh0(static_cast<size_t>(D * N * H), 0.0), dc0(dh0.size(), 0.0);
      StepCache cache;
      std::vector<double> hNew, cNew, dh(H), dc(H);
      for (int64_t d = 0; d < D; ++d) {
        DirWeights w = DirWeights::of(p, in, d);
        DirGrads g{dW.data() + d * G * H * I, dR.data() + d * G * H * H, dB.data() + d * 2 * G * H,
                   dB.data() + d * 2 * G * H + G * H, dP.data() + d * 3 * H};
        bool reverse = d == 1 || !p.forward;
        for (int64_t b = 0; b < N; ++b) {
          const int64_t len = in.lens[b];
          // An empty sequence's outputs are zeros, whatever the initial state.
          if (len == 0) continue;
          auto stepTime = [&](int64_t s) { return reverse ? len - 1 - s : s; };
          // hs[s], cs[s]: the state before step s (processing order).
          std::vector<std::vector<double>> hs(len + 1, std::vector<double>(H, 0.0)), cs(len + 1, hs[0]);
          if (!in.h0.empty()) std::copy_n(in.h0.begin() + in.stateAt(d, b), H, hs[0].begin());
          if (!in.c0.empty()) std::copy_n(in.c0.begin() + in.stateAt(d, b), H, cs[0].begin());
          for (int64_t s = 0; s < len; ++s) {
            cellForward(p, w, H, I, in.x.data() + in.xAt(stepTime(s), b), hs[s], cs[s], hs[s + 1], cNew, cache);
            if (cell == Cell::Lstm) cs[s + 1] = cNew;
          }
          const int64_t st = in.stateAt(d, b);
          for (int64_t j = 0; j < H; ++j) {
            dh[j] = dYh.empty() ? 0.0 : dYh[st + j];
            dc[j] = dYc.empty() ? 0.0 : dYc[st + j];
          }
          for (int64_t s = len - 1; s >= 0; --s) {
            int64_t t = stepTime(s);
            if (!dY.empty())
              for (int64_t j = 0; j < H; ++j) dh[j] += dY[in.yAt(t, d, b) + j];
            const double* xt = in.x.data() + in.xAt(t, b);
            cellForward(p, w, H, I, xt, hs[s], cs[s], hNew, cNew, cache);
            cellBackward(p, w, H, I, xt, hs[s], cs[s], cs[s + 1], cache, dh, dc, g, dX.data() + in.xAt(t, b));
          }
          std::copy(dh.begin(), dh.end(), dh0.begin() + st);
          std::copy(dc.begin(), dc.end(), dc0.begin() + st);
        }
      }
      Shape xShape = in.batchFirst ? Shape{N, in.S, I} : Shape{in.S, N, I};
      k.setOutput(0, arrayFromDoubles(dX, in.dtype, xShape, what));
      k.setOutput(1, arrayFromDoubles(dW, in.dtype, {D, G * H, I}, what));
      k.setOutput(2, arrayFromDoubles(dR, in.dtype, {D, G * H, H}, what));
      k.setOutput(3, arrayFromDoubles(dB, in.dtype, {D, 2 * G * H}, what));
      k.setOutput(4, arrayFromDoubles(dh0, in.dtype, in.stateShape(), what));
      if (cell == Cell::Lstm) {
        k.setOutput(5, arrayFromDoubles(dc0, in.dtype, in.stateShape(), what));
        k.setOutput(6, arrayFromDoubles(dP, in.dtype, {D, 3 * H}, what));
      }
    };
  };
}

// Output types: each gradient has its input's type; that of an absent optional input is built
// from the dimensions of X, W and R (symbolic ones stay unknown).
InferFn recurrentGradInfer(Cell cell) {
  return [cell](const ir::Node& n, const std::vector<ir::ValueType>& in, const std::vector<const NDArray*>&) {
    const size_t nd = numDys(cell);
    auto at = [&](size_t i) { return nd + i < in.size() ? in[nd + i] : ir::ValueType{}; };
    const TensorInfo X = at(0).info, W = at(1).info, R = at(2).info;
    DataType dt = X.dataType();
    int64_t G = cell == Cell::Rnn ? 1 : cell == Cell::Gru ? 3 : 4;
    auto dim = [](const TensorInfo& t, int64_t i) { return t.hasShape() && i < t.rank() ? t.dims()[i] : Dim{}; };
    auto times = [](int64_t k, const Dim& d) { return d.known() ? Dim(k * d.value) : Dim{}; };
    Dim D = dim(W, 0), H = dim(R, 2);
    bool batchFirst = n.attrInt("layout", 0) == 1;
    Dim N = dim(X, batchFirst ? 0 : 1);
    auto like = [&](size_t i, std::vector<Dim> dims) {
      ir::ValueType v = at(i);
      if (v.known()) return v;
      return ir::ValueType::tensor(TensorInfo(dt, std::move(dims)));
    };
    ir::ValueType state = like(5, batchFirst ? std::vector<Dim>{N, D, H} : std::vector<Dim>{D, N, H});
    std::vector<ir::ValueType> out{at(0), at(1), at(2), like(3, {D, times(2 * G, H)}), state};
    if (cell == Cell::Lstm) {
      out.push_back(state);
      out.push_back(like(7, {D, times(3, H)}));
    }
    return out;
  };
}

// The VJP of a recurrent node: one gradient op; sequence_lens has no gradient.
VjpFn recurrentVjp(Cell cell, const std::string& gradType) {
  return [cell, gradType](GradBuilder& g) {
    const size_t nd = numDys(cell);
    std::vector<ir::Tensor*> ins;
    for (size_t i = 0; i < nd; ++i) ins.push_back(g.hasDy(i) ? g.dy(i) : nullptr);
    for (size_t i = 0; i < g.node().numInputs(); ++i) ins.push_back(g.in(i));
    if (cell == Cell::Lstm && g.node().hasOutput(0)) {
      ins.resize(nd + 8, nullptr);  // the forward's inputs, padded to P
      ins.push_back(g.out(0));
    }
    // Only the gradients that are wanted (the first layer's dX usually is not).
    const size_t inputOf[] = {0, 1, 2, 3, 5, 6, 7};
    std::vector<bool> wanted(numGrads(cell));
    for (size_t k = 0; k < wanted.size(); ++k) {
      size_t i = inputOf[k];
      wanted[k] = i < g.node().numInputs() && g.in(i) && g.wants(i);
    }
    auto outs = g.opN(gradType, ins, numGrads(cell), g.node().attrs(), kGraftDomain, wanted);
    for (size_t k = 0; k < outs.size(); ++k)
      if (wanted[k]) g.setDx(inputOf[k], outs[k]);
  };
}

}  // namespace

}  // namespace graft::ops::rnn

namespace graft::ops {

GRAFT_REGISTER_OPS(rnn_grad) {
  using rnn::Cell;
  r.add("RNN").setVjp(rnn::recurrentVjp(Cell::Rnn, "RNNGrad"));
  r.add("GRU").setVjp(rnn::recurrentVjp(Cell::Gru, "GRUGrad"));
  r.add("LSTM").setVjp(rnn::recurrentVjp(Cell::Lstm, "LSTMGrad"));
  // The backward recurrence: the products of dX and of dW and dR, each as costly as the forward's.
  // Inputs: dY, dY_h (LSTM: dY_c), then the forward's X, W, R, ...
  auto flops = [](int x) {
    return [x](const ir::Node& n) { return 2.0 * cost::recurrence(n, n.input(x), n.input(x + 1), n.input(x + 2)); };
  };
  r.add("RNNGrad", kGraftDomain)
      .setReference(rnn::recurrentGradKernel(Cell::Rnn))
      .setInfer(rnn::recurrentGradInfer(Cell::Rnn))
      .setCost(flops(2));
  r.add("GRUGrad", kGraftDomain)
      .setReference(rnn::recurrentGradKernel(Cell::Gru))
      .setInfer(rnn::recurrentGradInfer(Cell::Gru))
      .setCost(flops(2));
  r.add("LSTMGrad", kGraftDomain)
      .setReference(rnn::recurrentGradKernel(Cell::Lstm))
      .setInfer(rnn::recurrentGradInfer(Cell::Lstm))
      .setCost(flops(3));
}

}  // namespace graft::ops
