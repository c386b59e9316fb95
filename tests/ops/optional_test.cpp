// Tests of src/ops/optional.cpp: optionals holding tensors or sequences, and absent optionals.
#include "graph_test_util.hpp"

namespace graft::testing {
namespace {

using DT = DataType;

// Optional(x?) -> OptionalHasElement, OptionalGetElement.
struct OptionalGraph {
  ir::Graph g{"main"};
  ir::Node* opt = nullptr;
  OptionalGraph(std::optional<ir::ValueType> inputType, ir::Attributes a = {}) {
    ir::Tensor* x = inputType ? addInput(g, "x", *inputType) : nullptr;
    opt = addOp(g, "Optional", {x}, {"opt"}, std::move(a));
    ir::Tensor* has = addOp(g, "OptionalHasElement", {opt->output(0)}, {"has"})->output(0);
    ir::Tensor* get = addOp(g, "OptionalGetElement", {opt->output(0)}, {"get"})->output(0);
    g.setOutputs({opt->output(0), has, get});
  }
};

TEST(Optional, WrapsATensorAndInfersAnOptionalType) {
  OptionalGraph t(tensorType(DT::Float, {2}));
  auto out = runGraph(t.g, {tv(arr<float>({2}, {1, 2}))});
  EXPECT_TRUE(allClose(out.at(0).tensor, arr<float>({2}, {1, 2})));
  const ir::ValueType& type = t.g.tensor("opt").type();
  EXPECT_EQ(type.kind, ir::ValueKind::Optional);
  EXPECT_EQ(type.optionalOf, ir::ValueKind::Tensor);
  EXPECT_EQ(type.info.dataType(), DT::Float);
}

TEST(Optional, WithoutInputIsAbsent) {
  ir::Graph g("main");
  ir::Node* opt = addOp(g, "Optional", {}, {"opt"}, attrs({{"type", seqType(DT::Int32)}}));
  g.addOutput(opt->output(0));
  auto out = runGraph(g, {});
  EXPECT_TRUE(out.at(0).isNone());
  EXPECT_EQ(g.tensor("opt").type().kind, ir::ValueKind::Optional);
  EXPECT_EQ(g.tensor("opt").type().optionalOf, ir::ValueKind::Sequence);
}

TEST(Optional, WithoutInputNeedsAType) {
  ir::Graph g("main");
  ir::Node* opt = addOp(g, "Optional", {}, {"opt"});
  g.addOutput(opt->output(0));
  auto backend = backends::makeReferenceBackend();
  support::ThreadPool pool(1);
  EXPECT_THROW(plan::compile(g, *backend, pool), Error);
}

TEST(OptionalHasElement, TrueForPresentFalseForAbsentOrMissing) {
  OptionalGraph t(tensorType(DT::Float, {1}));
  auto out = runGraph(t.g, {tv(arr<float>({1}, {3}))});
  EXPECT_TRUE(allClose(out.at(1).tensor, scalar<bool>(true)));
  EXPECT_EQ(t.g.tensor("has").type(), tensorType(DT::Bool, {}));

  // Fed directly with an absent optional, and with the input omitted (opset 18 style).
  ir::Graph g("main");
  ir::Tensor* x = addInput(g, "x", ir::ValueType::optional(ir::ValueKind::Tensor, TensorInfo(DT::Float, Shape{1})));
  g.addOutput(addOp(g, "OptionalHasElement", {x}, {"has"})->output(0));
  out = runGraph(g, {ops::Value::none()});
  EXPECT_TRUE(allClose(out.at(0).tensor, scalar<bool>(false)));
  ir::Graph g2("main");
  g2.addOutput(addOp(g2, "OptionalHasElement", {nullptr}, {"has"})->output(0));
  auto backend = backends::makeReferenceBackend();
  support::ThreadPool pool(1);
  EXPECT_TRUE(allClose(plan::compile(g2, *backend, pool)->run({}).at(0).tensor, scalar<bool>(false)));
}

TEST(OptionalGetElement, ReturnsTheTensorOrSequence) {
  OptionalGraph t(tensorType(DT::Int64, {3}));
  auto out = runGraph(t.g, {tv(arr<int64_t>({3}, {4, 5, 6}))});
  EXPECT_TRUE(allClose(out.at(2).tensor, arr<int64_t>({3}, {4, 5, 6})));
  EXPECT_EQ(t.g.tensor("get").type().kind, ir::ValueKind::Tensor);

  OptionalGraph s(seqType(DT::Float));
  out = runGraph(s.g, {sv({arr<float>({1}, {1}), arr<float>({1}, {2})})});
  EXPECT_EQ(seqOf(out.at(2)).size(), 2u);
  EXPECT_TRUE(allClose(out.at(1).tensor, scalar<bool>(true)));
  EXPECT_EQ(s.g.tensor("get").type().kind, ir::ValueKind::Sequence);
}

TEST(OptionalGetElement, KeepsKindsWhenElementTypesAreUnknown) {
  // An optional of unknown element type still infers; an unknown tensor fed to Optional becomes
  // an optional.
  ir::Graph g("main");
  ir::Tensor* x = addInput(g, "x", ir::ValueType::optional(ir::ValueKind::Sequence, TensorInfo{}));
  ir::Tensor* y = addOp(g, "OptionalGetElement", {x}, {"y"})->output(0);
  ir::Tensor* n = addOp(g, "SequenceLength", {y}, {"n"})->output(0);
  g.setOutputs({y, n});
  auto out = runGraph(g, {sv({arr<float>({1}, {1})})});
  EXPECT_TRUE(allClose(out.at(1).tensor, scalar<int64_t>(1)));
  EXPECT_EQ(g.tensor("y").type().kind, ir::ValueKind::Sequence);
}

TEST(OptionalGetElement, RejectsAnAbsentOptional) {
  ir::Graph g("main");
  ir::Tensor* x = addInput(g, "x", ir::ValueType::optional(ir::ValueKind::Tensor, TensorInfo(DT::Float, Shape{1})));
  g.addOutput(addOp(g, "OptionalGetElement", {x}, {"y"})->output(0));
  std::unique_ptr<plan::Executable> exe;
  auto out = runGraph(g, {tv(arr<float>({1}, {7}))}, &exe);
  EXPECT_TRUE(allClose(out.at(0).tensor, arr<float>({1}, {7})));
  EXPECT_THROW(exe->run({ops::Value::none()}), Error);
}

}  // namespace
}  // namespace graft::testing
