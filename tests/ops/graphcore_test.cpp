// Tests of PopART's ai.graphcore ops (src/ops/graphcore_*.cpp): each against values worked out
// by hand or with the C library, each gradient against central finite differences.
#include <cmath>

#include "op_test_util.hpp"

namespace graft::testing {
namespace {

OpCase gc(const std::string& type, std::vector<NDArray> in, ir::Attributes a = {}, int outputs = 1) {
  return OpCase{type, std::move(in), std::move(a), outputs, "ai.graphcore"};
}

TEST(Graphcore_ReduceMedian, ValuesAndIndices) {
  // Rows [3 1 2], [9 7 8]: medians 2 (index 2) and 8 (index 2); over all: sorted 1 2 3 7 8 9 -> lower median 3 (index 0).
  auto x = arr<float>({2, 3}, {3, 1, 2, 9, 7, 8});
  auto out = runReference(gc("ReduceMedian", {x}, attrs({{"axes", std::vector<int64_t>{1}}, {"keepdims", int64_t{0}}}), 2));
  EXPECT_TRUE(allClose(out[0], arr<float>({2}, {2, 8})));
  EXPECT_TRUE(allClose(out[1], arr<int32_t>({2}, {2, 2})));
  out = runReference(gc("ReduceMedian", {x}, {}, 2));
  EXPECT_TRUE(allClose(out[0], arr<float>({1, 1}, {3})));
  EXPECT_TRUE(allClose(out[1], arr<int32_t>({1, 1}, {0})));
  // Over axis 0 of the 3x5 grid 0..14 from PopART's documentation example: median 7 at flat index 7.
  std::vector<int32_t> v(15);
  for (int i = 0; i < 15; ++i) v[i] = i;
  out = runReference(gc("ReduceMedian", {arr<int32_t>({3, 5}, v)}, attrs({{"keepdims", int64_t{0}}}), 2));
  EXPECT_TRUE(allClose(out[0], arr<int32_t>({}, {7})));
  EXPECT_TRUE(allClose(out[1], arr<int32_t>({}, {7})));
  EXPECT_THROW(runReference(gc("ReduceMedian", {x}, attrs({{"axes", std::vector<int64_t>{2}}}), 2)), Error);
  // An empty axes list reduces over no axis (PopART): the values are the input, every index 0.
  out = runReference(gc("ReduceMedian", {x}, attrs({{"axes", std::vector<int64_t>{}}}), 2));
  EXPECT_TRUE(allClose(out[0], x));
  EXPECT_TRUE(allClose(out[1], arr<int32_t>({2, 3}, {0, 0, 0, 0, 0, 0})));
}

TEST(Graphcore_ReduceMedian, GradientGoesToTheMedian) {
  auto x = randomArray(DataType::Double, {3, 5, 2}, 7);
  EXPECT_TRUE(gradCheck(gc("ReduceMedian", {x}, attrs({{"axes", std::vector<int64_t>{1}}}), 2), {0}));
  EXPECT_TRUE(gradCheck(gc("ReduceMedian", {x}, attrs({{"axes", std::vector<int64_t>{0, 2}}, {"keepdims", int64_t{0}}}), 2), {0}));
}

TEST(Graft_ReduceMedianGrad, Scatters) {
  auto dy = arr<float>({2}, {10, 20});
  auto idx = arr<int32_t>({2}, {1, 0});
  auto like = NDArray(DataType::Float, {2, 3});
  auto dx = runReference(OpCase{"ReduceMedianGrad", {dy, idx, like}, attrs({{"axes", std::vector<int64_t>{1}},
                                {"keepdims", int64_t{0}}}), 1, "ai.graft"})[0];
  EXPECT_TRUE(allClose(dx, arr<float>({2, 3}, {0, 10, 0, 20, 0, 0})));
}

TEST(Graphcore_Log1p, ValuesAndGradient) {
  EXPECT_TRUE(allClose(runReference(gc("Log1p", {arr<float>({3}, {0, 1e-8f, 1})}))[0],
                       arr<float>({3}, {0, 1e-8f, std::log(2.0f)})));
  EXPECT_TRUE(gradCheck(gc("Log1p", {randomArray(DataType::Double, {4}, 1, 0.1, 2)}), {0}));
}

TEST(Graphcore_Expm1, ValuesAndGradient) {
  EXPECT_TRUE(allClose(runReference(gc("Expm1", {arr<float>({3}, {0, 1e-8f, 1})}))[0],
                       arr<float>({3}, {0, 1e-8f, std::exp(1.0f) - 1})));
  EXPECT_TRUE(gradCheck(gc("Expm1", {randomArray(DataType::Double, {4}, 2)}), {0}));
}

TEST(Graphcore_GeluErf, ValuesAndGradient) {
  // gelu(1) = 0.5 (1 + erf(1/sqrt 2)) = 0.841344746...
  EXPECT_TRUE(allClose(runReference(gc("GeluErf", {arr<float>({2}, {0, 1})}))[0], arr<float>({2}, {0, 0.8413447f})));
  EXPECT_TRUE(gradCheck(gc("GeluErf", {randomArray(DataType::Double, {5}, 3, -3, 3)}), {0}));
}

TEST(Graphcore_Swish, ValuesAndGradient) {
  EXPECT_TRUE(allClose(runReference(gc("Swish", {arr<float>({2}, {0, 2})}))[0],
                       arr<float>({2}, {0, 2.0f / (1 + std::exp(-2.0f))})));
  EXPECT_TRUE(gradCheck(gc("Swish", {randomArray(DataType::Double, {5}, 4, -3, 3)}), {0}));
}

TEST(Graphcore_Scale, ValuesAndGradient) {
  EXPECT_TRUE(allClose(runReference(gc("Scale", {arr<float>({2}, {1, -2})}, attrs({{"scale", 2.5f}})))[0],
                       arr<float>({2}, {2.5f, -5})));
  EXPECT_TRUE(gradCheck(gc("Scale", {randomArray(DataType::Double, {3}, 5)}, attrs({{"scale", -0.5f}})), {0}));
}

TEST(Graphcore_Detach, ForwardsValuesButNoGradient) {
  auto x = arr<double>({2}, {1, 2});
  EXPECT_TRUE(allClose(runReference(gc("Detach", {x}))[0], x));
  EXPECT_THROW(vjpOf(gc("Detach", {x}), {0}, {arr<double>({2}, {1, 1})}), Error);  // input 0 gets no gradient
}

TEST(Graphcore_Nop, Identity) {
  EXPECT_TRUE(allClose(runReference(gc("Nop", {arr<float>({2}, {1, 2})}))[0], arr<float>({2}, {1, 2})));
  EXPECT_TRUE(gradCheck(gc("Nop", {randomArray(DataType::Double, {3}, 6)}), {0}));
}

TEST(Graphcore_Round, HalvesAwayFromZero) {
  EXPECT_TRUE(allClose(runReference(gc("Round", {arr<float>({4}, {0.5f, 1.5f, -0.5f, 2.4f})}))[0],
                       arr<float>({4}, {1, 2, -1, 2})));
  auto g = vjpOf(gc("Round", {arr<double>({2}, {0.3, 1.7})}), {0}, {arr<double>({2}, {1, 1})});
  EXPECT_TRUE(allClose(g[0], arr<double>({2}, {0, 0})));
}

TEST(Graphcore_NearbyInt, HalvesToEven) {
  EXPECT_TRUE(allClose(runReference(gc("NearbyInt", {arr<float>({4}, {0.5f, 1.5f, -2.5f, 2.4f})}))[0],
                       arr<float>({4}, {0, 2, -2, 2})));
  auto g = vjpOf(gc("NearbyInt", {arr<double>({2}, {0.3, 1.7})}), {0}, {arr<double>({2}, {1, 1})});
  EXPECT_TRUE(allClose(g[0], arr<double>({2}, {0, 0})));
}

TEST(Graphcore_IncrementMod, WrapsAround) {
  auto a = attrs({{"increment", 3.0f}, {"modulus", 4.0f}});
  EXPECT_TRUE(allClose(runReference(gc("IncrementMod", {arr<int32_t>({4}, {0, 1, 2, 3})}, a))[0], arr<int32_t>({4}, {3, 0, 1, 2})));
  EXPECT_TRUE(allClose(runReference(gc("IncrementMod", {arr<float>({2}, {0.5f, 1.5f})}, a))[0], arr<float>({2}, {3.5f, 0.5f})));
  EXPECT_TRUE(gradCheck(gc("IncrementMod", {arr<double>({2}, {0.25, 0.5})}, a), {0}));
}

TEST(Graphcore_BitwiseNot, Integers) {
  EXPECT_TRUE(allClose(runReference(gc("BitwiseNot", {arr<int32_t>({3}, {0, 5, -1})}))[0], arr<int32_t>({3}, {-1, -6, 0})));
  EXPECT_THROW(runReference(gc("BitwiseNot", {arr<float>({1}, {1})})), Error);
}

TEST(Graphcore_Atan2, ValuesBroadcastAndGradient) {
  auto y = arr<float>({2, 2}, {1, -1, 1, 0});
  auto x = arr<float>({2}, {1, -1});
  EXPECT_TRUE(allClose(runReference(gc("Atan2", {y, x}))[0],
                       arr<float>({2, 2}, {std::atan2(1.f, 1.f), std::atan2(-1.f, -1.f), std::atan2(1.f, 1.f), std::atan2(0.f, -1.f)})));
  EXPECT_TRUE(gradCheck(gc("Atan2", {randomArray(DataType::Double, {2, 3}, 8), randomArray(DataType::Double, {3}, 9, 0.5, 2)}), {0, 1}));
}

TEST(Graphcore_Fmod, SignOfDividend) {
  EXPECT_TRUE(allClose(runReference(gc("Fmod", {arr<float>({3}, {5.5f, -5.5f, 5.5f}), arr<float>({3}, {2, 2, -2})}))[0],
                       arr<float>({3}, {1.5f, -1.5f, 1.5f})));
  EXPECT_TRUE(allClose(runReference(gc("Fmod", {arr<int32_t>({2}, {-7, 7}), arr<int32_t>({2}, {3, -3})}))[0],
                       arr<int32_t>({2}, {-1, 1})));
  EXPECT_TRUE(gradCheck(gc("Fmod", {arr<double>({3}, {5.5, -5.3, 3.1}), arr<double>({3}, {2, 2, -2})}), {0}));
}

TEST(Graphcore_Remainder, SignOfDivisor) {
  EXPECT_TRUE(allClose(runReference(gc("Remainder", {arr<float>({3}, {5.5f, -5.5f, 5.5f}), arr<float>({3}, {2, 2, -2})}))[0],
                       arr<float>({3}, {1.5f, 0.5f, -0.5f})));
  EXPECT_TRUE(allClose(runReference(gc("Remainder", {arr<int32_t>({2}, {-7, 7}), arr<int32_t>({2}, {3, -3})}))[0],
                       arr<int32_t>({2}, {2, -2})));
  EXPECT_TRUE(gradCheck(gc("Remainder", {arr<double>({3}, {5.5, -5.3, 3.1}), arr<double>({3}, {2, 2, -2})}), {0}));
}

TEST(Graphcore_ScaledAdd, ValuesAndGradient) {
  auto out = runReference(gc("ScaledAdd", {arr<float>({2}, {1, 2}), arr<float>({1}, {10})},
                             attrs({{"scale0", 2.0f}, {"scale1", -0.5f}})))[0];
  EXPECT_TRUE(allClose(out, arr<float>({2}, {-3, -1})));
  EXPECT_TRUE(gradCheck(gc("ScaledAdd", {randomArray(DataType::Double, {2, 3}, 10), randomArray(DataType::Double, {3}, 11)},
                           attrs({{"scale0", 0.5f}, {"scale1", 3.0f}})), {0, 1}));
}

}  // namespace
}  // namespace graft::testing
