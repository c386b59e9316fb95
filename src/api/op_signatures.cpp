#include "api/op_signatures.hpp"

#include <algorithm>
#include <cmath>

#include "onnx/model_io.hpp"
#include "onnx/schema_query.hpp"
#include "ops/registry.hpp"
#include "support/check.hpp"

namespace graft {

std::string_view attributeKindName(AttributeKind kind) {
  switch (kind) {
    case AttributeKind::Int: return "int";
    case AttributeKind::Float: return "float";
    case AttributeKind::String: return "string";
    case AttributeKind::Ints: return "ints";
    case AttributeKind::Floats: return "floats";
    case AttributeKind::Strings: return "strings";
    case AttributeKind::Tensor: return "tensor";
    case AttributeKind::Graph: return "graph";
    case AttributeKind::Other: return "other";
  }
  return "other";
}

namespace api {
namespace {

OpAttributeSignature attr(std::string name, AttributeKind kind, bool required, std::optional<AttributeValue> def = {}) {
  OpAttributeSignature a;
  a.name = std::move(name);
  a.kind = kind;
  a.required = required;
  a.defaultValue = std::move(def);
  return a;
}

OpSignature graphcoreOp(std::string type, int minIn, int maxIn, std::vector<OpAttributeSignature> attrs, std::string doc) {
  OpSignature s;
  s.domain = ops::kGraphcoreDomain;
  s.type = std::move(type);
  s.sinceVersion = 1;
  s.numFormalInputs = maxIn;
  s.minInputs = minIn;
  s.maxInputs = maxIn;
  s.minOutputs = s.maxOutputs = 1;
  std::sort(attrs.begin(), attrs.end(), [](const auto& a, const auto& b) { return a.name < b.name; });
  s.attributes = std::move(attrs);
  s.doc = std::move(doc);
  return s;
}

}  // namespace

const std::vector<OpSignature>& graphcoreSignatures() {
  static const std::vector<OpSignature> sigs = [] {
    using K = AttributeKind;
    std::vector<OpSignature> v;
    v.push_back(graphcoreOp("Gelu", 1, 1, {}, "GELU activation, tanh approximation (PopART's Gelu)."));
    v.push_back(graphcoreOp("IdentityLoss", 1, 1, {attr("reduction", K::String, false, std::string("Mean"))},
                            "A loss that is its input, reduced by 'reduction' (Mean, Sum or None)."));
    v.push_back(graphcoreOp("L1", 1, 1,
                            {attr("lambda", K::Float, true), attr("reduction", K::String, false, std::string("Mean"))},
                            "lambda * |x|, reduced by 'reduction' (Mean, Sum or None)."));
    v.push_back(graphcoreOp("Nll", 2, 2,
                            {attr("reduction", K::String, false, std::string("Mean")), attr("ignoreIndex", K::Int, false),
                             attr("inputIsLogProbability", K::Int, false, int64_t{0})},
                            "Negative log likelihood of probabilities (input 0) at integer labels (input 1)."));
    return v;
  }();
  return sigs;
}

AttributeKind kindOfValue(const AttributeValue& v) {
  static constexpr AttributeKind kinds[] = {AttributeKind::Int,  AttributeKind::Float,  AttributeKind::String,
                                            AttributeKind::Ints, AttributeKind::Floats, AttributeKind::Strings,
                                            AttributeKind::Tensor};
  return kinds[v.index()];
}

ir::AttrValue coerceAttribute(const AttributeValue& v, AttributeKind kind, const std::string& what) {
  AttributeKind have = kindOfValue(v);
  auto fail = [&]() -> ir::AttrValue {
    GRAFT_THROW("{} must be of kind {}, got {}", what, attributeKindName(kind), attributeKindName(have));
  };
  if (have == kind || kind == AttributeKind::Other) {
    return std::visit([](const auto& x) -> ir::AttrValue { return x; }, v);
  }
  switch (kind) {
    case AttributeKind::Float:
      if (const auto* i = std::get_if<int64_t>(&v)) return static_cast<float>(*i);
      return fail();
    case AttributeKind::Floats:
      if (const auto* is = std::get_if<std::vector<int64_t>>(&v))
        return std::vector<float>(is->begin(), is->end());
      if (const auto* ss = std::get_if<std::vector<std::string>>(&v); ss && ss->empty()) return std::vector<float>{};
      return fail();
    case AttributeKind::Strings:
      if (const auto* is = std::get_if<std::vector<int64_t>>(&v); is && is->empty()) return std::vector<std::string>{};
      if (const auto* fs = std::get_if<std::vector<float>>(&v); fs && fs->empty()) return std::vector<std::string>{};
      return fail();
    case AttributeKind::Ints:
      if (const auto* fs = std::get_if<std::vector<float>>(&v); fs && fs->empty()) return std::vector<int64_t>{};
      if (const auto* ss = std::get_if<std::vector<std::string>>(&v); ss && ss->empty()) return std::vector<int64_t>{};
      return fail();
    case AttributeKind::Int:
      // A float attribute that holds an integer value is accepted for an int attribute (PopART
      // programs pass True/False and 1.0 for flags).
      if (const auto* f = std::get_if<float>(&v)) {
        if (std::isfinite(*f) && *f == std::trunc(*f) && std::abs(*f) < 9.0e15f) return static_cast<int64_t>(*f);
      }
      return fail();
    default: return fail();
  }
}

AttributeValue toPublicAttribute(const ir::AttrValue& v, const std::string& what) {
  return std::visit(
      [&](const auto& x) -> AttributeValue {
        using T = std::decay_t<decltype(x)>;
        if constexpr (std::is_constructible_v<AttributeValue, T> &&
                      (std::is_same_v<T, int64_t> || std::is_same_v<T, float> || std::is_same_v<T, std::string> ||
                       std::is_same_v<T, std::vector<int64_t>> || std::is_same_v<T, std::vector<float>> ||
                       std::is_same_v<T, std::vector<std::string>> || std::is_same_v<T, NDArray>)) {
          return x;
        } else {
          GRAFT_THROW("{} is of kind {}, which the Builder API cannot return", what, ir::attrKindName(v));
        }
      },
      v);
}

std::vector<ir::ValueType> inferGraphcorePlaceholder(const ir::Node& n) {
  const ir::Tensor* in = n.input(0);
  GRAFT_CHECK(in, "{} needs input 0", n.describe());
  std::string reduction = n.attrString("reduction", "Mean");
  GRAFT_CHECK(reduction == "Mean" || reduction == "Sum" || reduction == "None",
              "{}: attribute 'reduction' must be Mean, Sum or None, got '{}'", n.describe(), reduction);
  DataType dt = in->info().dataType();
  if (reduction != "None") return {ir::ValueType::tensor(TensorInfo(dt, Shape{}))};
  const ir::Tensor* shapeFrom = n.type() == "Nll" ? n.input(1) : in;
  if (!shapeFrom || !shapeFrom->info().hasShape()) return {ir::ValueType::tensor(TensorInfo::unranked(dt))};
  return {ir::ValueType::tensor(TensorInfo(dt, shapeFrom->info().dims()))};
}

}  // namespace api

int newestAiOnnxOpset() { return static_cast<int>(onnxio::kCanonicalOpset); }

std::optional<OpSignature> findOpSignature(const std::string& domain, const std::string& type, int opsetVersion) {
  if (domain.empty() || domain == "ai.onnx") return onnxio::onnxOpSignature(type, opsetVersion);
  if (domain == ops::kGraphcoreDomain) {
    for (const auto& s : api::graphcoreSignatures())
      if (s.type == type) return s;
  }
  return std::nullopt;
}

std::vector<OpSignature> builderOpSignatures(const std::string& domain, int opsetVersion) {
  std::vector<OpSignature> out;
  std::string d = domain == "ai.onnx" ? "" : domain;
  if (d.empty()) {
    for (const ops::OpDef* def : ops::Registry::instance().all())
      if (def->domain.empty())
        if (auto s = onnxio::onnxOpSignature(def->type, opsetVersion)) out.push_back(std::move(*s));
    // Ops that later opsets removed and ONNX's version converter rewrites into ops graft runs:
    // the Builder offers them at the opsets that define them (PopART programs use them there).
    static const std::pair<const char*, const char*> kConverted[] = {{"Scatter", "ScatterElements"},
                                                                     {"Upsample", "Resize"}};
    for (const auto& [removed, into] : kConverted)
      if (ops::Registry::instance().find("", into))
        if (auto s = onnxio::onnxOpSignature(removed, opsetVersion)) out.push_back(std::move(*s));
  } else if (d == ops::kGraphcoreDomain) {
    out = api::graphcoreSignatures();
    // ai.graphcore ops the registry knows beyond the table: generic signatures (any inputs, no
    // declared attributes).
    for (const ops::OpDef* def : ops::Registry::instance().all()) {
      if (def->domain != d) continue;
      bool known = std::any_of(out.begin(), out.end(), [&](const auto& s) { return s.type == def->type; });
      if (!known) {
        OpSignature s;
        s.domain = d;
        s.type = def->type;
        s.numFormalInputs = 1;
        s.minInputs = 0;
        s.maxInputs = -1;
        out.push_back(std::move(s));
      }
    }
  } else {
    GRAFT_THROW("the Builder has no ops of domain '{}' (domains: ai.onnx, ai.graphcore)", domain);
  }
  std::sort(out.begin(), out.end(), [](const auto& a, const auto& b) { return a.type < b.type; });
  return out;
}

}  // namespace graft
