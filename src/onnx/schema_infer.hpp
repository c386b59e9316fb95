#pragma once
// ONNX's own type-and-shape inference functions applied to one graft IR node. Every standard
// ai.onnx op gets exact ONNX inference this way; graft's own ops provide their own.
#include <vector>

#include "ir/graph.hpp"

namespace onnx {
class GraphProto;
}

namespace graft::onnxio {

/// True when ONNX defines op `type` of `domain` ("" for ai.onnx) at `opset`.
bool hasOnnxSchema(const std::string& domain, const std::string& type, int64_t opset);

/// The output types ONNX infers for `n` from its input types and, for inputs with constant data,
/// that data (nullptr where not constant). Subgraph attributes are inferred too, reading outer
/// values through the node's implicit inputs. Outputs ONNX cannot infer come back unknown.
/// Throws graft::Error naming the node when ONNX finds the inputs or attributes inconsistent.
std::vector<ir::ValueType> inferWithOnnxSchema(const ir::Node& n, const std::vector<ir::ValueType>& inputTypes,
                                               const std::vector<const NDArray*>& constInputs);

/// Writes one node (with its subgraphs) as a NodeProto / one graph as a GraphProto.
void exportGraphProto(const ir::Graph& g, ::onnx::GraphProto* out);

}  // namespace graft::onnxio
