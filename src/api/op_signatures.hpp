#pragma once
// Op signatures for the Builder: ONNX's schemas for ai.onnx, graft's own table for ai.graphcore,
// and converting attribute values to the kinds a signature declares.
#include <graft/builder.hpp>

#include "ir/graph.hpp"

namespace graft::api {

/// Signatures of the ai.graphcore ops the Builder knows (PopART's names and attributes).
const std::vector<OpSignature>& graphcoreSignatures();

/// Converts `v` to the kind `kind` where that is lossless (int -> float, an empty list to any
/// list kind, ints -> floats); throws graft::Error naming `what` otherwise.
ir::AttrValue coerceAttribute(const AttributeValue& v, AttributeKind kind, const std::string& what);
/// The kind a value holds.
AttributeKind kindOfValue(const AttributeValue& v);
/// IR attribute -> public AttributeValue (throws for graphs and other kinds the API lacks).
AttributeValue toPublicAttribute(const ir::AttrValue& v, const std::string& what);

/// Output types of an ai.graphcore node whose op has no inference in the registry (the loss ops
/// before training registers them): the element type of input 0, and the shape the reduction
/// gives. Throws graft::Error naming the node when its attributes are invalid.
std::vector<ir::ValueType> inferGraphcorePlaceholder(const ir::Node& n);

}  // namespace graft::api
