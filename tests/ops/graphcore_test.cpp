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
  // Rows [3 1 2], [9 7 8]: medians 2 (index 2) and 8 (index 2); over all: sorted 1 2 3 7 8 9 -> lower median 3 (index
  // 0).
  auto x = arr<float>({2, 3}, {3, 1, 2, 9, 7, 8});
  auto out =
      runReference(gc("ReduceMedian", {x}, attrs({{"axes", std::vector<int64_t>{1}}, {"keepdims", int64_t{0}}}), 2));
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
  EXPECT_TRUE(gradCheck(
      gc("ReduceMedian", {x}, attrs({{"axes", std::vector<int64_t>{0, 2}}, {"keepdims", int64_t{0}}}), 2), {0}));
}

TEST(Graft_ReduceMedianGrad, Scatters) {
  auto dy = arr<float>({2}, {10, 20});
  auto idx = arr<int32_t>({2}, {1, 0});
  auto like = NDArray(DataType::Float, {2, 3});
  auto dx = runReference(OpCase{"ReduceMedianGrad",
                                {dy, idx, like},
                                attrs({{"axes", std::vector<int64_t>{1}}, {"keepdims", int64_t{0}}}),
                                1,
                                "ai.graft"})[0];
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

TEST(Graphcore_Nop, IdentityAndGradient) {
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

// Finite differences away from the steps (x in [0.1, 0.4]): the gradient is zero there.
TEST(Graphcore_Round, GradientIsZero) {
  EXPECT_TRUE(gradCheck(gc("Round", {randomArray(DataType::Double, {5}, 3, 0.1, 0.4)}), {0}));
}

TEST(Graphcore_NearbyInt, GradientIsZero) {
  EXPECT_TRUE(gradCheck(gc("NearbyInt", {randomArray(DataType::Double, {5}, 4, 0.1, 0.4)}), {0}));
}

TEST(Graphcore_IncrementMod, WrapsAroundAndGradient) {
  auto a = attrs({{"increment", 3.0f}, {"modulus", 4.0f}});
  EXPECT_TRUE(allClose(runReference(gc("IncrementMod", {arr<int32_t>({4}, {0, 1, 2, 3})}, a))[0],
                       arr<int32_t>({4}, {3, 0, 1, 2})));
  EXPECT_TRUE(
      allClose(runReference(gc("IncrementMod", {arr<float>({2}, {0.5f, 1.5f})}, a))[0], arr<float>({2}, {3.5f, 0.5f})));
  EXPECT_TRUE(gradCheck(gc("IncrementMod", {arr<double>({2}, {0.25, 0.5})}, a), {0}));
}

TEST(Graphcore_BitwiseNot, Integers) {
  EXPECT_TRUE(
      allClose(runReference(gc("BitwiseNot", {arr<int32_t>({3}, {0, 5, -1})}))[0], arr<int32_t>({3}, {-1, -6, 0})));
  EXPECT_THROW(runReference(gc("BitwiseNot", {arr<float>({1}, {1})})), Error);
}

TEST(Graphcore_Atan2, ValuesBroadcastAndGradient) {
  auto y = arr<float>({2, 2}, {1, -1, 1, 0});
  auto x = arr<float>({2}, {1, -1});
  EXPECT_TRUE(allClose(
      runReference(gc("Atan2", {y, x}))[0],
      arr<float>({2, 2}, {std::atan2(1.f, 1.f), std::atan2(-1.f, -1.f), std::atan2(1.f, 1.f), std::atan2(0.f, -1.f)})));
  EXPECT_TRUE(gradCheck(
      gc("Atan2", {randomArray(DataType::Double, {2, 3}, 8), randomArray(DataType::Double, {3}, 9, 0.5, 2)}), {0, 1}));
}

TEST(Graphcore_Atan2, GradientAtTheOriginIsZero) {
  // atan2 has no derivative at (0, 0); both partials are taken as 0 there (PyTorch's convention),
  // and elsewhere they are x / r^2 and -y / r^2.
  auto g = vjpOf(gc("Atan2", {arr<float>({2}, {0, 1}), arr<float>({2}, {0, 1})}), {0, 1}, {arr<float>({2}, {1, 1})});
  EXPECT_TRUE(allClose(g[0], arr<float>({2}, {0, 0.5f})));
  EXPECT_TRUE(allClose(g[1], arr<float>({2}, {0, -0.5f})));
}

TEST(Graphcore_Fmod, SignOfDividendAndGradient) {
  EXPECT_TRUE(allClose(runReference(gc("Fmod", {arr<float>({3}, {5.5f, -5.5f, 5.5f}), arr<float>({3}, {2, 2, -2})}))[0],
                       arr<float>({3}, {1.5f, -1.5f, 1.5f})));
  EXPECT_TRUE(allClose(runReference(gc("Fmod", {arr<int32_t>({2}, {-7, 7}), arr<int32_t>({2}, {3, -3})}))[0],
                       arr<int32_t>({2}, {-1, 1})));
  EXPECT_TRUE(gradCheck(gc("Fmod", {arr<double>({3}, {5.5, -5.3, 3.1}), arr<double>({3}, {2, 2, -2})}), {0}));
}

TEST(Graphcore_Remainder, SignOfDivisorAndGradient) {
  EXPECT_TRUE(
      allClose(runReference(gc("Remainder", {arr<float>({3}, {5.5f, -5.5f, 5.5f}), arr<float>({3}, {2, 2, -2})}))[0],
               arr<float>({3}, {1.5f, 0.5f, -0.5f})));
  EXPECT_TRUE(allClose(runReference(gc("Remainder", {arr<int32_t>({2}, {-7, 7}), arr<int32_t>({2}, {3, -3})}))[0],
                       arr<int32_t>({2}, {2, -2})));
  EXPECT_TRUE(gradCheck(gc("Remainder", {arr<double>({3}, {5.5, -5.3, 3.1}), arr<double>({3}, {2, 2, -2})}), {0}));
}

TEST(Graphcore_ScaledAdd, ValuesAndGradient) {
  auto out = runReference(gc("ScaledAdd", {arr<float>({2}, {1, 2}), arr<float>({1}, {10})},
                             attrs({{"scale0", 2.0f}, {"scale1", -0.5f}})))[0];
  EXPECT_TRUE(allClose(out, arr<float>({2}, {-3, -1})));
  EXPECT_TRUE(
      gradCheck(gc("ScaledAdd", {randomArray(DataType::Double, {2, 3}, 10), randomArray(DataType::Double, {3}, 11)},
                   attrs({{"scale0", 0.5f}, {"scale1", 3.0f}})),
                {0, 1}));
}

TEST(Graphcore_Bucketize, LeftAndRight) {
  auto x = arr<float>({5}, {-1, 0, 0.5f, 1, 3});
  auto b = arr<float>({2}, {0, 1});
  // right = 0: first i with x <= b[i]; right = 1: first i with x < b[i] (torch.bucketize).
  EXPECT_TRUE(allClose(runReference(gc("Bucketize", {x, b}))[0], arr<int32_t>({5}, {0, 0, 1, 1, 2})));
  EXPECT_TRUE(allClose(runReference(gc("Bucketize", {x, b}, attrs({{"right", int64_t{1}}})))[0],
                       arr<int32_t>({5}, {0, 1, 1, 2, 2})));
  // NaN lands past every boundary, infinity in the last bucket (torch).
  auto special = arr<float>({2}, {std::nanf(""), INFINITY});
  EXPECT_TRUE(allClose(runReference(gc("Bucketize", {special, b}))[0], arr<int32_t>({2}, {2, 2})));
}

TEST(Graphcore_Sort, StableAscendingAndDescendingAndGradient) {
  auto x = arr<float>({2, 3}, {3, 1, 3, 0, 2, 1});
  auto up = runReference(gc("Sort", {x}, attrs({{"axis", int64_t{1}}}), 2));
  EXPECT_TRUE(allClose(up[0], arr<float>({2, 3}, {1, 3, 3, 0, 1, 2})));
  EXPECT_TRUE(allClose(up[1], arr<int32_t>({2, 3}, {1, 0, 2, 0, 2, 1})));
  auto down = runReference(gc("Sort", {x}, attrs({{"axis", int64_t{0}}, {"descending", int64_t{1}}}), 2));
  EXPECT_TRUE(allClose(down[0], arr<float>({2, 3}, {3, 2, 3, 0, 1, 1})));
  EXPECT_TRUE(allClose(down[1], arr<int32_t>({2, 3}, {0, 1, 0, 1, 0, 1})));
  EXPECT_TRUE(
      gradCheck(gc("Sort", {randomArray(DataType::Double, {3, 4}, 12)}, attrs({{"axis", int64_t{1}}}), 2), {0}));
}

TEST(Graft_SortGrad, ScattersBack) {
  auto dx = runReference(OpCase{"SortGrad",
                                {arr<float>({3}, {10, 20, 30}), arr<int32_t>({3}, {2, 0, 1})},
                                attrs({{"axis", int64_t{0}}}),
                                1,
                                "ai.graft"})[0];
  EXPECT_TRUE(allClose(dx, arr<float>({3}, {20, 30, 10})));
}

OpCase dyn(const std::string& type, NDArray x, NDArray off, NDArray upd) {
  return gc(type, {std::move(x), std::move(off), std::move(upd)},
            attrs({{"axes", std::vector<int64_t>{1}}, {"sizes", std::vector<int64_t>{2}}}));
}

TEST(Graphcore_DynamicUpdate, ReplacesTheRegionAndGradient) {
  auto x = arr<float>({2, 4}, {0, 1, 2, 3, 4, 5, 6, 7});
  auto u = arr<float>({2, 2}, {10, 11, 12, 13});
  EXPECT_TRUE(allClose(runReference(dyn("DynamicUpdate", x, arr<uint32_t>({1}, {1}), u))[0],
                       arr<float>({2, 4}, {0, 10, 11, 3, 4, 12, 13, 7})));
  // An offset past the end is clamped so that the region ends at the edge.
  EXPECT_TRUE(allClose(runReference(dyn("DynamicUpdate", x, arr<int32_t>({1}, {3}), u))[0],
                       arr<float>({2, 4}, {0, 1, 10, 11, 4, 5, 12, 13})));
  EXPECT_TRUE(gradCheck(dyn("DynamicUpdate", randomArray(DataType::Double, {2, 4}, 13), arr<int32_t>({1}, {1}),
                            randomArray(DataType::Double, {2, 2}, 14)),
                        {0, 2}));
}

TEST(Graphcore_DynamicAdd, AddsToTheRegionAndGradient) {
  auto x = arr<float>({2, 4}, {0, 1, 2, 3, 4, 5, 6, 7});
  auto u = arr<float>({2, 2}, {10, 10, 10, 10});
  EXPECT_TRUE(allClose(runReference(dyn("DynamicAdd", x, arr<int64_t>({1}, {2}), u))[0],
                       arr<float>({2, 4}, {0, 1, 12, 13, 4, 5, 16, 17})));
  EXPECT_TRUE(gradCheck(dyn("DynamicAdd", randomArray(DataType::Double, {2, 4}, 15), arr<int32_t>({1}, {0}),
                            randomArray(DataType::Double, {2, 2}, 16)),
                        {0, 2}));
}

TEST(Graphcore_DynamicZero, ZeroesTheRegionAndGradient) {
  auto x = arr<float>({2, 4}, {0, 1, 2, 3, 4, 5, 6, 7});
  EXPECT_TRUE(allClose(runReference(dyn("DynamicZero", x, arr<int32_t>({1}, {0}), NDArray(DataType::Float, {2, 2})))[0],
                       arr<float>({2, 4}, {0, 0, 2, 3, 0, 0, 6, 7})));
  EXPECT_TRUE(gradCheck(dyn("DynamicZero", randomArray(DataType::Double, {2, 4}, 17), arr<int32_t>({1}, {2}),
                            NDArray(DataType::Double, {2, 2})),
                        {0}));
}

TEST(Graphcore_DynamicZero, WithoutALikeInputTheRegionIsSizes) {
  // PopART's two-input form: the region has `sizes` along `axes` and x's extent elsewhere.
  auto x = arr<float>({2, 4}, {0, 1, 2, 3, 4, 5, 6, 7});
  OpCase c = gc("DynamicZero", {x, arr<uint32_t>({1}, {1})},
                attrs({{"axes", std::vector<int64_t>{1}}, {"sizes", std::vector<int64_t>{2}}}));
  EXPECT_TRUE(allClose(runReference(c)[0], arr<float>({2, 4}, {0, 0, 0, 3, 4, 0, 0, 7})));
  EXPECT_TRUE(gradCheck(gc("DynamicZero", {randomArray(DataType::Double, {2, 4}, 18), arr<int32_t>({1}, {3})},
                           attrs({{"axes", std::vector<int64_t>{1}}, {"sizes", std::vector<int64_t>{2}}})),
                        {0}));
}

TEST(Graphcore_IntegerLoss, IdentityLossAndMedianGradientsInIntegers) {
  // PopART trains integer losses: the loss ops and the median's gradient run in the integer type.
  auto x = arr<int32_t>({2, 3}, {3, 1, 2, 9, 7, 8});
  EXPECT_TRUE(allClose(runReference(gc("IdentityLoss", {x}, attrs({{"reduction", std::string("Sum")}})))[0],
                       arr<int32_t>({}, {30})));
  EXPECT_TRUE(allClose(runReference(gc("IdentityLoss", {x}, attrs({{"reduction", std::string("Mean")}})))[0],
                       arr<int32_t>({}, {5})));
  // ReduceMedianGrad(dy, indices, x): dy at each median's position (test_popart_compat.py trains
  // a whole integer loss through it).
  OpCase grad{"ReduceMedianGrad",
              {arr<int32_t>({2}, {5, 7}), arr<int32_t>({2}, {2, 2}), x},
              attrs({{"axes", std::vector<int64_t>{1}}, {"keepdims", int64_t{0}}}),
              1,
              "ai.graft"};
  EXPECT_TRUE(allClose(runReference(grad)[0], arr<int32_t>({2, 3}, {0, 0, 5, 0, 0, 7})));
}

TEST(Graphcore_SequenceSlice, CopiesRowsAndGradient) {
  auto src = arr<float>({4, 2}, {10, 11, 20, 21, 30, 31, 40, 41});
  auto dst = arr<float>({3, 2}, {1, 1, 2, 2, 3, 3});
  auto n = arr<uint32_t>({2}, {1, 2});
  auto so = arr<uint32_t>({2}, {0, 2});
  auto dof = arr<uint32_t>({2}, {2, 0});
  // Row 0 of src -> row 2 of dst; rows 2, 3 of src -> rows 0, 1 of dst.
  auto c = gc("SequenceSlice", {src, dst, n, so, dof}, attrs({{"zeroUnused", int64_t{0}}}));
  EXPECT_TRUE(allClose(runReference(c)[0], arr<float>({3, 2}, {30, 31, 40, 41, 10, 11})));
  auto partial =
      gc("SequenceSlice", {src, dst, arr<uint32_t>({1}, {1}), arr<uint32_t>({1}, {3}), arr<uint32_t>({1}, {1})},
         attrs({{"zeroUnused", int64_t{1}}}));
  EXPECT_TRUE(allClose(runReference(partial)[0], arr<float>({3, 2}, {0, 0, 40, 41, 0, 0})));
  auto g = gc("SequenceSlice",
              {randomArray(DataType::Double, {4, 2}, 18), randomArray(DataType::Double, {3, 2}, 19),
               arr<uint32_t>({1}, {2}), arr<uint32_t>({1}, {1}), arr<uint32_t>({1}, {0})},
              attrs({{"zeroUnused", int64_t{0}}}));
  EXPECT_TRUE(gradCheck(g, {0, 1}));
}

TEST(Graphcore_CtcLoss, HandWorkedAlignments) {
  // T = 2, one sample, C = 2 (blank 0), target [1]: the alignments are (1,1), (0,1), (1,0), so
  // p = a1 b1 + a0 b1 + a1 b0 for frame probabilities a (t = 0) and b (t = 1).
  double a0 = 0.3, a1 = 0.7, b0 = 0.6, b1 = 0.4;
  auto lp = arr<double>({2, 1, 2}, {std::log(a0), std::log(a1), std::log(b0), std::log(b1)});
  auto tg = arr<uint32_t>({1, 1}, {1});
  auto len = arr<uint32_t>({1}, {2});
  auto tl = arr<uint32_t>({1}, {1});
  auto none = attrs({{"reduction", std::string("None")}});
  double p = a1 * b1 + a0 * b1 + a1 * b0;
  EXPECT_TRUE(allClose(runReference(gc("CtcLoss", {lp, tg, len, tl}, none))[0], arr<double>({1}, {-std::log(p)})));
  // Target [1, 1] cannot be emitted in 2 frames (it needs a blank between): infinite, or 0 with zeroInfinity.
  auto tg2 = arr<uint32_t>({1, 2}, {1, 1});
  auto tl2 = arr<uint32_t>({1}, {2});
  EXPECT_TRUE(std::isinf(toDoubles(runReference(gc("CtcLoss", {lp, tg2, len, tl2}, none))[0])[0]));
  auto zi = attrs({{"reduction", std::string("None")}, {"zeroInfinity", int64_t{1}}});
  EXPECT_TRUE(allClose(runReference(gc("CtcLoss", {lp, tg2, len, tl2}, zi))[0], arr<double>({1}, {0})));
}

TEST(Graphcore_CtcLoss, GradientMatchesFiniteDifferences) {
  auto lp = randomArray(DataType::Double, {4, 2, 3}, 23, -2.0, -0.1);
  auto tg = arr<uint32_t>({2, 2}, {1, 2, 2, 2});
  auto len = arr<uint32_t>({2}, {4, 3});
  auto tl = arr<uint32_t>({2}, {2, 1});
  for (const char* red : {"None", "Mean", "Sum"})
    EXPECT_TRUE(gradCheck(gc("CtcLoss", {lp, tg, len, tl}, attrs({{"reduction", std::string(red)}})), {0}, 1e-5, 1e-7))
        << red;
}

TEST(Graft_CtcLossGrad, ZeroBeyondTheInputLength) {
  auto lp = randomArray(DataType::Double, {3, 1, 2}, 24, -2.0, -0.1);
  auto dx = runReference(
      OpCase{"CtcLossGrad",
             {lp, arr<uint32_t>({1, 1}, {1}), arr<uint32_t>({1}, {2}), arr<uint32_t>({1}, {1}), arr<double>({1}, {1})},
             attrs({{"reduction", std::string("None")}}),
             1,
             "ai.graft"})[0];
  auto v = toDoubles(dx);
  EXPECT_EQ(v[4], 0.0);
  EXPECT_EQ(v[5], 0.0);
  EXPECT_NE(v[0], 0.0);
}

}  // namespace
}  // namespace graft::testing
