// Gradients (VJPs) of the data-movement ops (indexing, slicing, select, generate, einsum and
// Concat), checked against central finite differences in float64. gradCheck keeps index, shape
// and pad inputs constant; gradCheckFed feeds them at run time, which exercises the VJPs' paths
// for computed inputs.
#include "op_test_util.hpp"

#include "autodiff/autodiff.hpp"
#include "ops/infer.hpp"
#include "passes/pass.hpp"
#include "plan/executable.hpp"

namespace graft::testing {
namespace {

NDArray rnd(Shape s, uint64_t seed, double lo = -1.0, double hi = 1.0) {
  return randomArray(DataType::Double, std::move(s), seed, lo, hi);
}
NDArray ints(Shape s, std::vector<int64_t> v) { return arr<int64_t>(std::move(s), std::move(v)); }

// The graph of d(sum(op(in0, ...)))/d in0 for the single-node graph of c (inputs marked in
// `constant` as constants), after infer-shapes, fold-constants and dce: the backward graph as
// autodiff builds it, to look at and to run by hand (sumGradient).
std::unique_ptr<ir::Graph> sumGradientGraph(const OpCase& c, const std::vector<bool>& constant) {
  auto g = singleNodeGraph(c, constant);
  g->otherOpsets["ai.graphcore"] = 1;
  passes::PassContext ctx;
  passes::runPipeline(*g, {"infer-shapes"}, ctx);
  ir::Attributes red;
  red.set("reduction", std::string("Sum"));
  ir::Node* loss = g->addNode("IdentityLoss", "ai.graphcore", {g->nodes()[0]->output(0)}, {"loss"}, red);
  ops::inferNode(*loss, false);
  ir::Tensor* seed = g->addInitializer("seed", arr<double>({}, {1.0}), ir::TensorKind::Constant);
  auto grads = autodiff::differentiate(*g, loss->output(0), {&g->tensor("in0")}, seed);
  g->setOutputs({grads.at(&g->tensor("in0"))});
  passes::runPipeline(*g, {"infer-shapes", "fold-constants", "dce"}, ctx);
  return g;
}

// Runs sumGradientGraph's graph on the reference backend for in0 = x.
NDArray sumGradient(const ir::Graph& g, const NDArray& x) {
  auto backend = backends::makeReferenceBackend();
  support::ThreadPool pool(1);
  auto exe = plan::compile(g, *backend, pool);
  return exe->run({ops::Value::fromTensor(x)})[0].tensor;
}

// ---- shape.cpp ---------------------------------------------------------------------------------

// Cast and CastLike between floating-point types pass dy back cast to x's type.
TEST(Cast, Gradient) {
  EXPECT_TRUE(gradCheck({"Cast", {rnd({2, 3}, 1)}, attrs({{"to", int64_t{11}}})}, {0}));  // DOUBLE
}
TEST(CastLike, Gradient) { EXPECT_TRUE(gradCheck({"CastLike", {rnd({2, 3}, 1), rnd({1}, 2)}}, {0})); }

TEST(Concat, Gradient) {
  EXPECT_TRUE(gradCheck({"Concat", {rnd({2, 3}, 1), rnd({2, 1}, 2), rnd({2, 2}, 3)}, attrs({{"axis", int64_t{-1}}})},
                        {0, 1, 2}));
  EXPECT_TRUE(gradCheck({"Concat", {rnd({1, 2, 2}, 1), rnd({3, 2, 2}, 2)}, attrs({{"axis", int64_t{0}}})}, {0, 1}));
  // Only some inputs differentiated; an empty input.
  EXPECT_TRUE(
      gradCheck({"Concat", {rnd({2, 0}, 1), rnd({2, 3}, 2), rnd({2, 2}, 3)}, attrs({{"axis", int64_t{1}}})}, {1}));
}

// ---- slicing.cpp -------------------------------------------------------------------------------

TEST(Split, Gradient) {
  EXPECT_TRUE(gradCheck({"Split", {rnd({2, 5}, 1), ints({2}, {2, 3})}, attrs({{"axis", int64_t{-1}}}), 2}, {0}));
  EXPECT_TRUE(gradCheck({"Split", {rnd({6, 2}, 1)}, attrs({{"axis", int64_t{0}}}), 3}, {0}));
}

TEST(Slice, GradientSteps) {
  NDArray x = rnd({5, 6}, 1);
  // starts, ends, axes, steps
  EXPECT_TRUE(
      gradCheck({"Slice", {x, ints({2}, {1, 0}), ints({2}, {4, 6}), ints({2}, {0, 1}), ints({2}, {1, 2})}}, {0}));
  EXPECT_TRUE(gradCheck({"Slice", {x, ints({1}, {0}), ints({1}, {100}), ints({1}, {1}), ints({1}, {4})}}, {0}));
  // Without axes and steps.
  EXPECT_TRUE(gradCheck({"Slice", {x, ints({2}, {1, 2}), ints({2}, {3, 5})}}, {0}));
}

TEST(Slice, GradientNegativeIndicesAndSteps) {
  NDArray x = rnd({4, 5, 3}, 2);
  // Reversed with step -2 on the last axis, negative start/end on the first, negative axes.
  EXPECT_TRUE(gradCheck(
      {"Slice", {x, ints({2}, {-1, -1}), ints({2}, {-100, -4}), ints({2}, {-1, 0}), ints({2}, {-2, -1})}}, {0}));
  EXPECT_TRUE(gradCheck({"Slice", {x, ints({1}, {-2}), ints({1}, {INT64_MAX}), ints({1}, {1}), NDArray{}}}, {0}));
  // An empty slice: all-zero gradient.
  EXPECT_TRUE(gradCheck({"Slice", {x, ints({1}, {3}), ints({1}, {1}), ints({1}, {0}), ints({1}, {1})}}, {0}));
}

TEST(Slice, GradientOfUnitStepsIsOnePad) {
  NDArray x = rnd({4, 6, 3}, 4);
  // Constant bounds with unit steps (negative start, an end past the axis, negative axes, an empty
  // slice): the adjoint is dy padded with zeros.
  EXPECT_TRUE(
      gradCheck({"Slice", {x, ints({2}, {-3, 1}), ints({2}, {100, 5}), ints({2}, {0, -2}), ints({2}, {1, 1})}}, {0}));
  EXPECT_TRUE(gradCheck({"Slice", {x, ints({1}, {4}), ints({1}, {2}), ints({1}, {1}), NDArray{}}}, {0}));
  // The backward graph of such a Slice holds one Pad and no Gather (the general form's).
  auto g = sumGradientGraph({"Slice", {x, ints({1}, {1}), ints({1}, {-1}), ints({1}, {1})}}, {false, true, true, true});
  int pads = 0, gathers = 0;
  for (const ir::Node* n : g->nodes()) {
    pads += n->type() == "Pad";
    gathers += n->type() == "Gather";
  }
  EXPECT_EQ(pads, 1);
  EXPECT_EQ(gathers, 0);
  // d(sum(x[:, 1:5, :]))/dx: ones on rows 1-4 of axis 1, zeros on rows 0 and 5.
  std::vector<double> want;
  for (int64_t i = 0; i < 4; ++i)
    for (int64_t j = 0; j < 6; ++j)
      for (int64_t k = 0; k < 3; ++k) want.push_back(j >= 1 && j < 5 ? 1.0 : 0.0);
  EXPECT_TRUE(allClose(sumGradient(*g, x), arr<double>({4, 6, 3}, want)));
}

TEST(Slice, GradientWithComputedStartsEnds) {
  EXPECT_TRUE(gradCheckFed(
      {"Slice", {rnd({4, 5}, 3), ints({2}, {-1, 1}), ints({2}, {-100, 5}), NDArray{}, ints({2}, {-1, 2})}}, {0}));
  EXPECT_TRUE(gradCheckFed({"Slice", {rnd({4, 5}, 3), arr<int32_t>({1}, {1}), arr<int32_t>({1}, {-1})}}, {0}));
  // Which axes are sliced must be known when the gradient is built.
  try {
    (void)gradCheckFed({"Slice", {rnd({4, 5}, 3), ints({1}, {1}), ints({1}, {3}), ints({1}, {1})}}, {0});
    FAIL() << "expected graft::Error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("constant axes"), std::string::npos) << e.what();
  }
}

TEST(Expand, Gradient) {
  EXPECT_TRUE(gradCheck({"Expand", {rnd({3, 1}, 1), ints({3}, {2, 3, 4})}}, {0}));
  EXPECT_TRUE(gradCheck({"Expand", {rnd({1, 4}, 1), ints({1}, {1})}}, {0}));
  EXPECT_TRUE(gradCheckFed({"Expand", {rnd({2, 1, 3}, 1), ints({2}, {4, 1})}}, {0}));
}

TEST(Tile, Gradient) {
  EXPECT_TRUE(gradCheck({"Tile", {rnd({2, 3}, 1), ints({2}, {2, 1})}}, {0}));
  EXPECT_TRUE(gradCheck({"Tile", {rnd({2, 1, 3}, 1), ints({3}, {1, 3, 2})}}, {0}));
  EXPECT_TRUE(gradCheckFed({"Tile", {rnd({3, 2}, 1), ints({2}, {2, 3})}}, {0}));
}

TEST(Pad, GradientConstant) {
  NDArray x = rnd({3, 4}, 1);
  EXPECT_TRUE(gradCheck({"Pad", {x, ints({4}, {1, 2, 0, 1})}}, {0}));
  // Negative pads crop.
  EXPECT_TRUE(gradCheck({"Pad", {x, ints({4}, {-1, 2, 1, -2})}}, {0}));
  // The constant value gets the gradient of the padded elements.
  EXPECT_TRUE(gradCheck({"Pad", {x, ints({4}, {1, -1, 0, 2}), arr<double>({}, {0.5})}}, {0, 2}));
  EXPECT_TRUE(gradCheckFed({"Pad", {x, ints({4}, {2, -1, 1, 1}), arr<double>({}, {-0.5})}}, {0, 2}));
}

TEST(Pad, GradientReflectAndEdge) {
  NDArray x = rnd({3, 4}, 2);
  for (const char* mode : {"reflect", "edge"}) {
    EXPECT_TRUE(gradCheck({"Pad", {x, ints({4}, {2, 1, 1, 3})}, attrs({{"mode", std::string(mode)}})}, {0})) << mode;
    EXPECT_TRUE(gradCheck({"Pad", {x, ints({4}, {0, -1, 2, 0})}, attrs({{"mode", std::string(mode)}})}, {0})) << mode;
    // The constant value is unused: its gradient is zero.
    EXPECT_TRUE(gradCheck(
        {"Pad", {x, ints({4}, {1, 1, 1, 1}), arr<double>({}, {2.0})}, attrs({{"mode", std::string(mode)}})}, {0, 2}))
        << mode;
  }
  // Size-1 axes, and pads wider than the axis, which reflect repeatedly.
  EXPECT_TRUE(
      gradCheck({"Pad", {rnd({1, 3}, 3), ints({4}, {2, 1, 1, 0})}, attrs({{"mode", std::string("reflect")}})}, {0}));
  EXPECT_TRUE(
      gradCheck({"Pad", {rnd({2, 3}, 3), ints({4}, {0, 5, 0, 4})}, attrs({{"mode", std::string("reflect")}})}, {0}));
}

TEST(Pad, GradientOfReflectNeedsConstantPads) {
  EXPECT_THROW((void)gradCheckFed(
                   {"Pad", {rnd({3, 4}, 2), ints({4}, {1, 1, 1, 1})}, attrs({{"mode", std::string("edge")}})}, {0}),
               Error);
}

TEST(ReverseSequence, Gradient) {
  EXPECT_TRUE(gradCheck({"ReverseSequence", {rnd({4, 3, 2}, 1), ints({3}, {4, 1, 2})}}, {0}));
  EXPECT_TRUE(gradCheck({"ReverseSequence",
                         {rnd({3, 4}, 2), ints({3}, {0, 3, 4})},
                         attrs({{"batch_axis", int64_t{0}}, {"time_axis", int64_t{1}}})},
                        {0}));
}

TEST(Trilu, Gradient) {
  NDArray x = rnd({2, 3, 4}, 1);
  EXPECT_TRUE(gradCheck({"Trilu", {x}}, {0}));
  EXPECT_TRUE(gradCheck({"Trilu", {x, ints({}, {1})}, attrs({{"upper", int64_t{0}}})}, {0}));
  EXPECT_TRUE(gradCheck({"Trilu", {x, ints({}, {-1})}}, {0}));
}

// ---- indexing.cpp ------------------------------------------------------------------------------

TEST(Gather, GradientEmbeddingRepeatedIndicesAccumulate) {
  NDArray table = rnd({5, 3}, 1);
  EXPECT_TRUE(gradCheck({"Gather", {table, ints({2, 3}, {1, 3, 1, -1, 3, 1})}}, {0}));
  // The same, checked by hand: d(sum(Gather(W, idx)))/dW counts each row's uses.
  auto g = sumGradientGraph({"Gather", {table, ints({4}, {2, 0, 2, -3})}}, {false, true});
  EXPECT_TRUE(allClose(sumGradient(*g, table), arr<double>({5, 3}, {1, 1, 1, 0, 0, 0, 3, 3, 3, 0, 0, 0, 0, 0, 0})));
}

TEST(Gather, GradientOtherAxes) {
  NDArray x = rnd({3, 4, 2}, 2);
  EXPECT_TRUE(gradCheck({"Gather", {x, ints({3}, {0, 3, 0})}, attrs({{"axis", int64_t{1}}})}, {0}));
  EXPECT_TRUE(gradCheck({"Gather", {x, ints({2, 2}, {1, -1, 1, 0})}, attrs({{"axis", int64_t{-1}}})}, {0}));
  EXPECT_TRUE(gradCheck({"Gather", {x, ints({}, {-2})}, attrs({{"axis", int64_t{1}}})}, {0}));  // scalar index
  EXPECT_TRUE(gradCheck({"Gather", {x, arr<int32_t>({2}, {2, 2})}}, {0}));                      // INT32 indices
  EXPECT_TRUE(gradCheckFed({"Gather", {x, ints({2, 1}, {1, 1})}, attrs({{"axis", int64_t{1}}})}, {0}));
}

TEST(GatherElements, Gradient) {
  NDArray x = rnd({3, 4}, 1);
  EXPECT_TRUE(gradCheck({"GatherElements", {x, ints({2, 4}, {0, 2, 2, 0, -1, 1, 0, 0})}}, {0}));
  EXPECT_TRUE(
      gradCheck({"GatherElements", {x, ints({3, 2}, {3, 3, 0, -4, 1, 1})}, attrs({{"axis", int64_t{-1}}})}, {0}));
}

TEST(GatherND, Gradient) {
  NDArray x = rnd({3, 4, 2}, 1);
  // Whole rows (k = 1) with repeats, single elements (k = 3), negative indices.
  EXPECT_TRUE(gradCheck({"GatherND", {x, ints({3, 1}, {2, 0, 2})}}, {0}));
  EXPECT_TRUE(gradCheck({"GatherND", {x, ints({2, 2, 3}, {0, 1, 1, 2, 3, 0, 0, 1, 1, -1, -1, -1})}}, {0}));
  // batch_dims: each batch indexes its own slice.
  EXPECT_TRUE(
      gradCheck({"GatherND", {x, ints({3, 2, 1}, {1, 1, 0, 3, -1, 2})}, attrs({{"batch_dims", int64_t{1}}})}, {0}));
  EXPECT_TRUE(gradCheck(
      {"GatherND", {x, ints({3, 4, 1}, {0, 1, 1, 0, 1, 1, 0, 0, 1, 0, 0, 0})}, attrs({{"batch_dims", int64_t{2}}})},
      {0}));
  EXPECT_TRUE(
      gradCheckFed({"GatherND", {x, ints({3, 1, 2}, {1, 0, 3, 1, 0, 0})}, attrs({{"batch_dims", int64_t{1}}})}, {0}));
}

TEST(ScatterElements, Gradient) {
  NDArray data = rnd({3, 4}, 1), upd = rnd({2, 3}, 2);
  NDArray idx = ints({2, 3}, {1, 0, 2, 0, 2, -3});
  EXPECT_TRUE(gradCheck({"ScatterElements", {data, idx, upd}}, {0, 2}));
  EXPECT_TRUE(gradCheck(
      {"ScatterElements", {data, ints({2, 3}, {3, 0, -1, 1, 2, 2}), upd}, attrs({{"axis", int64_t{-1}}})}, {0, 2}));
  EXPECT_TRUE(gradCheck({"ScatterElements", {data, idx, upd}, attrs({{"reduction", std::string("add")}})}, {0, 2}));
}

TEST(ScatterElements, GradientWithRepeatedIndicesFollowsTheLastWrite) {
  // Reduction none keeps the last of repeated writes: earlier updates get no gradient.
  NDArray data = rnd({4}, 1), upd = rnd({4}, 2);
  EXPECT_TRUE(gradCheck({"ScatterElements", {data, ints({4}, {1, 3, 1, -3}), upd}}, {0, 2}));
  // Repeated writes add up with reduction add.
  EXPECT_TRUE(gradCheck(
      {"ScatterElements", {data, ints({4}, {1, 3, 1, -3}), upd}, attrs({{"reduction", std::string("add")}})}, {0, 2}));
}

TEST(ScatterElements, GradientOfMulReductionIsRejected) {
  EXPECT_THROW(
      (void)gradCheck(
          {"ScatterElements", {rnd({3}, 1), ints({1}, {0}), rnd({1}, 2)}, attrs({{"reduction", std::string("mul")}})},
          {0}),
      Error);
}

TEST(ScatterND, Gradient) {
  NDArray data = rnd({4, 3}, 1);
  EXPECT_TRUE(gradCheck({"ScatterND", {data, ints({2, 1}, {2, -4}), rnd({2, 3}, 2)}}, {0, 2}));
  EXPECT_TRUE(gradCheck({"ScatterND", {data, ints({3, 2}, {0, 0, 3, 2, 1, 1}), rnd({3}, 3)}}, {0, 2}));
  // Repeated rows: the last write wins (none) or they add up (add).
  NDArray rep = ints({3, 1}, {1, 3, 1});
  EXPECT_TRUE(gradCheck({"ScatterND", {data, rep, rnd({3, 3}, 4)}}, {0, 2}));
  EXPECT_TRUE(
      gradCheck({"ScatterND", {data, rep, rnd({3, 3}, 4)}, attrs({{"reduction", std::string("add")}})}, {0, 2}));
  EXPECT_TRUE(gradCheckFed({"ScatterND", {data, rep, rnd({3, 3}, 4)}}, {0, 2}));
}

// ---- select.cpp --------------------------------------------------------------------------------

TEST(Compress, Gradient) {
  NDArray x = rnd({3, 4}, 1);
  EXPECT_TRUE(
      gradCheck({"Compress", {x, arr<bool>({4}, {true, false, true, true})}, attrs({{"axis", int64_t{1}}})}, {0}));
  // A condition shorter than the axis; a negative axis.
  EXPECT_TRUE(gradCheck({"Compress", {x, arr<bool>({2}, {false, true})}, attrs({{"axis", int64_t{-2}}})}, {0}));
  // Without an axis the input is flattened.
  EXPECT_TRUE(gradCheck({"Compress", {x, arr<bool>({6}, {true, false, false, true, true, false})}}, {0}));
  EXPECT_TRUE(gradCheckFed({"Compress", {x, arr<bool>({3}, {true, false, true})}, attrs({{"axis", int64_t{0}}})}, {0}));
  // Nothing selected.
  EXPECT_TRUE(gradCheck({"Compress", {x, arr<bool>({3}, {false, false, false})}, attrs({{"axis", int64_t{0}}})}, {0}));
}

// ---- generate.cpp ------------------------------------------------------------------------------

TEST(Shrink, Gradient) {
  EXPECT_TRUE(gradCheck(
      {"Shrink", {arr<double>({6}, {-2.0, -0.7, -0.2, 0.3, 0.9, 1.7})}, attrs({{"lambd", 0.5f}, {"bias", 0.25f}})},
      {0}));
}

TEST(Range, GradientOfStartAndDelta) {
  EXPECT_TRUE(gradCheck({"Range", {arr<double>({}, {0.3}), arr<double>({}, {2.0}), arr<double>({}, {0.5})}}, {0, 2}));
  EXPECT_TRUE(gradCheck({"Range", {arr<double>({}, {1.0}), arr<double>({}, {-1.2}), arr<double>({}, {-0.7})}}, {0, 2}));
}

TEST(OneHot, GradientOfValues) {
  EXPECT_TRUE(gradCheck({"OneHot", {ints({2, 2}, {0, 2, -1, 1}), ints({}, {3}), arr<double>({2}, {-0.5, 2.0})}}, {2}));
  EXPECT_TRUE(gradCheck(
      {"OneHot", {ints({3}, {1, 0, 3}), ints({}, {4}), arr<double>({2}, {0.1, 0.9})}, attrs({{"axis", int64_t{0}}})},
      {2}));
}

TEST(EyeLike, NoGradientFlowsButTheLossMayDependOnIt) {
  // loss = sum(EyeLike(x) + x): x's gradient is all ones, from the Add only.
  ir::Graph g("eyelike");
  g.otherOpsets["ai.graphcore"] = 1;
  ir::Tensor* x =
      g.addTensor("x", ir::ValueType::tensor(TensorInfo(DataType::Double, Shape{2, 3})), ir::TensorKind::Input);
  g.addInput(x);
  ir::Node* eye = g.addNode("EyeLike", "", {x}, {"eye"});
  ir::Node* add = g.addNode("Add", "", {eye->output(0), x}, {"sum"});
  ir::Attributes red;
  red.set("reduction", std::string("Sum"));
  ir::Node* loss = g.addNode("IdentityLoss", "ai.graphcore", {add->output(0)}, {"loss"}, red);
  passes::PassContext ctx;
  passes::runPipeline(g, {"infer-shapes"}, ctx);
  ir::Tensor* seed = g.addInitializer("seed", arr<double>({}, {1.0}), ir::TensorKind::Constant);
  auto grads = autodiff::differentiate(g, loss->output(0), {x}, seed);
  g.setOutputs({grads.at(x)});
  passes::runPipeline(g, {"infer-shapes", "dce"}, ctx);
  auto backend = backends::makeReferenceBackend();
  support::ThreadPool pool(1);
  auto out = plan::compile(g, *backend, pool)->run({ops::Value::fromTensor(rnd({2, 3}, 1))});
  EXPECT_TRUE(allClose(out[0].tensor, arr<double>({2, 3}, {1, 1, 1, 1, 1, 1})));
}

// ---- einsum.cpp --------------------------------------------------------------------------------

void einsum(const std::string& eq, std::vector<NDArray> in, std::vector<int> wrt = {}) {
  if (wrt.empty())
    for (size_t i = 0; i < in.size(); ++i) wrt.push_back(static_cast<int>(i));
  EXPECT_TRUE(gradCheck({"Einsum", std::move(in), attrs({{"equation", eq}})}, wrt)) << eq;
}

TEST(Einsum, GradientContractions) {
  einsum("ij,jk->ik", {rnd({2, 3}, 1), rnd({3, 4}, 2)});
  einsum("bij,bjk->bik", {rnd({2, 2, 3}, 1), rnd({2, 3, 2}, 2)});
  einsum("ij,jk", {rnd({2, 3}, 1), rnd({3, 4}, 2)});  // implicit output
  einsum("ij,jk,kl->li", {rnd({2, 3}, 1), rnd({3, 2}, 2), rnd({2, 2}, 3)});
  einsum("i,j->ij", {rnd({3}, 1), rnd({2}, 2)});
  einsum("i,i->", {rnd({4}, 1), rnd({4}, 2)});
}

TEST(Einsum, GradientTransposesAndSums) {
  einsum("ij->ji", {rnd({2, 3}, 1)});
  einsum("ijk->ki", {rnd({2, 3, 2}, 1)});  // j only in the operand: summed, broadcast back
  einsum("ij->", {rnd({2, 3}, 1)});
  einsum("ba", {rnd({2, 3}, 1)});                        // implicit: sorted output "ab"
  einsum("ij,kj->i", {rnd({2, 3}, 1), rnd({4, 3}, 2)});  // k only in operand 1
}

TEST(Einsum, GradientEllipsisAndBroadcasting) {
  // ONNX's shape inference wants ellipses of one rank; their dimensions broadcast both ways.
  einsum("...ij,...jk->...ik", {rnd({2, 1, 2, 3}, 1), rnd({1, 3, 3, 2}, 2)});
  einsum("...ij,jk", {rnd({2, 2, 3}, 1), rnd({3, 2}, 2)});
  einsum("i...->...", {rnd({3, 2, 2}, 1)});
  // A size-1 label broadcasts against the other operand.
  einsum("ij,jk->ik", {rnd({2, 1}, 1), rnd({3, 4}, 2)});
  einsum("ij,jk->ik", {rnd({2, 3}, 1), rnd({1, 4}, 2)});
}

TEST(Einsum, GradientThroughADiagonalOfAnotherOperand) {
  // Operand 0 is read on its diagonal; operand 1 can still be differentiated.
  einsum("ii,i->i", {rnd({3, 3}, 1), rnd({3}, 2)}, {1});
}

TEST(Einsum, GradientOfADiagonalIsRejectedNamingTheNode) {
  try {
    (void)gradCheck({"Einsum", {rnd({3, 3}, 1)}, attrs({{"equation", std::string("ii->i")}})}, {0});
    FAIL() << "expected graft::Error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("node"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("diagonal"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace graft::testing
