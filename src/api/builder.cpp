#include <graft/builder.hpp>

#include <algorithm>

#include "api/op_signatures.hpp"
#include "onnx/model_io.hpp"
#include "onnx/schema_infer.hpp"
#include "onnx/schema_query.hpp"
#include "ops/registry.hpp"
#include "support/check.hpp"

namespace graft {
namespace {

constexpr const char* kVirtualGraphAttr = "__ipu_number";
constexpr const char* kPipelineStageAttr = "__pipeline_stage";
constexpr const char* kRecomputeAttr = "__recompute_output_in_backward_pass";
// PopART's delimiter between name scopes, and before the counter that makes an id unique.
constexpr const char* kDelimiter = "/";

std::string normDomain(const std::string& d) { return d == "ai.onnx" ? "" : d; }

std::string listSome(const std::vector<std::string>& ids, size_t max = 12) {
  if (ids.empty()) return "none yet";
  std::string s;
  for (size_t i = 0; i < ids.size() && i < max; ++i) s += (i ? ", " : "") + ids[i];
  if (ids.size() > max) s += fmt::format(", ... ({} in all)", ids.size());
  return s;
}

}  // namespace

struct Builder::Impl {
  std::unique_ptr<ir::Graph> graph = std::make_unique<ir::Graph>("BuilderGraph");
  onnxio::ModelInfo info;
  int onnxOpset = 0;  // 0: no ai.onnx op yet
  std::vector<TensorId> inputOrder;  // inputs and initialized inputs, as added
  std::vector<TensorId> valueOrder;  // op outputs, as added
  std::vector<std::string> nameScopes;
  std::map<std::string, std::vector<int64_t>> attributeScopes;

  bool taken(const std::string& id) const { return graph->hasTensor(id); }

  // PopART's id scheme: scopes + name (+ ":index"), then "/1", "/2", ... until unused.
  std::string nextId(const std::string& name, int index = -1) const {
    std::string base;
    for (const auto& s : nameScopes) base += s + kDelimiter;
    base += name;
    if (index >= 0) base += ":" + std::to_string(index);
    std::string id = base;
    for (int64_t k = 1; taken(id); ++k) id = base + kDelimiter + std::to_string(k);
    return id;
  }

  ir::Tensor& tensor(const TensorId& id, const char* what) const {
    ir::Tensor* t = graph->findTensor(id);
    if (!t) {
      std::vector<std::string> ids;
      for (const auto& i : inputOrder) ids.push_back(i);
      for (const auto& v : valueOrder) ids.push_back(v);
      GRAFT_THROW("{}: unknown tensor '{}' (tensors of the model: {})", what, id, listSome(ids));
    }
    return *t;
  }

  // The node whose outputs are exactly `outs` (PopART identifies nodes by their outputs).
  ir::Node& nodeByOutputs(const std::set<TensorId>& outs, const char* what) const {
    GRAFT_CHECK(!outs.empty(), "{}: no node output names given", what);
    const ir::Tensor& first = tensor(*outs.begin(), what);
    ir::Node* n = first.producer();
    GRAFT_CHECK(n, "{}: tensor '{}' is not produced by an op (it is a model input or weight)", what, first.id());
    std::set<TensorId> have;
    for (const ir::Tensor* t : n->outputs())
      if (t) have.insert(t->id());
    GRAFT_CHECK(have == outs, "{}: no op has exactly the outputs [{}]; {} has outputs [{}]. Name all outputs of one op.",
                what, fmt::join(outs, ", "), n->describe(), fmt::join(have, ", "));
    return *n;
  }

  // The value of a tensor known while building: constant initializers and outputs of Constant
  // ops. ONNX's inference needs them for shape inputs (Reshape's shape, Slice's starts, ...).
  const NDArray* constantValue(const ir::Tensor& t) {
    if (t.kind() == ir::TensorKind::Constant) return t.data();
    const ir::Node* p = t.producer();
    if (p && p->type() == "Constant" && p->domain().empty())
      if (const ir::AttrValue* v = p->attrs().find("value"))
        if (const auto* a = std::get_if<NDArray>(v)) return a;
    // The Shape of a tensor whose shape is static is known while building (PopART programs
    // reshape with it: Reshape(x, Shape(y))).
    if (p && p->type() == "Shape" && p->domain().empty() && p->input(0) && p->input(0)->info().isStatic()) {
      auto it = shapeValues.find(&t);
      if (it != shapeValues.end()) return &it->second;
      Shape dims = p->input(0)->info().shape();
      auto rank = static_cast<int64_t>(dims.size());
      auto clampAxis = [rank](int64_t a) { return std::clamp(a < 0 ? a + rank : a, int64_t{0}, rank); };
      int64_t start = clampAxis(p->attrInt("start", 0)), end = clampAxis(p->attrInt("end", rank));
      NDArray v(DataType::Int64, {std::max<int64_t>(0, end - start)});
      for (int64_t i = start; i < end; ++i) v.data<int64_t>()[i - start] = dims[static_cast<size_t>(i)];
      return &shapeValues.emplace(&t, std::move(v)).first->second;
    }
    return nullptr;
  }
  /// Values of Shape ops' outputs computed by constantValue.
  std::map<const ir::Tensor*, NDArray> shapeValues;

