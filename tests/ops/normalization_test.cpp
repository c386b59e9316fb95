// Tests of src/ops/normalization.cpp: BatchNormalization, InstanceNormalization,
// LayerNormalization, LRN, MeanVarianceNormalization.
#include <cmath>

#include "op_case_util.hpp"

namespace graft::testing {
namespace {

// ---- BatchNormalization --------------------------------------------------------------------------

TEST(BatchNormalization, InferenceUsesGivenStatistics) {
  // x: N=1, C=2, 2 values per channel.
  auto x = arr<float>({1, 2, 2}, {1, 3, 10, 20});
  auto scale = arr<float>({2}, {2, 1}), bias = arr<float>({2}, {0.5f, -1});
  auto mean = arr<float>({2}, {2, 10}), var = arr<float>({2}, {4, 25});
  float eps = 0;
  auto y = run1("BatchNormalization", {x, scale, bias, mean, var}, attrs({{"epsilon", eps}}));
  // (1-2)/2*2+0.5 = -0.5, (3-2)/2*2+0.5 = 1.5, (10-10)/5-1 = -1, (20-10)/5-1 = 1
  EXPECT_TRUE(allClose(y, arr<float>({1, 2, 2}, {-0.5f, 1.5f, -1, 1})));
}

TEST(BatchNormalization, TrainingModeUpdatesRunningStatistics) {
  auto x = arr<float>({2, 1, 2}, {1, 2, 3, 6});  // batch mean 3, population var (4+1+0+9)/4 = 3.5
  auto one = arr<float>({1}, {1}), zero = arr<float>({1}, {0});
  auto out = runReference(opCase("BatchNormalization", {x, one, zero, arr<float>({1}, {1}), arr<float>({1}, {2})},
                           attrs({{"training_mode", int64_t{1}}, {"momentum", 0.5f}, {"epsilon", 0.0f}}), 3));
  float s = std::sqrt(3.5f);
  EXPECT_TRUE(allClose(out[0], arr<float>({2, 1, 2}, {-2 / s, -1 / s, 0, 3 / s})));
  EXPECT_TRUE(allClose(out[1], arr<float>({1}, {0.5f * 1 + 0.5f * 3})));
  EXPECT_TRUE(allClose(out[2], arr<float>({1}, {0.5f * 2 + 0.5f * 3.5f})));
}

TEST(BatchNormalization, InferenceModePassesRunningStatisticsThrough) {
  auto out = runReference(opCase("BatchNormalization", {arr<float>({2, 1}, {5, 7}), arr<float>({1}, {1}), arr<float>({1}, {0}),
                                                        arr<float>({1}, {0.3f}), arr<float>({1}, {2})}, {}, 3));
  EXPECT_TRUE(allClose(out[1], arr<float>({1}, {0.3f}), 0, 0));
  EXPECT_TRUE(allClose(out[2], arr<float>({1}, {2}), 0, 0));
}

TEST(BatchNormalization, MixedParameterTypesAndBadShapes) {
  auto x = arr<double>({1, 1, 1}, {4});
  auto p = [](float v) { return arr<float>({1}, {v}); };
  EXPECT_TRUE(allClose(run1("BatchNormalization", {x, p(1), p(0), p(0), p(1)}, attrs({{"epsilon", 0.0f}})),
                       arr<double>({1, 1, 1}, {4})));
  EXPECT_THROW(run1("BatchNormalization", {arr<float>({1, 2}, {1, 2}), p(1), p(0), p(0), p(1)}), Error);
  EXPECT_THROW(run1("BatchNormalization", {arr<int32_t>({1, 1}, {1}), p(1), p(0), p(0), p(1)}), Error);
}

// ---- InstanceNormalization -----------------------------------------------------------------------

TEST(InstanceNormalization, PerSampleAndChannel) {
  auto x = arr<float>({2, 1, 2}, {1, 3, 10, 30});
  auto y = run1("InstanceNormalization", {x, arr<float>({1}, {2}), arr<float>({1}, {1})}, attrs({{"epsilon", 0.0f}}));
  EXPECT_TRUE(allClose(y, arr<float>({2, 1, 2}, {-1, 3, -1, 3})));
  EXPECT_THROW(run1("InstanceNormalization", {x, arr<float>({2}, {1, 1}), arr<float>({1}, {0})}), Error);
}

// ---- LayerNormalization --------------------------------------------------------------------------

TEST(LayerNormalization, LastAxisWithMeanAndInvStdDev) {
  auto x = arr<float>({2, 2}, {1, 3, 2, 6});
  auto out = runReference(opCase("LayerNormalization", {x, arr<float>({2}, {1, 2}), arr<float>({2}, {0, 1})},
                           attrs({{"epsilon", 0.0f}}), 3));
  EXPECT_TRUE(allClose(out[0], arr<float>({2, 2}, {-1, 3, -1, 3})));
  EXPECT_TRUE(allClose(out[1], arr<float>({2, 1}, {2, 4})));
  EXPECT_TRUE(allClose(out[2], arr<float>({2, 1}, {1, 0.5f})));
}

TEST(LayerNormalization, AxisOneMatchesNaiveComputation) {
  NDArray x = randomArray(DataType::Double, {2, 3, 4}, 3);
  NDArray sc = randomArray(DataType::Double, {4}, 4);  // broadcasts over [3, 4]
  auto out = runReference(opCase("LayerNormalization", {x, sc}, attrs({{"axis", int64_t{1}}, {"epsilon", 1e-3f}}), 3));
  NDArray want(DataType::Double, {2, 3, 4});
  for (int n = 0; n < 2; ++n) {
    const double* p = x.data<double>() + n * 12;
    double m = 0, v = 0;
    for (int i = 0; i < 12; ++i) m += p[i] / 12;
    for (int i = 0; i < 12; ++i) v += (p[i] - m) * (p[i] - m) / 12;
    for (int i = 0; i < 12; ++i)
      want.data<double>()[n * 12 + i] = (p[i] - m) / std::sqrt(v + double(1e-3f)) * sc.data<double>()[i % 4];
  }
  EXPECT_TRUE(allClose(out[0], want, 1e-10, 1e-12));
  EXPECT_EQ(out[1].dtype(), DataType::Float);  // stash_type FLOAT
  EXPECT_EQ(out[1].shape(), Shape({2, 1, 1}));
}

TEST(LayerNormalization, RejectsScaleThatDoesNotBroadcast) {
  EXPECT_THROW(run1("LayerNormalization", {arr<float>({2, 2}, {1, 2, 3, 4}), arr<float>({3}, {1, 1, 1})}), Error);
  EXPECT_THROW(run1("LayerNormalization", {arr<float>({2, 2}, {1, 2, 3, 4}), arr<float>({2}, {1, 1})},
                    attrs({{"axis", int64_t{2}}})), Error);
}

// ---- LRN -----------------------------------------------------------------------------------------

TEST(LRN, WindowOverChannels) {
  // N=1, C=3, one pixel; size 2: the window of c is [c, c+1].
  auto x = arr<float>({1, 3, 1}, {1, 2, 3});
  float alpha = 0.5f, beta = 1.0f, bias = 1.0f;
  auto y = run1("LRN", {x}, attrs({{"size", int64_t{2}}, {"alpha", alpha}, {"beta", beta}, {"bias", bias}}));
  // denominators: 1 + 0.25*(1+4) = 2.25, 1 + 0.25*(4+9) = 4.25, 1 + 0.25*9 = 3.25
  EXPECT_TRUE(allClose(y, arr<float>({1, 3, 1}, {1 / 2.25f, 2 / 4.25f, 3 / 3.25f})));
}

TEST(LRN, SizeThreeIsCentred) {
  auto x = arr<double>({1, 3}, {1, 2, 3});
  auto y = run1("LRN", {x}, attrs({{"size", int64_t{3}}, {"alpha", 3.0f}, {"beta", 0.5f}}));
  // window of channel 0: {0, 1} -> 1 + (1+4) = 6; channel 1: all -> 1 + 14 = 15; channel 2: {1,2} -> 14
  EXPECT_TRUE(allClose(y, arr<double>({1, 3}, {1 / std::sqrt(6.0), 2 / std::sqrt(15.0), 3 / std::sqrt(14.0)})));
}

// ---- MeanVarianceNormalization -------------------------------------------------------------------

TEST(MeanVarianceNormalization, DefaultAxesArePerChannel) {
  // [N=2, C=1, H=1, W=2]: all four values form channel 0's statistics: mean 2.5, std sqrt(1.25)
  auto x = arr<float>({2, 1, 1, 2}, {1, 2, 3, 4});
  float s = std::sqrt(1.25f);
  EXPECT_TRUE(allClose(run1("MeanVarianceNormalization", {x}),
                       arr<float>({2, 1, 1, 2}, {-1.5f / s, -0.5f / s, 0.5f / s, 1.5f / s})));
}

TEST(MeanVarianceNormalization, CustomAxes) {
  auto x = arr<float>({2, 2}, {1, 3, 10, 10});
  auto y = run1("MeanVarianceNormalization", {x}, attrs({{"axes", std::vector<int64_t>{1}}}));
  EXPECT_TRUE(allClose(y, arr<float>({2, 2}, {-1, 1, 0, 0})));
  EXPECT_THROW(run1("MeanVarianceNormalization", {x}), Error);  // default axes need rank 4
}


// ---- opset 18-28 additions ----------------------------------------------------------------------

NDArray rndD(Shape s, uint64_t seed, double lo = -1.0, double hi = 1.0) {
  return randomArray(DataType::Double, std::move(s), seed, lo, hi);
}

TEST(GroupNormalization, StatisticsPerGroupParametersPerChannelAndGradient) {
  // Two groups of two channels: {1, 2} and {3, 4}, each normalised to {-1, 1}.
  auto y =
      runOutputs("GroupNormalization",
                 {arr<float>({1, 4, 1}, {1, 2, 3, 4}), arr<float>({4}, {1, 2, 3, 4}), arr<float>({4}, {0, 0, 1, 1})},
                 attrs({{"num_groups", int64_t{2}}, {"epsilon", 0.0f}}));
  EXPECT_TRUE(allClose(y.at(0), arr<float>({1, 4, 1}, {-1, 2, -2, 5})));
  EXPECT_THROW(runOutputs("GroupNormalization",
                          {arr<float>({1, 3}, {1, 2, 3}), arr<float>({3}, {1, 1, 1}), arr<float>({3}, {0, 0, 0})},
                          attrs({{"num_groups", int64_t{2}}})),
               Error);
  for (auto [s, groups] : {std::pair{Shape{2, 4, 3}, int64_t{2}}, std::pair{Shape{2, 6}, int64_t{3}}}) {
    OpCase c{"GroupNormalization", {rndD(s, 1, -2, 2), rndD({s[1]}, 2, 0.5, 1.5), rndD({s[1]}, 3)},
             attrs({{"num_groups", groups}, {"epsilon", 1e-3f}})};
    EXPECT_TRUE(gradCheck(c, {0, 1, 2})) << shapeToString(s);
  }
}

TEST(RMSNormalization, DividesByRootMeanSquareAndGradient) {
  float r = std::sqrt(12.5f);
  auto y =
      runOutputs("RMSNormalization", {arr<float>({1, 2}, {3, 4}), arr<float>({2}, {1, 2})}, attrs({{"epsilon", 0.0f}}));
  EXPECT_TRUE(allClose(y.at(0), arr<float>({1, 2}, {3 / r, 8 / r})));
  // axis 0 over a [2, 1] input: one statistic for both rows.
  y = runOutputs("RMSNormalization", {arr<float>({2, 1}, {3, 4}), arr<float>({1}, {1})},
                 attrs({{"epsilon", 0.0f}, {"axis", int64_t{0}}}));
  EXPECT_TRUE(allClose(y.at(0), arr<float>({2, 1}, {3 / r, 4 / r})));
  for (int64_t axis : {-1, 1}) {
    OpCase c{"RMSNormalization", {rndD({2, 3, 4}, 4, -2, 2), rndD({4}, 5, 0.5, 1.5)}, attrs({{"axis", axis}, {"epsilon", 1e-3f}})};
    if (axis == 1) c.inputs[1] = rndD({3, 4}, 6, 0.5, 1.5);
    EXPECT_TRUE(gradCheck(c, {0, 1})) << "axis=" << axis;
  }
}

TEST(LpNormalization, L1AndL2AndGradient) {
  EXPECT_TRUE(allClose(runOutputs("LpNormalization", {arr<float>({2, 2}, {3, 4, 0, 0})}).at(0),
                       arr<float>({2, 2}, {0.6f, 0.8f, 0, 0})));
  EXPECT_TRUE(allClose(runOutputs("LpNormalization", {arr<float>({2, 2}, {1, 2, -3, 2})},
                                  attrs({{"p", int64_t{1}}, {"axis", int64_t{0}}}))
                           .at(0),
                       arr<float>({2, 2}, {0.25f, 0.5f, -0.75f, 0.5f})));
  EXPECT_THROW(runOutputs("LpNormalization", {arr<float>({1}, {1})}, attrs({{"p", int64_t{3}}})), Error);
  for (int64_t p : {1, 2}) {
    OpCase c{"LpNormalization", {rndD({3, 4}, 7, 0.2, 2)}, attrs({{"p", p}, {"axis", int64_t{1}}})};
    EXPECT_TRUE(gradCheck(c, {0})) << "p=" << p;
  }
}

}  // namespace
}  // namespace graft::testing
