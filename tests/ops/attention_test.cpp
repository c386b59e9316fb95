// Tests of src/ops/attention.cpp (RotaryEmbedding, Attention). Expected values are worked out by
// hand in the comments, or from the definitions written out here in double.
#include <cmath>

#include "op_case_util.hpp"
#include "op_test_util.hpp"

namespace graft::testing {
namespace {

// ---- RotaryEmbedding -----------------------------------------------------------------------------

// One head vector (1, 2, 3, 4); pair 0 turns by 90 degrees (cos 0, sin 1), pair 1 by 0.
TEST(RotaryEmbedding, HalvesAndInterleavedPairs) {
  NDArray x = arr<float>({1, 1, 1, 4}, {1, 2, 3, 4});
  NDArray cosC = arr<float>({1, 1, 2}, {0, 1}), sinC = arr<float>({1, 1, 2}, {1, 0});
  // Halves: pairs (x0, x2) = (1, 3) -> (-3, 1) and (x1, x3) unchanged.
  EXPECT_TRUE(allClose(runOutputs("RotaryEmbedding", {x, cosC, sinC}).at(0), arr<float>({1, 1, 1, 4}, {-3, 2, 1, 4})));
  // Interleaved: pairs (x0, x1) = (1, 2) -> (-2, 1) and (x2, x3) unchanged.
  EXPECT_TRUE(allClose(runOutputs("RotaryEmbedding", {x, cosC, sinC}, attrs({{"interleaved", int64_t{1}}})).at(0),
                       arr<float>({1, 1, 1, 4}, {-2, 1, 3, 4})));
}

TEST(RotaryEmbedding, PositionIdsPartialRotationAnd3D) {
  // Caches indexed by position: row 2 holds the 90-degree turn; rotary_embedding_dim 2 rotates only
  // (x0, x1) of each head. 3-D input [B=1, S=1, 2 heads * 4].
  NDArray x = arr<float>({1, 1, 8}, {1, 2, 3, 4, 5, 6, 7, 8});
  NDArray cosC = arr<float>({3, 1}, {1, 1, 0}), sinC = arr<float>({3, 1}, {0, 0, 1});
  auto y = runOutputs("RotaryEmbedding", {x, cosC, sinC, arr<int64_t>({1, 1}, {2})},
                      attrs({{"num_heads", int64_t{2}}, {"rotary_embedding_dim", int64_t{2}}}));
  EXPECT_TRUE(allClose(y.at(0), arr<float>({1, 1, 8}, {-2, 1, 3, 4, -6, 5, 7, 8})));
  EXPECT_THROW(
      runOutputs("RotaryEmbedding", {x, cosC, sinC, arr<int64_t>({1, 1}, {3})}, attrs({{"num_heads", int64_t{2}}})),
      Error);  // position 3 is past the cache (and the cache width is wrong)
  EXPECT_THROW(runOutputs("RotaryEmbedding", {x, cosC, sinC}), Error);  // 3-D needs num_heads
}

TEST(RotaryEmbedding, Gradient) {
  for (int64_t inter : {0, 1}) {
    OpCase c{"RotaryEmbedding",
             {randomArray(DataType::Double, {2, 2, 3, 4}, 1), randomArray(DataType::Double, {2, 3, 2}, 2),
              randomArray(DataType::Double, {2, 3, 2}, 3)},
             attrs({{"interleaved", inter}})};
    EXPECT_TRUE(gradCheck(c, {0})) << "interleaved=" << inter;
  }
}

// ---- Attention -----------------------------------------------------------------------------------

double sigmoid(double x) { return 1 / (1 + std::exp(-x)); }

TEST(Attention, SoftmaxOfScaledScores) {
  // q = (1, 0), keys (1, 0) and (0, 1): scores (1, 0) / sqrt(2); values 10 and 20.
  NDArray q = arr<float>({1, 1, 1, 2}, {1, 0}), k = arr<float>({1, 1, 2, 2}, {1, 0, 0, 1}),
          v = arr<float>({1, 1, 2, 1}, {10, 20});
  double p0 = sigmoid(1 / std::sqrt(2.0));
  auto r = runOutputs("Attention", {q, k, v}, {}, 4);
  EXPECT_TRUE(allClose(r.at(0), arr<float>({1, 1, 1, 1}, {static_cast<float>(10 * p0 + 20 * (1 - p0))})));
  EXPECT_TRUE(allClose(r.at(1), k));  // present_key without a past is K
  EXPECT_TRUE(allClose(r.at(3), arr<float>({1, 1, 1, 2}, {static_cast<float>(1 / std::sqrt(2.0)), 0})));
  // An explicit scale and the softmax weights as the fourth output.
  r = runOutputs("Attention", {q, k, v}, attrs({{"scale", 2.0f}, {"qk_matmul_output_mode", int64_t{3}}}), 4);
  EXPECT_TRUE(allClose(r.at(3),
                       arr<float>({1, 1, 1, 2}, {static_cast<float>(sigmoid(2)), static_cast<float>(1 - sigmoid(2))})));
}

TEST(Attention, CausalMasksAndFullyMaskedRows) {
  // Two queries, two keys: with is_causal query 0 sees only key 0.
  NDArray q = arr<float>({1, 1, 2, 1}, {1, 1}), k = arr<float>({1, 1, 2, 1}, {0, 0}),
          v = arr<float>({1, 1, 2, 1}, {10, 20});
  auto y = runOutputs("Attention", {q, k, v}, attrs({{"is_causal", int64_t{1}}})).at(0);
  EXPECT_TRUE(allClose(y, arr<float>({1, 1, 2, 1}, {10, 15})));
  // A boolean mask hiding key 0 from query 0 and every key from query 1: query 1 gives 0.
  NDArray m = arr<bool>({2, 2}, {false, true, false, false});
  y = runOutputs("Attention", {q, k, v, m}).at(0);
  EXPECT_TRUE(allClose(y, arr<float>({1, 1, 2, 1}, {20, 0})));
  // A float mask adds to the scores: log(3) on key 1 weighs it 3:1.
  NDArray fm = arr<float>({1, 2}, {0, static_cast<float>(std::log(3.0))});
  y = runOutputs("Attention", {q, k, v, fm}).at(0);
  EXPECT_TRUE(allClose(y, arr<float>({1, 1, 2, 1}, {17.5f, 17.5f})));
}

TEST(Attention, GroupedHeadsPastCacheAnd3D) {
  // Two query heads share one key/value head; the past cache adds a key in front.
  NDArray q = arr<float>({1, 2, 1, 1}, {0, 0}), k = arr<float>({1, 1, 1, 1}, {5}), v = arr<float>({1, 1, 1, 1}, {30});
  NDArray pk = arr<float>({1, 1, 1, 1}, {7}), pv = arr<float>({1, 1, 1, 1}, {10});
  auto r = runOutputs("Attention", {q, k, v, NDArray{}, pk, pv}, {}, 3);
  EXPECT_TRUE(allClose(r.at(0), arr<float>({1, 2, 1, 1}, {20, 20})));  // zero scores: the mean of 10 and 30
  EXPECT_TRUE(allClose(r.at(1), arr<float>({1, 1, 2, 1}, {7, 5})));
  EXPECT_TRUE(allClose(r.at(2), arr<float>({1, 1, 2, 1}, {10, 30})));
  // The same as 3-D inputs [B, S, heads * D].
  auto y =
      runOutputs("Attention", {arr<float>({1, 1, 2}, {0, 0}), arr<float>({1, 1, 1}, {5}), arr<float>({1, 1, 1}, {30})},
                 attrs({{"q_num_heads", int64_t{2}}, {"kv_num_heads", int64_t{1}}}))
          .at(0);
  EXPECT_TRUE(allClose(y, arr<float>({1, 1, 2}, {30, 30})));
  EXPECT_THROW(runOutputs("Attention", {q, k, v, NDArray{}, pk}), Error);  // past_key without past_value
}

NDArray rnd(Shape s, uint64_t seed) { return randomArray(DataType::Double, std::move(s), seed); }

TEST(Attention, GradientPlain4DAnd3D) {
  EXPECT_TRUE(gradCheck({"Attention", {rnd({2, 2, 3, 4}, 1), rnd({2, 2, 5, 4}, 2), rnd({2, 2, 5, 3}, 3)}}, {0, 1, 2}));
  OpCase c3{"Attention",
            {rnd({1, 3, 8}, 4), rnd({1, 4, 4}, 5), rnd({1, 4, 6}, 6)},
            attrs({{"q_num_heads", int64_t{2}}, {"kv_num_heads", int64_t{1}}})};
  EXPECT_TRUE(gradCheck(c3, {0, 1, 2}));
}

TEST(Attention, GradientMasksCausalSoftcapAndScale) {
  NDArray mask = rnd({3, 4}, 7);
  OpCase c{"Attention",
           {rnd({1, 4, 3, 2}, 8), rnd({1, 2, 4, 2}, 9), rnd({1, 2, 4, 2}, 10), mask},
           attrs({{"is_causal", int64_t{1}}, {"softcap", 2.0f}, {"scale", 0.7f}})};
  EXPECT_TRUE(gradCheck(c, {0, 1, 2}));
  // A boolean mask that hides every key from one query: that row has no gradient to give.
  NDArray bm = arr<bool>({3, 4}, {true, false, true, true, false, false, false, false, true, true, false, true});
  OpCase cb{"Attention", {rnd({1, 1, 3, 2}, 11), rnd({1, 1, 4, 2}, 12), rnd({1, 1, 4, 2}, 13), bm}};
  EXPECT_TRUE(gradCheck(cb, {0, 1, 2}));
}

TEST(Attention, GradientPastCachePresentOutputsAndScores) {
  // All four outputs enter the loss: the present caches and the qk output pass gradients too.
  // (Mode 2 writes the masked scores, -inf under a causal mask: it gets a finite float mask instead.)
  for (int64_t mode : {0, 2, 3}) {
    OpCase c{"Attention",
             {rnd({1, 2, 2, 3}, 14), rnd({1, 1, 2, 3}, 15), rnd({1, 1, 2, 2}, 16), NDArray{}, rnd({1, 1, 3, 3}, 17),
              rnd({1, 1, 3, 2}, 18)},
             attrs({{"qk_matmul_output_mode", mode}, {"is_causal", int64_t{mode != 2}}}),
             4};
    if (mode == 2) c.inputs[3] = rnd({2, 5}, 19);
    EXPECT_TRUE(gradCheck(c, {0, 1, 2, 4, 5})) << "mode=" << mode;
  }
}

TEST(Graft_AttentionGrad, HandComputedRow) {
  // q = 0: uniform weights over keys k = (2, 6) with values v = (1, 3); dY = 1.
  // dV = p dY = (0.5, 0.5); dp = v, ds = p (dp - p.dp) = (-0.5, 0.5), dQ = ds.k = 2, dK = ds q = 0.
  OpCase c{"AttentionGrad",
           {arr<float>({1, 1, 1, 1}, {1}), NDArray{}, NDArray{}, NDArray{}, arr<float>({1, 1, 1, 1}, {0}),
            arr<float>({1, 1, 2, 1}, {2, 6}), arr<float>({1, 1, 2, 1}, {1, 3})},
           {},
           3,
           "ai.graft"};
  auto r = runReference(c);
  EXPECT_TRUE(allClose(r.at(0), arr<float>({1, 1, 1, 1}, {2})));
  EXPECT_TRUE(allClose(r.at(1), arr<float>({1, 1, 2, 1}, {0, 0})));
  EXPECT_TRUE(allClose(r.at(2), arr<float>({1, 1, 2, 1}, {0.5f, 0.5f})));
}

}  // namespace
}  // namespace graft::testing
