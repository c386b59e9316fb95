#pragma once
// Loading ONNX models into graft's IR and writing IR back to ONNX.
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "ir/graph.hpp"

namespace onnx {
class ModelProto;
}

namespace graft::onnxio {

/// The ai.onnx opset every imported model is converted to; ops implement this opset's semantics.
/// It is the newest opset of the linked ONNX library (1.23: 28; docs/dependencies.md).
constexpr int64_t kCanonicalOpset = 28;
/// The newest IR version accepted: the linked ONNX library's (1.23: 14).
constexpr int64_t kNewestIrVersion = 14;
/// The IR version of the ONNX release that introduced ai.onnx `opset` (ONNX's version table):
/// what an exported model of that opset declares at least.
int64_t irVersionForOpset(int64_t opset);
/// The oldest ai.onnx opset accepted.
constexpr int64_t kMinOpset = 7;

struct ModelInfo {
  int64_t irVersion = 8;
  std::string producerName = "graft", producerVersion, domain, docString;
  int64_t modelVersion = 0;
  /// The ai.onnx opset the file declared before conversion.
  int64_t originalOpset = kCanonicalOpset;
  std::map<std::string, std::string> metadata;
};

struct Model {
  std::unique_ptr<ir::Graph> graph;
  ModelInfo info;
};

struct ImportOptions {
  /// Where external tensor data lives (the model file's folder). External data paths must stay
  /// inside it. Empty: models with external data are rejected.
  std::string baseDir;
  /// What to call the model in messages (its path, or "<model bytes>").
  std::string sourceName = "<model bytes>";
  /// Ops of the ai.onnx domain that the ONNX spec defines as functions are expanded into their
  /// function bodies when this returns true for (domain, op type). Model-local functions are
  /// always expanded.
  std::function<bool(const std::string& domain, const std::string& type)> expandFunction;
  /// Run the ONNX checker (turn off only for models graft writes itself).
  bool check = true;
};

/// Loads a model file. Throws graft::Error naming the file and what is wrong with it (missing,
/// truncated, not ONNX, invalid, an opset outside 7..17, external data escaping its folder, ...).
Model loadModelFile(const std::string& path, const ImportOptions& options = {});
/// Loads a serialized ModelProto; `options.baseDir` locates external data.
Model loadModelBytes(const std::string& bytes, const ImportOptions& options = {});
/// The model as ONNX, serialized.
std::string saveModelBytes(const ir::Graph& graph, const ModelInfo& info = {});
/// Writes the model to `path` atomically (a temporary file, then a rename).
void saveModelFile(const ir::Graph& graph, const std::string& path, const ModelInfo& info = {});
/// The model as a ModelProto.
void exportModel(const ir::Graph& graph, const ModelInfo& info, ::onnx::ModelProto* out);

}  // namespace graft::onnxio
