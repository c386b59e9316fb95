#pragma once
// Runs one node's reference kernel on given input values, outside any compiled plan. Used by
// constant folding and by the op tests.
#include <vector>

#include "ir/graph.hpp"
#include "ops/kernel.hpp"

namespace graft::ops {

/// Evaluates `node` (whose op must be registered with a reference kernel) on `inputs` (one per
/// node input; an Empty value for an omitted optional input). Returns one value per node
/// output. Subgraph ops are not supported here.
std::vector<Value> evaluateNode(const ir::Node& node, const std::vector<Value>& inputs, support::ThreadPool& pool);

/// A one-thread pool for evaluations that need no parallelism.
support::ThreadPool& serialPool();

}  // namespace graft::ops
