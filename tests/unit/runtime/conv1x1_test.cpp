// graft's 1x1 convolutions (conv1x1_avx2.cpp, conv1x1_avx512.cpp; GRAFT_CONV_1X1,
// GRAFT_CONV_1X1_STREAM): through a session, as a user runs one. On an AVX2 host without AVX-512
// (or under GRAFT_CPU_ISA=avx2) a 1x1 stride-1 convolution of a graph in 8-channel blocks runs on
// conv1x1_avx2; on an AVX-512 host one of at most 64 inputs into a multiple of 16 outputs (at least
// 48) runs on conv1x1_avx512; either kernel stores its output through the caches or streams it, to
// the same bits; with GRAFT_CONV_1X1=off both run on oneDNN's, and agree with graft's to float32
// accuracy; a bad value of either variable is refused by name on every host.
#include <gtest/gtest.h>

#include <graft/builder.hpp>
#include <graft/graft.hpp>

#include <cmath>
#include <cstdlib>

#include "../unit_test_util.hpp"
#include "support/cpu_features.hpp"

namespace graft {
namespace {

using testing::fromVec;
using testing::randomVec;

constexpr int64_t kN = 2, kC = 48, kH = 9;

struct ConvRun {
  std::string kernels;  ///< the convolutions' kernels, from the profile
  std::vector<float> y;
};

// Conv 3x3 (so that the graph is a convolution graph) then Conv 1x1 (C -> M, bias) and Relu,
// under GRAFT_CONV_1X1=mode and GRAFT_CONV_1X1_STREAM=stream ("" unset).
ConvRun run(const char* mode, int64_t outputs = 100, const char* stream = "") {
  auto set = [](const char* name, const char* value) {
    if (*value)
      setenv(name, value, 1);
    else
      unsetenv(name);
  };
  set("GRAFT_CONV_1X1", mode);
  set("GRAFT_CONV_1X1_STREAM", stream);
  struct Unset {
    ~Unset() {
      unsetenv("GRAFT_CONV_1X1");
      unsetenv("GRAFT_CONV_1X1_STREAM");
    }
  } unset;
  Builder b;
  TensorId x = b.addInputTensor(TensorInfo(DataType::Float, Shape{kN, kC, kH, kH}), "x");
  TensorId w0 =
      b.addInitializedInputTensor(fromVec(randomVec(static_cast<size_t>(kC * kC * 9), 1, 0.1f), {kC, kC, 3, 3}), "w0");
  TensorId w1 = b.addInitializedInputTensor(
      fromVec(randomVec(static_cast<size_t>(outputs * kC), 2, 0.1f), {outputs, kC, 1, 1}), "w1");
  TensorId b1 = b.addInitializedInputTensor(fromVec(randomVec(static_cast<size_t>(outputs), 3), {outputs}), "b1");
  TensorId c0 = b.addOp("Conv", "", 17, {x, w0}, {{"pads", std::vector<int64_t>{1, 1, 1, 1}}}).at(0);
  TensorId r0 = b.addOp("Relu", "", 17, {c0}).at(0);
  TensorId c1 = b.addOp("Conv", "", 17, {r0, w1, b1}).at(0);
  TensorId y = b.addOp("Relu", "", 17, {c1}).at(0);
  b.addOutputTensor(y);
  SessionOptions o;
  o.numThreads = 2;
  o.enableProfiling = true;
  auto s = InferenceSession::createFromOnnxModel(b.getModelProto(), DataFlow(1, std::vector<TensorId>{y}),
                                                 DeviceManager::createDeviceManager().createCpuDevice(), {}, o);
  s->prepareDevice();
  auto anchors = s->initAnchorArrays();
  std::vector<float> xv = randomVec(static_cast<size_t>(kN * kC * kH * kH), 4);
  StepIO io({{"x", NDArray::wrap(xv.data(), DataType::Float, {kN, kC, kH, kH})}}, anchors);
  s->run(io);
  ConvRun r;
  for (const OpProfile& p : s->profile())
    if (p.opType == "FusedConv" || p.opType == "Conv")
      for (const std::string& k : p.kernels) r.kernels += k + ";";
  const NDArray& a = anchors.at(y);
  r.y.assign(a.data<float>(), a.data<float>() + a.numel());
  return r;
}

bool avx2Class() {
  const support::CpuFeatures& f = support::cpuFeatures();
  return !f.avx512f && f.avx2 && f.fma;
}

// The largest difference between a and b, relative to b's largest magnitude (which must be > 0).
double relativeDifference(const std::vector<float>& a, const std::vector<float>& b) {
  EXPECT_EQ(a.size(), b.size());
  double err = 0, mag = 0;
  for (size_t i = 0; i < a.size() && i < b.size(); ++i) {
    err = std::max(err, double(std::fabs(a[i] - b[i])));
    mag = std::max(mag, double(std::fabs(b[i])));
  }
  EXPECT_GT(mag, 0.0);
  return err / mag;
}

TEST(Conv1x1, RunsOnGraftsKernelOnAvx2Hosts) {
  ConvRun on = run(""), off = run("off");
  const bool graft = on.kernels.find("conv1x1_avx2") != std::string::npos;
  EXPECT_EQ(graft, avx2Class()) << on.kernels;
  EXPECT_EQ(off.kernels.find("conv1x1_avx2"), std::string::npos) << off.kernels;
  EXPECT_LT(relativeDifference(on.y, off.y), 1e-5);
}

TEST(Conv1x1, RunsOnGraftsKernelOnAvx512Hosts) {
  // 48 -> 96: within conv1x1_avx512's rule; 48 -> 100 (no whole vectors of outputs) is not.
  ConvRun on = run("", 96), off = run("off", 96), odd = run("", 100);
  const bool avx512 = support::cpuFeatures().avx512f;
  EXPECT_EQ(on.kernels.find("conv1x1_avx512") != std::string::npos, avx512) << on.kernels;
  EXPECT_EQ(off.kernels.find("conv1x1_avx512"), std::string::npos) << off.kernels;
  EXPECT_EQ(odd.kernels.find("conv1x1_avx512"), std::string::npos) << odd.kernels;
  EXPECT_LT(relativeDifference(on.y, off.y), 1e-5);
}

TEST(Conv1x1, StreamedOutputIsTheCachedOutput) {
  // The same sums, stored through the caches or around them.
  ConvRun streamed = run("on", 96, "on"), cached = run("on", 96, "off"), off = run("off", 96);
  // conv1x1_avx2 on AVX2 hosts (and under GRAFT_CPU_ISA=avx2), conv1x1_avx512 on AVX-512 ones.
  if (avx2Class() || support::cpuFeatures().avx512f)
    EXPECT_NE(streamed.kernels.find("conv1x1_avx"), std::string::npos) << streamed.kernels;
  EXPECT_EQ(streamed.y, cached.y);
  EXPECT_LT(relativeDifference(streamed.y, off.y), 1e-5);
}

TEST(Conv1x1, RefusesAnUnknownMode) {
  const std::string error = testing::errorOf([] { run("sideways"); });
  EXPECT_NE(error.find("GRAFT_CONV_1X1: expected off, auto or on, got 'sideways'"), std::string::npos)
      << "GRAFT_CONV_1X1=sideways: " << error;
  // The streaming switch is read wherever conv1x1_avx512 compiles a convolution (AVX-512 hosts).
  if (!support::cpuFeatures().avx512f) return;
  const std::string streamError = testing::errorOf([] { run("", 96, "always"); });
  EXPECT_NE(streamError.find("GRAFT_CONV_1X1_STREAM: expected off, auto or on, got 'always'"), std::string::npos)
      << "GRAFT_CONV_1X1_STREAM=always: " << streamError;
}

}  // namespace
}  // namespace graft
