// The fuse-elementwise pass (src/passes/fuse_elementwise.cpp): which nodes fuse, the fused
// node's inputs and outputs, and that results stay the same.
#include "backends/backend.hpp"
#include "ops/fused_program.hpp"
#include "pass_test_util.hpp"

namespace graft::passes::testing {
namespace {

void fuse(ir::Graph& g) {
  PassContext ctx;
  ctx.verifyEachPass = true;
  runPipeline(g, {"fuse-elementwise", "infer-shapes"}, ctx);
}

std::vector<ir::Node*> fusedNodes(const ir::Graph& g) {
  std::vector<ir::Node*> out;
  for (ir::Node* n : g.nodes())
    if (n->type() == "FusedElementwise") out.push_back(n);
  return out;
}

TEST(FuseElementwise, ChainBecomesOneNodeWithTheSameResult) {
  GraphBuilder b;
  ir::Tensor* x = b.input({64, 100});
  ir::Tensor* w = b.input({100});
  ir::Tensor* bias = b.input({64, 1});
  ir::Tensor* y = b.op("Sigmoid", {b.op("Relu", {b.op("Add", {b.op("Mul", {x, w}), bias})})});
  ir::Tensor* z = b.op("Sub", {b.op("Mul", {y, b.scalar(0.5f)}), b.scalar(1.0f)});
  b.outputs({z});
  std::vector<NDArray> in{randomFloats({64, 100}, 1), randomFloats({100}, 2), randomFloats({64, 1}, 3)};
  auto before = runGraph(*b.g, in);
  fuse(*b.g);
  auto f = fusedNodes(*b.g);
  ASSERT_EQ(f.size(), 1u);
  EXPECT_EQ(b.g->numNodes(), 1u);
  // The full-shape input first (its buffer may be reused for the output); constants are immediates.
  EXPECT_EQ(f[0]->numInputs(), 3u);
  EXPECT_EQ(f[0]->input(0), x);
  EXPECT_EQ(f[0]->output(0)->id(), z->id());
  ops::fused::Program p = ops::fused::Program::fromNode(*f[0]);
  EXPECT_EQ(p.instrs.size(), 8u);  // Mul Add Relu Sigmoid, Const Mul, Const Sub
  EXPECT_TRUE(close(runGraph(*b.g, in)[0], before[0]));
  EXPECT_TRUE(close(runGraph(*b.g, in, true)[0], before[0], 1e-5, 1e-6));
}

TEST(FuseElementwise, IntermediatesReadElsewhereBecomeOutputs) {
  GraphBuilder b;
  ir::Tensor* x = b.input({8, 8});
  ir::Tensor* w = b.input({8, 8});
  ir::Tensor* t = b.op("Tanh", {b.op("Add", {x, b.scalar(1)})});
  ir::Tensor* u = b.op("Mul", {t, t});
  ir::Tensor* mm = b.op("MatMul", {t, w});  // reads t: t must be materialised
  b.outputs({u, mm});
  std::vector<NDArray> in{randomFloats({8, 8}, 1), randomFloats({8, 8}, 2)};
  auto before = runGraph(*b.g, in);
  fuse(*b.g);
  auto f = fusedNodes(*b.g);
  ASSERT_EQ(f.size(), 1u);
  ASSERT_EQ(f[0]->numOutputs(), 2u);
  EXPECT_EQ(f[0]->output(0)->id(), t->id());
  EXPECT_EQ(f[0]->output(1)->id(), u->id());
  auto after = runGraph(*b.g, in);
  for (size_t i = 0; i < 2; ++i) EXPECT_TRUE(close(after[i], before[i]));
}

TEST(FuseElementwise, OtherShapesAndTypesStayOut) {
  GraphBuilder b;
  ir::Tensor* x = b.input({4, 16});
  ir::Tensor* v = b.input({16});
  ir::Tensor* i = b.input({4, 16}, DataType::Int32);
  ir::Tensor* v2 = b.op("Mul", {b.op("Exp", {v}), b.scalar(2)});  // [16]: a group of its own
  ir::Tensor* y = b.op("Relu", {b.op("Add", {x, v2})});           // [4, 16]
  ir::Tensor* k = b.op("Add", {i, i});                            // integers: not fused
  b.outputs({y, k});
  fuse(*b.g);
  auto f = fusedNodes(*b.g);
  ASSERT_EQ(f.size(), 2u);
  EXPECT_EQ(opCounts(*b.g)["Add"], 1);
  for (ir::Node* n : f) EXPECT_EQ(n->numOutputs(), 1u);
}

TEST(FuseElementwise, NeverCreatesACycle) {
  // a = exp(x); m = MatMul(a, w); c = a + m: c cannot join a's group (m depends on it).
  GraphBuilder b;
  ir::Tensor* x = b.input({8, 8});
  ir::Tensor* w = b.input({8, 8});
  ir::Tensor* a = b.op("Exp", {b.op("Neg", {x})});
  ir::Tensor* m = b.op("MatMul", {a, w});
  ir::Tensor* c = b.op("Relu", {b.op("Add", {a, m})});
  b.outputs({c});
  std::vector<NDArray> in{randomFloats({8, 8}, 1), randomFloats({8, 8}, 2)};
  auto before = runGraph(*b.g, in);
  fuse(*b.g);
  EXPECT_NO_THROW(b.g->schedule());
  EXPECT_EQ(fusedNodes(*b.g).size(), 2u);
  EXPECT_TRUE(close(runGraph(*b.g, in)[0], before[0]));
}

TEST(FuseElementwise, ReluGradientWithPredicatesAndZeros) {
  // Where(x > 0, dy, ZerosLike(dy)) * 3: BOOL values stay inside the program.
  GraphBuilder b;
  ir::Tensor* x = b.input({32, 32});
  ir::Tensor* dy = b.input({32, 32});
  ir::Tensor* mask = b.op("Greater", {x, b.scalar(0)});
  ir::Tensor* zeros = b.op("ZerosLike", {dy}, {}, "ai.graft");
  ir::Tensor* g = b.op("Mul", {b.op("Where", {mask, dy, zeros}), b.scalar(3)});
  b.outputs({g});
  std::vector<NDArray> in{randomFloats({32, 32}, 1), randomFloats({32, 32}, 2)};
  auto before = runGraph(*b.g, in);
  PassContext ctx;
  ctx.verifyEachPass = true;
  runPipeline(*b.g, {"fuse-elementwise", "dce"}, ctx);
  EXPECT_EQ(b.g->numNodes(), 1u);  // the zeros became a constant of the program
  EXPECT_TRUE(close(runGraph(*b.g, in)[0], before[0]));
}

TEST(FuseElementwise, PredicateWaitsForItsReaderOutsideItsInputsGroup) {
  // A residual block's relu(x + r) and its gradient Where(x + r > 0, dy, 0), dy computed later:
  // the predicate must not join (and spoil) the forward group; it fuses with the Where.
  GraphBuilder b;
  ir::Tensor* x = b.input({16, 16});
  ir::Tensor* r = b.input({16, 16});
  ir::Tensor* w = b.input({16, 16});
  ir::Tensor* a = b.op("Add", {x, r});
  ir::Tensor* y = b.op("Relu", {a});
  ir::Tensor* mask = b.op("Greater", {a, b.scalar(0)});  // scheduled before dy
  ir::Tensor* dy = b.op("MatMul", {y, w});
  ir::Tensor* zeros = b.op("ZerosLike", {dy}, {}, "ai.graft");
  ir::Tensor* g = b.op("Where", {mask, dy, zeros});
  b.outputs({y, g});
  std::vector<NDArray> in{randomFloats({16, 16}, 1), randomFloats({16, 16}, 2), randomFloats({16, 16}, 3)};
  auto before = runGraph(*b.g, in);
  PassContext ctx;
  ctx.verifyEachPass = true;
  runPipeline(*b.g, {"fuse-elementwise", "dce"}, ctx);
  auto counts = opCounts(*b.g);
  EXPECT_EQ(counts["FusedElementwise"], 2);
  EXPECT_EQ(counts["Greater"] + counts["Where"] + counts["ZerosLike"] + counts["Add"] + counts["Relu"], 0);
  auto after = runGraph(*b.g, in);
  for (size_t i = 0; i < 2; ++i) EXPECT_TRUE(close(after[i], before[i]));
}

TEST(FuseElementwise, ClipGradientFusesItsPredicateTree) {
  // Clip's gradient Where(And(x >= lo, x <= hi), dy, 0): the two comparisons and the And join
  // the Where, so no BOOL tensor is materialised.
  GraphBuilder b;
  ir::Tensor* x = b.input({8, 32});
  ir::Tensor* w = b.input({32, 32});
  ir::Tensor *lo = b.scalar(0), *hi = b.scalar(6);
  ir::Tensor* y = b.op("Clip", {x, lo, hi});
  ir::Tensor* dy = b.op("MatMul", {y, w});
  ir::Tensor* mask = b.op("And", {b.op("GreaterOrEqual", {x, lo}), b.op("LessOrEqual", {x, hi})});
  ir::Tensor* g = b.op("Where", {mask, dy, b.op("ZerosLike", {dy}, {}, "ai.graft")});
  b.outputs({g});
  std::vector<NDArray> in{randomFloats({8, 32}, 1, -3, 9), randomFloats({32, 32}, 2)};
  auto before = runGraph(*b.g, in);
  PassContext ctx;
  ctx.verifyEachPass = true;
  runPipeline(*b.g, {"fuse-elementwise", "dce"}, ctx);
  auto counts = opCounts(*b.g);
  EXPECT_EQ(counts["FusedElementwise"], 1);
  EXPECT_EQ(counts["And"] + counts["GreaterOrEqual"] + counts["LessOrEqual"] + counts["ZerosLike"], 0);
  EXPECT_TRUE(close(runGraph(*b.g, in)[0], before[0]));
}

TEST(FuseElementwise, PredicateReadTwiceStaysOut) {
  // A mask read by two groups that cannot merge is computed once, outside both.
  GraphBuilder b;
  ir::Tensor* x = b.input({8, 8});
  ir::Tensor* w = b.input({8, 8});
  ir::Tensor* mask = b.op("Greater", {x, b.scalar(0)});
  ir::Tensor* u = b.op("Where", {mask, b.op("Exp", {x}), b.scalar(0)});
  ir::Tensor* v = b.op("MatMul", {u, w});
  ir::Tensor* z = b.op("Where", {mask, b.op("Neg", {v}), v});
  b.outputs({z});
  std::vector<NDArray> in{randomFloats({8, 8}, 1), randomFloats({8, 8}, 2)};
  auto before = runGraph(*b.g, in);
  fuse(*b.g);
  EXPECT_EQ(opCounts(*b.g)["Greater"], 1);
  EXPECT_EQ(fusedNodes(*b.g).size(), 2u);
  EXPECT_TRUE(close(runGraph(*b.g, in)[0], before[0]));
}

TEST(FuseElementwise, PredicatePulledAfterAReaderIsComputedFirst) {
  // A loop that stops early, unrolled: x_{i+1} = Where(run_i, 4 x_i, x_i), run_{i+1} =
  // And(run_i, 4 x_i < 128). Each run_i is read by a Where and by the next And, so it can join
  // the group after one of its readers; the program must still compute it before them. (Through
  // the whole cpu pipeline, test_popart_compat.py's early-stopping loop met exactly that.)
  for (float start : {1.0f, 3.0f, 200.0f}) {
    GraphBuilder b;
    ir::Tensor* x = b.input({1});
    ir::Tensor* limit = b.scalar(128);
    ir::Tensor* next = b.op("Mul", {x, b.scalar(4)});
    ir::Tensor* run = b.op("Less", {next, limit});
    ir::Tensor* state = next;
    for (int i = 0; i < 4; ++i) {
      next = b.op("Mul", {state, b.scalar(4)});
      ir::Tensor* keep = b.op("Less", {next, limit});
      state = b.op("Where", {run, next, state});
      run = b.op("And", {run, keep});
    }
    b.outputs({state});
    NDArray in(DataType::Float, {1});
    in.data<float>()[0] = start;
    auto before = runGraph(*b.g, {in});
    fuse(*b.g);
    EXPECT_FALSE(fusedNodes(*b.g).empty());
    EXPECT_TRUE(close(runGraph(*b.g, {in})[0], before[0])) << start;
  }
}

TEST(FuseElementwise, EscapingPredicateLeavesTheGroup) {
  GraphBuilder b;
  ir::Tensor* x = b.input({8});
  ir::Tensor* mask = b.op("Greater", {b.op("Exp", {x}), b.scalar(1)});
  ir::Tensor* y = b.op("Where", {mask, x, b.scalar(0)});
  b.outputs({y, mask});  // the BOOL mask is an output
  auto before = runGraph(*b.g, {randomFloats({8}, 1)});
  fuse(*b.g);
  EXPECT_NO_THROW(ir::verifyGraph(*b.g));
  auto after = runGraph(*b.g, {randomFloats({8}, 1)});
  EXPECT_TRUE(close(after[0], before[0]));
}

TEST(FuseElementwise, KeepsControlDependencies) {
  // An in-place update that must run after a reader keeps running after the fused reader.
  GraphBuilder b;
  ir::Tensor* w = b.g->addInitializer("w", randomFloats({16}, 1));
  ir::Tensor* acc = b.g->addInitializer("acc", NDArray(DataType::Float, {16}));
  ir::Tensor* x = b.input({16});
  ir::Tensor* y = b.op("Relu", {b.op("Mul", {w, x})});
  b.g->otherOpsets["ai.graft"] = 1;
  ir::Node* upd = b.g->addNode("Accumulate", "ai.graft", {acc, x}, {});
  upd->addRunsAfter(y->producer());
  upd->addRunsAfter(b.g->findTensor(y->producer()->input(0)->id())->producer());
  b.outputs({y});
  fuse(*b.g);
  auto f = fusedNodes(*b.g);
  ASSERT_EQ(f.size(), 1u);
  ASSERT_EQ(upd->runsAfter().size(), 1u);
  EXPECT_EQ(upd->runsAfter()[0], f[0]);
}

TEST(FuseElementwise, CpuPipelineFusesAnMlp) {
  GraphBuilder b;
  ir::Tensor* x = b.input({32, 64});
  ir::Tensor* h = x;
  for (int l = 0; l < 3; ++l) {
    ir::Tensor* w = b.g->addInitializer("w" + std::to_string(l), randomFloats({64, 64}, 10 + l));
    ir::Tensor* bias = b.g->addInitializer("b" + std::to_string(l), randomFloats({64}, 20 + l));
    h = b.op("Tanh", {b.op("Add", {b.op("MatMul", {h, w}), bias})});
  }
  b.outputs({h});
  auto before = runGraph(*b.g, {randomFloats({32, 64}, 5)});
  PassContext ctx;
  ctx.verifyEachPass = true;
  runPipeline(*b.g, backends::makeCpuBackend(1)->passes(backends::PassMode::Inference), ctx);
  // Bias and activation went into fused nodes (this pipeline's, or a kernel library's).
  auto counts = opCounts(*b.g);
  EXPECT_EQ(counts["Add"], 0);
  EXPECT_EQ(counts["Tanh"], 0);
  // FusedMatMul accumulates in float, in another order than MatMul, Add and Tanh apart.
  EXPECT_TRUE(close(runGraph(*b.g, {randomFloats({32, 64}, 5)})[0], before[0], 1e-4, 1e-5));
}

}  // namespace
}  // namespace graft::passes::testing
