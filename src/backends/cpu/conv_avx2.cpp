// What graft's own convolution kernels share (conv_avx2.hpp).
#include "backends/cpu/conv_avx2.hpp"

#include <cstring>

#include "backends/cpu/bf16.hpp"
#include "backends/cpu/fused_activation.hpp"
#include "backends/cpu/sgemm_avx2.hpp"
#include "ops/registry.hpp"

namespace graft::backends::cpu {

std::optional<onednn::ConvConfig> ownConv(const ir::Node& n) {
  if (n.domain() != ops::kGraftDomain) return std::nullopt;
  if (!n.attrString("activation", "").empty() && !isPlainRelu(n)) return std::nullopt;
  auto cfg = onednn::convConfig(n);
  if (!cfg || cfg->x.size() != 4 || cfg->group != 1 || n.input(1)->kind() != ir::TensorKind::Constant)
    return std::nullopt;
  return cfg;
}

std::optional<onednn::ConvConfig> ownFloatConv(const ir::Node& n) {
  if (bf16Compute()) return std::nullopt;
  auto cfg = ownConv(n);
  if (!cfg || cfg->xType != onednn::memory::data_type::f32 || cfg->yType != onednn::memory::data_type::f32)
    return std::nullopt;
  return cfg;
}

std::optional<onednn::ConvConfig> avx2BlockedConv(const ir::Node& n) {
  if (!sgemm::available()) return std::nullopt;
  auto cfg = ownFloatConv(n);
  constexpr int kBlock = 8;
  if (!cfg || cfg->xBlock != kBlock || cfg->yBlock != kBlock) return std::nullopt;
  return cfg;
}

bool isPointwiseWindow(const onednn::ConvConfig& c) {
  return c.w[2] == 1 && c.w[3] == 1 && c.win.strides == onednn::Dims{1, 1} && c.win.padBegin == onednn::Dims{0, 0} &&
         c.win.padEnd == onednn::Dims{0, 0};
}

std::optional<WinogradPlane> winogradPlane(const onednn::ConvConfig& c) {
  if (c.w[2] != 3 || c.w[3] != 3 || c.win.strides != onednn::Dims{1, 1} || c.win.dilation != onednn::Dims{0, 0})
    return std::nullopt;
  WinogradPlane p;
  p.N = c.x[0];
  p.C = c.x[1];
  p.H = c.x[2];
  p.W = c.x[3];
  p.M = c.y[1];
  p.OH = c.y[2];
  p.OW = c.y[3];
  p.padT = c.win.padBegin[0];
  p.padL = c.win.padBegin[1];
  if (p.OH < 1 || p.OW < 1 || p.padT < 0 || p.padL < 0) return std::nullopt;
  return p;
}

ConvEpilogue convEpilogue(const ir::Node& n) {
  ConvEpilogue e;
  e.yShape = n.output(0)->info().shape();
  e.bias = n.hasInput(2);
  e.sum = n.numInputs() > 3 && n.hasInput(3);
  e.relu = isPlainRelu(n);
  return e;
}

NDArray& convOutput(const ConvEpilogue& e, ops::KernelContext& k) {
  NDArray& y = k.allocOutputUninit(0, DataType::Float, e.yShape);
  if (e.sum && y.rawData() != k.input(3).rawData()) std::memcpy(y.rawData(), k.input(3).rawData(), y.nbytes());
  return y;
}

}  // namespace graft::backends::cpu
