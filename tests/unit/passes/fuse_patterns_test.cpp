// The fuse-gelu and fuse-layernorm passes (src/passes/fuse_patterns.cpp).
#include <cmath>

#include "pass_test_util.hpp"

namespace graft::passes::testing {
namespace {

void runPass(ir::Graph& g, const std::string& id) {
  PassContext ctx;
  ctx.verifyEachPass = true;
  runPipeline(g, {id, "dce", "infer-shapes"}, ctx);
}

// x/2 (1 + erf(x / sqrt 2)) in the three arrangements exporters produce.
ir::Tensor* gelu(GraphBuilder& b, ir::Tensor* x, int form) {
  ir::Tensor* s = form == 1 ? b.op("Mul", {x, b.scalar(0.70710678f)}) : b.op("Div", {x, b.scalar(1.41421356f)});
  ir::Tensor* a = b.op("Add", {b.op("Erf", {s}), b.scalar(1.0f)});
  if (form == 0) return b.op("Mul", {b.op("Mul", {x, a}), b.scalar(0.5f)});
  if (form == 1) return b.op("Mul", {b.op("Mul", {x, b.scalar(0.5f)}), a});
  return b.op("Mul", {x, b.op("Mul", {a, b.scalar(0.5f)})});
}

TEST(FuseGelu, EveryArrangementBecomesGeluErf) {
  for (int form = 0; form < 3; ++form) {
    SCOPED_TRACE(form);
    GraphBuilder b;
    ir::Tensor* x = b.input({16, 64});
    ir::Tensor* y = gelu(b, x, form);
    b.outputs({y});
    NDArray in = randomFloats({16, 64}, 3, -5, 5);
    auto before = runGraph(*b.g, {in}, true);
    runPass(*b.g, "fuse-gelu");
    ASSERT_EQ(b.g->numNodes(), 1u);
    ir::Node* n = b.g->nodes()[0];
    EXPECT_EQ(n->type(), "GeluErf");
    EXPECT_EQ(n->domain(), "ai.graft");
    EXPECT_EQ(n->input(0), x);
    EXPECT_EQ(n->output(0)->id(), y->id());
    EXPECT_TRUE(close(runGraph(*b.g, {in}, true)[0], before[0], 1e-5, 1e-6));
    EXPECT_TRUE(close(runGraph(*b.g, {in})[0], before[0], 1e-5, 1e-6));
  }
}

TEST(FuseGelu, NotWhenAnIntermediateIsReadElsewhere) {
  GraphBuilder b;
  ir::Tensor* x = b.input({8});
  ir::Tensor* s = b.op("Div", {x, b.scalar(1.41421356f)});
  ir::Tensor* e = b.op("Erf", {s});
  ir::Tensor* y = b.op("Mul", {b.op("Mul", {x, b.op("Add", {e, b.scalar(1.0f)})}), b.scalar(0.5f)});
  b.outputs({y, e});  // erf is needed outside
  runPass(*b.g, "fuse-gelu");
  EXPECT_EQ(opCounts(*b.g)["GeluErf"], 0);
  GraphBuilder c;
  ir::Tensor* x2 = c.input({8});
  ir::Tensor* s2 = c.op("Div", {x2, c.scalar(2.0f)});  // not sqrt 2
  ir::Tensor* y2 = c.op("Mul", {c.op("Mul", {x2, c.op("Add", {c.op("Erf", {s2}), c.scalar(1.0f)})}), c.scalar(0.5f)});
  c.outputs({y2});
  runPass(*c.g, "fuse-gelu");
  EXPECT_EQ(opCounts(*c.g)["GeluErf"], 0);
}

struct LayerNormGraph {
  GraphBuilder b;
  ir::Tensor *x, *y;
};

// (x - mean) / sqrt(var + eps) [* gamma + beta] over the trailing `axes`, as PyTorch exports it.
void layerNorm(LayerNormGraph& l, Shape xs, std::vector<int64_t> axes, bool affine, bool powForm) {
  GraphBuilder& b = l.b;
  l.x = b.input(xs);
  ir::Attributes a;
  a.set("axes", axes);
  ir::Tensor* mean = b.op("ReduceMean", {l.x}, a);
  ir::Tensor* d = b.op("Sub", {l.x, mean});
  ir::Tensor* sq = powForm ? b.op("Pow", {d, b.scalar(2.0f)}) : b.op("Mul", {d, d});
  ir::Tensor* var = b.op("ReduceMean", {sq}, a);
  ir::Tensor* n = b.op("Div", {d, b.op("Sqrt", {b.op("Add", {var, b.scalar(1e-5f)})})});
  if (affine) {
    Shape norm(xs.end() - static_cast<int64_t>(axes.size()), xs.end());
    ir::Tensor* gamma = b.g->addInitializer("gamma", randomFloats(norm, 11));
    ir::Tensor* beta = b.g->addInitializer("beta", randomFloats(norm, 12));
    n = b.op("Add", {b.op("Mul", {n, gamma}), beta});
  }
  l.y = n;
  b.outputs({l.y});
}

TEST(FuseLayerNorm, PatternBecomesLayerNormalization) {
  for (bool affine : {true, false})
    for (bool powForm : {true, false}) {
      SCOPED_TRACE(std::to_string(affine) + " " + std::to_string(powForm));
      LayerNormGraph l;
      layerNorm(l, {4, 10, 32}, {-1}, affine, powForm);
      NDArray in = randomFloats({4, 10, 32}, 5, -3, 4);
      auto before = runGraph(*l.b.g, {in});
      runPass(*l.b.g, "fuse-layernorm");
      ASSERT_EQ(l.b.g->numNodes(), 1u);
      ir::Node* n = l.b.g->nodes()[0];
      EXPECT_EQ(n->type(), "LayerNormalization");
      EXPECT_EQ(n->attrInt("axis"), 2);
      EXPECT_FLOAT_EQ(n->attrFloat("epsilon"), 1e-5f);
      EXPECT_EQ(n->numInputs(), affine ? 3u : 2u);
      EXPECT_EQ(n->output(0)->id(), l.y->id());
      EXPECT_TRUE(close(runGraph(*l.b.g, {in})[0], before[0], 1e-4, 1e-5));
    }
}

TEST(FuseLayerNorm, SeveralTrailingAxes) {
  LayerNormGraph l;
  layerNorm(l, {2, 3, 4, 5}, {2, 3}, true, true);
  NDArray in = randomFloats({2, 3, 4, 5}, 6);
  auto before = runGraph(*l.b.g, {in});
  runPass(*l.b.g, "fuse-layernorm");
  ASSERT_EQ(l.b.g->numNodes(), 1u);
  EXPECT_EQ(l.b.g->nodes()[0]->attrInt("axis"), 2);
  EXPECT_TRUE(close(runGraph(*l.b.g, {in})[0], before[0], 1e-4, 1e-5));
}

TEST(FuseLayerNorm, NotOverLeadingAxesOrWhenStatisticsAreRead) {
  LayerNormGraph l;
  layerNorm(l, {4, 6}, {0}, false, true);  // over the batch axis: not a layer norm
  runPass(*l.b.g, "fuse-layernorm");
  EXPECT_EQ(opCounts(*l.b.g)["LayerNormalization"], 0);

  GraphBuilder b;
  ir::Tensor* x = b.input({4, 6});
  ir::Attributes a;
  a.set("axes", std::vector<int64_t>{-1});
  ir::Tensor* mean = b.op("ReduceMean", {x}, a);
  ir::Tensor* d = b.op("Sub", {x, mean});
  ir::Tensor* var = b.op("ReduceMean", {b.op("Mul", {d, d})}, a);
  ir::Tensor* y = b.op("Div", {d, b.op("Sqrt", {b.op("Add", {var, b.scalar(1e-5f)})})});
  b.outputs({y, var});  // the variance is read outside
  runPass(*b.g, "fuse-layernorm");
  EXPECT_EQ(opCounts(*b.g)["LayerNormalization"], 0);
}

}  // namespace
}  // namespace graft::passes::testing
