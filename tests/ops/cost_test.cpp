// The per-op cost estimates (OpDef::cost, ops/cost.hpp) that pipeline-stage balancing reads:
// the ops that carry their own estimate against the arithmetic of their shapes.
#include <gtest/gtest.h>

#include "op_test_util.hpp"
#include "ops/cost.hpp"
#include "passes/pass.hpp"
#include "passes/pipeline_stages.hpp"

namespace graft::testing {
namespace {

// The estimate for c's node, after shape inference (as when stages are assigned).
double flopsOf(const OpCase& c, double* outputElements = nullptr) {
  auto g = singleNodeGraph(c);
  passes::PassContext ctx;
  passes::runPipeline(*g, {"infer-shapes"}, ctx);
  const ir::Node& n = *g->nodes()[0];
  if (outputElements) *outputElements = ops::cost::outputElements(n);
  double f = ops::estimateFlops(n);
  EXPECT_EQ(passes::estimateCost(n).flops, f) << "estimateCost reads the op's estimate";
  return f;
}

NDArray f32(Shape s) { return randomArray(DataType::Float, std::move(s), 1); }
NDArray u8(Shape s) { return NDArray(DataType::UInt8, std::move(s)); }

TEST(OpCost, OpsWithoutAnEstimateCountOnePerOutputElement) {
  EXPECT_EQ(flopsOf({"Relu", {f32({2, 3})}}), 6);
  EXPECT_EQ(flopsOf({"Add", {f32({4, 5}), f32({5})}}), 20);
}

TEST(OpCost, MatMulGemmAndEinsumCountMultiplyAdds) {
  EXPECT_EQ(flopsOf({"MatMul", {f32({4, 5}), f32({5, 3})}}), 2 * 4 * 3 * 5);
  EXPECT_EQ(flopsOf({"Gemm", {f32({5, 4}), f32({5, 3})}, attrs({{"transA", int64_t{1}}})}), 2 * 4 * 3 * 5);
  // Einsum: one multiply and one add per point of the loop space (i, k, j).
  EXPECT_EQ(flopsOf({"Einsum", {f32({4, 5}), f32({5, 3})}, attrs({{"equation", std::string("ij,jk->ik")}})}),
            2 * 4 * 3 * 5);
  EXPECT_EQ(flopsOf({"Einsum", {f32({4, 5})}, attrs({{"equation", std::string("ij->")}})}), 20);
}

TEST(OpCost, ConvolutionsCountOneFilterPerOutputElement) {
  // Y [1, 3, 3, 3], a filter of 2 * 3 * 3.
  EXPECT_EQ(flopsOf({"Conv", {f32({1, 2, 5, 5}), f32({3, 2, 3, 3})}}), 2 * 27 * 18);
  OpCase q{"QLinearConv",
           {u8({1, 2, 5, 5}), scalar<float>(0.5f), scalar<uint8_t>(0), u8({3, 2, 3, 3}), scalar<float>(0.5f),
            scalar<uint8_t>(0), scalar<float>(1.f), scalar<uint8_t>(0)}};
  EXPECT_EQ(flopsOf(q), 2 * 27 * 18);
  OpCase qm{"QLinearMatMul",
            {u8({4, 5}), scalar<float>(0.5f), scalar<uint8_t>(0), u8({5, 3}), scalar<float>(0.5f), scalar<uint8_t>(0),
             scalar<float>(1.f), scalar<uint8_t>(0)}};
  EXPECT_EQ(flopsOf(qm), 2 * 4 * 3 * 5);
}

TEST(OpCost, RecurrencesAndTheirGradients) {
  const int64_t T = 5, N = 3, I = 4, H = 6;
  ir::Attributes a = attrs({{"hidden_size", H}});
  const double products = 2.0 * T * N * (4 * H * I + 4 * H * H);  // LSTM: 4 gates of W and R
  double outs = 0;
  // (flopsOf fills outs: call it before reading outs, not in the same expression.)
  double f = flopsOf({"LSTM", {f32({T, N, I}), f32({1, 4 * H, I}), f32({1, 4 * H, H})}, a, 3}, &outs);
  EXPECT_GT(outs, 0);
  EXPECT_EQ(f, products + 8 * outs);
  // LSTMGrad (dY, dY_h, dY_c, X, W, R): twice the forward's products.
  OpCase g{"LSTMGrad",
           {f32({T, 1, N, H}), f32({1, N, H}), f32({1, N, H}), f32({T, N, I}), f32({1, 4 * H, I}), f32({1, 4 * H, H})},
           a,
           7,
           "ai.graft"};
  double fg = flopsOf(g, &outs);
  EXPECT_EQ(fg, 2 * (products + 8 * outs));
}

TEST(OpCost, BatchNormalizationGradCountsItsPassesOverX) {
  OpCase c{"BatchNormalizationGrad",
           {f32({2, 3, 4}), f32({2, 3, 4}), f32({3}), f32({3}), f32({3})},
           attrs({{"epsilon", 1e-5f}}),
           3,
           "ai.graft"};
  EXPECT_EQ(flopsOf(c), 6 * 24);
}

}  // namespace
}  // namespace graft::testing
