#pragma once
// graft's IR: a Graph owns Tensors (values) and Nodes (op applications). Subgraphs (If, Loop,
// Scan bodies) are Graphs held in node attributes; a subgraph reads outer-scope values through
// OuterScope placeholder tensors, and the owning node lists those values as implicit inputs.
#include <graft/ndarray.hpp>

#include <cstdint>
#include <list>
#include <memory>
#include <optional>
#include <string>
#include <unordered_map>
#include <vector>

#include "ir/attribute.hpp"
#include "ir/value_type.hpp"

namespace graft::ir {

class Node;
class Graph;

enum class TensorKind : uint8_t {
  Input,       ///< fed by the user (StepIO) or, in a subgraph, by the owning op
  Variable,    ///< a weight: an initializer, updated by training, read and written by the host
  Constant,    ///< constant data that is not trainable
  Activation,  ///< produced by a node
  OuterScope,  ///< in a subgraph: a value of an enclosing graph with the same id
};
std::string_view tensorKindName(TensorKind k);

/// One use of a tensor: input `index` of `node` (or, when `implicit`, its index-th implicit input).
struct Use {
  Node* node;
  int index;
  bool implicit = false;
  bool operator==(const Use&) const = default;
};

class Tensor {
 public:
  const std::string& id() const { return id_; }
  const ValueType& type() const { return type_; }
  const TensorInfo& info() const { return type_.info; }
  void setType(ValueType t) { type_ = std::move(t); }
  void setInfo(TensorInfo i) { type_.info = std::move(i); }
  TensorKind kind() const { return kind_; }
  void setKind(TensorKind k) { kind_ = k; }
  Graph& graph() const { return *graph_; }

  Node* producer() const { return producer_; }
  int producerIndex() const { return producerIndex_; }
  const std::vector<Use>& uses() const { return uses_; }
  bool isGraphOutput() const;

  /// Data of a Variable or Constant (nullptr otherwise).
  const NDArray* data() const { return data_ ? &*data_ : nullptr; }
  NDArray* mutableData() { return data_ ? &*data_ : nullptr; }
  void setData(NDArray a) { data_ = std::move(a); }
  void clearData() { data_.reset(); }

  /// Free-form string annotations kept through export (doc_string), e.g. where a tensor came from.
  std::string docString;

 private:
  friend class Graph;
  friend class Node;
  Tensor(Graph* g, std::string id, ValueType t, TensorKind k) : id_(std::move(id)), type_(std::move(t)), kind_(k), graph_(g) {}
  std::string id_;
  ValueType type_;
  TensorKind kind_;
  Graph* graph_;
  Node* producer_ = nullptr;
  int producerIndex_ = -1;
  std::vector<Use> uses_;
  std::optional<NDArray> data_;
};

class Node {
 public:
  const std::string& type() const { return type_; }
  const std::string& domain() const { return domain_; }
  const std::string& name() const { return name_; }
  void setName(std::string n) { name_ = std::move(n); }
  /// "Conv node 'conv1'" (or "Conv node #12" when unnamed), for error messages.
  std::string describe() const;
  int64_t id() const { return id_; }
  Graph& graph() const { return *graph_; }

  const std::vector<Tensor*>& inputs() const { return inputs_; }
  const std::vector<Tensor*>& outputs() const { return outputs_; }
  size_t numInputs() const { return inputs_.size(); }
  size_t numOutputs() const { return outputs_.size(); }
  /// nullptr when an optional input is omitted.
  Tensor* input(size_t i) const { return i < inputs_.size() ? inputs_[i] : nullptr; }
  Tensor* output(size_t i) const { return i < outputs_.size() ? outputs_[i] : nullptr; }
  bool hasInput(size_t i) const { return input(i) != nullptr; }
  bool hasOutput(size_t i) const { return output(i) != nullptr; }
  void setInput(size_t i, Tensor* t);
  void addInput(Tensor* t) { setInput(inputs_.size(), t); }
  /// Outer-scope values that this node's subgraphs read.
  const std::vector<Tensor*>& implicitInputs() const { return implicitInputs_; }
  void setImplicitInputs(std::vector<Tensor*> ts);

  Attributes& attrs() { return attrs_; }
  const Attributes& attrs() const { return attrs_; }
  // Typed attribute accessors; a wrong kind or a missing required attribute throws graft::Error
  // naming this node.
  int64_t attrInt(const std::string& name) const;
  int64_t attrInt(const std::string& name, int64_t def) const;
  float attrFloat(const std::string& name) const;
  float attrFloat(const std::string& name, float def) const;
  std::string attrString(const std::string& name) const;
  std::string attrString(const std::string& name, const std::string& def) const;
  std::vector<int64_t> attrInts(const std::string& name) const;
  std::vector<int64_t> attrInts(const std::string& name, const std::vector<int64_t>& def) const;
  std::vector<float> attrFloats(const std::string& name) const;
  std::vector<float> attrFloats(const std::string& name, const std::vector<float>& def) const;
  std::vector<std::string> attrStrings(const std::string& name, const std::vector<std::string>& def = {}) const;
  const NDArray& attrTensor(const std::string& name) const;
  const GraphPtr& attrGraph(const std::string& name) const;
  /// Every subgraph held in attributes.
  std::vector<Graph*> subgraphs() const;

  /// Control dependencies: nodes that must run before this one although no data flows between
  /// them (an in-place weight update after every reader of the weight).
  const std::vector<Node*>& runsAfter() const { return after_; }
  void addRunsAfter(Node* n);

