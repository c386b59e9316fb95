// The cpu-conv-chains pass's suite: convolution chains (GRAFT_CONV_CHAINS; the pass and the FusedConvChain kernel,
// onednn_conv_chain.cpp) through a session, as a user runs one: mobilenet_v2's inverted residual
// block (1x1 expansion, Clip, depthwise 3x3, Clip, 1x1 projection, + the block's input) becomes one
// FusedConvChain where its expanded activation is large (auto, the default), every eligible chain
// with "on", none with "off"; the results equal the node-by-node ones and the reference device's;
// a stem and the depthwise convolution after it join too (two spatial stages); an anchored
// intermediate stays a tensor; a bad value of the variable is refused by name. The
// activations are channels last on every host here (GRAFT_CPU_LAYOUT=nhwc): chains take those only.
#include <gtest/gtest.h>

#include <graft/builder.hpp>
#include <graft/graft.hpp>

#include <cmath>
#include <cstdlib>

#include "../unit_test_util.hpp"
#include "support/cpu_features.hpp"

namespace graft {
namespace {

using testing::errorOf;
using testing::fromVec;
using testing::randomVec;

constexpr int64_t kC = 16, kE = 96;

struct Block {
  TensorId out, depthwise;  ///< the block's output and its depthwise convolution's (after Clip)
};

// x [N, 16, H, W] -> Conv 1x1 16->96, Clip(0, 6) -> Conv 3x3 depthwise, Clip(0, 6) -> Conv 1x1
// 96->16 -> + x.
Block invertedResidual(Builder& b, TensorId x, uint64_t seed) {
  auto init = [&](size_t n, Shape s, float scale) {
    return b.addInitializedInputTensor(fromVec(randomVec(n, seed++, scale), std::move(s)));
  };
  TensorId lo = b.addInitializedInputTensor(fromVec({0.f}, {}));
  TensorId hi = b.addInitializedInputTensor(fromVec({6.f}, {}));
  TensorId w1 = init(size_t{kE * kC}, {kE, kC, 1, 1}, 0.3f), b1 = init(size_t{kE}, {kE}, 0.5f);
  TensorId w2 = init(size_t{kE * 9}, {kE, 1, 3, 3}, 0.3f), b2 = init(size_t{kE}, {kE}, 0.5f);
  TensorId w3 = init(size_t{kC * kE}, {kC, kE, 1, 1}, 0.2f), b3 = init(size_t{kC}, {kC}, 0.5f);
  TensorId e = b.addOp("Conv", "", 17, {x, w1, b1}).at(0);
  e = b.addOp("Clip", "", 17, {e, lo, hi}).at(0);
  TensorId d =
      b.addOp("Conv", "", 17, {e, w2, b2},
              {{"group", kE}, {"pads", std::vector<int64_t>{1, 1, 1, 1}}, {"kernel_shape", std::vector<int64_t>{3, 3}}})
          .at(0);
  d = b.addOp("Clip", "", 17, {d, lo, hi}).at(0);
  TensorId p = b.addOp("Conv", "", 17, {d, w3, b3}).at(0);
  return {b.addOp("Add", "", 17, {p, x}).at(0), d};
}

struct ChainRun {
  int64_t chainCalls = 0, convCalls = 0;
  std::string chainKernels;
  std::vector<float> y;
};

class CpuConvChains : public ::testing::Test {
 protected:
  void SetUp() override { setenv("GRAFT_CPU_LAYOUT", "nhwc", 1); }
  void TearDown() override {
    unsetenv("GRAFT_CPU_LAYOUT");
    unsetenv("GRAFT_CONV_CHAINS");
  }

  // A large block (96 x 48 x 64 floats = 1.2 MB an image expanded) then a small one (96 x 24 x 32,
  // 0.3 MB; after a 2x2 max pool), batch 2, under GRAFT_CONV_CHAINS=mode ("" unset), on `device`;
  // `anchorDepthwise`: the large block's depthwise output is an anchor too.
  // GRAFT_CONV_CHAINS=mode ("" unset; TearDown unsets it).
  static void setMode(const char* mode) {
    if (*mode)
      setenv("GRAFT_CONV_CHAINS", mode, 1);
    else
      unsetenv("GRAFT_CONV_CHAINS");
  }

