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
    /// Training with gradient accumulation: the optimizer step, run once every
    /// accumulationFactor micro-batches.
    std::unique_ptr<ir::Graph> applyGraph;
    std::unique_ptr<plan::Executable> applyExe;
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
  /// The passes run before compiling: the cpu backend's own for the cpu device.
  virtual const std::vector<std::string>& pipeline() const {
    return backend->name() == "cpu" ? passes::cpuInferencePipeline() : passes::inferencePipeline();
  }
  virtual bool weightsAreConstant() const { return options.constantWeights; }
  /// Adds to a plan's graph (inputs typed, before anchors are set) what the session kind needs:
  /// training adds the backward pass and the optimizer.
  virtual void transform(ir::Graph& g, Plan& p) {}
  /// Throws when `id` cannot be an anchor.
  virtual void checkAnchor(const TensorId& id) const;
  /// Micro-batches per batch (gradient accumulation factor; 1 for inference).
  virtual int accumulationFactor() const { return 1; }
  /// Leading dimensions of StepIO arrays: [batchesPerStep, accumulationFactor], each if > 1.
  Shape leadingDims() const;
  /// Persistent tensors a user may read and write with WeightsIO.
  virtual std::vector<TensorId> persistentIds() const;

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
