// Matrix products on oneDNN's sgemm (GRAFT_MATMUL_SGEMM; onednn_matmul.cpp, buildSgemm): through
// a session, as a user runs one. A training step's product of two changing operands runs on sgemm
// where the rule (sgemmGains) says it gains (auto, the default), on every product its operands
// allow with "on", never with "off"; constant weights (inference) stay on the matmul primitive,
// which packs them (on AVX2 hosts on graft's own AVX2 sgemm); the weights trained either way agree to float32 accuracy;
// a bad value of the variable is refused by name.
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

// loss = sum((x @ W)^2) / rows, x [rows, k], W [k, n] a trained weight.
constexpr int64_t kRows = 512, kK = 256, kN = 512;

std::string model(TensorId& loss) {
  Builder b;
  TensorId x = b.addInputTensor(TensorInfo(DataType::Float, Shape{kRows, kK}), "x");
  TensorId w = b.addInitializedInputTensor(fromVec(randomVec(static_cast<size_t>(kK * kN), 1, 0.05f), {kK, kN}), "W");
  TensorId y = b.addOp("MatMul", "", 17, {x, w}).at(0);
  TensorId sq = b.addOp("ReduceSumSquare", "", 17, {y}, {{"keepdims", int64_t{0}}}).at(0);
  TensorId scale = b.addInitializedInputTensor(fromVec(std::vector<float>{1.f / kRows}, {}), "scale");
  loss = b.addOp("Mul", "", 17, {sq, scale}).at(0);
  b.addOutputTensor(loss);
  return b.getModelProto();
}

struct Trained {
  std::string kernels;  ///< the MatMul nodes' kernels (forward and gradient), from the profile
  std::vector<float> w;
};

struct ModeEnv {
  explicit ModeEnv(const char* mode) {
    if (*mode)
      setenv("GRAFT_MATMUL_SGEMM", mode, 1);
    else
      unsetenv("GRAFT_MATMUL_SGEMM");
  }
  ~ModeEnv() { unsetenv("GRAFT_MATMUL_SGEMM"); }
};

// Two SGD steps under GRAFT_MATMUL_SGEMM=mode ("" unset).
Trained train(const char* mode) {
  ModeEnv env(mode);
  TensorId loss;
  std::string proto = model(loss);
  SessionOptions o;
  o.numThreads = 2;
  o.enableProfiling = true;
  auto s = TrainingSession::createFromOnnxModel(proto, DataFlow(1, {loss}), loss, SGD(0.05),
                                                DeviceManager::createDeviceManager().createCpuDevice(), {}, o);
  s->prepareDevice();
  s->weightsFromHost();
  auto anchors = s->initAnchorArrays();
  std::vector<float> xv = randomVec(static_cast<size_t>(kRows * kK), 2);
  StepIO io({{"x", NDArray::wrap(xv.data(), DataType::Float, {kRows, kK})}}, anchors);
  s->run(io);
  s->run(io);
  Trained t;
  for (const OpProfile& p : s->profile())
    if (p.opType.find("MatMul") != std::string::npos || p.opType.find("Gemm") != std::string::npos)
      for (const std::string& k : p.kernels) t.kernels += k + "; ";
  WeightsIO w;
  w.insert("W", NDArray(DataType::Float, {kK, kN}));
  s->readWeights(w);
  const NDArray& a = w.weight("W");
  t.w.assign(a.data<float>(), a.data<float>() + a.numel());
  return t;
}

bool onSgemm(const std::string& kernels) { return kernels.find("(sgemm)") != std::string::npos; }