  // One step of `model` on `device` with x (shape xShape) drawn from `seed`: the chain and
  // convolution calls and kernels from the profile, and anchor `out`.
  static ChainRun runModel(const std::string& model, const std::vector<TensorId>& anchors, const TensorId& out,
                           const Shape& xShape, uint64_t seed, std::shared_ptr<DeviceInfo> device, bool bf16 = false) {
    SessionOptions o;
    o.numThreads = 2;
    o.enableProfiling = true;
    o.enableBf16 = bf16;
    auto s = InferenceSession::createFromOnnxModel(model, DataFlow(1, anchors), std::move(device), {}, o);
    s->prepareDevice();
    auto arrays = s->initAnchorArrays();
    int64_t count = 1;
    for (int64_t d : xShape) count *= d;
    std::vector<float> xv = randomVec(static_cast<size_t>(count), seed, 2.f);
    StepIO io({{"x", NDArray::wrap(xv.data(), DataType::Float, xShape)}}, arrays);
    s->run(io);
    ChainRun r;
    for (const OpProfile& p : s->profile()) {
      if (p.opType == "FusedConvChain") {
        r.chainCalls += p.calls;
        for (const std::string& k : p.kernels) r.chainKernels += k;
      }
      if (p.opType == "FusedConv" || p.opType == "Conv") r.convCalls += p.calls;
    }
    const NDArray& a = arrays.at(out);
    r.y.assign(a.data<float>(), a.data<float>() + a.numel());
    return r;
  }

  static ChainRun run(const char* mode, std::shared_ptr<DeviceInfo> device, bool anchorDepthwise = false,
                      bool bf16 = false) {
    setMode(mode);
    Builder b;
    TensorId x = b.addInputTensor(TensorInfo(DataType::Float, Shape{2, kC, 48, 64}), "x");
    Block big = invertedResidual(b, x, 10);
    TensorId pooled = b.addOp("MaxPool", "", 17, {big.out},
                              {{"kernel_shape", std::vector<int64_t>{2, 2}}, {"strides", std::vector<int64_t>{2, 2}}})
                          .at(0);
    Block small = invertedResidual(b, pooled, 20);
    b.addOutputTensor(small.out);
    std::vector<TensorId> anchors{small.out};
    if (anchorDepthwise) anchors.push_back(big.depthwise);
    return runModel(b.getModelProto(), anchors, small.out, {2, kC, 48, 64}, 3, std::move(device), bf16);
  }
};

double maxDiff(const std::vector<float>& a, const std::vector<float>& b) {
  double d = 0;
  for (size_t i = 0; i < a.size(); ++i) d = std::max(d, double(std::fabs(a[i] - b[i])));
  return d;
}

TEST_F(CpuConvChains, AutoJoinsTheLargeBlockOnly) {
  auto dm = DeviceManager::createDeviceManager();
  ChainRun ref = run("", dm.createReferenceDevice());
  ChainRun off = run("off", dm.createCpuDevice());
  ChainRun chained = run("", dm.createCpuDevice());
  EXPECT_EQ(off.chainCalls, 0);
  EXPECT_EQ(off.convCalls, 6);
  EXPECT_EQ(chained.chainCalls, 1) << chained.chainKernels;
  EXPECT_EQ(chained.convCalls, 3);  // the small block's, one by one
  // The kernel ran, in tiles of fewer rows than the block's 48.
  EXPECT_NE(chained.chainKernels.find("onednn_conv_chain"), std::string::npos) << chained.chainKernels;
  EXPECT_NE(chained.chainKernels.find("3 stages in tiles of"), std::string::npos) << chained.chainKernels;
  ASSERT_EQ(chained.y.size(), ref.y.size());
  EXPECT_LT(maxDiff(chained.y, off.y), 1e-4);
  EXPECT_LT(maxDiff(chained.y, ref.y), 1e-3);
}

TEST_F(CpuConvChains, OnJoinsEveryChain) {
  auto dm = DeviceManager::createDeviceManager();
  ChainRun off = run("off", dm.createCpuDevice());
  ChainRun on = run("on", dm.createCpuDevice());
  EXPECT_EQ(on.chainCalls, 2) << on.chainKernels;
  EXPECT_EQ(on.convCalls, 0);
  EXPECT_LT(maxDiff(on.y, off.y), 1e-4);
}

TEST_F(CpuConvChains, AnchoredIntermediateStaysATensor) {
  auto dm = DeviceManager::createDeviceManager();
  // The depthwise output is read by the user: the large block's chain ends there, the expansion
  // and depthwise convolutions still join (their intermediate is not anchored).
  ChainRun r = run("on", dm.createCpuDevice(), /*anchorDepthwise=*/true);
  EXPECT_EQ(r.chainCalls, 2) << r.chainKernels;
  EXPECT_EQ(r.convCalls, 1);  // the large block's projection
  ChainRun off = run("off", dm.createCpuDevice(), true);
  EXPECT_LT(maxDiff(r.y, off.y), 1e-4);
}

// The cpu-conv-chains-bf16 pass (enableBf16 sessions): chains with a depthwise stage only, run in
// float32 (the chain kernel has no bf16 form; mobilenet_v2 b8 under enableBf16: 30.9 ms without
// chains, 25.4 with, float32 30.3); a chain of dense convolutions stays bf16 convolutions one by
// one (resnet50 b8's: 160 ms a step without, 185 with).
class CpuConvChainsBf16 : public CpuConvChains {
 protected:
  void SetUp() override {
    if (!support::cpuFeatures().avx512bf16)
      GTEST_SKIP() << "SessionOptions.enableBf16 needs avx512_bf16, which this host (below GRAFT_CPU_ISA) lacks";
    CpuConvChains::SetUp();
  }

