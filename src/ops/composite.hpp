#pragma once
// Ops defined as compositions of other ops. graft's fused ops (ai.graft::FusedConv, ...) state
// their semantics as a small private graph of standard ops; the same graph gives their type
// inference and their reference kernel (each inner op's reference kernel in turn), so every
// backend can run a fused node and fast kernels are tested against the composition.
#include <functional>
#include <vector>

#include "ir/graph.hpp"
#include "ops/kernel.hpp"

namespace graft::ops {

/// Fills `g` with the composition of `n`: `inputs` are g's inputs standing for n's inputs
/// (nullptr for omitted optional ones), typed; the builder adds nodes (with addInner) and
/// returns the tensors that stand for n's outputs (nullptr for outputs it does not produce).
using CompositeBuilder =
    std::function<std::vector<ir::Tensor*>(const ir::Node& n, ir::Graph& g, const std::vector<ir::Tensor*>& inputs)>;

/// Adds node `type` of `domain` to a composition graph, infers its types and returns its first
/// output (its outputs are numbered `numOutputs`).
ir::Tensor* addInner(ir::Graph& g, const std::string& type, const std::string& domain, const std::vector<ir::Tensor*>& inputs,
                     ir::Attributes attrs = {}, std::vector<ir::Tensor*>* allOutputs = nullptr, size_t numOutputs = 1);
/// A Constant scalar float in a composition graph.
ir::Tensor* addScalar(ir::Graph& g, float v);

/// The output types of the composition of `n` for input types `in` (an InferFn).
std::vector<ir::ValueType> inferComposite(const ir::Node& n, const std::vector<ir::ValueType>& in,
                                          const CompositeBuilder& build);
/// A kernel that runs the composition with the inner ops' reference kernels.
KernelFn compileComposite(CompileContext& ctx, const CompositeBuilder& build);

}  // namespace graft::ops
