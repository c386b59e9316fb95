// Tests of src/ops/select.cpp: Compress, NonZero, Unique.
#include <cmath>

#include "tensor_test_util.hpp"

namespace graft::testing {
namespace {

// ---- Compress -----------------------------------------------------------------------------------

TEST(Compress, AlongAxis) {
  auto x = arr<float>({3, 2}, {1, 2, 3, 4, 5, 6});
  EXPECT_TRUE(allClose(run1("Compress", {x, arr<bool>({3}, {false, true, true})}, attrs({{"axis", int64_t{0}}})),
                       arr<float>({2, 2}, {3, 4, 5, 6})));
  EXPECT_TRUE(allClose(run1("Compress", {x, arr<bool>({2}, {false, true})}, attrs({{"axis", int64_t{-1}}})),
                       arr<float>({3, 1}, {2, 4, 6})));
}

TEST(Compress, WithoutAxisFlattensAndShortConditionMeansFalse) {
  auto x = arr<float>({3, 2}, {1, 2, 3, 4, 5, 6});
  EXPECT_TRUE(
      allClose(run1("Compress", {x, arr<bool>({5}, {false, true, false, false, true})}), arr<float>({2}, {2, 5})));
}

TEST(Compress, LongConditionMayOnlyBeFalseBeyondTheAxis) {
  auto x = strIota({2});
  EXPECT_TRUE(allClose(run1("Compress", {x, arr<bool>({3}, {true, false, false})}, attrs({{"axis", int64_t{0}}})),
                       arr<std::string>({1}, {"s0"})));
  EXPECT_TRUE(throwsNamingNode(op("Compress", {x, arr<bool>({3}, {true, false, true})}, attrs({{"axis", int64_t{0}}})),
                               "past the end"));
  EXPECT_TRUE(throwsNamingNode(op("Compress", {x, arr<bool>({1}, {true})}, attrs({{"axis", int64_t{1}}})), "axis"));
}

// ---- NonZero ------------------------------------------------------------------------------------

TEST(NonZero, CoordinatesInRowMajorOrder) {
  auto out = run1("NonZero", {arr<bool>({2, 2}, {true, false, true, true})});
  EXPECT_TRUE(allClose(out, arr<int64_t>({2, 3}, {0, 1, 1, 0, 0, 1})));
  out = run1("NonZero", {arr<float>({4}, {0.0f, -0.0f, NAN, 2})});
  EXPECT_TRUE(allClose(out, arr<int64_t>({1, 2}, {2, 3})));  // NaN counts as non-zero, -0 does not
  out = run1("NonZero", {arr<std::string>({3}, {"", "a", ""})});
  EXPECT_TRUE(allClose(out, arr<int64_t>({1, 1}, {1})));
}

TEST(NonZero, ScalarAndEmpty) {
  EXPECT_EQ(run1("NonZero", {scalar<int32_t>(3)}).shape(), (Shape{0, 1}));
  EXPECT_EQ(run1("NonZero", {NDArray(DataType::Int8, {0, 3})}).shape(), (Shape{2, 0}));
}

// ---- Unique -------------------------------------------------------------------------------------

struct UniqueOut {
  NDArray y, indices, inverse, counts;
};

UniqueOut unique(NDArray x, ir::Attributes a) {
  auto out = runReference(op("Unique", {std::move(x)}, std::move(a), 4));
  return {out.at(0), out.at(1), out.at(2), out.at(3)};
}

TEST(Unique, SortedWithoutAxis) {
  auto u = unique(arr<float>({6}, {2, 1, 1, 3, 4, 3}), {});
  EXPECT_TRUE(allClose(u.y, arr<float>({4}, {1, 2, 3, 4})));
  EXPECT_TRUE(allClose(u.indices, arr<int64_t>({4}, {1, 0, 3, 4})));
  EXPECT_TRUE(allClose(u.inverse, arr<int64_t>({6}, {1, 0, 0, 2, 3, 2})));
  EXPECT_TRUE(allClose(u.counts, arr<int64_t>({4}, {2, 1, 2, 1})));
}

TEST(Unique, UnsortedKeepsFirstOccurrenceOrder) {
  auto u = unique(arr<float>({6}, {2, 1, 1, 3, 4, 3}), attrs({{"sorted", int64_t{0}}}));
  EXPECT_TRUE(allClose(u.y, arr<float>({4}, {2, 1, 3, 4})));
  EXPECT_TRUE(allClose(u.indices, arr<int64_t>({4}, {0, 1, 3, 4})));
  EXPECT_TRUE(allClose(u.inverse, arr<int64_t>({6}, {0, 1, 1, 2, 3, 2})));
  EXPECT_TRUE(allClose(u.counts, arr<int64_t>({4}, {1, 2, 2, 1})));
}

TEST(Unique, SortedAlongAxis) {
  // Spec example: unique rows of [[1, 0, 0], [1, 0, 0], [2, 3, 4]].
  auto x = arr<int32_t>({3, 3}, {1, 0, 0, 1, 0, 0, 2, 3, 4});
  auto u = unique(x, attrs({{"axis", int64_t{0}}}));
  EXPECT_TRUE(allClose(u.y, arr<int32_t>({2, 3}, {1, 0, 0, 2, 3, 4})));
  EXPECT_TRUE(allClose(u.indices, arr<int64_t>({2}, {0, 2})));
  EXPECT_TRUE(allClose(u.inverse, arr<int64_t>({3}, {0, 0, 1})));
  EXPECT_TRUE(allClose(u.counts, arr<int64_t>({2}, {2, 1})));
}

TEST(Unique, AlongInnerAxisOf3d) {
  // Columns (axis 1) of a [2, 3, 2] tensor; column 0 equals column 2.
  auto x = arr<float>({2, 3, 2}, {1, 1, 0, 1, 1, 1, 2, 2, 0, 2, 2, 2});
  auto u = unique(x, attrs({{"axis", int64_t{-2}}}));
  EXPECT_TRUE(allClose(u.y, arr<float>({2, 2, 2}, {0, 1, 1, 1, 0, 2, 2, 2})));
  EXPECT_TRUE(allClose(u.indices, arr<int64_t>({2}, {1, 0})));
  EXPECT_TRUE(allClose(u.inverse, arr<int64_t>({3}, {1, 0, 1})));
  EXPECT_TRUE(allClose(u.counts, arr<int64_t>({2}, {1, 2})));
  auto unsorted = unique(x, attrs({{"axis", int64_t{1}}, {"sorted", int64_t{0}}}));
  EXPECT_TRUE(allClose(unsorted.y, arr<float>({2, 2, 2}, {1, 1, 0, 1, 2, 2, 0, 2})));
  EXPECT_TRUE(allClose(unsorted.inverse, arr<int64_t>({3}, {0, 1, 0})));
}

TEST(Unique, StringsAndNaNs) {
  auto u = unique(arr<std::string>({4}, {"b", "a", "b", "c"}), {});
  EXPECT_TRUE(allClose(u.y, arr<std::string>({3}, {"a", "b", "c"})));
  EXPECT_TRUE(allClose(u.counts, arr<int64_t>({3}, {1, 2, 1})));
  // NaNs group together and sort last, like numpy.unique.
  auto n = unique(arr<double>({4}, {2, NAN, 1, NAN}), {});
  EXPECT_TRUE(allClose(n.y, arr<double>({3}, {1, 2, NAN})));
  EXPECT_TRUE(allClose(n.indices, arr<int64_t>({3}, {2, 0, 1})));
  EXPECT_TRUE(allClose(n.inverse, arr<int64_t>({4}, {1, 2, 0, 2})));
}

TEST(Unique, BadAxisThrows) {
  EXPECT_TRUE(throwsNamingNode(op("Unique", {iota<float>({2})}, attrs({{"axis", int64_t{1}}}), 4), "axis"));
}

}  // namespace
}  // namespace graft::testing
