// Gradients (VJPs) of src/ops/reduce.cpp, against central finite differences in float64 and, at
// ties and zeros where finite differences do not apply, against hand-computed values.
#include "op_test_util.hpp"

namespace graft::testing {
namespace {

NDArray rnd(Shape s, uint64_t seed, double lo = -1.0, double hi = 1.0) {
  return randomArray(DataType::Double, std::move(s), seed, lo, hi);
}

const char* const kReductions[] = {"ReduceSum", "ReduceMean", "ReduceMax",    "ReduceMin",       "ReduceProd",
                                   "ReduceL1",  "ReduceL2",   "ReduceLogSum", "ReduceLogSumExp", "ReduceSumSquare"};

// Positive inputs keep LogSum's argument and L1's sign away from their singular points.
NDArray inputFor(const std::string& op, Shape s, uint64_t seed) {
  bool positive = op == "ReduceLogSum" || op == "ReduceL1";
  return rnd(std::move(s), seed, positive ? 0.5 : -1.0, positive ? 2.0 : 1.0);
}

// ReduceSum takes its axes as an input (opset 13); the others as an attribute (opset 17).
OpCase reduceCase(const std::string& op, NDArray x, std::optional<std::vector<int64_t>> axes, int64_t keepdims,
                  int64_t noop = 0) {
  OpCase c{op, {std::move(x)}, attrs({{"keepdims", keepdims}})};
  if (noop) c.attrs.set("noop_with_empty_axes", noop);
  if (axes) {
    if (op == "ReduceSum")
      c.inputs.push_back(arr<int64_t>({static_cast<int64_t>(axes->size())}, *axes));
    else
      c.attrs.set("axes", *axes);
  }
  return c;
}

void checkAllReductions(std::optional<std::vector<int64_t>> axes, int64_t keepdims, int64_t noop = 0) {
  for (const char* op : kReductions) {
    OpCase c = reduceCase(op, inputFor(op, {2, 3, 4}, 11), axes, keepdims, noop);
    EXPECT_TRUE(gradCheck(c, {0})) << op << " keepdims=" << keepdims << " noop=" << noop
                                   << (axes ? " axes=" + ::testing::PrintToString(*axes) : " no axes");
  }
}

TEST(ReduceSum, GradientOneAxis) {
  checkAllReductions(std::vector<int64_t>{1}, 1);
  checkAllReductions(std::vector<int64_t>{1}, 0);
}
TEST(ReduceMean, GradientTwoAxesNegative) {
  checkAllReductions(std::vector<int64_t>{0, -1}, 1);
  checkAllReductions(std::vector<int64_t>{-1, 0}, 0);
}
TEST(ReduceMax, GradientAllAxes) {
  checkAllReductions(std::nullopt, 1);
  checkAllReductions(std::nullopt, 0);
  checkAllReductions(std::vector<int64_t>{0, 1, 2}, 0);
}
TEST(ReduceMin, GradientNoopWithEmptyAxesIsIdentity) {
  checkAllReductions(std::nullopt, 0, 1);
  checkAllReductions(std::vector<int64_t>{2}, 0, 1);  // axes given: noop changes nothing
}

// One case per reduction in its own suite (VjpCoverage counts suites), on top of the loops above.
TEST(ReduceL1, GradientOneAxis) {
  EXPECT_TRUE(gradCheck(reduceCase("ReduceL1", inputFor("ReduceL1", {3, 4}, 5), std::vector<int64_t>{1}, 1), {0}));
}
TEST(ReduceLogSum, GradientOneAxis) {
  EXPECT_TRUE(
      gradCheck(reduceCase("ReduceLogSum", inputFor("ReduceLogSum", {3, 4}, 6), std::vector<int64_t>{0}, 0), {0}));
}
TEST(ReduceSumSquare, GradientOneAxis) {
  EXPECT_TRUE(gradCheck(
      reduceCase("ReduceSumSquare", inputFor("ReduceSumSquare", {3, 4}, 7), std::vector<int64_t>{1}, 0), {0}));
}

TEST(ReduceSum, GradientWithComputedAxes) {
  // Axes fed at run time: the VJP cannot read them and must use the tensor.
  NDArray x = rnd({2, 3, 4}, 3);
  NDArray dyKeep = rnd({2, 1, 1}, 4);
  for (int64_t keep : {0, 1}) {
    NDArray dy = keep ? dyKeep : arr<double>({2}, {toDoubles(dyKeep)[0], toDoubles(dyKeep)[1]});
    OpCase c{"ReduceSum", {x, arr<int64_t>({2}, {-1, 1})}, attrs({{"keepdims", keep}})};
    NDArray fed = vjpOf(c, {0}, {dy}, {1}).at(0);
    NDArray constant = vjpOf(c, {0}, {dy}).at(0);
    EXPECT_TRUE(allClose(fed, constant, 0, 0)) << "keepdims=" << keep;
    std::vector<double> want(24);
    for (int i = 0; i < 24; ++i) want[i] = toDoubles(dyKeep)[i / 12];
    EXPECT_TRUE(allClose(fed, arr<double>({2, 3, 4}, want), 0, 0)) << "keepdims=" << keep;
  }
  // Empty axes fed at run time: everything is reduced, or nothing with noop_with_empty_axes.
  OpCase all{"ReduceSum", {x, arr<int64_t>({0}, {})}, attrs({{"keepdims", int64_t{0}}})};
  EXPECT_TRUE(allClose(vjpOf(all, {0}, {scalar<double>(2.5)}, {1}).at(0),
                       arr<double>({2, 3, 4}, std::vector<double>(24, 2.5))));
  OpCase noop{
      "ReduceSum", {x, arr<int64_t>({0}, {})}, attrs({{"keepdims", int64_t{0}}, {"noop_with_empty_axes", int64_t{1}}})};
  NDArray dyFull = rnd({2, 3, 4}, 5);
  EXPECT_TRUE(allClose(vjpOf(noop, {0}, {dyFull}, {1}).at(0), dyFull, 0, 0));
}

TEST(ReduceMax, GradientSplitsEvenlyBetweenTies) {
  // As torch.amax: each of the k elements equal to the maximum gets dy / k.
  NDArray x = arr<double>({2, 4}, {1, 3, 3, 2, 5, 5, 5, 0});
  OpCase c{"ReduceMax", {x}, attrs({{"axes", std::vector<int64_t>{1}}, {"keepdims", int64_t{0}}})};
  EXPECT_TRUE(
      allClose(vjpOf(c, {0}, {arr<double>({2}, {1.0, 6.0})}).at(0), arr<double>({2, 4}, {0, 0.5, 0.5, 0, 2, 2, 2, 0})));
  OpCase m{"ReduceMin", {arr<double>({4}, {2, -1, 7, -1})}, attrs({{"keepdims", int64_t{1}}})};
  EXPECT_TRUE(allClose(vjpOf(m, {0}, {arr<double>({1}, {3.0})}).at(0), arr<double>({4}, {0, 1.5, 0, 1.5})));
}

TEST(ReduceProd, GradientAtZeros) {
  // One zero: the product of the others at the zero, 0 elsewhere; two zeros: 0 everywhere.
  OpCase one{"ReduceProd", {arr<double>({2, 3}, {2, 0, 3, 0, 4, 0})}, attrs({{"axes", std::vector<int64_t>{1}}})};
  EXPECT_TRUE(
      allClose(vjpOf(one, {0}, {arr<double>({2, 1}, {2.0, 1.0})}).at(0), arr<double>({2, 3}, {0, 12, 0, 0, 0, 0})));
  OpCase none{"ReduceProd", {arr<double>({3}, {2, -4, 0.5})}, attrs({{"keepdims", int64_t{0}}})};
  EXPECT_TRUE(allClose(vjpOf(none, {0}, {scalar<double>(1.0)}).at(0), arr<double>({3}, {-2, 1, -8})));
}

TEST(ReduceL2, GradientIsZeroWhereTheNormIsZero) {
  OpCase c{"ReduceL2", {arr<double>({2, 2}, {0, 0, 3, 4})}, attrs({{"axes", std::vector<int64_t>{1}}})};
  EXPECT_TRUE(allClose(vjpOf(c, {0}, {arr<double>({2, 1}, {1.0, 10.0})}).at(0), arr<double>({2, 2}, {0, 0, 6, 8})));
}

TEST(ReduceLogSumExp, GradientIsSoftmaxForLargeInputs) {
  OpCase c{"ReduceLogSumExp", {arr<double>({2}, {1000, 1000})}, attrs({{"keepdims", int64_t{0}}})};
  EXPECT_TRUE(allClose(vjpOf(c, {0}, {scalar<double>(1.0)}).at(0), arr<double>({2}, {0.5, 0.5})));
}

TEST(ReduceMean, GradientInFloat) {
  OpCase c{"ReduceMean", {arr<float>({2, 2}, {1, 2, 3, 4})}, attrs({{"keepdims", int64_t{0}}})};
  EXPECT_TRUE(allClose(vjpOf(c, {0}, {scalar<float>(2.0f)}).at(0), arr<float>({2, 2}, {0.5f, 0.5f, 0.5f, 0.5f})));
}

TEST(CumSum, Gradient) {
  for (int64_t exclusive : {0, 1})
    for (int64_t reverse : {0, 1})
      for (int64_t axis : {0, -1}) {
        OpCase c{"CumSum",
                 {rnd({3, 4}, 7), arr<int64_t>({}, {axis})},
                 attrs({{"exclusive", exclusive}, {"reverse", reverse}})};
        EXPECT_TRUE(gradCheck(c, {0})) << "exclusive=" << exclusive << " reverse=" << reverse << " axis=" << axis;
      }
}

TEST(TopK, GradientOfValues) {
  for (int64_t largest : {0, 1})
    for (int64_t axis : {0, 1, -1}) {
      OpCase c{"TopK", {rnd({4, 5}, 9), arr<int64_t>({1}, {2})}, attrs({{"largest", largest}, {"axis", axis}}), 2};
      EXPECT_TRUE(gradCheck(c, {0})) << "largest=" << largest << " axis=" << axis;
    }
  // The gradient lands where the values came from.
  OpCase c{"TopK", {arr<double>({4}, {1, 4, 2, 3}), arr<int64_t>({1}, {2})}, {}, 2};
  EXPECT_TRUE(allClose(vjpOf(c, {0}, {arr<double>({2}, {10, 20})}).at(0), arr<double>({4}, {0, 10, 0, 20})));
}

}  // namespace
}  // namespace graft::testing
