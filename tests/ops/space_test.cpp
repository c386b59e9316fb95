// Tests of src/ops/space.cpp: DepthToSpace (DCR, CRD) and SpaceToDepth.
#include <numeric>

#include "op_test_util.hpp"

namespace graft::testing {
namespace {

NDArray run1(const std::string& type, std::vector<NDArray> in, ir::Attributes a = {}) {
  return runReference({type, std::move(in), std::move(a)}).at(0);
}

NDArray iota(Shape s) {
  std::vector<float> v(static_cast<size_t>(shapeNumel(s)));
  std::iota(v.begin(), v.end(), 0.0f);
  return arr<float>(std::move(s), v);
}

TEST(DepthToSpace, DcrMatchesOnnxExample) {
  auto y = run1("DepthToSpace", {iota({1, 8, 2, 3})}, attrs({{"blocksize", int64_t{2}}}));
  EXPECT_TRUE(allClose(y, arr<float>({1, 2, 4, 6}, {0,  12, 1,  13, 2,  14, 24, 36, 25, 37, 26, 38, 3,  15, 4,  16,
                                                    5,  17, 27, 39, 28, 40, 29, 41, 6,  18, 7,  19, 8,  20, 30, 42,
                                                    31, 43, 32, 44, 9,  21, 10, 22, 11, 23, 33, 45, 34, 46, 35, 47})));
}

TEST(DepthToSpace, CrdMatchesOnnxExample) {
  auto y = run1("DepthToSpace", {iota({1, 8, 2, 3})}, attrs({{"blocksize", int64_t{2}}, {"mode", std::string("CRD")}}));
  EXPECT_TRUE(allClose(y, arr<float>({1, 2, 4, 6}, {0,  6,  1,  7,  2,  8,  12, 18, 13, 19, 14, 20, 3,  9,  4,  10,
                                                    5,  11, 15, 21, 16, 22, 17, 23, 24, 30, 25, 31, 26, 32, 36, 42,
                                                    37, 43, 38, 44, 27, 33, 28, 34, 29, 35, 39, 45, 40, 46, 41, 47})));
}

TEST(DepthToSpace, AnyElementTypeAndBadInputs) {
  auto s = arr<std::string>({1, 4, 1, 1}, {"a", "b", "c", "d"});
  EXPECT_TRUE(allClose(run1("DepthToSpace", {s}, attrs({{"blocksize", int64_t{2}}})),
                       arr<std::string>({1, 1, 2, 2}, {"a", "b", "c", "d"})));
  EXPECT_THROW(run1("DepthToSpace", {iota({1, 6, 2, 2})}, attrs({{"blocksize", int64_t{2}}})), Error);  // 6 % 4
  EXPECT_THROW(run1("DepthToSpace", {iota({1, 4, 2, 2})}, attrs({{"blocksize", int64_t{0}}})), Error);
  EXPECT_THROW(
      run1("DepthToSpace", {iota({1, 4, 2, 2})}, attrs({{"blocksize", int64_t{2}}, {"mode", std::string("XYZ")}})),
      Error);
  EXPECT_THROW(run1("DepthToSpace", {iota({4, 2, 2})}, attrs({{"blocksize", int64_t{2}}})), Error);
  EXPECT_THROW(run1("DepthToSpace", {iota({1, 4, 2, 2})}), Error);  // blocksize is required
}

TEST(SpaceToDepth, InvertsDepthToSpaceDcr) {
  auto x = iota({2, 3, 4, 6});
  auto y = run1("SpaceToDepth", {x}, attrs({{"blocksize", int64_t{2}}}));
  ASSERT_EQ(y.shape(), Shape({2, 12, 2, 3}));
  // y[n, (i * b + j) * C + c, h, w] = x[n, c, h * b + i, w * b + j]
  EXPECT_EQ(y.data<float>()[((0 * 12 + (1 * 2 + 0) * 3 + 2) * 2 + 1) * 3 + 2],
            x.data<float>()[((0 * 3 + 2) * 4 + 3) * 6 + 4]);
  EXPECT_TRUE(allClose(run1("DepthToSpace", {y}, attrs({{"blocksize", int64_t{2}}})), x));
  EXPECT_THROW(run1("SpaceToDepth", {iota({1, 1, 3, 4})}, attrs({{"blocksize", int64_t{2}}})), Error);
}

}  // namespace
}  // namespace graft::testing

namespace graft::testing {
namespace {

TEST(DepthToSpace, GradientMatchesFiniteDifferences) {
  OpCase c{"DepthToSpace", {randomArray(DataType::Double, {1, 8, 2, 3}, 21)}, attrs({{"blocksize", int64_t{2}}})};
  EXPECT_TRUE(gradCheck(c, {0}));
}

TEST(SpaceToDepth, CrdInvertsDepthToSpaceCrd) {
  auto x = iota({1, 2, 4, 6});
  auto crd = attrs({{"blocksize", int64_t{2}}, {"mode", std::string("CRD")}});
  auto y = run1("SpaceToDepth", {x}, crd);
  ASSERT_EQ(y.shape(), Shape({1, 8, 2, 3}));
  // y[n, (c * b + i) * b + j, h, w] = x[n, c, h * b + i, w * b + j]
  EXPECT_EQ(y.data<float>()[(((1 * 2 + 1) * 2 + 0) * 2 + 1) * 3 + 2], x.data<float>()[(1 * 4 + 3) * 6 + 4]);
  EXPECT_TRUE(allClose(run1("DepthToSpace", {y}, crd), x));
}

TEST(DepthToSpace, GradientCrd) {
  OpCase c{"DepthToSpace",
           {randomArray(DataType::Double, {1, 8, 2, 3}, 23)},
           attrs({{"blocksize", int64_t{2}}, {"mode", std::string("CRD")}})};
  EXPECT_TRUE(gradCheck(c, {0}));
}

TEST(SpaceToDepth, GradientCrd) {
  OpCase c{"SpaceToDepth",
           {randomArray(DataType::Double, {1, 2, 4, 6}, 24)},
           attrs({{"blocksize", int64_t{2}}, {"mode", std::string("CRD")}})};
  EXPECT_TRUE(gradCheck(c, {0}));
}

TEST(SpaceToDepth, GradientMatchesFiniteDifferences) {
  OpCase c{"SpaceToDepth", {randomArray(DataType::Double, {1, 2, 4, 6}, 22)}, attrs({{"blocksize", int64_t{2}}})};
  EXPECT_TRUE(gradCheck(c, {0}));
}

}  // namespace
}  // namespace graft::testing
