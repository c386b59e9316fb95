// graft's fused ops (ai.graft): reference kernels against hand-computed values and against the
// standard ops they compose, run one by one.
#include <cmath>

#include "op_test_util.hpp"

namespace graft::testing {
namespace {

constexpr const char* kGraft = "ai.graft";
using Ints = std::vector<int64_t>;

OpCase graftCase(const std::string& type, std::vector<NDArray> in, ir::Attributes a = {}) {
  OpCase c{type, std::move(in), std::move(a)};
  c.domain = kGraft;
  return c;
}

NDArray run1(const OpCase& c) { return runReference(c).at(0); }

// Plain [N, C, S] -> blocked [N, ceil(C/b), S, b] by definition.
NDArray blockNaive(const NDArray& x, int64_t b) {
  Shape s = x.shape();
  int64_t N = s[0], C = s[1], S = x.numel() / (N * C), cb = (C + b - 1) / b;
  Shape p = s;
  p[1] = cb;
  p.push_back(b);
  NDArray y(DataType::Float, p);
  for (int64_t n = 0; n < N; ++n)
    for (int64_t c = 0; c < C; ++c)
      for (int64_t i = 0; i < S; ++i) y.data<float>()[((n * cb + c / b) * S + i) * b + c % b] = x.data<float>()[(n * C + c) * S + i];
  return y;
}

TEST(Graft_ToBlocked, BlocksChannelsAndZeroPads) {
  NDArray x = arr<float>({1, 3, 2}, {1, 2, 3, 4, 5, 6});  // C=3, S=2
  NDArray y = run1(graftCase("ToBlocked", {x}, attrs({{"block", int64_t{2}}})));
  // [1, 2, 2, 2]: block 0 holds channels 0,1; block 1 holds channel 2 and a zero.
  EXPECT_TRUE(allClose(y, arr<float>({1, 2, 2, 2}, {1, 3, 2, 4, 5, 0, 6, 0})));
}

TEST(Graft_ToBlocked, MatchesDefinitionOn3D) {
  NDArray x = randomArray(DataType::Float, {2, 11, 3, 2, 2}, 1);
  EXPECT_TRUE(allClose(run1(graftCase("ToBlocked", {x}, attrs({{"block", int64_t{8}}}))), blockNaive(x, 8)));
}

TEST(Graft_ToBlocked, RejectsLowRank) {
  EXPECT_THROW(run1(graftCase("ToBlocked", {arr<float>({2, 2}, {1, 2, 3, 4})}, attrs({{"block", int64_t{8}}}))), Error);
  EXPECT_THROW(inferTypes(graftCase("ToBlocked", {arr<float>({1, 2, 2}, {1, 2, 3, 4})}, attrs({{"block", int64_t{0}}}))),
               Error);
}

TEST(Graft_FromBlocked, InvertsToBlocked) {
  NDArray x = randomArray(DataType::Float, {2, 5, 3, 4}, 2);
  NDArray b = blockNaive(x, 4);
  EXPECT_TRUE(allClose(run1(graftCase("FromBlocked", {b}, attrs({{"channels", int64_t{5}}}))), x));
  auto t = inferTypes(graftCase("FromBlocked", {b}, attrs({{"channels", int64_t{5}}})));
  EXPECT_EQ(t.at(0).info.shape(), Shape({2, 5, 3, 4}));
}

TEST(Graft_FromBlocked, RejectsChannelsThatDoNotFit) {
  NDArray b = NDArray(DataType::Float, {1, 2, 3, 4});  // 2 blocks of 4: 5..8 channels
  EXPECT_THROW(run1(graftCase("FromBlocked", {b}, attrs({{"channels", int64_t{9}}}))), Error);
  EXPECT_THROW(run1(graftCase("FromBlocked", {b}, attrs({{"channels", int64_t{4}}}))), Error);
}

TEST(Graft_Reblock, IsFromBlockedThenToBlocked) {
  NDArray x = randomArray(DataType::Float, {2, 20, 3, 4}, 3);
  for (auto [from, to] : {std::pair<int64_t, int64_t>{16, 20}, {20, 16}, {8, 16}, {16, 8}}) {
    SCOPED_TRACE(std::to_string(from) + " -> " + std::to_string(to));
    NDArray y = run1(graftCase("Reblock", {blockNaive(x, from)}, attrs({{"channels", int64_t{20}}, {"block", to}})));
    EXPECT_TRUE(allClose(y, blockNaive(x, to)));
  }
  auto t =
      inferTypes(graftCase("Reblock", {blockNaive(x, 16)}, attrs({{"channels", int64_t{20}}, {"block", int64_t{8}}})));
  EXPECT_EQ(t.at(0).info.shape(), Shape({2, 3, 3, 4, 8}));
}

TEST(Graft_Reblock, RejectsChannelsThatDoNotFit) {
  NDArray b = NDArray(DataType::Float, {1, 2, 3, 4});  // 2 blocks of 4: 5..8 channels
  EXPECT_THROW(run1(graftCase("Reblock", {b}, attrs({{"channels", int64_t{9}}, {"block", int64_t{8}}}))), Error);
  EXPECT_THROW(inferTypes(graftCase("Reblock", {b}, attrs({{"channels", int64_t{8}}, {"block", int64_t{0}}}))), Error);
}

// act(Conv(x, w, b) + s) by the standard ops, one at a time.
NDArray convChain(const NDArray& x, const NDArray& w, const NDArray& b, const NDArray& s, const ir::Attributes& convAttrs,
                  const std::string& act) {
  std::vector<NDArray> in{x, w};
  if (b.valid()) in.push_back(b);
  NDArray y = run1(OpCase{"Conv", in, convAttrs});
  if (s.valid()) y = run1(OpCase{"Add", {y, s}});
  if (!act.empty()) y = run1(OpCase{act, {y}});
  return y;
}

TEST(Graft_FusedConv, OneByOneConvWithBiasAndRelu) {
  // x: 1x2x1x2, w: 1x2x1x1 = [1, -1], b = [0.5]: y = relu(x0 - x1 + 0.5)
  NDArray x = arr<float>({1, 2, 1, 2}, {1, 2, 3, 1});
  NDArray w = arr<float>({1, 2, 1, 1}, {1, -1});
  NDArray b = arr<float>({1}, {0.5f});
  NDArray y = run1(graftCase("FusedConv", {x, w, b}, attrs({{"activation", std::string("Relu")}})));
  EXPECT_TRUE(allClose(y, arr<float>({1, 1, 1, 2}, {0.f, 1.5f})));
}

TEST(Graft_FusedConv, MatchesConvAddActivation) {
  NDArray x = randomArray(DataType::Float, {2, 6, 7, 5}, 3), w = randomArray(DataType::Float, {4, 3, 3, 3}, 4);
  NDArray b = randomArray(DataType::Float, {4}, 5), s = randomArray(DataType::Float, {2, 4, 4, 3}, 6);
  ir::Attributes ca = attrs({{"group", int64_t{2}}, {"strides", std::vector<int64_t>{2, 2}}, {"pads", std::vector<int64_t>{1, 1, 1, 1}}});
  for (const char* act : {"", "Relu", "Tanh", "Sigmoid"}) {
    ir::Attributes fa = ca;
    if (*act) fa.set("activation", std::string(act));
    NDArray y = run1(graftCase("FusedConv", {x, w, b, s}, fa));
    EXPECT_TRUE(allClose(y, convChain(x, w, b, s, ca, act), 1e-5, 1e-6)) << act;
  }
}

TEST(Graft_FusedConv, BlockedInputAndOutput) {
  NDArray x = randomArray(DataType::Float, {1, 5, 4, 4}, 7), w = randomArray(DataType::Float, {3, 5, 3, 3}, 8);
  NDArray s = randomArray(DataType::Float, {1, 3, 4, 4}, 9);
  ir::Attributes ca = attrs({{"auto_pad", std::string("SAME_UPPER")}});
  ir::Attributes fa = ca;
  fa.set("x_block", int64_t{4});
  fa.set("y_block", int64_t{2});
  fa.set("activation", std::string("LeakyRelu"));
  fa.set("activation_alpha", 0.25f);
  NDArray y = run1(graftCase("FusedConv", {blockNaive(x, 4), w, NDArray{}, blockNaive(s, 2)}, fa));
  NDArray want = convChain(x, w, NDArray{}, s, ca, "");
  for (int64_t i = 0; i < want.numel(); ++i) {
    float& v = want.data<float>()[i];
    v = v < 0 ? 0.25f * v : v;
  }
  EXPECT_TRUE(allClose(y, blockNaive(want, 2), 1e-5, 1e-6));
}

TEST(Graft_FusedConv, ClipAndHardSigmoidParameters) {
  NDArray x = randomArray(DataType::Float, {1, 2, 5}, 10, -3, 3), w = randomArray(DataType::Float, {2, 2, 1}, 11, -3, 3);
  NDArray conv = run1(OpCase{"Conv", {x, w}});
  ir::Attributes clip = attrs({{"activation", std::string("Clip")}, {"activation_alpha", -0.5f}, {"activation_beta", 0.75f}});
  NDArray y = run1(graftCase("FusedConv", {x, w}, clip));
  ir::Attributes hs = attrs({{"activation", std::string("HardSigmoid")}, {"activation_alpha", 0.3f}, {"activation_beta", 0.4f}});
  NDArray z = run1(graftCase("FusedConv", {x, w}, hs));
  for (int64_t i = 0; i < conv.numel(); ++i) {
    float c = conv.data<float>()[i];
    EXPECT_FLOAT_EQ(y.data<float>()[i], std::min(0.75f, std::max(-0.5f, c)));
    EXPECT_NEAR(z.data<float>()[i], std::min(1.f, std::max(0.f, 0.3f * c + 0.4f)), 1e-6);
  }
}

TEST(Graft_FusedConv, RejectsUnknownActivation) {
  NDArray x = randomArray(DataType::Float, {1, 1, 3}, 12), w = randomArray(DataType::Float, {1, 1, 1}, 13);
  EXPECT_THROW(run1(graftCase("FusedConv", {x, w}, attrs({{"activation", std::string("Softmax")}}))), Error);
}

// FusedConvChain(X, Sum?, W0, B0, W1, B1, ...): its stages' FusedConvs one after the other,
// attributes prefixed s<i>_, Sum added by the last stage (before its activation).
TEST(Graft_FusedConvChain, TwoOneByOneStagesByHand) {
  // x = [1, 2] (1x1x1x2); stage 0: 2x + 1 -> [3, 5]; stage 1: relu(-y + 4 + sum), sum = [10, -20].
  NDArray x = arr<float>({1, 1, 1, 2}, {1, 2});
  NDArray sum = arr<float>({1, 1, 1, 2}, {10, -20});
  ir::Attributes a = attrs({{"stages", int64_t{2}}, {"s1_activation", std::string("Relu")}});
  NDArray y = run1(graftCase("FusedConvChain",
                             {x, sum, arr<float>({1, 1, 1, 1}, {2}), arr<float>({1}, {1}),
                              arr<float>({1, 1, 1, 1}, {-1}), arr<float>({1}, {4})},
                             a));
  EXPECT_TRUE(allClose(y, arr<float>({1, 1, 1, 2}, {11.f, 0.f})));
}

TEST(Graft_FusedConvChain, MatchesItsStagesOneByOne) {
  // Channels last (x_block = C), as the cpu-conv-chains pass makes it: 1x1 expansion with Clip,
  // depthwise 3x3 of stride 2 with Relu, 1x1 projection with a residual.
  NDArray x = randomArray(DataType::Float, {2, 4, 9, 7}, 21);
  NDArray w0 = randomArray(DataType::Float, {12, 4, 1, 1}, 22), b0 = randomArray(DataType::Float, {12}, 23);
  NDArray w1 = randomArray(DataType::Float, {12, 1, 3, 3}, 24), b1 = randomArray(DataType::Float, {12}, 25);
  NDArray w2 = randomArray(DataType::Float, {4, 12, 1, 1}, 26), b2 = randomArray(DataType::Float, {4}, 27);
  NDArray s = randomArray(DataType::Float, {2, 4, 5, 4}, 28);
  std::vector<ir::Attributes> stage(3);
  stage[0] = attrs({{"activation", std::string("Clip")}, {"activation_alpha", 0.f}, {"activation_beta", 0.5f}});
  stage[1] = attrs({{"group", int64_t{12}},
                    {"strides", Ints{2, 2}},
                    {"pads", Ints{1, 1, 1, 1}},
                    {"activation", std::string("Relu")}});
  const int64_t blocks[3][2] = {{4, 12}, {12, 12}, {12, 4}};
  ir::Attributes chain = attrs({{"stages", int64_t{3}}});
  for (int64_t i = 0; i < 3; ++i) {
    stage[i].set("x_block", blocks[i][0]);
    stage[i].set("y_block", blocks[i][1]);
    for (const auto& [name, value] : stage[i].all()) chain.set("s" + std::to_string(i) + "_" + name, value);
  }
  NDArray xb = blockNaive(x, 4), sb = blockNaive(s, 4);
  NDArray y0 = run1(graftCase("FusedConv", {xb, w0, b0}, stage[0]));
  NDArray y1 = run1(graftCase("FusedConv", {y0, w1, b1}, stage[1]));
  NDArray want = run1(graftCase("FusedConv", {y1, w2, b2, sb}, stage[2]));
  NDArray y = run1(graftCase("FusedConvChain", {xb, sb, w0, b0, w1, b1, w2, b2}, chain));
  EXPECT_EQ(y.shape(), (Shape{2, 1, 5, 4, 4}));
  EXPECT_TRUE(allClose(y, want, 1e-6, 1e-7));
  // Without the residual.
  NDArray noSum = run1(graftCase("FusedConvChain", {xb, NDArray{}, w0, b0, w1, b1, w2, b2}, chain));
  EXPECT_TRUE(allClose(noSum, run1(graftCase("FusedConv", {y1, w2, b2}, stage[2])), 1e-6, 1e-7));
}

TEST(Graft_FusedConvChain, RefusesInputsThatDoNotMatchItsStages) {
  NDArray x = randomArray(DataType::Float, {1, 2, 3, 3}, 31), w = randomArray(DataType::Float, {2, 2, 1, 1}, 32);
  NDArray b = randomArray(DataType::Float, {2}, 33);
  auto message = [&](const OpCase& c) {
    try {
      inferTypes(c);
    } catch (const Error& e) {
      return std::string(e.what());
    }
    return std::string("no error");
  };
  std::string e = message(graftCase("FusedConvChain", {x, NDArray{}, w, b}, attrs({{"stages", int64_t{2}}})));
  EXPECT_NE(e.find("2 stages need 6 inputs"), std::string::npos) << e;
  e = message(graftCase("FusedConvChain", {x, NDArray{}, w, b}, {}));
  EXPECT_NE(e.find("stages must be in [1, 64]"), std::string::npos) << e;
  e = message(graftCase("FusedConvChain", {x, NDArray{}, w, NDArray{}}, attrs({{"stages", int64_t{1}}})));
  EXPECT_NE(e.find("stage 0 needs its W and B"), std::string::npos) << e;
}

TEST(Graft_FusedMatMul, MatchesMatMulAddActivation) {
  NDArray a = randomArray(DataType::Float, {2, 3, 4}, 14), b = randomArray(DataType::Float, {4, 5}, 15);
  NDArray bias = randomArray(DataType::Float, {5}, 16);
  NDArray y = run1(graftCase("FusedMatMul", {a, b, bias}, attrs({{"activation", std::string("Gelu")},
                                                                  {"activation_domain", std::string("ai.graphcore")}})));
  NDArray mm = run1(OpCase{"Add", {run1(OpCase{"MatMul", {a, b}}), bias}});
  OpCase gelu{"Gelu", {mm}};
  gelu.domain = "ai.graphcore";
  EXPECT_TRUE(allClose(y, run1(gelu), 1e-5, 1e-6));
  // Hand check of one element without activation: y[0,0,0] = sum_k a[0,0,k] b[k,0] + bias[0].
  NDArray z = run1(graftCase("FusedMatMul", {a, b, bias}));
  double want = bias.data<float>()[0];
  for (int k = 0; k < 4; ++k) want += double(a.data<float>()[k]) * b.data<float>()[k * 5];
  EXPECT_NEAR(z.data<float>()[0], want, 1e-5);
}

TEST(Graft_FusedMatMul, WithoutBias) {
  NDArray a = randomArray(DataType::Float, {3}, 17), b = randomArray(DataType::Float, {3, 2}, 18);
  NDArray y = run1(graftCase("FusedMatMul", {a, b}, attrs({{"activation", std::string("Relu")}})));
  NDArray want = run1(OpCase{"Relu", {run1(OpCase{"MatMul", {a, b}})}});
  EXPECT_TRUE(allClose(y, want));
}

TEST(Graft_FusedMatMul, PermutedOperandsAndResult) {
  // q, k: [B=2, S=3, H=2, D=4]; y[b, s, h, t] = sum_d q[b, s, h, d] k[b, t, h, d], i.e.
  // (q as [B, H, S, D]) @ (k as [B, H, D, S]), the result put back as [B, S, H, S].
  NDArray q = randomArray(DataType::Float, {2, 3, 2, 4}, 22), k = randomArray(DataType::Float, {2, 3, 2, 4}, 23);
  NDArray y = run1(
      graftCase("FusedMatMul", {q, k},
                attrs({{"perm_a", Ints{0, 2, 1, 3}}, {"perm_b", Ints{0, 2, 3, 1}}, {"perm_y", Ints{0, 2, 1, 3}}})));
  ASSERT_EQ(y.shape(), Shape({2, 3, 2, 3}));
  auto at = [](const NDArray& x, int b, int s, int h, int d) {
    return double(x.data<float>()[((b * 3 + s) * 2 + h) * 4 + d]);
  };
  for (int b = 0; b < 2; ++b)
    for (int s = 0; s < 3; ++s)
      for (int h = 0; h < 2; ++h)
        for (int t = 0; t < 3; ++t) {
          double want = 0;
          for (int d = 0; d < 4; ++d) want += at(q, b, s, h, d) * at(k, b, t, h, d);
          EXPECT_NEAR(y.data<float>()[((b * 3 + s) * 2 + h) * 3 + t], want, 1e-5);
        }
}

TEST(Graft_FusedMatMul, RejectsBadPerm) {
  NDArray a = randomArray(DataType::Float, {3, 4}, 24), b = randomArray(DataType::Float, {3, 5}, 25);
  EXPECT_THROW(run1(graftCase("FusedMatMul", {a, b}, attrs({{"perm_a", Ints{1, 1}}}))), Error);
  EXPECT_THROW(run1(graftCase("FusedMatMul", {a, b}, attrs({{"perm_a", Ints{0, 1, 2}}}))), Error);
  EXPECT_THROW(run1(graftCase("FusedMatMul", {a, b}, attrs({{"perm_b", Ints{1, 0}}}))), Error);  // K mismatch
  NDArray y = run1(graftCase("FusedMatMul", {a, b}, attrs({{"perm_a", Ints{1, 0}}})));           // aᵀ b
  EXPECT_EQ(y.shape(), Shape({4, 5}));
}

TEST(Graft_FusedGemm, MatchesGemmActivation) {
  NDArray a = randomArray(DataType::Float, {4, 3}, 19), b = randomArray(DataType::Float, {5, 4}, 20);
  NDArray c = randomArray(DataType::Float, {5}, 21);
  ir::Attributes ga = attrs({{"transA", int64_t{1}}, {"transB", int64_t{1}}, {"alpha", 0.5f}, {"beta", 2.f}});
  ir::Attributes fa = ga;
  fa.set("activation", std::string("Elu"));
  fa.set("activation_alpha", 0.7f);
  NDArray y = run1(graftCase("FusedGemm", {a, b, c}, fa));
  NDArray want = run1(OpCase{"Elu", {run1(OpCase{"Gemm", {a, b, c}, ga})}, attrs({{"alpha", 0.7f}})});
  EXPECT_TRUE(allClose(y, want, 1e-5, 1e-6));
}

TEST(Graft_ChannelBlocked, MaxPoolOnBlockedData) {
  NDArray x = randomArray(DataType::Float, {1, 3, 4, 4}, 22);
  ir::Attributes pa = attrs({{"kernel_shape", std::vector<int64_t>{2, 2}}, {"strides", std::vector<int64_t>{2, 2}}});
  ir::Attributes ba = pa;
  ba.set("op", std::string("MaxPool"));
  ba.set("block", int64_t{2});
  ba.set("channels", int64_t{3});
  NDArray y = run1(graftCase("ChannelBlocked", {blockNaive(x, 2)}, ba));
  EXPECT_TRUE(allClose(y, blockNaive(run1(OpCase{"MaxPool", {x}, pa}), 2)));
  // One window by hand: channel 0, top-left 2x2.
  const float* xp = x.data<float>();
  EXPECT_FLOAT_EQ(y.data<float>()[0], std::max({xp[0], xp[1], xp[4], xp[5]}));
}

TEST(Graft_ChannelBlocked, BatchNormKeepsOtherInputsPlain) {
  NDArray x = randomArray(DataType::Float, {2, 3, 2, 2}, 23);
  NDArray sc = arr<float>({3}, {1, 2, 3}), bi = arr<float>({3}, {0, 1, 0}), mu = arr<float>({3}, {0, 0.5f, 1}),
          var = arr<float>({3}, {1, 4, 0.25f});
  ir::Attributes ba = attrs({{"op", std::string("BatchNormalization")}, {"block", int64_t{8}}, {"channels", int64_t{3}},
                             {"epsilon", 0.f}});
  NDArray y = run1(graftCase("ChannelBlocked", {blockNaive(x, 8), sc, bi, mu, var}, ba));
  NDArray want(DataType::Float, x.shape());
  for (int64_t i = 0; i < x.numel(); ++i) {
    int64_t c = (i / 4) % 3;
    float s = sc.data<float>()[c] / std::sqrt(var.data<float>()[c]);
    want.data<float>()[i] = (x.data<float>()[i] - mu.data<float>()[c]) * s + bi.data<float>()[c];
  }
  EXPECT_TRUE(allClose(y, blockNaive(want, 8), 1e-5, 1e-6));
}

}  // namespace
}  // namespace graft::testing
