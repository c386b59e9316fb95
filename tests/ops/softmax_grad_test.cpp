// Gradients (VJPs) of src/ops/softmax.cpp, against central finite differences in float64 and
// hand-computed values.
#include <cmath>

#include "op_test_util.hpp"

namespace graft::testing {
namespace {

NDArray rnd(Shape s, uint64_t seed, double lo = -1.0, double hi = 1.0) {
  return randomArray(DataType::Double, std::move(s), seed, lo, hi);
}

TEST(Softmax, Gradient) {
  for (int64_t axis : {-1, 0, 1})
    EXPECT_TRUE(gradCheck({"Softmax", {rnd({2, 3, 4}, 1, -2, 2)}, attrs({{"axis", axis}})}, {0})) << "axis=" << axis;
  EXPECT_TRUE(gradCheck({"Softmax", {rnd({5}, 2, -2, 2)}}, {0}));
}

TEST(LogSoftmax, Gradient) {
  for (int64_t axis : {-1, 0, 1})
    EXPECT_TRUE(gradCheck({"LogSoftmax", {rnd({2, 3, 4}, 3, -2, 2)}, attrs({{"axis", axis}})}, {0})) << "axis=" << axis;
}

TEST(Hardmax, GradientIsZero) {
  NDArray g = vjpOf({"Hardmax", {rnd({2, 3}, 4)}}, {0}, {rnd({2, 3}, 5)}).at(0);
  EXPECT_TRUE(allClose(g, NDArray(DataType::Double, {2, 3}), 0, 0));
}

// NLL and softmax cross-entropy share the target handling; each case runs on both.
struct LossCase {
  Shape scores;
  NDArray target;
  bool weights;
  std::optional<int64_t> ignore;
};

std::vector<LossCase> lossCases() {
  return {
      {{4, 3}, arr<int64_t>({4}, {0, 2, 1, 2}), false, std::nullopt},
      {{4, 3}, arr<int64_t>({4}, {0, 2, 1, 2}), true, std::nullopt},
      {{4, 3}, arr<int32_t>({4}, {0, 2, 1, 2}), true, int64_t{2}},                            // ignore a real class
      {{4, 3}, arr<int64_t>({4}, {-100, 2, 1, -100}), true, int64_t{-100}},                   // PyTorch's default
      {{2, 3, 2, 2}, arr<int64_t>({2, 2, 2}, {0, 1, 2, 0, 1, 1, 2, -1}), true, int64_t{-1}},  // spatial
  };
}

OpCase lossOpCase(const std::string& op, const LossCase& lc, const std::string& reduction, NDArray scores,
                  int numOutputs = 1) {
  OpCase c{op, {std::move(scores), lc.target}, attrs({{"reduction", reduction}}), numOutputs};
  if (lc.weights) c.inputs.push_back(arr<double>({3}, {0.5, 2.0, 1.25}));
  if (lc.ignore) c.attrs.set("ignore_index", *lc.ignore);
  return c;
}

TEST(NegativeLogLikelihoodLoss, Gradient) {
  for (const char* red : {"none", "sum", "mean"}) {
    int i = 0;
    for (const LossCase& lc : lossCases()) {
      OpCase c = lossOpCase("NegativeLogLikelihoodLoss", lc, red, rnd(lc.scores, 10 + i, -3, 0));
      EXPECT_TRUE(gradCheck(c, {0})) << red << " case " << i;
      ++i;
    }
  }
}

TEST(SoftmaxCrossEntropyLoss, Gradient) {
  for (const char* red : {"none", "sum", "mean"})
    for (int outs : {1, 2}) {  // with the log_prob output, its gradient counts too
      int i = 0;
      for (const LossCase& lc : lossCases()) {
        OpCase c = lossOpCase("SoftmaxCrossEntropyLoss", lc, red, rnd(lc.scores, 20 + i, -2, 2), outs);
        EXPECT_TRUE(gradCheck(c, {0})) << red << " outputs=" << outs << " case " << i;
        ++i;
      }
    }
}

TEST(SoftmaxCrossEntropyLoss, GradientIsSoftmaxMinusOneHotOverTheWeight) {
  // Mean over N with unit weights: (softmax(x) - onehot(t)) / N, as PyTorch's cross_entropy.
  NDArray x = arr<double>({2, 3}, {1, 2, 3, 0, 0, 0});
  OpCase c{"SoftmaxCrossEntropyLoss", {x, arr<int64_t>({2}, {2, 0})}, attrs({{"reduction", std::string("mean")}})};
  NDArray g = vjpOf(c, {0}, {scalar<double>(1.0)}).at(0);
  double e1 = std::exp(1.0), e2 = std::exp(2.0), e3 = std::exp(3.0), s = e1 + e2 + e3;
  EXPECT_TRUE(
      allClose(g, arr<double>({2, 3}, {e1 / s / 2, e2 / s / 2, (e3 / s - 1) / 2, (1.0 / 3 - 1) / 2, 1.0 / 6, 1.0 / 6}),
               1e-12, 1e-14));
}

TEST(NegativeLogLikelihoodLoss, GradientOfAnAllIgnoredMeanIsZero) {
  // The loss is 0/0 = NaN, but the gradient stays 0 (PyTorch writes nothing for ignored targets).
  OpCase c{"NegativeLogLikelihoodLoss",
           {rnd({2, 3}, 1), arr<int64_t>({2}, {-100, -100})},
           attrs({{"reduction", std::string("mean")}, {"ignore_index", int64_t{-100}}})};
  EXPECT_TRUE(allClose(vjpOf(c, {0}, {scalar<double>(1.0)}).at(0), NDArray(DataType::Double, {2, 3}), 0, 0));
  // Weighted mean: -w[t] / sum(w[t]) at the targets.
  OpCase w{"NegativeLogLikelihoodLoss", {rnd({2, 3}, 1), arr<int64_t>({2}, {1, 2}), arr<double>({3}, {1, 3, 1})}};
  EXPECT_TRUE(allClose(vjpOf(w, {0}, {scalar<double>(2.0)}).at(0), arr<double>({2, 3}, {0, -1.5, 0, 0, 0, -0.5})));
}

TEST(SoftmaxCrossEntropyLoss, GradientInFloat) {
  OpCase c{"SoftmaxCrossEntropyLoss",
           {arr<float>({1, 2}, {0, 0}), arr<int64_t>({1}, {1})},
           attrs({{"reduction", std::string("sum")}})};
  EXPECT_TRUE(allClose(vjpOf(c, {0}, {scalar<float>(1.0f)}).at(0), arr<float>({1, 2}, {0.5f, -0.5f})));
}

}  // namespace
}  // namespace graft::testing
