// 1x1 convolutions on AVX2 hosts (conv1x1_avx2.cpp; GRAFT_CONV_1X1): through a session, as a user
// runs one. On an AVX2 host without AVX-512 (or under GRAFT_CPU_ISA=avx2) a 1x1 stride-1
// convolution of a graph in 8-channel blocks runs on graft's kernel, and with GRAFT_CONV_1X1=off on
// oneDNN's; both agree to float32 accuracy; elsewhere oneDNN's runs either way; a bad value of the
// variable is refused by name on every host.
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

constexpr int64_t kN = 2, kC = 48, kM = 100, kH = 9;

struct ConvRun {
  std::string kernels;  ///< the convolutions' kernels, from the profile
  std::vector<float> y;
};

// Conv 3x3 (so that the graph is a convolution graph) then Conv 1x1 (C -> M, bias) and Relu,
// under GRAFT_CONV_1X1=mode ("" unset).
ConvRun run(const char* mode) {
  if (*mode)
    setenv("GRAFT_CONV_1X1", mode, 1);
  else
    unsetenv("GRAFT_CONV_1X1");
  struct Unset {
    ~Unset() { unsetenv("GRAFT_CONV_1X1"); }
  } unset;
  Builder b;
  TensorId x = b.addInputTensor(TensorInfo(DataType::Float, Shape{kN, kC, kH, kH}), "x");
  TensorId w0 =
      b.addInitializedInputTensor(fromVec(randomVec(static_cast<size_t>(kC * kC * 9), 1, 0.1f), {kC, kC, 3, 3}), "w0");
  TensorId w1 =
      b.addInitializedInputTensor(fromVec(randomVec(static_cast<size_t>(kM * kC), 2, 0.1f), {kM, kC, 1, 1}), "w1");
  TensorId b1 = b.addInitializedInputTensor(fromVec(randomVec(size_t{kM}, 3), {kM}), "b1");
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

TEST(Conv1x1, RunsOnGraftsKernelOnAvx2Hosts) {
  ConvRun on = run(""), off = run("off");
  const bool graft = on.kernels.find("conv1x1_avx2") != std::string::npos;
  EXPECT_EQ(graft, avx2Class()) << on.kernels;
  EXPECT_EQ(off.kernels.find("conv1x1_avx2"), std::string::npos) << off.kernels;
  ASSERT_EQ(on.y.size(), off.y.size());
  double err = 0, mag = 0;
  for (size_t i = 0; i < on.y.size(); ++i) {
    err = std::max(err, double(std::fabs(on.y[i] - off.y[i])));
    mag = std::max(mag, double(std::fabs(off.y[i])));
  }
  EXPECT_GT(mag, 0.0);
  EXPECT_LT(err / mag, 1e-5);
}

TEST(Conv1x1, RefusesAnUnknownMode) {
  try {
    run("sideways");
    FAIL() << "GRAFT_CONV_1X1=sideways was accepted";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("GRAFT_CONV_1X1: expected off, auto or on, got 'sideways'"), std::string::npos)
        << e.what();
  }
}

}  // namespace
}  // namespace graft
