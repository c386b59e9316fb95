// ONNX file -> graft IR: parse, load external data, check, infer shapes, convert to the canonical
// opset, expand functions, build the IR.
#include <onnx/checker.h>
#include <onnx/defs/function.h>
#include <onnx/defs/schema.h>
#include <onnx/shape_inference/implementation.h>
#include <onnx/version_converter/convert.h>

#include <google/protobuf/io/coded_stream.h>
#include <google/protobuf/io/zero_copy_stream_impl_lite.h>

#include <filesystem>
#include <fstream>
#include <set>
#include <sstream>
#include <unordered_map>

#include "onnx/model_io.hpp"
#include "onnx/proto_convert.hpp"
#include "support/check.hpp"
#include "support/logging.hpp"

namespace graft::onnxio {
namespace fs = std::filesystem;
namespace {

bool isOnnxDomain(const std::string& d) { return d.empty() || d == "ai.onnx"; }

std::string readFileBytes(const std::string& path) {
  std::error_code ec;
  GRAFT_CHECK(fs::exists(path, ec), "model file '{}' does not exist", path);
  GRAFT_CHECK(!fs::is_directory(path, ec), "model path '{}' is a directory, not an ONNX file", path);
  std::ifstream f(path, std::ios::binary);
  GRAFT_CHECK(f, "cannot open model file '{}'", path);
  std::ostringstream ss;
  ss << f.rdbuf();
  GRAFT_CHECK(!f.bad(), "error reading model file '{}'", path);
  return ss.str();
}

void parseModel(const std::string& bytes, const std::string& source, ::onnx::ModelProto* m) {
  GRAFT_CHECK(!bytes.empty(), "{} is not an ONNX model: it is empty", source);
  google::protobuf::io::ArrayInputStream raw(bytes.data(), static_cast<int>(std::min<size_t>(bytes.size(), INT32_MAX)));
  google::protobuf::io::CodedInputStream in(&raw);
  in.SetTotalBytesLimit(INT32_MAX);
  bool ok = bytes.size() <= INT32_MAX && m->ParseFromCodedStream(&in) && in.ConsumedEntireMessage();
  GRAFT_CHECK(ok, "{} is not an ONNX model: it does not parse as an ONNX ModelProto (truncated or corrupted file?)",
              source);
  GRAFT_CHECK(m->has_graph(), "{} is not an ONNX model: it has no graph", source);
  GRAFT_CHECK(m->ir_version() > 0, "{} is not an ONNX model: it has no ir_version", source);
}

// ---- external data ----------------------------------------------------------------------------

void loadExternal(::onnx::TensorProto* t, const std::string& baseDir, const std::string& source) {
  if (t->data_location() != ::onnx::TensorProto::EXTERNAL) return;
  std::string what = fmt::format("{}: tensor '{}'", source, t->name());
  std::string location;
  int64_t offset = 0, length = -1;
  for (const auto& kv : t->external_data()) {
    try {
      if (kv.key() == "location") location = kv.value();
      if (kv.key() == "offset") offset = std::stoll(kv.value());
      if (kv.key() == "length") length = std::stoll(kv.value());
    } catch (const std::exception&) {
      GRAFT_THROW("{} has a malformed external data entry '{}': '{}'", what, kv.key(), kv.value());
    }
  }
  GRAFT_CHECK(!location.empty(), "{} stores its data externally but names no location", what);
  GRAFT_CHECK(!baseDir.empty(), "{} stores its data in '{}', but the model was loaded from bytes without a folder; load it "
              "from its file instead", what, location);
  fs::path rel(location);
  GRAFT_CHECK(!rel.is_absolute() && !rel.has_root_name() && !rel.has_root_directory(),
              "{}: external data path '{}' is absolute; it must be relative to the model's folder", what, location);
  for (const auto& part : rel)
    GRAFT_CHECK(part != "..", "{}: external data path '{}' leaves the model's folder", what, location);
  std::error_code ec;
  fs::path base = fs::canonical(baseDir, ec);
  GRAFT_CHECK(!ec, "{}: cannot resolve the model folder '{}'", what, baseDir);
  fs::path full = fs::weakly_canonical(base / rel, ec);
  GRAFT_CHECK(!ec, "{}: cannot resolve external data path '{}'", what, location);
  auto [b, f] = std::mismatch(base.begin(), base.end(), full.begin(), full.end());
  GRAFT_CHECK(b == base.end(), "{}: external data path '{}' resolves to '{}', outside the model's folder '{}'", what,
              location, full.string(), base.string());
  GRAFT_CHECK(fs::is_regular_file(full, ec), "{}: external data file '{}' does not exist", what, full.string());
  auto fileSize = static_cast<int64_t>(fs::file_size(full, ec));
  GRAFT_CHECK(offset >= 0 && offset <= fileSize, "{}: external data offset {} is outside '{}' ({} bytes)", what, offset,
              location, fileSize);
  if (length < 0) length = fileSize - offset;
  GRAFT_CHECK(length <= fileSize - offset, "{}: external data [{}, {}) runs past the end of '{}' ({} bytes)", what,
              offset, offset + length, location, fileSize);
  std::ifstream in(full, std::ios::binary);
  std::string data(static_cast<size_t>(length), '\0');
  in.seekg(offset);
  in.read(data.data(), length);
  GRAFT_CHECK(in.gcount() == length, "{}: could not read {} bytes from '{}'", what, length, location);
  t->set_raw_data(std::move(data));
  t->clear_external_data();
  t->set_data_location(::onnx::TensorProto::DEFAULT);
}

void loadExternalInGraph(::onnx::GraphProto* g, const std::string& baseDir, const std::string& source);

void loadExternalInAttrs(::onnx::NodeProto* n, const std::string& baseDir, const std::string& source) {
  for (auto& a : *n->mutable_attribute()) {
    if (a.has_t()) loadExternal(a.mutable_t(), baseDir, source);
    for (auto& t : *a.mutable_tensors()) loadExternal(&t, baseDir, source);
    if (a.has_g()) loadExternalInGraph(a.mutable_g(), baseDir, source);
    for (auto& g : *a.mutable_graphs()) loadExternalInGraph(&g, baseDir, source);
  }
}

void loadExternalInGraph(::onnx::GraphProto* g, const std::string& baseDir, const std::string& source) {
  for (auto& t : *g->mutable_initializer()) loadExternal(&t, baseDir, source);
  for (auto& s : *g->mutable_sparse_initializer()) {
    loadExternal(s.mutable_values(), baseDir, source);
    loadExternal(s.mutable_indices(), baseDir, source);
  }
  for (auto& n : *g->mutable_node()) loadExternalInAttrs(&n, baseDir, source);
}

// ---- PopART annotations -------------------------------------------------------------------------
// PopART writes "__ipu_number" and friends onto standard ops; the ONNX checker rejects unknown
// attributes, so they are set aside (keyed by the node's first output) before checking.

using Annotations = std::unordered_map<std::string, std::vector<::onnx::AttributeProto>>;

void stripAnnotations(::onnx::GraphProto* g, Annotations* out) {
  for (auto& n : *g->mutable_node()) {
    auto* attrs = n.mutable_attribute();
    for (int i = attrs->size() - 1; i >= 0; --i) {
      if (attrs->Get(i).name().rfind("__", 0) == 0) {
        if (n.output_size() > 0) (*out)[n.output(0)].push_back(attrs->Get(i));
        attrs->DeleteSubrange(i, 1);
      }
    }
    for (auto& a : *n.mutable_attribute()) {
      if (a.has_g()) stripAnnotations(a.mutable_g(), out);
      for (auto& sg : *a.mutable_graphs()) stripAnnotations(&sg, out);
    }
  }
}

// ---- opsets, conversion, functions ---------------------------------------------------------------

int64_t onnxOpset(const ::onnx::ModelProto& m) {
  int64_t v = 0;
  for (const auto& o : m.opset_import())
    if (isOnnxDomain(o.domain())) v = o.version();
  return v;
}

void collectTypes(const ::onnx::GraphProto& g, std::unordered_map<std::string, ::onnx::TypeProto>* types) {
  for (const auto& v : g.input()) (*types)[v.name()] = v.type();
  for (const auto& v : g.output()) (*types)[v.name()] = v.type();
  for (const auto& v : g.value_info()) (*types)[v.name()] = v.type();
}

// The 1.12 version converter drops sequence and optional types; put them back.
void restoreTypes(::onnx::GraphProto* g, const std::unordered_map<std::string, ::onnx::TypeProto>& types) {
  auto fix = [&](::onnx::ValueInfoProto& v) {
    auto it = types.find(v.name());
    if (it == types.end()) return;
    if (!v.has_type() || v.type().value_case() == ::onnx::TypeProto::VALUE_NOT_SET ||
        it->second.value_case() != ::onnx::TypeProto::kTensorType)
      *v.mutable_type() = it->second;
  };
  for (auto& v : *g->mutable_input()) fix(v);
  for (auto& v : *g->mutable_output()) fix(v);
}

void runShapeInference(::onnx::ModelProto* m) {
  ::onnx::ShapeInferenceOptions opts(/*check_type=*/false, /*error_mode=*/0, /*data_prop=*/true);
  try {
    ::onnx::shape_inference::InferShapes(*m, ::onnx::OpSchemaRegistry::Instance(), opts);
  } catch (const std::exception& e) {
    // Inference is best effort here; graft infers again, node by node, when it compiles.
    GRAFT_LOG_DEBUG("ONNX shape inference stopped early: {}", e.what());
  }
}

void convertOpset(::onnx::ModelProto* m, const std::string& source) {
  int64_t v = onnxOpset(*m);
  if (v == 0 || v == kCanonicalOpset) return;
  GRAFT_CHECK(v < kCanonicalOpset, "{} uses ai.onnx opset {}, newer than graft supports ({}).", source, v,
              kCanonicalOpset);
  std::unordered_map<std::string, ::onnx::TypeProto> types;
  collectTypes(m->graph(), &types);
  ::onnx::ModelProto converted;
  try {
    converted = ::onnx::version_conversion::ConvertVersion(*m, static_cast<int>(kCanonicalOpset));
  } catch (const std::exception& e) {
    GRAFT_THROW("{}: cannot convert from ai.onnx opset {} to {}: {}", source, v, kCanonicalOpset, e.what());
  }
  restoreTypes(converted.mutable_graph(), types);
  if (converted.ir_version() < 8) converted.set_ir_version(8);
  *m = std::move(converted);
}

// Opset-6 PRelu (as older PyTorch exported it) applied a [C] slope per channel (axis 1); from
// opset 7 the slope broadcasts numpy-style from the last axis, and the version converter leaves
// it as it was. So for models older than opset 7, a [C] slope initializer of an input of rank
// r >= 3 becomes [C, 1, ..., 1] (r - 1 dims). `types` holds the value types from before conversion.
void fixLegacyPreluSlopes(::onnx::GraphProto* g, const std::unordered_map<std::string, ::onnx::TypeProto>& types) {
  std::set<std::string> done;
  for (const auto& n : g->node()) {
    if (n.op_type() != "PRelu" || !isOnnxDomain(n.domain()) || n.input_size() < 2 || done.count(n.input(1))) continue;
    auto xt = types.find(n.input(0));
    if (xt == types.end() || !xt->second.has_tensor_type() || !xt->second.tensor_type().has_shape()) continue;
    const auto& xs = xt->second.tensor_type().shape();
    if (xs.dim_size() < 3) continue;
    for (auto& init : *g->mutable_initializer()) {
      if (init.name() != n.input(1) || init.dims_size() != 1 || init.dims(0) == 1) continue;
      if (xs.dim(1).has_dim_value() && xs.dim(1).dim_value() != init.dims(0)) continue;  // not per channel: left to fail
      for (int i = 2; i < xs.dim_size(); ++i) init.add_dims(1);
      for (auto& vi : *g->mutable_input())
        if (vi.name() == init.name() && vi.type().tensor_type().has_shape())
          for (int i = 2; i < xs.dim_size(); ++i) vi.mutable_type()->mutable_tensor_type()->mutable_shape()->add_dim()->set_dim_value(1);
      done.insert(init.name());
    }
  }
}

struct FunctionExpander {
  const ::onnx::ModelProto& model;
  const ImportOptions& options;
  std::unordered_map<std::string, ::onnx::TypeProto> types;
  int expanded = 0;

