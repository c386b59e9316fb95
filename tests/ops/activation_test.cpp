// Tests of src/ops/activation.cpp. Expected values come from the formulas written out here in
// double, independently of the kernels.
#include <cmath>
#include <functional>

#include "op_case_util.hpp"
#include "op_test_util.hpp"

namespace graft::testing {
namespace {

NDArray run1(const std::string& type, std::vector<NDArray> in, ir::Attributes a = {}, const std::string& domain = "") {
  OpCase c;
  c.type = type;
  c.inputs = std::move(in);
  c.attrs = std::move(a);
  c.domain = domain;
  return runReference(c).at(0);
}

const std::vector<double> kXs = {-3.0, -1.0, -0.25, 0.0, 0.5, 2.0, 10.0};

// Runs `type` on kXs (float and double) and compares with f applied in double.
void checkAgainst(const std::string& type, const std::function<double(double)>& f, ir::Attributes a = {},
                  const std::string& domain = "") {
  NDArray xf(DataType::Float, {static_cast<int64_t>(kXs.size())}), xd(DataType::Double, xf.shape());
  NDArray wf(DataType::Float, xf.shape()), wd(DataType::Double, xf.shape());
  for (size_t i = 0; i < kXs.size(); ++i) {
    xf.data<float>()[i] = static_cast<float>(kXs[i]);
    xd.data<double>()[i] = kXs[i];
    wf.data<float>()[i] = static_cast<float>(f(kXs[i]));
    wd.data<double>()[i] = f(kXs[i]);
  }
  EXPECT_TRUE(allClose(run1(type, {xf}, a, domain), wf, 1e-5, 1e-6)) << type << " float";
  EXPECT_TRUE(allClose(run1(type, {xd}, a, domain), wd, 1e-12, 1e-14)) << type << " double";
}

TEST(Relu, FloatsAndIntegers) {
  checkAgainst("Relu", [](double x) { return x > 0 ? x : 0; });
  EXPECT_TRUE(allClose(run1("Relu", {arr<int32_t>({3}, {-5, 0, 7})}), arr<int32_t>({3}, {0, 0, 7})));
  EXPECT_THROW(run1("Relu", {arr<bool>({1}, {true})}), Error);
}

TEST(Sigmoid, StableAtBothEnds) {
  checkAgainst("Sigmoid", [](double x) { return 1 / (1 + std::exp(-x)); });
  auto y = run1("Sigmoid", {arr<float>({2}, {-200, 200})});
  EXPECT_TRUE(allClose(y, arr<float>({2}, {0, 1})));
}

TEST(Tanh, MatchesFormula) { checkAgainst("Tanh", [](double x) { return std::tanh(x); }); }

TEST(LeakyRelu, DefaultAndCustomAlpha) {
  // Attributes are float: the kernels use 0.01f, not 0.01.
  checkAgainst("LeakyRelu", [](double x) { return x >= 0 ? x : double(0.01f) * x; }, {});
  float a = 0.5f;
  checkAgainst("LeakyRelu", [](double x) { return x >= 0 ? x : 0.5 * x; }, attrs({{"alpha", a}}));
}

TEST(Elu, DefaultAndCustomAlpha) {
  checkAgainst("Elu", [](double x) { return x >= 0 ? x : std::exp(x) - 1; });
  float a = 2.0f;
  checkAgainst("Elu", [](double x) { return x >= 0 ? x : 2 * (std::exp(x) - 1); }, attrs({{"alpha", a}}));
}

TEST(Selu, DefaultConstants) {
  const double alpha = 1.67326319217681884765625, gamma = 1.05070102214813232421875;
  checkAgainst("Selu", [&](double x) { return gamma * (x > 0 ? x : alpha * (std::exp(x) - 1)); });
  float a = 2.0f, g = 3.0f;
  checkAgainst("Selu", [](double x) { return 3 * (x > 0 ? x : 2 * (std::exp(x) - 1)); }, attrs({{"alpha", a}, {"gamma", g}}));
}

TEST(Celu, AlphaScalesTheNegativeSide) {
  float a = 2.0f;
  checkAgainst("Celu", [](double x) { return std::max(0.0, x) + std::min(0.0, 2 * (std::exp(x / 2) - 1)); },
               attrs({{"alpha", a}}));
  float zero = 0.0f;
  EXPECT_THROW(run1("Celu", {arr<float>({1}, {1})}, attrs({{"alpha", zero}})), Error);
}

TEST(HardSigmoid, ClampsToZeroOne) {
  checkAgainst("HardSigmoid", [](double x) { return std::clamp(double(0.2f) * x + 0.5, 0.0, 1.0); });
  float a = 0.5f, b = 0.25f;
  checkAgainst("HardSigmoid", [](double x) { return std::clamp(0.5 * x + 0.25, 0.0, 1.0); }, attrs({{"alpha", a}, {"beta", b}}));
}

TEST(HardSwish, MatchesFormula) {
  checkAgainst("HardSwish", [](double x) { return x * std::clamp(x / 6 + 0.5, 0.0, 1.0); });
}

TEST(Softplus, NoOverflowForLargeInputs) {
  checkAgainst("Softplus", [](double x) { return std::log1p(std::exp(x)); });
  EXPECT_TRUE(allClose(run1("Softplus", {arr<float>({1}, {1000})}), arr<float>({1}, {1000})));
}

TEST(Softsign, MatchesFormula) { checkAgainst("Softsign", [](double x) { return x / (1 + std::abs(x)); }); }

TEST(ThresholdedRelu, StrictThreshold) {
  checkAgainst("ThresholdedRelu", [](double x) { return x > 1 ? x : 0; });
  float a = 0.5f;
  EXPECT_TRUE(allClose(run1("ThresholdedRelu", {arr<float>({3}, {0.5f, 0.6f, -1})}, attrs({{"alpha", a}})),
                       arr<float>({3}, {0, 0.6f, 0})));
}

TEST(Graphcore_Gelu, TanhApproximationAsPopART) {
  checkAgainst("Gelu", [](double x) {
    return 0.5 * x * (1 + std::tanh(std::sqrt(2 / M_PI) * (x + 0.044715 * x * x * x)));
  }, {}, "ai.graphcore");
}

TEST(PRelu, SlopeBroadcastsOneWay) {
  auto x = arr<float>({2, 3}, {-1, 2, -3, -4, 5, -6});
  EXPECT_TRUE(allClose(run1("PRelu", {x, arr<float>({3}, {0.1f, 0.2f, 0.3f})}), arr<float>({2, 3}, {-0.1f, 2, -0.9f, -0.4f, 5, -1.8f})));
  EXPECT_TRUE(allClose(run1("PRelu", {x, arr<float>({2, 1}, {1, 2})}), arr<float>({2, 3}, {-1, 2, -3, -8, 5, -12})));
  EXPECT_TRUE(allClose(run1("PRelu", {x, scalar<float>(0)}), arr<float>({2, 3}, {0, 2, 0, 0, 5, 0})));
  // The output always has X's shape: a slope that would enlarge it is rejected.
  EXPECT_THROW(run1("PRelu", {arr<float>({3}, {1, 2, 3}), arr<float>({2, 3}, {1, 1, 1, 1, 1, 1})}), Error);
  EXPECT_THROW(run1("PRelu", {x, arr<double>({3}, {1, 1, 1})}), Error);
}

TEST(PRelu, IntegerTypes) {
  EXPECT_TRUE(allClose(run1("PRelu", {arr<int32_t>({2}, {-3, 4}), arr<int32_t>({1}, {2})}), arr<int32_t>({2}, {-6, 4})));
  EXPECT_TRUE(allClose(run1("PRelu", {arr<uint32_t>({2}, {3, 4}), arr<uint32_t>({1}, {2})}), arr<uint32_t>({2}, {3, 4})));
}

TEST(Clip, MinMaxAndOmittedBounds) {
  auto x = arr<float>({5}, {-5, -1, 0, 1, 5});
  EXPECT_TRUE(allClose(run1("Clip", {x, scalar<float>(-2), scalar<float>(2)}), arr<float>({5}, {-2, -1, 0, 1, 2})));
  EXPECT_TRUE(allClose(run1("Clip", {x, NDArray{}, scalar<float>(0)}), arr<float>({5}, {-5, -1, 0, 0, 0})));
  EXPECT_TRUE(allClose(run1("Clip", {x, scalar<float>(0)}), arr<float>({5}, {0, 0, 0, 1, 5})));
  EXPECT_TRUE(allClose(run1("Clip", {x}), x));
}

TEST(Clip, MinAboveMaxGivesMaxAndNaNPasses) {
  EXPECT_TRUE(allClose(run1("Clip", {arr<float>({3}, {-5, 0, NAN}), scalar<float>(2), scalar<float>(1)}),
                       arr<float>({3}, {1, 1, NAN})));
}

// NaN propagates as IEEE 754 and torch say (issue 16: Relu, HardSigmoid and ThresholdedRelu
// used to turn it into 0, 1 and 0).
TEST(Relu, NaNPropagates) {
  EXPECT_TRUE(allClose(run1("Relu", {arr<float>({4}, {NAN, -1, 2, -INFINITY})}), arr<float>({4}, {NAN, 0, 2, 0})));
}

TEST(HardSigmoid, NaNPropagates) {
  EXPECT_TRUE(allClose(run1("HardSigmoid", {arr<float>({3}, {NAN, -100, 100})}), arr<float>({3}, {NAN, 0, 1})));
}

TEST(ThresholdedRelu, NaNPropagates) {
  EXPECT_TRUE(allClose(run1("ThresholdedRelu", {arr<float>({3}, {NAN, 0.5f, 2})}), arr<float>({3}, {NAN, 0, 2})));
}

TEST(Clip, IntegersAndBadBounds) {
  EXPECT_TRUE(allClose(run1("Clip", {arr<int64_t>({3}, {-9, 3, 9}), scalar<int64_t>(-1), scalar<int64_t>(4)}),
                       arr<int64_t>({3}, {-1, 3, 4})));
  EXPECT_THROW(run1("Clip", {arr<float>({1}, {1}), arr<float>({2}, {0, 1})}), Error);
  EXPECT_THROW(run1("Clip", {arr<float>({1}, {1}), scalar<double>(0)}), Error);
  EXPECT_THROW(run1("Clip", {arr<float>({1}, {1}), NDArray(DataType::Float, {0})}), Error);
}


// ---- opset 18-28 additions ----------------------------------------------------------------------

TEST(Mish, MatchesFormulaAndGradient) {
  checkAgainst("Mish", [](double x) { return x * std::tanh(std::log1p(std::exp(x))); });
  EXPECT_TRUE(gradCheck({"Mish", {randomArray(DataType::Double, {7}, 1, -3, 3)}}, {0}));
}

TEST(Swish, DefaultAndCustomAlphaAndGradient) {
  checkAgainst("Swish", [](double x) { return x / (1 + std::exp(-x)); });
  checkAgainst("Swish", [](double x) { return x / (1 + std::exp(-1.5 * x)); }, attrs({{"alpha", 1.5f}}));
  EXPECT_TRUE(gradCheck({"Swish", {randomArray(DataType::Double, {7}, 2, -3, 3)}, attrs({{"alpha", 1.5f}})}, {0}));
}

TEST(Gelu, ExactAndTanhApproximationAndGradient) {
  checkAgainst("Gelu", [](double x) { return 0.5 * x * (1 + std::erf(x / std::sqrt(2.0))); });
  checkAgainst("Gelu", [](double x) {
    return 0.5 * x * (1 + std::tanh(std::sqrt(2 / M_PI) * (x + 0.044715 * x * x * x)));
  }, attrs({{"approximate", std::string("tanh")}}));
  EXPECT_THROW(run1("Gelu", {arr<float>({1}, {1})}, attrs({{"approximate", std::string("fast")}})), Error);
  for (std::string a : {"none", "tanh"})
    EXPECT_TRUE(gradCheck({"Gelu", {randomArray(DataType::Double, {7}, 3, -3, 3)}, attrs({{"approximate", a}})}, {0})) << a;
}

TEST(SwiGLU, GatesBWithSwishOfAAndGradient) {
  std::vector<double> a{-2, 0, 1, 3}, b{3, 2, 1, -1};
  std::vector<float> want;
  for (size_t i = 0; i < a.size(); ++i) want.push_back(static_cast<float>(a[i] / (1 + std::exp(-2 * a[i])) * b[i]));
  auto y = runOutputs("SwiGLU", {arr<float>({2, 2}, {-2, 0, 1, 3}), arr<float>({2, 2}, {3, 2, 1, -1})},
                      attrs({{"alpha", 2.0f}}));
  EXPECT_TRUE(allClose(y.at(0), arr<float>({2, 2}, want)));
  EXPECT_THROW(runOutputs("SwiGLU", {arr<float>({2}, {1, 2}), arr<float>({1}, {1})}), Error);  // no broadcasting
  OpCase c{"SwiGLU", {randomArray(DataType::Double, {2, 3}, 4, -2, 2), randomArray(DataType::Double, {2, 3}, 5)},
           attrs({{"alpha", 1.5f}})};
  EXPECT_TRUE(gradCheck(c, {0, 1}));
}

}  // namespace
}  // namespace graft::testing
