// Gradients (VJPs) of src/ops/rnn.cpp (RNN, GRU, LSTM) against central finite differences in
// float64, for every direction, both layouts, sequence_lens, initial states, peepholes, biases
// absent, linear_before_reset, clipping and other activations; and the gradient ops of
// src/ops/rnn_grad.cpp (ai.graft RNNGrad, GRUGrad, LSTMGrad) against hand-computed values.
#include <cmath>

#include "op_test_util.hpp"
#include "ops/infer.hpp"

namespace graft::testing {
namespace {

struct Config {
  std::string cell = "RNN";  // RNN, GRU, LSTM
  std::string direction = "forward";
  int64_t S = 3, N = 2, I = 2, H = 2;
  int64_t layout = 0;
  bool bias = true, initialH = true, initialC = true, peepholes = true, seqLens = false;
  int64_t linearBeforeReset = 0, inputForget = 0;
  std::optional<float> clip;
  std::vector<std::string> activations;
  int outputs = 0;  // 0: all of them
};

int64_t gatesOf(const std::string& cell) { return cell == "RNN" ? 1 : cell == "GRU" ? 3 : 4; }

NDArray rnd(Shape s, uint64_t seed, double lo = -1.0, double hi = 1.0) {
  return randomArray(DataType::Double, std::move(s), seed, lo, hi);
}

// The case and the indices of the inputs that are present and differentiable.
std::pair<OpCase, std::vector<int>> makeCase(const Config& c, uint64_t seed = 1) {
  const int64_t D = c.direction == "bidirectional" ? 2 : 1, G = gatesOf(c.cell);
  const bool lstm = c.cell == "LSTM";
  OpCase o;
  o.type = c.cell;
  o.inputs.resize(lstm ? 8 : 6);
  Shape xShape = c.layout ? Shape{c.N, c.S, c.I} : Shape{c.S, c.N, c.I};
  Shape state = c.layout ? Shape{c.N, D, c.H} : Shape{D, c.N, c.H};
  o.inputs[0] = rnd(xShape, seed);
  o.inputs[1] = rnd({D, G * c.H, c.I}, seed + 1, -0.8, 0.8);
  o.inputs[2] = rnd({D, G * c.H, c.H}, seed + 2, -0.8, 0.8);
  std::vector<int> wrt{0, 1, 2};
  if (c.bias) {
    o.inputs[3] = rnd({D, 2 * G * c.H}, seed + 3, -0.5, 0.5);
    wrt.push_back(3);
  }
  if (c.seqLens) {
    NDArray seq(DataType::Int32, {c.N});
    // Lengths S, S-1, ..., at least 1, and a 0 for a fourth batch element.
    for (int64_t b = 0; b < c.N; ++b)
      seq.data<int32_t>()[b] = static_cast<int32_t>(b == 3 ? 0 : std::max<int64_t>(1, c.S - b));
    o.inputs[4] = seq;
  }
  if (c.initialH) {
    o.inputs[5] = rnd(state, seed + 4);
    wrt.push_back(5);
  }
  if (lstm && c.initialC) {
    o.inputs[6] = rnd(state, seed + 5);
    wrt.push_back(6);
  }
  if (lstm && c.peepholes) {
    o.inputs[7] = rnd({D, 3 * c.H}, seed + 6);
    wrt.push_back(7);
  }
  // Trailing absent inputs are dropped, as an importer would.
  while (!o.inputs.back().valid()) o.inputs.pop_back();
  o.attrs = attrs({{"hidden_size", c.H}, {"direction", c.direction}, {"layout", c.layout}});
  if (c.cell == "GRU") o.attrs.set("linear_before_reset", c.linearBeforeReset);
  if (lstm) o.attrs.set("input_forget", c.inputForget);
  if (c.clip) o.attrs.set("clip", *c.clip);
  if (!c.activations.empty()) o.attrs.set("activations", c.activations);
  o.numOutputs = c.outputs ? c.outputs : (lstm ? 3 : 2);
  return {o, wrt};
}

::testing::AssertionResult check(const Config& c) {
  auto [o, wrt] = makeCase(c);
  return gradCheck(o, wrt);
}

std::string describe(const Config& c) {
  return c.cell + " " + c.direction + " layout=" + std::to_string(c.layout) + " bias=" + std::to_string(c.bias) +
         " h0=" + std::to_string(c.initialH) + " seq=" + std::to_string(c.seqLens) +
         " lbr=" + std::to_string(c.linearBeforeReset) + " outputs=" + std::to_string(c.outputs);
}

// Every cell through the same variants.
void checkVariants(const std::string& cell) {
  for (std::string dir : {"forward", "reverse", "bidirectional"})
    for (int64_t layout : {0, 1}) {
      Config c;
      c.cell = cell;
      c.direction = dir;
      c.layout = layout;
      EXPECT_TRUE(check(c)) << describe(c);
    }
  Config c;
  c.cell = cell;
  c.direction = "bidirectional";
  c.seqLens = true;
  c.N = 4;  // lengths 3, 2, 1, 0
  EXPECT_TRUE(check(c)) << describe(c);
  c.layout = 1;
  EXPECT_TRUE(check(c)) << describe(c);
  Config bare;
  bare.cell = cell;
  bare.bias = bare.initialH = bare.initialC = bare.peepholes = false;
  EXPECT_TRUE(check(bare)) << describe(bare);
  // Only Y (no gradient reaches Y_h) and only Y, Y_h of an LSTM.
  for (int outputs : {1, 2}) {
    Config part;
    part.cell = cell;
    part.direction = "reverse";
    part.outputs = outputs;
    EXPECT_TRUE(check(part)) << describe(part);
  }
}

TEST(RNN, Gradient) { checkVariants("RNN"); }

TEST(RNN, GradientWithClipAndActivations) {
  Config c;
  c.direction = "bidirectional";
  c.activations = {"Softsign", "ScaledTanh"};
  EXPECT_TRUE(check(c));
  c.activations = {};
  c.clip = 0.7f;  // some gate inputs are clipped, none lies within eps of the clip
  EXPECT_TRUE(check(c));
}

TEST(GRU, Gradient) { checkVariants("GRU"); }

TEST(GRU, GradientLinearBeforeReset) {
  for (std::string dir : {"forward", "bidirectional"})
    for (int64_t layout : {0, 1}) {
      Config c;
      c.cell = "GRU";
      c.linearBeforeReset = 1;
      c.direction = dir;
      c.layout = layout;
      c.seqLens = dir == "bidirectional";
      EXPECT_TRUE(check(c)) << describe(c);
    }
  Config bare;
  bare.cell = "GRU";
  bare.linearBeforeReset = 1;
  bare.bias = bare.initialH = false;
  EXPECT_TRUE(check(bare));
}

TEST(GRU, GradientWithClipAndActivations) {
  Config c;
  c.cell = "GRU";
  c.activations = {"HardSigmoid", "Softplus"};
  EXPECT_TRUE(check(c));
  c.activations = {};
  c.clip = 0.6f;
  c.linearBeforeReset = 1;
  EXPECT_TRUE(check(c));
}

TEST(LSTM, Gradient) { checkVariants("LSTM"); }

TEST(LSTM, GradientWithoutPeepholesOrInitialC) {
  Config c;
  c.cell = "LSTM";
  c.peepholes = false;
  EXPECT_TRUE(check(c));
  c.peepholes = true;
  c.initialC = false;
  c.direction = "bidirectional";
  EXPECT_TRUE(check(c));
}

TEST(LSTM, GradientInputForgetClipAndActivations) {
  Config c;
  c.cell = "LSTM";
  c.inputForget = 1;
  EXPECT_TRUE(check(c));
  c.inputForget = 0;
  c.activations = {"Sigmoid", "Elu", "Softsign"};
  EXPECT_TRUE(check(c));
  c.activations = {};
  c.clip = 0.8f;
  c.direction = "bidirectional";
  EXPECT_TRUE(check(c));
}

TEST(LSTM, GradientOfYcOnlyAndOfFedInputs) {
  // Y_h and Y_c weighted, Y not: the gradient op gets no dY.
  Config lstm;
  lstm.cell = "LSTM";
  auto [o, wrt] = makeCase(lstm);
  std::vector<NDArray> dys{NDArray(), rnd({1, 2, 2}, 7), rnd({1, 2, 2}, 8)};
  auto got = vjpOf(o, {0, 6, 7}, dys);
  // Central differences of sum(Y_h * dys[1] + Y_c * dys[2]) through the reference kernel.
  auto loss = [&](const OpCase& c) {
    auto outs = runReference(c);
    double s = 0;
    for (int k = 1; k <= 2; ++k)
      for (int64_t e = 0; e < outs[k].numel(); ++e) s += outs[k].data<double>()[e] * dys[k].data<double>()[e];
    return s;
  };
  int which = 0;
  for (int i : {0, 6, 7}) {
    for (int64_t e = 0; e < o.inputs[i].numel(); ++e) {
      OpCase plus = o, minus = o;
      plus.inputs[i] = o.inputs[i].clone();
      minus.inputs[i] = o.inputs[i].clone();
      plus.inputs[i].data<double>()[e] += 1e-6;
      minus.inputs[i].data<double>()[e] -= 1e-6;
      double numeric = (loss(plus) - loss(minus)) / 2e-6;
      EXPECT_NEAR(got[which].data<double>()[e], numeric, 1e-7) << "input " << i << " element " << e;
    }
    ++which;
  }
  // Every input fed at run time (sequence_lens too).
  Config c;
  c.cell = "GRU";
  c.direction = "bidirectional";
  c.seqLens = true;
  auto [g, gw] = makeCase(c);
  EXPECT_TRUE(gradCheckFed(g, gw));
}

// ---- the gradient ops ---------------------------------------------------------------------------

OpCase gradCase(const std::string& type, std::vector<NDArray> inputs, int outputs) {
  return OpCase{type, std::move(inputs), attrs({{"hidden_size", int64_t{1}}}), outputs, "ai.graft"};
}

TEST(Graft_RNNGrad, HandComputedOneStep) {
  // h = tanh(w x + r h0 + wb + rb), with dY_h = 1 and no dY.
  double x = 0.5, w = 0.3, r = -0.7, wb = 0.1, rb = 0.2, h0 = 0.4;
  double h = std::tanh(w * x + r * h0 + wb + rb), da = 1 - h * h;
  auto outs = runReference(
      gradCase("RNNGrad",
               {NDArray(), arr<double>({1, 1, 1}, {1.0}), arr<double>({1, 1, 1}, {x}), arr<double>({1, 1, 1}, {w}),
                arr<double>({1, 1, 1}, {r}), arr<double>({1, 2}, {wb, rb}), NDArray(), arr<double>({1, 1, 1}, {h0})},
               5));
  ASSERT_EQ(outs.size(), 5u);
  EXPECT_TRUE(allClose(outs[0], arr<double>({1, 1, 1}, {w * da}), 1e-12, 1e-14));
  EXPECT_TRUE(allClose(outs[1], arr<double>({1, 1, 1}, {x * da}), 1e-12, 1e-14));
  EXPECT_TRUE(allClose(outs[2], arr<double>({1, 1, 1}, {h0 * da}), 1e-12, 1e-14));
  EXPECT_TRUE(allClose(outs[3], arr<double>({1, 2}, {da, da}), 1e-12, 1e-14));
  EXPECT_TRUE(allClose(outs[4], arr<double>({1, 1, 1}, {r * da}), 1e-12, 1e-14));
}

TEST(Graft_RNNGrad, RejectsMismatchedGradient) {
  OpCase c = gradCase("RNNGrad",
                      {arr<float>({2, 1, 1, 1}, {1, 1}), NDArray(), arr<float>({1, 1, 1}, {1}),
                       arr<float>({1, 1, 1}, {1}), arr<float>({1, 1, 1}, {1})},
                      5);
  EXPECT_THROW(runReference(c), Error);
}

TEST(Graft_GRUGrad, HandComputedOneStep) {
  // With W = R = 0 and biases b: z = r = sigmoid(bz), hh = tanh(bh); h = (1 - z) hh + z h0.
  // Only dY_h = 1: dh0 = z (R is 0), dB of z's rows = (h0 - hh) z (1 - z), of h's rows
  // (1 - z)(1 - hh^2); r's rows get nothing (R_h is 0).
  double bz = 0.3, bh = -0.2, h0 = 0.6;
  double z = 1 / (1 + std::exp(-bz)), hh = std::tanh(bh);
  auto outs =
      runReference(gradCase("GRUGrad",
                            {NDArray(), arr<double>({1, 1, 1}, {1.0}), arr<double>({1, 1, 1}, {0.5}),
                             arr<double>({1, 3, 1}, {0, 0, 0}), arr<double>({1, 3, 1}, {0, 0, 0}),
                             arr<double>({1, 6}, {bz, 0, bh, 0, 0, 0}), NDArray(), arr<double>({1, 1, 1}, {h0})},
                            5));
  double dz = (h0 - hh) * z * (1 - z), dh = (1 - z) * (1 - hh * hh);
  EXPECT_TRUE(allClose(outs[3], arr<double>({1, 6}, {dz, 0, dh, dz, 0, dh}), 1e-12, 1e-14));
  EXPECT_TRUE(allClose(outs[4], arr<double>({1, 1, 1}, {z}), 1e-12, 1e-14));
  // dW = dB(W rows) * x; dR of z = dz * h0, of r = 0, of h = dh * (r h0).
  EXPECT_TRUE(allClose(outs[1], arr<double>({1, 3, 1}, {dz * 0.5, 0, dh * 0.5}), 1e-12, 1e-14));
  double rg = 1 / (1 + std::exp(-0.0));
  EXPECT_TRUE(allClose(outs[2], arr<double>({1, 3, 1}, {dz * h0, 0, dh * rg * h0}), 1e-12, 1e-14));
}

TEST(Graft_LSTMGrad, HandComputedOneStep) {
  // W = R = 0, no peepholes: i, o, f, c~ are functions of the biases only; c = f c0 + i c~,
  // h = o tanh(c). With dY_c = 1 only: dc0 = f, and nothing reaches h0.
  double bi = 0.1, bo = 0.2, bf = 0.3, bc = 0.4, c0 = -0.5;
  auto s = [](double v) { return 1 / (1 + std::exp(-v)); };
  double i = s(bi), f = s(bf), cc = std::tanh(bc);
  auto outs = runReference(gradCase("LSTMGrad",
                                    {NDArray(), NDArray(), arr<double>({1, 1, 1}, {1.0}), arr<double>({1, 1, 1}, {0.5}),
                                     arr<double>({1, 4, 1}, {0, 0, 0, 0}), arr<double>({1, 4, 1}, {0, 0, 0, 0}),
                                     arr<double>({1, 8}, {bi, bo, bf, bc, 0, 0, 0, 0}), NDArray(),
                                     arr<double>({1, 1, 1}, {0.0}), arr<double>({1, 1, 1}, {c0})},
                                    7));
  ASSERT_EQ(outs.size(), 7u);
  EXPECT_TRUE(allClose(outs[5], arr<double>({1, 1, 1}, {f}), 1e-12, 1e-14));
  EXPECT_TRUE(allClose(outs[4], arr<double>({1, 1, 1}, {0.0}), 1e-12, 1e-14));
  double di = cc * i * (1 - i), df = c0 * f * (1 - f), dc = i * (1 - cc * cc);
  EXPECT_TRUE(allClose(outs[3], arr<double>({1, 8}, {di, 0, df, dc, di, 0, df, dc}), 1e-12, 1e-14));
  EXPECT_TRUE(allClose(outs[6], arr<double>({1, 3}, {0, 0, 0}), 1e-12, 1e-14));
}

TEST(Graft_LSTMGrad, InfersGradientTypesOfAbsentInputs) {
  // No B, initial states or P: their gradients are shaped as they would be.
  OpCase c{"LSTMGrad",
           {rnd({3, 1, 2, 4}, 1), NDArray(), NDArray(), rnd({3, 2, 5}, 2), rnd({1, 16, 5}, 3), rnd({1, 16, 4}, 4)},
           attrs({{"hidden_size", int64_t{4}}}),
           7,
           "ai.graft"};
  auto types = inferTypes(c);
  ASSERT_EQ(types.size(), 7u);
  EXPECT_EQ(types[3].info.shape(), (Shape{1, 32}));
  EXPECT_EQ(types[4].info.shape(), (Shape{1, 2, 4}));
  EXPECT_EQ(types[5].info.shape(), (Shape{1, 2, 4}));
  EXPECT_EQ(types[6].info.shape(), (Shape{1, 12}));
  auto outs = runReference(c);
  for (size_t k = 0; k < 7; ++k) EXPECT_EQ(outs[k].shape(), types[k].info.shape()) << "output " << k;
}

}  // namespace
}  // namespace graft::testing
