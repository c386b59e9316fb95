// SessionOptions.enableBf16 end to end on a small CNN (Conv -> Relu -> Conv stride 2 -> Relu ->
// Reshape -> Gemm [-> SoftmaxCrossEntropyLoss]): inference tracks float32 within a bf16
// tolerance and its kernels say they ran bf16; training with fp32 master weights tracks a float32
// session step by step, and its weights stay float32 (updates far below bf16's resolution of a
// weight are kept). The cases of each bf16 kernel are in tests/backends/cpu_vs_reference_test.cpp
// (cpu_bf16_*); the refusals in session_test.cpp. Everything here skips on hosts without
// avx512_bf16.
#include <gtest/gtest.h>

#include <graft/builder.hpp>
#include <graft/graft.hpp>

#include <cmath>
#include <cstring>
#include <map>
#include <random>

#include "../unit_test_util.hpp"
#include "ir/graph.hpp"
#include "onnx/model_io.hpp"
#include "passes/pass.hpp"
#include "support/cpu_features.hpp"

namespace graft {
namespace {

constexpr int64_t kN = 8, kC = 3, kH = 8, kM = 16, kH2 = kH / 2, kFlat = kM * kH2 * kH2, kClasses = 10;

using testing::fromVec;
using testing::randomVec;

const std::vector<std::pair<TensorId, Shape>> kWeights = {{"conv1.W", {kM, kC, 3, 3}}, {"conv1.b", {kM}},
                                                          {"conv2.W", {kM, kM, 3, 3}}, {"conv2.b", {kM}},
                                                          {"fc.W", {kFlat, kClasses}}, {"fc.b", {kClasses}}};

// The model; with `loss`, SoftmaxCrossEntropyLoss of the logits against input "t".
std::string cnnModel(bool loss) {
  ir::Graph g("cnn");
  ir::Tensor* x = g.addTensor("x", ir::ValueType::tensor(TensorInfo(DataType::Float, Shape{kN, kC, kH, kH})),
                              ir::TensorKind::Input);
  g.addInput(x);
  std::map<TensorId, ir::Tensor*> w;
  uint64_t seed = 1;
  for (const auto& [id, shape] : kWeights) {
    int64_t fanIn = shape.size() > 1 ? shapeNumel(shape) / shape[0] : 10;
    if (id == "fc.W") fanIn = kFlat;
    w[id] = g.addInitializer(id, fromVec(randomVec(shapeNumel(shape), seed++, 1.5f / std::sqrt(float(fanIn))), shape));
  }
  ir::Attributes pad;
  pad.set("pads", std::vector<int64_t>{1, 1, 1, 1});
  ir::Tensor* h = g.addNode("Conv", "", {x, w["conv1.W"], w["conv1.b"]}, {"conv1"}, pad)->output(0);
  h = g.addNode("Relu", "", {h}, {"relu1"})->output(0);
  ir::Attributes s2 = pad;
  s2.set("strides", std::vector<int64_t>{2, 2});
  h = g.addNode("Conv", "", {h, w["conv2.W"], w["conv2.b"]}, {"conv2"}, s2)->output(0);
  h = g.addNode("Relu", "", {h}, {"relu2"})->output(0);
  NDArray shape(DataType::Int64, {2});
  shape.data<int64_t>()[0] = kN;
  shape.data<int64_t>()[1] = kFlat;
  h = g.addNode("Reshape", "", {h, g.addInitializer("flat", shape, ir::TensorKind::Constant)}, {"flat_h"})->output(0);
  h = g.addNode("Gemm", "", {h, w["fc.W"], w["fc.b"]}, {"logits"})->output(0);
  if (loss) {
    ir::Tensor* t =
        g.addTensor("t", ir::ValueType::tensor(TensorInfo(DataType::Int64, Shape{kN})), ir::TensorKind::Input);
    g.addInput(t);
    h = g.addNode("SoftmaxCrossEntropyLoss", "", {h, t}, {"loss"})->output(0);
  }
  g.addOutput(h);
  passes::PassContext ctx;
  passes::runPipeline(g, {"infer-shapes"}, ctx);
  return onnxio::saveModelBytes(g);
}

std::shared_ptr<DeviceInfo> cpu() { return DeviceManager::createDeviceManager().createCpuDevice(); }

SessionOptions options(bool bf16) {
  SessionOptions o;
  o.enableBf16 = bf16;
  o.numThreads = 2;
  o.enableProfiling = true;
  return o;
}

struct Data {
  std::vector<float> x = randomVec(kN * kC * kH * kH, 10, 1.f);
  std::vector<int64_t> t = {0, 3, 1, 2, 9, 5, 7, 3};
};

double rms(const std::vector<double>& v) {
  double s = 0;
  for (double d : v) s += d * d;
  return std::sqrt(s / static_cast<double>(v.size()));
}

bool skipWithoutBf16() { return !support::cpuFeatures().avx512bf16; }
#define SKIP_WITHOUT_BF16()                                                                                    \
  if (skipWithoutBf16())                                                                                       \
  GTEST_SKIP() << "SessionOptions.enableBf16 needs avx512_bf16, which this host (below GRAFT_CPU_ISA) lacks; " \
                  "session_test.cpp checks the refusal"

// The kernels that ran the op type, from the session's profile.
std::vector<std::string> kernelsOf(const Session& s, const std::string& opType) {
  for (const OpProfile& p : s.profile())
    if (p.opType == opType) return p.kernels;
  return {};
}

std::vector<float> infer(bool bf16, Data& d, std::vector<std::string>* convKernels = nullptr,
                         std::vector<std::string>* gemmKernels = nullptr) {
  auto s = InferenceSession::createFromOnnxModel(cnnModel(false), DataFlow(1, {"logits"}), cpu(), {}, options(bf16));
  s->prepareDevice();
  auto anchors = s->initAnchorArrays();
  StepIO io({{"x", NDArray::wrap(d.x.data(), DataType::Float, {kN, kC, kH, kH})}}, anchors);
  s->run(io);
  if (convKernels) {
    *convKernels = kernelsOf(*s, "FusedConv");
    auto plain = kernelsOf(*s, "Conv");
    convKernels->insert(convKernels->end(), plain.begin(), plain.end());
  }
  if (gemmKernels) {
    *gemmKernels = kernelsOf(*s, "FusedGemm");
    auto plain = kernelsOf(*s, "Gemm");
    gemmKernels->insert(gemmKernels->end(), plain.begin(), plain.end());
  }
  const NDArray& y = anchors.at("logits");
  return std::vector<float>(y.data<float>(), y.data<float>() + y.numel());
}

bool allSayBf16(const std::vector<std::string>& kernels) {
  if (kernels.empty()) return false;
  for (const auto& k : kernels)
    if (k.find(", bf16)") == std::string::npos) return false;
  return true;
}

TEST(Bf16, InferenceTracksFloat32) {
  SKIP_WITHOUT_BF16();
  Data d;
  std::vector<std::string> conv, gemm;
  std::vector<float> want = infer(false, d), got = infer(true, d, &conv, &gemm);
  EXPECT_TRUE(allSayBf16(conv)) << ::testing::PrintToString(conv);
  EXPECT_TRUE(allSayBf16(gemm)) << ::testing::PrintToString(gemm);
  ASSERT_EQ(got.size(), want.size());
  std::vector<double> diff(want.size()), ref(want.begin(), want.end());
  for (size_t i = 0; i < want.size(); ++i) diff[i] = static_cast<double>(got[i]) - want[i];
  double err = rms(diff) / rms(ref);
  // bf16 operands: about 2^-8 of the RMS per matrix product; float32 would give ~1e-7.
  EXPECT_LT(err, 2e-2);
  EXPECT_GT(err, 1e-5) << "bf16 and float32 agree to float32 precision: bf16 did not run";
  // The same class for every sample.
  for (int64_t n = 0; n < kN; ++n) {
    auto row = [&](const std::vector<float>& v) {
      return std::max_element(v.begin() + n * kClasses, v.begin() + (n + 1) * kClasses) - (v.begin() + n * kClasses);
    };
    EXPECT_EQ(row(got), row(want)) << "sample " << n;
  }
}

struct Trained {
  std::vector<float> losses;
  std::map<TensorId, std::vector<float>> weights;
  std::vector<std::string> convGradKernels;
};

Trained train(bool bf16, float lr, int steps) {
  auto s = TrainingSession::createFromOnnxModel(cnnModel(true), DataFlow(1, {"loss"}), "loss", ConstSGD(lr), cpu(), {},
                                                options(bf16));
  s->prepareDevice();
  Data d;
  Trained out;
  for (int i = 0; i < steps; ++i) {
    auto anchors = s->initAnchorArrays();
    StepIO io({{"x", NDArray::wrap(d.x.data(), DataType::Float, {kN, kC, kH, kH})},
               {"t", NDArray::wrap(d.t.data(), DataType::Int64, {kN})}},
              anchors);
    s->run(io);
    out.losses.push_back(anchors.at("loss").data<float>()[0]);
  }
  WeightsIO io;
  for (const auto& [id, shape] : kWeights) io.insert(id, NDArray(DataType::Float, shape));
  s->readWeights(io);
  for (const auto& [id, shape] : kWeights) {
    const NDArray& a = io.weight(id);
    EXPECT_EQ(a.dtype(), DataType::Float) << id;
    out.weights[id] = std::vector<float>(a.data<float>(), a.data<float>() + a.numel());
  }
  out.convGradKernels = kernelsOf(*s, "ConvGradWeight");
  // Channels last (cpu-layout-training, on hosts whose layout is NHWC): the wrapped op.
  auto wrapped = kernelsOf(*s, "ChannelBlocked(ConvGradWeight)");
  out.convGradKernels.insert(out.convGradKernels.end(), wrapped.begin(), wrapped.end());
  return out;
}

std::map<TensorId, std::vector<float>> initialWeights() {
  std::map<TensorId, std::vector<float>> w;
  uint64_t seed = 1;
  for (const auto& [id, shape] : kWeights) {
    int64_t fanIn = shape.size() > 1 ? shapeNumel(shape) / shape[0] : 10;
    if (id == "fc.W") fanIn = kFlat;
    w[id] = randomVec(shapeNumel(shape), seed++, 1.5f / std::sqrt(float(fanIn)));
  }
  return w;
}

// SGD steps with bf16 matmuls and convolutions (forward and backward) track float32 ones: the
// loss of every step, and every weight's total update.
TEST(Bf16, TrainingTracksFloat32) {
  SKIP_WITHOUT_BF16();
  constexpr int kSteps = 5;
  Trained f = train(false, 0.05f, kSteps), b = train(true, 0.05f, kSteps);
  EXPECT_TRUE(allSayBf16(b.convGradKernels)) << ::testing::PrintToString(b.convGradKernels);
  for (int i = 0; i < kSteps; ++i) EXPECT_NEAR(b.losses[i], f.losses[i], 2e-2 * f.losses[i]) << "step " << i;
  EXPECT_GT(std::abs(b.losses[0] - f.losses[0]), 1e-7) << "bf16 and float32 losses are equal: bf16 did not run";
  EXPECT_LT(b.losses.back(), 0.9f * b.losses.front()) << ::testing::PrintToString(b.losses);
  auto w0 = initialWeights();
  for (const auto& [id, shape] : kWeights) {
    std::vector<double> updF, diff;
    for (size_t i = 0; i < w0[id].size(); ++i) {
      updF.push_back(static_cast<double>(f.weights[id][i]) - w0[id][i]);
      diff.push_back(static_cast<double>(b.weights[id][i]) - f.weights[id][i]);
    }
    EXPECT_LT(rms(diff), 0.1 * rms(updF)) << id << ": the bf16 session's updates differ from float32's";
  }
}

// fp32 master weights: one step whose updates are ~1e-4 of the weights (bf16 resolves 2^-8 of a
// weight, so bf16 weights would not move at all) moves every weight as float32 does.
TEST(Bf16, TrainingKeepsFloat32MasterWeights) {
  SKIP_WITHOUT_BF16();
  Trained f = train(false, 1e-4f, 1), b = train(true, 1e-4f, 1);
  auto w0 = initialWeights();
  for (const auto& [id, shape] : kWeights) {
    size_t moved = 0, movedF = 0, bf16Valued = 0;
    std::vector<double> updF, diff;
    for (size_t i = 0; i < w0[id].size(); ++i) {
      float v = b.weights[id][i];
      moved += v != w0[id][i];
      movedF += f.weights[id][i] != w0[id][i];
      uint32_t bits;
      std::memcpy(&bits, &v, 4);
      bf16Valued += (bits & 0xffff) == 0;
      updF.push_back(static_cast<double>(f.weights[id][i]) - w0[id][i]);
      diff.push_back(static_cast<double>(v) - f.weights[id][i]);
    }
    // (Weights whose gradient is 0, behind a Relu that is off for the whole batch, stay put in both.)
    EXPECT_GE(movedF, w0[id].size() / 2) << id;
    EXPECT_GE(moved, movedF * 9 / 10) << id << ": updates below bf16 resolution were lost (" << movedF
                                      << " moved in float32)";
    EXPECT_LE(bf16Valued, w0[id].size() / 10) << id << ": the weights hold bf16 values";
    EXPECT_LT(rms(diff), 0.1 * rms(updF)) << id;
  }
}

// A depthwise convolution (group = channels) stays float32 under enableBf16, saying why, while the
// 1x1 convolution after it runs bf16; the depthwise one's output equals a float32 session's.
TEST(Bf16, DepthwiseConvolutionsStayFloat32) {
  SKIP_WITHOUT_BF16();
  Builder b;
  TensorId x = b.addInputTensor(TensorInfo(DataType::Float, Shape{2, 32, 10, 10}), "x");
  TensorId wd = b.addInitializedInputTensor(fromVec(randomVec(size_t{288}, 3), {32, 1, 3, 3}), "wd");  // 32 x 1 x 3 x 3
  TensorId wp = b.addInitializedInputTensor(fromVec(randomVec(size_t{2048}, 4), {64, 32, 1, 1}), "wp");
  TensorId dw =
      b.addOp("Conv", "", 17, {x, wd}, {{"group", int64_t{32}}, {"pads", std::vector<int64_t>{1, 1, 1, 1}}}).at(0);
  TensorId y = b.addOp("Conv", "", 17, {dw, wp}).at(0);
  b.addOutputTensor(dw);
  b.addOutputTensor(y);
  std::string model = b.getModelProto();
  std::vector<float> xv = randomVec(size_t{6400}, 5);  // 2 x 32 x 10 x 10
  auto run = [&](bool bf16, std::vector<std::string>& kernels) {
    auto s = InferenceSession::createFromOnnxModel(model, DataFlow(1, std::vector<TensorId>{dw, y}), cpu(), {},
                                                   options(bf16));
    s->prepareDevice();
    auto anchors = s->initAnchorArrays();
    StepIO io({{"x", NDArray::wrap(xv.data(), DataType::Float, {2, 32, 10, 10})}}, anchors);
    s->run(io);
    kernels = kernelsOf(*s, "Conv");  // (or FusedConv, as the cpu pipeline may rewrite them)
    auto fused = kernelsOf(*s, "FusedConv");
    kernels.insert(kernels.end(), fused.begin(), fused.end());
    const NDArray& d = anchors.at(dw);
    return std::vector<float>(d.data<float>(), d.data<float>() + d.numel());
  };
  std::vector<std::string> k32, k16;
  std::vector<float> f32 = run(false, k32), bf = run(true, k16);
  ASSERT_EQ(k16.size(), 2u);
  const bool dwFirst = k16[0].find("depthwise") != std::string::npos;
  const std::string& depthwise = dwFirst ? k16[0] : k16[1];
  const std::string& pointwise = dwFirst ? k16[1] : k16[0];
  EXPECT_NE(depthwise.find(", f32: depthwise convolutions stay float32"), std::string::npos) << depthwise;
  EXPECT_NE(pointwise.find(", bf16)"), std::string::npos) << pointwise;
  ASSERT_EQ(bf.size(), f32.size());
  for (size_t i = 0; i < f32.size(); ++i) ASSERT_EQ(bf[i], f32[i]) << i;
}

// LSTM under enableBf16: oneDNN's bf16 LSTM where oneDNN runs the node (batch 8), graft's float32
// small-batch LSTM at batch 1 (a higher-priority kernel goes before the bf16 ones: it measured
// faster); both track float32 within bf16's error along a 6-step sequence.
TEST(Bf16, LstmRunsBf16ExceptWhereGraftsSmallBatchKernelIsFaster) {
  SKIP_WITHOUT_BF16();
  constexpr int64_t kT = 6, kI = 24, kHid = 32;
  for (int64_t batch : {int64_t{1}, int64_t{8}}) {
    SCOPED_TRACE(batch);
    Builder b;
    TensorId x = b.addInputTensor(TensorInfo(DataType::Float, Shape{kT, batch, kI}), "x");
    TensorId w =
        b.addInitializedInputTensor(fromVec(randomVec(size_t{4 * kHid * kI}, 7, 0.3f), {1, 4 * kHid, kI}), "w");
    TensorId r =
        b.addInitializedInputTensor(fromVec(randomVec(size_t{4 * kHid * kHid}, 8, 0.3f), {1, 4 * kHid, kHid}), "r");
    TensorId y = b.addOp("LSTM", "", 14, {x, w, r}, {{"hidden_size", kHid}}).at(0);
    b.addOutputTensor(y);
    std::string model = b.getModelProto();
    std::vector<float> xv = randomVec(static_cast<size_t>(kT * batch * kI), 9);
    auto run = [&](bool bf16, std::vector<std::string>& kernels) {
      auto s =
          InferenceSession::createFromOnnxModel(model, DataFlow(1, std::vector<TensorId>{y}), cpu(), {}, options(bf16));
      s->prepareDevice();
      auto anchors = s->initAnchorArrays();
      StepIO io({{"x", NDArray::wrap(xv.data(), DataType::Float, {kT, batch, kI})}}, anchors);
      s->run(io);
      kernels = kernelsOf(*s, "LSTM");
      const NDArray& a = anchors.at(y);
      return std::vector<float>(a.data<float>(), a.data<float>() + a.numel());
    };
    std::vector<std::string> k32, k16;
    std::vector<float> f32 = run(false, k32), bf = run(true, k16);
    ASSERT_EQ(k16.size(), 1u);
    if (batch == 1) {
      // (autoThreads may run it on one thread: "... on 1 thread".)
      EXPECT_EQ(k16[0].rfind("vec_lstm_small_batch", 0), 0u) << k16[0];
    } else {
      EXPECT_NE(k16[0].find("onednn_lstm ("), std::string::npos) << k16[0];
      EXPECT_NE(k16[0].find(", bf16)"), std::string::npos) << k16[0];
    }
    ASSERT_EQ(bf.size(), f32.size());
    double worst = 0;
    for (size_t i = 0; i < f32.size(); ++i) worst = std::max(worst, double(std::abs(bf[i] - f32[i])));
    if (batch == 1)
      EXPECT_EQ(worst, 0.0);  // the same float32 kernel
    else
      EXPECT_GT(worst, 0.0);  // bf16 ran
    EXPECT_LT(worst, 2e-2);   // |h| < 1
  }
}

}  // namespace
}  // namespace graft
