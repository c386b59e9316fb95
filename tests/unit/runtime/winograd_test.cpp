// Winograd convolutions (GRAFT_CONV_WINOGRAD; onednn_conv.cpp, wantsWinograd; winograd_avx2.cpp):
// through a session, as a user runs one. A 3x3 convolution of stride 1 runs on oneDNN's Winograd
// kernel on AVX-512 hosts and on graft's own (winograd_avx2) on AVX2 hosts where it gains on that
// host's class (auto, the default; the rules' own tests cover every class), never with "off",
// wherever a kernel has it with "on"; its results match the direct convolution's to float32
// accuracy; a bad value of the variable is refused by name. bf16 sessions run graft's bf16 kernel
// (winograd_bf16) where it gains on the host's class, oneDNN's direct bf16 convolution otherwise.
#include <gtest/gtest.h>

#include <graft/builder.hpp>
#include <graft/graft.hpp>

#include <cmath>
#include <cstdlib>

#include "../unit_test_util.hpp"
#include "backends/cpu/onednn_common.hpp"
#include "backends/cpu/winograd_avx2.hpp"
#include "backends/cpu/winograd_bf16.hpp"
#include "support/cpu_features.hpp"

namespace graft {
namespace {

using testing::fromVec;
using testing::randomVec;

constexpr int64_t kC = 64, kH = 56;

// Conv 3x3 (C -> 64, pads 1, bias) then Relu on x [batch, C, 56, 56].
std::string convModel(int64_t batch, TensorId& out, int64_t C = kC) {
  Builder b;
  TensorId x = b.addInputTensor(TensorInfo(DataType::Float, Shape{batch, C, kH, kH}), "x");
  TensorId w =
      b.addInitializedInputTensor(fromVec(randomVec(static_cast<size_t>(kC * C * 9), 1, 0.05f), {kC, C, 3, 3}), "w");
  TensorId bias = b.addInitializedInputTensor(fromVec(randomVec(size_t{kC}, 2), {kC}), "b");
  TensorId c = b.addOp("Conv", "", 17, {x, w, bias}, {{"pads", std::vector<int64_t>{1, 1, 1, 1}}}).at(0);
  TensorId y = b.addOp("Relu", "", 17, {c}).at(0);
  b.addOutputTensor(y);
  out = y;
  return b.getModelProto();
}

struct ConvRun {
  std::string kernel;  ///< the convolution's kernel and implementation, from the profile
  std::vector<float> y;
};

// Runs the model (C input channels) under GRAFT_CONV_WINOGRAD=mode ("" unset).
ConvRun run(int64_t batch, const char* mode, bool bf16 = false, int64_t C = kC) {
  if (*mode)
    setenv("GRAFT_CONV_WINOGRAD", mode, 1);
  else
    unsetenv("GRAFT_CONV_WINOGRAD");
  struct Unset {
    ~Unset() { unsetenv("GRAFT_CONV_WINOGRAD"); }
  } unset;
  TensorId y;
  std::string model = convModel(batch, y, C);
  SessionOptions o;
  o.numThreads = 2;
  o.enableProfiling = true;
  o.enableBf16 = bf16;
  auto s = InferenceSession::createFromOnnxModel(model, DataFlow(1, std::vector<TensorId>{y}),
                                                 DeviceManager::createDeviceManager().createCpuDevice(), {}, o);
  s->prepareDevice();
  auto anchors = s->initAnchorArrays();
  std::vector<float> xv = randomVec(static_cast<size_t>(batch * C * kH * kH), 3);
  StepIO io({{"x", NDArray::wrap(xv.data(), DataType::Float, {batch, C, kH, kH})}}, anchors);
  s->run(io);
  ConvRun r;
  for (const OpProfile& p : s->profile())
    if (p.opType == "FusedConv" || p.opType == "Conv")
      for (const std::string& k : p.kernels) r.kernel += k;
  const NDArray& a = anchors.at(y);
  r.y.assign(a.data<float>(), a.data<float>() + a.numel());
  return r;
}

bool winograd(const ConvRun& r) { return r.kernel.find("wino") != std::string::npos; }

// max |a - b| / max |b|
double relError(const std::vector<float>& a, const std::vector<float>& b) {
  double err = 0, mag = 0;
  for (size_t i = 0; i < b.size(); ++i) {
    err = std::max(err, double(std::fabs(a[i] - b[i])));
    mag = std::max(mag, double(std::fabs(b[i])));
  }
  return err / mag;
}

// An AVX2 host without AVX-512 (or one capped by GRAFT_CPU_ISA=avx2): graft's own kernel.
bool avx2Class() {
  const support::CpuFeatures& f = support::cpuFeatures();
  return !f.avx512f && f.avx2 && f.fma;
}

TEST(Winograd, TakesConvolutionsWhereTheHostClassGains) {
  ConvRun big = run(2, ""), small = run(1, ""), off = run(2, "off");
  EXPECT_FALSE(winograd(off)) << off.kernel;
  if (avx2Class()) {
    // 64 input channels and 14 x 14 tiles of 4 x 4 outputs an image: both take graft's kernel.
    for (const ConvRun* r : {&big, &small}) EXPECT_NE(r->kernel.find("winograd_avx2"), std::string::npos) << r->kernel;
    double e = relError(big.y, off.y);
    EXPECT_GT(e, 0.0) << "Winograd's transforms round differently from the direct sums";
    EXPECT_LT(e, 1e-5);
    return;
  }
  // 1 x 64 x 56 x 56: 0.23 GFLOP of direct work, below the 0.4 where Winograd starts to gain on
  // full-rate AVX-512 hosts; half-rate ones take it.
  EXPECT_EQ(winograd(small), support::cpuFeatures().avx512HalfRate) << small.kernel;
  if (!support::cpuFeatures().avx512f) {
    EXPECT_FALSE(winograd(big)) << "oneDNN has Winograd convolutions for AVX-512 only: " << big.kernel;
    return;
  }
  EXPECT_TRUE(winograd(big)) << big.kernel;
  ASSERT_EQ(big.y.size(), off.y.size());
  double e = relError(big.y, off.y);
  EXPECT_GT(e, 0.0) << "Winograd's transforms round differently from the direct sums";
  EXPECT_LT(e, 1e-5);
}

// The rule itself, for both host classes whatever this host is.
TEST(Winograd, AutoRuleByHostClass) {
  using backends::cpu::onednn::winogradGains;
  using Dims = std::vector<int64_t>;
  // Full-rate AVX-512: at least 0.4 GFLOP of direct work and 14x14 outputs.
  EXPECT_FALSE(winogradGains(64, Dims{1, 64, 56, 56}, false));  // 0.23 GFLOP
  EXPECT_TRUE(winogradGains(64, Dims{2, 64, 56, 56}, false));   // 0.46 GFLOP
  EXPECT_FALSE(winogradGains(512, Dims{8, 512, 7, 7}, false));  // 7x7
  EXPECT_TRUE(winogradGains(256, Dims{8, 256, 14, 14}, false));
  // Half-rate AVX-512: at least 0.1 GFLOP, any side (every resnet layer, 0.23 GFLOP at batch 1).
  EXPECT_TRUE(winogradGains(64, Dims{1, 64, 56, 56}, true));
  EXPECT_TRUE(winogradGains(512, Dims{1, 512, 7, 7}, true));
  EXPECT_TRUE(winogradGains(64, Dims{8, 256, 13, 13}, true));   // 0.40
  EXPECT_FALSE(winogradGains(64, Dims{1, 256, 13, 13}, true));  // 0.05
  // Fewer than 64 input channels: on full-rate hosts none; on half-rate ones from 16 channels, by
  // the same work (squeezenet1_1's expand3x3 at batch 8, not at batch 1).
  EXPECT_FALSE(winogradGains(32, Dims{8, 32, 56, 56}, false));
  EXPECT_FALSE(winogradGains(16, Dims{8, 64, 55, 55}, false));
  EXPECT_TRUE(winogradGains(16, Dims{8, 64, 55, 55}, true));    // 0.45 GFLOP
  EXPECT_TRUE(winogradGains(48, Dims{8, 192, 13, 13}, true));   // 0.22
  EXPECT_FALSE(winogradGains(16, Dims{1, 64, 55, 55}, true));   // 0.06
  EXPECT_FALSE(winogradGains(48, Dims{1, 192, 13, 13}, true));  // 0.03
  EXPECT_FALSE(winogradGains(8, Dims{8, 256, 56, 56}, true));   // fewer than 16 channels
}

// graft's AVX2 kernel (winograd_avx2): from 32 input channels and 8 tiles of 4 x 4 outputs, 32
// where the transformed weights pass 4 MB.
TEST(Winograd, Avx2RuleByShape) {
  using backends::cpu::winograd::winogradAvx2Gains;
  using Dims = std::vector<int64_t>;
  EXPECT_TRUE(winogradAvx2Gains(64, Dims{1, 64, 56, 56}));    // resnet's first stage
  EXPECT_TRUE(winogradAvx2Gains(128, Dims{1, 128, 28, 28}));  // 49 tiles, U 2.4 MB
  EXPECT_TRUE(winogradAvx2Gains(64, Dims{1, 256, 13, 13}));   // 16 tiles, U 2.4 MB
  // U past 4 MB (9.4 MB at 256 x 256, 37 MB at 512 x 512): from 16 tiles.
  EXPECT_TRUE(winogradAvx2Gains(256, Dims{1, 256, 14, 14}));   // 16 tiles
  EXPECT_FALSE(winogradAvx2Gains(256, Dims{1, 256, 12, 12}));  // 9 tiles: past kMinTiles, below 16
  EXPECT_FALSE(winogradAvx2Gains(256, Dims{1, 256, 7, 7}));    // 4 tiles
  EXPECT_TRUE(winogradAvx2Gains(256, Dims{8, 256, 14, 14}));   // 128 tiles
  EXPECT_TRUE(winogradAvx2Gains(512, Dims{8, 512, 7, 7}));     // 32 tiles
  EXPECT_FALSE(winogradAvx2Gains(512, Dims{1, 512, 7, 7}));    // 4 tiles
  EXPECT_TRUE(winogradAvx2Gains(32, Dims{1, 128, 27, 27}));    // squeezenet1_1's expand3x3
  EXPECT_FALSE(winogradAvx2Gains(16, Dims{8, 64, 55, 55}));    // 16 channels: the transforms cost more
  EXPECT_FALSE(winogradAvx2Gains(64, Dims{1, 64, 5, 5}));      // 4 tiles
}

TEST(Winograd, FewInputChannelsStayDirectOnAvx2Hosts) {
  if (!avx2Class()) GTEST_SKIP() << "winograd_avx2 runs on AVX2 hosts without AVX-512 (or under GRAFT_CPU_ISA=avx2)";
  ConvRun r = run(8, "", false, 16);
  EXPECT_FALSE(winograd(r)) << r.kernel;
  ConvRun on = run(1, "on", false, 16), off = run(1, "off", false, 16);
  EXPECT_NE(on.kernel.find("winograd_avx2"), std::string::npos) << on.kernel;
  EXPECT_LT(relError(on.y, off.y), 1e-5);
}

// 16 input channels: channels last and 16-channel blocks are the same bytes there, and the
// cpu-layout pass asks oneDNN for the blocked form (it left these direct while it asked with the
// channels-last tag, which the Winograd kernel does not take).
TEST(Winograd, SixteenChannelInputsTakeItWhereTheRuleSays) {
  if (!support::cpuFeatures().avx512HalfRate)
    GTEST_SKIP() << "the rule takes 16-channel inputs on half-rate AVX-512 hosts only (this host: "
                 << (support::cpuFeatures().avx512f ? "full-rate AVX-512" : "no AVX-512") << ")";
  ConvRun big = run(8, "", false, 16), small = run(1, "", false, 16), off = run(8, "off", false, 16);
  EXPECT_TRUE(winograd(big)) << big.kernel;       // 0.46 GFLOP
  EXPECT_FALSE(winograd(small)) << small.kernel;  // 0.06
  EXPECT_LT(relError(big.y, off.y), 1e-5);
}

TEST(Winograd, OnRunsItWhereverAKernelHasIt) {
  if (!support::cpuFeatures().avx512f && !avx2Class())
    GTEST_SKIP() << "the Winograd kernels need AVX-512 (oneDNN's) or AVX2 and FMA (graft's), which this host "
                    "(below GRAFT_CPU_ISA) lacks";
  ConvRun on = run(1, "on"), off = run(1, "off");
  EXPECT_TRUE(winograd(on)) << on.kernel;
  EXPECT_FALSE(winograd(off)) << off.kernel;
  EXPECT_LT(relError(on.y, off.y), 1e-5);
}

// bf16 sessions: graft's bf16 F(2x2, 3x3) kernel (winograd_bf16) where it gains on the host's
// class, oneDNN's direct bf16 convolution otherwise; never float32 Winograd. Its results are as
// close to float32's as the direct bf16 convolution's (the transformed tiles rounded to bf16).
TEST(Winograd, Bf16SessionsTakeGraftsBf16KernelWhereItGains) {
  if (!support::cpuFeatures().avx512bf16)
    GTEST_SKIP() << "SessionOptions.enableBf16 needs avx512_bf16, which this host (below GRAFT_CPU_ISA) lacks";
  ConvRun on = run(2, "on", /*bf16=*/true), off = run(2, "off", true), byRule = run(2, "", true);
  ConvRun f32 = run(2, "off");
  EXPECT_NE(on.kernel.find("winograd_bf16"), std::string::npos) << on.kernel;
  EXPECT_NE(on.kernel.find(", bf16)"), std::string::npos) << on.kernel;
  EXPECT_FALSE(winograd(off)) << off.kernel;
  EXPECT_NE(off.kernel.find(", bf16)"), std::string::npos) << off.kernel;
  // 64 input channels: the rule takes it on half-rate AVX-512 hosts.
  EXPECT_EQ(byRule.kernel.find("winograd_bf16") != std::string::npos, support::cpuFeatures().avx512HalfRate)
      << byRule.kernel;
  const double eWinograd = relError(on.y, f32.y), eDirect = relError(off.y, f32.y);
  EXPECT_GT(eWinograd, 1e-4) << "bf16 did not run";
  EXPECT_LT(eWinograd, 2e-2);
  EXPECT_LT(eWinograd, 3 * eDirect) << "direct bf16: " << eDirect;
}

// winograd_bf16's rule, for both host classes whatever this host is: on half-rate AVX-512 hosts
// from 32 input channels; not on full-rate ones (not measured there).
TEST(Winograd, Bf16RuleByHostClass) {
  using backends::cpu::winograd::winogradBf16Gains;
  using Dims = std::vector<int64_t>;
  EXPECT_TRUE(winogradBf16Gains(64, Dims{1, 64, 56, 56}, true));
  EXPECT_TRUE(winogradBf16Gains(512, Dims{8, 512, 7, 7}, true));
  EXPECT_TRUE(winogradBf16Gains(32, Dims{8, 128, 27, 27}, true));  // squeezenet1_1's expand3x3
  EXPECT_FALSE(winogradBf16Gains(16, Dims{8, 64, 55, 55}, true));  // 16 channels: the transforms cost more
  EXPECT_FALSE(winogradBf16Gains(256, Dims{8, 256, 14, 14}, false));
}

TEST(Winograd, RefusesAnUnknownMode) {
  const std::string error = testing::errorOf([] { run(1, "sideways"); });
  EXPECT_NE(error.find("GRAFT_CONV_WINOGRAD: expected off, auto or on, got 'sideways'"), std::string::npos)
      << "GRAFT_CONV_WINOGRAD=sideways: " << error;
}

}  // namespace
}  // namespace graft
