// ONNX file -> graft IR: parse, load external data, check, infer shapes, convert to the canonical
// opset, expand functions, build the IR.
#include <onnx/checker.h>
#include <onnx/common/version.h>
#include <onnx/defs/schema.h>
#include <onnx/shape_inference/implementation.h>
#include <onnx/version_converter/convert.h>

#include <google/protobuf/io/coded_stream.h>
#include <google/protobuf/io/zero_copy_stream_impl_lite.h>

#include <algorithm>
#include <charconv>
#include <filesystem>
#include <fstream>
#include <functional>
#include <map>
#include <optional>
#include <queue>
#include <set>
#include <sstream>
#include <unordered_map>
#include <unordered_set>

#include "onnx/legacy_scan.hpp"
#include "onnx/model_io.hpp"
#include "onnx/proto_convert.hpp"
#include "onnx/proto_util.hpp"
#include "onnx/validate_names.hpp"
#include "support/check.hpp"
#include "support/file_util.hpp"
#include "support/logging.hpp"

namespace graft::onnxio {
namespace fs = std::filesystem;
static_assert(kNewestIrVersion == ::onnx::Version::IR_VERSION, "kNewestIrVersion follows the linked ONNX library");
namespace {

std::string readFileBytes(const std::string& path) {
  support::checkRegularFile("model file", path);  // before the open: a FIFO or a device would block
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
  checkNamesAreUtf8(*m, source);
}

// ---- external data ----------------------------------------------------------------------------

void loadExternal(::onnx::TensorProto* t, const std::string& baseDir, const std::string& source) {
  if (t->data_location() != ::onnx::TensorProto::EXTERNAL) return;
  std::string what = fmt::format("{}: tensor '{}'", source, t->name());
  std::string location;
  int64_t offset = 0, length = -1;
  auto number = [&](const ::onnx::StringStringEntryProto& kv) {
    int64_t v = -1;
    const std::string& s = kv.value();
    auto [end, ec] = std::from_chars(s.data(), s.data() + s.size(), v);
    GRAFT_CHECK(ec == std::errc() && end == s.data() + s.size() && v >= 0,
                "{} has a malformed external data entry '{}': '{}' (expected a non-negative integer)", what, kv.key(),
                s);
    return v;
  };
  for (const auto& kv : t->external_data()) {
    if (kv.key() == "location") location = kv.value();
    if (kv.key() == "offset") offset = number(kv);
    if (kv.key() == "length") length = number(kv);
  }
  GRAFT_CHECK(!location.empty(), "{} stores its data externally but names no location", what);
  GRAFT_CHECK(!baseDir.empty(),
              "{} stores its data in '{}', but the model was loaded from bytes without a folder; load it "
              "from its file instead",
              what, location);
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

// collectTypes over the graph and every subgraph (names are unique across scopes).
void collectTypesDeep(const ::onnx::GraphProto& g, std::unordered_map<std::string, ::onnx::TypeProto>* types) {
  collectTypes(g, types);
  for (const auto& n : g.node())
    for (const auto& a : n.attribute()) {
      if (a.has_g()) collectTypesDeep(a.g(), types);
      for (const auto& sg : a.graphs()) collectTypesDeep(sg, types);
    }
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

// ---- nodes of other domains during conversion ---------------------------------------------------
// ONNX 1.12's version converter only knows ai.onnx ops and throws on any other (PopART models carry
// ai.graphcore ops). Such nodes are set aside while converting: their outputs stand in as graph
// inputs, and afterwards the nodes come back and the node list is sorted topologically again.

struct SetAside {
  std::vector<::onnx::NodeProto> nodes;
  std::set<std::string> standIns;  // graph inputs added in place of their outputs
};

SetAside setAsideOtherDomains(::onnx::GraphProto* g, const std::unordered_map<std::string, ::onnx::TypeProto>& types) {
  SetAside out;
  ::onnx::GraphProto kept;
  for (auto& n : *g->mutable_node()) {
    if (isOnnxDomain(n.domain())) {
      *kept.add_node() = std::move(n);
      continue;
    }
    for (const auto& o : n.output()) {
      if (o.empty()) continue;
      auto* vi = g->add_input();
      vi->set_name(o);
      auto it = types.find(o);
      if (it != types.end()) *vi->mutable_type() = it->second;
      out.standIns.insert(o);
    }
    out.nodes.push_back(std::move(n));
  }
  g->mutable_node()->Swap(kept.mutable_node());
  return out;
}

// Names a node reads, including those its subgraphs read from enclosing graphs.
void collectReads(const ::onnx::NodeProto& n, std::vector<std::string>* out) {
  for (const auto& i : n.input())
    if (!i.empty()) out->push_back(i);
  for (const auto& a : n.attribute()) {
    if (a.has_g())
      for (const auto& sn : a.g().node()) collectReads(sn, out);
    for (const auto& sg : a.graphs())
      for (const auto& sn : sg.node()) collectReads(sn, out);
  }
}

void restoreOtherDomains(::onnx::GraphProto* g, SetAside aside) {
  if (aside.nodes.empty()) return;
  auto* inputs = g->mutable_input();
  for (int i = inputs->size() - 1; i >= 0; --i)
    if (aside.standIns.count(inputs->Get(i).name())) inputs->DeleteSubrange(i, 1);
  std::vector<::onnx::NodeProto> nodes(g->node().begin(), g->node().end());
  for (auto& n : aside.nodes) nodes.push_back(std::move(n));
  // Kahn's algorithm, taking ready nodes in their current order.
  std::unordered_map<std::string, size_t> producer;
  for (size_t i = 0; i < nodes.size(); ++i)
    for (const auto& o : nodes[i].output())
      if (!o.empty()) producer[o] = i;
  std::vector<std::vector<size_t>> users(nodes.size());
  std::vector<size_t> pending(nodes.size(), 0);
  for (size_t i = 0; i < nodes.size(); ++i) {
    std::vector<std::string> reads;
    collectReads(nodes[i], &reads);
    std::set<size_t> deps;
    for (const auto& r : reads) {
      auto it = producer.find(r);
      if (it != producer.end() && it->second != i) deps.insert(it->second);
    }
    pending[i] = deps.size();
    for (size_t d : deps) users[d].push_back(i);
  }
  std::priority_queue<size_t, std::vector<size_t>, std::greater<>> ready;
  for (size_t i = 0; i < nodes.size(); ++i)
    if (pending[i] == 0) ready.push(i);
  g->clear_node();
  while (!ready.empty()) {
    size_t i = ready.top();
    ready.pop();
    for (size_t u : users[i])
      if (--pending[u] == 0) ready.push(u);
    *g->add_node() = std::move(nodes[i]);
  }
  // A cycle leaves nodes behind; the checker already rejected cyclic models, so this is a bug.
  GRAFT_ASSERT(static_cast<size_t>(g->node_size()) == nodes.size(),
               "re-sorting nodes after opset conversion lost {} nodes", nodes.size() - g->node_size());
}

// A graph output that nothing defines: ONNX 1.12's checker let it through and its version converter
// then dereferenced a null value for it (a fuzzer finding); the checker of later versions rejects
// it with a message that does not name the graph. So this is checked first, in subgraphs too,
// where values of enclosing graphs count as defined.
void checkOutputsDefined(const ::onnx::GraphProto& g, std::set<std::string> defined, const std::string& source) {
  for (const auto& vi : g.input()) defined.insert(vi.name());
  for (const auto& t : g.initializer()) defined.insert(t.name());
  for (const auto& s : g.sparse_initializer()) defined.insert(s.values().name());
  for (const auto& n : g.node())
    for (const auto& o : n.output()) defined.insert(o);
  for (const auto& vo : g.output())
    GRAFT_CHECK(defined.count(vo.name()),
                "{}: graph output '{}' is not produced by any node, input or initializer of "
                "graph '{}'",
                source, vo.name(), g.name());
  for (const auto& n : g.node())
    for (const auto& a : n.attribute()) {
      if (a.has_g()) checkOutputsDefined(a.g(), defined, source);
      for (const auto& sg : a.graphs()) checkOutputsDefined(sg, defined, source);
    }
}

// A subgraph (If branch, Loop or Scan body) may name a value of an enclosing graph as its output
// directly; older exporters wrote that, and ONNX 1.12's checker accepted it. Later checkers require
// every graph output to be produced inside its graph, so such an output is routed through an
// Identity node first: same value, same position, a name of the subgraph's own.
void passOuterOutputsThroughIdentity(::onnx::GraphProto* g, bool isSubgraph, int* counter) {
  std::set<std::string> local;
  for (const auto& vi : g->input()) local.insert(vi.name());
  for (const auto& t : g->initializer()) local.insert(t.name());
  for (const auto& s : g->sparse_initializer()) local.insert(s.values().name());
  for (auto& n : *g->mutable_node()) {
    for (const auto& o : n.output()) local.insert(o);
    for (auto& a : *n.mutable_attribute()) {
      if (a.has_g()) passOuterOutputsThroughIdentity(a.mutable_g(), true, counter);
      for (auto& sg : *a.mutable_graphs()) passOuterOutputsThroughIdentity(&sg, true, counter);
    }
  }
  if (!isSubgraph) return;
  for (auto& vo : *g->mutable_output()) {
    if (local.count(vo.name())) continue;
    std::string renamed = vo.name() + "__graft_outer" + std::to_string((*counter)++);
    auto* n = g->add_node();
    n->set_op_type("Identity");
    n->add_input(vo.name());
    n->add_output(renamed);
    vo.set_name(renamed);
  }
}

// Upsample (opset 7-9) and Resize-10 map output to input coordinates asymmetrically
// (x_in = x_out / scale) and pick the nearest element by flooring; the 1.12 converter turns them
// into Resize nodes without coordinate_transformation_mode, which then default to half_pixel and
// round_prefer_floor. Restore the old semantics on every Resize of a model converted from before
// opset 11 (no Resize of those opsets can carry these attributes).
void keepLegacyResizeSemantics(::onnx::GraphProto* g) {
  for (auto& n : *g->mutable_node()) {
    for (auto& a : *n.mutable_attribute()) {
      if (a.has_g()) keepLegacyResizeSemantics(a.mutable_g());
      for (auto& sg : *a.mutable_graphs()) keepLegacyResizeSemantics(&sg);
    }
    if (n.op_type() != "Resize" || !isOnnxDomain(n.domain())) continue;
    bool hasCtm = false, hasNearest = false;
    for (const auto& a : n.attribute()) {
      hasCtm |= a.name() == "coordinate_transformation_mode";
      hasNearest |= a.name() == "nearest_mode";
    }
    if (!hasCtm) {
      auto* a = n.add_attribute();
      a->set_name("coordinate_transformation_mode");
      a->set_type(::onnx::AttributeProto::STRING);
      a->set_s("asymmetric");
    }
    if (!hasNearest) {
      auto* a = n.add_attribute();
      a->set_name("nearest_mode");
      a->set_type(::onnx::AttributeProto::STRING);
      a->set_s("floor");
    }
  }
}

// The versions a model declares, against what the linked ONNX library knows; before the checker,
// whose messages for these cases do not say what graft supports.
void checkVersions(const ::onnx::ModelProto& m, const std::string& source) {
  GRAFT_CHECK(m.ir_version() <= kNewestIrVersion,
              "{} has IR version {}, newer than graft supports (newest: IR version {}, ONNX {})", source,
              m.ir_version(), kNewestIrVersion, ONNX_VERSION_STRING);
  const auto& ranges = ::onnx::OpSchemaRegistry::DomainToVersionRange::Instance().Map();
  for (const auto& o : m.opset_import()) {
    std::string domain = isOnnxDomain(o.domain()) ? "" : o.domain();
    auto it = ranges.find(domain);
    if (it == ranges.end()) continue;  // a domain ONNX does not define (ai.graphcore, custom ones)
    GRAFT_CHECK(o.version() <= it->second.second,
                "{} uses {} opset {}, newer than graft supports (newest: {} opset {}, ONNX {})", source,
                domain.empty() ? "ai.onnx" : domain, o.version(), domain.empty() ? "ai.onnx" : domain,
                it->second.second, ONNX_VERSION_STRING);
  }
}

// Before opset 14 a BatchNormalization with more than one output is in training mode (Y, mean,
// var, saved_mean, saved_var); from 14 the mode is the training_mode attribute and there are at
// most three outputs. Unused saved_mean / saved_var outputs are dropped before converting (the
// converter refuses them), and the training nodes, found again by their output Y, get
// training_mode = 1 after it.
std::vector<std::string> dropSavedBatchNormOutputs(::onnx::GraphProto* g) {
  std::unordered_set<std::string> used;
  for (const auto& n : g->node())
    for (const auto& i : n.input()) used.insert(i);
  for (const auto& o : g->output()) used.insert(o.name());
  std::vector<std::string> training;
  for (auto& n : *g->mutable_node()) {
    if (n.op_type() != "BatchNormalization" || !(n.domain().empty() || n.domain() == "ai.onnx")) continue;
    if (n.output_size() <= 1) continue;
    training.push_back(n.output(0));
    while (n.output_size() > 3 && (n.output(n.output_size() - 1).empty() || !used.count(n.output(n.output_size() - 1))))
      n.mutable_output()->RemoveLast();
  }
  return training;
}

void markTrainingBatchNorms(::onnx::GraphProto* g, const std::vector<std::string>& training) {
  std::unordered_set<std::string> ys(training.begin(), training.end());
  for (auto& n : *g->mutable_node()) {
    if (n.op_type() != "BatchNormalization" || n.output_size() == 0 || !ys.count(n.output(0))) continue;
    bool has = false;
    for (const auto& a : n.attribute()) has |= a.name() == "training_mode";
    if (has) continue;
    auto* a = n.add_attribute();
    a->set_name("training_mode");
    a->set_type(::onnx::AttributeProto::INT);
    a->set_i(1);
  }
}

void convertOpset(::onnx::ModelProto* m, const std::string& source) {
  int64_t v = onnxOpset(*m);
  if (v == 0 || v == kCanonicalOpset) return;
  GRAFT_CHECK(v < kCanonicalOpset, "{} uses ai.onnx opset {}, newer than graft supports (newest: ai.onnx opset {})",
              source, v, kCanonicalOpset);
  std::vector<std::string> trainingBatchNorms;
  if (v < 14) trainingBatchNorms = dropSavedBatchNormOutputs(m->mutable_graph());
  std::unordered_map<std::string, ::onnx::TypeProto> types;
  collectTypes(m->graph(), &types);
  SetAside aside = setAsideOtherDomains(m->mutable_graph(), types);
  ::onnx::ModelProto converted;
  try {
    converted = ::onnx::version_conversion::ConvertVersion(*m, static_cast<int>(kCanonicalOpset));
  } catch (const std::exception& e) {
    GRAFT_THROW("{}: cannot convert from ai.onnx opset {} to {}: {}", source, v, kCanonicalOpset, e.what());
  }
  restoreTypes(converted.mutable_graph(), types);
  restoreOtherDomains(converted.mutable_graph(), std::move(aside));
  markTrainingBatchNorms(converted.mutable_graph(), trainingBatchNorms);
  // ONNX 1.23's converter leaves the model-local functions out of its result; they are expanded
  // later, each with its own opset imports.
  if (converted.functions_size() == 0) *converted.mutable_functions() = m->functions();
  if (v < 11) keepLegacyResizeSemantics(converted.mutable_graph());
  // The converter keeps the file's IR version; the converted model declares at least the IR
  // version of the release that introduced the canonical opset.
  if (converted.ir_version() < irVersionForOpset(kCanonicalOpset))
    converted.set_ir_version(irVersionForOpset(kCanonicalOpset));
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
      if (xs.dim(1).has_dim_value() && xs.dim(1).dim_value() != init.dims(0))
        continue;  // not per channel: left to fail
      for (int i = 2; i < xs.dim_size(); ++i) init.add_dims(1);
      for (auto& vi : *g->mutable_input())
        if (vi.name() == init.name() && vi.type().tensor_type().has_shape())
          for (int i = 2; i < xs.dim_size(); ++i)
            vi.mutable_type()->mutable_tensor_type()->mutable_shape()->add_dim()->set_dim_value(1);
      done.insert(init.name());
    }
  }
}

// Renames every value of a function body: formal inputs and outputs become the caller's values,
// everything else gets a prefix unique to the call. Subgraphs are renamed the same way (ONNX
// names are unique across scopes, and a function body reads nothing from outside itself).
struct CallRenamer {
  std::unordered_map<std::string, std::string> formal;
  std::string prefix;

