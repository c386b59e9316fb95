#include "ir/graph.hpp"

#include <algorithm>
#include <queue>
#include <set>

#include "support/check.hpp"

namespace graft::ir {

std::string_view tensorKindName(TensorKind k) {
  switch (k) {
    case TensorKind::Input: return "input";
    case TensorKind::Variable: return "variable";
    case TensorKind::Constant: return "constant";
    case TensorKind::Activation: return "activation";
    case TensorKind::OuterScope: return "outer-scope";
  }
  return "?";
}

std::string ValueType::str() const {
  switch (kind) {
    case ValueKind::Tensor: return info.str();
    case ValueKind::Sequence: return "seq(" + info.str() + ")";
    case ValueKind::Optional:
      return optionalOf == ValueKind::Sequence ? "optional(seq(" + info.str() + "))" : "optional(" + info.str() + ")";
  }
  return "?";
}

std::string_view attrKindName(const AttrValue& v) {
  static constexpr std::string_view names[] = {"int",  "float",  "string",  "tensor",  "graph", "type",
                                               "ints", "floats", "strings", "tensors", "graphs"};
  return names[v.index()];
}

// ---- Tensor ---------------------------------------------------------------------------------

bool Tensor::isGraphOutput() const {
  const auto& outs = graph_->outputs();
  return std::find(outs.begin(), outs.end(), this) != outs.end();
}

// ---- Node -----------------------------------------------------------------------------------

std::string Node::describe() const {
  if (!name_.empty()) return fmt::format("{} node '{}'", type_, name_);
  if (!outputs_.empty() && outputs_[0]) return fmt::format("{} node (output '{}')", type_, outputs_[0]->id());
  return fmt::format("{} node #{}", type_, id_);
}

void Node::setInput(size_t i, Tensor* t) {
  if (i >= inputs_.size()) inputs_.resize(i + 1, nullptr);
  if (Tensor* old = inputs_[i]) {
    auto& u = old->uses_;
    auto it = std::find(u.begin(), u.end(), Use{this, static_cast<int>(i), false});
    if (it != u.end()) u.erase(it);
  }
  inputs_[i] = t;
  if (t) t->uses_.push_back(Use{this, static_cast<int>(i), false});
}

void Node::setImplicitInputs(std::vector<Tensor*> ts) {
  for (size_t i = 0; i < implicitInputs_.size(); ++i) {
    auto& u = implicitInputs_[i]->uses_;
    auto it = std::find(u.begin(), u.end(), Use{this, static_cast<int>(i), true});
    if (it != u.end()) u.erase(it);
  }
  implicitInputs_ = std::move(ts);
  for (size_t i = 0; i < implicitInputs_.size(); ++i)
    implicitInputs_[i]->uses_.push_back(Use{this, static_cast<int>(i), true});
}

void Node::addRunsAfter(Node* n) {
  GRAFT_ASSERT(n && n != this && &n->graph() == graph_, "bad control dependency for {}", describe());
  if (std::find(after_.begin(), after_.end(), n) != after_.end()) return;
  after_.push_back(n);
  n->before_.push_back(this);
}

template <class T>
const T* Node::attrAs(const std::string& name, std::string_view want) const {
  const AttrValue* v = attrs_.find(name);
  if (!v) return nullptr;
  const T* p = std::get_if<T>(v);
  GRAFT_CHECK(p, "{}: attribute '{}' should be of kind {}, got {}", describe(), name, want, attrKindName(*v));
  return p;
}

#define GRAFT_ATTR_GETTERS(Ret, Fn, T, kind)                                                      \
  Ret Node::Fn(const std::string& name) const {                                                  \
    const T* p = attrAs<T>(name, kind);                                                          \
    GRAFT_CHECK(p, "{}: required attribute '{}' is missing", describe(), name);                  \
    return *p;                                                                                   \
  }                                                                                              \
  Ret Node::Fn(const std::string& name, const Ret& def) const {                                  \
    const T* p = attrAs<T>(name, kind);                                                          \
    return p ? Ret(*p) : def;                                                                    \
  }

int64_t Node::attrInt(const std::string& name) const {
  const int64_t* p = attrAs<int64_t>(name, "int");
  GRAFT_CHECK(p, "{}: required attribute '{}' is missing", describe(), name);
  return *p;
}
int64_t Node::attrInt(const std::string& name, int64_t def) const {
  const int64_t* p = attrAs<int64_t>(name, "int");
  return p ? *p : def;
}
float Node::attrFloat(const std::string& name) const {
  const float* p = attrAs<float>(name, "float");
  GRAFT_CHECK(p, "{}: required attribute '{}' is missing", describe(), name);
  return *p;
}
float Node::attrFloat(const std::string& name, float def) const {
  const float* p = attrAs<float>(name, "float");
  return p ? *p : def;
}
GRAFT_ATTR_GETTERS(std::string, attrString, std::string, "string")
GRAFT_ATTR_GETTERS(std::vector<int64_t>, attrInts, std::vector<int64_t>, "ints")
GRAFT_ATTR_GETTERS(std::vector<float>, attrFloats, std::vector<float>, "floats")
#undef GRAFT_ATTR_GETTERS

std::vector<std::string> Node::attrStrings(const std::string& name, const std::vector<std::string>& def) const {
  const auto* p = attrAs<std::vector<std::string>>(name, "strings");
  return p ? *p : def;
}

const NDArray& Node::attrTensor(const std::string& name) const {
  const NDArray* p = attrAs<NDArray>(name, "tensor");
  GRAFT_CHECK(p, "{}: required attribute '{}' is missing", describe(), name);
  return *p;
}

const GraphPtr& Node::attrGraph(const std::string& name) const {
  const GraphPtr* p = attrAs<GraphPtr>(name, "graph");
  GRAFT_CHECK(p && *p, "{}: required subgraph attribute '{}' is missing", describe(), name);
  return *p;
}

std::vector<Graph*> Node::subgraphs() const {
  std::vector<Graph*> out;
  for (const auto& [name, v] : attrs_.all()) {
    if (const auto* g = std::get_if<GraphPtr>(&v)) out.push_back(g->get());
    if (const auto* gs = std::get_if<std::vector<GraphPtr>>(&v))
      for (const auto& g : *gs) out.push_back(g.get());
  }
  return out;
}

// ---- Graph ----------------------------------------------------------------------------------

Tensor* Graph::addTensor(const std::string& id, ValueType type, TensorKind kind) {
  GRAFT_CHECK(!id.empty(), "graph '{}': a tensor needs a non-empty id", name_);
  GRAFT_CHECK(!tensors_.count(id), "graph '{}': tensor '{}' is defined twice", name_, id);
  auto t = std::unique_ptr<Tensor>(new Tensor(this, id, std::move(type), kind));
  Tensor* p = t.get();
  tensors_.emplace(id, std::move(t));
  return p;
}

Tensor* Graph::addInitializer(const std::string& id, NDArray data, TensorKind kind) {
  Tensor* t = addTensor(id, ValueType::tensor(TensorInfo(data.dtype(), data.shape())), kind);
  t->setData(std::move(data));
  return t;
}

Tensor* Graph::findTensor(const std::string& id) const {
  auto it = tensors_.find(id);
  return it == tensors_.end() ? nullptr : it->second.get();
}

Tensor& Graph::tensor(const std::string& id) const {
  Tensor* t = findTensor(id);
  GRAFT_CHECK(t, "graph '{}' has no tensor '{}'", name_, id);
  return *t;
}

std::string Graph::uniqueId(const std::string& base) const {
  auto taken = [&](const std::string& s) {
    for (const Graph* g = this; g; g = g->parent_)
      if (g->hasTensor(s)) return true;
    return false;
  };
  if (!taken(base)) return base;
  for (int64_t i = 1;; ++i) {
    std::string s = fmt::format("{}_{}", base, i);
    if (!taken(s)) return s;
  }
}

void Graph::removeTensor(Tensor* t) {
  GRAFT_ASSERT(!t->producer_ && t->uses_.empty(), "tensor '{}' is still connected", t->id());
  GRAFT_ASSERT(std::find(inputs_.begin(), inputs_.end(), t) == inputs_.end(), "tensor '{}' is a graph input", t->id());
  GRAFT_ASSERT(!t->isGraphOutput(), "tensor '{}' is a graph output", t->id());
  tensors_.erase(t->id());
}

std::vector<Tensor*> Graph::tensors() const {
  std::vector<Tensor*> out;
  out.reserve(tensors_.size());
  for (const auto& [id, t] : tensors_) out.push_back(t.get());
  std::sort(out.begin(), out.end(), [](Tensor* a, Tensor* b) { return a->id() < b->id(); });
  return out;
}

std::vector<Tensor*> Graph::initializers() const {
  std::vector<Tensor*> out;
  for (Tensor* t : tensors())
    if (t->data() && (t->kind() == TensorKind::Variable || t->kind() == TensorKind::Constant)) out.push_back(t);
  return out;
}

Node* Graph::addNode(const std::string& type, const std::string& domain, const std::vector<Tensor*>& inputs,
                     const std::vector<std::string>& outputIds, Attributes attrs, const std::string& name) {
  auto n = std::unique_ptr<Node>(new Node(this, nextNodeId_++, type, domain));
  Node* p = n.get();
  p->name_ = name;
  p->attrs_ = std::move(attrs);
  for (size_t i = 0; i < inputs.size(); ++i) p->setInput(i, inputs[i]);
  p->outputs_.resize(outputIds.size(), nullptr);
  nodes_.push_back(std::move(n));
  p->self_ = std::prev(nodes_.end());
  for (size_t i = 0; i < outputIds.size(); ++i) {
    if (outputIds[i].empty()) continue;
    Tensor* t = findTensor(outputIds[i]);
    if (!t) t = addTensor(outputIds[i], ValueType::tensor(TensorInfo{}), TensorKind::Activation);
    setOutput(p, i, t);
  }
  return p;
}

void Graph::setOutput(Node* n, size_t index, Tensor* t) {
  GRAFT_CHECK(!t->producer_, "{}: output tensor '{}' is already produced by {}", n->describe(), t->id(),
              t->producer_->describe());
  GRAFT_CHECK(t->kind_ == TensorKind::Activation, "{}: output '{}' is a graph {} and cannot be assigned by a node",
              n->describe(), t->id(), tensorKindName(t->kind_));
  if (index >= n->outputs_.size()) n->outputs_.resize(index + 1, nullptr);
  n->outputs_[index] = t;
  t->producer_ = n;
  t->producerIndex_ = static_cast<int>(index);
}

void Graph::removeNode(Node* n) {
  for (Node* a : n->after_) a->before_.erase(std::find(a->before_.begin(), a->before_.end(), n));
  for (Node* b : n->before_) b->after_.erase(std::find(b->after_.begin(), b->after_.end(), n));
  for (size_t i = 0; i < n->inputs_.size(); ++i) n->setInput(i, nullptr);
  n->setImplicitInputs({});
  for (Tensor* t : n->outputs_)
    if (t) {
      t->producer_ = nullptr;
      t->producerIndex_ = -1;
    }
  nodes_.erase(n->self_);
}

void Graph::reuseNodeId(Node* n, int64_t removedId) {
  GRAFT_ASSERT(&n->graph() == this && removedId >= 0 && removedId < nextNodeId_, "{}: id {} was never given out", n->describe(),
               removedId);
  for (const auto& up : nodes_)
    GRAFT_ASSERT(up.get() == n || up->id_ != removedId, "{}: id {} belongs to {}", n->describe(), removedId, up->describe());
  n->id_ = removedId;
}

void Graph::replaceAllUses(Tensor* from, Tensor* to) {
  if (from == to) return;
  auto uses = from->uses_;
  for (const Use& u : uses) {
    if (u.implicit) {
      auto ins = u.node->implicitInputs_;
      ins[u.index] = to;
      u.node->setImplicitInputs(ins);
    } else {
      u.node->setInput(u.index, to);
    }
  }
  for (auto& o : outputs_)
    if (o == from) o = to;
}

std::vector<Node*> Graph::nodes() const {
  std::vector<Node*> out;
  out.reserve(nodes_.size());
  for (const auto& n : nodes_) out.push_back(n.get());
  return out;
}

std::vector<Node*> Graph::schedule() const {
  // Kahn's algorithm with a priority on insertion order (node id), so that the schedule is
  // deterministic and stays close to the model's own order; eager nodes go first whenever they
  // are ready (they would otherwise wait for every ready node added before them).
  std::unordered_map<const Node*, int> pending;
  auto cmp = [](Node* a, Node* b) { return a->eager != b->eager ? b->eager : a->id() > b->id(); };
  std::priority_queue<Node*, std::vector<Node*>, decltype(cmp)> ready(cmp);
  for (const auto& up : nodes_) {
    Node* n = up.get();
    int deps = 0;
    auto count = [&](Tensor* t) {
      if (t && t->producer_ && &t->producer_->graph() == this) ++deps;
    };
    for (Tensor* t : n->inputs_) count(t);
    for (Tensor* t : n->implicitInputs_) count(t);
    deps += static_cast<int>(n->after_.size());
    pending[n] = deps;
    if (deps == 0) ready.push(n);
  }
  std::vector<Node*> order;
  order.reserve(nodes_.size());
  while (!ready.empty()) {
    Node* n = ready.top();
    ready.pop();
    order.push_back(n);
    for (Tensor* t : n->outputs_) {
      if (!t) continue;
      for (const Use& u : t->uses_)
        if (--pending[u.node] == 0) ready.push(u.node);
    }
    for (Node* b : n->before_)
      if (--pending[b] == 0) ready.push(b);
  }
  if (order.size() != nodes_.size()) {
    for (const auto& up : nodes_)
      if (pending[up.get()] > 0)
        GRAFT_THROW("graph '{}' has a cycle (or an input produced by nothing reachable) through {}", name_,
                    up->describe());
  }
  return order;
}

}  // namespace graft::ir
