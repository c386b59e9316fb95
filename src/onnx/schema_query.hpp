#pragma once
// What ONNX's operator schemas say about an op (its signature, for the Builder and the Python
// opset objects), and checking one node against its schema as the Builder adds it.
#include <graft/builder.hpp>

#include <optional>
#include <string>

#include "ir/graph.hpp"

namespace graft::onnxio {

/// The signature of ai.onnx op `type` at `opset` (the op version in force at that opset), or
/// nullopt when ONNX has no such op at that opset or the op is deprecated there.
std::optional<OpSignature> onnxOpSignature(const std::string& type, int64_t opset);

/// Checks `n` (an ai.onnx node) against its schema at `opset`: number of inputs and outputs,
/// attribute names and kinds, required attributes, and the element types of inputs whose types
/// are known. Attributes whose names start with "__" (PopART's annotations) are not checked.
/// Throws graft::Error naming the node.
void verifyWithOnnxSchema(const ir::Node& n, int64_t opset);

}  // namespace graft::onnxio
