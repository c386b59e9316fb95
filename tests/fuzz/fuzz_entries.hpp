#pragma once
// What the fuzz targets do with one input, shared by the libFuzzer targets (fuzz_import.cpp,
// fuzz_checkpoint.cpp) and the campaign/replay driver (campaign.cpp), which runs every input of
// tests/fuzz/regressions in a forked child on every `make test`. graft::Error is the only
// acceptable way to refuse an input; any other exception, crash, hang or blow-up is a finding.
#include <graft/graft.hpp>

#include <string>
#include <vector>

#include "onnx/model_io.hpp"

namespace graft::fuzz {

/// Imports `bytes` as a model; when it loads, opens an InferenceSession on the reference device
/// and, with `compile`, prepares it (shape inference, folding, kernels).
inline void importModel(const std::string& bytes, bool compile) {
  onnxio::Model model = onnxio::loadModelBytes(bytes);
  std::vector<TensorId> outputs;
  for (const auto* t : model.graph->outputs()) outputs.push_back(t->id());
  if (outputs.empty()) return;
  auto device = DeviceManager::createDeviceManager().createReferenceDevice();
  auto session = InferenceSession::createFromOnnxModel(bytes, DataFlow(1, outputs), device);
  if (compile) session->prepareDevice();
}

/// y = x @ w with an L1 loss "loss": the model the checkpoint target resumes from.
std::string checkpointBaseModel();

/// Loads `bytes` as a checkpoint: into the weights of a training session of checkpointBaseModel()
/// (resetHostWeights), and as the model of a new TrainingSession that resumes its optimizer state
/// (SGD with momentum) and is prepared.
void loadCheckpoint(const std::string& bytes);

}  // namespace graft::fuzz
