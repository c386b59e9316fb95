// Tests of src/ops/controlflow.cpp: If, Loop and Scan, with bodies that read outer-scope values.
#include <onnx/onnx_pb.h>

#include "graph_test_util.hpp"
#include "onnx/model_io.hpp"

namespace graft::testing {
namespace {

using DT = DataType;

// ---- If ---------------------------------------------------------------------------------------

// main(c: bool, x: float[3]) = If(c, then: x + 1, else: -x)
struct IfGraph {
  ir::Graph g{"main"};
  IfGraph() {
    ir::Tensor* c = addInput(g, "c", tensorType(DT::Bool, {}));
    addInput(g, "x", tensorType(DT::Float, {3}));
    auto thenG = subgraph(g, "then");
    ir::Tensor* one = addConst(*thenG, "one", arr<float>({1}, {1}));
    thenG->addOutput(addOp(*thenG, "Add", {outer(*thenG, "x"), one}, {"t_out"})->output(0));
    auto elseG = subgraph(g, "else");
    elseG->addOutput(addOp(*elseG, "Neg", {outer(*elseG, "x")}, {"e_out"})->output(0));
    ir::Node* n = addOp(g, "If", {c}, {"y"}, attrs({{"then_branch", thenG}, {"else_branch", elseG}}));
    linkOuterReads(n);
    g.addOutput(n->output(0));
  }
};

TEST(If, RunsTheChosenBranchReadingOuterValues) {
  IfGraph t;
  std::unique_ptr<plan::Executable> exe;
  auto y = runGraph(t.g, {tv(scalar<bool>(true)), tv(arr<float>({3}, {1, 2, 3}))}, &exe);
  EXPECT_TRUE(allClose(y.at(0).tensor, arr<float>({3}, {2, 3, 4})));
  y = exe->run({tv(scalar<bool>(false)), tv(arr<float>({3}, {1, 2, 3}))});
  EXPECT_TRUE(allClose(y.at(0).tensor, arr<float>({3}, {-1, -2, -3})));
  EXPECT_EQ(t.g.tensor("y").type(), tensorType(DT::Float, {3}));
}

TEST(If, RejectsAConditionThatIsNotOneBool) {
  IfGraph t;
  std::unique_ptr<plan::Executable> exe;
  runGraph(t.g, {tv(scalar<bool>(true)), tv(arr<float>({3}, {1, 2, 3}))}, &exe);
  EXPECT_THROW(exe->run({tv(arr<bool>({2}, {true, false})), tv(arr<float>({3}, {1, 2, 3}))}), Error);
}

TEST(If, BranchesMayReturnSequencesAndAbsentOptionals) {
  ir::Graph g("main");
  ir::Tensor* c = addInput(g, "c", tensorType(DT::Bool, {}));
  addInput(g, "x", tensorType(DT::Float, {2}));
  auto thenG = subgraph(g, "then");
  thenG->addOutput(addOp(*thenG, "SequenceConstruct", {outer(*thenG, "x"), outer(*thenG, "x")}, {"t_seq"})->output(0));
  thenG->addOutput(addOp(*thenG, "Optional", {outer(*thenG, "x")}, {"t_opt"})->output(0));
  auto elseG = subgraph(g, "else");
  elseG->addOutput(addOp(*elseG, "SequenceConstruct", {outer(*elseG, "x")}, {"e_seq"})->output(0));
  elseG->addOutput(addOp(*elseG, "Optional", {}, {"e_opt"}, attrs({{"type", tensorType(DT::Float, {2})}}))->output(0));
  ir::Node* n = addOp(g, "If", {c}, {"seq", "opt"}, attrs({{"then_branch", thenG}, {"else_branch", elseG}}));
  linkOuterReads(n);
  g.addOutput(n->output(0));
  g.addOutput(n->output(1));
  std::unique_ptr<plan::Executable> exe;
  auto out = runGraph(g, {tv(scalar<bool>(true)), tv(arr<float>({2}, {5, 6}))}, &exe);
  EXPECT_EQ(seqOf(out.at(0)).size(), 2u);
  EXPECT_TRUE(out.at(1).isTensor());
  out = exe->run({tv(scalar<bool>(false)), tv(arr<float>({2}, {5, 6}))});
  EXPECT_EQ(seqOf(out.at(0)).size(), 1u);
  EXPECT_TRUE(out.at(1).isNone());
  EXPECT_EQ(g.tensor("seq").type().kind, ir::ValueKind::Sequence);
  EXPECT_EQ(g.tensor("opt").type().kind, ir::ValueKind::Optional);
}

TEST(If, BranchesMayReturnOuterValuesAndConstantsDirectly) {
  ir::Graph g("main");
  ir::Tensor* c = addInput(g, "c", tensorType(DT::Bool, {}));
  addInput(g, "x", tensorType(DT::Float, {2}));
  auto thenG = subgraph(g, "then");
  thenG->addOutput(outer(*thenG, "x"));
  auto elseG = subgraph(g, "else");
  elseG->addOutput(addConst(*elseG, "k", arr<float>({2}, {7, 7})));
  ir::Node* n = addOp(g, "If", {c}, {"y"}, attrs({{"then_branch", thenG}, {"else_branch", elseG}}));
  linkOuterReads(n);
  g.addOutput(n->output(0));
  std::unique_ptr<plan::Executable> exe;
  auto y = runGraph(g, {tv(scalar<bool>(true)), tv(arr<float>({2}, {1, 2}))}, &exe);
  EXPECT_TRUE(allClose(y.at(0).tensor, arr<float>({2}, {1, 2})));
  for (int i = 0; i < 2; ++i) {  // the branch's constant survives repeated runs
    y = exe->run({tv(scalar<bool>(false)), tv(arr<float>({2}, {1, 2}))});
    EXPECT_TRUE(allClose(y.at(0).tensor, arr<float>({2}, {7, 7})));
  }
}

TEST(If, RejectsBranchesWithTheWrongNumberOfOutputs) {
  ir::Graph g("main");
  ir::Tensor* c = addInput(g, "c", tensorType(DT::Bool, {}));
  auto thenG = subgraph(g, "then");
  thenG->addOutput(addConst(*thenG, "k1", arr<float>({1}, {1})));
  auto elseG = subgraph(g, "else");
  elseG->addOutput(addConst(*elseG, "k2", arr<float>({1}, {2})));
  elseG->addOutput(addConst(*elseG, "k3", arr<float>({1}, {3})));
  ir::Node* n = addOp(g, "If", {c}, {"y"}, attrs({{"then_branch", thenG}, {"else_branch", elseG}}));
  g.addOutput(n->output(0));
  auto backend = backends::makeReferenceBackend();
  support::ThreadPool pool(1);
  EXPECT_THROW(plan::compile(g, *backend, pool), Error);
}

// ---- Loop -------------------------------------------------------------------------------------

// Loop(M, cond, acc0) with body: acc' = acc + x; scan = acc' * x (x from the outer scope).
struct AccumulateLoop {
  ir::Graph g{"main"};
  explicit AccumulateLoop(bool withTripCount = true) {
    ir::Tensor* m = withTripCount ? addInput(g, "M", tensorType(DT::Int64, {})) : nullptr;
    ir::Tensor* cond = addInput(g, "cond", tensorType(DT::Bool, {}));
    ir::Tensor* acc0 = addInput(g, "acc0", tensorType(DT::Float, {2}));
    addInput(g, "x", tensorType(DT::Float, {2}));
    auto body = subgraph(g, "body");
    addInput(*body, "i", tensorType(DT::Int64, {}));
    ir::Tensor* cin = addInput(*body, "cin", tensorType(DT::Bool, {}));
    ir::Tensor* acc = addInput(*body, "acc", tensorType(DT::Float, {2}));
    ir::Tensor* next = addOp(*body, "Add", {acc, outer(*body, "x")}, {"acc_out"})->output(0);
    ir::Tensor* cout = addOp(*body, "Identity", {cin}, {"cout"})->output(0);
    ir::Tensor* scan = addOp(*body, "Mul", {next, outer(*body, "x")}, {"scan"})->output(0);
    body->setOutputs({cout, next, scan});
    ir::Node* n = addOp(g, "Loop", {m, cond, acc0}, {"acc_final", "scans"}, attrs({{"body", body}}));
    linkOuterReads(n);
    g.setOutputs({n->output(0), n->output(1)});
  }
};

TEST(Loop, CarriesValuesAndStacksScanOutputs) {
  AccumulateLoop t;
  std::unique_ptr<plan::Executable> exe;
  auto out = runGraph(
      t.g, {tv(scalar<int64_t>(3)), tv(scalar<bool>(true)), tv(arr<float>({2}, {0, 0})), tv(arr<float>({2}, {1, 2}))},
      &exe);
  EXPECT_TRUE(allClose(out.at(0).tensor, arr<float>({2}, {3, 6})));
  EXPECT_TRUE(allClose(out.at(1).tensor, arr<float>({3, 2}, {1, 4, 2, 8, 3, 12})));
  // The compiled body is reused: run again with other values.
  out = exe->run(
      {tv(scalar<int64_t>(2)), tv(scalar<bool>(true)), tv(arr<float>({2}, {10, 10})), tv(arr<float>({2}, {1, 1}))});
  EXPECT_TRUE(allClose(out.at(0).tensor, arr<float>({2}, {12, 12})));
  EXPECT_TRUE(allClose(out.at(1).tensor, arr<float>({2, 2}, {11, 11, 12, 12})));
}

TEST(Loop, ZeroTripsGiveTheInitialValuesAndEmptyScanOutputs) {
  AccumulateLoop t;
  std::unique_ptr<plan::Executable> exe;
  auto out = runGraph(
      t.g, {tv(scalar<int64_t>(0)), tv(scalar<bool>(true)), tv(arr<float>({2}, {7, 8})), tv(arr<float>({2}, {1, 2}))},
      &exe);
  EXPECT_TRUE(allClose(out.at(0).tensor, arr<float>({2}, {7, 8})));
  EXPECT_EQ(out.at(1).tensor.shape(), (Shape{0, 2}));
  // A false initial condition also runs no iteration.
  out = exe->run(
      {tv(scalar<int64_t>(5)), tv(scalar<bool>(false)), tv(arr<float>({2}, {7, 8})), tv(arr<float>({2}, {1, 2}))});
  EXPECT_TRUE(allClose(out.at(0).tensor, arr<float>({2}, {7, 8})));
}

TEST(Loop, ProfilingCountsBodyOpsOncePerIteration) {
  AccumulateLoop t;
  std::unique_ptr<plan::Executable> exe;
  runGraph(t.g,
           {tv(scalar<int64_t>(1)), tv(scalar<bool>(true)), tv(arr<float>({2}, {0, 0})), tv(arr<float>({2}, {1, 2}))},
           &exe);
  exe->setProfiling(true);
  exe->run({tv(scalar<int64_t>(4)), tv(scalar<bool>(true)), tv(arr<float>({2}, {0, 0})), tv(arr<float>({2}, {1, 2}))});
  int64_t adds = 0, loops = 0;
  for (const auto& e : exe->profile()) {
    if (e.opType == "Add") adds = e.calls;
    if (e.opType == "Loop") loops = e.calls;
  }
  EXPECT_EQ(adds, 4);
  EXPECT_EQ(loops, 1);
}

TEST(Loop, RejectsATripCountThatIsNotOneInt64) {
  AccumulateLoop t;
  std::unique_ptr<plan::Executable> exe;
  runGraph(t.g,
           {tv(scalar<int64_t>(1)), tv(scalar<bool>(true)), tv(arr<float>({2}, {0, 0})), tv(arr<float>({2}, {1, 2}))},
           &exe);
  EXPECT_THROW(exe->run({tv(arr<int64_t>({2}, {1, 2})), tv(scalar<bool>(true)), tv(arr<float>({2}, {0, 0})),
                         tv(arr<float>({2}, {1, 2}))}),
               Error);
}

// Loop without M: count up until the body's condition (i < limit) turns false.
TEST(Loop, WithoutTripCountRunsUntilTheBodyConditionIsFalse) {
  ir::Graph g("main");
  ir::Tensor* n0 = addInput(g, "n0", tensorType(DT::Int64, {}));
  addConst(g, "limit", scalar<int64_t>(4));
  auto body = subgraph(g, "body");
  ir::Tensor* i = addInput(*body, "i", tensorType(DT::Int64, {}));
  addInput(*body, "cin", tensorType(DT::Bool, {}));
  ir::Tensor* count = addInput(*body, "count", tensorType(DT::Int64, {}));
  ir::Tensor* one = addConst(*body, "one", scalar<int64_t>(1));
  ir::Tensor* next = addOp(*body, "Add", {count, one}, {"count_out"})->output(0);
  ir::Tensor* cout = addOp(*body, "Less", {i, outer(*body, "limit")}, {"cout"})->output(0);
  body->setOutputs({cout, next});
  ir::Node* n = addOp(g, "Loop", {nullptr, nullptr, n0}, {"count_final"}, attrs({{"body", body}}));
  linkOuterReads(n);
  g.addOutput(n->output(0));
  auto out = runGraph(g, {tv(scalar<int64_t>(100))});
  // Iterations i = 0..4 run; the one with i = 4 returns false.
  EXPECT_TRUE(allClose(out.at(0).tensor, scalar<int64_t>(105)));
}

// A loop-carried value whose shape grows every iteration, and a loop-carried sequence.
TEST(Loop, CarriedValuesMayChangeShapeAndBeSequences) {
  ir::Graph g("main");
  ir::Tensor* m = addInput(g, "M", tensorType(DT::Int64, {}));
  ir::Tensor* v0 = addInput(g, "v0", tensorType(DT::Float, {1}));
  ir::Tensor* s0 = addOp(g, "SequenceEmpty", {}, {"s0"})->output(0);
  auto body = subgraph(g, "body");
  ir::Tensor* i = addInput(*body, "i", tensorType(DT::Int64, {}));
  ir::Tensor* cin = addInput(*body, "cin", tensorType(DT::Bool, {}));
  ir::Tensor* v = addInput(*body, "v", tensorType(DT::Float));
  ir::Tensor* s = addInput(*body, "s", seqType(DT::Float));
  ir::Tensor* fi = addOp(*body, "Cast", {i}, {"fi"}, attrs({{"to", int64_t{1}}}))->output(0);
  ir::Tensor* axes = addConst(*body, "axes", arr<int64_t>({1}, {0}));
  ir::Tensor* fi1 = addOp(*body, "Unsqueeze", {fi, axes}, {"fi1"})->output(0);
  ir::Tensor* vnext = addOp(*body, "Concat", {v, fi1}, {"v_out"}, attrs({{"axis", int64_t{0}}}))->output(0);
  ir::Tensor* snext = addOp(*body, "SequenceInsert", {s, vnext}, {"s_out"})->output(0);
  ir::Tensor* cout = addOp(*body, "Identity", {cin}, {"cout"})->output(0);
  body->setOutputs({cout, vnext, snext});
  ir::Node* n = addOp(g, "Loop", {m, nullptr, v0, s0}, {"v_final", "s_final"}, attrs({{"body", body}}));
  g.setOutputs({n->output(0), n->output(1)});
  auto out = runGraph(g, {tv(scalar<int64_t>(3)), tv(arr<float>({1}, {9}))});
  EXPECT_TRUE(allClose(out.at(0).tensor, arr<float>({4}, {9, 0, 1, 2})));
  const auto& seq = seqOf(out.at(1));
  ASSERT_EQ(seq.size(), 3u);
  EXPECT_TRUE(allClose(seq[0], arr<float>({2}, {9, 0})));
  EXPECT_TRUE(allClose(seq[2], arr<float>({4}, {9, 0, 1, 2})));
  EXPECT_EQ(g.tensor("s_final").type().kind, ir::ValueKind::Sequence);
}

// A body that hands a loop-carried value straight back, and reads it as a scan output too.
TEST(Loop, BodyMayPassValuesThrough) {
  ir::Graph g("main");
  ir::Tensor* m = addInput(g, "M", tensorType(DT::Int64, {}));
  ir::Tensor* v0 = addInput(g, "v0", tensorType(DT::Int32, {2}));
  auto body = subgraph(g, "body");
  ir::Tensor* i = addInput(*body, "i", tensorType(DT::Int64, {}));
  ir::Tensor* cin = addInput(*body, "cin", tensorType(DT::Bool, {}));
  ir::Tensor* v = addInput(*body, "v", tensorType(DT::Int32, {2}));
  body->setOutputs({cin, v, i});
  ir::Node* n = addOp(g, "Loop", {m, nullptr, v0}, {"v_final", "iters"}, attrs({{"body", body}}));
  g.setOutputs({n->output(0), n->output(1)});
  auto out = runGraph(g, {tv(scalar<int64_t>(3)), tv(arr<int32_t>({2}, {4, 5}))});
  EXPECT_TRUE(allClose(out.at(0).tensor, arr<int32_t>({2}, {4, 5})));
  EXPECT_TRUE(allClose(out.at(1).tensor, arr<int64_t>({3}, {0, 1, 2})));
}

TEST(Loop, ScanOutputsOfDifferentShapesAreRejected) {
  ir::Graph g("main");
  ir::Tensor* m = addInput(g, "M", tensorType(DT::Int64, {}));
  ir::Tensor* v0 = addInput(g, "v0", tensorType(DT::Float, {1}));
  auto body = subgraph(g, "body");
  addInput(*body, "i", tensorType(DT::Int64, {}));
  ir::Tensor* cin = addInput(*body, "cin", tensorType(DT::Bool, {}));
  ir::Tensor* v = addInput(*body, "v", tensorType(DT::Float));
  ir::Tensor* vnext = addOp(*body, "Concat", {v, v}, {"v_out"}, attrs({{"axis", int64_t{0}}}))->output(0);
  ir::Tensor* cout = addOp(*body, "Identity", {cin}, {"cout"})->output(0);
  ir::Tensor* scan = addOp(*body, "Identity", {vnext}, {"scan"})->output(0);
  body->setOutputs({cout, vnext, scan});
  ir::Node* n = addOp(g, "Loop", {m, nullptr, v0}, {"v_final", "scans"}, attrs({{"body", body}}));
  g.setOutputs({n->output(0), n->output(1)});
  std::unique_ptr<plan::Executable> exe;
  auto out = runGraph(g, {tv(scalar<int64_t>(1)), tv(arr<float>({1}, {1}))}, &exe);
  EXPECT_EQ(out.at(1).tensor.shape(), (Shape{1, 2}));
  EXPECT_THROW(exe->run({tv(scalar<int64_t>(2)), tv(arr<float>({1}, {1}))}), Error);
}

// Three levels: Loop body -> If branch -> Loop body, the innermost reading the main graph's w.
TEST(Loop, NestedBodiesReadOuterValuesSeveralLevelsDeep) {
  ir::Graph g("main");
  ir::Tensor* w = addInput(g, "w", tensorType(DT::Float, {2}));
  addInput(g, "flag", tensorType(DT::Bool, {}));
  ir::Tensor* m2 = addConst(g, "M2", scalar<int64_t>(2));
  addConst(g, "M3", scalar<int64_t>(3));
  ir::Tensor* z0 = addConst(g, "z0", arr<float>({2}, {0, 0}));
  (void)w;

  auto b1 = subgraph(g, "outer_body");
  addInput(*b1, "i1", tensorType(DT::Int64, {}));
  ir::Tensor* c1 = addInput(*b1, "c1", tensorType(DT::Bool, {}));
  ir::Tensor* a1 = addInput(*b1, "a1", tensorType(DT::Float, {2}));

  auto thenG = subgraph(*b1, "then");
  auto b2 = subgraph(*thenG, "inner_body");
  addInput(*b2, "i2", tensorType(DT::Int64, {}));
  ir::Tensor* c2 = addInput(*b2, "c2", tensorType(DT::Bool, {}));
  ir::Tensor* v2 = addInput(*b2, "v2", tensorType(DT::Float, {2}));
  ir::Tensor* v2o = addOp(*b2, "Add", {v2, outer(*b2, "w")}, {"v2o"})->output(0);
  b2->setOutputs({addOp(*b2, "Identity", {c2}, {"c2o"})->output(0), v2o});
  ir::Node* inner =
      addOp(*thenG, "Loop", {outer(*thenG, "M3"), nullptr, outer(*thenG, "z0")}, {"l2"}, attrs({{"body", b2}}));
  linkOuterReads(inner);
  thenG->addOutput(inner->output(0));

  auto elseG = subgraph(*b1, "else");
  elseG->addOutput(addOp(*elseG, "Neg", {outer(*elseG, "w")}, {"neg_w"})->output(0));

  ir::Node* branch =
      addOp(*b1, "If", {outer(*b1, "flag")}, {"if_out"}, attrs({{"then_branch", thenG}, {"else_branch", elseG}}));
  linkOuterReads(branch);
  ir::Tensor* a1o = addOp(*b1, "Add", {a1, branch->output(0)}, {"a1o"})->output(0);
  b1->setOutputs({addOp(*b1, "Identity", {c1}, {"c1o"})->output(0), a1o});

  ir::Node* loop = addOp(g, "Loop", {m2, nullptr, z0}, {"y"}, attrs({{"body", b1}}));
  linkOuterReads(loop);
  g.addOutput(loop->output(0));

  std::unique_ptr<plan::Executable> exe;
  auto out = runGraph(g, {tv(arr<float>({2}, {1, -2})), tv(scalar<bool>(true))}, &exe);
  EXPECT_TRUE(allClose(out.at(0).tensor, arr<float>({2}, {6, -12})));  // 2 outer x 3 inner additions of w
  out = exe->run({tv(arr<float>({2}, {1, -2})), tv(scalar<bool>(false))});
  EXPECT_TRUE(allClose(out.at(0).tensor, arr<float>({2}, {-2, 4})));
}

// ---- Scan -------------------------------------------------------------------------------------

// Scan with one state s and one scan input x: s' = s + x_t, y_t = s'.
struct CumulativeScan {
  ir::Graph g{"main"};
  explicit CumulativeScan(ir::Attributes extra = {}, Shape xShape = {3, 2}) {
    ir::Tensor* s0 = addInput(g, "s0", tensorType(DT::Float, {2}));
    ir::Tensor* x = addInput(g, "x", tensorType(DT::Float, xShape));
    auto body = subgraph(g, "body");
    ir::Tensor* s = addInput(*body, "s", tensorType(DT::Float, {2}));
    ir::Tensor* xt = addInput(*body, "xt", tensorType(DT::Float, {2}));
    ir::Tensor* next = addOp(*body, "Add", {s, xt}, {"s_out"})->output(0);
    body->setOutputs({next, addOp(*body, "Identity", {next}, {"y_t"})->output(0)});
    ir::Attributes a = extra;
    a.set("body", body);
    a.set("num_scan_inputs", int64_t{1});
    ir::Node* n = addOp(g, "Scan", {s0, x}, {"s_final", "y"}, a);
    g.setOutputs({n->output(0), n->output(1)});
  }
};

TEST(Scan, CarriesStateAndStacksOutputs) {
  CumulativeScan t;
  auto out = runGraph(t.g, {tv(arr<float>({2}, {0, 0})), tv(arr<float>({3, 2}, {1, 2, 3, 4, 5, 6}))});
  EXPECT_TRUE(allClose(out.at(0).tensor, arr<float>({2}, {9, 12})));
  EXPECT_TRUE(allClose(out.at(1).tensor, arr<float>({3, 2}, {1, 2, 4, 6, 9, 12})));
}

TEST(Scan, AxesAndDirections) {
  // x is [2, 3]: scan along axis 1, last column first; stack y along axis 1, reversed.
  CumulativeScan t(attrs({{"scan_input_axes", std::vector<int64_t>{1}},
                          {"scan_input_directions", std::vector<int64_t>{1}},
                          {"scan_output_axes", std::vector<int64_t>{-1}},
                          {"scan_output_directions", std::vector<int64_t>{1}}}),
                   {2, 3});
  std::vector<float> x = {1, 2, 3, 4, 5, 6};
  auto out = runGraph(t.g, {tv(arr<float>({2}, {0, 0})), tv(arr<float>({2, 3}, x))});
  // Naive: step t reads column 2 - t; y_t lands in column 2 - t of the output.
  std::vector<float> s = {0, 0}, y(6);
  for (int t = 0; t < 3; ++t) {
    int col = 2 - t;
    for (int r = 0; r < 2; ++r) {
      s[r] += x[r * 3 + col];
      y[r * 3 + col] = s[r];
    }
  }
  EXPECT_TRUE(allClose(out.at(0).tensor, arr<float>({2}, s)));
  EXPECT_TRUE(allClose(out.at(1).tensor, arr<float>({2, 3}, y)));
}

TEST(Scan, EmptyScanInputsGiveTheInitialStateAndEmptyOutputs) {
  CumulativeScan t({}, {0, 2});
  auto out = runGraph(t.g, {tv(arr<float>({2}, {4, 5})), tv(NDArray(DT::Float, {0, 2}))});
  EXPECT_TRUE(allClose(out.at(0).tensor, arr<float>({2}, {4, 5})));
  EXPECT_EQ(out.at(1).tensor.shape(), (Shape{0, 2}));
}

TEST(Scan, RejectsScanInputsOfDifferentLengths) {
  ir::Graph g("main");
  ir::Tensor* a = addInput(g, "a", tensorType(DT::Float, {3}));
  ir::Tensor* b = addInput(g, "b", tensorType(DT::Float));
  auto body = subgraph(g, "body");
  ir::Tensor* at = addInput(*body, "at", tensorType(DT::Float, {}));
  ir::Tensor* bt = addInput(*body, "bt", tensorType(DT::Float, {}));
  body->addOutput(addOp(*body, "Add", {at, bt}, {"sum"})->output(0));
  ir::Node* n = addOp(g, "Scan", {a, b}, {"y"}, attrs({{"body", body}, {"num_scan_inputs", int64_t{2}}}));
  g.addOutput(n->output(0));
  std::unique_ptr<plan::Executable> exe;
  auto out = runGraph(g, {tv(arr<float>({3}, {1, 2, 3})), tv(arr<float>({3}, {10, 20, 30}))}, &exe);
  EXPECT_TRUE(allClose(out.at(0).tensor, arr<float>({3}, {11, 22, 33})));
  EXPECT_THROW(exe->run({tv(arr<float>({3}, {1, 2, 3})), tv(arr<float>({2}, {10, 20}))}), Error);
}

TEST(Scan, RejectsAttributeListsOfTheWrongLength) {
  CumulativeScan t(attrs({{"scan_input_axes", std::vector<int64_t>{0, 0}}}));
  EXPECT_THROW(runGraph(t.g, {tv(arr<float>({2}, {0, 0})), tv(arr<float>({3, 2}, {1, 2, 3, 4, 5, 6}))}), Error);
}

// Opset-8 Scan has a batch axis in front; the importer rewrites it into Scan over the batch of
// Scan over the sequence.
TEST(Scan, Opset8ModelsKeepTheirBatchAxis) {
  auto valueInfo = [](::onnx::ValueInfoProto* v, const std::string& name, std::vector<int64_t> dims) {
    v->set_name(name);
    auto* t = v->mutable_type()->mutable_tensor_type();
    t->set_elem_type(1);
    for (int64_t d : dims) t->mutable_shape()->add_dim()->set_dim_value(d);
  };
  ::onnx::ModelProto m;
  m.set_ir_version(3);
  auto* op = m.add_opset_import();
  op->set_domain("");
  op->set_version(8);
  auto* g = m.mutable_graph();
  g->set_name("scan8");
  valueInfo(g->add_input(), "init", {2, 2});
  valueInfo(g->add_input(), "x", {2, 3, 2});
  valueInfo(g->add_output(), "y", {2, 2});
  valueInfo(g->add_output(), "z", {2, 3, 2});
  auto* n = g->add_node();
  n->set_op_type("Scan");
  for (const char* i : {"", "init", "x"}) n->add_input(i);
  n->add_output("y");
  n->add_output("z");
  auto* a = n->add_attribute();
  a->set_name("num_scan_inputs");
  a->set_type(::onnx::AttributeProto::INT);
  a->set_i(1);
  a = n->add_attribute();
  a->set_name("directions");
  a->set_type(::onnx::AttributeProto::INTS);
  a->add_ints(1);
  a = n->add_attribute();
  a->set_name("body");
  a->set_type(::onnx::AttributeProto::GRAPH);
  auto* body = a->mutable_g();
  body->set_name("body");
  valueInfo(body->add_input(), "s", {2});
  valueInfo(body->add_input(), "xt", {2});
  valueInfo(body->add_output(), "s_out", {2});
  valueInfo(body->add_output(), "y_t", {2});
  auto* add = body->add_node();
  add->set_op_type("Add");
  add->add_input("s");
  add->add_input("xt");
  add->add_output("s_out");
  auto* id = body->add_node();
  id->set_op_type("Identity");
  id->add_input("s_out");
  id->add_output("y_t");
  std::string bytes;
  ASSERT_TRUE(m.SerializeToString(&bytes));
  onnxio::Model model = onnxio::loadModelBytes(bytes);
  EXPECT_EQ(model.graph->tensor("x").info(), TensorInfo(DT::Float, Shape{2, 3, 2}));
  auto out = runGraph(*model.graph, {tv(arr<float>({2, 2}, {0, 0, 10, 10})),
                                     tv(arr<float>({2, 3, 2}, {1, 2, 3, 4, 5, 6, 1, 1, 2, 2, 3, 3}))});
  // Each batch row scans its own sequence, last step first (directions = [1]).
  EXPECT_TRUE(allClose(out.at(0).tensor, arr<float>({2, 2}, {9, 12, 16, 16})));
  EXPECT_TRUE(allClose(out.at(1).tensor, arr<float>({2, 3, 2}, {5, 6, 8, 10, 9, 12, 13, 13, 15, 15, 16, 16})));
}

}  // namespace
}  // namespace graft::testing
