#include <sstream>

#include "ir/graph.hpp"
#include "support/check.hpp"

namespace graft::ir {
namespace {

std::string attrToString(const AttrValue& v) {
  struct V {
    std::string operator()(int64_t x) const { return std::to_string(x); }
    std::string operator()(float x) const { return fmt::format("{}", x); }
    std::string operator()(const std::string& s) const { return fmt::format("\"{}\"", s); }
    std::string operator()(const NDArray& a) const {
      return fmt::format("tensor<{} {}>", dtypeName(a.dtype()), shapeToString(a.shape()));
    }
    std::string operator()(const GraphPtr& g) const { return "graph<" + (g ? g->name() : "null") + ">"; }
    std::string operator()(const ValueType& t) const { return "type<" + t.str() + ">"; }
    std::string operator()(const std::vector<int64_t>& x) const { return fmt::format("[{}]", fmt::join(x, ", ")); }
    std::string operator()(const std::vector<float>& x) const { return fmt::format("[{}]", fmt::join(x, ", ")); }
    std::string operator()(const std::vector<std::string>& x) const { return fmt::format("[\"{}\"]", fmt::join(x, "\", \"")); }
    std::string operator()(const std::vector<NDArray>& x) const { return fmt::format("[{} tensors]", x.size()); }
    std::string operator()(const std::vector<GraphPtr>& x) const { return fmt::format("[{} graphs]", x.size()); }
  };
  return std::visit(V{}, v);
}

void print(const Graph& g, std::ostringstream& os, const std::string& indent) {
  os << indent << "graph " << g.name();
  if (!g.parent()) os << " (ai.onnx opset " << g.opsetVersion() << ")";
  os << "\n";
  for (Tensor* t : g.inputs()) os << indent << "  input    " << t->id() << ": " << t->type().str() << "\n";
  for (Tensor* t : g.tensors()) {
    if (t->kind() == TensorKind::Variable || t->kind() == TensorKind::Constant)
      os << indent << "  " << (t->kind() == TensorKind::Variable ? "weight   " : "constant ") << t->id() << ": "
         << t->type().str() << "\n";
    if (t->kind() == TensorKind::OuterScope) os << indent << "  outer    " << t->id() << "\n";
  }
  for (Node* n : g.schedule()) {
    os << indent << "  ";
    std::vector<std::string> outs, ins;
    for (Tensor* t : n->outputs()) outs.push_back(t ? t->id() : "_");
    for (Tensor* t : n->inputs()) ins.push_back(t ? t->id() : "_");
    os << fmt::format("{} = {}{}({})", fmt::join(outs, ", "), n->domain().empty() ? "" : n->domain() + "::", n->type(),
                      fmt::join(ins, ", "));
    if (!n->attrs().empty()) {
      std::vector<std::string> as;
      for (const auto& [k, v] : n->attrs().all()) as.push_back(k + "=" + attrToString(v));
      os << " {" << fmt::format("{}", fmt::join(as, ", ")) << "}";
    }
    if (!n->name().empty()) os << "  # " << n->name();
    std::vector<std::string> types;
    for (Tensor* t : n->outputs())
      if (t && t->type().known()) types.push_back(t->type().str());
    if (!types.empty()) os << "  -> " << fmt::format("{}", fmt::join(types, ", "));
    os << "\n";
    for (Graph* sub : n->subgraphs()) print(*sub, os, indent + "    ");
  }
  for (Tensor* t : g.outputs()) os << indent << "  output   " << t->id() << ": " << t->type().str() << "\n";
}

}  // namespace

std::string printGraph(const Graph& g) {
  std::ostringstream os;
  print(g, os, "");
  return os.str();
}

}  // namespace graft::ir
