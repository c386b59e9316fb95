#pragma once
// What graft's own convolution kernels (winograd_avx2.cpp, conv1x1_avx2.cpp, conv1x1_avx512.cpp)
// share: the FusedConv nodes they can take at all, the 1x1 kernels' window, what they read from a
// node besides its window, and the 1x1 kernels' output.
#include <optional>

#include "backends/cpu/onednn_conv.hpp"

namespace graft::backends::cpu {

/// A FusedConv that graft's own convolutions can take, before their host, layout and window
/// checks: outside bf16 compute; 2-D, one group, float32 activations in and out, constant
/// weights, Relu or no activation. Its geometry (onednn::convConfig), or nullopt.
std::optional<onednn::ConvConfig> ownFloatConv(const ir::Node& n);

/// ownFloatConv on a host where sgemm_avx2 runs (AVX2 and FMA, no AVX-512 below GRAFT_CPU_ISA),
/// activations in 8-channel blocks in and out: what graft's AVX2 convolutions take before their
/// own window checks.
std::optional<onednn::ConvConfig> avx2BlockedConv(const ir::Node& n);

/// Whether c's window is 1x1 with stride 1 and no padding: a matrix product per image.
bool isPointwiseWindow(const onednn::ConvConfig& c);

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
