// Tests of src/ops/pool.cpp: windowed, global, unpooling and region pools against hand-computed
// values and small independent computations.
#include <cmath>
#include <numeric>

#include "op_test_util.hpp"

namespace graft::testing {
namespace {

using Ints = std::vector<int64_t>;

NDArray run1(const std::string& type, std::vector<NDArray> in, ir::Attributes a = {}) {
  return runReference({type, std::move(in), std::move(a)}).at(0);
}

NDArray iota4x4() {
  std::vector<float> v(16);
  std::iota(v.begin(), v.end(), 1.0f);
  return arr<float>({1, 1, 4, 4}, v);
}

Shape inferredShape(const OpCase& c, int output = 0) { return inferTypes(c).at(output).info.shape(); }

// ---- MaxPool ----------------------------------------------------------------------------------

TEST(MaxPool, TwoByTwoStrideTwoWithIndices) {
  auto x = arr<float>({1, 1, 4, 4}, {1, 5, 2, 0, 3, 4, 8, 7, 9, 1, 1, 1, 0, 2, 6, 6});
  auto out = runReference({"MaxPool", {x}, attrs({{"kernel_shape", Ints{2, 2}}, {"strides", Ints{2, 2}}}), 2});
  EXPECT_TRUE(allClose(out.at(0), arr<float>({1, 1, 2, 2}, {5, 8, 9, 6})));
  // Row-major flat indices; the first maximum wins ties (6 at 14 and 15).
  EXPECT_TRUE(allClose(out.at(1), arr<int64_t>({1, 1, 2, 2}, {1, 6, 8, 14})));
  // Column-major: index = w * H + h.
  auto col =
      runReference({"MaxPool",
                    {x},
                    attrs({{"kernel_shape", Ints{2, 2}}, {"strides", Ints{2, 2}}, {"storage_order", int64_t{1}}}),
                    2});
  EXPECT_TRUE(allClose(col.at(1), arr<int64_t>({1, 1, 2, 2}, {4, 9, 2, 11})));
}

TEST(MaxPool, IndicesCountBatchAndChannels) {
  auto x = randomArray(DataType::Float, {2, 3, 3, 3}, 5);
  auto out = runReference({"MaxPool", {x}, attrs({{"kernel_shape", Ints{3, 3}}}), 2});
  auto xs = toDoubles(x);
  for (int64_t p = 0; p < 6; ++p) {
    auto best = std::max_element(xs.begin() + p * 9, xs.begin() + (p + 1) * 9) - xs.begin();
    EXPECT_EQ(out.at(1).data<int64_t>()[p], best);
    EXPECT_EQ(out.at(0).data<float>()[p], xs[best]);
  }
}

TEST(MaxPool, PadsDilationsAndCeilMode) {
  auto x = iota4x4();
  // Padding never wins: the max of a padded corner window is the input element.
  EXPECT_TRUE(allClose(
      run1("MaxPool", {x}, attrs({{"kernel_shape", Ints{3, 3}}, {"pads", Ints{1, 1, 1, 1}}, {"strides", Ints{3, 3}}})),
      arr<float>({1, 1, 2, 2}, {6, 8, 14, 16})));
  // Dilation 2: taps at 0 and 2.
  EXPECT_TRUE(allClose(run1("MaxPool", {x}, attrs({{"kernel_shape", Ints{2, 2}}, {"dilations", Ints{2, 2}}})),
                       arr<float>({1, 1, 2, 2}, {11, 12, 15, 16})));
  // ceil_mode keeps the partial last window.
  auto c =
      run1("MaxPool", {x}, attrs({{"kernel_shape", Ints{3, 3}}, {"strides", Ints{2, 2}}, {"ceil_mode", int64_t{1}}}));
  EXPECT_TRUE(allClose(c, arr<float>({1, 1, 2, 2}, {11, 12, 15, 16})));
  auto f = run1("MaxPool", {x}, attrs({{"kernel_shape", Ints{3, 3}}, {"strides", Ints{2, 2}}}));
  EXPECT_TRUE(allClose(f, arr<float>({1, 1, 1, 1}, {11})));
}

TEST(MaxPool, WindowsOverPaddingOnly) {
  // Dilation 2 over one element padded on both sides: taps at -1 and 1, both padding. No
  // maximum exists: NaN (the lowest value for integers) and index -1.
  auto a = attrs({{"kernel_shape", Ints{2}}, {"dilations", Ints{2}}, {"pads", Ints{1, 1}}});
  auto out = runReference({"MaxPool", {arr<float>({1, 1, 1}, {1})}, a, 2});
  EXPECT_TRUE(allClose(out.at(0), arr<float>({1, 1, 1}, {NAN})));
  EXPECT_TRUE(allClose(out.at(1), arr<int64_t>({1, 1, 1}, {-1})));
  EXPECT_TRUE(allClose(run1("MaxPool", {arr<uint8_t>({1, 1, 1}, {7})}, a), arr<uint8_t>({1, 1, 1}, {0})));
  // ceil_mode: a last window that would start in the end padding is dropped (ONNX opset 19 and
  // later, PyTorch): two windows, not three.
  auto c =
      run1("MaxPool", {arr<float>({1, 1, 4}, {1, 2, 3, 4})},
           attrs({{"kernel_shape", Ints{2}}, {"strides", Ints{2}}, {"pads", Ints{0, 1}}, {"ceil_mode", int64_t{1}}}));
  EXPECT_TRUE(allClose(c, arr<float>({1, 1, 2}, {2, 4})));
}

TEST(MaxPool, HugeKernelVisitsOnlyTapsInsideTheInput) {
  // A 2^30 kernel over one element padded by 2^30 - 1: one output, one real tap.
  int64_t k = int64_t{1} << 30;
  auto a = attrs({{"kernel_shape", Ints{k}}, {"pads", Ints{k - 1, 0}}});
  EXPECT_TRUE(allClose(run1("MaxPool", {arr<float>({1, 1, 1}, {3})}, a), arr<float>({1, 1, 1}, {3})));
  a.set("count_include_pad", int64_t{1});
  EXPECT_TRUE(allClose(run1("AveragePool", {arr<float>({1, 1, 1}, {3})}, a), arr<float>({1, 1, 1}, {3.0f / k})));
}

TEST(MaxPool, ShapeAgreesWithOnnxInference) {
  auto x = randomArray(DataType::Float, {1, 2, 7, 8}, 3);
  std::vector<ir::Attributes> cases = {
      attrs({{"kernel_shape", Ints{3, 2}}, {"strides", Ints{2, 3}}, {"ceil_mode", int64_t{1}}}),
      attrs({{"kernel_shape", Ints{2, 2}},
             {"strides", Ints{2, 2}},
             {"pads", Ints{0, 0, 1, 1}},
             {"ceil_mode", int64_t{1}}}),
      attrs({{"kernel_shape", Ints{3, 3}}, {"auto_pad", std::string("SAME_UPPER")}, {"strides", Ints{2, 3}}}),
      attrs({{"kernel_shape", Ints{2, 3}}, {"auto_pad", std::string("SAME_LOWER")}, {"dilations", Ints{2, 1}}}),
      attrs({{"kernel_shape", Ints{2, 3}}, {"auto_pad", std::string("VALID")}, {"strides", Ints{2, 2}}}),
  };
  for (const auto& a : cases) {
    OpCase c{"MaxPool", {x}, a};
    c.opset = 28;  // graft follows the canonical opset's rule for ceil_mode windows
    EXPECT_EQ(run1("MaxPool", {x}, a).shape(), inferredShape(c));
  }
}

TEST(MaxPool, SameUpperAndLowerPadding) {
  auto x = arr<float>({1, 1, 4}, {4, 1, 2, 3});
  // kernel 2, stride 1: total pad 1, at the end (UPPER) or the beginning (LOWER).
  EXPECT_TRUE(
      allClose(run1("MaxPool", {x}, attrs({{"kernel_shape", Ints{2}}, {"auto_pad", std::string("SAME_UPPER")}})),
               arr<float>({1, 1, 4}, {4, 2, 3, 3})));
  EXPECT_TRUE(
      allClose(run1("MaxPool", {x}, attrs({{"kernel_shape", Ints{2}}, {"auto_pad", std::string("SAME_LOWER")}})),
               arr<float>({1, 1, 4}, {4, 4, 2, 3})));
}

TEST(MaxPool, IntegerTypesAndNaN) {
  EXPECT_TRUE(allClose(run1("MaxPool", {arr<uint8_t>({1, 1, 4}, {1, 255, 3, 0})}, attrs({{"kernel_shape", Ints{2}}})),
                       arr<uint8_t>({1, 1, 3}, {255, 255, 3})));
  EXPECT_TRUE(allClose(run1("MaxPool", {arr<int8_t>({1, 1, 3}, {-128, -5, -7})}, attrs({{"kernel_shape", Ints{2}}})),
                       arr<int8_t>({1, 1, 2}, {-5, -5})));
  EXPECT_TRUE(allClose(run1("MaxPool", {arr<float>({1, 1, 3}, {1, NAN, 2})}, attrs({{"kernel_shape", Ints{2}}})),
                       arr<float>({1, 1, 2}, {NAN, NAN})));
  EXPECT_THROW(run1("MaxPool", {arr<int32_t>({1, 1, 2}, {1, 2})}, attrs({{"kernel_shape", Ints{2}}})), Error);
}

TEST(MaxPool, RejectsBadAttributes) {
  auto x = iota4x4();
  EXPECT_THROW(run1("MaxPool", {x}), Error);  // kernel_shape missing
  EXPECT_THROW(run1("MaxPool", {x}, attrs({{"kernel_shape", Ints{2}}})), Error);
  EXPECT_THROW(run1("MaxPool", {x}, attrs({{"kernel_shape", Ints{5, 5}}})), Error);
  EXPECT_THROW(run1("MaxPool", {x}, attrs({{"kernel_shape", Ints{2, 2}}, {"storage_order", int64_t{2}}})), Error);
  EXPECT_THROW(run1("MaxPool", {x}, attrs({{"kernel_shape", Ints{2, 2}}, {"dilations", Ints{0, 1}}})), Error);
  EXPECT_THROW(run1("MaxPool", {x}, attrs({{"kernel_shape", Ints{2, 2}}, {"pads", Ints{1, 1}}})), Error);
  EXPECT_THROW(run1("MaxPool", {arr<float>({4}, {1, 2, 3, 4})}, attrs({{"kernel_shape", Ints{2}}})), Error);
}

// ---- AveragePool ------------------------------------------------------------------------------

TEST(AveragePool, PadsCountedOrNot) {
  auto x = iota4x4();
  auto a = attrs({{"kernel_shape", Ints{3, 3}}, {"pads", Ints{1, 1, 1, 1}}, {"strides", Ints{3, 3}}});
  // Corner windows hold 4 elements: (1 + 2 + 5 + 6) / 4 etc.
  EXPECT_TRUE(allClose(run1("AveragePool", {x}, a), arr<float>({1, 1, 2, 2}, {3.5f, 5.5f, 11.5f, 13.5f})));
  a.set("count_include_pad", int64_t{1});
  EXPECT_TRUE(
      allClose(run1("AveragePool", {x}, a), arr<float>({1, 1, 2, 2}, {14 / 9.f, 22 / 9.f, 46 / 9.f, 54 / 9.f})));
}

TEST(AveragePool, CeilModePartialWindows) {
  auto x = arr<float>({1, 1, 5}, {1, 2, 3, 4, 5});
  auto a = attrs({{"kernel_shape", Ints{2}}, {"strides", Ints{2}}, {"ceil_mode", int64_t{1}}});
  EXPECT_TRUE(allClose(run1("AveragePool", {x}, a), arr<float>({1, 1, 3}, {1.5f, 3.5f, 5})));
  // count_include_pad counts padding, not the part of a ceil window beyond it.
  a.set("count_include_pad", int64_t{1});
  a.set("pads", Ints{1, 0});
  EXPECT_TRUE(allClose(run1("AveragePool", {x}, a), arr<float>({1, 1, 3}, {0.5f, 2.5f, 4.5f})));
  OpCase c{"AveragePool", {x}, a};
  EXPECT_EQ(inferredShape(c), Shape({1, 1, 3}));
}

TEST(AveragePool, ThreeDimensionalMatchesMean) {
  auto x = randomArray(DataType::Double, {1, 2, 2, 3, 4}, 11);
  auto y = run1("AveragePool", {x}, attrs({{"kernel_shape", Ints{2, 3, 4}}}));
  auto xs = toDoubles(x);
  ASSERT_EQ(y.shape(), Shape({1, 2, 1, 1, 1}));
  for (int c = 0; c < 2; ++c)
    EXPECT_NEAR(y.data<double>()[c], std::accumulate(xs.begin() + c * 24, xs.begin() + (c + 1) * 24, 0.0) / 24, 1e-12);
}

TEST(AveragePool, RejectsBadAttributes) {
  EXPECT_THROW(
      run1("AveragePool", {iota4x4()}, attrs({{"kernel_shape", Ints{2, 2}}, {"auto_pad", std::string("bad")}})), Error);
}

TEST(AveragePool, WindowsOverPaddingOnly) {
  // Windows start at -1, 0, 1, 2, 3 over one element: the last three see padding only.
  auto a = attrs({{"kernel_shape", Ints{3}}, {"pads", Ints{1, 5}}});
  EXPECT_TRUE(
      allClose(run1("AveragePool", {arr<float>({1, 1, 1}, {6})}, a), arr<float>({1, 1, 5}, {6, 6, NAN, NAN, NAN})));
  a.set("count_include_pad", int64_t{1});
  EXPECT_TRUE(allClose(run1("AveragePool", {arr<float>({1, 1, 1}, {6})}, a), arr<float>({1, 1, 5}, {2, 2, 0, 0, 0})));
  // Stride beyond the kernel with ceil_mode: a last window that would start past the input (in
  // the end padding) is dropped, as ONNX (opset 19 and later) and PyTorch do.
  auto b = attrs(
      {{"kernel_shape", Ints{1}}, {"strides", Ints{3}}, {"ceil_mode", int64_t{1}}, {"count_include_pad", int64_t{1}}});
  EXPECT_TRUE(
      allClose(run1("AveragePool", {arr<float>({1, 1, 5}, {1, 2, 3, 4, 5})}, b), arr<float>({1, 1, 2}, {1, 4})));
}

// Opset 19: dilations. Taps x[o * s + k * d]; with count_include_pad, the taps inside the padded
// input count (ONNX's reference).
TEST(AveragePool, Dilations) {
  auto x = arr<float>({1, 1, 6}, {1, 2, 3, 4, 5, 6});
  auto a = attrs({{"kernel_shape", Ints{2}}, {"dilations", Ints{2}}});
  EXPECT_TRUE(allClose(run1("AveragePool", {x}, a), arr<float>({1, 1, 4}, {2, 3, 4, 5})));
  a.set("pads", Ints{1, 1});
  EXPECT_TRUE(allClose(run1("AveragePool", {x}, a), arr<float>({1, 1, 6}, {2, 2, 3, 4, 5, 5})));
  a.set("count_include_pad", int64_t{1});
  EXPECT_TRUE(allClose(run1("AveragePool", {x}, a), arr<float>({1, 1, 6}, {1, 2, 3, 4, 5, 2.5f})));
  auto y = run1("AveragePool", {randomArray(DataType::Float, {1, 1, 5, 5, 5}, 4)},
                attrs({{"kernel_shape", Ints{2, 2, 2}}, {"dilations", Ints{2, 2, 2}}}));
  EXPECT_EQ(y.shape(), Shape({1, 1, 3, 3, 3}));
}

// ---- LpPool -------------------------------------------------------------------------------------

TEST(LpPool, NormsOfWindows) {
  auto x = arr<float>({1, 1, 4}, {3, -4, 0, 2});
  EXPECT_TRUE(allClose(run1("LpPool", {x}, attrs({{"kernel_shape", Ints{2}}, {"strides", Ints{2}}})),
                       arr<float>({1, 1, 2}, {5, 2})));
  EXPECT_TRUE(allClose(run1("LpPool", {x}, attrs({{"kernel_shape", Ints{2}}, {"p", int64_t{1}}})),
                       arr<float>({1, 1, 3}, {7, 4, 2})));
  EXPECT_TRUE(allClose(run1("LpPool", {x}, attrs({{"kernel_shape", Ints{2}}, {"p", int64_t{3}}, {"strides", Ints{2}}})),
                       arr<float>({1, 1, 2}, {static_cast<float>(std::cbrt(91.0)), 2})));
  // Padding contributes zeros.
  EXPECT_TRUE(
      allClose(run1("LpPool", {x}, attrs({{"kernel_shape", Ints{2}}, {"pads", Ints{1, 1}}, {"strides", Ints{4}}})),
               arr<float>({1, 1, 2}, {3, 2})));
  EXPECT_THROW(run1("LpPool", {x}, attrs({{"kernel_shape", Ints{2}}, {"p", int64_t{0}}})), Error);
}

// ---- Global pools -------------------------------------------------------------------------------

TEST(GlobalAveragePool, MeanPerPlane) {
  auto y = run1("GlobalAveragePool", {arr<float>({1, 2, 2, 2}, {1, 2, 3, 4, -1, -1, -1, 7})});
  EXPECT_TRUE(allClose(y, arr<float>({1, 2, 1, 1}, {2.5f, 1})));
  EXPECT_THROW(run1("GlobalAveragePool", {NDArray(DataType::Float, {1, 1, 0})}), Error);
}

TEST(GlobalMaxPool, MaxPerPlane) {
  auto y = run1("GlobalMaxPool", {arr<float>({2, 1, 3}, {1, 9, 3, -4, -2, -3})});
  EXPECT_TRUE(allClose(y, arr<float>({2, 1, 1}, {9, -2})));
}

TEST(GlobalLpPool, NormPerPlane) {
  EXPECT_TRUE(allClose(run1("GlobalLpPool", {arr<float>({1, 1, 2, 1}, {3, 4})}), arr<float>({1, 1, 1, 1}, {5})));
  EXPECT_TRUE(allClose(run1("GlobalLpPool", {arr<float>({1, 1, 2}, {3, -4})}, attrs({{"p", int64_t{1}}})),
                       arr<float>({1, 1, 1}, {7})));
}

// ---- MaxUnpool ----------------------------------------------------------------------------------

TEST(MaxUnpool, InvertsMaxPoolPositions) {
  auto x = arr<float>({1, 1, 4, 4}, {1, 5, 2, 0, 3, 4, 8, 7, 9, 1, 1, 1, 0, 2, 6, 6});
  auto pa = attrs({{"kernel_shape", Ints{2, 2}}, {"strides", Ints{2, 2}}});
  auto pooled = runReference({"MaxPool", {x}, pa, 2});
  auto y = run1("MaxUnpool", {pooled.at(0), pooled.at(1)}, pa);
  EXPECT_TRUE(allClose(y, arr<float>({1, 1, 4, 4}, {0, 5, 0, 0, 0, 0, 8, 0, 9, 0, 0, 0, 0, 0, 6, 0})));
}

TEST(MaxUnpool, OutputShapePadsAtTheEnd) {
  auto y = run1("MaxUnpool",
                {arr<float>({1, 1, 1, 2}, {5, 6}), arr<int64_t>({1, 1, 1, 2}, {1, 2}), arr<int64_t>({4}, {1, 1, 3, 5})},
                attrs({{"kernel_shape", Ints{2, 2}}, {"strides", Ints{2, 2}}}));
  // Default shape [1, 1, 2, 4]: index 1 -> (0, 1), index 2 -> (0, 2); embedded in a 3 x 5 plane.
  EXPECT_TRUE(allClose(y, arr<float>({1, 1, 3, 5}, {0, 5, 6, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0})));
}

TEST(MaxUnpool, RejectsBadIndicesAndShapes) {
  auto a = attrs({{"kernel_shape", Ints{2}}, {"strides", Ints{2}}});
  auto x = arr<float>({1, 1, 2}, {1, 2});
  EXPECT_THROW(run1("MaxUnpool", {x, arr<int64_t>({1, 1, 2}, {0, 4})}, a), Error);   // out of range
  EXPECT_THROW(run1("MaxUnpool", {x, arr<int64_t>({1, 1, 2}, {-1, 0})}, a), Error);  // negative
  EXPECT_THROW(run1("MaxUnpool", {x, arr<int64_t>({1, 2}, {0, 1})}, a), Error);      // shape of I
  EXPECT_THROW(run1("MaxUnpool", {x, arr<int32_t>({1, 1, 2}, {0, 1})}, a), Error);   // dtype of I
  EXPECT_THROW(run1("MaxUnpool", {x, arr<int64_t>({1, 1, 2}, {0, 1}), arr<int64_t>({3}, {1, 1, 3})}, a),
               Error);  // smaller
  EXPECT_THROW(run1("MaxUnpool", {x, arr<int64_t>({1, 1, 2}, {0, 1}), arr<int64_t>({2}, {1, 4})}, a), Error);  // rank
  EXPECT_TRUE(
      allClose(run1("MaxUnpool", {x, arr<int64_t>({1, 1, 2}, {3, 0})}, a), arr<float>({1, 1, 4}, {2, 0, 0, 1})));
}

// ---- MaxRoiPool ---------------------------------------------------------------------------------

TEST(MaxRoiPool, BinsOfTheRoi) {
  auto x = iota4x4();
  // RoI x 1..3, y 0..2 (3 x 3 pixels) pooled 2 x 2: bins rows [0,2) [1,3), cols [1,3) [2,4).
  auto rois = arr<float>({1, 5}, {0, 1, 0, 3, 2});
  auto y = run1("MaxRoiPool", {x, rois}, attrs({{"pooled_shape", Ints{2, 2}}}));
  EXPECT_TRUE(allClose(y, arr<float>({1, 1, 2, 2}, {7, 8, 11, 12})));
  // spatial_scale maps RoI coordinates to pixels: whole image, one bin.
  y = run1("MaxRoiPool", {x, arr<float>({1, 5}, {0, 0, 0, 6, 6})},
           attrs({{"pooled_shape", Ints{1, 1}}, {"spatial_scale", 0.5f}}));
  EXPECT_TRUE(allClose(y, arr<float>({1, 1, 1, 1}, {16})));
  // A RoI outside the image gives empty bins: 0.
  y = run1("MaxRoiPool", {x, arr<float>({1, 5}, {0, 10, 10, 12, 12})}, attrs({{"pooled_shape", Ints{1, 1}}}));
  EXPECT_TRUE(allClose(y, arr<float>({1, 1, 1, 1}, {0})));
}

TEST(MaxRoiPool, RejectsBadRois) {
  auto x = iota4x4();
  auto a = attrs({{"pooled_shape", Ints{1, 1}}});
  EXPECT_THROW(run1("MaxRoiPool", {x, arr<float>({1, 5}, {1, 0, 0, 1, 1})}, a), Error);  // batch 1 of 1
  EXPECT_THROW(run1("MaxRoiPool", {x, arr<float>({1, 5}, {0, NAN, 0, 1, 1})}, a), Error);
  EXPECT_THROW(run1("MaxRoiPool", {x, arr<float>({1, 4}, {0, 0, 1, 1})}, a), Error);
  EXPECT_THROW(run1("MaxRoiPool", {x, arr<float>({1, 5}, {0, 0, 0, 1, 1})}, attrs({{"pooled_shape", Ints{0, 1}}})),
               Error);
}

// ---- RoiAlign -----------------------------------------------------------------------------------

// X[y, x] = 10 * y + x is linear, so bilinear samples inside the image are exact and a bin's
// average is the value at the bin's centre.
NDArray ramp(int64_t H, int64_t W) {
  std::vector<float> v;
  for (int64_t y = 0; y < H; ++y)
    for (int64_t x = 0; x < W; ++x) v.push_back(static_cast<float>(10 * y + x));
  return arr<float>({1, 1, H, W}, v);
}

TEST(RoiAlign, AverageOfLinearImageIsBinCentre) {
  auto x = ramp(6, 6);
  auto rois = arr<float>({1, 4}, {1, 1, 4, 3});  // x1 y1 x2 y2
  auto bi = arr<int64_t>({1}, {0});
  // half_pixel: shift by -0.5; RoI x [0.5, 3.5] y [0.5, 2.5]; 2 x 3 bins.
  auto y = run1("RoiAlign", {x, rois, bi},
                attrs({{"output_height", int64_t{2}}, {"output_width", int64_t{3}}, {"sampling_ratio", int64_t{2}}}));
  std::vector<float> want;
  for (int ph = 0; ph < 2; ++ph)
    for (int pw = 0; pw < 3; ++pw) want.push_back(10 * (0.5f + (ph + 0.5f) * 1.0f) + (0.5f + (pw + 0.5f) * 1.0f));
  EXPECT_TRUE(allClose(y, arr<float>({1, 1, 2, 3}, want), 1e-5, 1e-5));
  // output_half_pixel: no shift.
  y = run1("RoiAlign", {x, rois, bi},
           attrs({{"output_height", int64_t{1}},
                  {"output_width", int64_t{1}},
                  {"coordinate_transformation_mode", std::string("output_half_pixel")}}));
  EXPECT_TRUE(allClose(y, arr<float>({1, 1, 1, 1}, {10 * 2.0f + 2.5f}), 1e-5, 1e-5));
}

TEST(RoiAlign, MaxModeAndBatchIndices) {
  // A constant image: every bilinear weight set sums to 1; max mode takes the largest weighted
  // corner value (as ONNX's reference and onnxruntime do), which for an on-pixel sample is the
  // value itself.
  NDArray x(DataType::Float, {2, 1, 4, 4});
  for (int i = 0; i < 32; ++i) x.data<float>()[i] = i < 16 ? 1.0f : 3.0f;
  auto rois = arr<float>({2, 4}, {0, 0, 2, 2, 0, 0, 2, 2});
  auto bi = arr<int64_t>({2}, {1, 0});
  auto y = run1(
      "RoiAlign", {x, rois, bi},
      attrs({{"sampling_ratio", int64_t{1}}, {"coordinate_transformation_mode", std::string("output_half_pixel")}}));
  EXPECT_TRUE(allClose(y, arr<float>({2, 1, 1, 1}, {3, 1})));
  y = run1("RoiAlign", {x, rois, bi},
           attrs({{"mode", std::string("max")},
                  {"sampling_ratio", int64_t{1}},
                  {"coordinate_transformation_mode", std::string("output_half_pixel")}}));
  EXPECT_TRUE(allClose(y, arr<float>({2, 1, 1, 1}, {3, 1})));
  // A sample between pixels: max mode gives the largest weighted corner, 0.25 * 3.
  y = run1("RoiAlign", {x, arr<float>({1, 4}, {0, 0, 1, 1}), arr<int64_t>({1}, {1})},
           attrs({{"mode", std::string("max")},
                  {"sampling_ratio", int64_t{1}},
                  {"coordinate_transformation_mode", std::string("output_half_pixel")}}));
  EXPECT_TRUE(allClose(y, arr<float>({1, 1, 1, 1}, {0.75f})));
}

TEST(RoiAlign, RejectsBadInputs) {
  auto x = ramp(4, 4);
  auto rois = arr<float>({1, 4}, {0, 0, 2, 2});
  EXPECT_THROW(run1("RoiAlign", {x, rois, arr<int64_t>({1}, {1})}), Error);
  EXPECT_THROW(run1("RoiAlign", {x, rois, arr<int64_t>({2}, {0, 0})}), Error);
  EXPECT_THROW(run1("RoiAlign", {x, arr<float>({1, 4}, {0, INFINITY, 2, 2}), arr<int64_t>({1}, {0})}), Error);
  EXPECT_THROW(run1("RoiAlign", {x, arr<float>({1, 4}, {0, 0, 1e9f, 1e9f}), arr<int64_t>({1}, {0})}), Error);
  EXPECT_THROW(run1("RoiAlign", {x, rois, arr<int64_t>({1}, {0})}, attrs({{"mode", std::string("min")}})), Error);
  EXPECT_THROW(run1("RoiAlign", {x, rois, arr<int64_t>({1}, {0})}, attrs({{"sampling_ratio", int64_t{-1}}})), Error);
}

}  // namespace
}  // namespace graft::testing
