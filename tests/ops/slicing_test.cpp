// Tests of src/ops/slicing.cpp: Slice, Split, Expand, Tile, Pad, ReverseSequence, Trilu.
// Expected values with non-trivial index arithmetic were computed with numpy.
#include <climits>

#include "tensor_test_util.hpp"

namespace graft::testing {
namespace {

// ---- Slice --------------------------------------------------------------------------------------

NDArray slice(const NDArray& x, std::vector<int64_t> starts, std::vector<int64_t> ends, std::vector<int64_t> axes = {},
              std::vector<int64_t> steps = {}) {
  std::vector<NDArray> in = {x, i64(std::move(starts)), i64(std::move(ends))};
  in.push_back(axes.empty() ? NDArray() : i64(std::move(axes)));
  if (!steps.empty()) in.push_back(i64(std::move(steps)));
  return run1("Slice", in);
}

TEST(Slice, Basic) {
  EXPECT_TRUE(allClose(slice(iota<float>({3, 4}), {0, 1}, {2, 3}), arr<float>({2, 2}, {1, 2, 5, 6})));
}

TEST(Slice, NegativeStartsEndsAndStepsLikeNumpy) {
  auto x = iota<int32_t>({3, 4, 5});
  // x[2:0:-1, ::2, -3:]
  EXPECT_TRUE(allClose(slice(x, {2, 0, -3}, {0, INT64_MAX, INT64_MAX}, {0, 1, 2}, {-1, 2, 1}),
                       arr<int32_t>({2, 2, 3}, {42, 43, 44, 52, 53, 54, 22, 23, 24, 32, 33, 34})));
  // x[:, 3:-5:-2, 1:100:3], axes given negative and out of order
  EXPECT_TRUE(allClose(slice(x, {1, 3}, {100, -5}, {-1, -2}, {3, -2}),
                       arr<int32_t>({3, 2, 2}, {16, 19, 6, 9, 36, 39, 26, 29, 56, 59, 46, 49})));
}

TEST(Slice, ReverseWholeAxisWithExtremeEnds) {
  EXPECT_TRUE(allClose(slice(iota<float>({5}), {-1}, {INT64_MIN}, {0}, {-1}), arr<float>({5}, {4, 3, 2, 1, 0})));
  EXPECT_TRUE(allClose(slice(iota<float>({5}), {INT64_MAX}, {INT64_MIN}, {0}, {-2}), arr<float>({3}, {4, 2, 0})));
}

TEST(Slice, OutOfRangeStartsAndEndsClamp) {
  EXPECT_EQ(slice(iota<float>({5}), {10}, {20}).shape(), (Shape{0}));
  EXPECT_TRUE(allClose(slice(iota<float>({3}), {-100}, {100}), iota<float>({3})));
  EXPECT_EQ(slice(iota<float>({5}), {3}, {1}).shape(), (Shape{0}));
}

TEST(Slice, NegativeStepClampsStartIntoTheAxisAsTheSpecSays) {
  // starts -5 on an axis of 2 becomes -3, clamped to [0, 1] for negative steps: element 0 is
  // taken (numpy, and so ONNX's Python reference, would take nothing here).
  EXPECT_TRUE(allClose(slice(iota<float>({2}), {-5}, {INT64_MIN}, {0}, {-1}), arr<float>({1}, {0})));
}

TEST(Slice, ExtremeStepsTakeOneElement) {
  EXPECT_TRUE(allClose(slice(iota<float>({5}), {1}, {5}, {0}, {INT64_MAX}), arr<float>({1}, {1})));
  EXPECT_TRUE(allClose(slice(iota<float>({5}), {3}, {-10}, {0}, {INT64_MIN}), arr<float>({1}, {3})));
}

TEST(Slice, Int32InputsAndStrings) {
  auto out = run1("Slice", {strIota({4}), arr<int32_t>({1}, {1}), arr<int32_t>({1}, {-1})});
  EXPECT_TRUE(allClose(out, arr<std::string>({2}, {"s1", "s2"})));
}

TEST(Slice, BadArgumentsThrow) {
  auto x = iota<float>({3, 3});
  EXPECT_TRUE(throwsNamingNode(op("Slice", {x, i64({0}), i64({1}), i64({0}), i64({0})}), "step"));
  EXPECT_TRUE(throwsNamingNode(op("Slice", {x, i64({0, 0}), i64({1, 1}), i64({0, -2})}), "twice"));
  EXPECT_TRUE(throwsNamingNode(op("Slice", {x, i64({0}), i64({1, 1})}), "same length"));
  EXPECT_TRUE(throwsNamingNode(op("Slice", {x, i64({0}), i64({1}), i64({2})}), "axis"));
}

// ---- Split --------------------------------------------------------------------------------------

std::vector<NDArray> split(std::vector<NDArray> in, int outputs, int64_t axis = 0) {
  return runReference(op("Split", std::move(in), attrs({{"axis", axis}}), outputs));
}

TEST(Split, EqualParts) {
  auto out = split({iota<float>({6})}, 3);
  ASSERT_EQ(out.size(), 3u);
  EXPECT_TRUE(allClose(out[0], arr<float>({2}, {0, 1})));
  EXPECT_TRUE(allClose(out[2], arr<float>({2}, {4, 5})));
  auto two = split({iota<int64_t>({2, 4})}, 2, -1);
  EXPECT_TRUE(allClose(two[0], arr<int64_t>({2, 2}, {0, 1, 4, 5})));
  EXPECT_TRUE(allClose(two[1], arr<int64_t>({2, 2}, {2, 3, 6, 7})));
}

TEST(Split, GivenSizesIncludingZero) {
  auto out = split({strIota({2, 3}), i64({0, 1, 2})}, 3, 1);
  EXPECT_EQ(out[0].shape(), (Shape{2, 0}));
  EXPECT_TRUE(allClose(out[1], arr<std::string>({2, 1}, {"s0", "s3"})));
  EXPECT_TRUE(allClose(out[2], arr<std::string>({2, 2}, {"s1", "s2", "s4", "s5"})));
}

TEST(Split, BadSizesThrow) {
  EXPECT_TRUE(throwsNamingNode(op("Split", {iota<float>({5})}, {}, 2), "equal parts"));
  EXPECT_TRUE(throwsNamingNode(op("Split", {iota<float>({5}), i64({2, 2})}, {}, 2), "sum"));
  EXPECT_TRUE(throwsNamingNode(op("Split", {iota<float>({5}), i64({6, -1})}, {}, 2), ">= 0"));
  EXPECT_TRUE(throwsNamingNode(op("Split", {iota<float>({5}), i64({5})}, {}, 2), "entries"));
}

// ---- Expand, Tile -------------------------------------------------------------------------------

TEST(Expand, BroadcastsBothWays) {
  auto x = arr<float>({3, 1}, {1, 2, 3});
  auto out = run1("Expand", {x, i64({2, 1, 2})});
  EXPECT_TRUE(allClose(out, arr<float>({2, 3, 2}, {1, 1, 2, 2, 3, 3, 1, 1, 2, 2, 3, 3})));
  // A target smaller than the input keeps the input's dimensions.
  EXPECT_TRUE(allClose(run1("Expand", {x, i64({1})}), x));
  EXPECT_TRUE(allClose(run1("Expand", {scalar<std::string>("a"), i64({2})}), arr<std::string>({2}, {"a", "a"})));
}

TEST(Expand, BadShapesThrow) {
  EXPECT_TRUE(throwsNamingNode(op("Expand", {iota<float>({3}), i64({2})}), "broadcast"));
  EXPECT_TRUE(throwsNamingNode(op("Expand", {iota<float>({1}), i64({-2})}), "negative"));
}

TEST(Tile, RepeatsEachAxis) {
  auto out = run1("Tile", {iota<int32_t>({2, 2}), i64({1, 2})});
  EXPECT_TRUE(allClose(out, arr<int32_t>({2, 4}, {0, 1, 0, 1, 2, 3, 2, 3})));
  out = run1("Tile", {iota<float>({2}), i64({3})});
  EXPECT_TRUE(allClose(out, arr<float>({6}, {0, 1, 0, 1, 0, 1})));
  EXPECT_EQ(run1("Tile", {iota<float>({2, 2}), i64({0, 2})}).shape(), (Shape{0, 4}));
  EXPECT_TRUE(allClose(run1("Tile", {strIota({1}), i64({2})}), arr<std::string>({2}, {"s0", "s0"})));
}

TEST(Tile, BadRepeatsThrow) {
  EXPECT_TRUE(throwsNamingNode(op("Tile", {iota<float>({2, 2}), i64({2})}), "rank"));
  EXPECT_TRUE(throwsNamingNode(op("Tile", {iota<float>({2}), i64({-1})}), ">= 0"));
  EXPECT_TRUE(throwsNamingNode(op("Tile", {iota<float>({2}), i64({INT64_MAX})}), "overflow"));
}

// ---- Pad ----------------------------------------------------------------------------------------

NDArray pad(const NDArray& x, std::vector<int64_t> pads, const char* mode, NDArray value = {}) {
  std::vector<NDArray> in = {x, i64(std::move(pads))};
  if (value.valid()) in.push_back(value);
  return run1("Pad", in, attrs({{"mode", std::string(mode)}}));
}

TEST(Pad, ConstantWithValueAndDefault) {
  auto x = arr<float>({2, 2}, {1, 2, 3, 4});
  EXPECT_TRUE(
      allClose(pad(x, {1, 0, 0, 1}, "constant", scalar<float>(9)), arr<float>({3, 3}, {9, 9, 9, 1, 2, 9, 3, 4, 9})));
  EXPECT_TRUE(allClose(pad(x, {0, 1, 0, 0}, "constant"), arr<float>({2, 3}, {0, 1, 2, 0, 3, 4})));
  EXPECT_TRUE(allClose(pad(strIota({1}), {1, 1}, "constant"), arr<std::string>({3}, {"", "s0", ""})));
}

TEST(Pad, ReflectLikeNumpyIncludingWidePads) {
  EXPECT_TRUE(allClose(pad(arr<int32_t>({3}, {1, 2, 3}), {4, 5}, "reflect"),
                       arr<int32_t>({12}, {1, 2, 3, 2, 1, 2, 3, 2, 1, 2, 3, 2})));
  EXPECT_TRUE(allClose(pad(iota<float>({2, 3}), {1, 2, 0, 1}, "reflect"),
                       arr<float>({3, 6}, {5, 4, 3, 4, 5, 4, 2, 1, 0, 1, 2, 1, 5, 4, 3, 4, 5, 4})));
}

TEST(Pad, Edge) {
  EXPECT_TRUE(allClose(pad(arr<int32_t>({3}, {1, 2, 3}), {2, 2}, "edge"), arr<int32_t>({7}, {1, 1, 1, 2, 3, 3, 3})));
}

TEST(Pad, NegativePadsCrop) {
  auto x = iota<float>({2, 4});
  EXPECT_TRUE(allClose(pad(x, {0, -1, 0, -2}, "constant"), arr<float>({2, 1}, {1, 5})));
  // Crop first, then pad the cropped range: [1, 2, 3] -> [2, 3] -> reflect 2 at the end.
  EXPECT_TRUE(allClose(pad(arr<float>({3}, {1, 2, 3}), {-1, 2}, "reflect"), arr<float>({4}, {2, 3, 2, 3})));
  EXPECT_TRUE(allClose(pad(arr<float>({3}, {1, 2, 3}), {-1, 1}, "edge"), arr<float>({3}, {2, 3, 3})));
}

TEST(Pad, BadArgumentsThrow) {
  auto x = iota<float>({2});
  EXPECT_TRUE(throwsNamingNode(op("Pad", {x, i64({1})}), "pads"));
  EXPECT_TRUE(throwsNamingNode(op("Pad", {x, i64({-2, -1})}), "remove"));
  EXPECT_TRUE(throwsNamingNode(op("Pad", {x, i64({1, 1}), scalar<double>(1)}), "constant_value"));
  EXPECT_TRUE(throwsNamingNode(
      op("Pad", {NDArray(DataType::Float, {0}), i64({1, 0})}, attrs({{"mode", std::string("edge")}})), "size 0"));
  EXPECT_TRUE(throwsNamingNode(op("Pad", {x, i64({1, 1})}, attrs({{"mode", std::string("mirror")}})), "mirror"));
  EXPECT_TRUE(throwsNamingNode(op("Pad", {x, i64({INT64_MAX, 1})}), "overflow"));
}

// ---- ReverseSequence ----------------------------------------------------------------------------

TEST(ReverseSequence, TimeMajor) {
  // Spec example: time_axis 0, batch_axis 1.
  auto x = arr<float>({4, 4}, {0, 4, 8, 12, 1, 5, 9, 13, 2, 6, 10, 14, 3, 7, 11, 15});
  auto out =
      run1("ReverseSequence", {x, i64({4, 3, 2, 1})}, attrs({{"time_axis", int64_t{0}}, {"batch_axis", int64_t{1}}}));
  EXPECT_TRUE(allClose(out, arr<float>({4, 4}, {3, 6, 9, 12, 2, 5, 8, 13, 1, 4, 10, 14, 0, 7, 11, 15})));
}

TEST(ReverseSequence, BatchMajorWithInnerDims) {
  auto x = strIota({2, 3, 1});
  auto out = run1("ReverseSequence", {x, i64({3, 0})}, attrs({{"time_axis", int64_t{1}}, {"batch_axis", int64_t{0}}}));
  EXPECT_TRUE(allClose(out, arr<std::string>({2, 3, 1}, {"s2", "s1", "s0", "s3", "s4", "s5"})));
}

TEST(ReverseSequence, BadLengthsThrow) {
  auto x = iota<float>({3, 2});
  EXPECT_TRUE(throwsNamingNode(op("ReverseSequence", {x, i64({4, 1})}), "out of range"));
  EXPECT_TRUE(throwsNamingNode(op("ReverseSequence", {x, i64({-1, 1})}), "out of range"));
  EXPECT_TRUE(throwsNamingNode(op("ReverseSequence", {x, i64({1})}), "sequence_lens"));
  EXPECT_TRUE(
      throwsNamingNode(op("ReverseSequence", {x, i64({1, 1})}, attrs({{"time_axis", int64_t{1}}})), "batch_axis"));
}

// ---- Trilu --------------------------------------------------------------------------------------

TEST(Trilu, UpperAndLowerWithK) {
  auto x = iota<int64_t>({3, 4});
  EXPECT_TRUE(
      allClose(run1("Trilu", {x, scalar<int64_t>(-1)}), arr<int64_t>({3, 4}, {0, 1, 2, 3, 4, 5, 6, 7, 0, 9, 10, 11})));
  EXPECT_TRUE(allClose(run1("Trilu", {x, scalar<int64_t>(1)}, attrs({{"upper", int64_t{0}}})),
                       arr<int64_t>({3, 4}, {0, 1, 0, 0, 4, 5, 6, 0, 8, 9, 10, 11})));
  EXPECT_TRUE(allClose(run1("Trilu", {x}), arr<int64_t>({3, 4}, {0, 1, 2, 3, 0, 5, 6, 7, 0, 0, 10, 11})));
}

TEST(Trilu, BatchedAndExtremeK) {
  auto x = iota<float>({2, 3, 4});
  EXPECT_TRUE(
      allClose(run1("Trilu", {x, scalar<int64_t>(-1)}, attrs({{"upper", int64_t{0}}})),
               arr<float>({2, 3, 4}, {0, 0, 0, 0, 4, 0, 0, 0, 8, 9, 0, 0, 0, 0, 0, 0, 16, 0, 0, 0, 20, 21, 0, 0})));
  EXPECT_TRUE(allClose(run1("Trilu", {x, scalar<int64_t>(INT64_MIN)}), x));
  EXPECT_TRUE(allClose(run1("Trilu", {x, scalar<int64_t>(INT64_MAX)}), NDArray(DataType::Float, {2, 3, 4})));
  EXPECT_TRUE(allClose(run1("Trilu", {strIota({2, 2})}, attrs({{"upper", int64_t{0}}})),
                       arr<std::string>({2, 2}, {"s0", "", "s2", "s3"})));
}

TEST(Trilu, RankBelowTwoThrows) { EXPECT_TRUE(throwsNamingNode(op("Trilu", {iota<float>({3})}), "rank")); }

}  // namespace
}  // namespace graft::testing
