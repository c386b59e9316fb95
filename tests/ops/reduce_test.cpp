// Tests of src/ops/reduce.cpp: Reduce*, ArgMax/ArgMin, CumSum, TopK.
#include <cmath>
#include <limits>

#include "op_case_util.hpp"

namespace graft::testing {
namespace {

constexpr float kInf = std::numeric_limits<float>::infinity();

ir::AttrValue ints(std::vector<int64_t> v) { return v; }

// x = [[1, 2, 3], [4, 5, 6]] is the running example: hand-checkable sums, products, norms.
NDArray x23() { return arr<float>({2, 3}, {1, 2, 3, 4, 5, 6}); }

// ---- Reduce* -------------------------------------------------------------------------------------

TEST(ReduceSum, AxesAsInputKeepdims) {
  EXPECT_TRUE(allClose(run1("ReduceSum", {x23(), arr<int64_t>({1}, {1})}), arr<float>({2, 1}, {6, 15})));
  EXPECT_TRUE(allClose(run1("ReduceSum", {x23(), arr<int64_t>({1}, {-2})}, attrs({{"keepdims", int64_t{0}}})),
                       arr<float>({3}, {5, 7, 9})));
}

TEST(ReduceSum, NoAxesReducesEverythingUnlessNoop) {
  EXPECT_TRUE(allClose(run1("ReduceSum", {x23()}), arr<float>({1, 1}, {21})));
  EXPECT_TRUE(allClose(run1("ReduceSum", {x23(), arr<int64_t>({0}, {})}), arr<float>({1, 1}, {21})));
  EXPECT_TRUE(allClose(run1("ReduceSum", {x23(), arr<int64_t>({0}, {})}, attrs({{"noop_with_empty_axes", int64_t{1}}})), x23()));
}

TEST(ReduceSum, AxesAsAttribute) {
  EXPECT_TRUE(allClose(run1("ReduceSum", {x23()}, attrs({{"axes", ints({0})}, {"keepdims", int64_t{0}}})),
                       arr<float>({3}, {5, 7, 9})));
}

TEST(ReduceSum, EmptyReductionIsZero) {
  NDArray e(DataType::Float, {2, 0});
  EXPECT_TRUE(allClose(run1("ReduceSum", {e, arr<int64_t>({1}, {1})}), arr<float>({2, 1}, {0, 0})));
}

TEST(ReduceSum, IntegersWrapWithoutOverflowTrap) {
  int32_t big = std::numeric_limits<int32_t>::max();
  EXPECT_TRUE(allClose(run1("ReduceSum", {arr<int32_t>({2}, {big, 1}), arr<int64_t>({1}, {0})}),
                       arr<int32_t>({1}, {std::numeric_limits<int32_t>::min()})));
  EXPECT_TRUE(allClose(run1("ReduceSum", {arr<int64_t>({3}, {1, 2, 3})}, attrs({{"keepdims", int64_t{0}}})), scalar<int64_t>(6)));
}

TEST(ReduceSum, RejectsBadAxes) {
  EXPECT_THROW(run1("ReduceSum", {x23(), arr<int64_t>({1}, {2})}), Error);
  EXPECT_THROW(run1("ReduceSum", {x23(), arr<int64_t>({2}, {1, -1})}), Error);
  EXPECT_THROW(run1("ReduceSum", {x23(), arr<int64_t>({1}, {0})}, attrs({{"axes", ints({0})}})), Error);
}

TEST(ReduceSum, ThreeDimsMiddleAxisMatchesNaiveLoop) {
  NDArray x = randomArray(DataType::Double, {3, 4, 5}, 7);
  NDArray want(DataType::Double, {3, 1, 5});
  for (int a = 0; a < 3; ++a)
    for (int c = 0; c < 5; ++c) {
      double s = 0;
      for (int b = 0; b < 4; ++b) s += x.data<double>()[(a * 4 + b) * 5 + c];
      want.data<double>()[a * 5 + c] = s;
    }
  EXPECT_TRUE(allClose(run1("ReduceSum", {x, arr<int64_t>({1}, {1})}), want, 1e-12, 1e-12));
}

TEST(ReduceMean, Basic) {
  EXPECT_TRUE(allClose(run1("ReduceMean", {x23()}, attrs({{"axes", ints({1})}})), arr<float>({2, 1}, {2, 5})));
  EXPECT_TRUE(allClose(run1("ReduceMean", {x23()}, attrs({{"keepdims", int64_t{0}}})), scalar<float>(3.5f)));
}

TEST(ReduceMean, EmptyIsNaNAndIntegersTruncate) {
  EXPECT_TRUE(allClose(run1("ReduceMean", {NDArray(DataType::Float, {0, 2})}, attrs({{"axes", ints({0})}})),
                       arr<float>({1, 2}, {NAN, NAN})));
  EXPECT_TRUE(allClose(run1("ReduceMean", {arr<int32_t>({2}, {1, 2})}), arr<int32_t>({1}, {1})));
}

TEST(ReduceMax, PropagatesNaNAndEmptyIsMinusInf) {
  EXPECT_TRUE(allClose(run1("ReduceMax", {x23()}, attrs({{"axes", ints({1})}})), arr<float>({2, 1}, {3, 6})));
  EXPECT_TRUE(allClose(run1("ReduceMax", {arr<float>({3}, {1, NAN, 2})}), arr<float>({1}, {NAN})));
  EXPECT_TRUE(allClose(run1("ReduceMax", {NDArray(DataType::Float, {0})}), arr<float>({1}, {-kInf})));
  EXPECT_TRUE(allClose(run1("ReduceMax", {arr<int8_t>({3}, {-5, 7, 3})}), arr<int8_t>({1}, {7})));
}

TEST(ReduceMin, Basic) {
  EXPECT_TRUE(allClose(run1("ReduceMin", {x23()}, attrs({{"axes", ints({0})}})), arr<float>({1, 3}, {1, 2, 3})));
  EXPECT_TRUE(allClose(run1("ReduceMin", {NDArray(DataType::Float, {0})}), arr<float>({1}, {kInf})));
  EXPECT_TRUE(allClose(run1("ReduceMin", {NDArray(DataType::Int32, {0})}),
                       arr<int32_t>({1}, {std::numeric_limits<int32_t>::max()})));
}

TEST(ReduceProd, Basic) {
  EXPECT_TRUE(allClose(run1("ReduceProd", {x23()}, attrs({{"axes", ints({1})}})), arr<float>({2, 1}, {6, 120})));
  EXPECT_TRUE(allClose(run1("ReduceProd", {NDArray(DataType::Float, {0})}), arr<float>({1}, {1})));
  EXPECT_TRUE(allClose(run1("ReduceProd", {arr<int64_t>({3}, {-2, 3, 4})}), arr<int64_t>({1}, {-24})));
}

TEST(ReduceL1, Basic) {
  EXPECT_TRUE(allClose(run1("ReduceL1", {arr<float>({2, 2}, {-1, 2, -3, -4})}, attrs({{"axes", ints({1})}})),
                       arr<float>({2, 1}, {3, 7})));
  EXPECT_TRUE(allClose(run1("ReduceL1", {arr<int32_t>({2}, {-3, 4})}), arr<int32_t>({1}, {7})));
}

TEST(ReduceL2, Basic) {
  EXPECT_TRUE(allClose(run1("ReduceL2", {arr<float>({2, 2}, {3, -4, 6, 8})}, attrs({{"axes", ints({1})}})),
                       arr<float>({2, 1}, {5, 10})));
}

TEST(ReduceLogSum, Basic) {
  EXPECT_TRUE(allClose(run1("ReduceLogSum", {x23()}, attrs({{"axes", ints({1})}})),
                       arr<float>({2, 1}, {std::log(6.0f), std::log(15.0f)})));
  EXPECT_TRUE(allClose(run1("ReduceLogSum", {NDArray(DataType::Float, {0})}), arr<float>({1}, {-kInf})));
}

TEST(ReduceLogSumExp, StableForLargeInputs) {
  EXPECT_TRUE(allClose(run1("ReduceLogSumExp", {x23()}, attrs({{"axes", ints({1})}})),
                       arr<float>({2, 1}, {static_cast<float>(std::log(std::exp(1.0) + std::exp(2.0) + std::exp(3.0))),
                                           static_cast<float>(std::log(std::exp(4.0) + std::exp(5.0) + std::exp(6.0)))})));
  // exp(1000) overflows double; the result must still be 1000 + log(2).
  EXPECT_TRUE(allClose(run1("ReduceLogSumExp", {arr<float>({2}, {1000, 1000})}), arr<float>({1}, {1000 + std::log(2.0f)})));
  EXPECT_TRUE(allClose(run1("ReduceLogSumExp", {NDArray(DataType::Float, {0})}), arr<float>({1}, {-kInf})));
}

TEST(ReduceSumSquare, Basic) {
  EXPECT_TRUE(allClose(run1("ReduceSumSquare", {x23()}, attrs({{"axes", ints({1})}})), arr<float>({2, 1}, {14, 77})));
  EXPECT_TRUE(allClose(run1("ReduceSumSquare", {arr<int64_t>({2}, {-3, 4})}), arr<int64_t>({1}, {25})));
}

TEST(ReduceSumSquare, HalfInput) {
  NDArray h(DataType::Float16, {3});
  for (int i = 0; i < 3; ++i) h.data<Half>()[i] = Half(static_cast<float>(i + 1));
  NDArray y = run1("ReduceSumSquare", {h});
  ASSERT_EQ(y.dtype(), DataType::Float16);
  EXPECT_EQ(static_cast<float>(y.data<Half>()[0]), 14.0f);
}

// ---- ArgMax / ArgMin -----------------------------------------------------------------------------

TEST(ArgMax, AxisKeepdimsAndLastIndex) {
  auto x = arr<float>({2, 3}, {1, 3, 3, 5, 2, 5});
  EXPECT_TRUE(allClose(run1("ArgMax", {x}, attrs({{"axis", int64_t{1}}})), arr<int64_t>({2, 1}, {1, 0})));
  EXPECT_TRUE(allClose(run1("ArgMax", {x}, attrs({{"axis", int64_t{1}}, {"select_last_index", int64_t{1}}})),
                       arr<int64_t>({2, 1}, {2, 2})));
  EXPECT_TRUE(allClose(run1("ArgMax", {x}, attrs({{"keepdims", int64_t{0}}})), arr<int64_t>({3}, {1, 0, 1})));
}

TEST(ArgMax, Int64DoesNotLosePrecision) {
  int64_t big = (int64_t{1} << 60);
  EXPECT_TRUE(allClose(run1("ArgMax", {arr<int64_t>({2}, {big, big + 1})}), arr<int64_t>({1}, {1})));
}

TEST(ArgMax, NaNWinsAndEmptyAxisThrows) {
  EXPECT_TRUE(allClose(run1("ArgMax", {arr<float>({3}, {1, NAN, 5})}), arr<int64_t>({1}, {1})));
  EXPECT_THROW(run1("ArgMax", {NDArray(DataType::Float, {2, 0})}, attrs({{"axis", int64_t{1}}})), Error);
  EXPECT_THROW(run1("ArgMax", {x23()}, attrs({{"axis", int64_t{2}}})), Error);
}

TEST(ArgMin, Basic) {
  auto x = arr<int32_t>({2, 3}, {4, 1, 1, 0, 7, 0});
  EXPECT_TRUE(allClose(run1("ArgMin", {x}, attrs({{"axis", int64_t{-1}}})), arr<int64_t>({2, 1}, {1, 0})));
  EXPECT_TRUE(allClose(run1("ArgMin", {x}, attrs({{"axis", int64_t{-1}}, {"select_last_index", int64_t{1}}})),
                       arr<int64_t>({2, 1}, {2, 2})));
}

// ---- CumSum --------------------------------------------------------------------------------------

TEST(CumSum, ExclusiveAndReverse) {
  auto x = arr<double>({4}, {1, 2, 3, 4});
  auto ax = scalar<int32_t>(0);
  EXPECT_TRUE(allClose(run1("CumSum", {x, ax}), arr<double>({4}, {1, 3, 6, 10})));
  EXPECT_TRUE(allClose(run1("CumSum", {x, ax}, attrs({{"exclusive", int64_t{1}}})), arr<double>({4}, {0, 1, 3, 6})));
  EXPECT_TRUE(allClose(run1("CumSum", {x, ax}, attrs({{"reverse", int64_t{1}}})), arr<double>({4}, {10, 9, 7, 4})));
  EXPECT_TRUE(allClose(run1("CumSum", {x, ax}, attrs({{"reverse", int64_t{1}}, {"exclusive", int64_t{1}}})),
                       arr<double>({4}, {9, 7, 4, 0})));
}

TEST(CumSum, AlongAxisOneOfAMatrix) {
  EXPECT_TRUE(allClose(run1("CumSum", {arr<int64_t>({2, 3}, {1, 2, 3, 4, 5, 6}), arr<int64_t>({1}, {-1})}),
                       arr<int64_t>({2, 3}, {1, 3, 6, 4, 9, 15})));
  EXPECT_TRUE(allClose(run1("CumSum", {x23(), scalar<int64_t>(0)}), arr<float>({2, 3}, {1, 2, 3, 5, 7, 9})));
}

TEST(CumSum, RejectsBadAxis) {
  EXPECT_THROW(run1("CumSum", {x23(), scalar<int64_t>(2)}), Error);
  EXPECT_THROW(run1("CumSum", {x23(), arr<int64_t>({2}, {0, 1})}), Error);
}

// ---- TopK ----------------------------------------------------------------------------------------

TEST(TopK, LargestAndSmallestWithStableTies) {
  auto x = arr<float>({2, 4}, {1, 4, 4, 2, 3, 3, 1, 3});
  auto out = runReference(opCase("TopK", {x, arr<int64_t>({1}, {3})}, {}, 2));
  EXPECT_TRUE(allClose(out[0], arr<float>({2, 3}, {4, 4, 2, 3, 3, 3})));
  EXPECT_TRUE(allClose(out[1], arr<int64_t>({2, 3}, {1, 2, 3, 0, 1, 3})));
  out = runReference(opCase("TopK", {x, arr<int64_t>({1}, {2})}, attrs({{"largest", int64_t{0}}}), 2));
  EXPECT_TRUE(allClose(out[0], arr<float>({2, 2}, {1, 2, 1, 3})));
  EXPECT_TRUE(allClose(out[1], arr<int64_t>({2, 2}, {0, 3, 2, 0})));
}

TEST(TopK, AlongAxisZero) {
  auto out = runReference(opCase("TopK", {arr<int32_t>({3, 2}, {5, 0, 9, 1, 7, 2}), arr<int64_t>({1}, {1})},
                           attrs({{"axis", int64_t{0}}}), 2));
  EXPECT_TRUE(allClose(out[0], arr<int32_t>({1, 2}, {9, 2})));
  EXPECT_TRUE(allClose(out[1], arr<int64_t>({1, 2}, {1, 2})));
}

TEST(TopK, NaNIsLargestAndKIsChecked) {
  auto out = runReference(opCase("TopK", {arr<float>({3}, {1, NAN, 2}), arr<int64_t>({1}, {2})}, {}, 2));
  EXPECT_TRUE(allClose(out[1], arr<int64_t>({2}, {1, 2})));
  EXPECT_THROW(runReference(opCase("TopK", {arr<float>({3}, {1, 2, 3}), arr<int64_t>({1}, {4})}, {}, 2)), Error);
  EXPECT_THROW(runReference(opCase("TopK", {arr<float>({3}, {1, 2, 3}), arr<int64_t>({1}, {-1})}, {}, 2)), Error);
  out = runReference(opCase("TopK", {arr<float>({3}, {1, 2, 3}), arr<int64_t>({1}, {0})}, {}, 2));
  EXPECT_EQ(out[0].shape(), Shape({0}));
}

}  // namespace
}  // namespace graft::testing
