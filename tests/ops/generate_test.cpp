// Tests of src/ops/generate.cpp: ConstantOfShape, Range, EyeLike, OneHot, Shrink.
#include <climits>
#include <cmath>

#include "tensor_test_util.hpp"

namespace graft::testing {
namespace {

// ---- ConstantOfShape ----------------------------------------------------------------------------

TEST(ConstantOfShape, DefaultIsFloatZero) {
  EXPECT_TRUE(allClose(run1("ConstantOfShape", {i64({2, 3})}), NDArray(DataType::Float, {2, 3})));
}

TEST(ConstantOfShape, ValueAttributeSetsDtypeAndFill) {
  auto out = run1("ConstantOfShape", {i64({3})}, attrs({{"value", arr<int32_t>({1}, {7})}}));
  EXPECT_TRUE(allClose(out, arr<int32_t>({3}, {7, 7, 7})));
  out = run1("ConstantOfShape", {i64({2, 0})}, attrs({{"value", arr<bool>({1}, {true})}}));
  EXPECT_EQ(out.dtype(), DataType::Bool);
  EXPECT_EQ(out.shape(), (Shape{2, 0}));
}

TEST(ConstantOfShape, EmptyShapeGivesAScalar) {
  auto out = run1("ConstantOfShape", {arr<int64_t>({0}, {})}, attrs({{"value", arr<double>({1}, {2.5})}}));
  EXPECT_TRUE(allClose(out, scalar<double>(2.5)));
}

TEST(ConstantOfShape, BadInputsThrow) {
  EXPECT_TRUE(throwsNamingNode(op("ConstantOfShape", {i64({2, -1})}), "negative"));
  EXPECT_TRUE(throwsNamingNode(op("ConstantOfShape", {arr<int32_t>({1}, {2})}), "INT64"));
  EXPECT_TRUE(
      throwsNamingNode(op("ConstantOfShape", {i64({2})}, attrs({{"value", arr<float>({2}, {1, 2})}})), "one element"));
}

// ---- Range --------------------------------------------------------------------------------------

TEST(Range, FloatPositiveDelta) {
  auto out = run1("Range", {scalar<float>(1), scalar<float>(5), scalar<float>(2)});
  EXPECT_TRUE(allClose(out, arr<float>({2}, {1, 3})));
  out = run1("Range", {scalar<double>(0), scalar<double>(1), scalar<double>(0.3)});
  EXPECT_TRUE(allClose(out, arr<double>({4}, {0, 0.3, 0.6, 0.9})));
}

TEST(Range, IntegerNegativeDeltaAndEmpty) {
  EXPECT_TRUE(allClose(run1("Range", {scalar<int32_t>(10), scalar<int32_t>(6), scalar<int32_t>(-3)}),
                       arr<int32_t>({2}, {10, 7})));
  EXPECT_EQ(run1("Range", {scalar<int64_t>(5), scalar<int64_t>(1), scalar<int64_t>(2)}).shape(), (Shape{0}));
  EXPECT_EQ(run1("Range", {scalar<int32_t>(-3), scalar<int32_t>(-6), scalar<int32_t>(4)}).shape(), (Shape{0}));
  EXPECT_EQ(run1("Range", {scalar<int32_t>(3), scalar<int32_t>(6), scalar<int32_t>(-4)}).shape(), (Shape{0}));
  EXPECT_TRUE(allClose(run1("Range", {scalar<int16_t>(-2), scalar<int16_t>(1), scalar<int16_t>(1)}),
                       arr<int16_t>({3}, {-2, -1, 0})));
}

TEST(Range, ExtremeIntegersDoNotOverflow) {
  auto out = run1("Range", {scalar<int64_t>(INT64_MIN), scalar<int64_t>(INT64_MAX), scalar<int64_t>(INT64_MAX)});
  EXPECT_TRUE(allClose(out, arr<int64_t>({3}, {INT64_MIN, -1, INT64_MAX - 1})));
}

TEST(Range, BadInputsThrow) {
  EXPECT_TRUE(throwsNamingNode(op("Range", {scalar<float>(0), scalar<float>(1), scalar<float>(0)}), "delta"));
  EXPECT_TRUE(throwsNamingNode(op("Range", {scalar<float>(0), scalar<float>(INFINITY), scalar<float>(1)}), "finite"));
  EXPECT_TRUE(throwsNamingNode(op("Range", {scalar<float>(0), scalar<double>(1), scalar<float>(1)}), "limit"));
  // Too long to allocate: an error, not a crash (the executor adds the node's name).
  EXPECT_THROW(run1("Range", {scalar<int64_t>(0), scalar<int64_t>(INT64_MAX), scalar<int64_t>(1)}), Error);
  EXPECT_TRUE(throwsNamingNode(op("Range", {scalar<int64_t>(INT64_MIN), scalar<int64_t>(INT64_MAX), scalar<int64_t>(1)}),
                               "int64"));
}

// ---- EyeLike ------------------------------------------------------------------------------------

TEST(EyeLike, DiagonalsAndDtype) {
  auto x = NDArray(DataType::Int32, {3, 4});
  EXPECT_TRUE(allClose(run1("EyeLike", {x}), arr<int32_t>({3, 4}, {1, 0, 0, 0, 0, 1, 0, 0, 0, 0, 1, 0})));
  EXPECT_TRUE(allClose(run1("EyeLike", {x}, attrs({{"k", int64_t{2}}, {"dtype", int64_t{1}}})),
                       arr<float>({3, 4}, {0, 0, 1, 0, 0, 0, 0, 1, 0, 0, 0, 0})));
  EXPECT_TRUE(allClose(run1("EyeLike", {x}, attrs({{"k", int64_t{-2}}, {"dtype", int64_t{9}}})),
                       arr<bool>({3, 4}, {0, 0, 0, 0, 0, 0, 0, 0, 1, 0, 0, 0})));
}

TEST(EyeLike, ExtremeKGivesZeros) {
  auto x = NDArray(DataType::Float, {2, 2});
  EXPECT_TRUE(allClose(run1("EyeLike", {x}, attrs({{"k", int64_t{INT64_MIN}}})), x));
  EXPECT_TRUE(allClose(run1("EyeLike", {x}, attrs({{"k", int64_t{INT64_MAX}}})), x));
}

TEST(EyeLike, NonMatrixThrows) { EXPECT_TRUE(throwsNamingNode(op("EyeLike", {iota<float>({3})}), "2-D")); }

// ---- OneHot -------------------------------------------------------------------------------------

TEST(OneHot, DefaultAxisAndNegativeIndices) {
  auto out = run1("OneHot", {arr<int64_t>({3}, {0, -1, 5}), scalar<int64_t>(3), arr<float>({2}, {0, 1})});
  // 5 is out of range: an all-off row.
  EXPECT_TRUE(allClose(out, arr<float>({3, 3}, {1, 0, 0, 0, 0, 1, 0, 0, 0})));
}

TEST(OneHot, AxisZeroFloatIndicesAndDepth) {
  auto out = run1("OneHot", {arr<float>({2}, {1.7f, 0}), arr<float>({1}, {3.0f}), arr<int32_t>({2}, {-1, 5})},
                  attrs({{"axis", int64_t{0}}}));
  EXPECT_TRUE(allClose(out, arr<int32_t>({3, 2}, {-1, 5, 5, -1, -1, -1})));
}

TEST(OneHot, MiddleAxisWithStrings) {
  auto out = run1("OneHot", {arr<int32_t>({2, 1}, {1, 0}), scalar<int32_t>(2), arr<std::string>({2}, {"off", "on"})},
                  attrs({{"axis", int64_t{-2}}}));
  EXPECT_TRUE(allClose(out, arr<std::string>({2, 2, 1}, {"off", "on", "on", "off"})));
}

TEST(OneHot, BadInputsThrow) {
  auto ind = arr<int64_t>({2}, {0, 1});
  EXPECT_TRUE(throwsNamingNode(op("OneHot", {ind, scalar<int64_t>(0), arr<float>({2}, {0, 1})}), "depth"));
  EXPECT_TRUE(throwsNamingNode(op("OneHot", {ind, scalar<float>(NAN), arr<float>({2}, {0, 1})}), "depth"));
  EXPECT_TRUE(throwsNamingNode(op("OneHot", {ind, scalar<int64_t>(2), arr<float>({3}, {0, 1, 2})}), "values"));
  EXPECT_TRUE(throwsNamingNode(
      op("OneHot", {ind, scalar<int64_t>(2), arr<float>({2}, {0, 1})}, attrs({{"axis", int64_t{2}}})), "axis"));
}

// ---- Shrink -------------------------------------------------------------------------------------

TEST(Shrink, SoftAndHard) {
  auto x = arr<float>({5}, {-2, -1, 0, 1, 2});
  EXPECT_TRUE(
      allClose(run1("Shrink", {x}, attrs({{"lambd", 1.5f}, {"bias", 1.5f}})), arr<float>({5}, {-0.5f, 0, 0, 0, 0.5f})));
  EXPECT_TRUE(allClose(run1("Shrink", {x}, attrs({{"lambd", 1.5f}})), arr<float>({5}, {-2, 0, 0, 0, 2})));
  EXPECT_TRUE(allClose(run1("Shrink", {x}), arr<float>({5}, {-2, -1, 0, 1, 2})));  // lambd 0.5, bias 0
}

TEST(Shrink, IntegersSaturate) {
  auto out = run1("Shrink", {arr<int8_t>({3}, {-128, 0, 127})}, attrs({{"lambd", 0.5f}, {"bias", -10.0f}}));
  EXPECT_TRUE(allClose(out, arr<int8_t>({3}, {-128, 0, 127})));
  auto u = run1("Shrink", {arr<uint8_t>({2}, {1, 200})}, attrs({{"lambd", 0.5f}, {"bias", 2.0f}}));
  EXPECT_TRUE(allClose(u, arr<uint8_t>({2}, {0, 198})));
}

}  // namespace
}  // namespace graft::testing
