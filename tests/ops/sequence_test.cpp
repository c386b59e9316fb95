// Tests of src/ops/sequence.cpp: sequence construction, access, editing, splitting, joining and
// SequenceMap, with type inference of sequence-typed values.
#include "graph_test_util.hpp"

namespace graft::testing {
namespace {

using DT = DataType;

// One node over typed inputs (tensors or sequences); returns its outputs.
struct OneNode {
  ir::Graph g{"main"};
  std::vector<ir::Tensor*> ins;
  ir::Node* node = nullptr;
  OneNode(const std::string& type, std::vector<ir::ValueType> inTypes, int outputs = 1, ir::Attributes a = {}) {
    for (size_t i = 0; i < inTypes.size(); ++i)
      ins.push_back(inTypes[i].known() || !inTypes[i].isTensor() ? addInput(g, "in" + std::to_string(i), inTypes[i])
                                                                 : nullptr);
    std::vector<std::string> outs;
    for (int i = 0; i < outputs; ++i) outs.push_back("out" + std::to_string(i));
    node = addOp(g, type, ins, outs, std::move(a));
    for (ir::Tensor* t : node->outputs()) g.addOutput(t);
  }
  std::vector<ops::Value> run(std::vector<ops::Value> in) {
    std::vector<ops::Value> given;
    for (size_t i = 0; i < in.size(); ++i)
      if (ins[i]) given.push_back(std::move(in[i]));
    return runGraph(g, std::move(given));
  }
  const ir::ValueType& outType(size_t i = 0) const { return node->output(i)->type(); }
};

std::vector<NDArray> threeVectors() {
  return {arr<float>({2}, {1, 2}), arr<float>({2}, {3, 4}), arr<float>({2}, {5, 6})};
}

TEST(SequenceConstruct, BuildsASequenceAndInfersItsType) {
  OneNode t("SequenceConstruct", {tensorType(DT::Float, {2}), tensorType(DT::Float, {2})});
  auto out = t.run({tv(arr<float>({2}, {1, 2})), tv(arr<float>({2}, {3, 4}))});
  const auto& s = seqOf(out.at(0));
  ASSERT_EQ(s.size(), 2u);
  EXPECT_TRUE(allClose(s[1], arr<float>({2}, {3, 4})));
  EXPECT_EQ(t.outType().kind, ir::ValueKind::Sequence);
  EXPECT_EQ(t.outType().info.dataType(), DT::Float);
}

TEST(SequenceConstruct, RejectsMixedElementTypes) {
  OneNode t("SequenceConstruct", {tensorType(DT::Float), tensorType(DT::Float)});
  t.g.tensor("in1").setType(tensorType(DT::Int32));
  EXPECT_THROW(t.run({tv(arr<float>({1}, {1})), tv(arr<int32_t>({1}, {1}))}), Error);
}

TEST(SequenceEmpty, GivesAnEmptySequenceOfTheAttributeType) {
  OneNode t("SequenceEmpty", {}, 1, attrs({{"dtype", int64_t{7}}}));
  auto out = t.run({});
  EXPECT_TRUE(seqOf(out.at(0)).empty());
  EXPECT_EQ(t.outType(), seqType(DT::Int64));
  OneNode bad("SequenceEmpty", {}, 1, attrs({{"dtype", int64_t{99}}}));
  EXPECT_THROW(bad.run({}), Error);
}

TEST(SequenceAt, NegativePositionsCountFromTheEnd) {
  OneNode t("SequenceAt", {seqType(DT::Float), tensorType(DT::Int64, {})});
  EXPECT_TRUE(allClose(t.run({sv(threeVectors()), tv(scalar<int64_t>(-1))}).at(0).tensor, arr<float>({2}, {5, 6})));
  EXPECT_TRUE(allClose(t.run({sv(threeVectors()), tv(scalar<int64_t>(1))}).at(0).tensor, arr<float>({2}, {3, 4})));
  EXPECT_EQ(t.outType().kind, ir::ValueKind::Tensor);
  EXPECT_EQ(t.outType().info.dataType(), DT::Float);
}

TEST(SequenceAt, WorksWhenTheElementTypeIsNotKnownStatically) {
  // The input is a sequence of unknown element type: inference must keep it a sequence.
  OneNode t("SequenceAt", {ir::ValueType::sequence(TensorInfo{}), tensorType(DT::Int64, {})});
  auto out = t.run({sv(threeVectors()), tv(scalar<int64_t>(0))});
  EXPECT_TRUE(allClose(out.at(0).tensor, arr<float>({2}, {1, 2})));
  OneNode len("SequenceLength", {ir::ValueType::sequence(TensorInfo{})});
  EXPECT_TRUE(allClose(len.run({sv(threeVectors())}).at(0).tensor, scalar<int64_t>(3)));
  EXPECT_EQ(len.outType(), tensorType(DT::Int64, {}));
}

TEST(SequenceAt, RejectsPositionsOutOfRange) {
  OneNode t("SequenceAt", {seqType(DT::Float), tensorType(DT::Int64, {})});
  EXPECT_THROW(t.run({sv(threeVectors()), tv(scalar<int64_t>(3))}), Error);
  EXPECT_THROW(t.run({sv(threeVectors()), tv(scalar<int64_t>(-4))}), Error);
}

TEST(SequenceInsert, AppendsByDefaultAndInsertsAtPositions) {
  OneNode append("SequenceInsert", {seqType(DT::Float), tensorType(DT::Float, {2})});
  auto s = seqOf(append.run({sv(threeVectors()), tv(arr<float>({2}, {7, 8}))}).at(0));
  ASSERT_EQ(s.size(), 4u);
  EXPECT_TRUE(allClose(s[3], arr<float>({2}, {7, 8})));
  EXPECT_EQ(append.outType().kind, ir::ValueKind::Sequence);

  OneNode at("SequenceInsert", {seqType(DT::Float), tensorType(DT::Float, {2}), tensorType(DT::Int64, {})});
  s = seqOf(at.run({sv(threeVectors()), tv(arr<float>({2}, {7, 8})), tv(scalar<int64_t>(0))}).at(0));
  EXPECT_TRUE(allClose(s[0], arr<float>({2}, {7, 8})));
  EXPECT_TRUE(allClose(s[1], arr<float>({2}, {1, 2})));
  s = seqOf(at.run({sv(threeVectors()), tv(arr<float>({2}, {7, 8})), tv(scalar<int64_t>(3))}).at(0));
  EXPECT_TRUE(allClose(s[3], arr<float>({2}, {7, 8})));
  EXPECT_THROW(at.run({sv(threeVectors()), tv(arr<float>({2}, {7, 8})), tv(scalar<int64_t>(4))}), Error);
}

TEST(SequenceInsert, RejectsAnotherElementType) {
  OneNode t("SequenceInsert", {seqType(DT::Float), tensorType(DT::Float)});
  t.g.tensor("in1").setType(tensorType(DT::Int64));
  EXPECT_THROW(t.run({sv(threeVectors()), tv(arr<int64_t>({1}, {1}))}), Error);
}

TEST(SequenceErase, ErasesTheLastByDefault) {
  OneNode last("SequenceErase", {seqType(DT::Float)});
  auto s = seqOf(last.run({sv(threeVectors())}).at(0));
  ASSERT_EQ(s.size(), 2u);
  EXPECT_TRUE(allClose(s[1], arr<float>({2}, {3, 4})));
  OneNode at("SequenceErase", {seqType(DT::Float), tensorType(DT::Int32, {})});
  s = seqOf(at.run({sv(threeVectors()), tv(scalar<int32_t>(-3))}).at(0));
  EXPECT_TRUE(allClose(s[0], arr<float>({2}, {3, 4})));
  EXPECT_THROW(last.run({sv({})}), Error);
}

TEST(SequenceLength, CountsTensors) {
  OneNode t("SequenceLength", {seqType(DT::Float)});
  EXPECT_TRUE(allClose(t.run({sv(threeVectors())}).at(0).tensor, scalar<int64_t>(3)));
  EXPECT_TRUE(allClose(t.run({sv({})}).at(0).tensor, scalar<int64_t>(0)));
  EXPECT_EQ(t.outType(), tensorType(DT::Int64, {}));
}

TEST(SplitToSequence, WithoutSplitGivesSizeOnePartsKeptOrSqueezed) {
  NDArray x = arr<int32_t>({2, 3}, {1, 2, 3, 4, 5, 6});
  OneNode keep("SplitToSequence", {tensorType(DT::Int32, {2, 3})}, 1, attrs({{"axis", int64_t{1}}}));
  auto s = seqOf(keep.run({tv(x)}).at(0));
  ASSERT_EQ(s.size(), 3u);
  EXPECT_TRUE(allClose(s[1], arr<int32_t>({2, 1}, {2, 5})));
  EXPECT_EQ(keep.outType().kind, ir::ValueKind::Sequence);
  OneNode squeeze("SplitToSequence", {tensorType(DT::Int32, {2, 3})}, 1,
                  attrs({{"axis", int64_t{-1}}, {"keepdims", int64_t{0}}}));
  s = seqOf(squeeze.run({tv(x)}).at(0));
  EXPECT_TRUE(allClose(s[2], arr<int32_t>({2}, {3, 6})));
}

TEST(SplitToSequence, ScalarAndListSplits) {
  NDArray x = arr<float>({5, 1}, {1, 2, 3, 4, 5});
  OneNode t("SplitToSequence", {tensorType(DT::Float, {5, 1}), tensorType(DT::Int64)});
  auto s = seqOf(t.run({tv(x), tv(scalar<int64_t>(2))}).at(0));
  ASSERT_EQ(s.size(), 3u);
  EXPECT_TRUE(allClose(s[2], arr<float>({1, 1}, {5})));
  s = seqOf(t.run({tv(x), tv(arr<int64_t>({3}, {1, 0, 4}))}).at(0));
  ASSERT_EQ(s.size(), 3u);
  EXPECT_EQ(s[1].shape(), (Shape{0, 1}));
  EXPECT_TRUE(allClose(s[2], arr<float>({4, 1}, {2, 3, 4, 5})));
  EXPECT_THROW(t.run({tv(x), tv(arr<int64_t>({2}, {1, 2}))}), Error);   // does not add up to 5
  EXPECT_THROW(t.run({tv(x), tv(arr<int64_t>({2}, {-1, 6}))}), Error);  // negative
  EXPECT_THROW(t.run({tv(x), tv(scalar<int64_t>(0))}), Error);
}

TEST(SplitToSequence, StringsAreCopied) {
  OneNode t("SplitToSequence", {tensorType(DT::String, {2, 2})}, 1, attrs({{"axis", int64_t{1}}}));
  auto s = seqOf(t.run({tv(arr<std::string>({2, 2}, {"a", "b", "c", "d"}))}).at(0));
  ASSERT_EQ(s.size(), 2u);
  EXPECT_TRUE(allClose(s[1], arr<std::string>({2, 1}, {"b", "d"})));
}

TEST(ConcatFromSequence, ConcatenatesOrStacks) {
  OneNode cat("ConcatFromSequence", {seqType(DT::Float)}, 1, attrs({{"axis", int64_t{0}}}));
  EXPECT_TRUE(allClose(cat.run({sv(threeVectors())}).at(0).tensor, arr<float>({6}, {1, 2, 3, 4, 5, 6})));
  OneNode stack("ConcatFromSequence", {seqType(DT::Float)}, 1,
                attrs({{"axis", int64_t{-1}}, {"new_axis", int64_t{1}}}));
  EXPECT_TRUE(allClose(stack.run({sv(threeVectors())}).at(0).tensor, arr<float>({2, 3}, {1, 3, 5, 2, 4, 6})));
  EXPECT_EQ(stack.outType().kind, ir::ValueKind::Tensor);
}

TEST(ConcatFromSequence, RejectsEmptyAndMismatchedSequences) {
  OneNode cat("ConcatFromSequence", {seqType(DT::Float)}, 1, attrs({{"axis", int64_t{1}}}));
  EXPECT_THROW(cat.run({sv({})}), Error);
  EXPECT_THROW(cat.run({sv({arr<float>({1, 2}, {1, 2}), arr<float>({2, 2}, {1, 2, 3, 4})})}), Error);
  EXPECT_THROW(cat.run({sv(threeVectors())}), Error);  // axis 1 of 1-D elements
  EXPECT_TRUE(allClose(cat.run({sv({arr<float>({1, 1}, {1}), arr<float>({1, 2}, {2, 3})})}).at(0).tensor,
                       arr<float>({1, 3}, {1, 2, 3})));
}

// SequenceMap(seq, extra) with body: out = in + extra, extra a tensor, a sequence, or an outer value.
struct MapGraph {
  ir::Graph g{"main"};
  explicit MapGraph(bool extraIsSequence, bool readOuter = false) {
    ir::Tensor* s = addInput(g, "s", seqType(DT::Float));
    ir::Tensor* e = addInput(g, "e", extraIsSequence ? seqType(DT::Float) : tensorType(DT::Float, {2}));
    if (readOuter) addInput(g, "k", tensorType(DT::Float, {}));
    auto body = subgraph(g, "body");
    ir::Tensor* a = addInput(*body, "a", tensorType(DT::Float));
    ir::Tensor* b = addInput(*body, "b", tensorType(DT::Float));
    ir::Tensor* sum = addOp(*body, "Add", {a, b}, {"sum"})->output(0);
    if (readOuter) sum = addOp(*body, "Mul", {sum, outer(*body, "k")}, {"scaled"})->output(0);
    body->addOutput(sum);
    body->addOutput(addOp(*body, "Shape", {a}, {"shape"})->output(0));
    ir::Node* n = addOp(g, "SequenceMap", {s, e}, {"sums", "shapes"}, attrs({{"body", body}}));
    linkOuterReads(n);
    g.setOutputs({n->output(0), n->output(1)});
  }
};

TEST(SequenceMap, AppliesTheBodyToEachElementWithATensorInput) {
  MapGraph t(false);
  auto out = runGraph(t.g, {sv(threeVectors()), tv(arr<float>({2}, {10, 20}))});
  const auto& sums = seqOf(out.at(0));
  ASSERT_EQ(sums.size(), 3u);
  EXPECT_TRUE(allClose(sums[2], arr<float>({2}, {15, 26})));
  EXPECT_TRUE(allClose(seqOf(out.at(1))[0], arr<int64_t>({1}, {2})));
  EXPECT_EQ(t.g.tensor("sums").type().kind, ir::ValueKind::Sequence);
  EXPECT_EQ(t.g.tensor("shapes").type().info.dataType(), DT::Int64);
}

TEST(SequenceMap, PairsElementsOfTwoSequencesAndReadsOuterValues) {
  MapGraph t(true, true);
  std::unique_ptr<plan::Executable> exe;
  auto out = runGraph(t.g,
                      {sv({arr<float>({1}, {1}), arr<float>({3}, {1, 2, 3})}),
                       sv({arr<float>({1}, {5}), arr<float>({3}, {1, 1, 1})}), tv(scalar<float>(2))},
                      &exe);
  const auto& sums = seqOf(out.at(0));
  ASSERT_EQ(sums.size(), 2u);
  EXPECT_TRUE(allClose(sums[0], arr<float>({1}, {12})));
  EXPECT_TRUE(allClose(sums[1], arr<float>({3}, {4, 6, 8})));
  EXPECT_THROW(exe->run({sv(threeVectors()), sv({arr<float>({2}, {1, 1})}), tv(scalar<float>(2))}), Error);
  out = exe->run({sv({}), sv({}), tv(scalar<float>(2))});
  EXPECT_TRUE(seqOf(out.at(0)).empty());
}

}  // namespace
}  // namespace graft::testing
