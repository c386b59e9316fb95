// Tests of src/ops/training_mode_ops.cpp: ai.graft Dropout (masks from a seed tensor) and
// Assign, and the gradient of ONNX's Dropout.
#include <cmath>

#include "op_test_util.hpp"
#include "ops/registry.hpp"

namespace graft::testing {
namespace {

NDArray seedOf(int64_t seed, int64_t step) { return arr<int64_t>({2}, {seed, step}); }

OpCase dropout(NDArray x, double ratio, NDArray seed, int64_t stream = 0, std::optional<bool> training = std::nullopt) {
  OpCase c{"Dropout",
           {std::move(x), arr<double>({}, {ratio}), NDArray{}, std::move(seed)},
           attrs({{"stream", stream}}),
           2,
           "ai.graft"};
  if (training) c.inputs[2] = arr<bool>({}, {*training});
  return c;
}

TEST(Graft_Dropout, KeepsAboutOneMinusRatioAndScalesThem) {
  NDArray x(DataType::Float, {100, 100});
  for (int64_t i = 0; i < x.numel(); ++i) x.data<float>()[i] = static_cast<float>(i % 7) + 1.0f;
  auto out = runReference(dropout(x, 0.3, seedOf(5, 0)));
  int64_t kept = 0;
  for (int64_t i = 0; i < x.numel(); ++i) {
    bool m = out[1].data<bool>()[i];
    kept += m;
    float want = m ? x.data<float>()[i] * static_cast<float>(1.0 / 0.7) : 0.0f;
    ASSERT_EQ(out[0].data<float>()[i], want) << "element " << i;
  }
  // 10000 Bernoulli(0.7) draws: 7000 +- 46 (one standard deviation).
  EXPECT_NEAR(static_cast<double>(kept), 7000.0, 4 * 46.0);
}

TEST(Graft_Dropout, MaskIsAFunctionOfSeedStepAndStream) {
  NDArray x(DataType::Float, {64});
  auto mask = [&](int64_t seed, int64_t step, int64_t stream) {
    return toDoubles(runReference(dropout(x, 0.5, seedOf(seed, step), stream))[1]);
  };
  EXPECT_EQ(mask(1, 3, 7), mask(1, 3, 7));
  EXPECT_NE(mask(1, 3, 7), mask(1, 4, 7));
  EXPECT_NE(mask(1, 3, 7), mask(2, 3, 7));
  EXPECT_NE(mask(1, 3, 7), mask(1, 3, 8));
}

TEST(Graft_Dropout, OutsideTrainingOrWithRatioZeroIsTheIdentity) {
  NDArray x = arr<float>({3}, {1, -2, 3});
  for (auto c : {dropout(x, 0.5, seedOf(1, 0), 0, false), dropout(x, 0.0, seedOf(1, 0))}) {
    auto out = runReference(c);
    EXPECT_TRUE(allClose(out[0], x, 0, 0));
    EXPECT_TRUE(allClose(out[1], arr<bool>({3}, {true, true, true})));
  }
  // Without a ratio, half is dropped and the rest doubled.
  OpCase noRatio{"Dropout", {arr<float>({2}, {1, 1}), NDArray{}, NDArray{}, seedOf(0, 0)}, {}, 2, "ai.graft"};
  for (double v : toDoubles(runReference(noRatio)[0])) EXPECT_TRUE(v == 0.0 || v == 2.0) << v;
}

TEST(Graft_Dropout, RejectsBadRatioAndSeed) {
  NDArray x = arr<float>({2}, {1, 2});
  EXPECT_THROW(runReference(dropout(x, 1.0, seedOf(0, 0))), Error);
  EXPECT_THROW(runReference(dropout(x, -0.1, seedOf(0, 0))), Error);
  EXPECT_THROW(runReference(dropout(x, 0.5, arr<int64_t>({1}, {0}))), Error);
  EXPECT_THROW(runReference(dropout(x, 0.5, arr<int32_t>({2}, {0, 0}))), Error);
}

TEST(Graft_Dropout, Gradient) {
  NDArray x = randomArray(DataType::Double, {4, 5}, 1);
  EXPECT_TRUE(gradCheck(dropout(x, 0.4, seedOf(3, 9)), {0}));
  EXPECT_TRUE(gradCheck(dropout(x, 0.4, seedOf(3, 9), 0, false), {0}));
  // dy / (1 - ratio) where kept, 0 where dropped.
  OpCase c = dropout(x, 0.75, seedOf(3, 9));
  NDArray mask = runReference(c)[1];
  NDArray dy = randomArray(DataType::Double, {4, 5}, 2);
  NDArray g = vjpOf(c, {0}, {dy, NDArray{}}).at(0);
  for (int64_t i = 0; i < 20; ++i)
    EXPECT_EQ(g.data<double>()[i], mask.data<bool>()[i] ? dy.data<double>()[i] * 4.0 : 0.0) << i;
}

// ONNX's Dropout runs on its kernel from src/ops/random.cpp, when the build has it.
bool haveOnnxDropout() {
  const ops::OpDef* def = ops::Registry::instance().find("", "Dropout");
  return def && def->reference;
}

TEST(Dropout, GradientOutsideTrainingModeIsTheIdentity) {
  if (!haveOnnxDropout()) GTEST_SKIP() << "ONNX Dropout has no kernel in this build";
  NDArray dy = randomArray(DataType::Double, {3, 2}, 2);
  OpCase c{"Dropout", {randomArray(DataType::Double, {3, 2}, 1), arr<double>({}, {0.3})}};
  EXPECT_TRUE(allClose(vjpOf(c, {0}, {dy}).at(0), dy, 0, 0));
}

TEST(Dropout, GradientInTrainingModeFollowsTheMask) {
  if (!haveOnnxDropout()) GTEST_SKIP() << "ONNX Dropout has no kernel in this build";
  // A seeded ONNX Dropout draws the same mask at every run, so finite differences apply.
  OpCase c{"Dropout",
           {randomArray(DataType::Double, {4, 5}, 1), arr<double>({}, {0.4}), arr<bool>({}, {true})},
           attrs({{"seed", int64_t{7}}}),
           2};
  EXPECT_TRUE(gradCheck(c, {0}));
}

TEST(Graft_Assign, WritesTheTargetInPlace) {
  NDArray target = arr<float>({2}, {1, 2});
  runReference({"Assign", {target, arr<float>({2}, {5, 6})}, {}, 0, "ai.graft"});
  EXPECT_TRUE(allClose(target, arr<float>({2}, {5, 6}), 0, 0));
  EXPECT_TRUE(inferTypes({"Assign", {target, target}, {}, 0, "ai.graft"}).empty());
  EXPECT_THROW(runReference({"Assign", {target, arr<float>({3}, {1, 2, 3})}, {}, 0, "ai.graft"}), Error);
  EXPECT_THROW(runReference({"Assign", {target, arr<double>({2}, {1, 2})}, {}, 0, "ai.graft"}), Error);
}

}  // namespace
}  // namespace graft::testing