  const ::onnx::FunctionProto* localFunction(const ::onnx::NodeProto& n) const {
    for (const auto& f : model.functions())
      if (f.name() == n.op_type() && f.domain() == n.domain()) return &f;
    return nullptr;
  }

  // Fills `body` and returns true when `n` should be replaced by a function body.
  bool bodyFor(const ::onnx::NodeProto& n, int64_t opset, ::onnx::FunctionProto* body) {
    if (const auto* f = localFunction(n)) {
      *body = *f;
      return true;
    }
    if (!isOnnxDomain(n.domain()) || !options.expandFunction || !options.expandFunction(n.domain(), n.op_type()))
      return false;
    const auto* schema = ::onnx::OpSchemaRegistry::Schema(n.op_type(), static_cast<int>(opset), "");
    if (!schema) return false;
    if (schema->HasFunction()) {
      *body = *schema->GetFunction();
      return true;
    }
    // Context-dependent function bodies are not expanded: ONNX 1.12's builders crash on some
    // valid nodes (LayerNormalization), and graft implements those ops natively.
    return false;
  }

  bool expandGraph(::onnx::GraphProto* g, int64_t opset, int depth) {
    bool changed = false;
    for (auto& n : *g->mutable_node())
      for (auto& a : *n.mutable_attribute()) {
        if (a.has_g()) changed |= expandGraph(a.mutable_g(), opset, depth);
        for (auto& sg : *a.mutable_graphs()) changed |= expandGraph(&sg, opset, depth);
      }
    ::onnx::GraphProto out;
    bool any = false;
    for (const auto& n : g->node()) {
      ::onnx::FunctionProto body;
      if (bodyFor(n, opset, &body)) {
        GRAFT_CHECK(depth < 16, "function {} expands into itself too deeply", n.op_type());
        ::onnx::GraphProto tmp;
        ::onnx::FunctionExpandHelper(n, body, tmp, fmt::format("{}_f{}_", n.name().empty() ? n.op_type() : n.name(), expanded++));
        for (auto& bn : *tmp.mutable_node()) {
          // Attributes that refer to a caller attribute the caller did not set take their default.
          auto* attrs = bn.mutable_attribute();
          for (int i = attrs->size() - 1; i >= 0; --i)
            if (!attrs->Get(i).ref_attr_name().empty()) attrs->DeleteSubrange(i, 1);
          *out.add_node() = std::move(bn);
        }
        any = true;
      } else {
        *out.add_node() = n;
      }
    }
    if (any) {
      g->mutable_node()->Swap(out.mutable_node());
      changed = true;
    }
    return changed;
  }
};

// ---- ModelProto -> IR ---------------------------------------------------------------------------

class GraphImporter {
 public:
  GraphImporter(const std::string& source, const Annotations& ann) : source_(source), ann_(ann) {}

