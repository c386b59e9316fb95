#pragma once
// What graft's own convolution kernels (winograd_avx2.cpp, winograd_bf16.cpp, conv1x1_avx2.cpp,
// conv1x1_avx512.cpp) share: the FusedConv nodes they can take at all, the 1x1 kernels' window,
// the Winograd kernels' plane, what they read from a node besides its window, and the 1x1
// kernels' output.
#include <optional>

#include "backends/cpu/onednn_conv.hpp"

namespace graft::backends::cpu {

/// A FusedConv that graft's own convolutions can take, before their compute mode, types, host,
/// layout and window checks: 2-D, one group, constant weights, Relu or no activation. Its
/// geometry (onednn::convConfig), or nullopt.
std::optional<onednn::ConvConfig> ownConv(const ir::Node& n);

/// ownConv outside bf16 compute, float32 activations in and out: what graft's float32
/// convolutions take before their host, layout and window checks.
std::optional<onednn::ConvConfig> ownFloatConv(const ir::Node& n);

/// ownFloatConv on a host where sgemm_avx2 runs (AVX2 and FMA, no AVX-512 below GRAFT_CPU_ISA),
/// activations in 8-channel blocks in and out: what graft's AVX2 convolutions take before their
/// own window checks.
std::optional<onednn::ConvConfig> avx2BlockedConv(const ir::Node& n);

/// Whether c's window is 1x1 with stride 1 and no padding: a matrix product per image.
bool isPointwiseWindow(const onednn::ConvConfig& c);

/// The plane of a convolution with a Winograd window (3x3, stride 1, no dilation): batch, channels
/// in and out, input and output sides, the top and left padding.
struct WinogradPlane {
  int64_t N = 0, C = 0, H = 0, W = 0, M = 0, OH = 0, OW = 0, padT = 0, padL = 0;
};
/// c's plane where its window is Winograd's and its output and padding are not empty or
/// negative, else nullopt (winograd_avx2, winograd_bf16).
std::optional<WinogradPlane> winogradPlane(const onednn::ConvConfig& c);

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
