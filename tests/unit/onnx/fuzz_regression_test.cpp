// onnx: inputs the fuzzer (tests/fuzz/fuzz_import.cpp) found crashing or escaping as something
// other than graft::Error. Each builds the essence of the finding with the protobuf API.
#include <gtest/gtest.h>

#include "../unit_test_util.hpp"
#include "ir/graph.hpp"
#include "onnx/model_io.hpp"

namespace graft::onnxio {
namespace {

using namespace graft::testing;

// ONNX 1.12's checker accepted a graph output that no node produces; the version converter then
// crashed (null dereference in graphProtoToGraph) on this opset-12 model. graft checks it before
// the checker, whose message would not name the graph.
TEST(OnnxFuzzRegression, UndefinedGraphOutputBeforeOpsetConversion) {
  auto m = makeModel(12);
  addInput(m, "x", {int64_t{3}});
  addInput(m, "y", {int64_t{3}}, ::onnx::TensorProto::INT64);
  addNode(m.mutable_graph(), "Pow", {"x", "y"}, {"G"});
  addOutput(m, "z", {int64_t{3}});
  std::string msg = errorOf([&] { loadModelBytes(serialize(m)); });
  EXPECT_NE(msg.find("graph output 'z' is not produced"), std::string::npos) << msg;
  // The same at the canonical opset, where no conversion runs.
  m.mutable_opset_import(0)->set_version(17);
  msg = errorOf([&] { loadModelBytes(serialize(m)); });
  EXPECT_NE(msg.find("graph output 'z' is not produced"), std::string::npos) << msg;
}

TEST(OnnxFuzzRegression, UndefinedSubgraphOutput) {
  auto m = makeModel(11);
  addInput(m, "c", {}, ::onnx::TensorProto::BOOL);
  addInput(m, "x", {int64_t{2}});
  auto* n = addNode(m.mutable_graph(), "If", {"c"}, {"y"});
  for (const char* branch : {"then_branch", "else_branch"}) {
    auto* a = n->add_attribute();
    a->set_name(branch);
    a->set_type(::onnx::AttributeProto::GRAPH);
    auto* g = a->mutable_g();
    g->set_name(branch);
    addNode(g, "Neg", {"x"}, {"t"});
    setType(g->add_output(), std::string(branch) == "then_branch" ? "t" : "nowhere", ::onnx::TensorProto::FLOAT,
            {int64_t{2}});
  }
  addOutput(m, "y", {int64_t{2}});
  std::string msg = errorOf([&] { loadModelBytes(serialize(m)); });
  EXPECT_NE(msg.find("'nowhere'"), std::string::npos) << msg;
}

// Later checkers reject a subgraph output that names an outer value; graft routes it through an
// Identity inside the branch (import.cpp: passOuterOutputsThroughIdentity) and runs it.
TEST(OnnxFuzzRegression, SubgraphOutputFromTheOuterScopeIsFine) {
  auto m = makeModel();
  addInput(m, "c", {}, ::onnx::TensorProto::BOOL);
  addInput(m, "x", {int64_t{2}});
  auto* n = addNode(m.mutable_graph(), "If", {"c"}, {"y"});
  for (const char* branch : {"then_branch", "else_branch"}) {
    auto* a = n->add_attribute();
    a->set_name(branch);
    a->set_type(::onnx::AttributeProto::GRAPH);
    a->mutable_g()->set_name(branch);
    setType(a->mutable_g()->add_output(), "x", ::onnx::TensorProto::FLOAT, {int64_t{2}});
  }
  addOutput(m, "y", {int64_t{2}});
  Model model = loadModelBytes(serialize(m));
  EXPECT_EQ(model.graph->numNodes(), 1u);
}

}  // namespace
}  // namespace graft::onnxio