  void importGraph(const ::onnx::GraphProto& gp, ir::Graph* g) {
    std::string gname = gp.name().empty() ? g->name() : gp.name();
    g->setName(gname);
    std::unordered_map<std::string, ::onnx::TypeProto> types;
    collectTypes(gp, &types);
    auto typeOf = [&](const std::string& id) {
      auto it = types.find(id);
      return it == types.end() ? ir::ValueType::tensor(TensorInfo{})
                               : typeFromProto(it->second, fmt::format("{}: value '{}'", source_, id));
    };
    std::set<std::string> initNames;
    for (const auto& t : gp.initializer()) {
      std::string what = fmt::format("{}: initializer '{}'", source_, t.name());
      GRAFT_CHECK(!t.name().empty(), "{}: an initializer of graph '{}' has no name", source_, gname);
      GRAFT_CHECK(!g->hasTensor(t.name()), "{}: initializer '{}' is defined twice", source_, t.name());
      NDArray data = tensorFromProto(t, what);
      bool weight = isFloatingPoint(data.dtype());  // integer and bool initializers are constants, never trained
      g->addInitializer(t.name(), std::move(data), weight ? ir::TensorKind::Variable : ir::TensorKind::Constant);
      initNames.insert(t.name());
    }
    for (const auto& s : gp.sparse_initializer()) {
      std::string name = s.values().name();
      std::string what = fmt::format("{}: sparse initializer '{}'", source_, name);
      GRAFT_CHECK(!g->hasTensor(name), "{} is defined twice", what);
      g->addInitializer(name, sparseTensorFromProto(s, what), ir::TensorKind::Variable);
      initNames.insert(name);
    }
    for (const auto& vi : gp.input()) {
      if (initNames.count(vi.name())) continue;  // an initializer listed as input: a weight with a default
      GRAFT_CHECK(!vi.name().empty(), "{}: graph '{}' has an input without a name", source_, gname);
      GRAFT_CHECK(!g->hasTensor(vi.name()), "{}: graph input '{}' is defined twice", source_, vi.name());
      ir::Tensor* t = g->addTensor(vi.name(), typeFromProto(vi.type(), fmt::format("{}: input '{}'", source_, vi.name())),
                                   ir::TensorKind::Input);
      g->addInput(t);
    }
    // Pass 1: every node output exists before any node links to it.
    for (const auto& np : gp.node())
      for (const auto& o : np.output()) {
        if (o.empty()) continue;
        GRAFT_CHECK(!g->hasTensor(o), "{}: value '{}' is produced twice (node '{}' of type {}); ONNX values are assigned once",
                    source_, o, np.name(), np.op_type());
        g->addTensor(o, typeOf(o), ir::TensorKind::Activation);
      }
    // Pass 2: nodes.
    for (const auto& np : gp.node()) importNode(np, g);
    for (const auto& vo : gp.output()) {
      ir::Tensor* t = resolve(g, vo.name());
      GRAFT_CHECK(t, "{}: graph output '{}' is not produced by any node, input or initializer of graph '{}'", source_,
                  vo.name(), gname);
      if (vo.has_type() && !t->type().known()) t->setType(typeFromProto(vo.type(), "output " + vo.name()));
      g->addOutput(t);
    }
  }

