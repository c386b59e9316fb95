#pragma once
// Per-op cost estimates, for balancing pipeline stages (passes/pipeline_stages.cpp) and for the
// programs' table: an op's OpDef::cost (setCost, in its family file beside inference and the VJP)
// gives its floating-point operations, a multiply-add counting 2, from the node's inferred
// shapes. An op without one counts one operation per output element. Unknown shapes count 0.
// The helpers below are the shapes of cost that several families share.
#include <cstdint>

#include "ir/graph.hpp"

namespace graft::ops {

/// The FLOPs estimate of `n`: its op's cost function, or one per output element.
double estimateFlops(const ir::Node& n);

namespace cost {

/// Elements of `t` (0 when unknown or not a static tensor).
double numel(const ir::Tensor* t);
/// Dimension `d` of `t` (0 when unknown).
int64_t dim(const ir::Tensor* t, int64_t d);
/// Elements of all outputs.
double outputElements(const ir::Node& n);
/// MatMul-like (A = input 0, output 0): 2 * |Y| * K, K the last axis of A, or the axis a folded
/// Transpose (FusedMatMul's perm_a) moves there.
double matmul(const ir::Node& n);
/// Gemm-like: 2 * |Y| * K, K read from A (input 0) after transA.
double gemm(const ir::Node& n);
/// Convolution-like: one dot product over a filter per element of `y`: 2 * |y| * |w| / w[0].
double convolution(const ir::Tensor* y, const ir::Tensor* w);
/// A recurrence (RNN / GRU / LSTM) over X [T, N, I] (layout 1: [N, T, I]) with weights W and R:
/// 2 * T * N * (|W| + |R|), and 8 per output element of n (the gates).
double recurrence(const ir::Node& n, const ir::Tensor* x, const ir::Tensor* w, const ir::Tensor* r);

}  // namespace cost
}  // namespace graft::ops