TEST(Sgemm, TrainingProductsTakeItWhereTheRuleSaysAndTrainTheSame) {
  Trained autoMode = train(""), on = train("on"), off = train("off");
  // The forward product (512 x 256 x 512, both operands changing) is on sgemm in auto: the rule
  // takes it; off never.
  EXPECT_TRUE(onSgemm(autoMode.kernels)) << autoMode.kernels;
  EXPECT_TRUE(onSgemm(on.kernels)) << on.kernels;
  EXPECT_FALSE(onSgemm(off.kernels)) << off.kernels;
  ASSERT_EQ(on.w.size(), off.w.size());
  double err = 0, mag = 0;
  for (size_t i = 0; i < off.w.size(); ++i) {
    err = std::max(err, std::fabs(double(on.w[i]) - off.w[i]) + std::fabs(double(autoMode.w[i]) - off.w[i]));
    mag = std::max(mag, std::fabs(double(off.w[i])));
  }
  EXPECT_LT(err / mag, 1e-5);
  EXPECT_GT(mag, 0.0);
}

TEST(Sgemm, ConstantWeightsStayOnTheMatmulPrimitive) {
  ModeEnv env("on");
  Builder b;
  TensorId x = b.addInputTensor(TensorInfo(DataType::Float, Shape{kRows, kK}), "x");
  TensorId w = b.addInitializedInputTensor(fromVec(randomVec(static_cast<size_t>(kK * kN), 1, 0.05f), {kK, kN}), "W");
  TensorId y = b.addOp("MatMul", "", 17, {x, w}).at(0);
  b.addOutputTensor(y);
  SessionOptions o;
  o.numThreads = 2;
  o.enableProfiling = true;
  auto s = InferenceSession::createFromOnnxModel(b.getModelProto(), DataFlow(1, std::vector<TensorId>{y}),
                                                 DeviceManager::createDeviceManager().createCpuDevice(), {}, o);
  s->prepareDevice();
  auto anchors = s->initAnchorArrays();
  std::vector<float> xv = randomVec(static_cast<size_t>(kRows * kK), 2);
  StepIO io({{"x", NDArray::wrap(xv.data(), DataType::Float, {kRows, kK})}}, anchors);
  s->run(io);
  std::string kernels;
  for (const OpProfile& p : s->profile())
    for (const std::string& k : p.kernels) kernels += k + "; ";
  // On AVX2 hosts without AVX-512 (or under GRAFT_CPU_ISA=avx2) graft's own AVX2 sgemm takes
  // constant weights of 512 columns and more (sgemm_avx2.cpp, worthIt), packing them itself.
  const support::CpuFeatures& f = support::cpuFeatures();
  const bool graftsAvx2 = !f.avx512f && f.avx2 && f.fma;
  EXPECT_NE(kernels.find(graftsAvx2 ? "sgemm_avx2_matmul" : "onednn_matmul"), std::string::npos) << kernels;
  EXPECT_FALSE(onSgemm(kernels)) << kernels;
}

TEST(Sgemm, AutoRule) {
  using backends::cpu::onednn::sgemmGains;
  // bert4 b8's training products (1024 token rows): every orientation but A B' with B' read
  // transposed and K > N.
  EXPECT_TRUE(sgemmGains(1024, 768, 3072, false, true));
  EXPECT_TRUE(sgemmGains(1024, 3072, 768, false, false));
  EXPECT_TRUE(sgemmGains(768, 1024, 3072, true, false));
  EXPECT_FALSE(sgemmGains(1024, 3072, 768, false, true));
  // mlp b256's (256 rows) and small products stay on the primitive.
  EXPECT_FALSE(sgemmGains(256, 784, 2048, false, false));
  EXPECT_FALSE(sgemmGains(1024, 768, 10, false, false));
  EXPECT_FALSE(sgemmGains(1024, 64, 768, false, false));
}

TEST(Sgemm, RefusesAnUnknownMode) {
  const std::string error = testing::errorOf([] { train("sometimes"); });
  EXPECT_NE(error.find("GRAFT_MATMUL_SGEMM: expected off, auto or on, got 'sometimes'"), std::string::npos)
      << "GRAFT_MATMUL_SGEMM=sometimes: " << error;
}

}  // namespace
}  // namespace graft
