// graft IR -> ONNX ModelProto.
#include <onnx/onnx_pb.h>

#include "onnx/model_io.hpp"
#include "onnx/proto_convert.hpp"
#include "onnx/schema_infer.hpp"
#include "support/check.hpp"
#include "support/file_util.hpp"

namespace graft::onnxio {
namespace {

void valueInfo(const ir::Tensor* t, ::onnx::ValueInfoProto* vi) {
  vi->set_name(t->id());
  // A tensor of unknown type (a graph output whose type inference left open) gets no type: an
  // empty TypeProto is invalid ONNX.
  if (t->type().isTensor() && !t->type().known()) return;
  typeToProto(t->type(), vi->mutable_type());
}

}  // namespace

void exportGraphProto(const ir::Graph& g, ::onnx::GraphProto* out) {
  out->Clear();
  out->set_name(g.name());
  for (const ir::Tensor* t : g.inputs()) valueInfo(t, out->add_input());
  for (const ir::Tensor* t : g.initializers()) tensorToProto(*t->data(), t->id(), out->add_initializer());
  for (const ir::Node* n : g.schedule()) {
    auto* np = out->add_node();
    np->set_op_type(n->type());
    if (!n->domain().empty()) np->set_domain(n->domain());
    if (!n->name().empty()) np->set_name(n->name());
    for (const ir::Tensor* t : n->inputs()) np->add_input(t ? t->id() : "");
    for (const ir::Tensor* t : n->outputs()) np->add_output(t ? t->id() : "");
    for (const auto& [name, v] : n->attrs().all()) attributeToProto(name, v, np->add_attribute(), exportGraphProto);
    auto annotate = [&](const char* name, int64_t v) {
      auto* a = np->add_attribute();
      a->set_name(name);
      a->set_type(::onnx::AttributeProto::INT);
      a->set_i(v);
    };
    if (n->virtualGraph) annotate("__ipu_number", *n->virtualGraph);
    if (n->pipelineStage) annotate("__pipeline_stage", *n->pipelineStage);
    if (n->recompute) annotate("__recompute_output_in_backward_pass", 1);
    for (const ir::Tensor* t : n->outputs())
      if (t && t->type().known() && !t->isGraphOutput()) valueInfo(t, out->add_value_info());
  }
  for (const ir::Tensor* t : g.outputs()) valueInfo(t, out->add_output());
}

int64_t irVersionForOpset(int64_t opset) {
  // (first opset, IR version) of each ONNX release that raised the IR version, from ONNX's
  // onnx.helper.VERSION_TABLE.
  static constexpr std::pair<int64_t, int64_t> kTable[] = {{9, 4},   {10, 5},  {11, 6},  {12, 7},  {15, 8}, {19, 9},
                                                           {21, 10}, {23, 11}, {24, 12}, {25, 13}, {28, 14}};
  int64_t ir = 3;
  for (const auto& [first, v] : kTable)
    if (opset >= first) ir = v;
  return ir;
}

void exportModel(const ir::Graph& graph, const ModelInfo& info, ::onnx::ModelProto* m) {
  m->Clear();
  m->set_ir_version(std::max<int64_t>(info.irVersion, irVersionForOpset(graph.opsetVersion())));
  m->set_producer_name(info.producerName.empty() ? "graft" : info.producerName);
  m->set_producer_version(info.producerVersion);
  m->set_domain(info.domain);
  m->set_doc_string(info.docString);
  m->set_model_version(info.modelVersion);
  auto* o = m->add_opset_import();
  o->set_domain("");
  o->set_version(graph.opsetVersion());
  for (const auto& [d, v] : graph.otherOpsets) {
    auto* oo = m->add_opset_import();
    oo->set_domain(d);
    oo->set_version(v);
  }
  for (const auto& [k, v] : info.metadata) {
    auto* p = m->add_metadata_props();
    p->set_key(k);
    p->set_value(v);
  }
  exportGraphProto(graph, m->mutable_graph());
}

std::string saveModelBytes(const ir::Graph& graph, const ModelInfo& info) {
  ::onnx::ModelProto m;
  exportModel(graph, info, &m);
  std::string bytes;
  GRAFT_CHECK(m.SerializeToString(&bytes), "cannot serialize model '{}' (larger than 2 GiB?)", graph.name());
  return bytes;
}

void saveModelFile(const ir::Graph& graph, const std::string& path, const ModelInfo& info) {
  GRAFT_CHECK(!path.empty(), "cannot write model '{}': the path is empty", graph.name());
  support::writeFileAtomically("model file", path, saveModelBytes(graph, info));
}

}  // namespace graft::onnxio