  std::string operator()(const std::string& n) const {
    if (n.empty()) return n;
    auto it = formal.find(n);
    return it != formal.end() ? it->second : prefix + n;
  }
  void graph(::onnx::GraphProto* g) const {
    for (auto& v : *g->mutable_input()) v.set_name((*this)(v.name()));
    for (auto& v : *g->mutable_output()) v.set_name((*this)(v.name()));
    for (auto& v : *g->mutable_value_info()) v.set_name((*this)(v.name()));
    for (auto& t : *g->mutable_initializer()) t.set_name((*this)(t.name()));
    for (auto& s : *g->mutable_sparse_initializer()) {
      s.mutable_values()->set_name((*this)(s.values().name()));
      s.mutable_indices()->set_name((*this)(s.indices().name()));
    }
    for (auto& n : *g->mutable_node()) node(&n);
  }
  void node(::onnx::NodeProto* n) const {
    for (auto& i : *n->mutable_input()) i = (*this)(i);
    for (auto& o : *n->mutable_output()) o = (*this)(o);
    for (auto& a : *n->mutable_attribute()) {
      if (a.has_g()) graph(a.mutable_g());
      for (auto& sg : *a.mutable_graphs()) graph(&sg);
    }
  }
};

// Replaces the caller's references to its own attributes inside a function body (including
// subgraphs of body nodes): a reference to an attribute the caller sets takes its value, a
// reference to one it does not set is dropped (the op's default applies).
void bindAttributes(::onnx::NodeProto* n, const std::unordered_map<std::string, const ::onnx::AttributeProto*>& given) {
  auto* attrs = n->mutable_attribute();
  for (int i = attrs->size() - 1; i >= 0; --i) {
    ::onnx::AttributeProto* a = attrs->Mutable(i);
    if (!a->ref_attr_name().empty()) {
      auto it = given.find(a->ref_attr_name());
      if (it == given.end()) {
        attrs->DeleteSubrange(i, 1);
        continue;
      }
      std::string name = a->name();
      *a = *it->second;
      a->set_name(name);
    }
    if (a->has_g())
      for (auto& bn : *a->mutable_g()->mutable_node()) bindAttributes(&bn, given);
    for (auto& sg : *a->mutable_graphs())
      for (auto& bn : *sg.mutable_node()) bindAttributes(&bn, given);
  }
}

/// Function calls may expand into further calls (a function calling another twice, which calls
/// another twice, ... doubles the graph at every level); the expanded size is capped so that a
/// model cannot make the import run out of memory or time.
constexpr int64_t kMaxExpandedNodes = int64_t{1} << 20;

// Checks, before anything else reads the model, that its local functions are not recursive (ONNX
// forbids it; the checker and ONNX's shape inference recurse without end on them) and that
// expanding them stays under kMaxExpandedNodes (ONNX's shape inference walks every call's body,
// so a model with deeply nested calls would otherwise take exponential time).
void checkLocalFunctions(const ::onnx::ModelProto& m, const std::string& source) {
  if (m.functions_size() == 0) return;
  using Key = std::pair<std::string, std::string>;
  std::map<Key, const ::onnx::FunctionProto*> functions;
  for (const auto& f : m.functions()) functions[{f.domain(), f.name()}] = &f;
  std::map<Key, int> state;  // 1: being sized (on the current path), 2: sized
  std::map<Key, int64_t> sizes;
  auto add = [](int64_t a, int64_t b) { return std::min(a + b, kMaxExpandedNodes + 1); };  // both <= cap + 1
  std::function<int64_t(const google::protobuf::RepeatedPtrField<::onnx::NodeProto>&)> cost;
  std::function<int64_t(const Key&)> sizeOf = [&](const Key& k) -> int64_t {
    if (state[k] == 2) return sizes[k];
    GRAFT_CHECK(state[k] != 1,
                "{}: function {}{} calls itself (directly or through other functions); ONNX functions "
                "cannot be recursive",
                source, k.first.empty() ? "" : k.first + "::", k.second);
    state[k] = 1;
    int64_t s = cost(functions.at(k)->node());
    state[k] = 2;
    return sizes[k] = s;
  };
  cost = [&](const google::protobuf::RepeatedPtrField<::onnx::NodeProto>& nodes) {
    int64_t total = 0;
    for (const auto& n : nodes) {
      auto it = functions.find({n.domain(), n.op_type()});
      total = add(total, it == functions.end() ? 1 : sizeOf(it->first));
      for (const auto& a : n.attribute()) {
        if (a.has_g()) total = add(total, cost(a.g().node()));
        for (const auto& sg : a.graphs()) total = add(total, cost(sg.node()));
      }
    }
    return total;
  };
  for (const auto& [k, f] : functions) (void)sizeOf(k);
  GRAFT_CHECK(cost(m.graph().node()) <= kMaxExpandedNodes,
              "{}: expanding the model's functions would create more than {} nodes", source, kMaxExpandedNodes);
}

struct FunctionExpander {
  const ::onnx::ModelProto& model;
  const ImportOptions& options;
  std::string source;
  int expanded = 0;
  int64_t nodesAdded = 0;
  /// Every value's inferred type (all scopes), computed when a context-dependent body first needs it.
  std::optional<std::unordered_map<std::string, ::onnx::TypeProto>> types = std::nullopt;

