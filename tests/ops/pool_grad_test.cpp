// Gradients (VJPs) of src/ops/pool.cpp against central finite differences in float64 (strides,
// pads, dilations, ceil_mode, count_include_pad, auto_pad modes; 1-D to 3-D), and the ai.graft
// gradient ops it adds (MaxPoolGrad, AveragePoolGrad) against hand-computed values.
#include "op_test_util.hpp"

namespace graft::testing {
namespace {

using Ints = std::vector<int64_t>;

NDArray rnd(Shape s, uint64_t seed) { return randomArray(DataType::Double, std::move(s), seed, -2.0, 2.0); }

::testing::AssertionResult check(const std::string& type, Shape xs, ir::Attributes a, uint64_t seed = 1) {
  return gradCheck({type, {rnd(std::move(xs), seed)}, std::move(a)}, {0});
}

TEST(MaxPool, Gradient) {
  EXPECT_TRUE(check("MaxPool", {2, 3, 4, 4}, attrs({{"kernel_shape", Ints{2, 2}}, {"strides", Ints{2, 2}}})));
  // Overlapping windows: an element that is the maximum of several windows collects them all.
  EXPECT_TRUE(check("MaxPool", {1, 2, 5, 5}, attrs({{"kernel_shape", Ints{3, 3}}})));
  EXPECT_TRUE(check("MaxPool", {2, 2, 5, 6},
                    attrs({{"kernel_shape", Ints{3, 2}}, {"strides", Ints{2, 1}}, {"pads", Ints{1, 0, 1, 1}}})));
  EXPECT_TRUE(check("MaxPool", {1, 2, 7, 7},
                    attrs({{"kernel_shape", Ints{2, 3}}, {"dilations", Ints{2, 2}}, {"strides", Ints{1, 2}}})));
}

TEST(MaxPool, GradientCeilModeAndAutoPad) {
  // 6 rows, kernel 3, stride 2: ceil_mode adds a partial last window.
  EXPECT_TRUE(check("MaxPool", {1, 2, 6, 6},
                    attrs({{"kernel_shape", Ints{3, 3}}, {"strides", Ints{2, 2}}, {"ceil_mode", int64_t{1}}})));
  for (const char* mode : {"SAME_UPPER", "SAME_LOWER", "VALID"})
    EXPECT_TRUE(check("MaxPool", {1, 2, 5, 6},
                      attrs({{"kernel_shape", Ints{2, 3}}, {"strides", Ints{2, 2}}, {"auto_pad", std::string(mode)}})))
        << mode;
}

TEST(MaxPool, Gradient1DAnd3DWithIndices) {
  EXPECT_TRUE(
      check("MaxPool", {2, 2, 9}, attrs({{"kernel_shape", Ints{3}}, {"strides", Ints{2}}, {"pads", Ints{1, 1}}})));
  EXPECT_TRUE(check("MaxPool", {1, 2, 4, 4, 3}, attrs({{"kernel_shape", Ints{2, 2, 2}}, {"strides", Ints{2, 2, 1}}})));
  // The Indices output carries no gradient; X's gradient is unchanged by asking for it.
  OpCase c{"MaxPool", {rnd({1, 2, 4, 4}, 3)}, attrs({{"kernel_shape", Ints{2, 2}}, {"strides", Ints{2, 2}}}), 2};
  EXPECT_TRUE(gradCheck(c, {0}));
}

TEST(MaxPool, GradientGoesToTheFirstMaximumOfATie) {
  OpCase c{"MaxPool", {arr<double>({1, 1, 2, 2}, {1, 3, 3, 2})}, attrs({{"kernel_shape", Ints{2, 2}}})};
  NDArray g = vjpOf(c, {0}, {arr<double>({1, 1, 1, 1}, {5})}).at(0);
  EXPECT_TRUE(allClose(g, arr<double>({1, 1, 2, 2}, {0, 5, 0, 0}), 0, 0));
}

TEST(MaxPool, GradientSkipsWindowsOverPaddingOnly) {
  // ceil_mode: a third window would start in the end padding; it is dropped (ONNX opset 19 and
  // later, PyTorch), so two windows send their gradients back.
  ir::Attributes a =
      attrs({{"kernel_shape", Ints{2}}, {"strides", Ints{2}}, {"pads", Ints{0, 1}}, {"ceil_mode", int64_t{1}}});
  OpCase c{"MaxPool", {arr<double>({1, 1, 4}, {1, 5, 3, 2})}, a};
  c.opset = 28;  // ONNX's inference at opset 17 still counts the dropped window
  NDArray dy = arr<double>({1, 1, 2}, {1, 2});
  EXPECT_TRUE(allClose(vjpOf(c, {0}, {dy}).at(0), arr<double>({1, 1, 4}, {0, 1, 2, 0}), 0, 0));
  c.type = "AveragePool";
  for (int64_t include : {0, 1}) {
    c.attrs.set("count_include_pad", include);
    EXPECT_TRUE(allClose(vjpOf(c, {0}, {dy}).at(0), arr<double>({1, 1, 4}, {0.5, 0.5, 1, 1}), 0, 0)) << include;
  }
}

TEST(AveragePool, Gradient) {
  EXPECT_TRUE(check("AveragePool", {2, 3, 4, 4}, attrs({{"kernel_shape", Ints{2, 2}}, {"strides", Ints{2, 2}}})));
  EXPECT_TRUE(check("AveragePool", {1, 2, 5, 5}, attrs({{"kernel_shape", Ints{3, 2}}})));
  for (int64_t include : {0, 1}) {
    EXPECT_TRUE(check("AveragePool", {2, 2, 5, 6},
                      attrs({{"kernel_shape", Ints{3, 3}},
                             {"strides", Ints{2, 1}},
                             {"pads", Ints{1, 2, 1, 0}},
                             {"count_include_pad", include}})))
        << "count_include_pad " << include;
    EXPECT_TRUE(check("AveragePool", {1, 2, 6, 7},
                      attrs({{"kernel_shape", Ints{3, 2}},
                             {"strides", Ints{2, 2}},
                             {"pads", Ints{1, 1, 0, 0}},
                             {"ceil_mode", int64_t{1}},
                             {"count_include_pad", include}})))
        << "ceil_mode, count_include_pad " << include;
  }
}

// Dilated AveragePool (opset 19) and LpPool (opset 18), read at the canonical opset.
::testing::AssertionResult checkOpset28(const std::string& type, Shape xs, ir::Attributes a) {
  OpCase c{type, {rnd(std::move(xs), 3)}, std::move(a)};
  c.opset = 28;
  return gradCheck(c, {0});
}

TEST(AveragePool, GradientDilated) {
  for (int64_t include : {0, 1})
    EXPECT_TRUE(checkOpset28("AveragePool", {1, 2, 7, 6},
                             attrs({{"kernel_shape", Ints{2, 3}},
                                    {"dilations", Ints{2, 2}},
                                    {"pads", Ints{1, 1, 1, 0}},
                                    {"count_include_pad", include}})))
        << "count_include_pad " << include;
}

TEST(LpPool, GradientDilated) {
  EXPECT_TRUE(checkOpset28("LpPool", {1, 2, 7, 6},
                           attrs({{"kernel_shape", Ints{2, 2}}, {"dilations", Ints{2, 3}}, {"p", int64_t{2}}})));
}

TEST(AveragePool, GradientAutoPad1DAnd3D) {
  for (const char* mode : {"SAME_UPPER", "SAME_LOWER", "VALID"})
    for (int64_t include : {0, 1})
      EXPECT_TRUE(check("AveragePool", {1, 2, 5, 6},
                        attrs({{"kernel_shape", Ints{3, 2}},
                               {"strides", Ints{2, 2}},
                               {"auto_pad", std::string(mode)},
                               {"count_include_pad", include}})))
          << mode;
  EXPECT_TRUE(
      check("AveragePool", {2, 1, 7}, attrs({{"kernel_shape", Ints{3}}, {"strides", Ints{2}}, {"pads", Ints{0, 2}}})));
  EXPECT_TRUE(
      check("AveragePool", {1, 2, 3, 4, 4}, attrs({{"kernel_shape", Ints{2, 2, 3}}, {"strides", Ints{1, 2, 1}}})));
}

TEST(GlobalAveragePool, Gradient) {
  EXPECT_TRUE(check("GlobalAveragePool", {2, 3, 4, 5}, {}));
  EXPECT_TRUE(check("GlobalAveragePool", {2, 3, 5}, {}));
}

TEST(GlobalMaxPool, Gradient) {
  EXPECT_TRUE(check("GlobalMaxPool", {2, 3, 4, 5}, {}));
  EXPECT_TRUE(check("GlobalMaxPool", {2, 3, 3, 2, 2}, {}));
}

TEST(LpPool, Gradient) {
  for (int64_t p : {1, 2, 3})
    EXPECT_TRUE(
        check("LpPool", {1, 2, 5, 5},
              attrs({{"kernel_shape", Ints{2, 3}}, {"strides", Ints{2, 1}}, {"pads", Ints{1, 0, 0, 1}}, {"p", p}})))
        << "p=" << p;
  EXPECT_TRUE(check("LpPool", {1, 2, 6},
                    attrs({{"kernel_shape", Ints{2}}, {"strides", Ints{2}}, {"auto_pad", std::string("SAME_UPPER")}})));
}

TEST(GlobalLpPool, Gradient) {
  for (int64_t p : {1, 2, 3}) EXPECT_TRUE(check("GlobalLpPool", {2, 2, 3, 3}, attrs({{"p", p}}))) << "p=" << p;
}

TEST(Graft_MaxPoolGrad, HandComputed) {
  // Windows [1 4 | 2 3] and [4 0 | 3 5] of a 2x3 plane (kernel 2x2, stride 1): maxima 4 and 5.
  OpCase c{"MaxPoolGrad",
           {arr<float>({1, 1, 1, 2}, {10, 20}), arr<float>({1, 1, 2, 3}, {1, 4, 0, 2, 3, 5})},
           attrs({{"kernel_shape", Ints{2, 2}}}),
           1,
           "ai.graft"};
  EXPECT_TRUE(allClose(runReference(c).at(0), arr<float>({1, 1, 2, 3}, {0, 10, 0, 0, 0, 20})));
  // Both windows pick the same element: the gradients add.
  c.inputs[1] = arr<float>({1, 1, 2, 3}, {1, 9, 0, 2, 3, 5});
  EXPECT_TRUE(allClose(runReference(c).at(0), arr<float>({1, 1, 2, 3}, {0, 30, 0, 0, 0, 0})));
}

TEST(Graft_MaxPoolGrad, RejectsMismatchedShapes) {
  OpCase c{"MaxPoolGrad",
           {arr<float>({1, 1, 1, 3}, {1, 2, 3}), arr<float>({1, 1, 2, 3}, {1, 4, 0, 2, 3, 5})},
           attrs({{"kernel_shape", Ints{2, 2}}}),
           1,
           "ai.graft"};
  EXPECT_THROW(runReference(c), Error);
}

TEST(Graft_AveragePoolGrad, HandComputed) {
  // 1-D, kernel 2, pads 1 both sides over 3 elements: windows [p x0] [x1 x2] (stride 2).
  OpCase c{"AveragePoolGrad",
           {arr<float>({1, 1, 2}, {6, 8}), arr<float>({1, 1, 3}, {0, 0, 0})},
           attrs({{"kernel_shape", Ints{2}}, {"strides", Ints{2}}, {"pads", Ints{1, 0}}}),
           1,
           "ai.graft"};
  EXPECT_TRUE(allClose(runReference(c).at(0), arr<float>({1, 1, 3}, {6, 4, 4})));
  c.attrs.set("count_include_pad", int64_t{1});
  EXPECT_TRUE(allClose(runReference(c).at(0), arr<float>({1, 1, 3}, {3, 4, 4})));
  c.inputs[0] = arr<float>({1, 1, 3}, {1, 2, 3});
  EXPECT_THROW(runReference(c), Error);
}

}  // namespace
}  // namespace graft::testing
