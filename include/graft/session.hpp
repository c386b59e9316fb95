#pragma once
/// @file session.hpp  Sessions: compile a model once for a device, then run steps.
#include <graft/dataflow.hpp>
#include <graft/device.hpp>
#include <graft/ndarray.hpp>
#include <graft/optimizer.hpp>
#include <graft/options.hpp>
#include <graft/stepio.hpp>
#include <graft/tensor_info.hpp>

#include <memory>
#include <string>
#include <vector>

namespace graft {

/// Host arrays for readWeights / writeWeights (PopART's WeightsIO), by tensor id.
class WeightsIO {
 public:
  void insert(const TensorId& id, NDArray array) { arrays_[id] = std::move(array); }
  bool contains(const TensorId& id) const { return arrays_.count(id) != 0; }
  const NDArray& weight(const TensorId& id) const;
  const std::map<TensorId, NDArray>& arrays() const { return arrays_; }

 private:
  std::map<TensorId, NDArray> arrays_;
};

/// Per-op-type time spent in kernels (when SessionOptions::enableProfiling is on).
struct OpProfile {
  std::string opType;
  int64_t calls = 0;
  double seconds = 0;
  /// The kernels that ran: the names the backend recorded when compiling ("reference",
  /// "onednn_conv (brgconv:avx512_core)", ...).
  std::vector<std::string> kernels;
  /// The node, when SessionOptions::profileByNode is on (one entry per node); empty otherwise.
  std::string node;
};

/// The static memory plan of a compiled step (Session::memoryPlan): one arena holds every value
/// whose size is known when compiling; views and in-place results share their input's region.
struct MemoryPlanSummary {
  int64_t arenaBytes = 0;     ///< peak: the size of the arena(s)
  int64_t unsharedBytes = 0;  ///< what the arena values would take without reusing regions
  int64_t arenaValues = 0, viewValues = 0, inplaceValues = 0;
  int64_t heapValues = 0;       ///< values allocated when produced (run-time shapes, graph outputs, sequences)
  int64_t persistentBytes = 0;  ///< weights, optimizer state and constants
  std::string text;             ///< the plan, printable (graft inspect --memory)
};

/// A bucket of gradients all-reduced together in a replicated training step
/// (SessionOptions::gradientBucketBytes), as compiled (Session::gradientBuckets).
struct GradientBucket {
  /// Its gradients' accumulators ("Accum___<weight>"), in the order the backward pass completes them.
  std::vector<TensorId> accumulators;
  int64_t bytes = 0;
  /// Where its all-reduce starts: right after step `step` of program `program` (0 without virtual
  /// graphs) of the first replica's compiled schedule (serializedIr's order), the Accumulate
  /// `node` that completes the bucket's last gradient.
  int program = 0;
  int64_t step = -1;
  std::string node;
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
  /// Thread-safe: calls on one session from several threads (run, prepareDevice, weights and
  /// checkpoint IO) are serialised by a mutex, one step at a time; separate sessions run in
  /// parallel.
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
  /// True when anchor `id` is a tensor whose shape is known before running (PopART's fixed
  /// anchors: anchorArrayShape gives its array). False for a sequence or optional, for a shape
  /// that depends on the data (NonZero, Unique, ...) and for symbolic dimensions that no input
  /// shape fixes yet: such anchors come back whole through IStepIO::outValue.
  bool anchorIsFixed(const TensorId& id) const;
  /// Throws graft::Error when the anchor arrays initAnchorArrays would allocate need more memory
  /// than the process can get (system memory or the address-space limit), naming the largest.
  /// Anchors that are not fixed (anchorIsFixed) allocate nothing.
  void checkAnchorArraysFit() const;
  /// Allocates one array per fixed anchor (anchorIsFixed), shaped by anchorArrayShape
  /// (checkAnchorArraysFit first); the other anchors have no entry.
  std::map<TensorId, NDArray> initAnchorArrays() const;

