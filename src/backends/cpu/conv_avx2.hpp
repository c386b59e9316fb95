#pragma once
// What graft's own AVX2 convolution kernels (winograd_avx2.cpp, conv1x1_avx2.cpp) share: the
// FusedConv nodes they can take at all, and what they read from one besides its window.
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

}  // namespace graft::backends::cpu