  void inferTypes(ir::Node& n) {
    std::vector<ir::ValueType> in;
    std::vector<const NDArray*> consts;
    for (ir::Tensor* t : n.inputs()) {
      in.push_back(t ? t->type() : ir::ValueType{});
      consts.push_back(t ? constantValue(*t) : nullptr);
    }
    std::vector<ir::ValueType> out;
    const ops::OpDef* def = ops::Registry::instance().find(n);
    if (def && def->infer) {
      out = def->infer(n, in, consts);
    } else if (n.domain().empty()) {
      out = onnxio::inferWithOnnxSchema(n, in, consts);
    } else if (n.domain() == ops::kGraphcoreDomain && findOpSignature(n.domain(), n.type(), 1)) {
      out = api::inferGraphcorePlaceholder(n);
    }
    for (size_t i = 0; i < n.numOutputs() && i < out.size(); ++i)
      if (ir::Tensor* t = n.output(i)) t->setType(out[i]);
  }

  void applyAnnotation(ir::Node& n, const std::string& name, const AttributeValue& v) {
    auto asInt = [&]() {
      const int64_t* i = std::get_if<int64_t>(&v);
      GRAFT_CHECK(i, "{}: annotation '{}' must be an integer, got {}", n.describe(), name,
                  attributeKindName(api::kindOfValue(v)));
      return *i;
    };
    if (name == kVirtualGraphAttr) n.virtualGraph = asInt();
    else if (name == kPipelineStageAttr) n.pipelineStage = asInt();
    else if (name == kRecomputeAttr) n.recompute = asInt() != 0;
    else n.attrs().set(name, api::coerceAttribute(v, api::kindOfValue(v), name));
  }
};

Builder::Builder() : impl_(std::make_unique<Impl>()) {}
Builder::~Builder() = default;

std::unique_ptr<Builder> Builder::createFromOnnxModel(const std::string& model) {
  auto b = std::make_unique<Builder>();
  // A short string without control characters is a path (serialized models start with a tag byte < 0x20).
  bool path = !model.empty() && model.size() < 4096 &&
              std::none_of(model.begin(), model.end(), [](char c) { return static_cast<unsigned char>(c) < 0x20; });
  onnxio::Model m = path ? onnxio::loadModelFile(model) : onnxio::loadModelBytes(model);
  Impl& im = *b->impl_;
  im.graph = std::move(m.graph);
  im.info = m.info;
  im.onnxOpset = static_cast<int>(im.graph->opsetVersion());
  for (const ir::Tensor* t : im.graph->inputs()) im.inputOrder.push_back(t->id());
  for (const ir::Tensor* t : im.graph->initializers()) im.inputOrder.push_back(t->id());
  for (const ir::Node* n : im.graph->schedule())
    for (const ir::Tensor* t : n->outputs())
      if (t) im.valueOrder.push_back(t->id());
  return b;
}

TensorId Builder::addInputTensor(const TensorInfo& info, const std::string& debugName) {
  GRAFT_CHECK(info.dataType() != DataType::Undefined, "addInputTensor('{}'): the tensor needs a data type", debugName);
  TensorId id = impl_->nextId(debugName.empty() ? "input" : debugName);
  ir::Tensor* t = impl_->graph->addTensor(id, ir::ValueType::tensor(info), ir::TensorKind::Input);
  impl_->graph->addInput(t);
  impl_->inputOrder.push_back(id);
  return id;
}

TensorId Builder::addInputTensor(const std::string& dtype, const Shape& shape, const std::string& debugName) {
  return addInputTensor(TensorInfo(dtype, shape), debugName);
}

TensorId Builder::addInitializedInputTensor(const NDArray& value, const std::string& debugName) {
  GRAFT_CHECK(value.valid(), "addInitializedInputTensor('{}'): the value is an empty array", debugName);
  GRAFT_CHECK(value.dtype() != DataType::String, "addInitializedInputTensor('{}'): string tensors cannot be weights",
              debugName);
  TensorId id = impl_->nextId(debugName.empty() ? "init_input" : debugName);
  bool weight = isFloatingPoint(value.dtype());
  impl_->graph->addInitializer(id, value.clone(), weight ? ir::TensorKind::Variable : ir::TensorKind::Constant);
  impl_->inputOrder.push_back(id);
  return id;
}

void Builder::addOutputTensor(const TensorId& id) {
  ir::Tensor& t = impl_->tensor(id, "addOutputTensor");
  GRAFT_CHECK(!t.isGraphOutput(), "addOutputTensor: '{}' is already an output of the model", id);
  impl_->graph->addOutput(&t);
}

std::vector<TensorId> Builder::addOp(const std::string& opType, const std::string& domainArg, int opsetVersion,
                                     const std::vector<TensorId>& inputs, const AttributeMap& attributes, int numOutputs,
                                     const std::string& debugName) {
  Impl& im = *impl_;
  std::string domain = normDomain(domainArg);
  std::string what = fmt::format("{} op{}", opType, debugName.empty() ? "" : " '" + debugName + "'");
  GRAFT_CHECK(!opType.empty(), "addOp: the op type is empty");
  int version = opsetVersion;
  if (domain.empty()) {
    GRAFT_CHECK(opsetVersion >= 1 && opsetVersion <= onnxio::kCanonicalOpset,
                "{}: ai.onnx opset {} is not supported (graft supports opsets up to {})", what, opsetVersion,
                onnxio::kCanonicalOpset);
    GRAFT_CHECK(im.onnxOpset == 0 || im.onnxOpset == opsetVersion,
                "{}: invalid opset {} used to add an op; the model already uses ai.onnx opset {} and every ai.onnx op of "
                "one model must use the same opset",
                what, opsetVersion, im.onnxOpset);
  } else if (domain == ops::kGraphcoreDomain) {
    GRAFT_CHECK(opsetVersion == 1, "{}: ai.graphcore has only opset 1, got {}", what, opsetVersion);
  }
  std::optional<OpSignature> sig = findOpSignature(domain, opType, version);
  if (domain.empty() && !sig) {
    std::string hint;
    for (int v = version + 1; v <= onnxio::kCanonicalOpset && hint.empty(); ++v)
      if (findOpSignature("", opType, v)) hint = fmt::format(" (it exists from opset {})", v);
    GRAFT_THROW("{}: ONNX has no op '{}' in ai.onnx opset {}{}", what, opType, version, hint);
  }

  // Inputs.
  std::vector<ir::Tensor*> ins;
  for (size_t i = 0; i < inputs.size(); ++i) {
    if (inputs[i].empty()) {
      GRAFT_CHECK(!sig || static_cast<int>(i) >= sig->minInputs || sig->numFormalInputs > static_cast<int>(i),
                  "{}: input {} is required, got an empty id", what, i);
      ins.push_back(nullptr);
      continue;
    }
    ins.push_back(&im.tensor(inputs[i], what.c_str()));
  }
  if (sig) {
    int n = static_cast<int>(inputs.size());
    GRAFT_CHECK(n >= sig->minInputs && (sig->maxInputs < 0 || n <= sig->maxInputs),
                "{}: takes {} inputs, got {}", what,
                sig->maxInputs < 0 ? fmt::format("at least {}", sig->minInputs)
                : sig->minInputs == sig->maxInputs ? std::to_string(sig->minInputs)
                                                   : fmt::format("{} to {}", sig->minInputs, sig->maxInputs),
                n);
  }

  // Outputs.
  if (numOutputs < 0) numOutputs = sig ? std::max(1, sig->minOutputs) : 1;
  if (sig)
    GRAFT_CHECK(numOutputs >= sig->minOutputs && (sig->maxOutputs < 0 || numOutputs <= sig->maxOutputs),
                "{}: has {} outputs, {} were asked for", what,
                sig->maxOutputs < 0 ? fmt::format("at least {}", sig->minOutputs)
                : sig->minOutputs == sig->maxOutputs ? std::to_string(sig->minOutputs)
                                                     : fmt::format("{} to {}", sig->minOutputs, sig->maxOutputs),
                numOutputs);
  GRAFT_CHECK(numOutputs >= 1, "{}: an op needs at least one output, got {}", what, numOutputs);

  // Attributes, converted to the kinds the signature declares.
  ir::Attributes attrs;
  std::map<std::string, AttributeValue> annotations;
  for (const auto& [name, v] : attributes) {
    if (name.rfind("__", 0) == 0) {
      annotations[name] = v;
      continue;
    }
    std::string awhat = fmt::format("{}: attribute '{}'", what, name);
    AttributeKind kind = AttributeKind::Other;
    if (sig && !sig->attributes.empty()) {
      const std::string& key = name;  // (clang 14 refuses a lambda capture of the structured binding)
      auto it =
          std::find_if(sig->attributes.begin(), sig->attributes.end(), [&](const auto& a) { return a.name == key; });
      if (it == sig->attributes.end()) {
        std::vector<std::string> names;
        for (const auto& a : sig->attributes) names.push_back(a.name);
        GRAFT_THROW("{}: unknown attribute '{}' (attributes of {}: {})", what, name, opType, fmt::join(names, ", "));
      }
      kind = it->kind;
    } else if (sig && domain.empty()) {
      GRAFT_THROW("{}: unknown attribute '{}' ({} has no attributes)", what, name, opType);
    }
    attrs.set(name, api::coerceAttribute(v, kind, awhat));
  }
  if (sig)
    for (const auto& a : sig->attributes)
      GRAFT_CHECK(!a.required || attrs.has(a.name), "{}: required attribute '{}' ({}) is missing", what, a.name,
                  attributeKindName(a.kind));

  std::vector<std::string> outIds;
  for (int i = 0; i < numOutputs; ++i) {
    // Reserve each id before naming the next, so that all are distinct.
    outIds.push_back(im.nextId(opType, i));
    im.graph->addTensor(outIds.back(), ir::ValueType::tensor(TensorInfo{}), ir::TensorKind::Activation);
  }
  std::string nodeName;
  if (!debugName.empty() || !im.nameScopes.empty()) nodeName = getNameScope(debugName.empty() ? opType : debugName);
  ir::Node* n = im.graph->addNode(opType, domain, ins, outIds, std::move(attrs), nodeName);
  // Inference reads the opset from the graph, so it is set before (and undone if the op fails).
  int64_t previousOpset = im.graph->opsetVersion();
  bool hadDomain = domain.empty() || im.graph->otherOpsets.count(domain);
  if (domain.empty()) im.graph->setOpsetVersion(version);
  else im.graph->otherOpsets[domain] = version;
  try {
    for (const auto& [name, scope] : im.attributeScopes)
      if (!scope.empty()) im.applyAnnotation(*n, name, scope.back());
    for (const auto& [name, v] : annotations) im.applyAnnotation(*n, name, v);
    if (domain.empty()) onnxio::verifyWithOnnxSchema(*n, version);
    im.inferTypes(*n);
    for (const ir::Tensor* t : n->outputs()) {
      const TensorInfo& info = t->info();
      if (!info.hasShape()) continue;
      for (const Dim& d : info.dims())
        GRAFT_CHECK(d.known() || !d.param.empty() || d.value == -1, "{}: output '{}' has an invalid shape {}",
                    n->describe(), t->id(), info.str());
    }
  } catch (...) {
    im.graph->setOpsetVersion(previousOpset);
    if (!hadDomain) im.graph->otherOpsets.erase(domain);
    std::vector<ir::Tensor*> outs = n->outputs();
    im.graph->removeNode(n);
    for (ir::Tensor* t : outs)
      if (t) im.graph->removeTensor(t);
    throw;
  }
  if (domain.empty()) im.onnxOpset = version;
  for (const auto& id : outIds) im.valueOrder.push_back(id);
  return outIds;
}

std::string Builder::getModelProto() const {
  // A model with no ai.onnx op yet still declares an ai.onnx opset (the canonical one).
  if (impl_->onnxOpset == 0) impl_->graph->setOpsetVersion(onnxio::kCanonicalOpset);
  return onnxio::saveModelBytes(*impl_->graph, impl_->info);
}

void Builder::saveModelProto(const std::string& path) const {
  if (impl_->onnxOpset == 0) impl_->graph->setOpsetVersion(onnxio::kCanonicalOpset);
  onnxio::saveModelFile(*impl_->graph, path, impl_->info);
}

void Builder::setGraphName(const std::string& name) { impl_->graph->setName(name.empty() ? "BuilderGraph" : name); }

std::vector<TensorId> Builder::getInputTensorIds() const { return impl_->inputOrder; }

std::vector<TensorId> Builder::getOutputTensorIds() const {
  std::vector<TensorId> out;
  for (const ir::Tensor* t : impl_->graph->outputs()) out.push_back(t->id());
  return out;
}

std::vector<TensorId> Builder::getValueTensorIds() const { return impl_->valueOrder; }

std::vector<TensorId> Builder::getTrainableTensorIds() const {
  std::vector<TensorId> out;
  for (const auto& id : impl_->inputOrder)
    if (impl_->graph->tensor(id).kind() == ir::TensorKind::Variable) out.push_back(id);
  return out;
}

bool Builder::hasTensor(const TensorId& id) const { return impl_->graph->hasTensor(id); }

bool Builder::isInitializer(const TensorId& id) const {
  const ir::Tensor& t = impl_->tensor(id, "isInitializer");
  return t.data() != nullptr;
}

TensorInfo Builder::getTensorInfo(const TensorId& id) const { return impl_->tensor(id, "getTensorInfo").info(); }

Shape Builder::getTensorShape(const TensorId& id) const {
  const TensorInfo& info = impl_->tensor(id, "getTensorShape").info();
  GRAFT_CHECK(info.isStatic(), "getTensorShape: the shape of '{}' is not fully known ({})", id, info.str());
  return info.shape();
}

std::string Builder::getTensorDtypeString(const TensorId& id) const {
  const TensorInfo& info = impl_->tensor(id, "getTensorDtypeString").info();
  GRAFT_CHECK(info.dataType() != DataType::Undefined, "getTensorDtypeString: the type of '{}' is not known", id);
  return std::string(dtypeNumpyName(info.dataType()));
}

int Builder::onnxOpsetVersion() const { return impl_->onnxOpset; }

void Builder::virtualGraph(const TensorId& out, int64_t value) {
  GRAFT_CHECK(value >= 0, "virtualGraph('{}'): the virtual graph id must be >= 0, got {}", out, value);
  ir::Node* n = impl_->tensor(out, "virtualGraph").producer();
  GRAFT_CHECK(n, "virtualGraph: tensor '{}' is not produced by an op", out);
  n->virtualGraph = value;
}

void Builder::pipelineStage(const TensorId& out, int64_t value) {
  GRAFT_CHECK(value >= 0, "pipelineStage('{}'): the stage must be >= 0, got {}", out, value);
  ir::Node* n = impl_->tensor(out, "pipelineStage").producer();
  GRAFT_CHECK(n, "pipelineStage: tensor '{}' is not produced by an op", out);
  n->pipelineStage = value;
}

void Builder::recomputeOutputInBackwardPass(const TensorId& out, bool value) {
  ir::Node* n = impl_->tensor(out, "recomputeOutputInBackwardPass").producer();
  GRAFT_CHECK(n, "recomputeOutputInBackwardPass: tensor '{}' is not produced by an op", out);
  n->recompute = value;
}

int64_t Builder::getVirtualGraph(const TensorId& out) const {
  ir::Node* n = impl_->tensor(out, "getVirtualGraph").producer();
  GRAFT_CHECK(n && n->virtualGraph, "getVirtualGraph: the op producing '{}' has no virtual graph", out);
  return *n->virtualGraph;
}

int64_t Builder::getPipelineStage(const TensorId& out) const {
  ir::Node* n = impl_->tensor(out, "getPipelineStage").producer();
  GRAFT_CHECK(n && n->pipelineStage, "getPipelineStage: the op producing '{}' has no pipeline stage", out);
  return *n->pipelineStage;
}

bool Builder::getRecomputeOutputInBackwardPass(const TensorId& out) const {
  ir::Node* n = impl_->tensor(out, "getRecomputeOutputInBackwardPass").producer();
  return n && n->recompute;
}

void Builder::pushAttributeScope(const std::string& name, int64_t value) {
  GRAFT_CHECK(name == kVirtualGraphAttr || name == kPipelineStageAttr,
              "unknown scoped attribute '{}' (expected {} or {})", name, kVirtualGraphAttr, kPipelineStageAttr);
  GRAFT_CHECK(value >= 0, "{} must be >= 0, got {}", name, value);
  impl_->attributeScopes[name].push_back(value);
}

void Builder::popAttributeScope(const std::string& name) {
  auto it = impl_->attributeScopes.find(name);
  GRAFT_CHECK(it != impl_->attributeScopes.end() && !it->second.empty(), "no scope of '{}' is open", name);
  it->second.pop_back();
}

std::optional<int64_t> Builder::currentAttributeScope(const std::string& name) const {
  auto it = impl_->attributeScopes.find(name);
  if (it == impl_->attributeScopes.end() || it->second.empty()) return std::nullopt;
  return it->second.back();
}

void Builder::pushNameScope(const std::string& name) { impl_->nameScopes.push_back(name); }

void Builder::popNameScope() {
  GRAFT_CHECK(!impl_->nameScopes.empty(), "popNameScope: no name scope is open");
  impl_->nameScopes.pop_back();
}

std::string Builder::getNameScope(const std::string& name) const {
  std::string s;
  for (const auto& n : impl_->nameScopes) s += n + kDelimiter;
  return s + name;
}

void Builder::addNodeAttribute(const std::string& name, const AttributeValue& value, const std::set<TensorId>& outs) {
  ir::Node& n = impl_->nodeByOutputs(outs, "addNodeAttribute");
  if (name.rfind("__", 0) == 0) {
    impl_->applyAnnotation(n, name, value);
    return;
  }
  std::string what = fmt::format("addNodeAttribute: {}: attribute '{}'", n.describe(), name);
  int64_t version = n.domain().empty() ? impl_->onnxOpset : 1;
  AttributeKind kind = AttributeKind::Other;
  if (auto sig = findOpSignature(n.domain(), n.type(), static_cast<int>(version)); sig && !sig->attributes.empty()) {
    auto it = std::find_if(sig->attributes.begin(), sig->attributes.end(), [&](const auto& a) { return a.name == name; });
    GRAFT_CHECK(it != sig->attributes.end(), "{} is not an attribute of {}", what, n.type());
    kind = it->kind;
  } else {
    GRAFT_CHECK(!n.domain().empty(), "{} is not an attribute of {}", what, n.type());
  }
  n.attrs().set(name, api::coerceAttribute(value, kind, what));
}

bool Builder::nodeHasAttribute(const std::string& name, const std::set<TensorId>& outs) const {
  const ir::Node& n = impl_->nodeByOutputs(outs, "nodeHasAttribute");
  if (name == kVirtualGraphAttr) return n.virtualGraph.has_value();
  if (name == kPipelineStageAttr) return n.pipelineStage.has_value();
  if (name == kRecomputeAttr) return n.recompute;
  return n.attrs().has(name);
}

AttributeValue Builder::getNodeAttribute(const std::string& name, const std::set<TensorId>& outs) const {
  const ir::Node& n = impl_->nodeByOutputs(outs, "getNodeAttribute");
  if (name == kVirtualGraphAttr && n.virtualGraph) return *n.virtualGraph;
  if (name == kPipelineStageAttr && n.pipelineStage) return *n.pipelineStage;
  if (name == kRecomputeAttr) return int64_t{n.recompute ? 1 : 0};
  const ir::AttrValue* v = n.attrs().find(name);
  GRAFT_CHECK(v, "getNodeAttribute: {} has no attribute '{}'", n.describe(), name);
  return api::toPublicAttribute(*v, fmt::format("{}: attribute '{}'", n.describe(), name));
}

void Builder::removeNodeAttribute(const std::string& name, const std::set<TensorId>& outs) {
  ir::Node& n = impl_->nodeByOutputs(outs, "removeNodeAttribute");
  if (name == kVirtualGraphAttr) n.virtualGraph.reset();
  else if (name == kPipelineStageAttr) n.pipelineStage.reset();
  else if (name == kRecomputeAttr) n.recompute = false;
  else {
    GRAFT_CHECK(n.attrs().has(name), "removeNodeAttribute: {} has no attribute '{}'", n.describe(), name);
    n.attrs().erase(name);
  }
}

std::vector<std::string> Builder::getAllNodeAttributeNames(const std::set<TensorId>& outs) const {
  const ir::Node& n = impl_->nodeByOutputs(outs, "getAllNodeAttributeNames");
  std::vector<std::string> names;
  for (const auto& [name, v] : n.attrs().all()) names.push_back(name);
  if (n.virtualGraph) names.push_back(kVirtualGraphAttr);
  if (n.pipelineStage) names.push_back(kPipelineStageAttr);
  if (n.recompute) names.push_back(kRecomputeAttr);
  return names;
}

}  // namespace graft
