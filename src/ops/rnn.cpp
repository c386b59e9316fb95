// Recurrent layers: RNN, GRU and LSTM (ai.onnx opset 14+ semantics, with `layout`).
//
// One kernel drives all three cells. Each (direction, batch element) pair is an independent
// recurrence, so the reference walks them one at a time: simple to check against the equations
// in the ONNX specification, and padded steps (sequence_lens) need no masking. The cells
// (rnn_cell.hpp) are shared with the gradient ops in rnn_grad.cpp.
//
// ai.graft LSTMTrain is an LSTM that also keeps what its backward pass needs: inputs and
// attributes as LSTM's, outputs Y, Y_h, Y_c and Saved [D, S, N, 5H], for each direction, step (in
// time order) and batch element the activated gates i, o, f, c (W's order) and the new cell state
// (zeros at the padded steps of sequence_lens). The cpu backend's training pipeline puts it in
// place of an LSTM whose LSTMGrad can read Saved instead of recomputing it (lstm-save-gates,
// vec_lstm_grad.cpp); the reference computes it here with the same cells.
#include <algorithm>
#include <cctype>
#include <cmath>
#include <optional>

#include "ops/cost.hpp"
#include "ops/dtype_dispatch.hpp"
#include "ops/registry.hpp"
#include "ops/rnn_cell.hpp"
#include "ops/shape_util.hpp"

