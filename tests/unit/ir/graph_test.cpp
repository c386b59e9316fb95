// ir: graph editing, uses, scheduling, cloning, the verifier and the printer.
#include <gtest/gtest.h>

#include <graft/error.hpp>

#include <algorithm>

#include "ir/graph.hpp"

namespace graft::ir {
namespace {

ValueType f32(Shape s) { return ValueType::tensor(TensorInfo(DataType::Float, s)); }

// x -> Relu -> a -> Neg -> b ; output b
struct Chain {
  Graph g{"chain"};
  Tensor* x;
  Node* relu;
  Node* neg;
  Chain() {
    x = g.addTensor("x", f32({2}), TensorKind::Input);
    g.addInput(x);
    relu = g.addNode("Relu", "", {x}, {"a"});
    neg = g.addNode("Neg", "", {relu->output(0)}, {"b"}, {}, "negate");
    g.addOutput(neg->output(0));
  }
};

bool hasUse(const Tensor* t, const Node* n, int index, bool implicit = false) {
  const auto& u = t->uses();
  return std::find(u.begin(), u.end(), Use{const_cast<Node*>(n), index, implicit}) != u.end();
}

std::string errorOf(const std::function<void()>& f) {
  try {
    f();
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

TEST(Graph, AddNodeLinksProducersAndUses) {
  Chain c;
  Tensor* a = &c.g.tensor("a");
  EXPECT_EQ(a->producer(), c.relu);
  EXPECT_EQ(a->producerIndex(), 0);
  EXPECT_EQ(a->kind(), TensorKind::Activation);
  EXPECT_TRUE(hasUse(c.x, c.relu, 0));
  EXPECT_TRUE(hasUse(a, c.neg, 0));
  EXPECT_TRUE(c.g.tensor("b").isGraphOutput());
  EXPECT_FALSE(a->isGraphOutput());
  EXPECT_EQ(c.g.numNodes(), 2u);
  EXPECT_EQ(c.neg->describe(), "Neg node 'negate'");
  EXPECT_EQ(c.relu->describe(), "Relu node (output 'a')");
  verifyGraph(c.g);
}

TEST(Graph, SetInputMovesTheUse) {
  Chain c;
  Tensor* y = c.g.addTensor("y", f32({2}), TensorKind::Input);
  c.neg->setInput(0, y);
  EXPECT_FALSE(hasUse(&c.g.tensor("a"), c.neg, 0));
  EXPECT_TRUE(hasUse(y, c.neg, 0));
  c.neg->addInput(nullptr);  // an omitted optional input
  EXPECT_EQ(c.neg->numInputs(), 2u);
  EXPECT_FALSE(c.neg->hasInput(1));
}

TEST(Graph, DuplicateAndEmptyIdsAreErrors) {
  Chain c;
  EXPECT_NE(errorOf([&] { c.g.addTensor("a", f32({1}), TensorKind::Activation); }).find("'a' is defined twice"),
            std::string::npos);
  EXPECT_NE(errorOf([&] { c.g.addTensor("", f32({1}), TensorKind::Activation); }).find("non-empty id"), std::string::npos);
  EXPECT_NE(errorOf([&] { c.g.tensor("missing"); }).find("'missing'"), std::string::npos);
  // A second producer for 'a'.
  EXPECT_NE(errorOf([&] { c.g.addNode("Abs", "", {c.x}, {"a"}); }).find("already produced"), std::string::npos);
  // A node cannot produce a graph input.
  EXPECT_NE(errorOf([&] { c.g.addNode("Abs", "", {c.x}, {"x"}); }).find("'x'"), std::string::npos);
}

TEST(Graph, UniqueIdSkipsTakenIds) {
  Chain c;
  EXPECT_EQ(c.g.uniqueId("fresh"), "fresh");
  EXPECT_EQ(c.g.uniqueId("a"), "a_1");
  c.g.addTensor("a_1", f32({1}), TensorKind::Activation);
  EXPECT_EQ(c.g.uniqueId("a"), "a_2");
  Graph sub("sub", &c.g);
  EXPECT_EQ(sub.uniqueId("x"), "x_1");  // taken in the parent
}

TEST(Graph, ReplaceAllUsesRewiresNodesImplicitInputsAndOutputs) {
  Chain c;
  Tensor* a = &c.g.tensor("a");
  Tensor* b = &c.g.tensor("b");
  Node* user = c.g.addNode("Identity", "", {a}, {"c"});
  user->setImplicitInputs({a});
  Tensor* z = c.g.addTensor("z", f32({2}), TensorKind::Input);
  c.g.replaceAllUses(a, z);
  EXPECT_TRUE(a->uses().empty());
  EXPECT_EQ(c.neg->input(0), z);
  EXPECT_EQ(user->input(0), z);
  EXPECT_EQ(user->implicitInputs()[0], z);
  EXPECT_TRUE(hasUse(z, user, 0, /*implicit=*/true));
  EXPECT_EQ(z->uses().size(), 3u);
  // Graph outputs follow too.
  c.g.replaceAllUses(b, z);
  EXPECT_EQ(c.g.outputs()[0], z);
  c.g.replaceAllUses(z, z);  // no-op
  EXPECT_EQ(z->uses().size(), 3u);
}

TEST(Graph, RemoveNodeAndTensor) {
  Chain c;
  Tensor* a = &c.g.tensor("a");
  Node* extra = c.g.addNode("Abs", "", {a}, {"unused"});
  c.g.removeNode(extra);
  EXPECT_FALSE(hasUse(a, extra, 0));
  Tensor* unused = &c.g.tensor("unused");
  EXPECT_EQ(unused->producer(), nullptr);
  c.g.removeTensor(unused);
  EXPECT_FALSE(c.g.hasTensor("unused"));
  EXPECT_EQ(c.g.numNodes(), 2u);
  // A connected tensor cannot be removed.
  EXPECT_THROW(c.g.removeTensor(a), InternalError);
  verifyGraph(c.g);
}

TEST(Graph, ScheduleIsTopologicalAndFollowsInsertionOrder) {
  Graph g("g");
  Tensor* x = g.addTensor("x", f32({1}), TensorKind::Input);
  g.addInput(x);
  // Inserted out of order: c reads b, which is produced by a later node.
  g.addTensor("b", f32({1}), TensorKind::Activation);
  Node* nc = g.addNode("Neg", "", {&g.tensor("b")}, {"c"});
  Node* na = g.addNode("Relu", "", {x}, {"a"});
  Node* nb = g.addNode("Abs", "", {&g.tensor("a")}, {"b"});
  Node* nd = g.addNode("Sigmoid", "", {x}, {"d"});
  std::vector<Node*> order = g.schedule();
  ASSERT_EQ(order.size(), 4u);
  auto pos = [&](Node* n) { return std::find(order.begin(), order.end(), n) - order.begin(); };
  EXPECT_LT(pos(na), pos(nb));
  EXPECT_LT(pos(nb), pos(nc));
  // Among ready nodes the earlier inserted goes first: a (id 1) before d (id 3).
  EXPECT_EQ(order[0], na);
  EXPECT_LT(pos(na), pos(nd));
}

TEST(Graph, ScheduleRunsAnEagerNodeAsSoonAsItIsReady) {
  // x -> a -> b -> c, and s reads a. Without the flag s (added last) runs last; eager, it runs
  // right after a, its only producer, although b was added before it. Cloning keeps the flag.
  Graph g("g");
  Tensor* x = g.addTensor("x", f32({1}), TensorKind::Input);
  g.addInput(x);
  Node* na = g.addNode("Relu", "", {x}, {"a"});
  Node* nb = g.addNode("Neg", "", {&g.tensor("a")}, {"b"});
  Node* nc = g.addNode("Abs", "", {&g.tensor("b")}, {"c"});
  Node* ns = g.addNode("Sigmoid", "", {&g.tensor("a")}, {"s"});
  EXPECT_EQ(g.schedule(), (std::vector<Node*>{na, nb, nc, ns}));
  ns->eager = true;
  EXPECT_EQ(g.schedule(), (std::vector<Node*>{na, ns, nb, nc}));
  auto copy = cloneGraph(g);
  std::vector<std::string> types;
  for (const Node* n : copy->schedule()) types.push_back(n->type());
  EXPECT_EQ(types, (std::vector<std::string>{"Relu", "Sigmoid", "Neg", "Abs"}));
}

TEST(Graph, ScheduleReportsACycle) {
  Graph g("cyclic");
  g.addTensor("t2", f32({1}), TensorKind::Activation);
  g.addNode("Relu", "", {&g.tensor("t2")}, {"t1"}, {}, "first");
  g.addNode("Neg", "", {&g.tensor("t1")}, {"t2"}, {}, "second");
  std::string msg = errorOf([&] { g.schedule(); });
  EXPECT_NE(msg.find("cycle"), std::string::npos) << msg;
  EXPECT_NE(msg.find("graph 'cyclic'"), std::string::npos) << msg;
  EXPECT_TRUE(msg.find("'first'") != std::string::npos || msg.find("'second'") != std::string::npos) << msg;
  EXPECT_NE(errorOf([&] { verifyGraph(g); }).find("cycle"), std::string::npos);
}

TEST(Graph, TypedAttributeGetters) {
  Graph g("g");
  Attributes a;
  a.set("axis", int64_t{2});
  a.set("alpha", 0.5f);
  a.set("mode", std::string("linear"));
  a.set("perm", std::vector<int64_t>{1, 0});
  Node* n = g.addNode("Foo", "", {}, {"y"}, a, "foo");
  EXPECT_EQ(n->attrInt("axis"), 2);
  EXPECT_EQ(n->attrInt("missing", 7), 7);
  EXPECT_FLOAT_EQ(n->attrFloat("alpha"), 0.5f);
  EXPECT_EQ(n->attrString("mode"), "linear");
  EXPECT_EQ(n->attrInts("perm"), (std::vector<int64_t>{1, 0}));
  std::string wrongKind = errorOf([&] { n->attrInt("alpha"); });
  EXPECT_NE(wrongKind.find("Foo node 'foo'"), std::string::npos) << wrongKind;
  EXPECT_NE(wrongKind.find("should be of kind int, got float"), std::string::npos) << wrongKind;
  std::string missing = errorOf([&] { n->attrInts("shape"); });
  EXPECT_NE(missing.find("required attribute 'shape' is missing"), std::string::npos) << missing;
}

// y = If(c) { then: t = Add(x, x) } { else: e = Neg(x) }, reading x from the outer scope.
std::unique_ptr<Graph> withSubgraphs() {
  auto g = std::make_unique<Graph>("main");
  Tensor* c = g->addTensor("c", ValueType::tensor(TensorInfo(DataType::Bool, Shape{})), TensorKind::Input);
  Tensor* x = g->addTensor("x", f32({2}), TensorKind::Input);
  g->addInput(c);
  g->addInput(x);
  g->addInitializer("w", NDArray(DataType::Float, {2}));
  auto thenG = std::make_shared<Graph>("then", g.get());
  Tensor* tx = thenG->addTensor("x", f32({2}), TensorKind::OuterScope);
  thenG->addOutput(thenG->addNode("Add", "", {tx, tx}, {"t"})->output(0));
  auto elseG = std::make_shared<Graph>("else", g.get());
  Tensor* ex = elseG->addTensor("x", f32({2}), TensorKind::OuterScope);
  elseG->addOutput(elseG->addNode("Neg", "", {ex}, {"e"})->output(0));
  Attributes a;
  a.set("then_branch", thenG);
  a.set("else_branch", elseG);
  Node* n = g->addNode("If", "", {c}, {"y"}, a, "branch");
  n->setImplicitInputs({x});
  g->addOutput(n->output(0));
  return g;
}

TEST(Graph, CloneIsDeepAndSharesData) {
  auto g = withSubgraphs();
  g->setOpsetVersion(13);
  g->otherOpsets["ai.graphcore"] = 1;
  g->nodes()[0]->virtualGraph = 1;
  auto c = cloneGraph(*g);
  verifyGraph(*c);
  EXPECT_EQ(c->opsetVersion(), 13);
  EXPECT_EQ(c->otherOpsets.at("ai.graphcore"), 1);
  ASSERT_EQ(c->numNodes(), 1u);
  Node* n = c->nodes()[0];
  EXPECT_NE(n, g->nodes()[0]);
  EXPECT_EQ(n->virtualGraph, std::optional<int64_t>(1));
  EXPECT_EQ(n->implicitInputs()[0], &c->tensor("x"));
  // Subgraphs are copies whose parent is the clone.
  for (Graph* sub : n->subgraphs()) {
    EXPECT_EQ(sub->parent(), c.get());
    for (Graph* orig : g->nodes()[0]->subgraphs()) EXPECT_NE(sub, orig);
  }
  // Weight data is shared (NDArray copies share buffers); the tensors are distinct.
  EXPECT_NE(&c->tensor("w"), &g->tensor("w"));
  EXPECT_TRUE(c->tensor("w").data()->sharesBufferWith(*g->tensor("w").data()));
  // Editing the clone leaves the original alone.
  c->removeNode(n);
  EXPECT_EQ(g->numNodes(), 1u);
  verifyGraph(*g);
}

TEST(Verifier, RejectsAUseWithoutProducer) {
  Graph g("g");
  g.addTensor("ghost", f32({1}), TensorKind::Activation);
  g.addNode("Relu", "", {&g.tensor("ghost")}, {"y"});
  std::string msg = errorOf([&] { verifyGraph(g); });
  EXPECT_NE(msg.find("'ghost' is used but produced by no node"), std::string::npos) << msg;
}

TEST(Verifier, RejectsForeignTensorsAndUnresolvableOuterScope) {
  Graph g("g");
  Graph other("other");
  Tensor* foreign = other.addTensor("f", f32({1}), TensorKind::Input);
  g.addOutput(foreign);
  std::string msg = errorOf([&] { verifyGraph(g); });
  EXPECT_NE(msg.find("output 'f' is not a tensor of the graph"), std::string::npos) << msg;

  Graph parent("parent");
  Graph sub("body", &parent);
  sub.addTensor("nowhere", f32({1}), TensorKind::OuterScope);
  msg = errorOf([&] { verifyGraph(sub); });
  EXPECT_NE(msg.find("reads 'nowhere' from an outer scope"), std::string::npos) << msg;
}

TEST(Verifier, RejectsASubgraphWithTheWrongParent) {
  auto g = withSubgraphs();
  Node* n = g->nodes()[0];
  n->subgraphs()[0]->setParent(nullptr);
  std::string msg = errorOf([&] { verifyGraph(*g); });
  EXPECT_NE(msg.find("does not point back"), std::string::npos) << msg;
}

TEST(Printer, ShowsInputsWeightsNodesAttributesAndSubgraphs) {
  auto g = withSubgraphs();
  g->nodes()[0]->output(0)->setType(f32({2}));
  std::string text = printGraph(*g);
  EXPECT_NE(text.find("graph main (ai.onnx opset 17)"), std::string::npos) << text;
  EXPECT_NE(text.find("input    c: BOOL []"), std::string::npos) << text;
  EXPECT_NE(text.find("weight   w: FLOAT [2]"), std::string::npos) << text;
  EXPECT_NE(text.find("y = If(c) {else_branch=graph<else>, then_branch=graph<then>}  # branch  -> FLOAT [2]"),
            std::string::npos)
      << text;
  EXPECT_NE(text.find("    graph then"), std::string::npos) << text;
  EXPECT_NE(text.find("t = Add(x, x)"), std::string::npos) << text;
  EXPECT_NE(text.find("output   y: FLOAT [2]"), std::string::npos) << text;
}

TEST(Printer, ShowsDomainsAndSymbolicDims) {
  Graph g("g");
  Tensor* x = g.addTensor("x", ValueType::tensor(TensorInfo(DataType::Float, {Dim("batch"), Dim(3)})), TensorKind::Input);
  g.addInput(x);
  Attributes a;
  a.set("alpha", 0.5f);
  g.addOutput(g.addNode("Gelu", "ai.graphcore", {x}, {"y"}, a)->output(0));
  std::string text = printGraph(g);
  EXPECT_NE(text.find("input    x: FLOAT [batch, 3]"), std::string::npos) << text;
  EXPECT_NE(text.find("y = ai.graphcore::Gelu(x) {alpha=0.5}"), std::string::npos) << text;
}

}  // namespace
}  // namespace graft::ir
