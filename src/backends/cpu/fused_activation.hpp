#pragma once
// The activation of a fused node (FusedConv / FusedMatMul / FusedGemm attributes "activation",
// "activation_domain", "activation_alpha", "activation_beta") as a pass of its own over the
// output, for the oneDNN kernels where oneDNN 2.6's post-op would not give what graft's formula
// gives for NaN or ±inf (docs/reliability.md, "NaN and inf").
#include <cstdint>
#include <functional>

#include "ir/graph.hpp"
#include "support/thread_pool.hpp"

namespace graft::backends::cpu {

/// y[i] = act(y[i]) over n floats with the formulas of the vectorised unary kernels (vec_unary.cpp:
/// NaN and ±inf as the reference has them), split over the pool. Empty when the node has no
/// activation.
using ActivationFn = std::function<void(support::ThreadPool& pool, float* y, int64_t n)>;
ActivationFn fusedActivation(const ir::Node& n);

/// Whether a fused node's activation is ai.onnx Relu (attribute "activation" "Relu", no domain).
bool isPlainRelu(const ir::Node& n);

namespace onednn {
/// Whether the kernel applies n's fused activation itself after the primitive (fusedActivation)
/// instead of as a post-op (appendActivation leaves those out): every activation but the post-ops
/// that keep NaN (onednn_common.cpp lists them). eltwise_relu with alpha 0 is max(x, 0), clip and
/// clip_v2 are max/min, and the exp-based ones clamp exp's argument with max/min: each returns a
/// bound for NaN.
bool activationAfterPrimitive(const ir::Node& n);
}  // namespace onednn

}  // namespace graft::backends::cpu
