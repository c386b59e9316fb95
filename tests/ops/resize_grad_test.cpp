// Gradients (VJPs) of src/ops/resize.cpp against central finite differences in float64 (Resize
// in nearest, linear and cubic modes over the coordinate transforms, up- and downsampling, scales
// and sizes), and its ai.graft gradient op ResizeGrad against hand-computed values.
#include "op_test_util.hpp"

namespace graft::testing {
namespace {

using Ints = std::vector<int64_t>;

ir::AttrValue str(const char* s) { return std::string(s); }

OpCase bySizes(Shape xs, Ints sizes, ir::Attributes a) {
  return {"Resize",
          {randomArray(DataType::Double, xs, 1), NDArray{}, NDArray{},
           arr<int64_t>({static_cast<int64_t>(sizes.size())}, sizes)},
          std::move(a)};
}
OpCase byScales(Shape xs, std::vector<float> scales, ir::Attributes a) {
  return {"Resize",
          {randomArray(DataType::Double, xs, 2), NDArray{}, arr<float>({static_cast<int64_t>(scales.size())}, scales)},
          std::move(a)};
}

TEST(Resize, GradientNearest) {
  for (const char* ctm : {"half_pixel", "asymmetric", "align_corners", "tf_half_pixel_for_nn"})
    for (const char* nm : {"round_prefer_floor", "floor", "ceil"}) {
      ir::Attributes a = attrs({{"coordinate_transformation_mode", str(ctm)}, {"nearest_mode", str(nm)}});
      EXPECT_TRUE(gradCheck(bySizes({1, 2, 3, 4}, {1, 2, 5, 7}, a), {0})) << ctm << " " << nm << " up";
      EXPECT_TRUE(gradCheck(bySizes({1, 2, 5, 4}, {1, 2, 3, 2}, a), {0})) << ctm << " " << nm << " down";
    }
  EXPECT_TRUE(gradCheck(byScales({1, 1, 2, 3}, {1, 1, 2, 2}, {}), {0}));
}

TEST(Resize, GradientLinear) {
  for (const char* ctm : {"half_pixel", "pytorch_half_pixel", "align_corners", "asymmetric"}) {
    ir::Attributes a = attrs({{"mode", str("linear")}, {"coordinate_transformation_mode", str(ctm)}});
    EXPECT_TRUE(gradCheck(bySizes({1, 2, 3, 4}, {1, 2, 5, 7}, a), {0})) << ctm << " up";
    EXPECT_TRUE(gradCheck(bySizes({2, 1, 6, 5}, {2, 1, 4, 2}, a), {0})) << ctm << " down";
    EXPECT_TRUE(gradCheck(byScales({1, 1, 3, 3}, {1, 1, 2.5f, 1.5f}, a), {0})) << ctm << " scales";
  }
}

// Opset 18/19: antialiased filters, axes, keep_aspect_ratio_policy, half_pixel_symmetric.
TEST(Resize, GradientAntialiasAxesAndPolicies) {
  auto at28 = [](OpCase c) {
    c.opset = 28;
    return c;
  };
  for (const char* mode : {"linear", "cubic"}) {
    ir::Attributes a = attrs({{"mode", str(mode)}, {"antialias", int64_t{1}}});
    EXPECT_TRUE(gradCheck(at28(bySizes({1, 1, 7, 6}, {1, 1, 3, 2}, a)), {0})) << mode << " antialias down";
    EXPECT_TRUE(gradCheck(at28(byScales({1, 1, 3, 2}, {1, 1, 2, 1.5f}, a)), {0})) << mode << " antialias up";
  }
  ir::Attributes b = attrs({{"mode", str("linear")},
                            {"axes", Ints{3, 2}},
                            {"keep_aspect_ratio_policy", str("not_smaller")},
                            {"coordinate_transformation_mode", str("half_pixel_symmetric")}});
  EXPECT_TRUE(gradCheck(at28(bySizes({1, 2, 3, 4}, {5, 4}, b)), {0}));
}

TEST(Resize, GradientCubicAndCropAndResize) {
  for (int64_t exclude : {0, 1})
    EXPECT_TRUE(gradCheck(
        bySizes({1, 1, 4, 5}, {1, 1, 7, 3}, attrs({{"mode", str("cubic")}, {"exclude_outside", exclude}})), {0}));
  // tf_crop_and_resize: positions outside the roi take extrapolation_value and no gradient.
  OpCase c{"Resize",
           {randomArray(DataType::Double, {1, 1, 4, 4}, 3), arr<float>({8}, {0, 0, -0.2f, 0.1f, 1, 1, 0.9f, 1.3f}),
            NDArray{}, arr<int64_t>({4}, {1, 1, 5, 6})},
           attrs({{"mode", str("linear")},
                  {"coordinate_transformation_mode", str("tf_crop_and_resize")},
                  {"extrapolation_value", 2.0f}})};
  EXPECT_TRUE(gradCheck(c, {0}));
}

TEST(Graft_ResizeGrad, HandComputed) {
  // Linear, half_pixel, 2 -> 4: sources -0.25 (clamped to 0), 0.25, 0.75, 1.25 (clamped to 1).
  OpCase c{"ResizeGrad",
           {arr<float>({4}, {1, 2, 3, 4}), arr<float>({2}, {0, 0}), NDArray{}, NDArray{}, arr<int64_t>({1}, {4})},
           attrs({{"mode", str("linear")}}),
           1,
           "ai.graft"};
  // x0 gets 1 + 2 * 0.75 + 3 * 0.25, x1 gets 2 * 0.25 + 3 * 0.75 + 4.
  EXPECT_TRUE(allClose(runReference(c).at(0), arr<float>({2}, {3.25f, 6.75f})));
  c.inputs[0] = arr<float>({3}, {1, 2, 3});
  EXPECT_THROW(runReference(c), Error);
}

}  // namespace
}  // namespace graft::testing
