// The fold-transpose pass (src/passes/fold_transpose.cpp): Transposes around MatMul and Gemm
// become FusedMatMul perm_a / perm_b / perm_y and Gemm transA / transB, with the same outputs.
#include "pass_test_util.hpp"

namespace graft::passes::testing {
namespace {

void runPass(ir::Graph& g) {
  PassContext ctx;
  ctx.verifyEachPass = true;
  runPipeline(g, {"fold-transpose", "dce", "infer-shapes"}, ctx);
}

ir::Attributes permAttr(std::vector<int64_t> p) {
  ir::Attributes a;
  a.set("perm", std::move(p));
  return a;
}

// Outputs of the graph on both backends before the pass equal those after it on both.
void expectSameOutputs(GraphBuilder& b, const std::vector<NDArray>& in, const std::function<void()>& rewrite) {
  auto before = runGraph(*b.g, in, true);
  rewrite();
  auto ref = runGraph(*b.g, in, true), cpu = runGraph(*b.g, in);
  ASSERT_EQ(before.size(), ref.size());
  for (size_t i = 0; i < before.size(); ++i) {
    EXPECT_TRUE(close(ref[i], before[i], 1e-5, 1e-5)) << i;
    EXPECT_TRUE(close(cpu[i], before[i], 1e-4, 1e-4)) << i;
  }
}

TEST(FoldTranspose, AttentionScoresReadHeadsInPlace) {
  // q, k: [B, S, H, D]; scores = (q as [B, H, S, D]) @ (k as [B, H, D, S]).
  GraphBuilder b;
  ir::Tensor* q = b.input({2, 5, 3, 4});
  ir::Tensor* k = b.input({2, 5, 3, 4});
  ir::Tensor* s =
      b.op("MatMul", {b.op("Transpose", {q}, permAttr({0, 2, 1, 3})), b.op("Transpose", {k}, permAttr({0, 2, 3, 1}))});
  b.outputs({s});
  expectSameOutputs(b, {randomFloats({2, 5, 3, 4}, 1), randomFloats({2, 5, 3, 4}, 2)}, [&] { runPass(*b.g); });
  ASSERT_EQ(b.g->numNodes(), 1u) << ir::printGraph(*b.g);
  ir::Node* n = b.g->nodes()[0];
  EXPECT_EQ(n->type(), "FusedMatMul");
  EXPECT_EQ(n->input(0), q);
  EXPECT_EQ(n->input(1), k);
  EXPECT_EQ(n->attrInts("perm_a"), (std::vector<int64_t>{0, 2, 1, 3}));
  EXPECT_EQ(n->attrInts("perm_b"), (std::vector<int64_t>{0, 2, 3, 1}));
  EXPECT_FALSE(n->attrs().has("perm_y"));
  EXPECT_EQ(n->output(0)->id(), s->id());
}

TEST(FoldTranspose, OutputTransposeAndComposedInputs) {
  // Transpose(Transpose(w)) is w itself; the head merge after the product becomes perm_y.
  GraphBuilder b;
  ir::Tensor* p = b.input({2, 3, 5, 5});
  ir::Tensor* v = b.input({2, 5, 3, 4});
  ir::Tensor* w = b.input({4, 6});
  ir::Tensor* vh = b.op("Transpose", {v}, permAttr({0, 2, 1, 3}));
  ir::Tensor* o = b.op("Transpose", {b.op("MatMul", {p, vh})}, permAttr({0, 2, 1, 3}));  // [2, 5, 3, 4]
  ir::Tensor* wt = b.op("Transpose", {w}, permAttr({1, 0}));
  ir::Tensor* y = b.op("MatMul", {o, b.op("Transpose", {wt}, permAttr({1, 0}))});  // [2, 5, 3, 6]
  b.outputs({y});
  expectSameOutputs(b, {randomFloats({2, 3, 5, 5}, 3), randomFloats({2, 5, 3, 4}, 4), randomFloats({4, 6}, 5)},
                    [&] { runPass(*b.g); });
  auto ops = opCounts(*b.g);
  EXPECT_EQ(ops["Transpose"], 0) << ir::printGraph(*b.g);
  EXPECT_EQ(ops["FusedMatMul"], 2);
  for (const ir::Node* n : b.g->nodes()) {
    if (n->input(0) == p) {
      EXPECT_EQ(n->input(1), v);
      EXPECT_EQ(n->attrInts("perm_b"), (std::vector<int64_t>{0, 2, 1, 3}));
      EXPECT_EQ(n->attrInts("perm_y"), (std::vector<int64_t>{0, 2, 1, 3}));
    } else {
      EXPECT_EQ(n->input(1), w);
      EXPECT_FALSE(n->attrs().has("perm_b")) << "the two Transposes cancel";
    }
  }
}

TEST(FoldTranspose, GemmFlagsToggleAndOutputTransposeSwapsOperands) {
  GraphBuilder b;
  ir::Tensor* a = b.input({4, 3});
  ir::Tensor* w = b.input({5, 4});
  ir::Attributes ga;
  ga.set("transB", int64_t{1});
  ga.set("alpha", 0.5f);
  // Gemm(Transpose(a), w, transB) = 0.5 aᵀ wᵀ: [3, 5]; its Transpose [5, 3].
  ir::Tensor* y = b.op("Transpose", {b.op("Gemm", {b.op("Transpose", {a}), w}, ga)}, permAttr({1, 0}));
  b.outputs({y});
  expectSameOutputs(b, {randomFloats({4, 3}, 6), randomFloats({5, 4}, 7)}, [&] { runPass(*b.g); });
  ASSERT_EQ(b.g->numNodes(), 1u) << ir::printGraph(*b.g);
  ir::Node* n = b.g->nodes()[0];
  EXPECT_EQ(n->type(), "FusedGemm");
  EXPECT_EQ(n->input(0), w);
  EXPECT_EQ(n->input(1), a);
  EXPECT_EQ(n->attrInt("transA"), 0);
  EXPECT_EQ(n->attrInt("transB"), 0);
  EXPECT_EQ(n->output(0)->id(), y->id());
}

TEST(FoldTranspose, KeepsTransposesOthersReadAndGemmWithC) {
  GraphBuilder b;
  ir::Tensor* a = b.input({3, 4});
  ir::Tensor* c = b.input({3});
  ir::Tensor* at = b.op("Transpose", {a});
  ir::Tensor* mm = b.op("MatMul", {at, a});  // folded: at is read in place
  ir::Tensor* g = b.op("Gemm", {a, at, c});  // transB toggled
  ir::Tensor* y = b.op("Transpose", {g});    // C present: stays
  ir::Tensor* mt = b.op("Transpose", {mm});  // mm is also an output: stays
  b.outputs({mm, y, mt, at});
  expectSameOutputs(b, {randomFloats({3, 4}, 8), randomFloats({3}, 9)}, [&] { runPass(*b.g); });
  auto ops = opCounts(*b.g);
  EXPECT_EQ(ops["Transpose"], 3) << ir::printGraph(*b.g);
  EXPECT_EQ(ops["FusedMatMul"], 1);
  EXPECT_EQ(ops["FusedGemm"], 1);
}

TEST(FoldTranspose, VectorOperandAndNonFloatLeftAlone) {
  GraphBuilder b;
  ir::Tensor* v = b.input({6});
  ir::Tensor* w = b.input({5, 6});
  ir::Tensor* y = b.op("MatMul", {v, b.op("Transpose", {w})});  // [5]
  ir::Tensor* i = b.input({2, 3}, DataType::Int32);
  ir::Tensor* z = b.op("MatMul", {b.op("Transpose", {i}), i});
  b.outputs({y, z});
  runPass(*b.g);
  auto ops = opCounts(*b.g);
  EXPECT_EQ(ops["FusedMatMul"], 1) << ir::printGraph(*b.g);
  EXPECT_EQ(ops["Transpose"], 1);  // the Int32 one
  NDArray vi = randomFloats({6}, 10), wi = randomFloats({5, 6}, 11);
  NDArray ii(DataType::Int32, {2, 3});
  for (int k = 0; k < 6; ++k) ii.data<int32_t>()[k] = k - 2;
  auto got = runGraph(*b.g, {vi, wi, ii});
  for (int r = 0; r < 5; ++r) {
    double want = 0;
    for (int k = 0; k < 6; ++k) want += double(vi.data<float>()[k]) * wi.data<float>()[r * 6 + k];
    EXPECT_NEAR(got[0].data<float>()[r], want, 1e-4);
  }
}

TEST(FoldTranspose, KeepsControlDependencies) {
  // A weight update runs after the product that reads the weight; the fused node inherits that.
  GraphBuilder b;
  ir::Tensor* x = b.input({4, 3});
  ir::Tensor* w = b.input({5, 3});
  ir::Tensor* y = b.op("MatMul", {x, b.op("Transpose", {w})});
  ir::Tensor* z = b.op("Relu", {x});
  b.outputs({y, z});
  ir::Node* mm = y->producer();
  ir::Node* relu = z->producer();
  relu->addRunsAfter(mm);
  runPass(*b.g);
  ir::Node* f = y->producer();
  ASSERT_EQ(f->type(), "FusedMatMul") << ir::printGraph(*b.g);
  ASSERT_EQ(relu->runsAfter().size(), 1u);
  EXPECT_EQ(relu->runsAfter()[0], f);
}

}  // namespace
}  // namespace graft::passes::testing
