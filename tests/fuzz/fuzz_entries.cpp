#include "fuzz_entries.hpp"

#include "ir/graph.hpp"

namespace graft::fuzz {

std::string checkpointBaseModel() {
  ir::Graph g("ckpt");
  ir::Tensor* x =
      g.addTensor("x", ir::ValueType::tensor(TensorInfo(DataType::Float, Shape{2, 3})), ir::TensorKind::Input);
  g.addInput(x);
  NDArray w(DataType::Float, Shape{3, 2});
  for (int i = 0; i < 6; ++i) w.data<float>()[i] = 0.1f * static_cast<float>(i);
  ir::Tensor* wt = g.addInitializer("w", w, ir::TensorKind::Variable);
  ir::Tensor* y = g.addNode("MatMul", "", {x, wt}, {"y"})->output(0);
  ir::Node* l = g.addNode("L1", "ai.graphcore", {y}, {"loss"});
  l->attrs().set("lambda", 0.1f);
  l->attrs().set("reduction", int64_t{0});
  g.addOutput(y);
  return onnxio::saveModelBytes(g);
}

void loadCheckpoint(const std::string& bytes) {
  auto& dm = DeviceManager::createDeviceManager();
  SGD sgd({{"defaultLearningRate", {0.1f, true}}, {"defaultMomentum", {0.9f, true}}});
  {
    static const std::string base = checkpointBaseModel();
    auto s = TrainingSession::createFromOnnxModel(base, DataFlow(1, {"loss"}), "loss", sgd, dm.createReferenceDevice());
    try {
      s->resetHostWeights(bytes, true);
    } catch (const Error&) {
    }
  }
  auto s = TrainingSession::createFromOnnxModel(bytes, DataFlow(1, {"loss"}), "loss", sgd, dm.createReferenceDevice());
  s->prepareDevice();
}

}  // namespace graft::fuzz