 private:
  // Finds `id` in `g` or, creating OuterScope placeholders on the way, in an enclosing graph.
  ir::Tensor* resolve(ir::Graph* g, const std::string& id) {
    if (ir::Tensor* t = g->findTensor(id)) return t;
    if (!g->parent()) return nullptr;
    ir::Tensor* outer = resolve(g->parent(), id);
    if (!outer) return nullptr;
    return g->addTensor(id, outer->type(), ir::TensorKind::OuterScope);
  }

  void importNode(const ::onnx::NodeProto& np, ir::Graph* g) {
    std::string what = fmt::format("{}: {} node '{}'", source_, np.op_type(),
                                   np.name().empty() ? (np.output_size() ? np.output(0) : "") : np.name());
    std::vector<ir::Tensor*> inputs;
    for (const auto& i : np.input()) {
      if (i.empty()) {
        inputs.push_back(nullptr);
        continue;
      }
      ir::Tensor* t = resolve(g, i);
      GRAFT_CHECK(t, "{} reads '{}', which no node, input or initializer defines", what, i);
      inputs.push_back(t);
    }
    ir::Attributes attrs;
    std::optional<int64_t> vgraph, stage;
    bool recompute = false;
    auto importSub = [&](const ::onnx::GraphProto& sub) {
      auto sg = std::make_shared<ir::Graph>(sub.name(), g);
      importGraph(sub, sg.get());
      return sg;
    };
    for (const auto& a : np.attribute()) attrs.set(a.name(), attributeFromProto(a, what, importSub));
    if (np.output_size() > 0) {
      auto it = ann_.find(np.output(0));
      if (it != ann_.end())
        for (const auto& a : it->second) {
          if (a.name() == "__ipu_number") vgraph = a.i();
          else if (a.name() == "__pipeline_stage") stage = a.i();
          else if (a.name() == "__recompute_output_in_backward_pass") recompute = a.i() != 0;
          else attrs.set(a.name(), attributeFromProto(a, what, importSub));
        }
    }
    std::vector<std::string> outs(np.output().begin(), np.output().end());
    ir::Node* n = g->addNode(np.op_type(), np.domain() == "ai.onnx" ? "" : np.domain(), inputs, outs, std::move(attrs), np.name());
    n->virtualGraph = vgraph;
    n->pipelineStage = stage;
    n->recompute = recompute;
    // Outer-scope values read by the subgraphs become implicit inputs.
    std::vector<ir::Tensor*> implicit;
    std::set<std::string> seen;
    for (ir::Graph* sub : n->subgraphs())
      for (ir::Tensor* t : sub->tensors())
        if (t->kind() == ir::TensorKind::OuterScope && seen.insert(t->id()).second) {
          ir::Tensor* here = resolve(g, t->id());
          GRAFT_ASSERT(here, "outer value '{}' vanished", t->id());
          implicit.push_back(here);
        }
    n->setImplicitInputs(implicit);
  }

