#pragma once
// Helpers shared by the fusion passes (fuse_conv.cpp, fuse_matmul.cpp): single-use chains,
// constants, fused activations, and replacing a chain of nodes by one fused node.
#include <optional>
#include <vector>

#include "ir/graph.hpp"
#include "passes/pass.hpp"

namespace graft::passes::fuse {

/// Whether `n` is a node of graft's own op `type` (domain ai.graft); false for nullptr.
bool isGraftOp(const ir::Node* n, const char* type);
/// Whether `n` is a node of the ai.onnx op `type`; false for nullptr.
bool isOnnx(const ir::Node* n, const char* type);

/// The only consumer of `t` when it has exactly one (non-implicit) use and is not a graph
/// output; nullptr otherwise (fusing would hide a value someone else reads).
ir::Node* soleConsumer(const ir::Tensor* t);

/// True when `t` holds data fixed at compile time: a Constant, or a Variable when weights are
/// constant for this compilation.
bool isConstant(const ir::Tensor* t, const PassContext& ctx);

/// A fusable activation: a row of the elementwise table with a oneDNN post-op (ai.onnx Relu,
/// LeakyRelu, Sigmoid, Tanh, Elu, Softplus, HardSwish, HardSigmoid, ai.graphcore Gelu), or Clip
/// (with constant or absent bounds). Sets the fused node's
/// activation attributes ("activation", "activation_domain", "activation_alpha",
/// "activation_beta") in `attrs`; returns false for anything else.
bool activationAttrs(const ir::Node& act, const PassContext& ctx, ir::Attributes& attrs);

/// Replaces `chain` (nodes in data-flow order; every intermediate output has the next node as
/// its only consumer) by one node of `type` in ai.graft reading `inputs`, with `attrs`, whose
/// output 0 is the last node's output 0 (same tensor, same id). The first node's name is kept.
ir::Node* replaceChain(ir::Graph& g, const std::vector<ir::Node*>& chain, const std::string& type,
                       const std::vector<ir::Tensor*>& inputs, ir::Attributes attrs);

/// Replaces node `n` by a node of `type` in `domain` reading `inputs`, with `attrs` and outputs
/// `outputIds` ("" for none), which takes n's place: its name, node id (its place in the
/// schedule), virtual graph, pipeline stage, eagerness and control dependencies both ways. n's
/// outputs are dropped: the caller connects what it keeps. `inputs` and `attrs` may be n's own.
ir::Node* replaceNodeInPlace(ir::Graph& g, ir::Node* n, const std::string& type, const std::string& domain,
                             const std::vector<ir::Tensor*>& inputs, const std::vector<std::string>& outputIds,
                             ir::Attributes attrs);

/// Removes `nodes` (in any order), then each of their outputs that is left without a producer, a
/// reader and a place among the graph's outputs.
void removeNodes(ir::Graph& g, const std::vector<ir::Node*>& nodes);

/// True when `t` is a float32 tensor with a known shape.
bool isFloat(const ir::Tensor* t);

}  // namespace graft::passes::fuse
