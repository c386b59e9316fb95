#pragma once
/// @file builder.hpp  Building ONNX models op by op (PopART's Builder).
#include <graft/dataflow.hpp>
#include <graft/ndarray.hpp>
#include <graft/tensor_info.hpp>

#include <map>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <string_view>
#include <variant>
#include <vector>

namespace graft {

/// A node attribute value as the Builder takes it. Values are converted to the kind the op's
/// schema declares where that is lossless (an integer for a float attribute, an empty list of
/// integers for a list of floats or strings).
using AttributeValue = std::variant<int64_t, float, std::string, std::vector<int64_t>, std::vector<float>,
                                    std::vector<std::string>, NDArray>;
using AttributeMap = std::map<std::string, AttributeValue>;

/// The kind of an attribute in an op's signature.
enum class AttributeKind { Int, Float, String, Ints, Floats, Strings, Tensor, Graph, Other };
/// "int", "float", "string", "ints", "floats", "strings", "tensor", "graph", "other".
std::string_view attributeKindName(AttributeKind kind);

/// One attribute of an op signature.
struct OpAttributeSignature {
  std::string name;
  AttributeKind kind = AttributeKind::Other;
  bool required = false;
  /// The value the op uses when the attribute is absent (when the schema states one).
  std::optional<AttributeValue> defaultValue;
};

/// What the Builder knows about an op at one opset version: its inputs, outputs and attributes.
struct OpSignature {
  std::string domain;  ///< "" for ai.onnx
  std::string type;
  int sinceVersion = 1;  ///< the op version in force at the opset asked for
  int numFormalInputs = 0;  ///< inputs the schema declares (0: the op takes none, like Constant)
  int minInputs = 0, maxInputs = 0;  ///< maxInputs -1: unbounded
  int minOutputs = 1, maxOutputs = 1;  ///< maxOutputs -1: unbounded
  std::vector<OpAttributeSignature> attributes;  ///< in name order
  std::string doc;
};

/// The ops the Builder offers in `domain` ("" or "ai.onnx", or "ai.graphcore") at `opsetVersion`:
/// every op graft's registry knows that exists at that version, plus PopART's loss ops of
/// ai.graphcore (nllloss, l1loss, identityloss), whose kernels come with training. Ordered by type.
std::vector<OpSignature> builderOpSignatures(const std::string& domain, int opsetVersion);
/// The newest ai.onnx opset graft reads and builds: the linked ONNX library's newest, to which
/// every loaded model is converted.
int newestAiOnnxOpset();
/// The signature of one op (any op with an ONNX schema, registered or not); nullopt when the op
/// does not exist at that version.
std::optional<OpSignature> findOpSignature(const std::string& domain, const std::string& type, int opsetVersion);

/// Builds an ONNX model op by op, like PopART's Builder:
///
///   Builder b;
///   TensorId x = b.addInputTensor(TensorInfo("FLOAT", {2, 3}), "x");
///   TensorId w = b.addInitializedInputTensor(weights, "w");
///   TensorId y = b.addOp("MatMul", "", 10, {x, w}).at(0);
///   b.addOutputTensor(y);
///   std::string model = b.getModelProto();
///
/// Tensor ids follow PopART: inputs are named by their debug name (or "input"), op outputs
/// "<OpType>:<index>", both prefixed by the name scopes and made unique with "/1", "/2", ...
/// Output types come from ONNX's shape inference as each op is added, so a wrong shape or
/// attribute is reported by the op that introduces it. Every error is a graft::Error naming the
/// op or tensor.
class Builder {
 public:
  Builder();
  /// Starts from an existing model (a path to an ONNX file, or serialized ModelProto bytes); the
  /// model is converted to ai.onnx opset 17 on loading, so new ai.onnx ops use opset 17.
  static std::unique_ptr<Builder> createFromOnnxModel(const std::string& modelProtoOrFilename);
  ~Builder();
  Builder(const Builder&) = delete;
  Builder& operator=(const Builder&) = delete;

  /// A model input of a given type. Dimensions may be symbolic (named).
  TensorId addInputTensor(const TensorInfo& info, const std::string& debugName = "");
  /// addInputTensor(TensorInfo(dtype, shape), debugName).
  TensorId addInputTensor(const std::string& dtype, const Shape& shape, const std::string& debugName = "");
  /// A weight with an initial value (copied). Floating-point values are trainable weights,
  /// other types constants.
  TensorId addInitializedInputTensor(const NDArray& value, const std::string& debugName = "");
  /// Marks a tensor as a model output.
  void addOutputTensor(const TensorId& id);

