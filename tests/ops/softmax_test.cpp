// Tests of src/ops/softmax.cpp: Softmax, LogSoftmax, Hardmax, NegativeLogLikelihoodLoss,
// SoftmaxCrossEntropyLoss.
#include <cmath>

#include "op_case_util.hpp"

namespace graft::testing {
namespace {

// Softmax of one row, computed naively in double.
std::vector<double> softmaxRow(std::vector<double> v) {
  double s = 0;
  for (double x : v) s += std::exp(x);
  for (double& x : v) x = std::exp(x) / s;
  return v;
}

TEST(Softmax, LastAxis) {
  auto y = run1("Softmax", {arr<double>({2, 3}, {1, 2, 3, 0, 0, 0})});
  auto r0 = softmaxRow({1, 2, 3});
  EXPECT_TRUE(allClose(y, arr<double>({2, 3}, {r0[0], r0[1], r0[2], 1.0 / 3, 1.0 / 3, 1.0 / 3}), 1e-12, 1e-14));
}

TEST(Softmax, Opset13AxisNormalizesOnlyThatAxis) {
  // axis 0 of a [2, 2]: columns are normalized independently.
  auto y = run1("Softmax", {arr<double>({2, 2}, {0, 1, 0, 3})}, attrs({{"axis", int64_t{0}}}));
  auto c1 = softmaxRow({1, 3});
  EXPECT_TRUE(allClose(y, arr<double>({2, 2}, {0.5, c1[0], 0.5, c1[1]}), 1e-12, 1e-14));
}

TEST(Softmax, LargeInputsDoNotOverflow) {
  auto y = run1("Softmax", {arr<float>({2}, {1000, 1000})});
  EXPECT_TRUE(allClose(y, arr<float>({2}, {0.5f, 0.5f})));
  EXPECT_THROW(run1("Softmax", {arr<float>({2}, {1, 2})}, attrs({{"axis", int64_t{1}}})), Error);
}

TEST(LogSoftmax, MatchesLogOfSoftmax) {
  auto y = run1("LogSoftmax", {arr<double>({3}, {1, 2, 3})});
  auto r = softmaxRow({1, 2, 3});
  EXPECT_TRUE(allClose(y, arr<double>({3}, {std::log(r[0]), std::log(r[1]), std::log(r[2])}), 1e-12, 1e-14));
  // -1000 vs 0: log-softmax stays finite where log(softmax) would give -inf.
  auto z = run1("LogSoftmax", {arr<float>({2}, {-1000, 0})});
  EXPECT_TRUE(allClose(z, arr<float>({2}, {-1000, 0})));
}

TEST(Hardmax, FirstMaximumWins) {
  auto y = run1("Hardmax", {arr<float>({2, 3}, {1, 3, 3, 2, 1, 0})});
  EXPECT_TRUE(allClose(y, arr<float>({2, 3}, {0, 1, 0, 1, 0, 0})));
  auto z = run1("Hardmax", {arr<float>({2, 2}, {1, 5, 2, 0})}, attrs({{"axis", int64_t{0}}}));
  EXPECT_TRUE(allClose(z, arr<float>({2, 2}, {0, 1, 1, 0})));
}

// ---- losses --------------------------------------------------------------------------------------

// log-probabilities of N=2 samples over C=3 classes
NDArray logp() { return arr<float>({2, 3}, {-1, -2, -3, -0.5f, -4, -6}); }

TEST(NegativeLogLikelihoodLoss, Reductions) {
  auto t = arr<int64_t>({2}, {2, 0});
  EXPECT_TRUE(allClose(run1("NegativeLogLikelihoodLoss", {logp(), t}, attrs({{"reduction", std::string("none")}})),
                       arr<float>({2}, {3, 0.5f})));
  EXPECT_TRUE(allClose(run1("NegativeLogLikelihoodLoss", {logp(), t}, attrs({{"reduction", std::string("sum")}})),
                       scalar<float>(3.5f)));
  EXPECT_TRUE(allClose(run1("NegativeLogLikelihoodLoss", {logp(), t}), scalar<float>(1.75f)));
}

TEST(NegativeLogLikelihoodLoss, WeightsAndIgnoreIndex) {
  auto t = arr<int32_t>({2}, {2, 0});
  auto w = arr<float>({3}, {2, 1, 0.5f});
  // losses 3*0.5 = 1.5 and 0.5*2 = 1; weighted mean = 2.5 / 2.5
  EXPECT_TRUE(allClose(run1("NegativeLogLikelihoodLoss", {logp(), t, w}), scalar<float>(1.0f)));
  auto ig = attrs({{"ignore_index", int64_t{2}}});
  EXPECT_TRUE(allClose(run1("NegativeLogLikelihoodLoss", {logp(), t, w}, ig), scalar<float>(0.5f)));
  EXPECT_TRUE(allClose(run1("NegativeLogLikelihoodLoss", {logp(), t}, ig), scalar<float>(0.5f)));
}

TEST(NegativeLogLikelihoodLoss, SpatialDims) {
  // [N=1, C=2, d=2]; target picks class 1 then class 0
  auto x = arr<double>({1, 2, 2}, {-1, -2, -3, -4});
  auto y = run1("NegativeLogLikelihoodLoss", {x, arr<int64_t>({1, 2}, {1, 0})}, attrs({{"reduction", std::string("none")}}));
  EXPECT_TRUE(allClose(y, arr<double>({1, 2}, {3, 2})));
}

TEST(NegativeLogLikelihoodLoss, RejectsBadTargets) {
  EXPECT_THROW(run1("NegativeLogLikelihoodLoss", {logp(), arr<int64_t>({2}, {3, 0})}), Error);
  EXPECT_THROW(run1("NegativeLogLikelihoodLoss", {logp(), arr<int64_t>({2}, {-1, 0})}), Error);
  EXPECT_THROW(run1("NegativeLogLikelihoodLoss", {logp(), arr<int64_t>({3}, {0, 0, 0})}), Error);
  EXPECT_THROW(run1("NegativeLogLikelihoodLoss", {logp(), arr<int64_t>({2}, {0, 0})}, attrs({{"reduction", std::string("avg")}})),
               Error);
}

TEST(SoftmaxCrossEntropyLoss, EqualsNllOfLogSoftmax) {
  auto x = arr<double>({2, 3}, {1, 2, 3, 0, 0, 0});
  auto t = arr<int64_t>({2}, {2, 1});
  auto out = runReference(opCase("SoftmaxCrossEntropyLoss", {x, t}, attrs({{"reduction", std::string("none")}}), 2));
  auto r0 = softmaxRow({1, 2, 3});
  EXPECT_TRUE(allClose(out[0], arr<double>({2}, {-std::log(r0[2]), std::log(3.0)}), 1e-12, 1e-14));
  EXPECT_TRUE(allClose(out[1], arr<double>({2, 3}, {std::log(r0[0]), std::log(r0[1]), std::log(r0[2]), -std::log(3.0),
                                                    -std::log(3.0), -std::log(3.0)}), 1e-12, 1e-14));
  auto mean = run1("SoftmaxCrossEntropyLoss", {x, t});
  EXPECT_TRUE(allClose(mean, scalar<double>((-std::log(r0[2]) + std::log(3.0)) / 2), 1e-12, 1e-14));
}

TEST(SoftmaxCrossEntropyLoss, WeightsAndIgnoreIndex) {
  auto x = arr<float>({2, 2}, {0, 0, 0, 0});  // every log-probability is -log 2
  auto t = arr<int64_t>({2}, {0, 1});
  auto w = arr<float>({2}, {1, 3});
  float l2 = std::log(2.0f);
  EXPECT_TRUE(allClose(run1("SoftmaxCrossEntropyLoss", {x, t, w}, attrs({{"reduction", std::string("sum")}})),
                       scalar<float>(4 * l2)));
  EXPECT_TRUE(allClose(run1("SoftmaxCrossEntropyLoss", {x, t, w}), scalar<float>(l2)));
  EXPECT_TRUE(allClose(run1("SoftmaxCrossEntropyLoss", {x, t, w}, attrs({{"ignore_index", int64_t{1}}, {"reduction", std::string("none")}})),
                       arr<float>({2}, {l2, 0})));
}

}  // namespace
}  // namespace graft::testing
