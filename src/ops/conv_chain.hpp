#pragma once
// ai.graft::FusedConvChain (ops/fused.cpp): FusedConv applied several times in a row, each
// stage reading the previous stage's output. Its stages' attributes are the FusedConv
// attributes prefixed "s<i>_"; these helpers name, read and expand them (for its type inference,
// its reference kernel, the cpu-conv-chains pass that makes it and the cpu kernel that runs it).
#include <string>
#include <string_view>
#include <vector>

#include "ir/graph.hpp"

namespace graft::ops {

/// Inputs of a FusedConvChain: X, Sum (optional: added by the last stage), then W<i>, B<i> for
/// every stage.
constexpr size_t kChainX = 0, kChainSum = 1, kChainFirstWeight = 2;
inline size_t chainWeightInput(int64_t stage) { return kChainFirstWeight + 2 * static_cast<size_t>(stage); }
inline size_t chainBiasInput(int64_t stage) { return chainWeightInput(stage) + 1; }

/// The attribute `name` of stage `stage`: "s<stage>_<name>".
std::string convChainAttrName(int64_t stage, std::string_view name);

/// The number of stages ("stages", >= 1), checked against the node's inputs.
int64_t convChainStages(const ir::Node& n);

/// Stage `stage`'s FusedConv attributes (its "s<stage>_" attributes, unprefixed).
ir::Attributes convChainStageAttrs(const ir::Node& n, int64_t stage);

/// Adds the chain's stages to `g` as FusedConv nodes on `in` (stand-ins for n's inputs, nullptr
/// for an omitted Sum); returns the stage nodes, first to last.
std::vector<ir::Node*> buildConvChain(const ir::Node& n, ir::Graph& g, const std::vector<ir::Tensor*>& in);

/// The same in `g` on stand-in inputs of these types (one per input of n; an unknown type for an
/// omitted Sum): for the cost estimate and the cpu kernel, which read the stages' geometry.
std::vector<ir::Node*> buildConvChain(const ir::Node& n, ir::Graph& g, const std::vector<ir::ValueType>& inputTypes);

}  // namespace graft::ops