  /// Adds one op. `domain` is "" (or "ai.onnx") or "ai.graphcore". `opsetVersion` is the ai.onnx
  /// opset the op follows; every ai.onnx op of one model must use the same version. `inputs`
  /// may hold "" for an omitted optional input. `numOutputs` < 0 takes the schema's minimum (at
  /// least 1). Returns the ids of the outputs.
  std::vector<TensorId> addOp(const std::string& opType, const std::string& domain, int opsetVersion,
                              const std::vector<TensorId>& inputs, const AttributeMap& attributes = {},
                              int numOutputs = -1, const std::string& debugName = "");

  /// The model as serialized ONNX (a ModelProto).
  std::string getModelProto() const;
  /// Writes the model to an ONNX file.
  void saveModelProto(const std::string& path) const;
  void setGraphName(const std::string& name);

  /// Ids of the model inputs and initialized inputs, in the order they were added.
  std::vector<TensorId> getInputTensorIds() const;
  std::vector<TensorId> getOutputTensorIds() const;
  /// Ids of the tensors produced by ops, in the order they were added.
  std::vector<TensorId> getValueTensorIds() const;
  /// Ids of the initialized inputs (weights).
  std::vector<TensorId> getTrainableTensorIds() const;
  bool hasTensor(const TensorId& id) const;
  bool isInitializer(const TensorId& id) const;
  /// Type and shape of a tensor (dimensions may be symbolic or unknown).
  TensorInfo getTensorInfo(const TensorId& id) const;
  /// The shape; throws graft::Error naming the tensor when a dimension is not known.
  Shape getTensorShape(const TensorId& id) const;
  /// numpy-style name of the element type: "float32", "int64", ...
  std::string getTensorDtypeString(const TensorId& id) const;
  /// The ai.onnx opset in use (0 before the first ai.onnx op).
  int onnxOpsetVersion() const;

  // Annotations --------------------------------------------------------------------------------
  /// Places the op producing `nodeOutputName` on virtual device `value` (attribute __ipu_number).
  void virtualGraph(const TensorId& nodeOutputName, int64_t value);
  /// Places the op producing `nodeOutputName` in pipeline stage `value` (__pipeline_stage).
  void pipelineStage(const TensorId& nodeOutputName, int64_t value);
  /// Recompute the op's outputs in the backward pass (training).
  void recomputeOutputInBackwardPass(const TensorId& nodeOutputName, bool value = true);
  /// The virtual device / pipeline stage of the op producing `nodeOutputName`; throws when unset.
  int64_t getVirtualGraph(const TensorId& nodeOutputName) const;
  int64_t getPipelineStage(const TensorId& nodeOutputName) const;
  bool getRecomputeOutputInBackwardPass(const TensorId& nodeOutputName) const;

  /// Scoped annotations: ops added until the matching pop carry them. `name` is "__ipu_number"
  /// or "__pipeline_stage".
  void pushAttributeScope(const std::string& name, int64_t value);
  void popAttributeScope(const std::string& name);
  /// The innermost scoped value of `name`, if any.
  std::optional<int64_t> currentAttributeScope(const std::string& name) const;
  /// Name scopes prefix the ids of new tensors and the names of new ops ("scope/MatMul:0").
  void pushNameScope(const std::string& name);
  void popNameScope();
  /// `name` prefixed by the current name scopes.
  std::string getNameScope(const std::string& name = "") const;

  /// Sets an attribute on the op whose outputs are exactly `nodeOutputNames`. Names starting
  /// with "__" are annotations any op may carry; others must be attributes of the op's schema.
  void addNodeAttribute(const std::string& name, const AttributeValue& value, const std::set<TensorId>& nodeOutputNames);
  bool nodeHasAttribute(const std::string& name, const std::set<TensorId>& nodeOutputNames) const;
  AttributeValue getNodeAttribute(const std::string& name, const std::set<TensorId>& nodeOutputNames) const;
  void removeNodeAttribute(const std::string& name, const std::set<TensorId>& nodeOutputNames);
  std::vector<std::string> getAllNodeAttributeNames(const std::set<TensorId>& nodeOutputNames) const;

  struct Impl;

 private:
  std::unique_ptr<Impl> impl_;
};

}  // namespace graft
