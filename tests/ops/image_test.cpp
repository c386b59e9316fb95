// Tests of src/ops/image.cpp (Col2Im, CenterCropPad, AffineGrid), with values worked out by hand.
#include "op_case_util.hpp"
#include "op_test_util.hpp"

namespace graft::testing {
namespace {

TEST(Col2Im, OverlappingBlocksAdd) {
  // Image 1x3, block 1x2, two blocks: columns (1, 2) for kernel offset 0 and (3, 4) for offset 1.
  // Pixel 1 receives block 1 offset 0 (2) and block 0 offset 1 (3).
  auto y =
      runOutputs("Col2Im", {arr<float>({1, 2, 2}, {1, 2, 3, 4}), arr<int64_t>({2}, {1, 3}), arr<int64_t>({2}, {1, 2})});
  EXPECT_TRUE(allClose(y.at(0), arr<float>({1, 1, 1, 3}, {1, 5, 4})));
  // One pixel of padding on the left of the width: three blocks, the first offset-0 value falls in the padding.
  y = runOutputs("Col2Im",
                 {arr<float>({1, 2, 3}, {1, 2, 3, 4, 5, 6}), arr<int64_t>({2}, {1, 3}), arr<int64_t>({2}, {1, 2})},
                 attrs({{"pads", std::vector<int64_t>{0, 1, 0, 0}}}));
  EXPECT_TRUE(allClose(y.at(0), arr<float>({1, 1, 1, 3}, {2 + 4, 3 + 5, 6})));
  EXPECT_THROW(runOutputs("Col2Im", {arr<float>({1, 2, 3}, {1, 2, 3, 4, 5, 6}), arr<int64_t>({2}, {1, 3}),
                                     arr<int64_t>({2}, {1, 2})}),
               Error);  // 3 columns for 2 blocks
}

TEST(Col2Im, Gradient) {
  // 2 channels, a 3x4 image, 2x2 blocks with stride 2 on the width, dilation 1, a pad row on top:
  // the adjoint (im2col) against finite differences.
  OpCase c{"Col2Im",
           {randomArray(DataType::Double, {1, 8, 3 * 2}, 1), arr<int64_t>({2}, {3, 4}), arr<int64_t>({2}, {2, 2})},
           attrs({{"strides", std::vector<int64_t>{1, 2}}, {"pads", std::vector<int64_t>{1, 0, 0, 0}}})};
  EXPECT_TRUE(gradCheck(c, {0}));
}

TEST(CenterCropPad, CropsAndPadsAroundTheCentre) {
  NDArray x = arr<float>({2, 5}, {0, 1, 2, 3, 4, 5, 6, 7, 8, 9});
  // Rows 2 -> 3: a zero row at the end (odd difference); columns 5 -> 3: columns 1..3.
  EXPECT_TRUE(allClose(runOutputs("CenterCropPad", {x, arr<int64_t>({2}, {3, 3})}).at(0),
                       arr<float>({3, 3}, {1, 2, 3, 6, 7, 8, 0, 0, 0})));
  // Only the last axis, 5 -> 8: one zero before, two after.
  EXPECT_TRUE(allClose(
      runOutputs("CenterCropPad", {x, arr<int64_t>({1}, {8})}, attrs({{"axes", std::vector<int64_t>{-1}}})).at(0),
      arr<float>({2, 8}, {0, 0, 1, 2, 3, 4, 0, 0, 0, 5, 6, 7, 8, 9, 0, 0})));
  EXPECT_THROW(runOutputs("CenterCropPad", {x, arr<int64_t>({1}, {3})}), Error);  // one size for two axes
}

TEST(CenterCropPad, Gradient) {
  // Rows 3 -> 6 (padding), columns 5 -> 2 (cropping, odd difference); then only the last axis.
  NDArray x = randomArray(DataType::Double, {3, 5}, 1);
  EXPECT_TRUE(gradCheck({"CenterCropPad", {x, arr<int64_t>({2}, {6, 2})}}, {0}));
  EXPECT_TRUE(
      gradCheck({"CenterCropPad", {x, arr<int64_t>({1}, {8})}, attrs({{"axes", std::vector<int64_t>{-1}}})}, {0}));
}

TEST(AffineGrid, IdentityAndTranslation) {
  NDArray eye = arr<float>({1, 2, 3}, {1, 0, 0, 0, 1, 0});
  NDArray size = arr<int64_t>({4}, {1, 1, 2, 2});
  // Pixel centres of a 2x2 image: -0.5 and 0.5; grid[h][w] = (x_w, y_h).
  EXPECT_TRUE(allClose(runOutputs("AffineGrid", {eye, size}).at(0),
                       arr<float>({1, 2, 2, 2}, {-0.5f, -0.5f, 0.5f, -0.5f, -0.5f, 0.5f, 0.5f, 0.5f})));
  // align_corners: the corners -1 and 1; a translation by (0.5, -1) adds to every point.
  NDArray shift = arr<float>({1, 2, 3}, {1, 0, 0.5f, 0, 1, -1});
  EXPECT_TRUE(allClose(runOutputs("AffineGrid", {shift, size}, attrs({{"align_corners", int64_t{1}}})).at(0),
                       arr<float>({1, 2, 2, 2}, {-0.5f, -2, 1.5f, -2, -0.5f, 0, 1.5f, 0})));
  // 3-D: theta [1, 3, 4], size [1, 1, D=1, H=1, W=2] -> (x, y, z) with y = z = 0 at the single centre.
  NDArray eye3 = arr<float>({1, 3, 4}, {1, 0, 0, 0, 0, 1, 0, 0, 0, 0, 1, 0});
  EXPECT_TRUE(allClose(runOutputs("AffineGrid", {eye3, arr<int64_t>({5}, {1, 1, 1, 1, 2})}).at(0),
                       arr<float>({1, 1, 1, 2, 3}, {-0.5f, 0, 0, 0.5f, 0, 0})));
  EXPECT_THROW(runOutputs("AffineGrid", {eye3, size}), Error);  // 3-D theta for a 2-D size
}

TEST(AffineGrid, Gradient) {
  for (int64_t align : {0, 1}) {
    OpCase c{"AffineGrid",
             {randomArray(DataType::Double, {2, 2, 3}, 1), arr<int64_t>({4}, {2, 1, 3, 2})},
             attrs({{"align_corners", align}})};
    EXPECT_TRUE(gradCheck(c, {0})) << "align_corners=" << align;
  }
  OpCase c3{"AffineGrid", {randomArray(DataType::Double, {1, 3, 4}, 2), arr<int64_t>({5}, {1, 1, 2, 2, 3})}};
  EXPECT_TRUE(gradCheck(c3, {0}));
}

}  // namespace
}  // namespace graft::testing
