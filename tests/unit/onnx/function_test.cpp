// onnx: model-local functions are inlined on import. Regression tests for fuzzer findings:
// ONNX 1.12's FunctionExpandHelper threw a non-graft exception for a function that does not
// import its own domain and dereferenced a null schema for one that does.
#include <gtest/gtest.h>

#include <chrono>

#include "../unit_test_util.hpp"
#include "ir/graph.hpp"
#include "onnx/model_io.hpp"

namespace graft::onnxio {
namespace {

using namespace graft::testing;

// z = AddTwice(x, y) with AddTwice(a, b) = (a + b) + b in domain "local".
::onnx::ModelProto functionModel(bool functionImportsItsDomain) {
  auto m = makeModel();
  auto* lo = m.add_opset_import();
  lo->set_domain("local");
  lo->set_version(1);
  addInput(m, "x", {int64_t{2}});
  addInput(m, "y", {int64_t{2}});
  addNode(m.mutable_graph(), "AddTwice", {"x", "y"}, {"z"}, "local")->set_name("call");
  addOutput(m, "z", {int64_t{2}});
  auto* f = m.add_functions();
  f->set_name("AddTwice");
  f->set_domain("local");
  f->add_input("a");
  f->add_input("b");
  f->add_output("c");
  auto* o = f->add_opset_import();
  o->set_domain("");
  o->set_version(17);
  if (functionImportsItsDomain) {
    auto* od = f->add_opset_import();
    od->set_domain("local");
    od->set_version(1);
  }
  auto* n1 = f->add_node();
  n1->set_op_type("Add");
  n1->add_input("a");
  n1->add_input("b");
  n1->add_output("t");
  auto* n2 = f->add_node();
  n2->set_op_type("Add");
  n2->add_input("t");
  n2->add_input("b");
  n2->add_output("c");
  return m;
}

void expectInlined(const ir::Graph& g) {
  ASSERT_EQ(g.numNodes(), 2u);
  for (const ir::Node* n : g.nodes()) EXPECT_EQ(n->type(), "Add");
  const ir::Node* last = g.tensor("z").producer();
  ASSERT_NE(last, nullptr);
  EXPECT_EQ(last->input(1)->id(), "y");
  const ir::Node* first = last->input(0)->producer();
  ASSERT_NE(first, nullptr);
  EXPECT_EQ(first->input(0)->id(), "x");
  // The body's own value names are prefixed per call, so that two calls never collide.
  EXPECT_NE(last->input(0)->id(), "t");
  EXPECT_EQ(g.tensor("z").info().str(), "FLOAT [2]");
}

TEST(OnnxFunctions, LocalFunctionWithoutItsOwnDomainImport) {
  Model model = loadModelBytes(serialize(functionModel(false)));
  expectInlined(*model.graph);
}

TEST(OnnxFunctions, LocalFunctionThatImportsItsOwnDomain) {
  Model model = loadModelBytes(serialize(functionModel(true)));
  expectInlined(*model.graph);
}

TEST(OnnxFunctions, TwoCallsDoNotCollide) {
  auto m = functionModel(false);
  addNode(m.mutable_graph(), "AddTwice", {"z", "y"}, {"w"}, "local");
  addOutput(m, "w", {int64_t{2}});
  Model model = loadModelBytes(serialize(m));
  EXPECT_EQ(model.graph->numNodes(), 4u);
  ir::verifyGraph(*model.graph);
}

TEST(OnnxFunctions, AttributeReferencesAreBound) {
  auto m = makeModel();
  auto* lo = m.add_opset_import();
  lo->set_domain("local");
  lo->set_version(1);
  addInput(m, "x", {int64_t{3}});
  auto* call = addNode(m.mutable_graph(), "Leaky", {"x"}, {"y"}, "local");
  auto* a = call->add_attribute();
  a->set_name("slope");
  a->set_type(::onnx::AttributeProto::FLOAT);
  a->set_f(0.25f);
  addNode(m.mutable_graph(), "Leaky", {"y"}, {"z"}, "local");  // no slope: LeakyRelu's default
  addOutput(m, "z", {int64_t{3}});
  auto* f = m.add_functions();
  f->set_name("Leaky");
  f->set_domain("local");
  f->add_input("i");
  f->add_output("o");
  f->add_attribute("slope");
  auto* o = f->add_opset_import();
  o->set_domain("");
  o->set_version(17);
  auto* n = f->add_node();
  n->set_op_type("LeakyRelu");
  n->add_input("i");
  n->add_output("o");
  auto* ref = n->add_attribute();
  ref->set_name("alpha");
  ref->set_type(::onnx::AttributeProto::FLOAT);
  ref->set_ref_attr_name("slope");
  Model model = loadModelBytes(serialize(m));
  const ir::Node* first = model.graph->tensor("y").producer();
  const ir::Node* second = model.graph->tensor("z").producer();
  EXPECT_FLOAT_EQ(first->attrFloat("alpha"), 0.25f);
  EXPECT_FALSE(second->attrs().has("alpha"));
}

TEST(OnnxFunctions, CallsWithTooManyInputsAreErrors) {
  auto m = functionModel(false);
  m.mutable_graph()->mutable_node(0)->add_input("x");
  std::string msg = errorOf([&] { loadModelBytes(serialize(m)); });
  EXPECT_FALSE(msg.empty());
}

TEST(OnnxFunctions, RecursionIsAnError) {
  auto m = functionModel(false);
  // AddTwice's body now calls AddTwice.
  auto* body = m.mutable_functions(0);
  auto* od = body->add_opset_import();
  od->set_domain("local");
  od->set_version(1);
  body->mutable_node(1)->set_op_type("AddTwice");
  body->mutable_node(1)->set_domain("local");
  std::string msg = errorOf([&] { loadModelBytes(serialize(m)); });
  EXPECT_NE(msg.find("calls itself"), std::string::npos) << msg;
}

TEST(OnnxFunctions, ExponentialExpansionIsCapped) {
  // F0 is two Adds; F(k) calls F(k-1) 16 times: F7 would expand into 2 * 16^7 nodes.
  auto m = makeModel();
  auto* lo = m.add_opset_import();
  lo->set_domain("local");
  lo->set_version(1);
  addInput(m, "x", {int64_t{2}});
  addNode(m.mutable_graph(), "F7", {"x"}, {"y"}, "local");
  addOutput(m, "y", {int64_t{2}});
  for (int k = 0; k <= 7; ++k) {
    auto* f = m.add_functions();
    f->set_name("F" + std::to_string(k));
    f->set_domain("local");
    f->add_input("i");
    f->add_output("o");
    auto* o = f->add_opset_import();
    o->set_domain("");
    o->set_version(17);
    auto* od = f->add_opset_import();
    od->set_domain("local");
    od->set_version(1);
    int calls = k == 0 ? 2 : 16;
    std::string prev = "i";
    for (int c = 0; c < calls; ++c) {
      auto* n = f->add_node();
      n->set_op_type(k == 0 ? "Neg" : "F" + std::to_string(k - 1));
      if (k > 0) n->set_domain("local");
      n->add_input(prev);
      prev = c + 1 == calls ? "o" : "v" + std::to_string(c);
      n->add_output(prev);
    }
  }
  auto t0 = std::chrono::steady_clock::now();
  std::string msg = errorOf([&] { loadModelBytes(serialize(m)); });
  EXPECT_NE(msg.find("more than"), std::string::npos) << msg;
  EXPECT_LT(std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count(), 60.0);
}

}  // namespace
}  // namespace graft::onnxio
