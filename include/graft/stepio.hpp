#pragma once
/// @file stepio.hpp  How a step's inputs come in and its anchors go out (PopART's StepIO).
#include <graft/dataflow.hpp>
#include <graft/ndarray.hpp>
#include <graft/tensor_info.hpp>

#include <functional>
#include <map>
#include <string>
#include <vector>

namespace graft {

/// One model run's value of an input or anchor, of any ONNX value type: a tensor, a sequence of
/// tensors, or an absent optional (None).
struct StepValue {
  enum class Kind { Tensor, Sequence, None };
  Kind kind = Kind::Tensor;
  NDArray tensor;              ///< Kind::Tensor
  std::vector<NDArray> items;  ///< Kind::Sequence
};

/// The interface a session pulls inputs from and pushes anchors to, one batch at a time.
class IStepIO {
 public:
  virtual ~IStepIO() = default;
  /// The next batch of input `id`, whose model type is a sequence or an optional (in() serves
  /// tensor inputs). The default throws graft::Error naming the input.
  virtual StepValue inValue(const TensorId& id, bool prefetch);
  /// True when anchor `id` is returned through outValue (whole results whose shape the step
  /// decides: data-dependent shapes, sequences, optionals) instead of out(). Anchors whose value
  /// is not a tensor always go to outValue.
  virtual bool takesValues(const TensorId& id) const { return false; }
  /// Receives one returned result of anchor `id` (see takesValues). The default throws
  /// graft::Error naming the anchor.
  virtual void outValue(const TensorId& id, const StepValue& value);
  /// The next batch of input `id`. `expected` is the model's input type (dimensions may be
  /// symbolic). The returned array must stay valid until inComplete(id).
  virtual NDArray in(const TensorId& id, const TensorInfo& expected, bool prefetch) = 0;
  virtual void inComplete(const TensorId& id) {}
  /// Where to write the next returned chunk of anchor `id`, of type `dtype` and shape `shape`.
  virtual NDArray out(const TensorId& id, DataType dtype, const Shape& shape) = 0;
  virtual void outComplete(const TensorId& id) {}
};

/// StepIO over arrays: each input array has leading dimensions [batchesPerStep, accumulationFactor]
/// (each only when > 1) before the model input's shape, and each anchor array the leading
/// dimensions of its number of returns (see Session::anchorArrayShape).
/// The arrays are used in place (no copy) and must outlive the run.
class StepIO : public IStepIO {
 public:
  StepIO(std::map<TensorId, NDArray> inputs, std::map<TensorId, NDArray> outputs);
  NDArray in(const TensorId& id, const TensorInfo& expected, bool prefetch) override;
  NDArray out(const TensorId& id, DataType dtype, const Shape& shape) override;
  /// Called by the session at the start of a run: the leading dimensions of input arrays, whose
  /// product is the number of model runs (micro-batches, times replicas) in the step. `meaning`
  /// names them in errors.
  void beginStep(const Shape& leadingDims, const std::string& meaning = "batchesPerStep, accumulationFactor");
  /// Called by the session after beginStep: anchor `id` returns `count` results this step; its
  /// array must hold exactly that many (a larger or smaller one is an error, not silently used).
  void expectResults(const TensorId& id, int64_t count);
  const std::map<TensorId, NDArray>& inputs() const { return inputs_; }
  const std::map<TensorId, NDArray>& outputs() const { return outputs_; }

 private:
  std::map<TensorId, NDArray> inputs_, outputs_;
  std::map<TensorId, int64_t> inIndex_, outIndex_, expected_;
  Shape leading_;
  std::string meaning_;
  int64_t runs_ = 1;
};

/// StepIO through callbacks (PopART's StepIOCallback).
class StepIOCallback : public IStepIO {
 public:
  using InputCallback = std::function<NDArray(const TensorId&, bool prefetch)>;
  using InputCompleteCallback = std::function<void(const TensorId&)>;
  using OutputCallback = std::function<NDArray(const TensorId&)>;
  using OutputCompleteCallback = std::function<void(const TensorId&)>;
  StepIOCallback(InputCallback in, InputCompleteCallback inComplete, OutputCallback out, OutputCompleteCallback outComplete);
  NDArray in(const TensorId& id, const TensorInfo& expected, bool prefetch) override;
  void inComplete(const TensorId& id) override;
  NDArray out(const TensorId& id, DataType dtype, const Shape& shape) override;
  void outComplete(const TensorId& id) override;

 private:
  InputCallback in_;
  InputCompleteCallback inComplete_;
  OutputCallback out_;
  OutputCompleteCallback outComplete_;
};

/// Shapes for model inputs whose dimensions are symbolic or missing (PopART's InputShapeInfo).
class InputShapeInfo {
 public:
  void add(const TensorId& id, const TensorInfo& info) { infos_[id] = info; }
  bool has(const TensorId& id) const { return infos_.count(id) != 0; }
  const TensorInfo& get(const TensorId& id) const { return infos_.at(id); }
  const std::map<TensorId, TensorInfo>& getAllTensorInfo() const { return infos_; }

 private:
  std::map<TensorId, TensorInfo> infos_;
};

}  // namespace graft