  const DataFlow& dataFlow() const;
  const DeviceInfo& device() const;
  /// Wall time of the last run() in seconds.
  double lastRunSeconds() const;
  /// Time taken by the last compilation (prepareDevice, or a run that compiled).
  double lastCompileSeconds() const;
  /// The kernel threads the last run's plan runs on (each virtual device's, with virtual graphs
  /// or replicas): numThreads, or 1 where SessionOptions::autoThreads found one thread faster.
  int kernelThreads() const;
  /// Per-op-type kernel times, slowest first (needs SessionOptions::enableProfiling).
  std::vector<OpProfile> profile() const;
  /// The compiled graph as text (after prepareDevice); with virtual graphs, one graph per program.
  std::string graphText() const;
  /// The compiled graph as JSON in PopART's layout (session._serializeIr): {"maingraph": [ops in
  /// schedule order with type, domain, name, inputs, outputs, attributes]}.
  std::string serializedIr() const;
  /// The memory plan of the compiled step (after prepareDevice); with `perValue`, `text` lists
  /// every value with its placement, offset and live range over the schedule.
  MemoryPlanSummary memoryPlan(bool perValue = false) const;
  /// With virtualGraphMode Manual or Auto: the split of the compiled model into programs (ops,
  /// parameters, FLOPs and memory per program and the virtual device running it); "" otherwise.
  std::string stagesText() const;
  /// What every thread did during the last step as a Chrome trace JSON (chrome://tracing or
  /// ui.perfetto.dev): per virtual device busy (program, micro-batch) and idle time. Recorded for
  /// sessions with virtual graphs, and for others when SessionOptions::timelinePath is set; ""
  /// before the first step.
  std::string timelineJson() const;
  /// Replicated training: the bytes of optimizer state (velocities, moments, steps) each local
  /// replica's optimizer step holds, for the last compiled plan (SessionOptions::
  /// shardOptimizerState divides them by globalReplicationFactor); empty otherwise.
  std::vector<int64_t> replicaOptimizerStateBytes() const;
  /// Replicated training: the gradient buckets of the last compiled plan, in the order their
  /// all-reduces start; empty otherwise.
  std::vector<GradientBucket> gradientBuckets() const;
  /// Copies weights (and, in training, optimizer state) into the arrays of `io`, which must have
  /// the tensors' types and shapes.
  void readWeights(WeightsIO& io) const;
  /// Copies the arrays of `io` into the session's weights and optimizer state.
  void writeWeights(const WeightsIO& io);
  /// Ids of the model's weights (floating-point initializers), in id order.
  std::vector<TensorId> weightIds() const;
  /// Replaces the weights with those of another ONNX model (path or bytes) of the same
  /// architecture. Weights the model lacks keep their values; with
  /// ignoreWeightsInModelWithoutCorrespondingHostWeight false, extra weights are an error.
  void resetHostWeights(const std::string& model, bool ignoreWeightsInModelWithoutCorrespondingHostWeight = false);
  /// Writes the model (with the current weights, and in training the optimizer state) as an ONNX
  /// file, atomically (a temporary file, then a rename).
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

/// A session that trains: forward pass, backward pass and optimizer update compiled into one step.
class TrainingSession : public Session {
 public:
  /// `loss` names a scalar tensor of the model (built, for example, with a loss op of the
  /// Builder's aiGraphcore opset). Every floating-point initializer the loss depends on is
  /// trained. Optimizer state found in the model (a checkpoint written by modelToHost) is resumed.
  static std::unique_ptr<TrainingSession> createFromOnnxModel(const std::string& model, const DataFlow& dataFlow,
                                                              const TensorId& loss, const Optimizer& optimizer,
                                                              std::shared_ptr<DeviceInfo> deviceInfo,
                                                              const InputShapeInfo& inputShapeInfo = {},
                                                              const SessionOptions& userOptions = {},
                                                              const Patterns& patterns = {});
  /// New values for the optimizer's non-constant hyper-parameters, used from the next step on
  /// without recompiling. Changing a constant one, or the kind of optimizer, is an error.
  void updateOptimizerFromHost(const Optimizer& optimizer);
  /// The weights being trained.
  std::vector<TensorId> trainedWeightIds() const;
  /// The loss tensor.
  const TensorId& lossId() const;

 private:
  using Session::Session;
};

}  // namespace graft
