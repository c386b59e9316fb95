#pragma once
// Conversions between ONNX protobuf messages and graft's IR values. Only src/onnx includes
// ONNX headers; everything else sees graft types.
#include <onnx/onnx_pb.h>

#include <string>

#include "ir/graph.hpp"

namespace graft::onnxio {

/// TensorProto -> NDArray. `what` names the tensor in errors ("initializer 'w'").
/// External data must already have been loaded into raw_data.
NDArray tensorFromProto(const ::onnx::TensorProto& t, const std::string& what);
/// NDArray -> TensorProto (raw_data for numeric types, string_data for strings).
void tensorToProto(const NDArray& a, const std::string& name, ::onnx::TensorProto* out);
/// SparseTensorProto -> dense NDArray.
NDArray sparseTensorFromProto(const ::onnx::SparseTensorProto& t, const std::string& what);

/// TypeProto -> ValueType. Map types and other unsupported kinds throw graft::Error naming `what`.
ir::ValueType typeFromProto(const ::onnx::TypeProto& t, const std::string& what);
/// ValueType -> TypeProto. Unknown types produce an empty TypeProto.
void typeToProto(const ir::ValueType& t, ::onnx::TypeProto* out);
/// Leaves the existing proto's shape alone where `t` has no shape.
TensorInfo tensorInfoFromTypeProto(const ::onnx::TypeProto_Tensor& t);

/// AttributeProto -> AttrValue; subgraph attributes are converted by the callback.
ir::AttrValue attributeFromProto(const ::onnx::AttributeProto& a, const std::string& what,
                                 const std::function<ir::GraphPtr(const ::onnx::GraphProto&)>& importGraph);
/// AttrValue -> AttributeProto; subgraphs are written by the callback.
void attributeToProto(const std::string& name, const ir::AttrValue& v, ::onnx::AttributeProto* out,
                      const std::function<void(const ir::Graph&, ::onnx::GraphProto*)>& exportGraph);

}  // namespace graft::onnxio
