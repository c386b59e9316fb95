#pragma once
// Reverse-mode automatic differentiation on the IR: grows the backward graph of a scalar loss
// from each op's VJP (ops/grad.hpp). The backward graph is ordinary IR: it is optimised,
// scheduled, planned and exported like the forward graph.
#include <map>
#include <string>
#include <vector>

#include "ir/graph.hpp"

namespace graft::autodiff {

/// Prefix of gradient tensor ids: "Gradient___<weight>" (PopART's reserved gradient prefix).
inline constexpr const char* kGradientPrefix = "Gradient___";

/// Adds to `g` the nodes computing d(loss)/d(t) for each t in `wrt`, starting from `seed` (the
/// gradient of the loss itself; typically a constant 1, or the loss-scaling factor). Types of the
/// forward graph must be inferred. Returns, for each t in wrt, its gradient tensor, whose id is
/// kGradientPrefix + t's id, or nullptr when the loss does not depend on t. Throws graft::Error
/// naming the node when an op on a path from `wrt` to the loss has no gradient.
std::map<ir::Tensor*, ir::Tensor*> differentiate(ir::Graph& g, ir::Tensor* loss, const std::vector<ir::Tensor*>& wrt,
                                                 ir::Tensor* seed);

}  // namespace graft::autodiff
