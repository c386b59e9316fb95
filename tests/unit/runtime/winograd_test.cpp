// Winograd convolutions (GRAFT_CONV_WINOGRAD; onednn_conv.cpp, wantsWinograd): through a session,
// as a user runs one. A 3x3 convolution of stride 1 runs on oneDNN's Winograd kernel on AVX-512
// hosts where it gains on that host's class (auto, the default; the rule's own test covers both), never with "off" or
// under enableBf16, wherever oneDNN has it with "on"; its results match the direct convolution's to float32 accuracy; a
// bad value of the variable is refused by name.
#include <gtest/gtest.h>

#include <graft/builder.hpp>
#include <graft/graft.hpp>

#include <cmath>
#include <cstdlib>

#include "../unit_test_util.hpp"
#include "backends/cpu/onednn_common.hpp"
#include "support/cpu_features.hpp"

namespace graft {
namespace {

using testing::fromVec;
using testing::randomVec;

constexpr int64_t kC = 64, kH = 56;

// Conv 3x3 (64 -> 64, pads 1, bias) then Relu on x [batch, 64, 56, 56].
std::string convModel(int64_t batch, TensorId& out) {
  Builder b;
  TensorId x = b.addInputTensor(TensorInfo(DataType::Float, Shape{batch, kC, kH, kH}), "x");
  TensorId w = b.addInitializedInputTensor(fromVec(randomVec(size_t{kC * kC * 9}, 1, 0.05f), {kC, kC, 3, 3}), "w");
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

// Runs the model under GRAFT_CONV_WINOGRAD=mode ("" unset).
ConvRun run(int64_t batch, const char* mode, bool bf16 = false) {
  if (*mode)
    setenv("GRAFT_CONV_WINOGRAD", mode, 1);
  else
    unsetenv("GRAFT_CONV_WINOGRAD");
  struct Unset {
    ~Unset() { unsetenv("GRAFT_CONV_WINOGRAD"); }
  } unset;
  TensorId y;
  std::string model = convModel(batch, y);
  SessionOptions o;
  o.numThreads = 2;
  o.enableProfiling = true;
  o.enableBf16 = bf16;
  auto s = InferenceSession::createFromOnnxModel(model, DataFlow(1, std::vector<TensorId>{y}),
                                                 DeviceManager::createDeviceManager().createCpuDevice(), {}, o);
  s->prepareDevice();
  auto anchors = s->initAnchorArrays();
  std::vector<float> xv = randomVec(static_cast<size_t>(batch * kC * kH * kH), 3);
  StepIO io({{"x", NDArray::wrap(xv.data(), DataType::Float, {batch, kC, kH, kH})}}, anchors);
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

TEST(Winograd, TakesLargeConvolutionsOnAvx512Hosts) {
  ConvRun big = run(2, ""), small = run(1, ""), off = run(2, "off");
  EXPECT_FALSE(winograd(off)) << off.kernel;
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
  // Half-rate AVX-512: every size.
  EXPECT_TRUE(winogradGains(64, Dims{1, 64, 56, 56}, true));
  EXPECT_TRUE(winogradGains(512, Dims{1, 512, 7, 7}, true));
  EXPECT_TRUE(winogradGains(64, Dims{1, 256, 13, 13}, true));
  // Fewer than 64 input channels: neither.
  for (bool half : {false, true}) {
    EXPECT_FALSE(winogradGains(32, Dims{8, 32, 56, 56}, half));
    EXPECT_FALSE(winogradGains(16, Dims{8, 64, 55, 55}, half));
  }
}

TEST(Winograd, OnRunsItWhereverOneDnnHasIt) {
  if (!support::cpuFeatures().avx512f)
    GTEST_SKIP() << "oneDNN's Winograd convolutions need AVX-512, which this host (below GRAFT_CPU_ISA) lacks";
  ConvRun on = run(1, "on"), off = run(1, "off");
  EXPECT_TRUE(winograd(on)) << on.kernel;
  EXPECT_FALSE(winograd(off)) << off.kernel;
  EXPECT_LT(relError(on.y, off.y), 1e-5);
}

TEST(Winograd, Bf16SessionsKeepTheirBf16Convolutions) {
  if (!support::cpuFeatures().avx512bf16)
    GTEST_SKIP() << "SessionOptions.enableBf16 needs avx512_bf16, which this host (below GRAFT_CPU_ISA) lacks";
  ConvRun r = run(2, "on", /*bf16=*/true);
  EXPECT_FALSE(winograd(r)) << r.kernel;
  EXPECT_NE(r.kernel.find(", bf16)"), std::string::npos) << r.kernel;
}

TEST(Winograd, RefusesAnUnknownMode) {
  try {
    run(1, "sideways");
    FAIL() << "GRAFT_CONV_WINOGRAD=sideways was accepted";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("GRAFT_CONV_WINOGRAD: expected off, auto or on, got 'sideways'"),
              std::string::npos)
        << e.what();
  }
}

}  // namespace
}  // namespace graft
