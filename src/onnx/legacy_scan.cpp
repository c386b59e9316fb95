// Scan before opset 9: see legacy_scan.hpp.
#include "onnx/legacy_scan.hpp"

#include "onnx/proto_util.hpp"
#include "support/check.hpp"

namespace graft::onnxio {

void recordLegacyScans(const ::onnx::GraphProto& g, LegacyScans* out) {
  std::unordered_map<std::string, ::onnx::TypeProto> types;
  collectTypes(g, &types);
  for (const auto& n : g.node()) {
    for (const auto& a : n.attribute()) {
      if (a.has_g()) recordLegacyScans(a.g(), out);
      for (const auto& sg : a.graphs()) recordLegacyScans(sg, out);
    }
    if (n.op_type() != "Scan" || !isOnnxDomain(n.domain()) || n.output_size() == 0) continue;
    LegacyScan& s = (*out)[n.output(0)];
    s.inputs.assign(n.input().begin(), n.input().end());
    for (const auto* names : {&n.input(), &n.output()})
      for (const auto& v : *names)
        if (types.count(v)) s.types[v] = types[v];
  }
}

void rewriteLegacyScans(::onnx::GraphProto* g, const LegacyScans& scans, const std::string& source, int* counter) {
  std::unordered_map<std::string, ::onnx::TypeProto> declared;
  for (auto& n : *g->mutable_node()) {
    for (auto& a : *n.mutable_attribute()) {
      if (a.has_g()) rewriteLegacyScans(a.mutable_g(), scans, source, counter);
      for (auto& sg : *a.mutable_graphs()) rewriteLegacyScans(&sg, scans, source, counter);
    }
    if (n.op_type() != "Scan" || !isOnnxDomain(n.domain()) || n.output_size() == 0) continue;
    auto it = scans.find(n.output(0));
    if (it == scans.end()) continue;
    const LegacyScan& old = it->second;
    std::string what = fmt::format("{}: Scan node '{}' (opset 8)", source, n.name().empty() ? n.output(0) : n.name());
    GRAFT_CHECK(old.inputs.empty() || old.inputs[0].empty(),
                "{} has a sequence_lens input; graft supports opset-8 Scan "
                "only over full-length sequences",
                what);
    std::vector<std::string> ins(old.inputs.begin() + (old.inputs.empty() ? 0 : 1), old.inputs.end());
    std::string prefix = fmt::format("__graft_scan8_{}_", (*counter)++);
    ::onnx::NodeProto inner;
    inner.set_op_type("Scan");
    ::onnx::GraphProto batchBody;
    batchBody.set_name(prefix + "batch_body");
    for (size_t k = 0; k < ins.size(); ++k) {
      batchBody.add_input()->set_name(prefix + "in" + std::to_string(k));
      inner.add_input(prefix + "in" + std::to_string(k));
    }
    int numBodyOutputs = 0;
    for (const auto& a : n.attribute()) {
      if (a.name() == "directions") {
        ::onnx::AttributeProto d = a;
        d.set_name("scan_input_directions");
        *inner.add_attribute() = d;
      } else {
        *inner.add_attribute() = a;  // body, num_scan_inputs (and scan_input_directions if adapted)
        if (a.name() == "body") numBodyOutputs = a.g().output_size();
      }
    }
    for (int k = 0; k < std::max(numBodyOutputs, n.output_size()); ++k) {
      inner.add_output(prefix + "out" + std::to_string(k));
      batchBody.add_output()->set_name(prefix + "out" + std::to_string(k));
    }
    *batchBody.add_node() = std::move(inner);
    ::onnx::NodeProto outer;
    outer.set_op_type("Scan");
    outer.set_name(n.name());
    for (const auto& i : ins) outer.add_input(i);
    for (const auto& o : n.output()) outer.add_output(o);
    auto* body = outer.add_attribute();
    body->set_name("body");
    body->set_type(::onnx::AttributeProto::GRAPH);
    *body->mutable_g() = std::move(batchBody);
    auto* num = outer.add_attribute();
    num->set_name("num_scan_inputs");
    num->set_type(::onnx::AttributeProto::INT);
    num->set_i(static_cast<int64_t>(ins.size()));  // the states are sliced along the batch axis too
    n = std::move(outer);
    declared.insert(old.types.begin(), old.types.end());
  }
  // The adapter stripped the first dimension from the recorded shapes of the Scan's inputs and
  // outputs (graph inputs included); put the declared types back.
  auto fix = [&](::onnx::ValueInfoProto& v) {
    auto t = declared.find(v.name());
    if (t != declared.end()) *v.mutable_type() = t->second;
  };
  for (auto& v : *g->mutable_input()) fix(v);
  for (auto& v : *g->mutable_value_info()) fix(v);
  for (auto& v : *g->mutable_output()) fix(v);
}

}  // namespace graft::onnxio