  const ::onnx::FunctionProto* localFunction(const ::onnx::NodeProto& n) const {
    for (const auto& f : model.functions())
      if (f.name() == n.op_type() && f.domain() == n.domain()) return &f;
    return nullptr;
  }

  // Fills `body` (and `schema` for ONNX functions) and returns true when `n` should be replaced by
  // a function body.
  bool bodyFor(const ::onnx::NodeProto& n, int64_t opset, ::onnx::FunctionProto* body,
               const ::onnx::OpSchema** schema) {
    *schema = nullptr;
    if (const auto* f = localFunction(n)) {
      *body = *f;
      return true;
    }
    if (!isOnnxDomain(n.domain()) || !options.expandFunction || !options.expandFunction(n.domain(), n.op_type()))
      return false;
    const auto* s = ::onnx::OpSchemaRegistry::Schema(n.op_type(), static_cast<int>(opset), "");
    if (!s) return false;
    if (s->HasFunction()) {
      *body = *s->GetFunction();
      *schema = s;
      return true;
    }
    // A context-dependent body (CausalConvWithState, LinearAttention: opset 27) is built from the
    // node's attributes and its inputs' types, as ONNX inferred them for the converted model. Ops
    // graft implements natively never get here (options.expandFunction).
    if (s->HasContextDependentFunction()) {
      if (!types) {
        types.emplace();
        ::onnx::ModelProto inferred = model;
        runShapeInference(&inferred);
        collectTypesDeep(inferred.graph(), &*types);
      }
      std::vector<::onnx::TypeProto> inputTypes;
      for (const auto& in : n.input()) {
        auto it = in.empty() ? types->end() : types->find(in);
        inputTypes.push_back(it == types->end() ? ::onnx::TypeProto{} : it->second);
      }
      ::onnx::FunctionBodyBuildContextImpl ctx(n, inputTypes);
      ::onnx::FunctionProto fp;
      bool built = false;
      try {
        built = s->BuildContextDependentFunction(ctx, fp, static_cast<int>(opset));
      } catch (const std::exception& e) {
        GRAFT_THROW("{}: {} node '{}': ONNX's function body for the op cannot be built: {}", source, n.op_type(),
                    n.output_size() ? n.output(0) : n.name(), e.what());
      }
      if (!built) return false;
      *body = std::move(fp);
      *schema = s;
      return true;
    }
    return false;
  }