  /// PopART annotations (__ipu_number, __pipeline_stage).
  std::optional<int64_t> virtualGraph;
  std::optional<int64_t> pipelineStage;
  /// Recompute this op's outputs in the backward pass instead of keeping them (training).
  bool recompute = false;
  /// schedule() runs this node as soon as it is ready, before every other ready node that is not
  /// eager (a gradient's Accumulate in training: its gradient is complete, and can be all-reduced
  /// across replicas, the moment it is computed, and its buffer is free after it).
  bool eager = false;

 private:
  friend class Graph;
  Node(Graph* g, int64_t id, std::string type, std::string domain) : type_(std::move(type)), domain_(std::move(domain)), id_(id), graph_(g) {}
  template <class T>
  const T* attrAs(const std::string& name, std::string_view want) const;
  std::string type_, domain_, name_;
  int64_t id_;
  Graph* graph_;
  std::vector<Tensor*> inputs_, outputs_, implicitInputs_;
  std::vector<Node*> after_, before_;  // control dependencies, both directions
  Attributes attrs_;
  std::list<std::unique_ptr<Node>>::iterator self_;
};

class Graph {
 public:
  explicit Graph(std::string name = "graph", Graph* parent = nullptr) : name_(std::move(name)), parent_(parent) {}
  Graph(const Graph&) = delete;
  Graph& operator=(const Graph&) = delete;

  const std::string& name() const { return name_; }
  void setName(std::string n) { name_ = std::move(n); }
  Graph* parent() const { return parent_; }
  void setParent(Graph* p) { parent_ = p; }
  /// ai.onnx opset the graph's ops follow (the root's, for subgraphs).
  int64_t opsetVersion() const { return parent_ ? parent_->opsetVersion() : opset_; }
  void setOpsetVersion(int64_t v) { opset_ = v; }
  /// Other operator set domains the model imports (domain -> version).
  std::map<std::string, int64_t> otherOpsets;

  // Tensors -----------------------------------------------------------------------------------
  Tensor* addTensor(const std::string& id, ValueType type, TensorKind kind);
  /// A new Variable (kind Variable) or Constant holding `data`.
  Tensor* addInitializer(const std::string& id, NDArray data, TensorKind kind = TensorKind::Variable);
  Tensor* findTensor(const std::string& id) const;
  /// Throws graft::Error when there is no tensor of that id.
  Tensor& tensor(const std::string& id) const;
  bool hasTensor(const std::string& id) const { return findTensor(id) != nullptr; }
  /// An id not used yet in this graph nor its ancestors: base, base_1, base_2, ...
  std::string uniqueId(const std::string& base) const;
  /// Removes a tensor that has no producer and no uses (and is not a graph input or output).
  void removeTensor(Tensor* t);
  std::vector<Tensor*> tensors() const;

  const std::vector<Tensor*>& inputs() const { return inputs_; }
  const std::vector<Tensor*>& outputs() const { return outputs_; }
  void addInput(Tensor* t) { inputs_.push_back(t); }
  void addOutput(Tensor* t) { outputs_.push_back(t); }
  void setOutputs(std::vector<Tensor*> ts) { outputs_ = std::move(ts); }
  void setInputs(std::vector<Tensor*> ts) { inputs_ = std::move(ts); }
  /// Variables and constants with data, in id order.
  std::vector<Tensor*> initializers() const;

  // Nodes -------------------------------------------------------------------------------------
  /// Adds a node reading `inputs` (nullptr for an omitted optional input) and producing new
  /// Activation tensors with ids `outputIds` ("" for an omitted optional output). Output types
  /// start unknown; shape inference fills them.
  Node* addNode(const std::string& type, const std::string& domain, const std::vector<Tensor*>& inputs,
                const std::vector<std::string>& outputIds, Attributes attrs = {}, const std::string& name = "");
  /// Makes `t` (an existing tensor without producer) output `index` of `n`.
  void setOutput(Node* n, size_t index, Tensor* t);
  /// Disconnects and deletes a node; its output tensors stay, without producer.
  void removeNode(Node* n);
  /// Gives `n` the id of a node already removed from this graph, so that `n` takes that node's
  /// place in schedule() (which prefers lower ids among ready nodes): a node that replaces
  /// others (a fusion) then runs where they ran instead of after everything else that is ready.
  void reuseNodeId(Node* n, int64_t removedId);
  /// Every use of `from` (node inputs, implicit inputs, graph outputs) now reads `to`.
  void replaceAllUses(Tensor* from, Tensor* to);
  /// Nodes in insertion order.
  std::vector<Node*> nodes() const;
  size_t numNodes() const { return nodes_.size(); }
  /// Nodes in a topological order: among the ready nodes the eager ones (Node::eager) first, then
  /// the one added first (insertion order where it can); throws graft::Error naming a node of the
  /// cycle when there is one.
  std::vector<Node*> schedule() const;

 private:
  std::string name_;
  Graph* parent_;
  int64_t opset_ = 17;
  std::unordered_map<std::string, std::unique_ptr<Tensor>> tensors_;
  std::list<std::unique_ptr<Node>> nodes_;
  std::vector<Tensor*> inputs_, outputs_;
  int64_t nextNodeId_ = 0;
};

/// A deep copy (subgraphs included). Tensor data buffers are shared with the original (NDArray
/// copies share their buffer); nodes keep their ids' order.
std::unique_ptr<Graph> cloneGraph(const Graph& g);

/// Readable text dump of a graph (with subgraphs, indented).
std::string printGraph(const Graph& g);
/// Checks the structural invariants (links both ways, one producer, acyclic, outer-scope values
/// resolvable, ids unique). Throws graft::Error naming the offending node or tensor.
void verifyGraph(const Graph& g);

}  // namespace graft::ir
