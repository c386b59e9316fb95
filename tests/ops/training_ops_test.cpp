// Tests of src/ops/training_ops.cpp: the ai.onnx.preview.training optimizers Adagrad, Adam and
// Momentum, against the update rules of the ONNX specification worked out by hand.
#include <cmath>

#include "op_test_util.hpp"

namespace graft::testing {
namespace {

const char* kDomain = "ai.onnx.preview.training";

std::vector<NDArray> run(const std::string& type, std::vector<NDArray> in, ir::Attributes a, int nout) {
  return runReference(OpCase{type, std::move(in), std::move(a), nout, kDomain});
}

NDArray f1(double v) { return arr<float>({1}, {static_cast<float>(v)}); }

// ---- Adagrad ------------------------------------------------------------------------------------

TEST(Training_Adagrad, OneTensor) {
  auto a = attrs({{"decay_factor", 0.1f}, {"epsilon", 1e-5f}, {"norm_coefficient", 0.001f}});
  for (int64_t t : {0, 10}) {
    auto out = run("Adagrad", {scalar<float>(0.1f), scalar<int64_t>(t), f1(1), f1(-1), f1(2)}, a, 2);
    double r = 0.1 / (1 + t * 0.1), g = 0.001 * 1 - 1, h = 2 + g * g;
    EXPECT_TRUE(allClose(out[0], f1(1 - r * g / (std::sqrt(h) + 1e-5))));
    EXPECT_TRUE(allClose(out[1], f1(h)));
  }
}

TEST(Training_Adagrad, SeveralTensorsKeepTheirShapes) {
  auto x2 = arr<double>({2, 2}, {1, 2, 3, 4}), g2 = arr<double>({2, 2}, {0.5, -0.5, 1, 0}), h2 = arr<double>({2, 2}, {0, 1, 0, 1});
  auto out = run("Adagrad", {scalar<double>(1), scalar<int64_t>(0), arr<double>({1}, {5}), x2, arr<double>({1}, {2}), g2,
                             arr<double>({1}, {0}), h2},
                 attrs({{"epsilon", 0.0f}}), 4);
  // X - g / sqrt(H + g^2), H + g^2 (no decay, no regularisation).
  EXPECT_TRUE(allClose(out[0], arr<double>({1}, {4}), 1e-12));
  EXPECT_TRUE(allClose(out[1], arr<double>({2, 2}, {1 - 0.5 / 0.5, 2 + 0.5 / std::sqrt(1.25), 3 - 1, 4}), 1e-12));
  EXPECT_TRUE(allClose(out[2], arr<double>({1}, {4}), 1e-12));
  EXPECT_TRUE(allClose(out[3], arr<double>({2, 2}, {0.25, 1.25, 1, 1}), 1e-12));
}

TEST(Training_Adagrad, RejectsMismatchedInputs) {
  // G's shape differs from X's.
  EXPECT_THROW(run("Adagrad", {scalar<float>(0.1f), scalar<int64_t>(0), f1(1), arr<float>({2}, {1, 2}), f1(0)}, {}, 2), Error);
  // Four tensors after R and T is not a whole number of (X, G, H) triples.
  EXPECT_THROW(run("Adagrad", {scalar<float>(0.1f), scalar<int64_t>(0), f1(1), f1(1), f1(1), f1(1)}, {}, 2), Error);
  // T must be INT64.
  EXPECT_THROW(run("Adagrad", {scalar<float>(0.1f), scalar<int32_t>(0), f1(1), f1(1), f1(1)}, {}, 2), Error);
  // X and H of different types.
  EXPECT_THROW(run("Adagrad", {scalar<float>(0.1f), scalar<int64_t>(0), f1(1), f1(1), arr<double>({1}, {1})}, {}, 2), Error);
}

// ---- Adam ---------------------------------------------------------------------------------------

struct AdamStep {
  double x, v, h;
};
AdamStep adam(double r, int64_t t, double x, double g, double v, double h, double alpha, double beta, double eps, double norm,
              double post) {
  g += norm * x;
  v = alpha * v + (1 - alpha) * g;
  h = beta * h + (1 - beta) * g * g;
  double rr = t > 0 ? r * std::sqrt(1 - std::pow(beta, double(t))) / (1 - std::pow(alpha, double(t))) : r;
  return {(1 - post) * (x - rr * v / (std::sqrt(h) + eps)), v, h};
}

TEST(Training_Adam, FirstStepAndBiasCorrection) {
  auto a = attrs({{"alpha", 0.95f}, {"beta", 0.1f}, {"epsilon", 1e-7f}, {"norm_coefficient", 0.001f}});
  for (int64_t t : {0, 3}) {
    SCOPED_TRACE(t);
    auto out = run("Adam", {scalar<float>(0.1f), scalar<int64_t>(t), arr<float>({2}, {1.2f, 2.8f}), arr<float>({2}, {-0.94f, -2.5f}),
                            arr<float>({2}, {1.7f, 3.6f}), arr<float>({2}, {0.1f, 0.1f})},
                   a, 3);
    AdamStep s0 = adam(0.1, t, 1.2, -0.94, 1.7, 0.1, 0.95f, 0.1f, 1e-7f, 0.001f, 0);
    AdamStep s1 = adam(0.1, t, 2.8, -2.5, 3.6, 0.1, 0.95f, 0.1f, 1e-7f, 0.001f, 0);
    EXPECT_TRUE(allClose(out[0], arr<float>({2}, {float(s0.x), float(s1.x)})));
    EXPECT_TRUE(allClose(out[1], arr<float>({2}, {float(s0.v), float(s1.v)})));
    EXPECT_TRUE(allClose(out[2], arr<float>({2}, {float(s0.h), float(s1.h)})));
  }
}

TEST(Training_Adam, DefaultsAndPostNormalisation) {
  // Defaults alpha 0.9, beta 0.999, epsilon 1e-6; norm_coefficient_post shrinks the result.
  auto out = run("Adam", {scalar<double>(0.5), scalar<int64_t>(1), arr<double>({1}, {2}), arr<double>({1}, {1}), arr<double>({1}, {0}),
                          arr<double>({1}, {0})},
                 attrs({{"norm_coefficient_post", 0.25f}}), 3);
  AdamStep s = adam(0.5, 1, 2, 1, 0, 0, 0.9f, 0.999f, 1e-6f, 0, 0.25f);
  EXPECT_TRUE(allClose(out[0], arr<double>({1}, {s.x}), 1e-12));
  EXPECT_TRUE(allClose(out[1], arr<double>({1}, {s.v}), 1e-12));
  EXPECT_TRUE(allClose(out[2], arr<double>({1}, {s.h}), 1e-12));
}

TEST(Training_Adam, SeveralTensors) {
  auto a = attrs({{"alpha", 0.95f}, {"beta", 0.85f}, {"epsilon", 1e-2f}, {"norm_coefficient", 0.001f}});
  auto out = run("Adam", {scalar<float>(0.1f), scalar<int64_t>(0), f1(1), arr<float>({2}, {1, 2}), f1(-1), arr<float>({2}, {-1, -3}),
                          f1(2), arr<float>({2}, {4, 1}), f1(0.5), arr<float>({2}, {1, 10})},
                 a, 6);
  auto s = [&](double x, double g, double v, double h) { return adam(0.1, 0, x, g, v, h, 0.95f, 0.85f, 1e-2f, 0.001f, 0); };
  EXPECT_TRUE(allClose(out[0], f1(s(1, -1, 2, 0.5).x)));
  EXPECT_TRUE(allClose(out[1], arr<float>({2}, {float(s(1, -1, 4, 1).x), float(s(2, -3, 1, 10).x)})));
  EXPECT_TRUE(allClose(out[3], arr<float>({2}, {float(s(1, -1, 4, 1).v), float(s(2, -3, 1, 10).v)})));
  EXPECT_TRUE(allClose(out[5], arr<float>({2}, {float(s(1, -1, 4, 1).h), float(s(2, -3, 1, 10).h)})));
}

TEST(Training_Adam, RejectsWrongOutputCount) {
  EXPECT_THROW(run("Adam", {scalar<float>(0.1f), scalar<int64_t>(0), f1(1), f1(1), f1(1), f1(1)}, {}, 2), Error);
}

// ---- Momentum -----------------------------------------------------------------------------------

ir::Attributes momentum(const std::string& mode) {
  return attrs({{"alpha", 0.95f}, {"beta", 0.1f}, {"mode", mode}, {"norm_coefficient", 0.001f}});
}

TEST(Training_Momentum, StandardAndNesterov) {
  for (int64_t t : {0, 2})
    for (const char* mode : {"standard", "nesterov"}) {
      SCOPED_TRACE(std::string(mode) + " T=" + std::to_string(t));
      auto out = run("Momentum", {scalar<float>(0.1f), scalar<int64_t>(t), f1(1.2), f1(-0.94), f1(1.7)}, momentum(mode), 2);
      double g = -0.94 + 0.001f * 1.2, b = t > 0 ? double(0.1f) : 1.0, v = double(0.95f) * 1.7 + b * g;
      double x = std::string(mode) == "standard" ? 1.2 - 0.1 * v : 1.2 - 0.1 * (g + double(0.95f) * v);
      EXPECT_TRUE(allClose(out[0], f1(x)));
      EXPECT_TRUE(allClose(out[1], f1(v)));
    }
}

TEST(Training_Momentum, SeveralTensorsInDouble) {
  auto out = run("Momentum", {scalar<double>(1), scalar<int64_t>(1), arr<double>({1}, {1}), arr<double>({2}, {1, 2}),
                              arr<double>({1}, {1}), arr<double>({2}, {2, 4}), arr<double>({1}, {0}), arr<double>({2}, {1, 1})},
                 attrs({{"alpha", 0.5f}, {"beta", 0.5f}, {"mode", std::string("standard")}, {"norm_coefficient", 0.0f}}), 4);
  // V = 0.5 V + 0.5 G; X = X - V.
  EXPECT_TRUE(allClose(out[0], arr<double>({1}, {0.5}), 1e-12));
  EXPECT_TRUE(allClose(out[1], arr<double>({2}, {-0.5, -0.5}), 1e-12));
  EXPECT_TRUE(allClose(out[2], arr<double>({1}, {0.5}), 1e-12));
  EXPECT_TRUE(allClose(out[3], arr<double>({2}, {1.5, 2.5}), 1e-12));
}

TEST(Training_Momentum, RejectsBadModeAndMissingAttributes) {
  std::vector<NDArray> in = {scalar<float>(0.1f), scalar<int64_t>(0), f1(1), f1(1), f1(1)};
  EXPECT_THROW(run("Momentum", in, momentum("heavy-ball"), 2), Error);
  EXPECT_THROW(run("Momentum", in, attrs({{"mode", std::string("standard")}}), 2), Error);  // alpha, beta required
  EXPECT_THROW(run("Momentum", {scalar<float>(0.1f), scalar<int64_t>(0), f1(1), f1(1), arr<float>({2}, {1, 1})}, momentum("standard"), 2),
               Error);
}

}  // namespace
}  // namespace graft::testing