  // graft inlines calls itself: ONNX 1.12's FunctionExpandHelper throws for model-local functions
  // that do not import their own domain and dereferences a null schema for those that do.
  void inlineCall(const ::onnx::NodeProto& call, const ::onnx::FunctionProto& fn, const ::onnx::OpSchema* schema,
                  ::onnx::GraphProto* out) {
    std::string label = call.name().empty() ? (call.output_size() ? call.output(0) : call.op_type()) : call.name();
    std::string what = fmt::format("{}: {} node '{}'", source, call.op_type(), label);
    GRAFT_CHECK(call.input_size() <= fn.input_size(), "{} has {} inputs, but function {} takes at most {}", what,
                call.input_size(), fn.name(), fn.input_size());
    GRAFT_CHECK(call.output_size() <= fn.output_size(), "{} has {} outputs, but function {} returns at most {}", what,
                call.output_size(), fn.name(), fn.output_size());
    nodesAdded += fn.node_size();
    GRAFT_CHECK(nodesAdded <= kMaxExpandedNodes, "{}: expanding functions creates more than {} nodes", source,
                kMaxExpandedNodes);
    CallRenamer rename;
    rename.prefix = fmt::format("{}_f{}_", label, expanded++);
    for (int i = 0; i < fn.input_size(); ++i) rename.formal[fn.input(i)] = i < call.input_size() ? call.input(i) : "";
    for (int i = 0; i < fn.output_size() && i < call.output_size(); ++i)
      if (!call.output(i).empty()) rename.formal[fn.output(i)] = call.output(i);
    std::unordered_map<std::string, const ::onnx::AttributeProto*> given;
    for (const auto& a : call.attribute()) given[a.name()] = &a;
    if (schema)
      for (const auto& [name, def] : schema->attributes())
        if (!given.count(name) && def.default_value.type() != ::onnx::AttributeProto::UNDEFINED)
          given[name] = &def.default_value;
    for (const auto& bn : fn.node()) {
      ::onnx::NodeProto* n = out->add_node();
      *n = bn;
      if (!bn.name().empty()) n->set_name(rename.prefix + bn.name());
      rename.node(n);
      bindAttributes(n, given);
    }
  }

