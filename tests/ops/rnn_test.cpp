// Tests of src/ops/rnn.cpp: RNN, GRU and LSTM against hand-computed values and against a naive
// step-by-step model written from the equations of the ONNX specification (below), which
// advances the whole batch one time step at a time and masks finished sequences.
#include <algorithm>
#include <cmath>
#include <functional>

#include "op_test_util.hpp"

namespace graft::testing {
namespace {

using Fn = std::function<double(double)>;

struct Op {
  std::string type;
  std::vector<NDArray> inputs;
  ir::Attributes attrs;
  int numOutputs = 1;
};
std::vector<NDArray> ref(Op o) {
  return runReference(OpCase{o.type, std::move(o.inputs), std::move(o.attrs), o.numOutputs, ""});
}

double sigm(double x) { return 1 / (1 + std::exp(-x)); }

// ---- the naive model ----------------------------------------------------------------------------

struct Config {
  std::string cell = "RNN";  // RNN, GRU, LSTM
  std::string direction = "forward";
  int64_t S = 3, N = 2, I = 3, H = 2;
  bool bias = true, initialH = false, initialC = false, peepholes = false, seqLens = false;
  bool linearBeforeReset = false, inputForget = false;
  std::optional<float> clip;
  std::vector<std::string> activations;  // empty: defaults
  std::vector<float> alphas, betas;
  std::vector<Fn> fns;                   // the naive model's view of `activations`
};

int64_t gatesOf(const std::string& cell) { return cell == "RNN" ? 1 : cell == "GRU" ? 3 : 4; }

struct Inputs {
  NDArray X, W, R, B, seq, h0, c0, P;
};

Inputs makeInputs(const Config& c, uint64_t seed) {
  int64_t D = c.direction == "bidirectional" ? 2 : 1, G = gatesOf(c.cell);
  Inputs in;
  in.X = randomArray(DataType::Float, {c.S, c.N, c.I}, seed);
  in.W = randomArray(DataType::Float, {D, G * c.H, c.I}, seed + 1, -0.8, 0.8);
  in.R = randomArray(DataType::Float, {D, G * c.H, c.H}, seed + 2, -0.8, 0.8);
  if (c.bias) in.B = randomArray(DataType::Float, {D, 2 * G * c.H}, seed + 3, -0.5, 0.5);
  if (c.seqLens) {
    in.seq = NDArray(DataType::Int32, {c.N});
    for (int64_t b = 0; b < c.N; ++b) in.seq.data<int32_t>()[b] = static_cast<int32_t>(std::max<int64_t>(1, c.S - b));
  }
  if (c.initialH) in.h0 = randomArray(DataType::Float, {D, c.N, c.H}, seed + 4);
  if (c.initialC) in.c0 = randomArray(DataType::Float, {D, c.N, c.H}, seed + 5);
  if (c.peepholes) in.P = randomArray(DataType::Float, {D, 3 * c.H}, seed + 6);
  return in;
}

struct Result {
  std::vector<double> Y, Yh, Yc;  // layout 0: [S, D, N, H] and [D, N, H]
};

Result naive(const Config& c, const Inputs& in) {
  const int64_t D = c.direction == "bidirectional" ? 2 : 1, G = gatesOf(c.cell), S = c.S, N = c.N, I = c.I, H = c.H;
  auto X = toDoubles(in.X), W = toDoubles(in.W), R = toDoubles(in.R);
  std::vector<double> B = in.B.valid() ? toDoubles(in.B) : std::vector<double>(D * 2 * G * H, 0.0);
  std::vector<double> P = in.P.valid() ? toDoubles(in.P) : std::vector<double>(D * 3 * H, 0.0);
  std::vector<double> h0 = in.h0.valid() ? toDoubles(in.h0) : std::vector<double>(D * N * H, 0.0);
  std::vector<double> c0 = in.c0.valid() ? toDoubles(in.c0) : std::vector<double>(D * N * H, 0.0);
  std::vector<int64_t> len(N, S);
  if (in.seq.valid())
    for (int64_t b = 0; b < N; ++b) len[b] = in.seq.data<int32_t>()[b];
  int64_t perDir = c.cell == "RNN" ? 1 : c.cell == "GRU" ? 2 : 3;
  std::vector<Fn> fns = c.fns;
  if (fns.empty()) {
    Fn tanhF = [](double x) { return std::tanh(x); };
    for (int64_t d = 0; d < D; ++d) {
      if (c.cell == "RNN") fns.push_back(tanhF);
      if (c.cell == "GRU") fns.insert(fns.end(), {sigm, tanhF});
      if (c.cell == "LSTM") fns.insert(fns.end(), {sigm, tanhF, tanhF});
    }
  }
  auto cl = [&](double v) { return c.clip ? std::clamp(v, -double(*c.clip), double(*c.clip)) : v; };
  Result r;
  r.Y.assign(S * D * N * H, 0.0);
  r.Yh.assign(D * N * H, 0.0);
  r.Yc.assign(D * N * H, 0.0);
  for (int64_t d = 0; d < D; ++d) {
    bool rev = c.direction == "reverse" || d == 1;
    const Fn* f = &fns[d * perDir];
    // W x + Wb for gate block g, row j, batch b, time t; likewise R v + Rb for a state vector v.
    auto wx = [&](int64_t g, int64_t j, int64_t b, int64_t t) {
      double s = B[d * 2 * G * H + g * H + j];
      for (int64_t i = 0; i < I; ++i) s += W[(d * G * H + g * H + j) * I + i] * X[(t * N + b) * I + i];
      return s;
    };
    auto rv = [&](int64_t g, int64_t j, const std::vector<double>& v) {
      double s = B[d * 2 * G * H + G * H + g * H + j];
      for (int64_t k = 0; k < H; ++k) s += R[(d * G * H + g * H + j) * H + k] * v[k];
      return s;
    };
    std::vector<std::vector<double>> h(N), cs(N);
    for (int64_t b = 0; b < N; ++b) {
      h[b].assign(h0.begin() + (d * N + b) * H, h0.begin() + (d * N + b + 1) * H);
      cs[b].assign(c0.begin() + (d * N + b) * H, c0.begin() + (d * N + b + 1) * H);
    }
    for (int64_t step = 0; step < S; ++step)
      for (int64_t b = 0; b < N; ++b) {
        if (step >= len[b]) continue;  // this sequence has ended
        int64_t t = rev ? len[b] - 1 - step : step;
        std::vector<double> hn(H), cn(H);
        for (int64_t j = 0; j < H; ++j) {
          if (c.cell == "RNN") {
            hn[j] = f[0](cl(wx(0, j, b, t) + rv(0, j, h[b])));
          } else if (c.cell == "GRU") {
            double z = f[0](cl(wx(0, j, b, t) + rv(0, j, h[b])));
            double hh;
            if (c.linearBeforeReset) {
              double rr = f[0](cl(wx(1, j, b, t) + rv(1, j, h[b])));
              hh = f[1](cl(wx(2, j, b, t) + rr * rv(2, j, h[b])));
            } else {
              std::vector<double> rh(H);
              for (int64_t k = 0; k < H; ++k) rh[k] = f[0](cl(wx(1, k, b, t) + rv(1, k, h[b]))) * h[b][k];
              hh = f[1](cl(wx(2, j, b, t) + rv(2, j, rh)));
            }
            hn[j] = (1 - z) * hh + z * h[b][j];
          } else {
            const double* p = &P[d * 3 * H];
            double ig = f[0](cl(wx(0, j, b, t) + rv(0, j, h[b]) + p[j] * cs[b][j]));
            double fg = c.inputForget ? 1 - ig : f[0](cl(wx(2, j, b, t) + rv(2, j, h[b]) + p[2 * H + j] * cs[b][j]));
            double cc = f[1](cl(wx(3, j, b, t) + rv(3, j, h[b])));
            cn[j] = fg * cs[b][j] + ig * cc;
            double og = f[0](cl(wx(1, j, b, t) + rv(1, j, h[b]) + p[H + j] * cn[j]));
            hn[j] = og * f[2](cn[j]);
          }
        }
        h[b] = hn;
        if (c.cell == "LSTM") cs[b] = cn;
        for (int64_t j = 0; j < H; ++j) r.Y[((t * D + d) * N + b) * H + j] = hn[j];
      }
    for (int64_t b = 0; b < N; ++b)
      for (int64_t j = 0; j < H; ++j) {
        r.Yh[(d * N + b) * H + j] = h[b][j];
        r.Yc[(d * N + b) * H + j] = cs[b][j];
      }
  }
  return r;
}

// ---- running the op -----------------------------------------------------------------------------

ir::Attributes attrsOf(const Config& c, int64_t layout) {
  ir::Attributes a = attrs({{"hidden_size", c.H}, {"direction", c.direction}, {"layout", layout}});
  if (!c.activations.empty()) a.set("activations", c.activations);
  if (!c.alphas.empty()) a.set("activation_alpha", c.alphas);
  if (!c.betas.empty()) a.set("activation_beta", c.betas);
  if (c.clip) a.set("clip", *c.clip);
  if (c.cell == "GRU") a.set("linear_before_reset", int64_t{c.linearBeforeReset});
  if (c.cell == "LSTM") a.set("input_forget", int64_t{c.inputForget});
  return a;
}

// Swaps the first two axes of a rank-3 (or the first and third of a rank-4) float array.
NDArray swapAxes(const NDArray& a, bool y) {
  Shape s = a.shape();
  Shape o = s;
  if (y) std::swap(o[0], o[2]), std::swap(o[1], o[2]);  // [S, D, N, H] -> [N, S, D, H]
  else std::swap(o[0], o[1]);
  NDArray out(DataType::Float, o);
  const float* p = a.data<float>();
  float* q = out.data<float>();
  if (y) {
    for (int64_t t = 0; t < s[0]; ++t)
      for (int64_t d = 0; d < s[1]; ++d)
        for (int64_t b = 0; b < s[2]; ++b)
          for (int64_t j = 0; j < s[3]; ++j) q[((b * s[0] + t) * s[1] + d) * s[3] + j] = p[((t * s[1] + d) * s[2] + b) * s[3] + j];
  } else {
    for (int64_t i = 0; i < s[0]; ++i)
      for (int64_t k = 0; k < s[1]; ++k)
        for (int64_t j = 0; j < s[2]; ++j) q[(k * s[0] + i) * s[2] + j] = p[(i * s[1] + k) * s[2] + j];
  }
  return out;
}

NDArray asArray(const std::vector<double>& v, Shape s) {
  NDArray a(DataType::Float, std::move(s));
  for (int64_t i = 0; i < a.numel(); ++i) a.data<float>()[i] = static_cast<float>(v[i]);
  return a;
}

// Runs the op in `layout` and returns Y, Y_h (and Y_c) in layout 0.
std::vector<NDArray> runOp(const Config& c, const Inputs& in, int64_t layout) {
  bool bf = layout == 1;
  std::vector<NDArray> ins = {bf ? swapAxes(in.X, false) : in.X, in.W, in.R, in.B, in.seq,
                              in.h0.valid() && bf ? swapAxes(in.h0, false) : in.h0};
  if (c.cell == "LSTM") {
    ins.push_back(in.c0.valid() && bf ? swapAxes(in.c0, false) : in.c0);
    ins.push_back(in.P);
  }
  int outs = c.cell == "LSTM" ? 3 : 2;
  auto res = ref({c.cell, ins, attrsOf(c, layout), outs});
  if (bf) {
    // Back to layout 0: Y [N, S, D, H] -> [S, D, N, H]; states [N, D, H] -> [D, N, H].
    Shape ys = res[0].shape();
    NDArray y0(DataType::Float, {ys[1], ys[2], ys[0], ys[3]});
    for (int64_t b = 0; b < ys[0]; ++b)
      for (int64_t t = 0; t < ys[1]; ++t)
        for (int64_t d = 0; d < ys[2]; ++d)
          for (int64_t j = 0; j < ys[3]; ++j)
            y0.data<float>()[((t * ys[2] + d) * ys[0] + b) * ys[3] + j] = res[0].data<float>()[((b * ys[1] + t) * ys[2] + d) * ys[3] + j];
    res[0] = y0;
    for (size_t i = 1; i < res.size(); ++i) res[i] = swapAxes(res[i], false);
  }
  return res;
}

void expectMatchesNaive(const Config& c, uint64_t seed = 7) {
  Inputs in = makeInputs(c, seed);
  Result want = naive(c, in);
  int64_t D = c.direction == "bidirectional" ? 2 : 1;
  for (int64_t layout : {0, 1}) {
    SCOPED_TRACE("layout " + std::to_string(layout));
    auto got = runOp(c, in, layout);
    EXPECT_TRUE(allClose(got[0], asArray(want.Y, {c.S, D, c.N, c.H}), 1e-5, 1e-6));
    EXPECT_TRUE(allClose(got[1], asArray(want.Yh, {D, c.N, c.H}), 1e-5, 1e-6));
    if (c.cell == "LSTM") {
      EXPECT_TRUE(allClose(got[2], asArray(want.Yc, {D, c.N, c.H}), 1e-5, 1e-6));
    }
  }
}

// ---- RNN ----------------------------------------------------------------------------------------

TEST(RNN, HandComputedTwoSteps) {
  // H = I = 1: h1 = tanh(0.5*1 + 0.1 + 0.2), h2 = tanh(0.5*2 + 0.25*h1 + 0.3).
  auto out = ref({"RNN",
                           {arr<float>({2, 1, 1}, {1, 2}), arr<float>({1, 1, 1}, {0.5f}), arr<float>({1, 1, 1}, {0.25f}),
                            arr<float>({1, 2}, {0.1f, 0.2f})},
                           attrs({{"hidden_size", int64_t{1}}}),
                           2});
  double h1 = std::tanh(0.8), h2 = std::tanh(1.3 + 0.25 * h1);
  EXPECT_TRUE(allClose(out[0], arr<float>({2, 1, 1, 1}, {float(h1), float(h2)})));
  EXPECT_TRUE(allClose(out[1], arr<float>({1, 1, 1}, {float(h2)})));
}

TEST(RNN, MatchesNaiveModelInEveryDirection) {
  for (const char* dir : {"forward", "reverse", "bidirectional"}) {
    SCOPED_TRACE(dir);
    Config c;
    c.direction = dir;
    expectMatchesNaive(c);
  }
}

TEST(RNN, SequenceLensInitialStateAndNoBias) {
  Config c;
  c.direction = "bidirectional";
  c.N = 3;
  c.S = 4;
  c.seqLens = c.initialH = true;
  c.bias = false;
  expectMatchesNaive(c);
}

TEST(RNN, PaddedStepsOfYAreZero) {
  Config c;
  c.seqLens = true;  // lengths 3 and 2
  Inputs in = makeInputs(c, 3);
  auto got = runOp(c, in, 0);
  for (int64_t j = 0; j < c.H; ++j) EXPECT_EQ(got[0].data<float>()[((2 * 1 + 0) * c.N + 1) * c.H + j], 0.0f);
}

TEST(RNN, EmptySequenceGivesZeroState) {
  // Batch element 0 has no steps: its Y rows and its Y_h are zero (not initial_h), as in onnxruntime.
  auto out = ref({"RNN",
                  {arr<float>({1, 2, 1}, {1, 1}), arr<float>({1, 1, 1}, {1}), arr<float>({1, 1, 1}, {1}), NDArray{},
                   arr<int32_t>({2}, {0, 1}), arr<float>({1, 2, 1}, {0.5f, 0.5f})},
                  attrs({{"hidden_size", int64_t{1}}}),
                  2});
  float h = static_cast<float>(std::tanh(1.5));
  EXPECT_TRUE(allClose(out[0], arr<float>({1, 1, 2, 1}, {0, h})));
  EXPECT_TRUE(allClose(out[1], arr<float>({1, 2, 1}, {0, h})));
}

TEST(RNN, ActivationsWithAlphaAndBetaAndClip) {
  // alpha/beta are consumed in order by the functions that take them: Affine(0.5, 0.1) forward,
  // LeakyRelu(0.3) backward.
  Config c;
  c.direction = "bidirectional";
  c.activations = {"Affine", "LeakyRelu"};
  c.alphas = {0.5f, 0.3f};
  c.betas = {0.1f};
  c.clip = 0.7f;
  c.fns = {[](double x) { return 0.5 * x + 0.1; }, [](double x) { return x >= 0 ? x : 0.3 * x; }};
  expectMatchesNaive(c);
}

TEST(RNN, EveryActivationName) {
  struct Case {
    std::string name;
    std::vector<float> alpha, beta;
    Fn fn;
  };
  std::vector<Case> cases = {
      {"Relu", {}, {}, [](double x) { return std::max(0.0, x); }},
      {"Tanh", {}, {}, [](double x) { return std::tanh(x); }},
      {"Sigmoid", {}, {}, sigm},
      {"Affine", {2.0f}, {-0.5f}, [](double x) { return 2 * x - 0.5; }},
      {"LeakyRelu", {}, {}, [](double x) { return x >= 0 ? x : 0.01 * x; }},
      {"ThresholdedRelu", {0.2f}, {}, [](double x) { return x > 0.2 ? x : 0.0; }},
      {"ThresholdedRelu", {}, {}, [](double x) { return x > 1.0 ? x : 0.0; }},
      {"ScaledTanh", {1.5f}, {0.5f}, [](double x) { return 1.5 * std::tanh(0.5 * x); }},
      {"HardSigmoid", {}, {}, [](double x) { return std::clamp(0.2 * x + 0.5, 0.0, 1.0); }},
      {"HardSigmoid", {0.4f}, {0.3f}, [](double x) { return std::clamp(0.4 * x + 0.3, 0.0, 1.0); }},
      {"Elu", {0.7f}, {}, [](double x) { return x >= 0 ? x : 0.7 * (std::exp(x) - 1); }},
      {"Softsign", {}, {}, [](double x) { return x / (1 + std::abs(x)); }},
      {"Softplus", {}, {}, [](double x) { return std::log1p(std::exp(x)); }},
  };
  for (const auto& k : cases) {
    SCOPED_TRACE(k.name);
    Config c;
    c.activations = {k.name};
    c.alphas = k.alpha;
    c.betas = k.beta;
    c.fns = {k.fn};
    expectMatchesNaive(c, 11);
  }
}

TEST(RNN, OnlyYhRequested) {
  Config c;
  Inputs in = makeInputs(c, 5);
  Result want = naive(c, in);
  ir::Graph g("t");
  std::vector<ir::Tensor*> ts;
  std::vector<ops::Value> vals;
  int i = 0;
  for (const NDArray& a : {in.X, in.W, in.R, in.B}) {
    ir::Tensor* t = g.addTensor("in" + std::to_string(i++), ir::ValueType::tensor(TensorInfo(a.dtype(), a.shape())),
                                ir::TensorKind::Input);
    ts.push_back(t);
    vals.push_back(ops::Value::fromTensor(a));
  }
  ir::Node* n = g.addNode("RNN", "", ts, {"", "yh"}, attrsOf(c, 0), "rnn");
  auto out = ops::evaluateNode(*n, vals, ops::serialPool());
  EXPECT_FALSE(out[0].isTensor());
  ASSERT_TRUE(out[1].isTensor());
  EXPECT_TRUE(allClose(out[1].tensor, asArray(want.Yh, {1, c.N, c.H})));
}

TEST(RNN, DoubleInputs) {
  auto out = ref({"RNN",
                           {arr<double>({1, 1, 1}, {2}), arr<double>({1, 1, 1}, {0.5}), arr<double>({1, 1, 1}, {1})},
                           attrs({{"hidden_size", int64_t{1}}}),
                           2});
  EXPECT_TRUE(allClose(out[1], arr<double>({1, 1, 1}, {std::tanh(1.0)}), 1e-12, 1e-15));
}

TEST(RNN, ShapesAgreeWithOnnxInference) {
  Config c;
  c.direction = "bidirectional";
  Inputs in = makeInputs(c, 2);
  for (int64_t layout : {0, 1}) {
    OpCase oc{"RNN", {layout ? swapAxes(in.X, false) : in.X, in.W, in.R, in.B}, attrsOf(c, layout), 2, ""};
    auto types = inferTypes(oc);
    auto out = runReference(oc);
    for (int i = 0; i < 2; ++i) EXPECT_EQ(types[i].info.shape(), out[i].shape());
  }
}

TEST(RNN, RejectsBadInputs) {
  Config c;
  Inputs in = makeInputs(c, 1);
  auto run = [&](std::vector<NDArray> ins, ir::Attributes a) { return ref({"RNN", std::move(ins), std::move(a), 2}); };
  ir::Attributes ok = attrsOf(c, 0);
  // W for 3 hidden units while hidden_size says 2.
  EXPECT_THROW(run({in.X, randomArray(DataType::Float, {1, 3, c.I}, 1), in.R}, ok), Error);
  // B of the wrong size.
  EXPECT_THROW(run({in.X, in.W, in.R, randomArray(DataType::Float, {1, 3}, 1)}, ok), Error);
  // A sequence length beyond the sequence.
  EXPECT_THROW(run({in.X, in.W, in.R, in.B, arr<int32_t>({2}, {3, 4})}, ok), Error);
  EXPECT_THROW(run({in.X, in.W, in.R, in.B, arr<int32_t>({2}, {-1, 1})}, ok), Error);
  auto bad = [&](const std::string& k, ir::AttrValue v) {
    ir::Attributes a = ok;
    a.set(k, std::move(v));
    return a;
  };
  EXPECT_THROW(run({in.X, in.W, in.R}, bad("direction", std::string("sideways"))), Error);
  EXPECT_THROW(run({in.X, in.W, in.R}, bad("activations", std::vector<std::string>{"Swish"})), Error);
  EXPECT_THROW(run({in.X, in.W, in.R}, bad("activations", std::vector<std::string>{"Tanh", "Tanh"})), Error);
  EXPECT_THROW(run({in.X, in.W, in.R}, bad("layout", int64_t{2})), Error);
  EXPECT_THROW(run({in.X, in.W, in.R}, bad("clip", -1.0f)), Error);
  EXPECT_THROW(run({arr<float>({2, 3}, {1, 2, 3, 4, 5, 6}), in.W, in.R}, ok), Error);
}

// ---- GRU ----------------------------------------------------------------------------------------

TEST(GRU, HandComputedOneStep) {
  // H = I = 1, W = [wz, wr, wh], R = [rz, rr, rh], no bias, h0 = 0.5, x = 1.
  NDArray X = arr<float>({1, 1, 1}, {1}), W = arr<float>({1, 3, 1}, {0.2f, 0.4f, 0.6f});
  NDArray R = arr<float>({1, 3, 1}, {0.3f, 0.5f, 0.7f}), h0 = arr<float>({1, 1, 1}, {0.5f});
  double z = sigm(0.2 + 0.15), r = sigm(0.4 + 0.25);
  for (int64_t lbr : {0, 1}) {
    // With linear_before_reset the bias-free forms coincide: r * (rh h) = rh (r h).
    double hh = std::tanh(0.6 + 0.7 * r * 0.5);
    double h = (1 - z) * hh + z * 0.5;
    auto out = ref({"GRU", {X, W, R, NDArray{}, NDArray{}, h0},
                             attrs({{"hidden_size", int64_t{1}}, {"linear_before_reset", lbr}}), 2});
    EXPECT_TRUE(allClose(out[1], arr<float>({1, 1, 1}, {float(h)})));
  }
  // With a recurrence bias Rb_h they differ: r * (rh h + rbh) versus rh (r h) + rbh.
  NDArray B = arr<float>({1, 6}, {0, 0, 0, 0, 0, 0.9f});
  double lin = std::tanh(0.6 + r * (0.35 + 0.9)), def = std::tanh(0.6 + 0.7 * r * 0.5 + 0.9);
  auto o0 = ref({"GRU", {X, W, R, B, NDArray{}, h0}, attrs({{"hidden_size", int64_t{1}}}), 2});
  auto o1 = ref({"GRU", {X, W, R, B, NDArray{}, h0}, attrs({{"hidden_size", int64_t{1}}, {"linear_before_reset", int64_t{1}}}), 2});
  EXPECT_TRUE(allClose(o0[1], arr<float>({1, 1, 1}, {float((1 - z) * def + z * 0.5)})));
  EXPECT_TRUE(allClose(o1[1], arr<float>({1, 1, 1}, {float((1 - z) * lin + z * 0.5)})));
}

TEST(GRU, MatchesNaiveModel) {
  for (bool lbr : {false, true})
    for (const char* dir : {"forward", "reverse", "bidirectional"}) {
      SCOPED_TRACE(std::string(dir) + (lbr ? " linear_before_reset" : ""));
      Config c;
      c.cell = "GRU";
      c.direction = dir;
      c.linearBeforeReset = lbr;
      c.initialH = c.seqLens = true;
      c.N = 3;
      expectMatchesNaive(c);
    }
}

TEST(GRU, CustomActivationsAndClip) {
  Config c;
  c.cell = "GRU";
  c.direction = "bidirectional";
  c.activations = {"HardSigmoid", "Softsign", "Sigmoid", "Relu"};
  c.alphas = {0.3f};
  c.betas = {0.4f};
  c.clip = 0.5f;
  c.fns = {[](double x) { return std::clamp(0.3 * x + 0.4, 0.0, 1.0); }, [](double x) { return x / (1 + std::abs(x)); },
           sigm, [](double x) { return std::max(0.0, x); }};
  expectMatchesNaive(c);
}

TEST(GRU, OneActivationListServesBothDirections) {
  Config c;
  c.cell = "GRU";
  c.direction = "bidirectional";
  c.activations = {"Sigmoid", "Relu"};
  c.fns = {sigm, [](double x) { return std::max(0.0, x); }, sigm, [](double x) { return std::max(0.0, x); }};
  expectMatchesNaive(c);
}

TEST(GRU, RejectsWrongR) {
  Config c;
  c.cell = "GRU";
  Inputs in = makeInputs(c, 1);
  EXPECT_THROW(ref({"GRU", {in.X, in.W, randomArray(DataType::Float, {1, 2 * c.H, c.H}, 2)}, attrsOf(c, 0), 2}), Error);
}

// ---- LSTM ---------------------------------------------------------------------------------------

TEST(LSTM, HandComputedOneStepWithPeepholes) {
  // H = I = 1; gates in W/R/P order: i, o, f, c. x = 1, h0 = 0.5, c0 = 2.
  NDArray X = arr<float>({1, 1, 1}, {1}), W = arr<float>({1, 4, 1}, {0.1f, 0.2f, 0.3f, 0.4f});
  NDArray R = arr<float>({1, 4, 1}, {0.5f, 0.6f, 0.7f, 0.8f}), P = arr<float>({1, 3}, {0.05f, 0.06f, 0.07f});
  NDArray h0 = arr<float>({1, 1, 1}, {0.5f}), c0 = arr<float>({1, 1, 1}, {2});
  double i = sigm(0.1 + 0.25 + 0.05 * 2), f = sigm(0.3 + 0.35 + 0.07 * 2), cc = std::tanh(0.4 + 0.4);
  double c = f * 2 + i * cc, o = sigm(0.2 + 0.3 + 0.06 * c), h = o * std::tanh(c);
  auto out = ref({"LSTM", {X, W, R, NDArray{}, NDArray{}, h0, c0, P}, attrs({{"hidden_size", int64_t{1}}}), 3});
  EXPECT_TRUE(allClose(out[0], arr<float>({1, 1, 1, 1}, {float(h)})));
  EXPECT_TRUE(allClose(out[1], arr<float>({1, 1, 1}, {float(h)})));
  EXPECT_TRUE(allClose(out[2], arr<float>({1, 1, 1}, {float(c)})));
  // input_forget couples the forget gate to the input gate: f = 1 - i.
  double c2 = (1 - i) * 2 + i * cc, o2 = sigm(0.2 + 0.3 + 0.06 * c2);
  auto out2 = ref({"LSTM", {X, W, R, NDArray{}, NDArray{}, h0, c0, P},
                            attrs({{"hidden_size", int64_t{1}}, {"input_forget", int64_t{1}}}), 3});
  EXPECT_TRUE(allClose(out2[2], arr<float>({1, 1, 1}, {float(c2)})));
  EXPECT_TRUE(allClose(out2[1], arr<float>({1, 1, 1}, {float(o2 * std::tanh(c2))})));
}

TEST(LSTM, MatchesNaiveModel) {
  for (const char* dir : {"forward", "reverse", "bidirectional"}) {
    SCOPED_TRACE(dir);
    Config c;
    c.cell = "LSTM";
    c.direction = dir;
    c.initialH = c.initialC = c.peepholes = c.seqLens = true;
    c.N = 3;
    c.S = 4;
    expectMatchesNaive(c);
  }
}

TEST(LSTM, InputForgetClipAndActivations) {
  Config c;
  c.cell = "LSTM";
  c.direction = "bidirectional";
  c.inputForget = true;
  c.peepholes = c.initialC = true;
  c.clip = 0.6f;
  c.activations = {"Sigmoid", "Elu", "ScaledTanh", "HardSigmoid", "Tanh", "Softplus"};
  c.alphas = {0.8f, 1.2f, 0.25f};
  c.betas = {0.9f, 0.45f};
  c.fns = {sigm, [](double x) { return x >= 0 ? x : 0.8 * (std::exp(x) - 1); },
           [](double x) { return 1.2 * std::tanh(0.9 * x); }, [](double x) { return std::clamp(0.25 * x + 0.45, 0.0, 1.0); },
           [](double x) { return std::tanh(x); }, [](double x) { return std::log1p(std::exp(x)); }};
  expectMatchesNaive(c);
}

TEST(LSTM, RejectsWrongPeepholes) {
  Config c;
  c.cell = "LSTM";
  Inputs in = makeInputs(c, 1);
  EXPECT_THROW(ref({"LSTM", {in.X, in.W, in.R, in.B, NDArray{}, NDArray{}, NDArray{},
                                      randomArray(DataType::Float, {1, 2 * c.H}, 3)},
                             attrsOf(c, 0), 3}),
               Error);
}

// ---- ai.graft LSTMTrain: an LSTM that also outputs Saved [D, S, N, 5H] -------------------------

TEST(Graft_LSTMTrain, SavesEachStepsGatesAndCellState) {
  // The peephole case above: Saved holds i, o, f, c~ and the new cell state c.
  NDArray X = arr<float>({1, 1, 1}, {1}), W = arr<float>({1, 4, 1}, {0.1f, 0.2f, 0.3f, 0.4f});
  NDArray R = arr<float>({1, 4, 1}, {0.5f, 0.6f, 0.7f, 0.8f}), P = arr<float>({1, 3}, {0.05f, 0.06f, 0.07f});
  NDArray h0 = arr<float>({1, 1, 1}, {0.5f}), c0 = arr<float>({1, 1, 1}, {2});
  double i = sigm(0.1 + 0.25 + 0.05 * 2), f = sigm(0.3 + 0.35 + 0.07 * 2), cc = std::tanh(0.4 + 0.4);
  double c = f * 2 + i * cc, o = sigm(0.2 + 0.3 + 0.06 * c), h = o * std::tanh(c);
  auto out = runReference(OpCase{
      "LSTMTrain", {X, W, R, NDArray{}, NDArray{}, h0, c0, P}, attrs({{"hidden_size", int64_t{1}}}), 4, "ai.graft"});
  ASSERT_EQ(out.size(), 4u);
  EXPECT_TRUE(allClose(out[0], arr<float>({1, 1, 1, 1}, {float(h)})));
  EXPECT_TRUE(allClose(out[2], arr<float>({1, 1, 1}, {float(c)})));
  EXPECT_TRUE(allClose(out[3], arr<float>({1, 1, 1, 5}, {float(i), float(o), float(f), float(cc), float(c)})));
}

TEST(Graft_LSTMTrain, OutputsAreTheLstmsAndPaddedStepsSaveZeros) {
  // Two directions, sequence_lens {3, 1}; S = 3, N = 2, I = 3, H = 2.
  const int64_t S = 3, N = 2, I = 3, H = 2;
  NDArray lens(DataType::Int32, {N});
  lens.data<int32_t>()[0] = 3;
  lens.data<int32_t>()[1] = 1;
  std::vector<NDArray> in{
      randomArray(DataType::Float, {S, N, I}, 1, -1, 1), randomArray(DataType::Float, {2, 4 * H, I}, 2, -1, 1),
      randomArray(DataType::Float, {2, 4 * H, H}, 3, -1, 1), randomArray(DataType::Float, {2, 8 * H}, 4, -1, 1), lens};
  ir::Attributes a = attrs({{"hidden_size", H}, {"direction", std::string("bidirectional")}});
  auto lstm = ref({"LSTM", in, a, 3});
  OpCase train{"LSTMTrain", in, a, 4, "ai.graft"};
  auto types = inferTypes(train);
  ASSERT_EQ(types.size(), 4u);
  EXPECT_EQ(types[3].info.shape(), (Shape{2, S, N, 5 * H}));
  auto out = runReference(train);
  for (size_t k = 0; k < 3; ++k) EXPECT_TRUE(allClose(out[k], lstm[k], 0, 0)) << "output " << k;
  ASSERT_EQ(out[3].shape(), (Shape{2, S, N, 5 * H}));
  // Batch element 1 has one step: its steps 1 and 2 save zeros, step 0 does not; the saved cell
  // state of its last step is Y_c.
  const float* sv = out[3].data<float>();
  for (int64_t d = 0; d < 2; ++d)
    for (int64_t t = 0; t < S; ++t) {
      const float* row = sv + ((d * S + t) * N + 1) * 5 * H;
      bool allZero = std::all_of(row, row + 5 * H, [](float v) { return v == 0.0f; });
      EXPECT_EQ(allZero, t > 0) << "direction " << d << " step " << t;
    }
  for (int64_t d = 0; d < 2; ++d)
    for (int64_t j = 0; j < H; ++j)
      EXPECT_EQ(sv[((d * S + 0) * N + 1) * 5 * H + 4 * H + j], lstm[2].data<float>()[(d * N + 1) * H + j]);
}

TEST(Graft_LSTMTrain, RejectsInputsOfTheWrongRank) {
  OpCase c{"LSTMTrain",
           {randomArray(DataType::Float, {3, 4}, 1), randomArray(DataType::Float, {1, 8, 4}, 2),
            randomArray(DataType::Float, {1, 8, 2}, 3)},
           attrs({{"hidden_size", int64_t{2}}}),
           4,
           "ai.graft"};
  try {
    inferTypes(c);
    ADD_FAILURE() << "no error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("X, W and R must be rank-3 tensors"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace graft::testing
