#pragma once
// Optimizers as graph ops: persistent state tensors, hyper-parameter tensors and in-place update
// ops (ops/optimizer_ops.cpp) added to a training graph.
#include <graft/optimizer.hpp>

#include <string>
#include <utility>
#include <vector>

#include "ir/graph.hpp"

namespace graft::optim {

/// Ids of the tensors the optimizer owns for weight `w`: "Accl___w" (SGD velocity),
/// "Accl1___w"/"Accl2___w"/"Accl3___w" (moments), "Step___w" (Adam's step), "Accum___w" (gradient
/// accumulator), "<hyperParameter>___w" (e.g. "learningRate___w"), and the global "lossScaling___".
std::string stateId(const std::string& kind, const std::string& weight);
/// True for ids the optimizer owns (never trained themselves).
bool isOptimizerTensor(const std::string& id);
/// Id of the loss-scaling tensor.
inline constexpr const char* kLossScalingId = "lossScaling___";

/// Adds to `source` the optimizer's persistent state and hyper-parameter tensors for `weights`
/// (Variables for state and non-constant hyper-parameters, Constants otherwise). State tensors
/// already present with the right shape and type (a checkpoint) keep their values; hyper-parameters
/// and gradient accumulators always take the values of `opt` (and zero).
void createState(const Optimizer& opt, ir::Graph& source, const std::vector<std::string>& weights, bool accumulate);

/// Adds the optimizer step for (weight, gradient) pairs to `g`, a graph holding the tensors
/// createState made: gradient clipping, then one in-place update op per weight. Every update
/// runs after all other nodes of `g` that exist when this is called. `gradientDivisor`: the
/// gradients are sums to be averaged over that many contributions (a Mean reduction over
/// micro-batches and replicas); the updates divide by it together with the loss scaling, which
/// every update op and the clipping already divide by, so no pass over the gradients is added.
void addUpdates(const Optimizer& opt, ir::Graph& g, const std::vector<std::pair<ir::Tensor*, ir::Tensor*>>& weightGrads,
                double gradientDivisor = 1.0);

/// Writes the values of `opt`'s non-constant hyper-parameters into `source`. Throws graft::Error
/// when `opt` is another kind of optimizer than `current`, or changes a constant value.
void writeHyperParameters(const Optimizer& current, const Optimizer& opt, ir::Graph& source,
                          const std::vector<std::string>& weights);

}  // namespace graft::optim
