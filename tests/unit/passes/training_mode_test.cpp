// The training-mode pass (src/passes/training_mode.cpp): which BatchNormalization nodes it
// trains and how, the Variables it prepares, and Dropout masks drawn from the seed Variable
// (reproducible from a saved seed, so that a resumed run draws what the uninterrupted one does).
#include "passes/training_mode.hpp"

#include <gtest/gtest.h>

#include <graft/error.hpp>

#include <algorithm>

#include "backends/backend.hpp"
#include "ops/registry.hpp"
#include "passes/pass.hpp"
#include "plan/executable.hpp"
#include "support/thread_pool.hpp"

namespace graft::passes {
namespace {

NDArray floats(Shape s, std::vector<float> v) {
  NDArray a(DataType::Float, std::move(s));
  std::copy(v.begin(), v.end(), a.data<float>());
  return a;
}

ir::Tensor* input(ir::Graph& g, const std::string& id, Shape s, DataType dt = DataType::Float) {
  ir::Tensor* t = g.addTensor(id, ir::ValueType::tensor(TensorInfo(dt, std::move(s))), ir::TensorKind::Input);
  g.addInput(t);
  return t;
}

// x [4, 2] -> BatchNormalization (eval mode, as exported) -> z; running_var is an Identity of the
// scale, as torch.onnx.export writes a fresh BatchNorm (both are ones).
std::unique_ptr<ir::Graph> bnGraph(bool runningOutputsUsed = false) {
  auto g = std::make_unique<ir::Graph>("bn");
  ir::Tensor* x = input(*g, "x", {4, 2});
  ir::Tensor* scale = g->addInitializer("bn.weight", floats({2}, {1, 1}));
  ir::Tensor* var = g->addNode("Identity", "", {scale}, {"bn.running_var"})->output(0);
  ir::Attributes a;
  a.set("momentum", 0.9f);
  std::vector<std::string> outs{"z"};
  if (runningOutputsUsed) {
    outs = {"z", "new_mean", "new_var"};
    a.set("training_mode", int64_t{1});
  }
  ir::Node* bn = g->addNode("BatchNormalization", "",
                            {x, scale, g->addInitializer("bn.bias", floats({2}, {0, 0})),
                             g->addInitializer("bn.running_mean", floats({2}, {0, 0})), var},
                            outs, a, "bn");
  for (ir::Tensor* t : bn->outputs()) g->addOutput(t);
  PassContext ctx;
  runPipeline(*g, {"infer-shapes"}, ctx);
  return g;
}

std::vector<ir::Node*> nodesOfType(const ir::Graph& g, const std::string& type) {
  std::vector<ir::Node*> out;
  for (ir::Node* n : g.nodes())
    if (n->type() == type) out.push_back(n);
  return out;
}

TEST(TrainingModePass, BatchNormGetsBatchStatisticsAndInPlaceUpdates) {
  auto g = bnGraph();
  prepareTrainingMode(*g);
  // The shared running_var became a Variable of its own, a copy of the scale's value.
  ir::Tensor& var = g->tensor("bn.running_var");
  EXPECT_EQ(var.kind(), ir::TensorKind::Variable);
  EXPECT_TRUE(nodesOfType(*g, "Identity").empty());
  EXPECT_NE(var.data()->rawData(), g->tensor("bn.weight").data()->rawData());
  EXPECT_EQ(var.data()->data<float>()[1], 1.0f);

  PassContext ctx;
  runPipeline(*g, {"training-mode"}, ctx);
  ir::Node* bn = nodesOfType(*g, "BatchNormalization").at(0);
  EXPECT_EQ(bn->attrInt("training_mode"), 1);
  EXPECT_EQ(bn->attrFloat("momentum"), 0.0f);  // outputs 1 and 2 are the batch statistics
  EXPECT_EQ(bn->numOutputs(), 3u);
  auto assigns = nodesOfType(*g, "Assign");
  ASSERT_EQ(assigns.size(), 2u);
  for (ir::Node* a : assigns) {
    EXPECT_EQ(a->domain(), "ai.graft");
    ir::Tensor* target = a->input(0);
    EXPECT_TRUE(target->id() == "bn.running_mean" || target->id() == "bn.running_var") << target->id();
    // After every other reader of its target, the normalization included.
    for (const ir::Use& u : target->uses())
      if (u.node != a) EXPECT_NE(std::find(a->runsAfter().begin(), a->runsAfter().end(), u.node), a->runsAfter().end());
  }

  // One run: y uses the batch statistics; the running ones move by PyTorch's rule (m = 0.1).
  auto backend = backends::makeReferenceBackend();
  support::ThreadPool pool(1);
  auto exe = plan::compile(*g, *backend, pool);
  NDArray x = floats({4, 2}, {1, 0, 2, 0, 3, 4, 6, 4});  // channel 0: mean 3, var 3.5; channel 1: mean 2, var 4
  auto out = exe->run({ops::Value::fromTensor(x)});
  EXPECT_NEAR(out[0].tensor.data<float>()[0], (1 - 3) / std::sqrt(3.5 + 1e-5), 1e-5);
  EXPECT_NEAR(g->tensor("bn.running_mean").data()->data<float>()[0], 0.1 * 3, 1e-6);
  EXPECT_NEAR(g->tensor("bn.running_mean").data()->data<float>()[1], 0.1 * 2, 1e-6);
  EXPECT_NEAR(g->tensor("bn.running_var").data()->data<float>()[0], 0.9 + 0.1 * 3.5 * 4 / 3, 1e-6);
  EXPECT_NEAR(g->tensor("bn.running_var").data()->data<float>()[1], 0.9 + 0.1 * 4 * 4 / 3, 1e-6);
  // The scale the running variance was shared with is untouched.
  EXPECT_EQ(g->tensor("bn.weight").data()->data<float>()[0], 1.0f);
}

TEST(TrainingModePass, BatchNormExportedInTrainingModeGetsPyTorchSemantics) {
  // torch.onnx.export(training=TRAINING) writes training_mode 1 and running outputs nobody reads.
  auto g = std::make_unique<ir::Graph>("bn");
  ir::Tensor* x = input(*g, "x", {4, 1});
  ir::Attributes a;
  a.set("momentum", 0.5f);
  a.set("training_mode", int64_t{1});
  ir::Node* bn = g->addNode("BatchNormalization", "",
                            {x, g->addInitializer("s", floats({1}, {1})), g->addInitializer("b", floats({1}, {0})),
                             g->addInitializer("m", floats({1}, {1})), g->addInitializer("v", floats({1}, {1}))},
                            {"z", "unused_mean", "unused_var"}, a);
  g->addOutput(bn->output(0));
  PassContext ctx;
  runPipeline(*g, {"infer-shapes", "training-mode"}, ctx);
  EXPECT_EQ(nodesOfType(*g, "Assign").size(), 2u);
  auto backend = backends::makeReferenceBackend();
  support::ThreadPool pool(1);
  auto exe = plan::compile(*g, *backend, pool);
  exe->run({ops::Value::fromTensor(floats({4, 1}, {1, 2, 3, 6}))});  // mean 3, var 3.5, unbiased 14/3
  EXPECT_NEAR(g->tensor("m").data()->data<float>()[0], 0.5 * 1 + 0.5 * 3, 1e-6);
  EXPECT_NEAR(g->tensor("v").data()->data<float>()[0], 0.5 * 1 + 0.5 * 14.0 / 3, 1e-6);
}

TEST(TrainingModePass, BatchNormWhoseRunningOutputsTheModelUsesKeepsOnnxSemantics) {
  auto g = bnGraph(true);
  prepareTrainingMode(*g);
  EXPECT_EQ(nodesOfType(*g, "Identity").size(), 1u);
  PassContext ctx;
  EXPECT_FALSE(createPass("training-mode")->run(*g, ctx));
  ir::Node* bn = nodesOfType(*g, "BatchNormalization").at(0);
  EXPECT_EQ(bn->attrFloat("momentum"), 0.9f);
  EXPECT_TRUE(nodesOfType(*g, "Assign").empty());
}

// x -> Dropout(ratio 0.5[, training_mode]) -> y, over 64 elements.
std::unique_ptr<ir::Graph> dropoutGraph(ir::Tensor** modeInput = nullptr, bool constantFalse = false) {
  auto g = std::make_unique<ir::Graph>("dropout");
  ir::Tensor* x = input(*g, "x", {64});
  ir::Tensor* ratio =
      g->addInitializer("ratio", NDArray::scalar<float>(DataType::Float, 0.5f), ir::TensorKind::Constant);
  std::vector<ir::Tensor*> ins{x, ratio};
  if (modeInput) ins.push_back(*modeInput = input(*g, "mode", {}, DataType::Bool));
  if (constantFalse) ins.push_back(g->addInitializer("mode", NDArray(DataType::Bool, {}), ir::TensorKind::Constant));
  g->addOutput(g->addNode("Dropout", "", ins, {"y"}, {}, "drop")->output(0));
  PassContext ctx;
  runPipeline(*g, {"infer-shapes"}, ctx);
  return g;
}

std::vector<float> runDropout(ir::Graph& g, int times, const std::vector<ops::Value>& extra = {}) {
  auto backend = backends::makeReferenceBackend();
  support::ThreadPool pool(1);
  auto exe = plan::compile(g, *backend, pool);
  NDArray x(DataType::Float, {64});
  std::fill(x.data<float>(), x.data<float>() + 64, 1.0f);
  std::vector<float> y;
  for (int i = 0; i < times; ++i) {
    std::vector<ops::Value> in{ops::Value::fromTensor(x)};
    in.insert(in.end(), extra.begin(), extra.end());
    NDArray out = exe->run(in)[0].tensor;
    y.assign(out.data<float>(), out.data<float>() + 64);
  }
  return y;
}

TEST(TrainingModePass, DropoutMasksAdvanceWithTheStepAndResumeFromTheSeed) {
  auto g = dropoutGraph(nullptr, true);  // a constant false training_mode: the session trains anyway
  prepareTrainingMode(*g);
  ir::Tensor& seed = g->tensor(kRandomSeedId);
  EXPECT_EQ(seed.kind(), ir::TensorKind::Variable);
  PassContext ctx;
  runPipeline(*g, {"training-mode"}, ctx);
  ASSERT_EQ(nodesOfType(*g, "Dropout").size(), 1u);
  EXPECT_EQ(nodesOfType(*g, "Dropout")[0]->domain(), "ai.graft");
  EXPECT_EQ(g->tensor("y").producer()->domain(), "ai.graft");  // the output keeps its id

  std::vector<float> first = runDropout(*g, 1);
  EXPECT_EQ(seed.data()->data<int64_t>()[1], 1);
  for (float v : first) EXPECT_TRUE(v == 0.0f || v == 2.0f) << v;
  EXPECT_GT(std::count(first.begin(), first.end(), 0.0f), 10);
  EXPECT_GT(std::count(first.begin(), first.end(), 2.0f), 10);
  std::vector<float> third = runDropout(*g, 2);
  EXPECT_EQ(seed.data()->data<int64_t>()[1], 3);
  EXPECT_NE(first, third);

  // A fresh graph whose seed holds step 2 (a checkpoint after two steps) draws the third mask.
  auto resumed = dropoutGraph(nullptr, true);
  NDArray saved(DataType::Int64, {2});
  saved.data<int64_t>()[1] = 2;
  resumed->addInitializer(kRandomSeedId, saved, ir::TensorKind::Constant);  // integers import as constants
  prepareTrainingMode(*resumed);
  runPipeline(*resumed, {"training-mode"}, ctx);
  EXPECT_EQ(runDropout(*resumed, 1), third);
}

TEST(TrainingModePass, ComputedTrainingModeStillDecides) {
  ir::Tensor* mode = nullptr;
  auto g = dropoutGraph(&mode);
  prepareTrainingMode(*g);
  PassContext ctx;
  runPipeline(*g, {"training-mode"}, ctx);
  EXPECT_EQ(nodesOfType(*g, "Dropout").at(0)->input(2), mode);
  NDArray off(DataType::Bool, {});
  EXPECT_EQ(runDropout(*g, 1, {ops::Value::fromTensor(off)}), std::vector<float>(64, 1.0f));
}

TEST(TrainingModePass, ReservedSeedNameIsChecked) {
  auto g = dropoutGraph();
  g->addInitializer(kRandomSeedId, floats({2}, {0, 0}));
  EXPECT_THROW(prepareTrainingMode(*g), Error);
}

}  // namespace
}  // namespace graft::passes
