// Gradients (VJPs) of src/ops/normalization.cpp against central finite differences in float64,
// and the gradient ops it adds (ai.graft BatchNormalizationGrad, LayerNormalizationGrad, LRNGrad) against hand-computed
// values.
#include <cmath>

#include "op_test_util.hpp"

namespace graft::testing {
namespace {

NDArray rnd(Shape s, uint64_t seed, double lo = -1.0, double hi = 1.0) {
  return randomArray(DataType::Double, std::move(s), seed, lo, hi);
}

OpCase batchNorm(Shape xs, int64_t training, float momentum, int outputs) {
  int64_t C = xs.size() >= 2 ? xs[1] : 1;
  return {"BatchNormalization",
          {rnd(xs, 1, -2, 2), rnd({C}, 2, 0.5, 1.5), rnd({C}, 3), rnd({C}, 4), rnd({C}, 5, 0.5, 2)},
          attrs({{"training_mode", training}, {"momentum", momentum}, {"epsilon", 1e-3f}}),
          outputs};
}

TEST(BatchNormalization, GradientInferenceMode) {
  for (const Shape& s : {Shape{3, 2, 4}, Shape{4, 3}, Shape{2, 2, 2, 3}, Shape{5}})
    EXPECT_TRUE(gradCheck(batchNorm(s, 0, 0.9f, 1), {0, 1, 2})) << shapeToString(s);
}

TEST(BatchNormalization, GradientTrainingMode) {
  for (const Shape& s : {Shape{3, 2, 4}, Shape{4, 3}, Shape{2, 2, 2, 3}, Shape{5}}) {
    // The running-statistics outputs (ONNX requires them in training mode) depend on X through
    // the batch statistics; with momentum 0 the VJP hands them to the gradient op as the batch
    // statistics.
    for (float momentum : {0.9f, 0.0f})
      EXPECT_TRUE(gradCheck(batchNorm(s, 1, momentum, 3), {0, 1, 2})) << shapeToString(s) << " momentum=" << momentum;
  }
}

TEST(InstanceNormalization, Gradient) {
  for (Shape s : {Shape{2, 3, 4}, Shape{2, 3, 2, 2}, Shape{2, 3}}) {
    int64_t C = s[1];
    OpCase c{
        "InstanceNormalization", {rnd(s, 1, -2, 2), rnd({C}, 2, 0.5, 1.5), rnd({C}, 3)}, attrs({{"epsilon", 1e-3f}})};
    EXPECT_TRUE(gradCheck(c, {0, 1, 2})) << shapeToString(s);
  }
}

TEST(LayerNormalization, Gradient) {
  Shape xs{2, 3, 4};
  for (int64_t axis : {-1, 1, 0}) {
    Shape norm(xs.begin() + (axis < 0 ? axis + 3 : axis), xs.end());
    OpCase c{"LayerNormalization",
             {rnd(xs, 1, -2, 2), rnd(norm, 2, 0.5, 1.5), rnd(norm, 3)},
             attrs({{"axis", axis}, {"epsilon", 1e-3f}})};
    EXPECT_TRUE(gradCheck(c, {0, 1, 2})) << "axis=" << axis;
    // Mean and InvStdDev as outputs, in X's type: they are reused and their gradients count.
    c.numOutputs = 3;
    c.attrs.set("stash_type", int64_t{11});
    EXPECT_TRUE(gradCheck(c, {0, 1, 2})) << "axis=" << axis << " with statistics";
  }
  // A scale broadcast over the normalized shape, and no bias.
  OpCase b{"LayerNormalization", {rnd(xs, 4, -2, 2), rnd({4}, 5, 0.5, 1.5)}, attrs({{"axis", int64_t{1}}})};
  EXPECT_TRUE(gradCheck(b, {0, 1}));
  // Float statistics of a double X are recomputed in double.
  OpCase f{"LayerNormalization", {rnd(xs, 6, -2, 2), rnd({4}, 7, 0.5, 1.5)}, {}, 3};
  EXPECT_TRUE(allClose(vjpOf(f, {0, 1}, {rnd(xs, 8)})[0],
                       vjpOf({f.type, f.inputs, f.attrs, 1}, {0, 1}, {rnd(xs, 8)})[0], 0, 0));
}

TEST(MeanVarianceNormalization, Gradient) {
  EXPECT_TRUE(gradCheck({"MeanVarianceNormalization", {rnd({2, 3, 2, 2}, 1, -2, 2)}}, {0}));
  EXPECT_TRUE(gradCheck(
      {"MeanVarianceNormalization", {rnd({2, 3, 4}, 2, -2, 2)}, attrs({{"axes", std::vector<int64_t>{1}}})}, {0}));
  // A constant group: y = c / (s + 1e-9) is steep there, (dy - mean(dy)) / 1e-9, and the
  // variance term, 0/0, is 0 rather than NaN.
  OpCase c{"MeanVarianceNormalization",
           {arr<double>({1, 2, 1, 2}, {3, 3, 1, 2})},
           attrs({{"axes", std::vector<int64_t>{3}}})};
  NDArray g = vjpOf(c, {0}, {arr<double>({1, 2, 1, 2}, {1, 2, 0, 0})}).at(0);
  EXPECT_TRUE(allClose(g, arr<double>({1, 2, 1, 2}, {-0.5e9, 0.5e9, 0, 0}), 1e-9));
}

TEST(LRN, Gradient) {
  for (int64_t size : {1, 2, 3, 5}) {
    OpCase c{
        "LRN", {rnd({2, 5, 3}, 1, -2, 2)}, attrs({{"size", size}, {"alpha", 0.5f}, {"beta", 0.75f}, {"bias", 1.5f}})};
    EXPECT_TRUE(gradCheck(c, {0})) << "size=" << size;
  }
}

// ---- gradient ops --------------------------------------------------------------------------------

OpCase bnGrad(std::vector<NDArray> in) {
  return {"BatchNormalizationGrad", std::move(in), attrs({{"epsilon", 0.0f}}), 3, "ai.graft"};
}

TEST(Graft_BatchNormalizationGrad, HandComputed) {
  // x = [0, 1, 5] (one channel): mean 2, var 14/3, inv = sqrt(3/14), c = x - mean = [-2, -1, 3].
  // dB = sum dy = 1, dScale = sum dy c inv = -2 inv, dx = inv (dy - 1/3 + c/7).
  NDArray x = arr<double>({3, 1}, {0, 1, 5}), dy = arr<double>({3, 1}, {1, 0, 0});
  double inv = std::sqrt(3.0 / 14.0);
  auto out = runReference(bnGrad({dy, x, arr<double>({1}, {1})}));
  EXPECT_TRUE(allClose(
      out[0],
      arr<double>({3, 1}, {inv * (1 - 1.0 / 3 - 2.0 / 7), inv * (-1.0 / 3 - 1.0 / 7), inv * (-1.0 / 3 + 3.0 / 7)}),
      1e-12, 1e-14));
  EXPECT_TRUE(allClose(out[1], arr<double>({1}, {-2 * inv}), 1e-12, 1e-14));
  EXPECT_TRUE(allClose(out[2], arr<double>({1}, {1})));
}

TEST(Graft_BatchNormalizationGrad, GivenStatisticsEqualComputedOnes) {
  NDArray x = rnd({3, 2, 4}, 1), dy = rnd({3, 2, 4}, 2), scale = rnd({2}, 3, 0.5, 1.5);
  // The batch statistics, as a training-mode BatchNormalization with momentum 0 returns them.
  auto stats = runReference({"BatchNormalization",
                             {x, scale, rnd({2}, 4), rnd({2}, 5), rnd({2}, 6, 0.5, 1)},
                             attrs({{"training_mode", int64_t{1}}, {"momentum", 0.0f}}),
                             3});
  auto a = runReference(bnGrad({dy, x, scale, stats[1], stats[2]}));
  auto b = runReference(bnGrad({dy, x, scale}));
  for (int i = 0; i < 3; ++i) EXPECT_TRUE(allClose(a[i], b[i], 1e-12, 1e-14)) << "output " << i;
  EXPECT_EQ(inferTypes(bnGrad({dy, x, scale}))[1].info.shape(), (Shape{2}));
}

TEST(Graft_BatchNormalizationGrad, RejectsMismatchedShapes) {
  EXPECT_THROW(runReference(bnGrad({rnd({3, 2}, 1), rnd({3, 1}, 2), arr<double>({1}, {1})})), Error);
  EXPECT_THROW(runReference(bnGrad({rnd({3, 2}, 1), rnd({3, 2}, 2), arr<double>({3}, {1, 1, 1})})), Error);
}

OpCase lnGrad(std::vector<NDArray> in, int64_t axis = -1) {
  return {"LayerNormalizationGrad", std::move(in), attrs({{"axis", axis}, {"epsilon", 0.0f}}), 3, "ai.graft"};
}

TEST(Graft_LayerNormalizationGrad, HandComputed) {
  // One row x = [0, 1, 5], Scale 1: mean 2, var 14/3, inv = sqrt(3/14), c = x - mean = [-2, -1, 3];
  // with dy = [1, 0, 0]: dx = inv (dy - 1/3 + c/7), dScale = dy x-hat = [-2 inv, 0, 0], dB = dy.
  NDArray x = arr<double>({1, 3}, {0, 1, 5}), dy = arr<double>({1, 3}, {1, 0, 0});
  double inv = std::sqrt(3.0 / 14.0);
  auto out = runReference(lnGrad({dy, x, arr<double>({3}, {1, 1, 1})}));
  EXPECT_TRUE(allClose(
      out[0],
      arr<double>({1, 3}, {inv * (1 - 1.0 / 3 - 2.0 / 7), inv * (-1.0 / 3 - 1.0 / 7), inv * (-1.0 / 3 + 3.0 / 7)}),
      1e-12, 1e-14));
  EXPECT_TRUE(allClose(out[1], arr<double>({3}, {-2 * inv, 0, 0}), 1e-12, 1e-14));
  EXPECT_TRUE(allClose(out[2], arr<double>({3}, {1, 0, 0})));
  EXPECT_EQ(inferTypes(lnGrad({dy, x, arr<double>({3}, {1, 1, 1})}))[1].info.shape(), (Shape{3}));
}

TEST(Graft_LayerNormalizationGrad, EqualsTheComposedGradient) {
  // The VJP takes the op where Scale and B have the normalised shape, and composes elementwise
  // ops and reductions where they broadcast to it. A Scale of [5] over the normalised [2, 5]
  // takes the composition; the op given the same Scale tiled to [2, 5] must agree: dX equal,
  // dScale and dB the composed ones once summed over the tiled axis.
  Shape xs{3, 2, 5};
  NDArray x = rnd(xs, 1, -2, 2), dy = rnd(xs, 2), scale = rnd({5}, 3, 0.5, 1.5), bias = rnd({5}, 4);
  NDArray tiled(DataType::Double, {2, 5});
  for (int64_t i = 0; i < 10; ++i) tiled.data<double>()[i] = scale.data<double>()[i % 5];
  auto op = runReference(lnGrad({dy, x, tiled}, 1));
  OpCase f{"LayerNormalization", {x, scale, bias}, attrs({{"axis", int64_t{1}}, {"epsilon", 0.0f}})};
  auto composed = vjpOf(f, {0, 1, 2}, {dy});
  EXPECT_TRUE(allClose(op[0], composed[0], 1e-12, 1e-14));
  for (int i = 1; i < 3; ++i) {
    NDArray folded(DataType::Double, {5});
    for (int64_t j = 0; j < 5; ++j) folded.data<double>()[j] = op[i].data<double>()[j] + op[i].data<double>()[5 + j];
    EXPECT_TRUE(allClose(folded, composed[i], 1e-12, 1e-14)) << "output " << i;
  }
}

TEST(Graft_LayerNormalizationGrad, RejectsMismatchedShapes) {
  EXPECT_THROW(runReference(lnGrad({rnd({3, 4}, 1), rnd({3, 5}, 2), rnd({5}, 3)})), Error);
  EXPECT_THROW(runReference(lnGrad({rnd({3, 4}, 1), rnd({3, 4}, 2), rnd({1, 4}, 3)})), Error);
}

TEST(Graft_LRNGrad, HandComputed) {
  // size 1, alpha 1, beta 1, bias 1: y = x / (1 + x^2), dy/dx = (1 - x^2) / (1 + x^2)^2.
  OpCase c{"LRNGrad",
           {arr<float>({1, 2, 1}, {1, 1}), arr<float>({1, 2, 1}, {1, 2})},
           attrs({{"size", int64_t{1}}, {"alpha", 1.0f}, {"beta", 1.0f}, {"bias", 1.0f}}),
           1,
           "ai.graft"};
  EXPECT_TRUE(allClose(runReference(c).at(0), arr<float>({1, 2, 1}, {0, -3.0f / 25})));
  EXPECT_EQ(inferTypes(c).at(0).info.shape(), (Shape{1, 2, 1}));
  c.inputs[0] = arr<float>({1, 1, 2}, {1, 1});
  EXPECT_THROW(runReference(c), Error);
}

}  // namespace
}  // namespace graft::testing
