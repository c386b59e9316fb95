#pragma once
// What graft's own convolution kernels (winograd_avx2.cpp, conv1x1_avx2.cpp; conv1x1_avx512.cpp
// the epilogue and output) share: the FusedConv nodes the AVX2 ones can take at all, what they
// read from one besides its window, and the 1x1 kernels' output.
#include <optional>

#include "backends/cpu/onednn_conv.hpp"

namespace graft::backends::cpu {

/// A FusedConv that graft's AVX2 convolutions can take, before their own window checks: on a host
/// where sgemm_avx2 runs (AVX2 and FMA, no AVX-512 below GRAFT_CPU_ISA), outside bf16 compute;
/// 2-D, one group, float32 activations in 8-channel blocks in and out, constant weights, Relu or no
/// activation. Its geometry (onednn::convConfig), or nullopt.
std::optional<onednn::ConvConfig> avx2BlockedConv(const ir::Node& n);

/// The node's output shape, and whether it has a bias, a residual sum and Relu.
struct ConvEpilogue {
  Shape yShape;
  bool bias = false, sum = false, relu = false;
};
ConvEpilogue convEpilogue(const ir::Node& n);

/// The node's output Y, allocated (uninitialised); with a residual sum Y starts as the residual
/// (input 3: copied, unless the memory plan put Y on it), for the kernel to add its sums into.
NDArray& convOutput(const ConvEpilogue& e, ops::KernelContext& k);

}  // namespace graft::backends::cpu
