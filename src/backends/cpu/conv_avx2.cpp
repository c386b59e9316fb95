// What graft's own convolution kernels share (conv_avx2.hpp).
#include "backends/cpu/conv_avx2.hpp"

#include <cstring>

#include "backends/cpu/bf16.hpp"
#include "backends/cpu/fused_activation.hpp"
#include "backends/cpu/sgemm_avx2.hpp"
#include "ops/registry.hpp"

namespace graft::backends::cpu {

std::optional<onednn::ConvConfig> ownFloatConv(const ir::Node& n) {
  if (n.domain() != ops::kGraftDomain || bf16Compute()) return std::nullopt;
  if (!n.attrString("activation", "").empty() && !isPlainRelu(n)) return std::nullopt;
  auto cfg = onednn::convConfig(n);
  if (!cfg) return std::nullopt;
  const onednn::ConvConfig& c = *cfg;
  if (c.x.size() != 4 || c.group != 1 || c.xType != onednn::memory::data_type::f32 ||
      c.yType != onednn::memory::data_type::f32 || n.input(1)->kind() != ir::TensorKind::Constant)
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
