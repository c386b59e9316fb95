// Recurrent layers: RNN, GRU and LSTM (ai.onnx opset 14+ semantics, with `layout`).
//
// One kernel drives all three cells. Each (direction, batch element) pair is an independent
// recurrence, so the reference walks them one at a time: simple to check against the equations
// in the ONNX specification, and padded steps (sequence_lens) need no masking.
#include <algorithm>
#include <cctype>
#include <cmath>
#include <optional>

#include "ops/dtype_dispatch.hpp"
#include "ops/registry.hpp"
#include "ops/shape_util.hpp"

namespace graft::ops {
namespace {

enum class Cell { Rnn, Gru, Lstm };

// An activation function of the recurrent cells, with its alpha/beta parameters resolved.
struct Activation {
  enum class Kind { Relu, Tanh, Sigmoid, Affine, LeakyRelu, ThresholdedRelu, ScaledTanh, HardSigmoid, Elu, Softsign, Softplus };
  Kind kind = Kind::Tanh;
  double alpha = 0, beta = 0;

  double operator()(double x) const {
    switch (kind) {
      case Kind::Relu: return x > 0 ? x : 0;
      case Kind::Tanh: return std::tanh(x);
      case Kind::Sigmoid: return x >= 0 ? 1 / (1 + std::exp(-x)) : std::exp(x) / (1 + std::exp(x));
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
};

std::string lower(std::string s) {
  for (char& ch : s) ch = static_cast<char>(std::tolower(static_cast<unsigned char>(ch)));
  return s;
}

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

struct RnnParams {
  Cell cell = Cell::Rnn;
  int64_t gates = 1;          // gate blocks in W and R: 1 (RNN), 3 (GRU, zrh), 4 (LSTM, iofc)
  int64_t actsPerDir = 1;     // activation functions per direction: f; f, g; f, g, h
  int64_t hiddenSize = -1;    // -1: taken from R
  bool forward = true, reverse = false;
  int64_t numDirections = 1;
  std::vector<Activation> acts;  // actsPerDir per direction, direction 0 first
  std::optional<double> clip;
  bool batchFirst = false;  // layout == 1
  bool linearBeforeReset = false;
  bool inputForget = false;
};

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

std::vector<double> readDoubles(const NDArray& a, const std::string& what) {
  std::vector<double> v(static_cast<size_t>(a.numel()));
  dispatch<kFloats>(a.dtype(), what, [&](auto tag) {
    using T = typename decltype(tag)::type;
    const T* p = a.data<T>();
    for (int64_t i = 0; i < a.numel(); ++i) v[i] = static_cast<double>(static_cast<ComputeType<T>>(p[i]));
  });
  return v;
}

void writeDoubles(NDArray& out, const std::vector<double>& v) {
  dispatch<kFloats>(out.dtype(), "RNN output", [&](auto tag) {
    using T = typename decltype(tag)::type;
    T* p = out.data<T>();
    for (int64_t i = 0; i < out.numel(); ++i) p[i] = static_cast<T>(static_cast<ComputeType<T>>(v[i]));
  });
}

void checkShape(const NDArray& a, const Shape& want, const std::string& what, const char* name) {
  GRAFT_CHECK(a.shape() == want, "{}: input {} must have shape {}, got {}", what, name, shapeToString(want),
              shapeToString(a.shape()));
}

// The weights of one direction, as row-major double matrices.
struct DirWeights {
  const double* W;   // [gates*H, I]
  const double* R;   // [gates*H, H]
  const double* Wb;  // [gates*H] or nullptr
  const double* Rb;  // [gates*H] or nullptr
  const double* P;   // [3*H] (i, o, f) or nullptr
  const Activation* acts;
};

// Runs one direction of one batch element over its `len` valid steps. x(t) gives the input
// row of step t; h and c hold the state and are updated in place; y(t) receives h after step t.
template <class XFn, class YFn>
void runSequence(const RnnParams& p, const DirWeights& w, int64_t H, int64_t I, int64_t len, bool reverse, XFn x,
                 std::vector<double>& h, std::vector<double>& c, YFn y) {
  const int64_t G = p.gates;
  std::vector<double> wx(G * H), rh(G * H), hNew(H), cNew(H);
  auto clip = [&](double v) { return p.clip ? std::max(-*p.clip, std::min(*p.clip, v)) : v; };
  auto bias = [&](const double* b, int64_t row) { return b ? b[row] : 0.0; };
  for (int64_t s = 0; s < len; ++s) {
    int64_t t = reverse ? len - 1 - s : s;
    const double* xt = x(t);
    for (int64_t r = 0; r < G * H; ++r) {
      double a = 0, b = 0;
      for (int64_t i = 0; i < I; ++i) a += w.W[r * I + i] * xt[i];
      for (int64_t j = 0; j < H; ++j) b += w.R[r * H + j] * h[j];
      wx[r] = a + bias(w.Wb, r);
      rh[r] = b + bias(w.Rb, r);
    }
    if (p.cell == Cell::Rnn) {
      for (int64_t j = 0; j < H; ++j) hNew[j] = w.acts[0](clip(wx[j] + rh[j]));
    } else if (p.cell == Cell::Gru) {
      const Activation &f = w.acts[0], &g = w.acts[1];
      // The reset gate multiplies either the previous state (default) or R_h h + Rb_h.
      std::vector<double> rhReset(H);
      std::vector<double> r(H);
      for (int64_t j = 0; j < H; ++j) r[j] = f(clip(wx[H + j] + rh[H + j]));
      if (!p.linearBeforeReset) {
        std::vector<double> rhPrev(H);
        for (int64_t j = 0; j < H; ++j) rhPrev[j] = r[j] * h[j];
        for (int64_t j = 0; j < H; ++j) {
          double b = 0;
          for (int64_t k = 0; k < H; ++k) b += w.R[(2 * H + j) * H + k] * rhPrev[k];
          rhReset[j] = b + bias(w.Rb, 2 * H + j);
        }
      } else {
        for (int64_t j = 0; j < H; ++j) rhReset[j] = r[j] * rh[2 * H + j];
      }
      for (int64_t j = 0; j < H; ++j) {
        double z = f(clip(wx[j] + rh[j]));
        double hh = g(clip(wx[2 * H + j] + rhReset[j]));
        hNew[j] = (1 - z) * hh + z * h[j];
      }
    } else {
      const Activation &f = w.acts[0], &g = w.acts[1], &hAct = w.acts[2];
      auto peep = [&](int64_t block, int64_t j, double cv) { return w.P ? w.P[block * H + j] * cv : 0.0; };
      for (int64_t j = 0; j < H; ++j) {
        double i = f(clip(wx[j] + rh[j] + peep(0, j, c[j])));
        double fg = p.inputForget ? 1 - i : f(clip(wx[2 * H + j] + rh[2 * H + j] + peep(2, j, c[j])));
        double cc = g(clip(wx[3 * H + j] + rh[3 * H + j]));
        cNew[j] = fg * c[j] + i * cc;
        double o = f(clip(wx[H + j] + rh[H + j] + peep(1, j, cNew[j])));
        hNew[j] = o * hAct(cNew[j]);
      }
      c = cNew;
    }
    h = hNew;
    y(t, h);
  }
}

KernelFactory recurrentKernel(Cell cell) {
  return [cell](CompileContext& cc) -> KernelFn {
    const ir::Node& node = cc.node();
    std::string what = node.describe();
    RnnParams p = parseParams(node, cell);
    return [p, what](KernelContext& k) {
      const NDArray& X = k.input(0);
      const NDArray& Wt = k.input(1);
      const NDArray& Rt = k.input(2);
      const int64_t D = p.numDirections, G = p.gates;
      GRAFT_CHECK(X.rank() == 3, "{}: X must have rank 3, got shape {}", what, shapeToString(X.shape()));
      GRAFT_CHECK(Wt.dtype() == X.dtype() && Rt.dtype() == X.dtype(), "{}: W and R must have X's type {}", what,
                  dtypeName(X.dtype()));
      const int64_t S = p.batchFirst ? X.dim(1) : X.dim(0);
      const int64_t N = p.batchFirst ? X.dim(0) : X.dim(1);
      const int64_t I = X.dim(2);
      const int64_t H = p.hiddenSize > 0 ? p.hiddenSize : (Rt.rank() == 3 ? Rt.dim(2) : 0);
      // R's shape is checked by division, so that the products below are bounded by R's size.
      GRAFT_CHECK(Rt.rank() == 3 && H > 0 && Rt.dim(0) == D && Rt.dim(2) == H && Rt.dim(1) % G == 0 && Rt.dim(1) / G == H,
                  "{}: R must have shape [{}, {} * hidden_size, hidden_size] with hidden_size {}, got {}", what, D, G,
                  p.hiddenSize > 0 ? std::to_string(p.hiddenSize) : "> 0", shapeToString(Rt.shape()));
      checkShape(Wt, {D, G * H, I}, what, "W");
      auto optional = [&](size_t i, const Shape& shape, const char* name) -> std::vector<double> {
        if (!k.hasInput(i)) return {};
        const NDArray& a = k.input(i);
        GRAFT_CHECK(a.dtype() == X.dtype(), "{}: input {} must have X's type {}, got {}", what, name,
                    dtypeName(X.dtype()), dtypeName(a.dtype()));
        checkShape(a, shape, what, name);
        return readDoubles(a, what);
      };
      std::vector<double> x = readDoubles(X, what), W = readDoubles(Wt, what), R = readDoubles(Rt, what);
      std::vector<double> B = optional(3, {D, 2 * G * H}, "B");
      Shape stateShape = p.batchFirst ? Shape{N, D, H} : Shape{D, N, H};
      std::vector<double> h0 = optional(5, stateShape, "initial_h");
      std::vector<double> c0, P;
      if (p.cell == Cell::Lstm) {
        c0 = optional(6, stateShape, "initial_c");
        P = optional(7, {D, 3 * H}, "P");
      }
      std::vector<int64_t> lens(static_cast<size_t>(N), S);
      if (k.hasInput(4)) {
        const NDArray& sl = k.input(4);
        GRAFT_CHECK(sl.shape() == Shape{N}, "{}: sequence_lens must have shape [{}], got {}", what, N,
                    shapeToString(sl.shape()));
        lens = toInt64Vector(sl);
        for (int64_t b = 0; b < N; ++b)
          GRAFT_CHECK(lens[b] >= 0 && lens[b] <= S, "{}: sequence_lens[{}] = {} is outside [0, {}]", what, b, lens[b],
                      S);
      }

      // Offsets in the layouts of X, Y and the states.
      auto xAt = [&](int64_t t, int64_t b) { return (p.batchFirst ? b * S + t : t * N + b) * I; };
      auto yAt = [&](int64_t t, int64_t d, int64_t b) {
        return (p.batchFirst ? ((b * S + t) * D + d) : ((t * D + d) * N + b)) * H;
      };
      auto stateAt = [&](int64_t d, int64_t b) { return (p.batchFirst ? b * D + d : d * N + b) * H; };

      // With an empty input (I = 0) S and N are unbounded: shapeNumel rejects sizes that overflow.
      std::vector<double> Y(k.wantsOutput(0) ? static_cast<size_t>(shapeNumel({S, D, N, H})) : 0);
      std::vector<double> Yh(static_cast<size_t>(shapeNumel({D, N, H}))), Yc(Yh.size());
      for (int64_t d = 0; d < D; ++d) {
        DirWeights w{W.data() + d * G * H * I, R.data() + d * G * H * H, B.empty() ? nullptr : B.data() + d * 2 * G * H,
                     B.empty() ? nullptr : B.data() + d * 2 * G * H + G * H, P.empty() ? nullptr : P.data() + d * 3 * H,
                     p.acts.data() + d * p.actsPerDir};
        bool reverse = d == 1 || !p.forward;
        for (int64_t b = 0; b < N; ++b) {
          std::vector<double> h(H, 0.0), c(H, 0.0);
          if (!h0.empty()) std::copy_n(h0.begin() + stateAt(d, b), H, h.begin());
          if (!c0.empty()) std::copy_n(c0.begin() + stateAt(d, b), H, c.begin());
          runSequence(
              p, w, H, I, lens[b], reverse, [&](int64_t t) { return x.data() + xAt(t, b); }, h, c,
              [&](int64_t t, const std::vector<double>& ht) {
                if (!Y.empty()) std::copy(ht.begin(), ht.end(), Y.begin() + yAt(t, d, b));
              });
          // An empty sequence has no final state: onnxruntime reports zeros there, not the initial one.
          if (lens[b] == 0) {
            std::fill(h.begin(), h.end(), 0.0);
            std::fill(c.begin(), c.end(), 0.0);
          }
          std::copy(h.begin(), h.end(), Yh.begin() + stateAt(d, b));
          std::copy(c.begin(), c.end(), Yc.begin() + stateAt(d, b));
        }
      }
      if (k.wantsOutput(0))
        writeDoubles(k.allocOutputUninit(0, X.dtype(), p.batchFirst ? Shape{N, S, D, H} : Shape{S, D, N, H}), Y);
      if (k.wantsOutput(1)) writeDoubles(k.allocOutputUninit(1, X.dtype(), stateShape), Yh);
      if (p.cell == Cell::Lstm && k.wantsOutput(2)) writeDoubles(k.allocOutputUninit(2, X.dtype(), stateShape), Yc);
    };
  };
}

}  // namespace

GRAFT_REGISTER_OPS(rnn) {
  r.add("RNN").setReference(recurrentKernel(Cell::Rnn));
  r.add("GRU").setReference(recurrentKernel(Cell::Gru));
  r.add("LSTM").setReference(recurrentKernel(Cell::Lstm));
}

}  // namespace graft::ops