namespace graft::ops::rnn {
namespace {

std::string lower(std::string s) {
  for (char& ch : s) ch = static_cast<char>(std::tolower(static_cast<unsigned char>(ch)));
  return s;
}

double sigmoid(double x) { return x >= 0 ? 1 / (1 + std::exp(-x)) : std::exp(x) / (1 + std::exp(x)); }

}  // namespace

double Activation::operator()(double x) const {
  switch (kind) {
    case Kind::Relu: return x > 0 ? x : 0;
    case Kind::Tanh: return std::tanh(x);
    case Kind::Sigmoid: return sigmoid(x);
    case Kind::Affine: return alpha * x + beta;
    case Kind::LeakyRelu: return x >= 0 ? x : alpha * x;
    case Kind::ThresholdedRelu: return x > alpha ? x : 0;
    case Kind::ScaledTanh: return alpha * std::tanh(beta * x);
    case Kind::HardSigmoid: return std::max(0.0, std::min(1.0, alpha * x + beta));
    case Kind::Elu: return x >= 0 ? x : alpha * (std::exp(x) - 1);
    case Kind::Softsign: return x / (1 + std::abs(x));
    case Kind::Softplus: return x > 0 ? x + std::log1p(std::exp(-x)) : std::log1p(std::exp(x));
  }
  return x;
}

double Activation::derivative(double x) const {
  switch (kind) {
    case Kind::Relu: return x > 0 ? 1 : 0;
    case Kind::Tanh: {
      double t = std::tanh(x);
      return 1 - t * t;
    }
    case Kind::Sigmoid: {
      double s = sigmoid(x);
      return s * (1 - s);
    }
    case Kind::Affine: return alpha;
    case Kind::LeakyRelu: return x >= 0 ? 1 : alpha;
    case Kind::ThresholdedRelu: return x > alpha ? 1 : 0;
    case Kind::ScaledTanh: {
      double t = std::tanh(beta * x);
      return alpha * beta * (1 - t * t);
    }
    case Kind::HardSigmoid: {
      double v = alpha * x + beta;
      return v > 0 && v < 1 ? alpha : 0;
    }
    case Kind::Elu: return x >= 0 ? 1 : alpha * std::exp(x);
    case Kind::Softsign: return 1 / ((1 + std::abs(x)) * (1 + std::abs(x)));
    case Kind::Softplus: return sigmoid(x);
  }
  return 1;
}

namespace {

// Parses the `activations` list. activation_alpha/beta are consumed in order by the functions
// that take that parameter (as onnxruntime does); a function whose value is not in the list gets
// the default of the ONNX operator of the same name. Values no function uses are ignored, as in
// onnxruntime.
std::vector<Activation> parseActivations(const std::vector<std::string>& names, const std::vector<float>& alphas,
                                         const std::vector<float>& betas, const std::string& what) {
  struct Spec {
    const char* name;
    Activation::Kind kind;
    bool usesAlpha, usesBeta;
    double alpha, beta;
  };
  static const Spec kSpecs[] = {
      {"relu", Activation::Kind::Relu, false, false, 0, 0},
      {"tanh", Activation::Kind::Tanh, false, false, 0, 0},
      {"sigmoid", Activation::Kind::Sigmoid, false, false, 0, 0},
      {"affine", Activation::Kind::Affine, true, true, 1.0, 0.0},
      {"leakyrelu", Activation::Kind::LeakyRelu, true, false, 0.01, 0},
      {"thresholdedrelu", Activation::Kind::ThresholdedRelu, true, false, 1.0, 0},
      {"scaledtanh", Activation::Kind::ScaledTanh, true, true, 1.0, 1.0},
      {"hardsigmoid", Activation::Kind::HardSigmoid, true, true, 0.2, 0.5},
      {"elu", Activation::Kind::Elu, true, false, 1.0, 0},
      {"softsign", Activation::Kind::Softsign, false, false, 0, 0},
      {"softplus", Activation::Kind::Softplus, false, false, 0, 0},
  };
  size_t ia = 0, ib = 0;
  std::vector<Activation> out;
  for (const auto& name : names) {
    const Spec* spec = nullptr;
    for (const auto& s : kSpecs)
      if (lower(name) == s.name) spec = &s;
    GRAFT_CHECK(spec, "{}: unknown activation '{}' (expected one of Relu, Tanh, Sigmoid, Affine, LeakyRelu, "
                "ThresholdedRelu, ScaledTanh, HardSigmoid, Elu, Softsign, Softplus)", what, name);
    Activation a{spec->kind, spec->alpha, spec->beta};
    if (spec->usesAlpha && ia < alphas.size()) a.alpha = alphas[ia++];
    if (spec->usesBeta && ib < betas.size()) a.beta = betas[ib++];
    out.push_back(a);
  }
  return out;
}

}  // namespace

RnnParams parseParams(const ir::Node& n, Cell cell) {
  std::string what = n.describe();
  RnnParams p;
  p.cell = cell;
  p.gates = cell == Cell::Rnn ? 1 : cell == Cell::Gru ? 3 : 4;
  p.actsPerDir = cell == Cell::Rnn ? 1 : cell == Cell::Gru ? 2 : 3;
  if (n.attrs().has("hidden_size")) {
    p.hiddenSize = n.attrInt("hidden_size");
    GRAFT_CHECK(p.hiddenSize > 0, "{}: hidden_size must be positive, got {}", what, p.hiddenSize);
  }
  std::string dir = n.attrString("direction", "forward");
  if (dir == "forward") {
  } else if (dir == "reverse") {
    p.forward = false;
    p.reverse = true;
  } else if (dir == "bidirectional") {
    p.reverse = true;
    p.numDirections = 2;
  } else {
    GRAFT_THROW("{}: direction must be forward, reverse or bidirectional, got '{}'", what, dir);
  }
  std::vector<std::string> names = n.attrStrings("activations", {});
  if (names.empty()) {
    std::vector<std::string> perDir = cell == Cell::Rnn   ? std::vector<std::string>{"Tanh"}
                                      : cell == Cell::Gru ? std::vector<std::string>{"Sigmoid", "Tanh"}
                                                          : std::vector<std::string>{"Sigmoid", "Tanh", "Tanh"};
    for (int64_t d = 0; d < p.numDirections; ++d) names.insert(names.end(), perDir.begin(), perDir.end());
  }
  auto count = static_cast<int64_t>(names.size());
  GRAFT_CHECK(count == p.actsPerDir * p.numDirections || (p.numDirections == 2 && count == p.actsPerDir),
              "{}: expected {} activations ({} per direction), got {}", what, p.actsPerDir * p.numDirections,
              p.actsPerDir, count);
  p.acts = parseActivations(names, n.attrFloats("activation_alpha", {}), n.attrFloats("activation_beta", {}), what);
  // One list for both directions of a bidirectional layer applies to each of them.
  if (static_cast<int64_t>(p.acts.size()) < p.actsPerDir * p.numDirections) {
    auto copy = p.acts;
    p.acts.insert(p.acts.end(), copy.begin(), copy.end());
  }
  if (n.attrs().has("clip")) {
    double c = n.attrFloat("clip");
    GRAFT_CHECK(c > 0 && std::isfinite(c), "{}: clip must be a positive number, got {}", what, c);
    p.clip = c;
  }
  int64_t layout = n.attrInt("layout", 0);
  GRAFT_CHECK(layout == 0 || layout == 1, "{}: layout must be 0 or 1, got {}", what, layout);
  p.batchFirst = layout == 1;
  if (cell == Cell::Gru) p.linearBeforeReset = n.attrInt("linear_before_reset", 0) != 0;
  if (cell == Cell::Lstm) p.inputForget = n.attrInt("input_forget", 0) != 0;
  return p;
}

bool RnnParams::defaultActivations() const {
  for (size_t i = 0; i < acts.size(); ++i)
    if (acts[i].kind != (i % actsPerDir == 0 ? Activation::Kind::Sigmoid : Activation::Kind::Tanh)) return false;
  return true;
}

std::optional<RnnParams> plainLstmParams(const ir::Node& n) {
  RnnParams p;
  try {
    p = parseParams(n, Cell::Lstm);
  } catch (const Error&) {
    return std::nullopt;
  }
  if (p.batchFirst || p.clip || p.inputForget || !p.defaultActivations()) return std::nullopt;
  return p;
}

namespace {

void checkShape(const NDArray& a, const Shape& want, const std::string& what, const char* name) {
  GRAFT_CHECK(a.shape() == want, "{}: input {} must have shape {}, got {}", what, name, shapeToString(want),
              shapeToString(a.shape()));
}

}  // namespace

RnnInputs RnnInputs::read(const RnnParams& p, const KernelContext& k, size_t offset, const std::string& what) {
  RnnInputs in;
  const NDArray& X = k.input(offset + 0);
  const NDArray& Wt = k.input(offset + 1);
  const NDArray& Rt = k.input(offset + 2);
  const int64_t D = p.numDirections, G = p.gates;
  GRAFT_CHECK(X.rank() == 3, "{}: X must have rank 3, got shape {}", what, shapeToString(X.shape()));
  GRAFT_CHECK(Wt.dtype() == X.dtype() && Rt.dtype() == X.dtype(), "{}: W and R must have X's type {}", what,
              dtypeName(X.dtype()));
  in.batchFirst = p.batchFirst;
  in.dtype = X.dtype();
  in.D = D;
  in.G = G;
  in.S = p.batchFirst ? X.dim(1) : X.dim(0);
  in.N = p.batchFirst ? X.dim(0) : X.dim(1);
  in.I = X.dim(2);
  const int64_t H = p.hiddenSize > 0 ? p.hiddenSize : (Rt.rank() == 3 ? Rt.dim(2) : 0);
  in.H = H;
  // R's shape is checked by division, so that the products below are bounded by R's size.
  GRAFT_CHECK(Rt.rank() == 3 && H > 0 && Rt.dim(0) == D && Rt.dim(2) == H && Rt.dim(1) % G == 0 && Rt.dim(1) / G == H,
              "{}: R must have shape [{}, {} * hidden_size, hidden_size] with hidden_size {}, got {}", what, D, G,
              p.hiddenSize > 0 ? std::to_string(p.hiddenSize) : "> 0", shapeToString(Rt.shape()));
  checkShape(Wt, {D, G * H, in.I}, what, "W");
  auto optional = [&](size_t i, const Shape& shape, const char* name) -> std::vector<double> {
    if (!k.hasInput(offset + i)) return {};
    const NDArray& a = k.input(offset + i);
    GRAFT_CHECK(a.dtype() == X.dtype(), "{}: input {} must have X's type {}, got {}", what, name, dtypeName(X.dtype()),
                dtypeName(a.dtype()));
    checkShape(a, shape, what, name);
    return readAsDoubles(a, what);
  };
  in.x = readAsDoubles(X, what);
  in.W = readAsDoubles(Wt, what);
  in.R = readAsDoubles(Rt, what);
  in.B = optional(3, {D, 2 * G * H}, "B");
  in.h0 = optional(5, in.stateShape(), "initial_h");
  if (p.cell == Cell::Lstm) {
    in.c0 = optional(6, in.stateShape(), "initial_c");
    in.P = optional(7, {D, 3 * H}, "P");
  }
  in.lens.assign(static_cast<size_t>(in.N), in.S);
  if (k.hasInput(offset + 4)) {
    const NDArray& sl = k.input(offset + 4);
    GRAFT_CHECK(sl.shape() == Shape{in.N}, "{}: sequence_lens must have shape [{}], got {}", what, in.N,
                shapeToString(sl.shape()));
    in.lens = toInt64Vector(sl);
    for (int64_t b = 0; b < in.N; ++b)
      GRAFT_CHECK(in.lens[b] >= 0 && in.lens[b] <= in.S, "{}: sequence_lens[{}] = {} is outside [0, {}]", what, b,
                  in.lens[b], in.S);
  }
  return in;
}

DirWeights DirWeights::of(const RnnParams& p, const RnnInputs& in, int64_t d) {
  const int64_t G = p.gates, H = in.H, I = in.I;
  const double* b = in.B.empty() ? nullptr : in.B.data() + d * 2 * G * H;
  return DirWeights{in.W.data() + d * G * H * I,
                    in.R.data() + d * G * H * H,
                    b,
                    b ? b + G * H : nullptr,
                    in.P.empty() ? nullptr : in.P.data() + d * 3 * H,
                    p.acts.data() + d * p.actsPerDir};
}

void cellForward(const RnnParams& p, const DirWeights& w, int64_t H, int64_t I, const double* xt,
                 const std::vector<double>& h, const std::vector<double>& c, std::vector<double>& hNew,
                 std::vector<double>& cNew, StepCache& s) {
  const int64_t G = p.gates;
  s.wx.resize(G * H);
  s.rh.resize(G * H);
  s.pre.resize(G * H);
  s.gate.resize(G * H);
  hNew.resize(H);
  cNew.resize(H);
  auto clip = [&](double v) { return p.clip ? std::max(-*p.clip, std::min(*p.clip, v)) : v; };
  auto bias = [&](const double* b, int64_t row) { return b ? b[row] : 0.0; };
  // Gate j of block `block` from its input v: records the input and the activation.
  auto gate = [&](int64_t block, int64_t j, const Activation& f, double v) {
    s.pre[block * H + j] = v;
    return s.gate[block * H + j] = f(clip(v));
  };
  for (int64_t r = 0; r < G * H; ++r) {
    double a = 0, b = 0;
    for (int64_t i = 0; i < I; ++i) a += w.W[r * I + i] * xt[i];
    for (int64_t j = 0; j < H; ++j) b += w.R[r * H + j] * h[j];
    s.wx[r] = a + bias(w.Wb, r);
    s.rh[r] = b + bias(w.Rb, r);
  }
  if (p.cell == Cell::Rnn) {
    for (int64_t j = 0; j < H; ++j) hNew[j] = gate(0, j, w.acts[0], s.wx[j] + s.rh[j]);
  } else if (p.cell == Cell::Gru) {
    const Activation &f = w.acts[0], &g = w.acts[1];
    // The reset gate multiplies either the previous state (default) or R_h h + Rb_h.
    std::vector<double> rhReset(H);
    for (int64_t j = 0; j < H; ++j) gate(1, j, f, s.wx[H + j] + s.rh[H + j]);
    if (!p.linearBeforeReset) {
      s.rHid.resize(H);
      for (int64_t j = 0; j < H; ++j) s.rHid[j] = s.gate[H + j] * h[j];
      for (int64_t j = 0; j < H; ++j) {
        double b = 0;
        for (int64_t k = 0; k < H; ++k) b += w.R[(2 * H + j) * H + k] * s.rHid[k];
        rhReset[j] = b + bias(w.Rb, 2 * H + j);
      }
    } else {
      for (int64_t j = 0; j < H; ++j) rhReset[j] = s.gate[H + j] * s.rh[2 * H + j];
    }
    for (int64_t j = 0; j < H; ++j) {
      double z = gate(0, j, f, s.wx[j] + s.rh[j]);
      double hh = gate(2, j, g, s.wx[2 * H + j] + rhReset[j]);
      hNew[j] = (1 - z) * hh + z * h[j];
    }
  } else {
    const Activation &f = w.acts[0], &g = w.acts[1], &hAct = w.acts[2];
    auto peep = [&](int64_t block, int64_t j, double cv) { return w.P ? w.P[block * H + j] * cv : 0.0; };
    for (int64_t j = 0; j < H; ++j) {
      double i = gate(0, j, f, s.wx[j] + s.rh[j] + peep(0, j, c[j]));
      double fg = p.inputForget ? 1 - i : gate(2, j, f, s.wx[2 * H + j] + s.rh[2 * H + j] + peep(2, j, c[j]));
      double cc = gate(3, j, g, s.wx[3 * H + j] + s.rh[3 * H + j]);
      cNew[j] = fg * c[j] + i * cc;
      double o = gate(1, j, f, s.wx[H + j] + s.rh[H + j] + peep(1, j, cNew[j]));
      hNew[j] = o * hAct(cNew[j]);
    }
  }
}

namespace {

KernelFactory recurrentKernel(Cell cell) {
  return [cell](CompileContext& cc) -> KernelFn {
    const ir::Node& node = cc.node();
    std::string what = node.describe();
    RnnParams p = parseParams(node, cell);
    bool saves = node.domain() == kGraftDomain && node.type() == "LSTMTrain";
    return [p, what, saves](KernelContext& k) {
      RnnInputs in = RnnInputs::read(p, k, 0, what);
      const int64_t D = in.D, N = in.N, H = in.H;
      // With an empty input (I = 0) S and N are unbounded: shapeNumel rejects sizes that overflow.
      std::vector<double> Y(k.wantsOutput(0) ? static_cast<size_t>(shapeNumel({in.S, D, N, H})) : 0);
      std::vector<double> Yh(static_cast<size_t>(shapeNumel({D, N, H}))), Yc(Yh.size());
      // LSTMTrain's Saved: per (direction, step, batch element) the 4H gates and the H cell state.
      std::vector<double> saved(saves && k.wantsOutput(3) ? static_cast<size_t>(shapeNumel({D, in.S, N, 5 * H})) : 0);
      StepCache cache;
      std::vector<double> hNew, cNew;
      for (int64_t d = 0; d < D; ++d) {
        DirWeights w = DirWeights::of(p, in, d);
        bool reverse = d == 1 || !p.forward;
        for (int64_t b = 0; b < N; ++b) {
          std::vector<double> h(H, 0.0), c(H, 0.0);
          if (!in.h0.empty()) std::copy_n(in.h0.begin() + in.stateAt(d, b), H, h.begin());
          if (!in.c0.empty()) std::copy_n(in.c0.begin() + in.stateAt(d, b), H, c.begin());
          const int64_t len = in.lens[b];
          for (int64_t s = 0; s < len; ++s) {
            int64_t t = reverse ? len - 1 - s : s;
            cellForward(p, w, H, in.I, in.x.data() + in.xAt(t, b), h, c, hNew, cNew, cache);
            h.swap(hNew);
            if (p.cell == Cell::Lstm) c.swap(cNew);
            if (!Y.empty()) std::copy(h.begin(), h.end(), Y.begin() + in.yAt(t, d, b));
            if (!saved.empty()) {
              auto at = saved.begin() + ((d * in.S + t) * N + b) * 5 * H;
              std::copy(cache.gate.begin(), cache.gate.begin() + 4 * H, at);
              std::copy(c.begin(), c.end(), at + 4 * H);
            }
          }
          // An empty sequence has no final state: onnxruntime reports zeros there, not the initial one.
          if (len == 0) {
            std::fill(h.begin(), h.end(), 0.0);
            std::fill(c.begin(), c.end(), 0.0);
          }
          std::copy(h.begin(), h.end(), Yh.begin() + in.stateAt(d, b));
          std::copy(c.begin(), c.end(), Yc.begin() + in.stateAt(d, b));
        }
      }
      if (k.wantsOutput(0)) k.setOutput(0, arrayFromDoubles(Y, in.dtype, in.yShape(), what));
      if (k.wantsOutput(1)) k.setOutput(1, arrayFromDoubles(Yh, in.dtype, in.stateShape(), what));
      if (p.cell == Cell::Lstm && k.wantsOutput(2))
        k.setOutput(2, arrayFromDoubles(Yc, in.dtype, in.stateShape(), what));
      if (!saved.empty()) k.setOutput(3, arrayFromDoubles(saved, in.dtype, {D, in.S, N, 5 * H}, what));
    };
  };
}

// LSTMTrain's output types: LSTM's three, then Saved [D, S, N, 5H].
std::vector<ir::ValueType> lstmTrainInfer(const ir::Node& n, const std::vector<ir::ValueType>& in,
                                          const std::vector<const NDArray*>&) {
  auto info = [&](size_t i) { return i < in.size() ? in[i].info : TensorInfo{}; };
  const TensorInfo X = info(0), W = info(1), R = info(2);
  GRAFT_CHECK(
      in.size() >= 3 && X.hasShape() && X.rank() == 3 && W.hasShape() && W.rank() == 3 && R.hasShape() && R.rank() == 3,
      "{}: X, W and R must be rank-3 tensors", n.describe());
  bool batchFirst = n.attrInt("layout", 0) == 1;
  Dim S = X.dims()[batchFirst ? 1 : 0], N = X.dims()[batchFirst ? 0 : 1], D = W.dims()[0], H = R.dims()[2];
  if (!H.known() && n.attrs().has("hidden_size")) H = Dim(n.attrInt("hidden_size"));
  Dim H5 = H.known() ? Dim(5 * H.value) : Dim{};
  DataType dt = X.dataType();
  auto t = [&](std::vector<Dim> dims) { return ir::ValueType::tensor(TensorInfo(dt, std::move(dims))); };
  ir::ValueType state = t(batchFirst ? std::vector<Dim>{N, D, H} : std::vector<Dim>{D, N, H});
  return {t(batchFirst ? std::vector<Dim>{N, S, D, H} : std::vector<Dim>{S, D, N, H}), state, state, t({D, S, N, H5})};
}

}  // namespace

}  // namespace graft::ops::rnn

namespace graft::ops {

GRAFT_REGISTER_OPS(rnn) {
  using rnn::Cell;
  auto flops = [](const ir::Node& n) { return cost::recurrence(n, n.input(0), n.input(1), n.input(2)); };
  r.add("RNN").setReference(rnn::recurrentKernel(Cell::Rnn)).noGradient({4}).setCost(flops);
  r.add("GRU").setReference(rnn::recurrentKernel(Cell::Gru)).noGradient({4}).setCost(flops);
  r.add("LSTM").setReference(rnn::recurrentKernel(Cell::Lstm)).noGradient({4}).setCost(flops);
  // No VJP: it appears only in training graphs, after autodiff, next to its LSTMGrad.
  r.add("LSTMTrain", kGraftDomain)
      .setReference(rnn::recurrentKernel(Cell::Lstm))
      .setInfer(rnn::lstmTrainInfer)
      .setCost(flops);
}

}  // namespace graft::ops
