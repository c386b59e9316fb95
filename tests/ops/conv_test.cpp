// Tests of src/ops/conv.cpp: Conv and ConvTranspose against hand-computed values, a naive
// N-D convolution written here, and the adjoint identity <Conv(x), y> == <x, ConvTranspose(y)>.
#include <numeric>

#include "op_test_util.hpp"
#include "ops/cast_util.hpp"
#include "ops/conv_util.hpp"

namespace graft::testing {
namespace {

using Ints = std::vector<int64_t>;

NDArray run1(const std::string& type, std::vector<NDArray> in, ir::Attributes a = {}) {
  return runReference({type, std::move(in), std::move(a)}).at(0);
}

// Unravels a flat row-major index.
Ints unravel(int64_t i, const Shape& s) {
  Ints idx(s.size());
  for (int64_t d = static_cast<int64_t>(s.size()) - 1; d >= 0; --d) {
    idx[d] = i % s[d];
    i /= s[d];
  }
  return idx;
}

// Naive grouped N-D convolution straight from the ONNX definition, for float inputs.
NDArray naiveConv(const NDArray& x, const NDArray& w, const NDArray* b, const Ints& strides, const Ints& dil,
                  const Ints& pads, int64_t group) {
  int64_t r = x.rank() - 2;
  Shape ys = {x.dim(0), w.dim(0)};
  for (int64_t d = 0; d < r; ++d) {
    int64_t keff = (w.dim(d + 2) - 1) * dil[d] + 1;
    ys.push_back((x.dim(d + 2) + pads[d] + pads[d + r] - keff) / strides[d] + 1);
  }
  NDArray y(DataType::Float, ys);
  Shape ks(w.shape().begin() + 2, w.shape().end());
  int64_t cg = x.dim(1) / group, mg = w.dim(0) / group;
  auto xs = toDoubles(x), ws = toDoubles(w);
  for (int64_t i = 0; i < y.numel(); ++i) {
    Ints yi = unravel(i, ys);
    int64_t n = yi[0], m = yi[1], g = m / mg;
    double acc = b ? toDoubles(*b)[m] : 0.0;
    for (int64_t c = 0; c < cg; ++c)
      for (int64_t kf = 0; kf < shapeNumel(ks); ++kf) {
        Ints kk = unravel(kf, ks);
        Ints xi = {n, g * cg + c};
        bool inside = true;
        for (int64_t d = 0; d < r; ++d) {
          int64_t p = yi[d + 2] * strides[d] - pads[d] + kk[d] * dil[d];
          inside &= p >= 0 && p < x.dim(d + 2);
          xi.push_back(p);
        }
        if (!inside) continue;
        int64_t xf = 0, wf = m * cg + c;
        for (int64_t d = 0; d < x.rank(); ++d) xf = xf * x.dim(d) + xi[d];
        for (int64_t d = 0; d < r; ++d) wf = wf * ks[d] + kk[d];
        acc += xs[xf] * ws[wf];
      }
    y.data<float>()[i] = static_cast<float>(acc);
  }
  return y;
}

double dot(const NDArray& a, const NDArray& b) {
  auto x = toDoubles(a), y = toDoubles(b);
  return std::inner_product(x.begin(), x.end(), y.begin(), 0.0);
}

TEST(Conv, HandComputed1D) {
  // x = [1 2 3 4], w = [1 0 -1], pads 1: y[i] = x[i-1] - x[i+1].
  auto x = arr<float>({1, 1, 4}, {1, 2, 3, 4});
  auto w = arr<float>({1, 1, 3}, {1, 0, -1});
  EXPECT_TRUE(allClose(run1("Conv", {x, w}, attrs({{"pads", Ints{1, 1}}})), arr<float>({1, 1, 4}, {-2, -2, -2, 3})));
  auto b = arr<float>({1}, {10});
  EXPECT_TRUE(allClose(run1("Conv", {x, w, b}), arr<float>({1, 1, 2}, {8, 8})));
}

TEST(Conv, OnnxDocExampleWithAndWithoutPadding) {
  std::vector<float> xv(25);
  std::iota(xv.begin(), xv.end(), 0.0f);
  auto x = arr<float>({1, 1, 5, 5}, xv);
  auto w = arr<float>({1, 1, 3, 3}, std::vector<float>(9, 1.0f));
  EXPECT_TRUE(allClose(run1("Conv", {x, w}, attrs({{"kernel_shape", Ints{3, 3}}})),
                       arr<float>({1, 1, 3, 3}, {54, 63, 72, 99, 108, 117, 144, 153, 162})));
  auto y = run1("Conv", {x, w}, attrs({{"pads", Ints{1, 1, 1, 1}}}));
  ASSERT_EQ(y.shape(), Shape({1, 1, 5, 5}));
  EXPECT_FLOAT_EQ(y.data<float>()[0], 12);
  EXPECT_FLOAT_EQ(y.data<float>()[24], 18 + 19 + 23 + 24);
}

TEST(Conv, MatchesNaiveConvolutionIn1D2D3D) {
  struct Case {
    Shape x, w;
    Ints strides, dil, pads;
    int64_t group;
  };
  std::vector<Case> cases = {
      {{2, 4, 9}, {6, 2, 3}, {2}, {1}, {1, 2}, 2},
      {{1, 3, 7, 6}, {4, 3, 3, 2}, {1, 2}, {2, 1}, {2, 0, 1, 1}, 1},
      {{2, 4, 6, 5}, {4, 1, 3, 3}, {2, 1}, {1, 1}, {1, 1, 1, 1}, 4},  // depthwise
      {{1, 2, 5, 4, 6}, {3, 2, 2, 3, 2}, {1, 2, 3}, {2, 1, 1}, {0, 1, 1, 1, 0, 2}, 1},
  };
  uint64_t seed = 1;
  for (const auto& c : cases) {
    auto x = randomArray(DataType::Float, c.x, seed++);
    auto w = randomArray(DataType::Float, c.w, seed++);
    auto b = randomArray(DataType::Float, {c.w[0]}, seed++);
    auto a = attrs({{"strides", c.strides}, {"dilations", c.dil}, {"pads", c.pads}, {"group", c.group}});
    EXPECT_TRUE(allClose(run1("Conv", {x, w, b}, a), naiveConv(x, w, &b, c.strides, c.dil, c.pads, c.group)))
        << "x " << shapeToString(c.x) << " w " << shapeToString(c.w);
    // The kernel's output shape agrees with ONNX's shape inference.
    auto t = inferTypes({"Conv", {x, w, b}, a});
    EXPECT_EQ(t.at(0).info.shape(), naiveConv(x, w, &b, c.strides, c.dil, c.pads, c.group).shape());
  }
}

TEST(Conv, AutoPadModes) {
  // 5 wide, kernel 4, stride 2: out = 3, total pad = (3 - 1) * 2 + 4 - 5 = 3.
  auto x = arr<float>({1, 1, 5}, {1, 2, 3, 4, 5});
  auto w = arr<float>({1, 1, 4}, {1, 1, 1, 1});
  // SAME_UPPER: pads 1 (begin), 2 (end).
  EXPECT_TRUE(allClose(run1("Conv", {x, w}, attrs({{"auto_pad", std::string("SAME_UPPER")}, {"strides", Ints{2}}})),
                       naiveConv(x, w, nullptr, {2}, {1}, {1, 2}, 1)));
  // SAME_LOWER: pads 2, 1.
  EXPECT_TRUE(allClose(run1("Conv", {x, w}, attrs({{"auto_pad", std::string("SAME_LOWER")}, {"strides", Ints{2}}})),
                       naiveConv(x, w, nullptr, {2}, {1}, {2, 1}, 1)));
  EXPECT_TRUE(allClose(run1("Conv", {x, w}, attrs({{"auto_pad", std::string("SAME_LOWER")}, {"strides", Ints{2}}})),
                       arr<float>({1, 1, 3}, {0 + 0 + 1 + 2, 1 + 2 + 3 + 4, 3 + 4 + 5 + 0})));
  EXPECT_TRUE(allClose(run1("Conv", {x, w}, attrs({{"auto_pad", std::string("VALID")}, {"strides", Ints{2}}})),
                       arr<float>({1, 1, 1}, {10})));
  EXPECT_TRUE(
      allClose(run1("Conv", {x, w}, attrs({{"auto_pad", std::string("NOTSET")}})), arr<float>({1, 1, 2}, {10, 14})));
}

TEST(Conv, HalfAndDoubleInputs) {
  auto xd = randomArray(DataType::Double, {1, 2, 4, 4}, 7), wd = randomArray(DataType::Double, {3, 2, 2, 2}, 8);
  auto yd = run1("Conv", {xd, wd});
  ASSERT_EQ(yd.dtype(), DataType::Double);
  auto want = naiveConv(ops::castArray(xd, DataType::Float), ops::castArray(wd, DataType::Float), nullptr, {1, 1},
                        {1, 1}, {0, 0, 0, 0}, 1);
  EXPECT_TRUE(allClose(yd, ops::castArray(want, DataType::Double), 1e-5));
  auto xh = randomArray(DataType::Float16, {1, 1, 3}, 9), wh = randomArray(DataType::Float16, {1, 1, 2}, 10);
  auto yh = run1("Conv", {xh, wh});
  ASSERT_EQ(yh.dtype(), DataType::Float16);
  auto xs = toDoubles(xh), ws = toDoubles(wh), ys = toDoubles(yh);
  EXPECT_NEAR(ys[0], xs[0] * ws[0] + xs[1] * ws[1], 2e-3);
}

TEST(Conv, RejectsBadInputs) {
  auto x = arr<float>({1, 2, 4}, std::vector<float>(8, 1));
  auto w = arr<float>({1, 2, 3}, std::vector<float>(6, 1));
  EXPECT_THROW(run1("Conv", {x, arr<float>({1, 3, 3}, std::vector<float>(9, 1))}), Error);  // channel mismatch
  EXPECT_THROW(run1("Conv", {x, w}, attrs({{"group", int64_t{2}}})), Error);                // C/group != W dim 1
  EXPECT_THROW(run1("Conv", {x, w}, attrs({{"group", int64_t{0}}})), Error);
  EXPECT_THROW(run1("Conv", {x, w}, attrs({{"kernel_shape", Ints{2}}})), Error);
  EXPECT_THROW(run1("Conv", {x, w}, attrs({{"strides", Ints{0}}})), Error);
  EXPECT_THROW(run1("Conv", {x, w}, attrs({{"strides", Ints{1, 1}}})), Error);
  EXPECT_THROW(run1("Conv", {x, w}, attrs({{"pads", Ints{-1, 0}}})), Error);
  EXPECT_THROW(run1("Conv", {x, w}, attrs({{"auto_pad", std::string("SAME")}})), Error);
  EXPECT_THROW(run1("Conv", {x, w}, attrs({{"auto_pad", std::string("SAME_UPPER")}, {"pads", Ints{1, 1}}})), Error);
  EXPECT_THROW(run1("Conv", {x, arr<float>({1, 2, 5}, std::vector<float>(10, 1))}), Error);   // kernel > input
  EXPECT_THROW(run1("Conv", {x, w, arr<float>({2}, {1, 2})}), Error);                         // bias size
  EXPECT_THROW(run1("Conv", {arr<float>({2, 4}, std::vector<float>(8, 1)), w}), Error);       // rank 2
  EXPECT_THROW(run1("Conv", {x, arr<double>({1, 2, 3}, std::vector<double>(6, 1))}), Error);  // dtype mix
  EXPECT_THROW(run1("Conv", {arr<int32_t>({1, 1, 3}, {1, 2, 3}), arr<int32_t>({1, 1, 1}, {1})}), Error);
}

TEST(Conv, CoreAccumulatesIntegersForQuantizedVariants) {
  // ConvInteger-style use of the shared core: uint8 x with a zero point, int8 w, int32 sums.
  std::vector<uint8_t> x = {5, 2, 7, 255};
  std::vector<int8_t> w = {1, -2};
  int32_t xzp = 2;
  ops::WindowAttrs wa;
  wa.what = "test";
  ops::ConvShape s = ops::convShapeOf(wa, {1, 1, 4}, {1, 1, 2}, 1);
  std::vector<int32_t> y(3, 0);
  ops::convDirect<int32_t>(
      s, [&](int64_t i) { return static_cast<int32_t>(x[i]) - xzp; },
      [&](int64_t i) { return static_cast<int32_t>(w[i]); },
      [&](int64_t i, int64_t oc, int32_t acc) {
        EXPECT_EQ(oc, 0);
        y[i] = acc;
      });
  EXPECT_EQ(y, (std::vector<int32_t>{3, -10, 5 - 2 * 253}));
}

// ---- ConvTranspose ----------------------------------------------------------------------------

TEST(ConvTranspose, OnnxDocExample) {
  std::vector<float> xv(9);
  std::iota(xv.begin(), xv.end(), 0.0f);
  auto x = arr<float>({1, 1, 3, 3}, xv);
  auto w = arr<float>({1, 2, 3, 3}, std::vector<float>(18, 1.0f));
  auto y = run1("ConvTranspose", {x, w});
  std::vector<float> plane = {0, 1, 3, 3, 2, 3, 8, 15, 12, 7, 9, 21, 36, 27, 15, 9, 20, 33, 24, 13, 6, 13, 21, 15, 8};
  std::vector<float> both = plane;
  both.insert(both.end(), plane.begin(), plane.end());
  EXPECT_TRUE(allClose(y, arr<float>({1, 2, 5, 5}, both)));
}

TEST(ConvTranspose, OneDimensionalWithStrideAndBias) {
  // y[i*s + k] += x[i] * w[k]: x = [1, 2], w = [1, 10], s = 3 -> [1, 10, 0, 2, 20] (+ bias 0.5).
  auto y =
      run1("ConvTranspose", {arr<float>({1, 1, 2}, {1, 2}), arr<float>({1, 1, 2}, {1, 10}), arr<float>({1}, {0.5f})},
           attrs({{"strides", Ints{3}}}));
  EXPECT_TRUE(allClose(y, arr<float>({1, 1, 5}, {1.5f, 10.5f, 0.5f, 2.5f, 20.5f})));
  // output_padding adds one element at the end; pads crop.
  y = run1("ConvTranspose", {arr<float>({1, 1, 2}, {1, 2}), arr<float>({1, 1, 2}, {1, 10})},
           attrs({{"strides", Ints{3}}, {"output_padding", Ints{1}}, {"pads", Ints{1, 0}}}));
  EXPECT_TRUE(allClose(y, arr<float>({1, 1, 5}, {10, 0, 2, 20, 0})));
}

TEST(ConvTranspose, IsTheAdjointOfConv) {
  struct Case {
    Shape x, w;
    Ints strides, dil, pads;
    int64_t group;
  };
  std::vector<Case> cases = {
      {{1, 2, 7}, {3, 2, 3}, {2}, {1}, {1, 1}, 1},
      {{2, 4, 7, 6}, {6, 2, 3, 2}, {2, 1}, {1, 2}, {1, 0, 0, 1}, 2},
      {{1, 2, 5, 6, 4}, {2, 1, 2, 3, 2}, {2, 2, 1}, {1, 1, 2}, {1, 0, 1, 0, 1, 1}, 2},
  };
  uint64_t seed = 100;
  for (const auto& c : cases) {
    auto x = randomArray(DataType::Float, c.x, seed++);
    auto w = randomArray(DataType::Float, c.w, seed++);
    auto a = attrs({{"strides", c.strides}, {"dilations", c.dil}, {"pads", c.pads}, {"group", c.group}});
    NDArray y = run1("Conv", {x, w}, a);
    auto v = randomArray(DataType::Float, y.shape(), seed++);
    // The transposed conv must reproduce x's spatial shape: output_shape says so explicitly.
    Ints os(c.x.begin() + 2, c.x.end());
    auto ta = attrs(
        {{"strides", c.strides}, {"dilations", c.dil}, {"pads", c.pads}, {"group", c.group}, {"output_shape", os}});
    NDArray xt = run1("ConvTranspose", {v, w}, ta);
    ASSERT_EQ(xt.shape(), x.shape());
    EXPECT_NEAR(dot(y, v), dot(x, xt), 1e-4 * (1 + std::abs(dot(y, v))));
  }
}

TEST(ConvTranspose, AutoPadAndOutputShape) {
  auto x = randomArray(DataType::Float, {1, 1, 3, 3}, 3);
  auto w = randomArray(DataType::Float, {1, 2, 3, 3}, 4);
  // SAME_UPPER: out = in * stride = 6; total pad = 2 * 2 + 3 - 6 = 1, at the end.
  auto same = run1("ConvTranspose", {x, w}, attrs({{"auto_pad", std::string("SAME_UPPER")}, {"strides", Ints{2, 2}}}));
  auto full = run1("ConvTranspose", {x, w}, attrs({{"strides", Ints{2, 2}}}));  // 7 x 7
  ASSERT_EQ(same.shape(), Shape({1, 2, 6, 6}));
  ASSERT_EQ(full.shape(), Shape({1, 2, 7, 7}));
  for (int64_t c = 0; c < 2; ++c)
    for (int64_t i = 0; i < 6; ++i)
      for (int64_t j = 0; j < 6; ++j) {
        EXPECT_FLOAT_EQ(same.data<float>()[(c * 6 + i) * 6 + j], full.data<float>()[(c * 7 + i) * 7 + j]);
      }
  // SAME_LOWER puts the extra pad at the beginning.
  auto lower = run1("ConvTranspose", {x, w}, attrs({{"auto_pad", std::string("SAME_LOWER")}, {"strides", Ints{2, 2}}}));
  EXPECT_FLOAT_EQ(lower.data<float>()[0], full.data<float>()[8]);
  // output_shape larger than the natural size extends with zeros at the end.
  auto big = run1("ConvTranspose", {x, w}, attrs({{"strides", Ints{2, 2}}, {"output_shape", Ints{8, 7}}}));
  ASSERT_EQ(big.shape(), Shape({1, 2, 8, 7}));
  for (int64_t j = 0; j < 7; ++j) EXPECT_EQ(big.data<float>()[7 * 7 + j], 0.0f);
  // The full [N, C, spatial...] form of output_shape is accepted too.
  auto big2 = run1("ConvTranspose", {x, w}, attrs({{"strides", Ints{2, 2}}, {"output_shape", Ints{1, 2, 8, 7}}}));
  EXPECT_TRUE(allClose(big2, big));
  // VALID: no padding.
  EXPECT_TRUE(allClose(
      run1("ConvTranspose", {x, w}, attrs({{"auto_pad", std::string("VALID")}, {"strides", Ints{2, 2}}})), full));
}

TEST(ConvTranspose, DilationsAndGroups) {
  // Dilation 2 spreads the kernel taps: x = [1], w = [1, 2] -> [1, 0, 2].
  EXPECT_TRUE(allClose(run1("ConvTranspose", {arr<float>({1, 1, 1}, {1}), arr<float>({1, 1, 2}, {1, 2})},
                            attrs({{"dilations", Ints{2}}})),
                       arr<float>({1, 1, 3}, {1, 0, 2})));
  // Two groups: each input channel feeds only its own output channel.
  auto y = run1("ConvTranspose", {arr<float>({1, 2, 1}, {1, 2}), arr<float>({2, 1, 1}, {3, 5})},
                attrs({{"group", int64_t{2}}}));
  EXPECT_TRUE(allClose(y, arr<float>({1, 2, 1}, {3, 10})));
}

TEST(ConvTranspose, RejectsBadInputs) {
  auto x = arr<float>({1, 2, 3}, std::vector<float>(6, 1));
  auto w = arr<float>({2, 1, 2}, std::vector<float>(4, 1));
  EXPECT_THROW(run1("ConvTranspose", {x, arr<float>({3, 1, 2}, std::vector<float>(6, 1))}), Error);
  EXPECT_THROW(run1("ConvTranspose", {x, w}, attrs({{"group", int64_t{3}}})), Error);
  EXPECT_THROW(run1("ConvTranspose", {x, w}, attrs({{"output_padding", Ints{1, 1}}})), Error);
  EXPECT_THROW(run1("ConvTranspose", {x, w}, attrs({{"output_shape", Ints{4, 4}}})), Error);
  EXPECT_THROW(run1("ConvTranspose", {x, w}, attrs({{"pads", Ints{3, 3}}})), Error);  // negative output
  EXPECT_THROW(run1("ConvTranspose", {x, w, arr<float>({2}, {1, 1})}), Error);        // bias: 1 channel
  EXPECT_THROW(run1("ConvTranspose", {x, w}, attrs({{"strides", Ints{int64_t{1} << 45}}})), Error);
}

}  // namespace
}  // namespace graft::testing
