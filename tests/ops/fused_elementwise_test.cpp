// Tests of src/ops/fused_elementwise.cpp: ai.graft::FusedElementwise (programs checked against the same
// arithmetic written out here) and ai.graft::GeluErf.
#include <cmath>

#include "op_test_util.hpp"
#include "ops/fused_program.hpp"

namespace graft::testing {
namespace {

using ops::fused::Code;
using ops::fused::Instr;

ir::Attributes programAttrs(DataType to, const std::vector<Instr>& instrs, std::vector<int32_t> outputs) {
  ops::fused::Program p;
  p.instrs = instrs;
  p.outputs = std::move(outputs);
  p.dtype = to;
  ir::Attributes a;
  p.toAttributes(a);
  return a;
}

std::vector<NDArray> runFused(std::vector<NDArray> in, ir::Attributes a, int nout = 1) {
  return runReference(OpCase{"FusedElementwise", std::move(in), std::move(a), nout, "ai.graft"});
}

TEST(Graft_FusedElementwise, ChainWithBroadcastAndTwoOutputs) {
  // r3 = r0 * r1; r4 = r3 + r2; r5 = relu(r4); outputs r5 and r3.
  auto a = programAttrs(DataType::Float, {{Code::Mul, 0, 1}, {Code::Add, 3, 2}, {Code::Relu, 4}}, {5, 3});
  auto out = runFused({arr<float>({2, 3}, {1, -2, 3, -4, 5, -6}), arr<float>({3}, {2, 3, 4}), scalar<float>(1)}, a, 2);
  EXPECT_TRUE(allClose(out[0], arr<float>({2, 3}, {3, 0, 13, 0, 16, 0})));
  EXPECT_TRUE(allClose(out[1], arr<float>({2, 3}, {2, -6, 12, -8, 15, -24})));
}

TEST(Graft_FusedElementwise, ConstantsPredicatesAndWhere) {
  // where(x > 0.5 or mask, exp(x), -x) with a BOOL mask input.
  auto a = programAttrs(DataType::Double,
                        {{Code::Const, -1, -1, -1, 0.5f},
                         {Code::Greater, 0, 2},
                         {Code::Or, 3, 1},
                         {Code::Exp, 0},
                         {Code::Neg, 0},
                         {Code::Where, 4, 5, 6}},
                        {7});
  auto out = runFused({arr<double>({4}, {0.1, 0.7, -1, 2}), arr<bool>({4}, {true, false, false, false})}, a);
  EXPECT_TRUE(allClose(out[0], arr<double>({4}, {std::exp(0.1), std::exp(0.7), 1, std::exp(2.0)}), 1e-15));
}

TEST(Graft_FusedElementwise, HalfComputesInFloat) {
  auto a = programAttrs(DataType::Float16, {{Code::Square, 0}, {Code::Sub, 1, 0}}, {2});
  auto out = runFused({arr<Half>({3}, {Half(1.5f), Half(-2), Half(0.25f)})}, a);
  EXPECT_TRUE(allClose(out[0], arr<Half>({3}, {Half(0.75f), Half(6), Half(-0.1875f)})));
}

TEST(Graft_FusedElementwise, InfersTheBroadcastShape) {
  auto a = programAttrs(DataType::Float, {{Code::Add, 0, 1}}, {2});
  auto types = inferTypes(
      OpCase{"FusedElementwise", {arr<float>({3, 1}, {1, 2, 3}), arr<float>({4}, {1, 2, 3, 4})}, a, 1, "ai.graft"});
  ASSERT_EQ(types.size(), 1u);
  EXPECT_EQ(types[0].info, TensorInfo(DataType::Float, Shape{3, 4}));
}

TEST(Graft_FusedElementwise, RejectsMalformedPrograms) {
  // An operand that is not computed yet.
  auto bad = programAttrs(DataType::Float, {{Code::Add, 0, 2}}, {1});
  EXPECT_THROW(runFused({arr<float>({1}, {1})}, bad), Error);
  // An unknown code.
  auto unknown = programAttrs(DataType::Float, {{Code::Neg, 0}}, {1});
  unknown.set("codes", std::vector<int64_t>{999});
  EXPECT_THROW(runFused({arr<float>({1}, {1})}, unknown), Error);
  // An output register out of range.
  auto out = programAttrs(DataType::Float, {{Code::Neg, 0}}, {5});
  EXPECT_THROW(runFused({arr<float>({1}, {1})}, out), Error);
  // Integer outputs.
  auto ints = programAttrs(DataType::Int32, {{Code::Neg, 0}}, {1});
  EXPECT_THROW(runFused({arr<int32_t>({1}, {1})}, ints), Error);
  // Inputs of another type than the program's.
  auto f = programAttrs(DataType::Float, {{Code::Neg, 0}}, {1});
  EXPECT_THROW(runFused({arr<double>({1}, {1})}, f), Error);
  // Shapes that do not broadcast.
  auto two = programAttrs(DataType::Float, {{Code::Add, 0, 1}}, {2});
  EXPECT_THROW(runFused({arr<float>({2}, {1, 2}), arr<float>({3}, {1, 2, 3})}, two), Error);
}

TEST(Graft_GeluErf, MatchesTheFormula) {
  std::vector<double> xs = {-6, -3, -1, -0.5, 0, 0.3, 1, 2.5, 7};
  NDArray x = arr<double>({9}, xs);
  auto out = runReference(OpCase{"GeluErf", {x}, {}, 1, "ai.graft"});
  std::vector<double> want;
  for (double v : xs) want.push_back(0.5 * v * (1 + std::erf(v / std::sqrt(2.0))));
  EXPECT_TRUE(allClose(out[0], arr<double>({9}, want), 1e-14, 1e-300));
  // Known values: GELU(1) = 0.8413447460685429, GELU(-1) = -0.15865525393145707.
  EXPECT_NEAR(out[0].data<double>()[6], 0.8413447460685429, 1e-15);
  EXPECT_NEAR(out[0].data<double>()[2], -0.15865525393145707, 1e-15);
}

// Its gradient (training sessions fuse GELU into it before autodiff): Phi(x) + x phi(x), against
// finite differences over both tails and the middle.
TEST(Graft_GeluErf, Gradient) {
  EXPECT_TRUE(gradCheck(OpCase{"GeluErf", {randomArray(DataType::Double, {4, 5}, 7, -5, 5)}, {}, 1, "ai.graft"}, {0}));
  EXPECT_TRUE(gradCheck(OpCase{"GeluErf", {arr<double>({5}, {-8, -2.5, 0, 0.7, 6})}, {}, 1, "ai.graft"}, {0}));
}

// GeluErfGrad(x, GeluErf(x)) = Phi(x) + x phi(x): known values, and the formula over both tails,
// zero and tiny x (where GeluErf(x) is denormal and Phi is taken as 1/2).
TEST(Graft_GeluErfGrad, IsGelusDerivative) {
  std::vector<double> xs = {-9, -4, -1, -1e-3, -1e-35, 0, 1e-35, 1e-3, 0.5, 1, 3, 9};
  NDArray x = arr<double>({12}, xs);
  NDArray y = runReference(OpCase{"GeluErf", {x}, {}, 1, "ai.graft"}).at(0);
  NDArray d = runReference(OpCase{"GeluErfGrad", {x, y}, {}, 1, "ai.graft"}).at(0);
  std::vector<double> want;
  for (double v : xs)
    want.push_back(0.5 * (1 + std::erf(v / std::sqrt(2.0))) + v * std::exp(-0.5 * v * v) / 2.5066282746310002);
  EXPECT_TRUE(allClose(d, arr<double>({12}, want), 1e-12, 1e-300));
  EXPECT_NEAR(d.data<double>()[9], 1.0833154705876864, 1e-14);   // x = 1
  EXPECT_NEAR(d.data<double>()[2], -0.0833154705876864, 1e-14);  // x = -1
  EXPECT_EQ(d.data<double>()[5], 0.5);
  EXPECT_EQ(inferTypes(OpCase{"GeluErfGrad", {x, y}, {}, 1, "ai.graft"})[0].info,
            TensorInfo(DataType::Double, Shape{12}));
  EXPECT_THROW(inferTypes(OpCase{"GeluErfGrad", {x, arr<float>({12}, std::vector<float>(12, 0.f))}, {}, 1, "ai.graft"}),
               Error);
}

TEST(Graft_GeluErf, KeepsTypeAndShape) {
  auto types = inferTypes(OpCase{"GeluErf", {arr<float>({2, 3}, {1, 2, 3, 4, 5, 6})}, {}, 1, "ai.graft"});
  EXPECT_EQ(types[0].info, TensorInfo(DataType::Float, Shape{2, 3}));
  EXPECT_THROW(runReference(OpCase{"GeluErf", {arr<int32_t>({1}, {1})}, {}, 1, "ai.graft"}), Error);
}

}  // namespace
}  // namespace graft::testing