  std::string source_;
  const Annotations& ann_;
};

Model importProto(::onnx::ModelProto& m, const ImportOptions& options) {
  const std::string& source = options.sourceName;
  loadExternalInGraph(m.mutable_graph(), options.baseDir, source);
  Annotations ann;
  stripAnnotations(m.mutable_graph(), &ann);

  if (options.check) {
    try {
      ::onnx::checker::check_model(m);
    } catch (const std::exception& e) {
      GRAFT_THROW("{} is not a valid ONNX model: {}", source, e.what());
    }
  }
  Model out;
  out.info.irVersion = m.ir_version();
  out.info.producerName = m.producer_name();
  out.info.producerVersion = m.producer_version();
  out.info.domain = m.domain();
  out.info.docString = m.doc_string();
  out.info.modelVersion = m.model_version();
  out.info.originalOpset = onnxOpset(m);
  for (const auto& kv : m.metadata_props()) out.info.metadata[kv.key()] = kv.value();

  runShapeInference(&m);
  std::unordered_map<std::string, ::onnx::TypeProto> preTypes;
  collectTypes(m.graph(), &preTypes);
  convertOpset(&m, source);
  if (out.info.originalOpset > 0 && out.info.originalOpset < 7) fixLegacyPreluSlopes(m.mutable_graph(), preTypes);
  {
    FunctionExpander fx{m, options, {}};
    collectTypes(m.graph(), &fx.types);
    int64_t opset = onnxOpset(m) ? onnxOpset(m) : kCanonicalOpset;
    bool changed = false;
    for (int round = 0; round < 8 && fx.expandGraph(m.mutable_graph(), opset, round); ++round) changed = true;
    if (changed) {
      m.clear_functions();
      bool hasOnnx = false;
      for (const auto& o : m.opset_import()) hasOnnx |= isOnnxDomain(o.domain());
      if (!hasOnnx) {
        auto* o = m.add_opset_import();
        o->set_domain("");
        o->set_version(kCanonicalOpset);
      }
    }
  }
  runShapeInference(&m);

  auto graph = std::make_unique<ir::Graph>(m.graph().name().empty() ? "main" : m.graph().name());
  graph->setOpsetVersion(onnxOpset(m) ? onnxOpset(m) : kCanonicalOpset);
  for (const auto& o : m.opset_import())
    if (!isOnnxDomain(o.domain())) graph->otherOpsets[o.domain()] = o.version();
  GraphImporter(source, ann).importGraph(m.graph(), graph.get());
  try {
    ir::verifyGraph(*graph);
  } catch (const Error& e) {
    GRAFT_THROW("{}: {}", source, e.what());
  }
  out.graph = std::move(graph);
  return out;
}

}  // namespace

Model loadModelBytes(const std::string& bytes, const ImportOptions& options) {
  ::onnx::ModelProto m;
  parseModel(bytes, options.sourceName, &m);
  return importProto(m, options);
}

Model loadModelFile(const std::string& path, const ImportOptions& options) {
  ImportOptions o = options;
  o.sourceName = "model '" + path + "'";
  if (o.baseDir.empty()) o.baseDir = fs::path(path).parent_path().string();
  if (o.baseDir.empty()) o.baseDir = ".";
  ::onnx::ModelProto m;
  parseModel(readFileBytes(path), o.sourceName, &m);
  return importProto(m, o);
}

}  // namespace graft::onnxio