  // x [2, 16, 48, 64] -> Conv 1x1 16->96, Relu -> Conv 3x3 96->96 of stride 2, Relu -> Conv 1x1
  // 96->32: the kind of chain of resnet50's layer2.0; the number of FusedConvChain calls.
  static int64_t denseChains(bool bf16) {
    Builder b;
    TensorId x = b.addInputTensor(TensorInfo(DataType::Float, Shape{2, kC, 48, 64}), "x");
    uint64_t seed = 30;
    auto conv = [&](TensorId in, int64_t cin, int64_t cout, int64_t k, int64_t stride) {
      TensorId w = b.addInitializedInputTensor(
          fromVec(randomVec(static_cast<size_t>(cout * cin * k * k), seed++, 0.1f), {cout, cin, k, k}));
      TensorId bias = b.addInitializedInputTensor(fromVec(randomVec(static_cast<size_t>(cout), seed++), {cout}));
      int64_t p = k / 2;
      return b
          .addOp("Conv", "", 17, {in, w, bias},
                 {{"pads", std::vector<int64_t>{p, p, p, p}}, {"strides", std::vector<int64_t>{stride, stride}}})
          .at(0);
    };
    TensorId y = b.addOp("Relu", "", 17, {conv(x, kC, kE, 1, 1)}).at(0);
    y = b.addOp("Relu", "", 17, {conv(y, kE, kE, 3, 2)}).at(0);
    y = conv(y, kE, 32, 1, 1);
    b.addOutputTensor(y);
    SessionOptions o;
    o.numThreads = 2;
    o.enableProfiling = true;
    o.enableBf16 = bf16;
    auto s = InferenceSession::createFromOnnxModel(b.getModelProto(), DataFlow(1, {y}),
                                                   DeviceManager::createDeviceManager().createCpuDevice(), {}, o);
    s->prepareDevice();
    auto arrays = s->initAnchorArrays();
    std::vector<float> xv = randomVec(size_t{2 * kC * 48 * 64}, 3);
    StepIO io({{"x", NDArray::wrap(xv.data(), DataType::Float, {2, kC, 48, 64})}}, arrays);
    s->run(io);
    int64_t calls = 0;
    for (const OpProfile& p : s->profile())
      if (p.opType == "FusedConvChain") calls += p.calls;
    return calls;
  }
};

TEST_F(CpuConvChainsBf16, DepthwiseChainsRunInFloat32) {
  auto dm = DeviceManager::createDeviceManager();
  ChainRun off = run("off", dm.createCpuDevice());
  ChainRun r = run("", dm.createCpuDevice(), false, /*bf16=*/true);
  EXPECT_EQ(r.chainCalls, 1) << r.chainKernels;
  EXPECT_EQ(r.chainKernels.find("bf16"), std::string::npos) << r.chainKernels;
  double mag = 0;
  for (float v : off.y) mag = std::max(mag, double(std::fabs(v)));
  EXPECT_LT(maxDiff(r.y, off.y), 0.05 * mag);  // the small block's convolutions in bf16
}

TEST_F(CpuConvChainsBf16, DenseChainsStayBf16Convolutions) {
  EXPECT_EQ(denseChains(false), 1);  // float32: 96 x 48 x 64 floats an image, joined
  EXPECT_EQ(denseChains(true), 0);
}

// mobilenet_v2's stem and first block: x [2, 3, 192, 192] -> Conv 3x3 of stride 2, 3->32, Clip ->
// depthwise Conv 3x3, Clip -> Conv 1x1 32->16 (the stem's output, 32 x 96 x 96 floats = 1.2 MB an
// image): two spatial stages in one chain, the stem recomputing its halo rows for each tile.
TEST_F(CpuConvChains, StemAndDepthwiseStageJoinInOneChain) {
  auto runStem = [](const char* mode, std::shared_ptr<DeviceInfo> device) {
    setMode(mode);
    Builder b;
    TensorId x = b.addInputTensor(TensorInfo(DataType::Float, Shape{2, 3, 192, 192}), "x");
    TensorId lo = b.addInitializedInputTensor(fromVec({0.f}, {}));
    TensorId hi = b.addInitializedInputTensor(fromVec({6.f}, {}));
    uint64_t seed = 40;
    auto conv = [&](TensorId in, int64_t cin, int64_t cout, int64_t k, int64_t stride, int64_t group) {
      TensorId w = b.addInitializedInputTensor(
          fromVec(randomVec(static_cast<size_t>(cout * cin / group * k * k), seed++, 0.3f), {cout, cin / group, k, k}));
      TensorId bias = b.addInitializedInputTensor(fromVec(randomVec(static_cast<size_t>(cout), seed++), {cout}));
      int64_t p = k / 2;
      return b
          .addOp("Conv", "", 17, {in, w, bias},
                 {{"pads", std::vector<int64_t>{p, p, p, p}},
                  {"strides", std::vector<int64_t>{stride, stride}},
                  {"group", group}})
          .at(0);
    };
    TensorId y = b.addOp("Clip", "", 17, {conv(x, 3, 32, 3, 2, 1), lo, hi}).at(0);
    y = b.addOp("Clip", "", 17, {conv(y, 32, 32, 3, 1, 32), lo, hi}).at(0);
    y = conv(y, 32, 16, 1, 1, 1);
    b.addOutputTensor(y);
    return runModel(b.getModelProto(), {y}, y, {2, 3, 192, 192}, 4, std::move(device));
  };
  auto dm = DeviceManager::createDeviceManager();
  ChainRun ref = runStem("", dm.createReferenceDevice());
  ChainRun off = runStem("off", dm.createCpuDevice());
  ChainRun chained = runStem("", dm.createCpuDevice());
  EXPECT_EQ(off.chainCalls, 0);
  EXPECT_EQ(chained.chainCalls, 1) << chained.chainKernels;
  EXPECT_EQ(chained.convCalls, 0);
  EXPECT_NE(chained.chainKernels.find("3 stages in tiles of"), std::string::npos) << chained.chainKernels;
  ASSERT_EQ(chained.y.size(), ref.y.size());
  EXPECT_LT(maxDiff(chained.y, off.y), 1e-4);
  EXPECT_LT(maxDiff(chained.y, ref.y), 1e-3);
}

TEST_F(CpuConvChains, BadValueIsRefusedByName) {
  auto dm = DeviceManager::createDeviceManager();
  std::string e = errorOf([&] { run("sometimes", dm.createCpuDevice()); });
  EXPECT_NE(e.find("GRAFT_CONV_CHAINS"), std::string::npos) << e;
  EXPECT_NE(e.find("sometimes"), std::string::npos) << e;
}

}  // namespace
}  // namespace graft
