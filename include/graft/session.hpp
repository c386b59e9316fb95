#pragma once
/// @file session.hpp  Sessions: compile a model once for a device, then run steps.
#include <graft/dataflow.hpp>
#include <graft/device.hpp>
#include <graft/ndarray.hpp>
#include <graft/options.hpp>
#include <graft/stepio.hpp>
#include <graft/tensor_info.hpp>

#include <memory>
#include <string>
#include <vector>

namespace graft {

/// Per-op-type time spent in kernels (when SessionOptions::enableProfiling is on).
struct OpProfile {
  std::string opType;
  int64_t calls = 0;
  double seconds = 0;
};

class Session {
 public:
  virtual ~Session();
  Session(const Session&) = delete;
  Session& operator=(const Session&) = delete;

  /// Compiles the model for the device (schedule, kernels, constants). Runs with new input
  /// shapes compile again, once per distinct set of shapes.
  void prepareDevice();
  /// Runs one step: batchesPerStep batches, inputs pulled from and anchors pushed to `stepIO`.
  void run(IStepIO& stepIO, const std::string& debugName = "");
  /// Copies the host weights to the device (PopART's call; weights load at prepareDevice).
  void weightsFromHost();
  /// Copies the device weights back to the host model.
  void weightsToHost();

  /// Ids of the inputs a StepIO must provide, in model order.
  std::vector<TensorId> inputIds() const;
  /// Type of a model input (dimensions may be symbolic).
  TensorInfo inputInfo(const TensorId& id) const;
  /// Type of any tensor of the compiled model (call after prepareDevice or a run).
  TensorInfo getInfo(const TensorId& id) const;
  /// The array a StepIO holds for input `id`: [batchesPerStep, ...] when batchesPerStep > 1.
  Shape inputArrayShape(const TensorId& id) const;
  /// The array a StepIO holds for anchor `id`, shaped as PopART shapes it:
  /// All: [batchesPerStep, ...], EveryN(k): [batchesPerStep / k, ...], Final and Sum: [...]
  /// (the leading dimension only when it is > 1).
  Shape anchorArrayShape(const TensorId& id) const;
  DataType anchorDataType(const TensorId& id) const;
  /// Allocates one array per anchor, shaped by anchorArrayShape.
  std::map<TensorId, NDArray> initAnchorArrays() const;

  const DataFlow& dataFlow() const;
  const DeviceInfo& device() const;
  /// Wall time of the last run() in seconds.
  double lastRunSeconds() const;
  /// Time taken by the last compilation (prepareDevice, or a run that compiled).
  double lastCompileSeconds() const;
  /// Per-op-type kernel times, slowest first (needs SessionOptions::enableProfiling).
  std::vector<OpProfile> profile() const;
  /// The compiled graph as text (after prepareDevice).
  std::string graphText() const;
  /// Writes the model (with the current weights) as an ONNX file.
  void modelToHost(const std::string& path);
  /// Serialized ONNX of the model with the current weights.
  std::string modelBytes() const;

  struct Impl;
  /// graft's internals, for its own tools and tests; not part of the stable API.
  Impl& impl() { return *impl_; }

 protected:
  explicit Session(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

class InferenceSession : public Session {
 public:
  /// `model` is a path to an ONNX file or a serialized ModelProto (as Builder::getModelProto
  /// returns). Checks the model and reports every unsupported op at once.
  static std::unique_ptr<InferenceSession> createFromOnnxModel(const std::string& model, const DataFlow& dataFlow,
                                                               std::shared_ptr<DeviceInfo> deviceInfo,
                                                               const InputShapeInfo& inputShapeInfo = {},
                                                               const SessionOptions& userOptions = {},
                                                               const Patterns& patterns = {});

 private:
  using Session::Session;
};

}  // namespace graft
