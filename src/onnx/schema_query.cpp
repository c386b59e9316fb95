#include "onnx/schema_query.hpp"

#include <onnx/defs/schema.h>

#include <algorithm>
#include <onnx/shape_inference/implementation.h>

#include "onnx/model_io.hpp"
#include "onnx/proto_convert.hpp"
#include "onnx/schema_infer.hpp"
#include "support/check.hpp"

namespace graft::onnxio {
namespace {

AttributeKind kindOf(::onnx::AttributeProto::AttributeType t) {
  using AP = ::onnx::AttributeProto;
  switch (t) {
    case AP::INT: return AttributeKind::Int;
    case AP::FLOAT: return AttributeKind::Float;
    case AP::STRING: return AttributeKind::String;
    case AP::INTS: return AttributeKind::Ints;
    case AP::FLOATS: return AttributeKind::Floats;
    case AP::STRINGS: return AttributeKind::Strings;
    case AP::TENSOR:
    case AP::SPARSE_TENSOR: return AttributeKind::Tensor;
    case AP::GRAPH: return AttributeKind::Graph;
    default: return AttributeKind::Other;
  }
}

std::optional<AttributeValue> defaultOf(const ::onnx::AttributeProto& a) {
  using AP = ::onnx::AttributeProto;
  // Schemas without a default leave the proto empty (no name, no type).
  if (a.name().empty()) return std::nullopt;
  switch (a.type()) {
    case AP::INT: return AttributeValue(static_cast<int64_t>(a.i()));
    case AP::FLOAT: return AttributeValue(a.f());
    case AP::STRING: return AttributeValue(a.s());
    case AP::INTS: return AttributeValue(std::vector<int64_t>(a.ints().begin(), a.ints().end()));
    case AP::FLOATS: return AttributeValue(std::vector<float>(a.floats().begin(), a.floats().end()));
    case AP::STRINGS: return AttributeValue(std::vector<std::string>(a.strings().begin(), a.strings().end()));
    default: return std::nullopt;
  }
}

}  // namespace

std::optional<OpSignature> onnxOpSignature(const std::string& type, int64_t opset) {
  const auto* s = ::onnx::OpSchemaRegistry::Schema(type, static_cast<int>(opset), "");
  if (!s || s->deprecated()) return std::nullopt;
  OpSignature sig;
  sig.domain = "";
  sig.type = type;
  sig.sinceVersion = s->since_version();
  sig.numFormalInputs = static_cast<int>(s->inputs().size());
  sig.minInputs = s->min_input();
  sig.maxInputs = s->max_input() == std::numeric_limits<int>::max() ? -1 : s->max_input();
  sig.minOutputs = s->min_output();
  sig.maxOutputs = s->max_output() == std::numeric_limits<int>::max() ? -1 : s->max_output();
  for (const auto& [name, a] : s->attributes()) {
    OpAttributeSignature as;
    as.name = name;
    as.kind = kindOf(a.type);
    as.required = a.required;
    as.defaultValue = defaultOf(a.default_value);
    sig.attributes.push_back(std::move(as));
  }
  // By name: newer ONNX keeps a schema's attributes in a hash map, and PopART's parameter order (the
  // Python builder's positional attributes) sorts them by name.
  std::sort(sig.attributes.begin(), sig.attributes.end(),
            [](const OpAttributeSignature& x, const OpAttributeSignature& y) { return x.name < y.name; });
  if (s->doc()) sig.doc = s->doc();
  return sig;
}

void verifyWithOnnxSchema(const ir::Node& n, int64_t opset) {
  const auto* schema = ::onnx::OpSchemaRegistry::Schema(n.type(), static_cast<int>(opset), n.domain());
  GRAFT_CHECK(schema, "{}: ONNX has no op {} in opset {}", n.describe(), n.type(), opset);
  // The proto names inputs by their tensor ids so that ONNX's messages name them too.
  ::onnx::NodeProto np;
  np.set_op_type(n.type());
  np.set_domain(n.domain());
  np.set_name(n.name().empty() && n.numOutputs() && n.output(0) ? n.output(0)->id() : n.name());
  std::unordered_map<std::string, ::onnx::TypeProto*> typesByName;
  std::vector<std::unique_ptr<::onnx::TypeProto>> typeStore;
  for (size_t i = 0; i < n.numInputs(); ++i) {
    const ir::Tensor* t = n.input(i);
    np.add_input(t ? t->id() : "");
    if (t && t->type().known()) {
      typeStore.push_back(std::make_unique<::onnx::TypeProto>());
      typeToProto(t->type(), typeStore.back().get());
      typesByName[t->id()] = typeStore.back().get();
    }
  }
  for (size_t i = 0; i < n.numOutputs(); ++i) np.add_output(n.output(i) ? n.output(i)->id() : "");
  for (const auto& [name, v] : n.attrs().all()) {
    if (name.rfind("__", 0) == 0) continue;
    attributeToProto(name, v, np.add_attribute(), exportGraphProto);
  }
  try {
    schema->Verify(np);
  } catch (const std::exception& e) {
    GRAFT_THROW("{}: {}", n.describe(), e.what());
  }
  try {
    ::onnx::shape_inference::InferenceContextImpl ctx(np, typesByName, {}, {}, ::onnx::ShapeInferenceOptions{});
    schema->CheckInputOutputType(ctx);
  } catch (const std::exception& e) {
    // graft converts every model to the canonical opset, so input types that the op's version
    // there takes run as that version (PopART's Builder takes FLOAT for Equal at opset 10,
    // FLOAT16 for CumSum at 11, INT32 for TopK at 10): they are accepted.
    const auto* newest = ::onnx::OpSchemaRegistry::Schema(n.type(), static_cast<int>(kCanonicalOpset), n.domain());
    bool acceptedThere = false;
    if (newest && newest != schema) {
      try {
        ::onnx::shape_inference::InferenceContextImpl ctx(np, typesByName, {}, {}, ::onnx::ShapeInferenceOptions{});
        newest->CheckInputOutputType(ctx);
        acceptedThere = true;
      } catch (const std::exception&) {
      }
    }
    if (!acceptedThere) GRAFT_THROW("{}: {}", n.describe(), e.what());
  }
}

}  // namespace graft::onnxio
