#pragma once
// The forward convolution's geometry and oneDNN descriptors (onednn_conv.cpp), shared with the
// convolution chains' kernel (onednn_conv_chain.cpp).
#include <cstdint>
#include <optional>

#include "backends/cpu/onednn_common.hpp"

namespace graft::backends::cpu::onednn {

// Conv, FusedConv: X [N, C, in...], W [M, C/group, k...], B [M], Sum (FusedConv) like Y.
struct ConvConfig {
  Shape x, w, y;  // logical
  int64_t group = 1;
  Window win;
  int xBlock = 0, yBlock = 0;
  bool bias = false, sum = false;
  memory::data_type xType = memory::data_type::f32, yType = memory::data_type::f32;  // Sum: like Y
};

/// The geometry of Conv or FusedConv n, or nullopt where the oneDNN kernels do not take it.
std::optional<ConvConfig> convConfig(const ir::Node& n);

/// Weights as graft holds them ([M, C/g, k...], row-major) in oneDNN's grouped view
/// [g, M/g, C/g, k...] when grouped (the same bytes).
Dims weightDims(const Shape& w, int64_t group);
/// Those weights' plain descriptor.
memory::desc plainWeights(const Shape& w, int64_t group);

/// The post-ops of convolution n: the residual sum, then (FusedConv) the activations oneDNN
/// applies itself (appendActivation leaves out those graft applies after the primitive).
dnnl::primitive_attr postOpsAttr(const ir::Node& n, const ConvConfig& c);

/// c's forward-inference descriptor on these activation and weight descriptors, with `bias` when
/// given; Winograd's algorithm with `winograd`.
dnnl::convolution_forward::desc forwardDesc(const ConvConfig& c, const memory::desc& x, const memory::desc& w,
                                            const memory::desc* bias, const memory::desc& y, bool winograd = false);

/// The descriptors of a convolution's activations X (shape x, channel block xb) and Y in their
/// assigned layouts (layoutDesc), except that a tensor of exactly 16 channels opposite one in
/// 16-channel blocks is tagged as 16-channel blocks rather than channels last (the same bytes):
/// oneDNN's blocked kernels take only matching tags, and leave the mixed pair to its reference loops.
std::pair<memory::desc, memory::desc> activationDescs(const Shape& x, int64_t xb, const Shape& y, int64_t yb,
                                                      memory::data_type xt = memory::data_type::f32,
                                                      memory::data_type yt = memory::data_type::f32);

/// Whether c is depthwise: one group per channel, as many outputs as inputs.
bool isDepthwise(const ConvConfig& c);

}  // namespace graft::backends::cpu::onednn
