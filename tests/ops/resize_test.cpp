// Tests of src/ops/resize.cpp: Resize in each mode against hand-computed values and a naive
// cubic-convolution sum written here; GridSample against hand-computed samples.
#include <onnx/onnx_pb.h>

#include <cmath>

#include "onnx/model_io.hpp"
#include "op_test_util.hpp"
#include "passes/pass.hpp"

namespace graft::testing {
namespace {

using Ints = std::vector<int64_t>;

NDArray run1(const std::string& type, std::vector<NDArray> in, ir::Attributes a = {}) {
  return runReference({type, std::move(in), std::move(a)}).at(0);
}

// Resize with sizes (roi and scales omitted).
NDArray resizeTo(const NDArray& x, Ints sizes, ir::Attributes a) {
  auto s = arr<int64_t>({static_cast<int64_t>(sizes.size())}, sizes);
  return run1("Resize", {x, NDArray{}, NDArray{}, s}, std::move(a));
}
NDArray resizeBy(const NDArray& x, std::vector<float> scales, ir::Attributes a) {
  auto s = arr<float>({static_cast<int64_t>(scales.size())}, scales);
  return run1("Resize", {x, NDArray{}, s}, std::move(a));
}

ir::AttrValue str(const char* s) { return std::string(s); }

TEST(Resize, NearestModes) {
  // asymmetric, 3 -> 4: source coordinates 0, 0.75, 1.5, 2.25.
  auto x = arr<float>({3}, {10, 20, 30});
  auto run = [&](const char* nm) {
    return resizeTo(x, {4}, attrs({{"coordinate_transformation_mode", str("asymmetric")}, {"nearest_mode", str(nm)}}));
  };
  EXPECT_TRUE(allClose(run("floor"), arr<float>({4}, {10, 10, 20, 30})));
  EXPECT_TRUE(allClose(run("ceil"), arr<float>({4}, {10, 20, 30, 30})));
  EXPECT_TRUE(allClose(run("round_prefer_floor"), arr<float>({4}, {10, 20, 20, 30})));
  EXPECT_TRUE(allClose(run("round_prefer_ceil"), arr<float>({4}, {10, 20, 30, 30})));
  // Default: half_pixel, round_prefer_floor; upsampling by 2 repeats each element.
  EXPECT_TRUE(allClose(resizeBy(arr<float>({1, 2}, {1, 2}), {1, 2}, {}), arr<float>({1, 4}, {1, 1, 2, 2})));
  // Any element type is copied exactly.
  auto s = resizeBy(arr<std::string>({2}, {"a", "b"}), {2}, {});
  EXPECT_TRUE(allClose(s, arr<std::string>({4}, {"a", "a", "b", "b"})));
  auto big = resizeBy(arr<int64_t>({2}, {(int64_t{1} << 60) + 1, 3}), {1.5f}, {});
  EXPECT_EQ(big.data<int64_t>()[0], (int64_t{1} << 60) + 1);
}

TEST(Resize, LinearCoordinateModes) {
  auto x = arr<float>({4}, {1, 2, 3, 4});
  // half_pixel: source (y + 0.5) / 2 - 0.5, clamped at the edges.
  EXPECT_TRUE(allClose(resizeTo(x, {8}, attrs({{"mode", str("linear")}})),
                       arr<float>({8}, {1, 1.25f, 1.75f, 2.25f, 2.75f, 3.25f, 3.75f, 4})));
  // align_corners: 4 -> 7 puts sources at y / 2.
  EXPECT_TRUE(allClose(
      resizeTo(x, {7}, attrs({{"mode", str("linear")}, {"coordinate_transformation_mode", str("align_corners")}})),
      arr<float>({7}, {1, 1.5f, 2, 2.5f, 3, 3.5f, 4})));
  // asymmetric: y / scale.
  EXPECT_TRUE(allClose(
      resizeBy(x, {2}, attrs({{"mode", str("linear")}, {"coordinate_transformation_mode", str("asymmetric")}})),
      arr<float>({8}, {1, 1.5f, 2, 2.5f, 3, 3.5f, 4, 4})));
  // One output element: pytorch_half_pixel samples 0, half_pixel the centre 1.5.
  EXPECT_TRUE(allClose(
      resizeTo(x, {1}, attrs({{"mode", str("linear")}, {"coordinate_transformation_mode", str("pytorch_half_pixel")}})),
      arr<float>({1}, {1})));
  EXPECT_TRUE(allClose(resizeTo(x, {1}, attrs({{"mode", str("linear")}})), arr<float>({1}, {2.5f})));
  // tf_half_pixel_for_nn (nearest): (y + 0.5) / scale.
  EXPECT_TRUE(allClose(resizeTo(x, {2}, attrs({{"coordinate_transformation_mode", str("tf_half_pixel_for_nn")}})),
                       arr<float>({2}, {2, 4})));
}

// Opset 18: scales/sizes for the listed axes only; the others keep their extent.
TEST(Resize, AxesAndKeepAspectRatioPolicy) {
  auto x = arr<float>({1, 1, 2, 4}, {1, 2, 3, 4, 5, 6, 7, 8});
  auto full = resizeBy(x, {1, 1, 2, 2}, {});
  EXPECT_TRUE(allClose(resizeBy(x, {2, 2}, attrs({{"axes", Ints{2, 3}}})), full));
  EXPECT_TRUE(allClose(resizeBy(x, {2, 2}, attrs({{"axes", Ints{-1, -2}}})), full));
  // sizes [4, 4] for axes 2, 3 ask for scales 2 and 1: not_larger takes 1, not_smaller 2.
  auto bySize = [&](const char* policy) {
    return resizeTo(x, {4, 4}, attrs({{"axes", Ints{2, 3}}, {"keep_aspect_ratio_policy", str(policy)}}));
  };
  EXPECT_TRUE(allClose(bySize("not_larger"), x));
  EXPECT_TRUE(allClose(bySize("not_smaller"), full));
  EXPECT_EQ(resizeTo(x, {4, 4}, attrs({{"axes", Ints{2, 3}}})).shape(), Shape({1, 1, 4, 4}));
  EXPECT_THROW(resizeBy(x, {2, 2}, attrs({{"axes", Ints{2, 2}}})), Error);
  EXPECT_THROW(resizeBy(x, {1, 1, 2, 2}, attrs({{"axes", Ints{2, 3}}})), Error);  // 4 scales for 2 axes
}

TEST(Resize, AntialiasAndHalfPixelSymmetric) {
  auto x = arr<float>({4}, {1, 2, 3, 4});
  // Downsampling by 2 widens the triangle filter to 4 taps, weights 1 3 3 1 (normalised), the
  // edge replicated: (1 + 3 + 6 + 3) / 8 and (2 + 9 + 12 + 4) / 8.
  EXPECT_TRUE(allClose(resizeTo(x, {2}, attrs({{"mode", str("linear")}, {"antialias", int64_t{1}}})),
                       arr<float>({2}, {1.625f, 3.375f})));
  // Upsampling: antialias changes nothing.
  auto lin = attrs({{"mode", str("linear")}});
  auto aa = attrs({{"mode", str("linear")}, {"antialias", int64_t{1}}});
  EXPECT_TRUE(allClose(resizeTo(x, {7}, aa), resizeTo(x, {7}, lin)));
  EXPECT_THROW(resizeTo(x, {2}, attrs({{"antialias", int64_t{1}}})), Error);  // nearest
  // half_pixel_symmetric, scale 0.6: 2.4 output elements rounded to 2, re-centred by
  // 2 * (1 - 2 / 2.4) = 1/3: sources 2/3 and 7/3.
  EXPECT_TRUE(allClose(
      resizeBy(x, {0.6f},
               attrs({{"mode", str("linear")}, {"coordinate_transformation_mode", str("half_pixel_symmetric")}})),
      arr<float>({2}, {5 / 3.f, 10 / 3.f}), 1e-5, 1e-5));
}

TEST(Resize, ScalesFloorTheOutput) {
  auto x = randomArray(DataType::Float, {1, 2, 5, 7}, 3);
  auto scales = arr<float>({4}, {1, 1, 0.5f, 1.7f});
  auto y = run1("Resize", {x, NDArray{}, scales}, attrs({{"mode", str("linear")}}));
  EXPECT_EQ(y.shape(), Shape({1, 2, 2, 11}));
  // 10 * 0.7f is 6.99999988 in double but 7 in float; ONNX's shape inference (1.23) and its
  // reference multiply in double, and so does the kernel, so that both give 6.
  auto x10 = randomArray(DataType::Float, {10}, 4);
  auto s07 = arr<float>({1}, {0.7f});
  EXPECT_EQ(resizeBy(x10, {0.7f}, {}).shape(), Shape({6}));
  auto g = singleNodeGraph({"Resize", {x10, NDArray{}, s07}}, /*constInputs=*/true);
  passes::PassContext ctx;
  passes::runPipeline(*g, {"infer-shapes"}, ctx);
  EXPECT_EQ(g->outputs().at(0)->type().info.shape(), Shape({6}));
  // Downsampling by 2 with half_pixel averages neighbouring pairs.
  auto d = resizeBy(arr<float>({4}, {1, 3, 10, 20}), {0.5f}, attrs({{"mode", str("linear")}}));
  EXPECT_TRUE(allClose(d, arr<float>({2}, {2, 15})));
}

TEST(Resize, TfCropAndResizeExtrapolates) {
  auto x = arr<float>({4}, {1, 2, 3, 4});
  auto roi = arr<float>({2}, {0.25f, 1.25f});
  // Sources 0.75, 2.25, 3.75; the last is outside [0, 3].
  auto y = run1("Resize", {x, roi, NDArray{}, arr<int64_t>({1}, {3})},
                attrs({{"mode", str("linear")},
                       {"coordinate_transformation_mode", str("tf_crop_and_resize")},
                       {"extrapolation_value", 10.0f}}));
  EXPECT_TRUE(allClose(y, arr<float>({3}, {1.75f, 3.25f, 10})));
  // In 2-D, a point outside along either axis takes the extrapolation value.
  auto x2 = arr<float>({2, 2}, {1, 2, 3, 4});
  auto roi2 = arr<float>({4}, {0, 0, 1, 2});
  auto y2 = run1("Resize", {x2, roi2, NDArray{}, arr<int64_t>({2}, {2, 3})},
                 attrs({{"mode", str("nearest")},
                        {"coordinate_transformation_mode", str("tf_crop_and_resize")},
                        {"extrapolation_value", -1.0f}}));
  EXPECT_TRUE(allClose(y2, arr<float>({2, 3}, {1, 2, -1, 3, 4, -1})));
  EXPECT_THROW(run1("Resize", {x, NDArray{}, NDArray{}, arr<int64_t>({1}, {3})},
                    attrs({{"coordinate_transformation_mode", str("tf_crop_and_resize")}})),
               Error);
}

// Keys' cubic kernel from |d|, written independently of the op's coefficient form.
double keys(double d, double A) {
  d = std::abs(d);
  if (d <= 1) return (A + 2) * d * d * d - (A + 3) * d * d + 1;
  if (d < 2) return A * d * d * d - 5 * A * d * d + 8 * A * d - 4 * A;
  return 0;
}

// 1-D cubic resize, half_pixel, edge-clamped or (exclude) renormalised over inside taps.
std::vector<double> naiveCubic(const std::vector<double>& v, int64_t out, double A, bool exclude) {
  auto in = static_cast<int64_t>(v.size());
  double scale = static_cast<double>(out) / static_cast<double>(in);
  std::vector<double> y;
  for (int64_t o = 0; o < out; ++o) {
    double x = (o + 0.5) / scale - 0.5, sum = 0, wsum = 0;
    auto f = static_cast<int64_t>(std::floor(x));
    for (int64_t i = f - 1; i <= f + 2; ++i) {
      double w = keys(x - static_cast<double>(i), A);
      if (exclude && (i < 0 || i >= in)) continue;
      sum += w * v[std::clamp<int64_t>(i, 0, in - 1)];
      wsum += w;
    }
    y.push_back(exclude ? sum / wsum : sum);
  }
  return y;
}

TEST(Resize, CubicMatchesKeysConvolution) {
  std::vector<double> v = {1, 4, 2, 8, 5, 7};
  auto x = arr<double>({6}, v);
  for (auto [out, A, exclude] : {std::tuple{9, -0.75, false}, {4, -0.5, true}, {13, -0.5, false}, {3, -0.75, true}}) {
    auto y = resizeTo(
        x, {out},
        attrs(
            {{"mode", str("cubic")}, {"cubic_coeff_a", static_cast<float>(A)}, {"exclude_outside", int64_t{exclude}}}));
    auto want = naiveCubic(v, out, A, exclude);
    EXPECT_TRUE(allClose(y, arr<double>({out}, want), 1e-12, 1e-12)) << out << " " << A << " " << exclude;
  }
  // 2-D is separable: resizing rows then columns equals resizing both at once.
  auto x2 = randomArray(DataType::Double, {3, 5}, 9);
  auto both = resizeTo(x2, {5, 8}, attrs({{"mode", str("cubic")}}));
  auto rows = resizeTo(resizeTo(x2, {3, 8}, attrs({{"mode", str("cubic")}})), {5, 8}, attrs({{"mode", str("cubic")}}));
  EXPECT_TRUE(allClose(both, rows, 1e-12, 1e-12));
}

TEST(Resize, IntegersRoundAndSaturate) {
  // Cubic overshoot (below 0 and above 255 next to the step) saturates instead of wrapping, and
  // flat regions stay exact.
  auto x = arr<uint8_t>({6}, {0, 0, 0, 255, 255, 255});
  auto y = resizeTo(x, {12}, attrs({{"mode", str("cubic")}}));
  auto want = naiveCubic({0, 0, 0, 255, 255, 255}, 12, -0.75, false);
  for (int64_t i = 0; i < 12; ++i)
    EXPECT_EQ(y.data<uint8_t>()[i], static_cast<uint8_t>(std::clamp(std::nearbyint(want[i]), 0.0, 255.0))) << i;
  EXPECT_EQ(y.data<uint8_t>()[0], 0);
  EXPECT_EQ(y.data<uint8_t>()[11], 255);
  // Linear halfway between 0 and 255 rounds to even: 127.5 -> 128.
  auto l = resizeTo(arr<int32_t>({2}, {0, 255}), {3},
                    attrs({{"mode", str("linear")}, {"coordinate_transformation_mode", str("align_corners")}}));
  EXPECT_TRUE(allClose(l, arr<int32_t>({3}, {0, 128, 255})));
}

TEST(Resize, LegacyUpsampleKeepsAsymmetricCoordinates) {
  // An opset-9 Upsample imports as Resize with the old coordinate mapping x_in = x_out / scale.
  ::onnx::ModelProto m;
  m.set_ir_version(4);
  m.add_opset_import()->set_version(9);
  auto* g = m.mutable_graph();
  g->set_name("upsample");
  auto* n = g->add_node();
  n->set_op_type("Upsample");
  n->add_input("X");
  n->add_input("scales");
  n->add_output("Y");
  auto* mode = n->add_attribute();
  mode->set_name("mode");
  mode->set_type(::onnx::AttributeProto::STRING);
  mode->set_s("linear");
  auto* sc = g->add_initializer();
  sc->set_name("scales");
  sc->set_data_type(::onnx::TensorProto::FLOAT);
  sc->add_dims(2);
  sc->add_float_data(1);
  sc->add_float_data(2);
  for (auto* v : {g->add_input(), g->add_output()}) {
    v->set_name(v == &g->output(0) ? "Y" : "X");
    auto* t = v->mutable_type()->mutable_tensor_type();
    t->set_elem_type(::onnx::TensorProto::FLOAT);
    t->mutable_shape()->add_dim()->set_dim_value(1);
    t->mutable_shape()->add_dim()->set_dim_value(v == &g->output(0) ? 4 : 2);
  }
  auto model = onnxio::loadModelBytes(m.SerializeAsString());
  const ir::Node* resize = nullptr;
  for (const ir::Node* node : model.graph->nodes())
    if (node->type() == "Resize") resize = node;
  ASSERT_NE(resize, nullptr);
  EXPECT_EQ(resize->attrString("coordinate_transformation_mode"), "asymmetric");
  EXPECT_EQ(resize->attrString("nearest_mode"), "floor");
  // What that means for linear upsampling of [1, 2] by 2: sources 0, 0.5, 1, 1.5.
  EXPECT_TRUE(
      allClose(resizeBy(arr<float>({1, 2}, {1, 2}), {1, 2}, resize->attrs()), arr<float>({1, 4}, {1, 1.5f, 2, 2})));
}

TEST(Resize, RejectsBadInputs) {
  auto x = arr<float>({2}, {1, 2});
  auto sizes = arr<int64_t>({1}, {4});
  auto scales = arr<float>({1}, {2});
  EXPECT_THROW(run1("Resize", {x, NDArray{}, scales, sizes}), Error);  // both
  EXPECT_THROW(run1("Resize", {x}), Error);                            // neither
  EXPECT_THROW(run1("Resize", {x, NDArray{}, arr<float>({2}, {1, 2})}), Error);
  EXPECT_THROW(run1("Resize", {x, NDArray{}, arr<float>({1}, {-1})}), Error);
  EXPECT_THROW(run1("Resize", {x, NDArray{}, arr<float>({1}, {NAN})}), Error);
  EXPECT_THROW(run1("Resize", {x, NDArray{}, NDArray{}, arr<int64_t>({1}, {-4})}), Error);
  EXPECT_THROW(run1("Resize", {x, NDArray{}, scales}, attrs({{"mode", str("area")}})), Error);
  EXPECT_THROW(run1("Resize", {x, NDArray{}, scales}, attrs({{"coordinate_transformation_mode", str("centre")}})),
               Error);
  EXPECT_THROW(run1("Resize", {x, NDArray{}, scales}, attrs({{"nearest_mode", str("round")}})), Error);
  EXPECT_THROW(run1("Resize", {arr<std::string>({1}, {"a"}), NDArray{}, scales}, attrs({{"mode", str("linear")}})),
               Error);
  // An empty scales tensor means "use sizes" (the opset 11-13 convention).
  EXPECT_TRUE(
      allClose(run1("Resize", {x, NDArray{}, NDArray(DataType::Float, {0}), sizes}), arr<float>({4}, {1, 1, 2, 2})));
}

// ---- GridSample ---------------------------------------------------------------------------------

// A grid over one row of W pixels (H = 1) sampling the given pixel x coordinates, for
// align_corners = 0: g = (2x + 1) / W - 1.
NDArray rowGrid(const std::vector<double>& xs, int64_t W) {
  std::vector<float> g;
  for (double x : xs) {
    g.push_back(static_cast<float>((2 * x + 1) / static_cast<double>(W) - 1));
    g.push_back(0.0f);
  }
  return arr<float>({1, 1, static_cast<int64_t>(xs.size()), 2}, g);
}

TEST(GridSample, IdentityGridReproducesInput) {
  auto x = randomArray(DataType::Float, {2, 3, 4, 5}, 21);
  for (int align = 0; align <= 1; ++align) {
    std::vector<float> g;
    for (int n = 0; n < 2; ++n)
      for (int i = 0; i < 4; ++i)
        for (int j = 0; j < 5; ++j) {
          g.push_back(align ? -1.0f + 2.0f * j / 4 : (2.0f * j + 1) / 5 - 1);
          g.push_back(align ? -1.0f + 2.0f * i / 3 : (2.0f * i + 1) / 4 - 1);
        }
    auto grid = arr<float>({2, 4, 5, 2}, g);
    for (const char* mode : {"bilinear", "nearest", "bicubic"}) {
      auto y = run1("GridSample", {x, grid}, attrs({{"align_corners", int64_t{align}}, {"mode", str(mode)}}));
      EXPECT_TRUE(allClose(y, x, 1e-5, 1e-5)) << mode << " align_corners " << align;
    }
  }
}

TEST(GridSample, PaddingModes) {
  auto x = arr<float>({1, 1, 1, 4}, {1, 2, 3, 4});
  auto grid = rowGrid({-1.5, 4.25, -0.25, 1.25}, 4);
  auto run = [&](const char* pm) { return run1("GridSample", {x, grid}, attrs({{"padding_mode", str(pm)}})); };
  // zeros: taps outside read 0.
  EXPECT_TRUE(allClose(run("zeros"), arr<float>({1, 1, 1, 4}, {0, 0, 0.75f, 2.25f})));
  // border: coordinates outside [-0.5, 3.5] clamp to [0, 3]; taps clamp to the edge.
  EXPECT_TRUE(allClose(run("border"), arr<float>({1, 1, 1, 4}, {1, 4, 1, 2.25f})));
  // reflection: -1.5 mirrors at -0.5 to 0.5; 4.25 mirrors at 3.5 to 2.75.
  EXPECT_TRUE(allClose(run("reflection"), arr<float>({1, 1, 1, 4}, {1.5f, 3.75f, 1, 2.25f})));
}

TEST(GridSample, NearestRoundsHalfToEven) {
  auto x = arr<float>({1, 1, 1, 4}, {1, 2, 3, 4});
  auto y = run1("GridSample", {x, rowGrid({0.5, 1.5, 2.5, 2.6}, 4)}, attrs({{"mode", str("nearest")}}));
  EXPECT_TRUE(allClose(y, arr<float>({1, 1, 1, 4}, {1, 3, 3, 4})));
}

TEST(GridSample, BicubicMatchesKeysConvolution) {
  std::vector<double> v = {1, 4, 2, 8, 5};
  auto x = arr<double>({1, 1, 1, 5}, v);
  std::vector<double> xs = {0.3, 1.7, 2.5, 3.9, -1.3, 5.2};
  std::vector<double> grid;
  for (double p : xs) {
    grid.push_back((2 * p + 1) / 5 - 1);
    grid.push_back(0);
  }
  for (bool border : {false, true}) {
    auto y = run1("GridSample", {x, arr<double>({1, 1, 6, 2}, grid)},
                  attrs({{"mode", str("bicubic")}, {"padding_mode", str(border ? "border" : "zeros")}}));
    for (size_t k = 0; k < xs.size(); ++k) {
      // zeros: taps outside read 0; border: each tap clamps to the edge (the coordinate does not).
      double want = 0;
      auto f = static_cast<int64_t>(std::floor(xs[k]));
      for (int64_t i = f - 1; i <= f + 2; ++i) {
        double w = keys(xs[k] - static_cast<double>(i), -0.75);
        if (border)
          want += w * v[std::clamp<int64_t>(i, 0, 4)];
        else if (i >= 0 && i < 5)
          want += w * v[i];
      }
      EXPECT_NEAR(y.data<double>()[k], want, 1e-9) << xs[k] << (border ? " border" : " zeros");
    }
  }
}

TEST(GridSample, RejectsBadInputs) {
  auto x = arr<float>({1, 1, 1, 4}, {1, 2, 3, 4});
  EXPECT_THROW(run1("GridSample", {x, arr<float>({1, 1, 1, 3}, {0, 0, 0})}), Error);
  EXPECT_THROW(run1("GridSample", {x, arr<float>({2, 1, 1, 2}, {0, 0, 0, 0})}), Error);
  EXPECT_THROW(run1("GridSample", {arr<float>({1, 4}, {1, 2, 3, 4}), rowGrid({0}, 4)}), Error);
  EXPECT_THROW(run1("GridSample", {x, rowGrid({0}, 4)}, attrs({{"mode", str("trilinear")}})), Error);
  EXPECT_THROW(run1("GridSample", {x, rowGrid({0}, 4)}, attrs({{"padding_mode", str("wrap")}})), Error);
  // Non-finite grid values give 0 instead of undefined behaviour.
  auto y = run1("GridSample", {x, arr<float>({1, 1, 2, 2}, {NAN, 0, INFINITY, 0})},
                attrs({{"padding_mode", str("reflection")}}));
  EXPECT_TRUE(allClose(y, arr<float>({1, 1, 1, 2}, {0, 0})));
}

}  // namespace
}  // namespace graft::testing
