// `graft inspect --memory` (tools/inspect_memory.cpp) on a small model, for inference and for a
// training step.
#include <gtest/gtest.h>

#include <graft/error.hpp>

#include <sstream>

#include "inspect_memory.hpp"
#include "ir/graph.hpp"
#include "onnx/model_io.hpp"
#include "passes/pass.hpp"

namespace graft::tools {
namespace {

// y = tanh(x @ W + b) with a symbolic batch; loss = MseLoss(y, t).
std::string model() {
  ir::Graph g("mlp");
  g.otherOpsets["ai.graft"] = 1;
  auto type = [](std::vector<Dim> d) { return ir::ValueType::tensor(TensorInfo(DataType::Float, std::move(d))); };
  ir::Tensor* x = g.addTensor("x", type({Dim("batch"), Dim(16)}), ir::TensorKind::Input);
  ir::Tensor* t = g.addTensor("t", type({Dim("batch"), Dim(8)}), ir::TensorKind::Input);
  g.addInput(x);
  g.addInput(t);
  NDArray w(DataType::Float, {16, 8}), b(DataType::Float, {8});
  for (int64_t i = 0; i < w.numel(); ++i) w.data<float>()[i] = 0.01f * static_cast<float>(i % 7);
  ir::Tensor* mm = g.addNode("MatMul", "", {x, g.addInitializer("W", w)}, {"mm"})->output(0);
  ir::Tensor* y = g.addNode("Tanh", "", {g.addNode("Add", "", {mm, g.addInitializer("b", b)}, {"lin"})->output(0)}, {"y"})->output(0);
  ir::Attributes a;
  a.set("reduction", std::string("Mean"));
  ir::Tensor* loss = g.addNode("MseLoss", "ai.graft", {y, t}, {"loss"}, a)->output(0);
  g.addOutput(loss);
  passes::PassContext ctx;
  passes::runPipeline(g, {"infer-shapes"}, ctx);
  return onnxio::saveModelBytes(g);
}

TEST(InspectMemory, PrintsThePlanOfInferenceAndTraining) {
  MemoryInspectOptions o;
  o.memory = true;
  o.dims = {"batch=32"};
  std::ostringstream inf;
  printMemoryPlan(model(), o, inf);
  EXPECT_NE(inf.str().find("inference"), std::string::npos) << inf.str();
  EXPECT_NE(inf.str().find("arena"), std::string::npos);
  EXPECT_NE(inf.str().find("graph output"), std::string::npos);  // the loss
  o.loss = "loss";
  std::ostringstream train;
  printMemoryPlan(model(), o, train);
  EXPECT_NE(train.str().find("training step"), std::string::npos) << train.str();
  EXPECT_NE(train.str().find("persistent"), std::string::npos);
}

TEST(InspectMemory, RejectsBadDimensions) {
  MemoryInspectOptions o;
  o.memory = true;
  std::ostringstream out;
  o.dims = {"batch"};
  EXPECT_THROW(printMemoryPlan(model(), o, out), Error);
  o.dims = {"batch=-3"};
  EXPECT_THROW(printMemoryPlan(model(), o, out), Error);
}

}  // namespace
}  // namespace graft::tools
