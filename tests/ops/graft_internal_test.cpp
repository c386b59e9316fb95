// Tests of graft's internal ops (domain ai.graft): gradient helpers, accumulation and the
// optimizer updates, each against the update equations computed here by hand.
#include <cmath>

#include "op_test_util.hpp"

namespace graft::testing {
namespace {

OpCase graftOp(const std::string& type, std::vector<NDArray> in, ir::Attributes a = {}, int outputs = 1) {
  return OpCase{type, std::move(in), std::move(a), outputs, "ai.graft"};
}
NDArray f(float v) { return scalar<float>(v); }

TEST(Graft_UnbroadcastTo, SumsBroadcastAxes) {
  auto g = arr<float>({2, 3}, {1, 2, 3, 4, 5, 6});
  EXPECT_TRUE(allClose(runReference(graftOp("UnbroadcastTo", {g, NDArray(DataType::Float, {3})}))[0], arr<float>({3}, {5, 7, 9})));
  EXPECT_TRUE(allClose(runReference(graftOp("UnbroadcastTo", {g, NDArray(DataType::Float, {2, 1})}))[0], arr<float>({2, 1}, {6, 15})));
  EXPECT_TRUE(allClose(runReference(graftOp("UnbroadcastTo", {g, NDArray(DataType::Float, {})}))[0], arr<float>({}, {21})));
  EXPECT_THROW(runReference(graftOp("UnbroadcastTo", {g, NDArray(DataType::Float, {4})})), Error);
}

TEST(Graft_ZerosLike, Zeros) {
  EXPECT_TRUE(allClose(runReference(graftOp("ZerosLike", {arr<double>({2}, {3, 4})}))[0], arr<double>({2}, {0, 0})));
}

TEST(Graft_Accumulate, AddsInPlace) {
  NDArray acc = arr<float>({2}, {1, 2});
  runReference(graftOp("Accumulate", {acc, arr<float>({2}, {10, 20})}, {}, 0));
  EXPECT_TRUE(allClose(acc, arr<float>({2}, {11, 22})));
  EXPECT_THROW(runReference(graftOp("Accumulate", {acc, arr<float>({3}, {1, 2, 3})}, {}, 0)), Error);
  ir::Attributes overwrite;
  overwrite.set("overwrite", int64_t{1});
  runReference(graftOp("Accumulate", {acc, arr<float>({2}, {5, 7})}, overwrite, 0));
  EXPECT_TRUE(allClose(acc, arr<float>({2}, {5, 7})));
}

TEST(Graft_ZeroFill, ZeroesInPlace) {
  NDArray x = arr<float>({2}, {1, 2});
  runReference(graftOp("ZeroFill", {x}, {}, 0));
  EXPECT_TRUE(allClose(x, arr<float>({2}, {0, 0})));
}

TEST(Graft_SGDUpdate, PlainMomentumAndNesterov) {
  // w -= lr*(1-dm)*(g/ls + wd*w) without momentum.
  NDArray w = arr<float>({2}, {1, -1});
  runReference(graftOp("SGDUpdate", {w, arr<float>({2}, {0.5f, 2}), f(0.1f), f(0.01f), f(0), f(0), f(1), f(2)}, {}, 0));
  EXPECT_TRUE(allClose(w, arr<float>({2}, {1 - 0.1f * (0.25f + 0.01f), -1 - 0.1f * (1 - 0.01f)})));
  for (int64_t nesterov : {0, 1}) {
    NDArray w2 = arr<float>({1}, {1}), v = arr<float>({1}, {0.5f});
    runReference(graftOp("SGDUpdate", {w2, arr<float>({1}, {2}), f(0.1f), f(0), f(0.9f), f(0), f(1), f(1), v},
                         attrs({{"nesterov", nesterov}}), 0));
    double vNew = 0.9 * 0.5 + 2.0;  // v = mm*v + g
    double wNew = nesterov ? 1 - 0.1 * (2.0 + 0.9 * vNew) : 1 - 0.1 * vNew;
    EXPECT_TRUE(allClose(v, arr<float>({1}, {static_cast<float>(vNew)})));
    EXPECT_TRUE(allClose(w2, arr<float>({1}, {static_cast<float>(wNew)}))) << "nesterov=" << nesterov;
  }
}

// SGDOuterUpdate's gradient is a (x) b: g[i][j] = a[i] * b[j], for a [I, J] weight.
TEST(Graft_SGDOuterUpdate, GradientIsTheOuterProduct) {
  for (int64_t momentum : {0, 1}) {
    NDArray w = arr<float>({2, 3}, {1, 2, 3, -1, -2, -3}), v = arr<float>({2, 3}, {0.5f, 0, 0, 0, 0, -0.5f});
    std::vector<NDArray> in{w,
                            arr<float>({2, 1}, {2, -1}),
                            arr<float>({1, 3}, {0.5f, 1, 4}),
                            f(0.1f),
                            f(0.01f),
                            f(momentum ? 0.9f : 0.f),
                            f(0),
                            f(1),
                            f(2)};
    if (momentum) in.push_back(v);
    runReference(graftOp("SGDOuterUpdate", in, {}, 0));
    const float a[2] = {2, -1}, b[3] = {0.5f, 1, 4}, w0[6] = {1, 2, 3, -1, -2, -3}, v0[6] = {0.5f, 0, 0, 0, 0, -0.5f};
    for (int i = 0; i < 2; ++i)
      for (int j = 0; j < 3; ++j) {
        double s = a[i] * b[j] / 2.0 + 0.01 * w0[i * 3 + j];  // g / ls + wd w
        double vn = momentum ? 0.9 * v0[i * 3 + j] + s : 0.0;
        double want = momentum ? w0[i * 3 + j] - 0.1 * vn : w0[i * 3 + j] - 0.1 * s;
        EXPECT_NEAR(w.data<float>()[i * 3 + j], want, 1e-6) << "momentum " << momentum << " at " << i << ", " << j;
        if (momentum) {
          EXPECT_NEAR(v.data<float>()[i * 3 + j], vn, 1e-6);
        }
      }
  }
  // a and b must have I and J elements.
  NDArray w = arr<float>({2, 3}, {1, 2, 3, 4, 5, 6});
  EXPECT_THROW(
      runReference(graftOp(
          "SGDOuterUpdate",
          {w, arr<float>({3}, {1, 2, 3}), arr<float>({3}, {1, 2, 3}), f(0.1f), f(0), f(0), f(0), f(1), f(1)}, {}, 0)),
      Error);
}

TEST(Graft_AdamUpdate, AdamAndLambFirstStep) {
  for (int64_t mode : {0, 3}) {  // Adam, Lamb
    NDArray w = arr<float>({2}, {3, 4}), m = arr<float>({2}, {0, 0}), v = arr<float>({2}, {0, 0}), t = f(0);
    NDArray g = arr<float>({2}, {1, -2});
    runReference(graftOp("AdamUpdate", {w, g, m, v, t, f(0.1f), f(0), f(0.9f), f(0.999f), f(1e-8f), f(1), f(10)},
                         attrs({{"mode", mode}}), 0));
    // First step with bias correction: mc = g, vc = g^2, x = sign(g) (up to eps).
    double x0 = 1.0 / (1.0 + 1e-8), x1 = -1.0 / (1.0 + 1e-8);
    double ratio = mode == 3 ? std::min(5.0, 10.0) / std::sqrt(x0 * x0 + x1 * x1) : 1.0;
    EXPECT_TRUE(allClose(w, arr<float>({2}, {static_cast<float>(3 - ratio * 0.1 * x0), static_cast<float>(4 - ratio * 0.1 * x1)}), 1e-5))
        << "mode " << mode;
    EXPECT_EQ(t.data<float>()[0], 1.0f);
    EXPECT_TRUE(allClose(m, arr<float>({2}, {0.1f, -0.2f})));
  }
}

TEST(Graft_AdaptiveUpdate, RmsPropAndAdaGrad) {
  // RMSProp (mode 1): v1 = a*v1 + (1-a)*g^2; w -= lr * g / (sqrt(v1) + eps).
  NDArray w = arr<float>({1}, {1}), v1 = arr<float>({1}, {0});
  runReference(graftOp("AdaptiveUpdate", {w, arr<float>({1}, {2}), v1, NDArray(), NDArray(), f(0.01f), f(0), f(0.9f), f(0), f(1e-6f), f(1)},
                       attrs({{"mode", int64_t{1}}}), 0));
  double v = 0.1 * 4;
  EXPECT_TRUE(allClose(w, arr<float>({1}, {static_cast<float>(1 - 0.01 * 2 / (std::sqrt(v) + 1e-6))})));
  // AdaGrad (mode 0): v1 += g^2.
  NDArray w2 = arr<float>({1}, {1}), a1 = arr<float>({1}, {1});
  runReference(graftOp("AdaptiveUpdate", {w2, arr<float>({1}, {2}), a1, NDArray(), NDArray(), f(0.1f), f(0), f(0.9f), f(0), f(0), f(1)},
                       attrs({{"mode", int64_t{0}}}), 0));
  EXPECT_TRUE(allClose(a1, arr<float>({1}, {5})));
  EXPECT_TRUE(allClose(w2, arr<float>({1}, {static_cast<float>(1 - 0.1 * 2 / std::sqrt(5.0))})));
}

TEST(Graft_GlobalNormScale, ClipsToMaxNorm) {
  // ||(3, 4)|| = 5 (after dividing by loss scaling 2: grads 6, 8): scale = 1 / (5 + 1e-6).
  auto out = runReference(graftOp("GlobalNormScale", {f(2), f(1), arr<float>({1}, {6}), arr<float>({1}, {8})}));
  EXPECT_NEAR(out[0].data<float>()[0], 1.0 / (5.0 + 1e-6), 1e-7);
  out = runReference(graftOp("GlobalNormScale", {f(1), f(100), arr<float>({1}, {6}), arr<float>({1}, {8})}));
  EXPECT_EQ(out[0].data<float>()[0], 1.0f);
}

TEST(Graft_NllGrad, MatchesGradientOfNll) {
  auto out = runReference(graftOp("NllGrad", {arr<float>({2, 2}, {0.25f, 0.75f, 0.5f, 0.5f}), arr<int64_t>({2}, {1, 0}), f(1)},
                                  attrs({{"reduction", std::string("Mean")}})));
  EXPECT_TRUE(allClose(out[0], arr<float>({2, 2}, {0, -1 / (2 * 0.75f), -1 / (2 * 0.5f), 0})));
}

TEST(Graft_MseLoss, Values) {
  auto out = runReference(graftOp("MseLoss", {arr<float>({2}, {1, 3}), arr<float>({2}, {0, 1})}, attrs({{"reduction", std::string("Mean")}})));
  EXPECT_TRUE(allClose(out[0], arr<float>({}, {2.5f})));
}

}  // namespace
}  // namespace graft::testing
