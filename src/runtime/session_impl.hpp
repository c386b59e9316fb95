#pragma once
// Internals shared by the session kinds.
#include <graft/session.hpp>

#include <map>
#include <memory>

#include "backends/backend.hpp"
#include "ir/graph.hpp"
#include "onnx/model_io.hpp"
#include "passes/pass.hpp"
#include "plan/executable.hpp"
#include "support/thread_pool.hpp"

namespace graft {

struct Session::Impl {
  virtual ~Impl() = default;

  onnxio::Model model;
  DataFlow dataFlow;
  std::shared_ptr<DeviceInfo> device;
  SessionOptions options;
  std::unique_ptr<backends::Backend> backend;
  std::unique_ptr<support::ThreadPool> pool;
  std::vector<TensorId> inputIds;
  std::map<TensorId, TensorInfo> inputInfos;

  struct Plan {
    std::unique_ptr<ir::Graph> graph;
    std::unique_ptr<plan::Executable> exe;
  };
  std::map<std::vector<Shape>, std::unique_ptr<Plan>> plans;
  Plan* lastPlan = nullptr;
  bool prepared = false;
  double lastRunSeconds = 0, lastCompileSeconds = 0;

  /// Loads the model, checks anchors, inputs and op support.
  void init(const std::string& modelArg, const DataFlow& df, std::shared_ptr<DeviceInfo> dev, const InputShapeInfo& shapes,
            const SessionOptions& opts);
  /// The graph to compile (inference: the model's graph; training adds the backward pass).
  virtual const ir::Graph& sourceGraph() const { return *model.graph; }
  /// The passes run before compiling.
  virtual const std::vector<std::string>& pipeline() const { return passes::inferencePipeline(); }
  virtual bool weightsAreConstant() const { return options.constantWeights; }

  /// The plan for these input shapes (compiled on first use).
  Plan& planFor(const std::vector<Shape>& shapes);
  /// Shapes from the model (with InputShapeInfo applied) when all are static.
  std::optional<std::vector<Shape>> staticInputShapes() const;
  void run(IStepIO& io);
  /// One batch through the plan for these inputs (tensors, sequences or optionals, in
  /// inputIds order); returns the anchors in DataFlow order. `shapes` keys the plan cache.
  std::vector<ops::Value> execute(std::vector<ops::Value> inputs);
  Plan& anyPlan() const;
};

/// Loads a model argument that is either a file path or serialized ONNX bytes.
onnxio::Model loadModelArgument(const std::string& model);

}  // namespace graft
