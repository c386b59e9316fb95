#pragma once
// Type and shape inference of one node: the op's InferFn for graft's own ops, ONNX's schema
// inference for standard ones. Used by the infer-shapes pass and when graph builders (autodiff,
// optimizers) add nodes.
#include "ir/graph.hpp"

namespace graft::ops {

/// Infers the output types of `n` from its inputs' current types (and the data of constant
/// inputs, Variables too when `weightsAreConstant`), merging them into the output tensors.
/// Returns true when an output type changed. Throws graft::Error naming the node when its inputs
/// are inconsistent.
bool inferNode(ir::Node& n, bool weightsAreConstant);

/// Merges an inferred type into a known one: inferred facts win; dimensions it leaves unknown
/// keep the known size or symbolic name.
ir::ValueType mergeType(const ir::ValueType& known, const ir::ValueType& inferred);

}  // namespace graft::ops
