// Gradients (VJPs) of the elementwise, activation, matmul, shape and loss ops, checked against
// central finite differences in float64.
#include <cmath>

#include "op_test_util.hpp"

namespace graft::testing {
namespace {

NDArray rnd(Shape s, uint64_t seed, double lo = -1.0, double hi = 1.0) {
  return randomArray(DataType::Double, std::move(s), seed, lo, hi);
}

void unary(const std::string& op, double lo = -1.0, double hi = 1.0, ir::Attributes a = {},
           const std::string& domain = "") {
  OpCase c{op, {rnd({2, 3}, 7, lo, hi)}, std::move(a), 1, domain};
  EXPECT_TRUE(gradCheck(c, {0})) << op;
}

void binary(const std::string& op, Shape sa, Shape sb, double lo = -1.0, double hi = 1.0) {
  OpCase c{op, {rnd(sa, 1, lo, hi), rnd(sb, 2, lo, hi)}};
  EXPECT_TRUE(gradCheck(c, {0, 1})) << op << " " << shapeToString(sa) << " " << shapeToString(sb);
}

TEST(Add, Gradient) {
  binary("Add", {2, 3}, {2, 3});
  binary("Add", {2, 3}, {3});
  binary("Add", {2, 1, 4}, {3, 1});
}
TEST(Sub, Gradient) { binary("Sub", {2, 3}, {2, 1}); }
TEST(Mul, Gradient) { binary("Mul", {4, 3}, {3}); }
TEST(Div, Gradient) { binary("Div", {2, 3}, {2, 3}, 0.5, 2.0); }
TEST(Pow, Gradient) { binary("Pow", {2, 3}, {3}, 0.5, 2.0); }
TEST(Mod, GradientToTheDividend) {
  // Away from the jumps (a in [0.5, 2], b = 2.5, well inside one period) d/da = 1, for both modes.
  for (int64_t fmod : {0, 1})
    EXPECT_TRUE(gradCheck({"Mod", {rnd({2, 3}, 4, 0.5, 2.0), arr<double>({1}, {2.5})}, attrs({{"fmod", fmod}})}, {0}))
        << "fmod=" << fmod;
}
TEST(Pow, GradientWhereTheFormulaIsUndefined) {
  // a^0 is the constant 1: d/da is 0 even at a = 0 and a = NaN (the formula gives 0 * inf, NaN).
  // 0^b for b >= 0 is flat on b's side: d/db is 0 (the formula gives 0 * -inf).
  double nan = std::nan("");
  auto g = vjpOf({"Pow", {arr<double>({4}, {0, nan, 0, 2}), arr<double>({4}, {0, 0, 2, 3})}}, {0, 1},
                 {arr<double>({4}, {1, 1, 1, 1})});
  EXPECT_TRUE(allClose(g[0], arr<double>({4}, {0, 0, 0, 12})));
  EXPECT_TRUE(allClose(g[1], arr<double>({4}, {0, nan, 0, 8 * std::log(2.0)})));
}
TEST(Sum, Gradient) { EXPECT_TRUE(gradCheck({"Sum", {rnd({2, 3}, 1), rnd({3}, 2), rnd({2, 1}, 3)}}, {0, 1, 2})); }
TEST(Mean, Gradient) { EXPECT_TRUE(gradCheck({"Mean", {rnd({2, 3}, 1), rnd({3}, 2)}}, {0, 1})); }
TEST(Max, Gradient) { EXPECT_TRUE(gradCheck({"Max", {rnd({2, 3}, 1), rnd({2, 3}, 2)}}, {0, 1})); }
TEST(Min, Gradient) { EXPECT_TRUE(gradCheck({"Min", {rnd({2, 3}, 1), rnd({3}, 2)}}, {0, 1})); }
TEST(Where, Gradient) {
  EXPECT_TRUE(gradCheck({"Where", {arr<bool>({3}, {1, 0, 1}), rnd({2, 3}, 1), rnd({3}, 2)}}, {1, 2}));
}

TEST(Neg, Gradient) { unary("Neg"); }
TEST(Abs, Gradient) { unary("Abs"); }
TEST(Exp, Gradient) { unary("Exp"); }
TEST(Log, Gradient) { unary("Log", 0.5, 2.0); }
TEST(Sqrt, Gradient) { unary("Sqrt", 0.5, 2.0); }
TEST(Reciprocal, Gradient) { unary("Reciprocal", 0.5, 2.0); }
TEST(Sin, Gradient) { unary("Sin"); }
TEST(Cos, Gradient) { unary("Cos"); }
TEST(Tan, Gradient) { unary("Tan"); }
TEST(Asin, Gradient) { unary("Asin", -0.5, 0.5); }
TEST(Acos, Gradient) { unary("Acos", -0.5, 0.5); }
TEST(Atan, Gradient) { unary("Atan"); }
TEST(Sinh, Gradient) { unary("Sinh"); }
TEST(Cosh, Gradient) { unary("Cosh"); }
TEST(Asinh, Gradient) { unary("Asinh"); }
TEST(Acosh, Gradient) { unary("Acosh", 1.5, 3.0); }
TEST(Atanh, Gradient) { unary("Atanh", -0.5, 0.5); }
TEST(Erf, Gradient) { unary("Erf"); }
TEST(Floor, GradientIsZero) { unary("Floor", 0.1, 0.9); }
TEST(Ceil, GradientIsZero) { unary("Ceil", 0.1, 0.9); }
TEST(Round, GradientIsZero) { unary("Round", 0.1, 0.4); }  // away from the steps at +-0.5
TEST(Sign, GradientIsZero) { unary("Sign", 0.1, 0.9); }

TEST(Relu, Gradient) { unary("Relu"); }
TEST(Sigmoid, Gradient) { unary("Sigmoid", -3, 3); }
TEST(Tanh, Gradient) { unary("Tanh", -2, 2); }
TEST(LeakyRelu, Gradient) { unary("LeakyRelu", -1, 1, attrs({{"alpha", 0.2f}})); }
TEST(Elu, Gradient) { unary("Elu", -2, 2, attrs({{"alpha", 0.7f}})); }
TEST(Selu, Gradient) { unary("Selu", -2, 2); }
TEST(Celu, Gradient) { unary("Celu", -2, 2, attrs({{"alpha", 1.5f}})); }
TEST(HardSigmoid, Gradient) { unary("HardSigmoid", -4, 4); }
TEST(HardSwish, Gradient) { unary("HardSwish", -5, 5); }
TEST(Softplus, Gradient) { unary("Softplus", -3, 3); }
TEST(Softsign, Gradient) { unary("Softsign", -3, 3); }
TEST(ThresholdedRelu, Gradient) { unary("ThresholdedRelu", 0, 2, attrs({{"alpha", 1.0f}})); }
TEST(Graphcore_Gelu, Gradient) { unary("Gelu", -3, 3, {}, "ai.graphcore"); }
TEST(PRelu, Gradient) { EXPECT_TRUE(gradCheck({"PRelu", {rnd({2, 3}, 1), rnd({3}, 2, 0.1, 0.5)}}, {0, 1})); }
TEST(Clip, Gradient) {
  EXPECT_TRUE(gradCheck({"Clip", {rnd({2, 4}, 1, -2, 2), arr<double>({}, {-0.5}), arr<double>({}, {0.7})}}, {0}));
}

TEST(MatMul, Gradient) {
  EXPECT_TRUE(gradCheck({"MatMul", {rnd({2, 3}, 1), rnd({3, 4}, 2)}}, {0, 1}));
  EXPECT_TRUE(gradCheck({"MatMul", {rnd({2, 2, 3}, 1), rnd({3, 4}, 2)}}, {0, 1}));     // broadcast batch
  EXPECT_TRUE(gradCheck({"MatMul", {rnd({2, 3, 2, 3}, 1), rnd({3, 4}, 2)}}, {0, 1}));  // dB: one Gemm over the batches
  EXPECT_TRUE(gradCheck({"MatMul", {rnd({1, 3, 2, 3}, 1), rnd({2, 1, 3, 4}, 2)}}, {0, 1}));  // both batched
  EXPECT_TRUE(gradCheck({"MatMul", {rnd({3}, 1), rnd({2, 3, 4}, 2)}}, {0, 1}));              // vector @ batch
  EXPECT_TRUE(gradCheck({"MatMul", {rnd({2, 3}, 1), rnd({3}, 2)}}, {0, 1}));                 // matrix @ vector
  EXPECT_TRUE(gradCheck({"MatMul", {rnd({3}, 1), rnd({3}, 2)}}, {0, 1}));                    // dot
}
TEST(Gemm, Gradient) {
  for (int64_t ta : {0, 1})
    for (int64_t tb : {0, 1}) {
      NDArray a = ta ? rnd({3, 2}, 1) : rnd({2, 3}, 1);
      NDArray b = tb ? rnd({4, 3}, 2) : rnd({3, 4}, 2);
      OpCase c{"Gemm", {a, b, rnd({4}, 3)}, attrs({{"transA", ta}, {"transB", tb}, {"alpha", 0.5f}, {"beta", 2.0f}})};
      EXPECT_TRUE(gradCheck(c, {0, 1, 2})) << "transA=" << ta << " transB=" << tb;
    }
}

TEST(Reshape, Gradient) { EXPECT_TRUE(gradCheck({"Reshape", {rnd({2, 3}, 1), arr<int64_t>({2}, {3, 2})}}, {0})); }
TEST(Flatten, Gradient) {
  EXPECT_TRUE(gradCheck({"Flatten", {rnd({2, 3, 2}, 1)}, attrs({{"axis", int64_t{2}}})}, {0}));
}
TEST(Squeeze, Gradient) { EXPECT_TRUE(gradCheck({"Squeeze", {rnd({2, 1, 3}, 1), arr<int64_t>({1}, {1})}}, {0})); }
TEST(Unsqueeze, Gradient) { EXPECT_TRUE(gradCheck({"Unsqueeze", {rnd({2, 3}, 1), arr<int64_t>({1}, {0})}}, {0})); }
TEST(Transpose, Gradient) {
  EXPECT_TRUE(gradCheck({"Transpose", {rnd({2, 3, 4}, 1)}, attrs({{"perm", std::vector<int64_t>{2, 0, 1}}})}, {0}));
}
TEST(Identity, Gradient) { EXPECT_TRUE(gradCheck({"Identity", {rnd({2, 3}, 1)}}, {0})); }

TEST(Graphcore_L1, Gradient) {
  for (const char* red : {"Sum", "Mean", "None"})
    EXPECT_TRUE(gradCheck(
        {"L1", {rnd({2, 3}, 1)}, attrs({{"lambda", 0.5f}, {"reduction", std::string(red)}}), 1, "ai.graphcore"}, {0}))
        << red;
}
TEST(Graphcore_IdentityLoss, Gradient) {
  for (const char* red : {"Sum", "Mean", "None"})
    EXPECT_TRUE(
        gradCheck({"IdentityLoss", {rnd({2, 3}, 1)}, attrs({{"reduction", std::string(red)}}), 1, "ai.graphcore"}, {0}))
        << red;
}
TEST(Graphcore_Nll, Gradient) {
  NDArray probs = rnd({4, 3}, 1, 0.1, 1.0);
  NDArray labels = arr<int32_t>({4}, {0, 2, 1, 2});
  for (const char* red : {"Sum", "Mean", "None"}) {
    EXPECT_TRUE(gradCheck({"Nll", {probs, labels}, attrs({{"reduction", std::string(red)}}), 1, "ai.graphcore"}, {0}))
        << red;
    EXPECT_TRUE(gradCheck({"Nll",
                           {probs, labels},
                           attrs({{"reduction", std::string(red)}, {"ignoreIndex", int64_t{2}}}),
                           1,
                           "ai.graphcore"},
                          {0}))
        << red << " with ignoreIndex";
  }
}
TEST(Graphcore_Nll, ValuesAndErrors) {
  auto out = runReference({"Nll",
                           {arr<float>({2, 2}, {0.25f, 0.75f, 0.5f, 0.5f}), arr<int64_t>({2}, {1, 0})},
                           attrs({{"reduction", std::string("Mean")}}),
                           1,
                           "ai.graphcore"});
  EXPECT_TRUE(allClose(out[0], arr<float>({}, {static_cast<float>(-(std::log(0.75) + std::log(0.5)) / 2)})));
  EXPECT_THROW(runReference({"Nll",
                             {arr<float>({1, 2}, {0.5f, 0.5f}), arr<int64_t>({1}, {5})},
                             attrs({{"reduction", std::string("Sum")}}),
                             1,
                             "ai.graphcore"}),
               Error);
}
TEST(Graft_MseLoss, Gradient) {
  for (const char* red : {"Sum", "Mean"})
    EXPECT_TRUE(gradCheck(
        {"MseLoss", {rnd({2, 3}, 1), rnd({2, 3}, 2)}, attrs({{"reduction", std::string(red)}}), 1, "ai.graft"}, {0, 1}))
        << red;
}

}  // namespace
}  // namespace graft::testing