  bool expandGraph(::onnx::GraphProto* g, int64_t opset) {
    bool changed = false;
    for (auto& n : *g->mutable_node())
      for (auto& a : *n.mutable_attribute()) {
        if (a.has_g()) changed |= expandGraph(a.mutable_g(), opset);
        for (auto& sg : *a.mutable_graphs()) changed |= expandGraph(&sg, opset);
      }
    ::onnx::GraphProto out;
    bool any = false;
    for (const auto& n : g->node()) {
      ::onnx::FunctionProto body;
      const ::onnx::OpSchema* schema = nullptr;
      if (bodyFor(n, opset, &body, &schema)) {
        inlineCall(n, body, schema, &out);
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
      ir::Tensor* t =
          g->addTensor(vi.name(), typeFromProto(vi.type(), fmt::format("{}: input '{}'", source_, vi.name())),
                       ir::TensorKind::Input);
      g->addInput(t);
    }
    // Pass 1: every node output exists before any node links to it.
    for (const auto& np : gp.node())
      for (const auto& o : np.output()) {
        if (o.empty()) continue;
        GRAFT_CHECK(!g->hasTensor(o),
                    "{}: value '{}' is produced twice (node '{}' of type {}); ONNX values are assigned once", source_,
                    o, np.name(), np.op_type());
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
          if (a.name() == "__ipu_number")
            vgraph = a.i();
          else if (a.name() == "__pipeline_stage")
            stage = a.i();
          else if (a.name() == "__recompute_output_in_backward_pass")
            recompute = a.i() != 0;
          else
            attrs.set(a.name(), attributeFromProto(a, what, importSub));
        }
    }
    std::vector<std::string> outs(np.output().begin(), np.output().end());
    ir::Node* n = g->addNode(np.op_type(), np.domain() == "ai.onnx" ? "" : np.domain(), inputs, outs, std::move(attrs),
                             np.name());
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
  checkLocalFunctions(m, source);
  checkVersions(m, source);
  checkOutputsDefined(m.graph(), {}, source);
  int outerCounter = 0;
  passOuterOutputsThroughIdentity(m.mutable_graph(), false, &outerCounter);

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
  LegacyScans legacyScans;
  if (onnxOpset(m) > 0 && onnxOpset(m) < 9) recordLegacyScans(m.graph(), &legacyScans);
  convertOpset(&m, source);
  if (out.info.originalOpset > 0 && out.info.originalOpset < 7) fixLegacyPreluSlopes(m.mutable_graph(), preTypes);
  if (!legacyScans.empty()) {
    int counter = 0;
    rewriteLegacyScans(m.mutable_graph(), legacyScans, source, &counter);
  }
  {
    FunctionExpander fx{m, options, source};
    int64_t opset = onnxOpset(m) ? onnxOpset(m) : kCanonicalOpset;
    bool changed = false;
    for (int round = 0; round < 8 && fx.expandGraph(m.mutable_graph(), opset); ++round) changed = true;
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
