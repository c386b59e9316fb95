#include "onnx/validate_names.hpp"

#include <onnx/onnx_pb.h>

#include "support/check.hpp"

namespace graft::onnxio {
namespace {

struct Checker {
  const std::string& source;

  void name(std::string_view value, const std::string& where) const {
    GRAFT_CHECK(isValidUtf8(value), "{}: {} is not valid UTF-8: '{}'", source, where, escapeBytes(value));
  }

  // The node's own name first: the messages for its other names identify it by that name.
  std::string nodeLabel(const ::onnx::NodeProto& n, int index, const std::string& graph) const {
    name(n.op_type(), fmt::format("the op type of node #{} of graph {}", index, graph));
    name(n.domain(), fmt::format("the domain of node #{} ({}) of graph {}", index, n.op_type(), graph));
    name(n.name(), fmt::format("the name of node #{} ({}) of graph {}", index, n.op_type(), graph));
    return n.name().empty() ? fmt::format("node #{} ({}) of graph {}", index, n.op_type(), graph)
                            : fmt::format("node '{}' ({}) of graph {}", n.name(), n.op_type(), graph);
  }

  void valueInfos(const google::protobuf::RepeatedPtrField<::onnx::ValueInfoProto>& vs, const char* kind,
                  const std::string& graph) const {
    for (int i = 0; i < vs.size(); ++i) {
      name(vs[i].name(), fmt::format("the name of {} #{} of graph {}", kind, i, graph));
      if (vs[i].type().has_tensor_type() && vs[i].type().tensor_type().has_shape())
        for (const auto& d : vs[i].type().tensor_type().shape().dim())
          name(d.dim_param(), fmt::format("a dimension name of {} '{}' of graph {}", kind, vs[i].name(), graph));
    }
  }

  void tensor(const ::onnx::TensorProto& t, const std::string& where) const {
    name(t.name(), fmt::format("the name of {}", where));
    for (const auto& kv : t.external_data()) {
      name(kv.key(), fmt::format("an external data key of {} '{}'", where, t.name()));
      name(kv.value(), fmt::format("the external data entry '{}' of {} '{}'", kv.key(), where, t.name()));
    }
  }

  void graph(const ::onnx::GraphProto& g, const std::string& parent) const {
    name(g.name(), fmt::format("the name of a graph{}", parent));
    std::string label = fmt::format("'{}'{}", g.name(), parent);
    // Nodes first: a bad tensor name is then reported with a node that reads or writes it.
    nodes(g, label);
    valueInfos(g.input(), "input", label);
    valueInfos(g.output(), "output", label);
    valueInfos(g.value_info(), "value_info", label);
    for (int i = 0; i < g.initializer_size(); ++i)
      tensor(g.initializer(i), fmt::format("initializer #{} of graph {}", i, label));
    for (int i = 0; i < g.sparse_initializer_size(); ++i) {
      tensor(g.sparse_initializer(i).values(), fmt::format("sparse initializer #{} of graph {}", i, label));
      tensor(g.sparse_initializer(i).indices(), fmt::format("sparse initializer #{} of graph {}", i, label));
    }
  }

  void nodes(const ::onnx::GraphProto& g, const std::string& label) const {
    for (int i = 0; i < g.node_size(); ++i) {
      const ::onnx::NodeProto& n = g.node(i);
      std::string node = nodeLabel(n, i, label);
      for (int k = 0; k < n.input_size(); ++k) name(n.input(k), fmt::format("input {} of {}", k, node));
      for (int k = 0; k < n.output_size(); ++k) name(n.output(k), fmt::format("output {} of {}", k, node));
      for (const auto& a : n.attribute()) {
        name(a.name(), fmt::format("an attribute name of {}", node));
        name(a.ref_attr_name(), fmt::format("the ref_attr_name of attribute '{}' of {}", a.name(), node));
        std::string in = fmt::format(" (attribute '{}' of {})", a.name(), node);
        if (a.has_t()) tensor(a.t(), "the tensor" + in);
        for (const auto& t : a.tensors()) tensor(t, "a tensor" + in);
        if (a.has_g()) graph(a.g(), in);
        for (const auto& sg : a.graphs()) graph(sg, in);
      }
    }
  }
};

}  // namespace

bool isValidUtf8(std::string_view s) {
  const auto* p = reinterpret_cast<const unsigned char*>(s.data());
  size_t n = s.size(), i = 0;
  while (i < n) {
    unsigned c = p[i];
    if (c < 0x80) {
      ++i;
      continue;
    }
    int len = 0;
    unsigned cp = 0, min = 0;
    if ((c & 0xE0) == 0xC0)
      len = 2, cp = c & 0x1F, min = 0x80;
    else if ((c & 0xF0) == 0xE0)
      len = 3, cp = c & 0x0F, min = 0x800;
    else if ((c & 0xF8) == 0xF0)
      len = 4, cp = c & 0x07, min = 0x10000;
    else
      return false;
    if (i + len > n) return false;
    for (int k = 1; k < len; ++k) {
      if ((p[i + k] & 0xC0) != 0x80) return false;
      cp = (cp << 6) | (p[i + k] & 0x3F);
    }
    if (cp < min || cp > 0x10FFFF || (cp >= 0xD800 && cp <= 0xDFFF)) return false;
    i += len;
  }
  return true;
}

std::string escapeBytes(std::string_view s) {
  std::string out;
  for (unsigned char c : s) {
    if (c == '\\')
      out += "\\\\";
    else if (c >= 0x20 && c < 0x7f)
      out += static_cast<char>(c);
    else
      out += fmt::format("\\x{:02x}", c);
  }
  return out;
}

void checkNamesAreUtf8(const ::onnx::ModelProto& m, const std::string& source) {
  Checker c{source};
  c.name(m.producer_name(), "the producer name");
  c.name(m.producer_version(), "the producer version");
  c.name(m.domain(), "the model domain");
  for (const auto& o : m.opset_import()) c.name(o.domain(), "an opset domain");
  for (const auto& kv : m.metadata_props()) {
    c.name(kv.key(), "a metadata key");
    c.name(kv.value(), fmt::format("the metadata value of '{}'", kv.key()));
  }
  for (const auto& f : m.functions()) {
    c.name(f.name(), "the name of a model function");
    c.name(f.domain(), fmt::format("the domain of model function '{}'", f.name()));
    for (const auto& x : f.input()) c.name(x, fmt::format("an input of model function '{}'", f.name()));
    for (const auto& x : f.output()) c.name(x, fmt::format("an output of model function '{}'", f.name()));
    for (int i = 0; i < f.node_size(); ++i) {
      std::string node = c.nodeLabel(f.node(i), i, fmt::format("of function '{}'", f.name()));
      for (const auto& x : f.node(i).input()) c.name(x, fmt::format("an input of {}", node));
      for (const auto& x : f.node(i).output()) c.name(x, fmt::format("an output of {}", node));
      for (const auto& a : f.node(i).attribute()) c.name(a.name(), fmt::format("an attribute name of {}", node));
    }
  }
  c.graph(m.graph(), "");
}

}  // namespace graft::onnxio
