// Session::serializedIr: the compiled graph in PopART's JSON layout (PopART's
// session._serializeIr(IrSerializationFormat.JSON)): {"maingraph": [op, ...]} in schedule order,
// each op with "type", "domain", "name", "inputs" and "outputs" (name, shape, type) and
// "attributes" (values as strings). With virtual graphs, one entry per program after "maingraph"
// (the first program).
#include <graft/session.hpp>

#include <sstream>

#include "runtime/session_impl.hpp"

namespace graft {
namespace {

std::string jsonString(const std::string& s) {
  std::string out = "\"";
  for (char c : s) {
    switch (c) {
      case '"':
        out += "\\\"";
        break;
      case '\\':
        out += "\\\\";
        break;
      case '\n':
        out += "\\n";
        break;
      case '\t':
        out += "\\t";
        break;
      default:
        if (static_cast<unsigned char>(c) < 0x20)
          out += fmt::format("\\u{:04x}", static_cast<int>(c));
        else
          out += c;
    }
  }
  return out + "\"";
}

std::string attrString(const ir::AttrValue& v) {
  struct V {
    std::string operator()(int64_t x) const { return std::to_string(x); }
    std::string operator()(float x) const { return fmt::format("{}", x); }
    std::string operator()(const std::string& s) const { return s; }
    std::string operator()(const NDArray& a) const {
      return fmt::format("tensor {} {}", dtypeName(a.dtype()), shapeToString(a.shape()));
    }
    std::string operator()(const ir::GraphPtr& g) const { return g ? g->name() : ""; }
    std::string operator()(const ir::ValueType& t) const { return t.str(); }
    std::string operator()(const std::vector<int64_t>& x) const { return fmt::format("[{}]", fmt::join(x, " ")); }
    std::string operator()(const std::vector<float>& x) const { return fmt::format("[{}]", fmt::join(x, " ")); }
    std::string operator()(const std::vector<std::string>& x) const { return fmt::format("[{}]", fmt::join(x, " ")); }
    std::string operator()(const std::vector<NDArray>& x) const { return fmt::format("{} tensors", x.size()); }
    std::string operator()(const std::vector<ir::GraphPtr>& x) const { return fmt::format("{} graphs", x.size()); }
  };
  return std::visit(V{}, v);
}

std::string tensors(const std::vector<ir::Tensor*>& ts) {
  std::vector<std::string> items;
  for (const ir::Tensor* t : ts) {
    if (!t) continue;
    const TensorInfo& info = t->info();
    std::string shape = "[]";
    if (info.hasShape()) {
      std::vector<std::string> dims;
      for (const Dim& d : info.dims()) dims.push_back(d.str());
      shape = fmt::format("[{}]", fmt::join(dims, " "));
    }
    items.push_back(fmt::format("{{\"name\": {}, \"shape\": {}, \"type\": {}}}", jsonString(t->id()), jsonString(shape),
                                jsonString(std::string(dtypeName(info.dataType())))));
  }
  return fmt::format("[{}]", fmt::join(items, ", "));
}

std::string graphJson(const ir::Graph& g) {
  std::vector<std::string> ops;
  for (const ir::Node* n : g.schedule()) {
    std::vector<std::string> attrs;
    for (const auto& [k, v] : n->attrs().all())
      attrs.push_back(fmt::format("{}: {}", jsonString(k), jsonString(attrString(v))));
    ops.push_back(
        fmt::format("{{\"type\": {}, \"domain\": {}, \"name\": {}, \"inputs\": {}, \"outputs\": {}, "
                    "\"attributes\": {{{}}}}}",
                    jsonString(n->type()), jsonString(n->domain().empty() ? "ai.onnx" : n->domain()),
                    jsonString(n->name()), tensors(n->inputs()), tensors(n->outputs()), fmt::join(attrs, ", ")));
  }
  return fmt::format("[{}]", fmt::join(ops, ",\n "));
}

}  // namespace

std::string Session::serializedIr() const {
  const Impl::Plan& p = impl_->anyPlan();
  if (!p.staged) return "{\"maingraph\": " + graphJson(*p.graph) + "}";
  std::vector<std::string> parts;
  for (size_t i = 0; i < p.staged->graphs.size(); ++i)
    parts.push_back(fmt::format("{}: {}", jsonString(i == 0 ? "maingraph" : p.staged->assignment.programs[i].name),
                                graphJson(*p.staged->graphs[i].graph)));
  return fmt::format("{{{}}}", fmt::join(parts, ",\n"));
}

}  // namespace graft
