#include "onnx/schema_infer.hpp"

#include <onnx/defs/schema.h>
#include <onnx/shape_inference/implementation.h>

#include "onnx/proto_convert.hpp"
#include "support/check.hpp"

namespace graft::onnxio {

bool hasOnnxSchema(const std::string& domain, const std::string& type, int64_t opset) {
  return ::onnx::OpSchemaRegistry::Schema(type, static_cast<int>(opset), domain) != nullptr;
}

std::vector<ir::ValueType> inferWithOnnxSchema(const ir::Node& n, const std::vector<ir::ValueType>& inputTypes,
                                               const std::vector<const NDArray*>& constInputs) {
  int64_t opset = n.domain().empty() ? n.graph().opsetVersion()
                                     : (n.graph().otherOpsets.count(n.domain()) ? n.graph().otherOpsets.at(n.domain()) : 1);
  for (const ir::Graph* g = &n.graph(); g->parent() && !n.domain().empty(); g = g->parent())
    if (g->parent()->otherOpsets.count(n.domain())) opset = g->parent()->otherOpsets.at(n.domain());
  const auto* schema = ::onnx::OpSchemaRegistry::Schema(n.type(), static_cast<int>(opset), n.domain());
  std::vector<ir::ValueType> result(n.numOutputs(), ir::ValueType::tensor(TensorInfo{}));
  if (!schema || !schema->has_type_and_shape_inference_function()) return result;

  // A NodeProto with positional names: in0, in1, ... (the names only key the maps below).
  ::onnx::NodeProto np;
  np.set_op_type(n.type());
  np.set_domain(n.domain());
  std::unordered_map<std::string, ::onnx::TypeProto*> typesByName;
  std::unordered_map<std::string, const ::onnx::TensorProto*> dataByName;
  std::vector<std::unique_ptr<::onnx::TypeProto>> typeStore;
  std::vector<std::unique_ptr<::onnx::TensorProto>> dataStore;
  for (size_t i = 0; i < n.numInputs(); ++i) {
    if (!n.input(i)) {
      np.add_input("");
      continue;
    }
    std::string name = "in" + std::to_string(i);
    np.add_input(name);
    // Sequences and optionals go in even when their element type is unknown: their kind is known.
    if (i < inputTypes.size() && (inputTypes[i].known() || !inputTypes[i].isTensor())) {
      typeStore.push_back(std::make_unique<::onnx::TypeProto>());
      typeToProto(inputTypes[i], typeStore.back().get());
      typesByName[name] = typeStore.back().get();
    }
    if (i < constInputs.size() && constInputs[i] && constInputs[i]->dtype() != DataType::String) {
      dataStore.push_back(std::make_unique<::onnx::TensorProto>());
      tensorToProto(*constInputs[i], name, dataStore.back().get());
      dataByName[name] = dataStore.back().get();
    }
  }
  for (size_t i = 0; i < n.numOutputs(); ++i) np.add_output(n.output(i) ? "out" + std::to_string(i) : "");
  for (const auto& [name, v] : n.attrs().all()) attributeToProto(name, v, np.add_attribute(), exportGraphProto);

  // Outer-scope types for subgraph inference.
  std::unordered_map<std::string, ::onnx::TypeProto*> outerTypes;
  for (const ir::Tensor* t : n.implicitInputs()) {
    if (!t->type().known() && t->type().isTensor()) continue;
    typeStore.push_back(std::make_unique<::onnx::TypeProto>());
    typeToProto(t->type(), typeStore.back().get());
    outerTypes[t->id()] = typeStore.back().get();
  }
  std::unordered_map<std::string, int> opsets{{"", static_cast<int>(n.graph().opsetVersion())}};
  for (const ir::Graph* g = &n.graph(); g; g = g->parent())
    for (const auto& [d, v] : g->otherOpsets) opsets.emplace(d, static_cast<int>(v));
  ::onnx::shape_inference::ModelLocalFunctionsMap noFunctions;
  ::onnx::shape_inference::GraphInferenceContext graphCtx(outerTypes, opsets, nullptr, noFunctions);
  ::onnx::shape_inference::InferenceContextImpl ctx(np, typesByName, dataByName, {}, ::onnx::ShapeInferenceOptions{},
                                                   nullptr, &graphCtx);
  try {
    schema->GetTypeAndShapeInferenceFunction()(ctx);
  } catch (const std::exception& e) {
    GRAFT_THROW("{}: {}", n.describe(), e.what());
  }
  for (size_t i = 0; i < n.numOutputs(); ++i) {
    const ::onnx::TypeProto* t = ctx.getOutputType(i);
    if (t && t->value_case() != ::onnx::TypeProto::VALUE_NOT_SET) {
      try {
        result[i] = typeFromProto(*t, n.describe());
      } catch (const Error&) {
        // leave unknown
      }
      if (result[i].kind == ir::ValueKind::Tensor && t->has_tensor_type() && t->tensor_type().elem_type() == 0)
        result[i] = ir::ValueType::tensor(TensorInfo{});
    }
  }
  return result;
}

}  // namespace graft::onnxio
