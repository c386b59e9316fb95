// The cse pass (src/passes/cse.cpp).
#include "pass_test_util.hpp"

namespace graft::passes::testing {
namespace {

void runCse(ir::Graph& g) {
  PassContext ctx;
  ctx.verifyEachPass = true;
  runPipeline(g, {"cse", "dce"}, ctx);
}

TEST(Cse, MergesEqualNodesAndTheirConsumers) {
  GraphBuilder b;
  ir::Tensor* x = b.input({3, 4});
  ir::Tensor* y = b.input({4});
  // (x + y) * 2 written twice, with two copies of the constant 2.
  ir::Tensor* p = b.op("Mul", {b.op("Add", {x, y}), b.scalar(2)});
  ir::Tensor* q = b.op("Mul", {b.op("Add", {x, y}), b.scalar(2)});
  ir::Tensor* out = b.op("Sub", {p, q});
  b.outputs({out});
  NDArray xs = randomFloats({3, 4}, 1), ys = randomFloats({4}, 2);
  auto before = runGraph(*b.g, {xs, ys}, true);
  runCse(*b.g);
  auto counts = opCounts(*b.g);
  EXPECT_EQ(counts["Add"], 1);
  EXPECT_EQ(counts["Mul"], 1);
  EXPECT_EQ(counts["Sub"], 1);
  ir::Node* sub = b.g->findTensor(out->id())->producer();
  EXPECT_EQ(sub->input(0), sub->input(1));
  EXPECT_TRUE(close(runGraph(*b.g, {xs, ys}, true)[0], before[0]));
}

TEST(Cse, KeepsNodesThatDiffer) {
  GraphBuilder b;
  ir::Tensor* x = b.input({5});
  ir::Tensor* y = b.input({5});
  ir::Attributes a1, a2;
  a1.set("alpha", 0.1f);
  a2.set("alpha", 0.2f);
  ir::Tensor* l1 = b.op("LeakyRelu", {x}, a1);
  ir::Tensor* l2 = b.op("LeakyRelu", {x}, a2);
  ir::Tensor* s1 = b.op("Sub", {x, y});  // operands in another order: another value
  ir::Tensor* s2 = b.op("Sub", {y, x});
  ir::Tensor* m1 = b.op("Mul", {x, b.scalar(2)});
  ir::Tensor* m2 = b.op("Mul", {x, b.scalar(3)});
  b.outputs({b.op("Sum", {l1, l2, s1, s2, m1, m2})});
  runCse(*b.g);
  auto counts = opCounts(*b.g);
  EXPECT_EQ(counts["LeakyRelu"], 2);
  EXPECT_EQ(counts["Sub"], 2);
  EXPECT_EQ(counts["Mul"], 2);
}

TEST(Cse, LeavesGraphOutputsAndSideEffectsAlone) {
  GraphBuilder b;
  ir::Tensor* x = b.input({5});
  ir::Tensor* e1 = b.op("Exp", {x});
  ir::Tensor* e2 = b.op("Exp", {x});
  b.outputs({e1, e2});  // two anchors of one value: both must stay
  runCse(*b.g);
  EXPECT_EQ(opCounts(*b.g)["Exp"], 2);
  EXPECT_NE(b.g->findTensor(e1->id()), nullptr);
  EXPECT_NE(b.g->findTensor(e2->id()), nullptr);

  GraphBuilder t;
  ir::Tensor* w = t.g->addInitializer("w", randomFloats({4}, 1));
  ir::Tensor* acc = t.g->addInitializer("acc", NDArray(DataType::Float, {4}));
  ir::Tensor* g = t.input({4});
  t.g->otherOpsets["ai.graft"] = 1;
  t.g->addNode("Accumulate", "ai.graft", {acc, g}, {});
  t.g->addNode("Accumulate", "ai.graft", {acc, g}, {});  // twice on purpose: it has side effects
  t.outputs({t.op("Mul", {w, g})});
  runCse(*t.g);
  EXPECT_EQ(opCounts(*t.g)["Accumulate"], 2);
}

TEST(Cse, MergesEqualConstantsOnly) {
  GraphBuilder b;
  ir::Tensor* x = b.input({2});
  NDArray one = NDArray::scalar<float>(DataType::Float, 1), oneInt = NDArray::scalar<int32_t>(DataType::Int32, 1);
  ir::Tensor* c1 = b.constant(one);
  ir::Tensor* c2 = b.constant(one.clone());
  ir::Tensor* c3 = b.constant(oneInt);
  ir::Tensor* a = b.op("Add", {x, c1});
  ir::Tensor* a2 = b.op("Add", {x, c2});
  ir::Tensor* cast = b.op("Cast", {c3}, [] {
    ir::Attributes at;
    at.set("to", static_cast<int64_t>(DataType::Float));
    return at;
  }());
  b.outputs({b.op("Sum", {a, a2, b.op("Add", {x, cast})})});
  std::string c2id = c2->id(), c3id = c3->id();  // c2 is deleted by the pass
  runCse(*b.g);
  EXPECT_EQ(opCounts(*b.g)["Add"], 2);   // x + 1 once, x + cast(1) kept
  EXPECT_EQ(b.g->findTensor(c2id), nullptr);
  EXPECT_NE(b.g->findTensor(c3id), nullptr);
}

}  // namespace
}  // namespace graft::passes::testing
