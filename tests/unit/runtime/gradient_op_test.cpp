// Models holding an ai.onnx.preview.training Gradient node through the public sessions: the
// inference pipelines (cpu and reference devices) expand it, and a TrainingSession expands it
// before growing its own backward pass (a loss that penalises a gradient).
#include <gtest/gtest.h>

#include <graft/graft.hpp>

#include "ir/graph.hpp"
#include "onnx/model_io.hpp"
#include "passes/pass.hpp"

namespace graft {
namespace {

constexpr const char* kTraining = "ai.onnx.preview.training";

NDArray vec(std::vector<float> v) {
  NDArray a(DataType::Float, {static_cast<int64_t>(v.size())});
  std::copy(v.begin(), v.end(), a.data<float>());
  return a;
}

// y = x * w (w a weight); g = Gradient(xs = [x], zs = [w], y) = w. With `penalty`, the model's
// output is loss = sum(g * g) = sum(w^2), else y and g.
std::string model(bool penalty) {
  ir::Graph g("gradient_model");
  g.otherOpsets[kTraining] = 1;
  ir::Tensor* x = g.addTensor("x", ir::ValueType::tensor(TensorInfo(DataType::Float, Shape{3})), ir::TensorKind::Input);
  g.addInput(x);
  ir::Tensor* w = g.addInitializer("w", vec({0.5f, -1.0f, 2.0f}));
  ir::Tensor* y = g.addNode("Mul", "", {x, w}, {"y"})->output(0);
  ir::Attributes a;
  a.set("xs", std::vector<std::string>{"x"});
  a.set("zs", std::vector<std::string>{"w"});
  a.set("y", std::string("y"));
  ir::Tensor* gr = g.addNode("Gradient", kTraining, {x, w}, {"dy_dx"}, a, "grad")->output(0);
  if (penalty) {
    ir::Tensor* sq = g.addNode("Mul", "", {gr, gr}, {"sq"})->output(0);
    ir::Attributes r;
    r.set("keepdims", int64_t{0});
    g.addOutput(g.addNode("ReduceSum", "", {sq}, {"loss"}, r)->output(0));
  } else {
    g.addOutput(y);
    g.addOutput(gr);
  }
  passes::PassContext ctx;
  passes::runPipeline(g, {"infer-shapes"}, ctx);
  return onnxio::saveModelBytes(g);
}

TEST(GradientOp, InferenceSessionsReturnTheGradient) {
  auto dm = DeviceManager::createDeviceManager();
  for (auto device : {dm.createCpuDevice(), dm.createReferenceDevice()}) {
    auto s =
        InferenceSession::createFromOnnxModel(model(false), DataFlow(1, std::vector<TensorId>{"y", "dy_dx"}), device);
    s->prepareDevice();
    std::vector<float> x = {3, 4, 5};
    auto anchors = s->initAnchorArrays();
    StepIO io({{"x", NDArray::wrap(x.data(), DataType::Float, {3})}}, anchors);
    s->run(io);
    const float* y = anchors.at("y").data<float>();
    const float* d = anchors.at("dy_dx").data<float>();
    EXPECT_FLOAT_EQ(y[0], 1.5f);
    EXPECT_FLOAT_EQ(y[2], 10.0f);
    EXPECT_FLOAT_EQ(d[0], 0.5f);
    EXPECT_FLOAT_EQ(d[1], -1.0f);
    EXPECT_FLOAT_EQ(d[2], 2.0f);
  }
}

TEST(GradientOp, TrainingThroughAGradientPenalty) {
  // loss = sum(w^2): d loss / dw = 2w, so one SGD step with learning rate 0.1 gives 0.8 w.
  SGD opt({{"defaultLearningRate", {0.1f, true}}});
  auto s = TrainingSession::createFromOnnxModel(model(true), DataFlow(1, std::vector<TensorId>{"loss"}), "loss", opt,
                                                DeviceManager::createDeviceManager().createCpuDevice());
  s->prepareDevice();
  std::vector<float> x = {3, 4, 5};
  auto anchors = s->initAnchorArrays();
  StepIO io({{"x", NDArray::wrap(x.data(), DataType::Float, {3})}}, anchors);
  s->run(io);
  EXPECT_FLOAT_EQ(anchors.at("loss").data<float>()[0], 0.25f + 1.0f + 4.0f);
  WeightsIO w;
  w.insert("w", NDArray(DataType::Float, {3}));
  s->readWeights(w);
  EXPECT_NEAR(w.weight("w").data<float>()[0], 0.4f, 1e-6);
  EXPECT_NEAR(w.weight("w").data<float>()[1], -0.8f, 1e-6);
  EXPECT_NEAR(w.weight("w").data<float>()[2], 1.6f, 1e-6);
}

}  // namespace
}  // namespace graft
