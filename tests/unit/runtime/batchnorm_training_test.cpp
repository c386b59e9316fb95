// TrainingSession with BatchNormalization in training mode: a MatMul -> BatchNormalization ->
// Relu -> ReduceMean -> MseLoss model trained with SGD, checked against the same training worked
// out by hand in double precision with PyTorch's rules (batch statistics, running statistics
// with the unbiased variance); the trained model in an InferenceSession (running statistics);
// and checkpoint/resume bit for bit.
#include <gtest/gtest.h>

#include <graft/graft.hpp>

#include <cmath>
#include <cstring>
#include <filesystem>
#include <random>

#include "../unit_test_util.hpp"
#include "ir/graph.hpp"
#include "onnx/model_io.hpp"
#include "ops/registry.hpp"
#include "passes/pass.hpp"

namespace graft {
namespace {

// x [N, L, In] @ W [In, C] -> [N, L, C] -> Transpose -> h [N, C, L] -> BatchNormalization -> Relu
// -> ReduceMean over L -> r [N, C]; loss = mean((r - t)^2).
constexpr int64_t kN = 3, kL = 4, kIn = 3, kC = 2, kM = kN * kL;
constexpr float kOnnxMomentum = 0.9f;  // PyTorch's momentum 0.1, as torch.onnx.export writes it
constexpr double kEps = 1e-5;

using testing::fromVec;
using testing::randomVec;

struct Params {
  std::vector<float> W = randomVec(kIn * kC, 1), gamma = randomVec(kC, 2, 0.5f, 1.5f), beta = randomVec(kC, 3),
                     mean = {0.5f, -0.2f}, var = {1.5f, 0.8f};
};

std::string bnModel(bool withDropout = false) {
  Params p;
  ir::Graph g("bn");
  g.otherOpsets["ai.graft"] = 1;
  auto input = [&](const std::string& id, Shape s) {
    ir::Tensor* t =
        g.addTensor(id, ir::ValueType::tensor(TensorInfo(DataType::Float, std::move(s))), ir::TensorKind::Input);
    g.addInput(t);
    return t;
  };
  ir::Tensor* x = input("x", {kN, kL, kIn});
  ir::Tensor* t = input("t", {kN, kC});
  ir::Tensor* w = g.addInitializer("W", fromVec(p.W, {kIn, kC}));
  ir::Tensor* h = g.addNode("MatMul", "", {x, w}, {"xw"})->output(0);
  ir::Attributes tr;
  tr.set("perm", std::vector<int64_t>{0, 2, 1});
  h = g.addNode("Transpose", "", {h}, {"h"}, tr)->output(0);
  ir::Attributes bn;
  bn.set("epsilon", static_cast<float>(kEps));
  bn.set("momentum", kOnnxMomentum);
  // As an eval-mode export writes it: training_mode 0, one output.
  ir::Node* norm = g.addNode(
      "BatchNormalization", "",
      {h, g.addInitializer("bn.weight", fromVec(p.gamma, {kC})), g.addInitializer("bn.bias", fromVec(p.beta, {kC})),
       g.addInitializer("bn.running_mean", fromVec(p.mean, {kC})),
       g.addInitializer("bn.running_var", fromVec(p.var, {kC}))},
      {"z"}, bn, "bn");
  ir::Tensor* y = g.addNode("Relu", "", {norm->output(0)}, {"y"})->output(0);
  if (withDropout) {
    ir::Tensor* ratio =
        g.addInitializer("ratio", NDArray::scalar<float>(DataType::Float, 0.25f), ir::TensorKind::Constant);
    y = g.addNode("Dropout", "", {y, ratio}, {"dropped"})->output(0);
  }
  ir::Attributes rm;
  rm.set("axes", std::vector<int64_t>{2});
  rm.set("keepdims", int64_t{0});
  ir::Tensor* r = g.addNode("ReduceMean", "", {y}, {"r"}, rm)->output(0);
  ir::Attributes mse;
  mse.set("reduction", std::string("Mean"));
  g.addOutput(g.addNode("MseLoss", "ai.graft", {r, t}, {"loss"}, mse)->output(0));
  passes::PassContext ctx;
  passes::runPipeline(g, {"infer-shapes"}, ctx);
  return onnxio::saveModelBytes(g);
}

struct Batch {
  std::vector<float> x, t;
};
Batch batchFor(int step) { return {randomVec(kN * kL * kIn, 100 + step), randomVec(kN * kC, 200 + step)}; }

// The model and SGD in double precision, with PyTorch's BatchNorm rules in train().
struct Reference {
  std::vector<double> W, gamma, beta, mean, var;
  Reference() {
    Params p;
    W.assign(p.W.begin(), p.W.end());
    gamma.assign(p.gamma.begin(), p.gamma.end());
    beta.assign(p.beta.begin(), p.beta.end());
    mean.assign(p.mean.begin(), p.mean.end());
    var.assign(p.var.begin(), p.var.end());
  }
  void step(const Batch& b, double lr) {
    const double m = 0.1;  // PyTorch's momentum
    auto at = [](int64_t n, int64_t c, int64_t l) { return (n * kC + c) * kL + l; };
    std::vector<double> h(kN * kC * kL), xhat(h.size()), z(h.size());
    for (int64_t n = 0; n < kN; ++n)
      for (int64_t c = 0; c < kC; ++c)
        for (int64_t l = 0; l < kL; ++l) {
          double s = 0;
          for (int64_t i = 0; i < kIn; ++i) s += b.x[(n * kL + l) * kIn + i] * W[i * kC + c];
          h[at(n, c, l)] = s;
        }
    std::vector<double> mu(kC, 0), v(kC, 0), inv(kC);
    for (int64_t c = 0; c < kC; ++c) {
      for (int64_t n = 0; n < kN; ++n)
        for (int64_t l = 0; l < kL; ++l) mu[c] += h[at(n, c, l)] / kM;
      for (int64_t n = 0; n < kN; ++n)
        for (int64_t l = 0; l < kL; ++l) v[c] += (h[at(n, c, l)] - mu[c]) * (h[at(n, c, l)] - mu[c]) / kM;
      inv[c] = 1 / std::sqrt(v[c] + kEps);
    }
    std::vector<double> r(kN * kC, 0);
    for (int64_t n = 0; n < kN; ++n)
      for (int64_t c = 0; c < kC; ++c)
        for (int64_t l = 0; l < kL; ++l) {
          size_t k = at(n, c, l);
          xhat[k] = (h[k] - mu[c]) * inv[c];
          z[k] = gamma[c] * xhat[k] + beta[c];
          r[n * kC + c] += std::max(z[k], 0.0) / kL;
        }
    // Backward.
    std::vector<double> dz(h.size()), dgamma(kC, 0), dbeta(kC, 0), dW(W.size(), 0);
    for (int64_t n = 0; n < kN; ++n)
      for (int64_t c = 0; c < kC; ++c)
        for (int64_t l = 0; l < kL; ++l) {
          size_t k = at(n, c, l);
          double dr = 2 * (r[n * kC + c] - b.t[n * kC + c]) / (kN * kC);
          dz[k] = z[k] > 0 ? dr / kL : 0.0;
          dgamma[c] += dz[k] * xhat[k];
          dbeta[c] += dz[k];
        }
    for (int64_t c = 0; c < kC; ++c)
      for (int64_t n = 0; n < kN; ++n)
        for (int64_t l = 0; l < kL; ++l) {
          size_t k = at(n, c, l);
          // dh = gamma inv / M (M dz - sum dz - xhat sum dz xhat)
          double dh = gamma[c] * inv[c] / kM * (kM * dz[k] - dbeta[c] - xhat[k] * dgamma[c]);
          for (int64_t i = 0; i < kIn; ++i) dW[i * kC + c] += b.x[(n * kL + l) * kIn + i] * dh;
        }
    for (size_t i = 0; i < W.size(); ++i) W[i] -= lr * dW[i];
    for (int64_t c = 0; c < kC; ++c) {
      gamma[c] -= lr * dgamma[c];
      beta[c] -= lr * dbeta[c];
      mean[c] = m * mu[c] + (1 - m) * mean[c];
      var[c] = m * v[c] * kM / (kM - 1) + (1 - m) * var[c];  // the unbiased batch variance
    }
  }
};

std::shared_ptr<DeviceInfo> cpu() { return DeviceManager::createDeviceManager().createCpuDevice(); }

void runStep(Session& s, const Batch& b) {
  std::vector<float> x = b.x, t = b.t;
  auto anchors = s.initAnchorArrays();
  StepIO io({{"x", NDArray::wrap(x.data(), DataType::Float, {kN, kL, kIn})},
             {"t", NDArray::wrap(t.data(), DataType::Float, {kN, kC})}},
            anchors);
  s.run(io);
}

const std::vector<std::pair<TensorId, Shape>> kState = {
    {"W", {kIn, kC}}, {"bn.weight", {kC}}, {"bn.bias", {kC}}, {"bn.running_mean", {kC}}, {"bn.running_var", {kC}}};

WeightsIO readState(Session& s, const std::vector<std::pair<TensorId, Shape>>& ids = kState) {
  WeightsIO io;
  for (const auto& [id, shape] : ids) io.insert(id, NDArray(DataType::Float, shape));
  s.readWeights(io);
  return io;
}

void expectNear(const WeightsIO& io, const TensorId& id, const std::vector<double>& want, double tol) {
  const NDArray& a = io.weight(id);
  ASSERT_EQ(a.numel(), static_cast<int64_t>(want.size())) << id;
  for (size_t i = 0; i < want.size(); ++i) EXPECT_NEAR(a.data<float>()[i], want[i], tol) << id << "[" << i << "]";
}

TEST(TrainingSession, BatchNormTrainsWithBatchStatisticsAndUpdatesRunningStatisticsAsPyTorch) {
  const double lr = 0.1;
  auto s = TrainingSession::createFromOnnxModel(bnModel(), DataFlow(1, {"loss"}), "loss",
                                                ConstSGD(static_cast<float>(lr)), cpu());
  auto trained = s->trainedWeightIds();
  std::sort(trained.begin(), trained.end());
  EXPECT_EQ(trained, (std::vector<TensorId>{"W", "bn.bias", "bn.weight"}));  // not the running statistics
  Reference ref;
  for (int step = 0; step < 4; ++step) {
    runStep(*s, batchFor(step));
    ref.step(batchFor(step), lr);
  }
  WeightsIO io = readState(*s);
  expectNear(io, "W", ref.W, 1e-5);
  expectNear(io, "bn.weight", ref.gamma, 1e-5);
  expectNear(io, "bn.bias", ref.beta, 1e-5);
  expectNear(io, "bn.running_mean", ref.mean, 1e-5);
  expectNear(io, "bn.running_var", ref.var, 1e-5);
  // The running statistics moved away from where they started.
  EXPECT_GT(std::abs(io.weight("bn.running_var").data<float>()[0] - 1.5f), 1e-3f);

  // The trained model in an InferenceSession normalizes with the running statistics.
  auto inf = InferenceSession::createFromOnnxModel(s->modelBytes(), DataFlow(1, {"z"}), cpu());
  Batch b = batchFor(9);
  std::vector<float> x = b.x, t = b.t;
  auto anchors = inf->initAnchorArrays();
  StepIO sio({{"x", NDArray::wrap(x.data(), DataType::Float, {kN, kL, kIn})},
              {"t", NDArray::wrap(t.data(), DataType::Float, {kN, kC})}},
             anchors);
  inf->run(sio);
  const NDArray& z = anchors.at("z");
  for (int64_t n = 0; n < kN; ++n)
    for (int64_t c = 0; c < kC; ++c)
      for (int64_t l = 0; l < kL; ++l) {
        double h = 0;
        for (int64_t i = 0; i < kIn; ++i) h += b.x[(n * kL + l) * kIn + i] * ref.W[i * kC + c];
        double want = (h - ref.mean[c]) / std::sqrt(ref.var[c] + kEps) * ref.gamma[c] + ref.beta[c];
        EXPECT_NEAR(z.data<float>()[(n * kC + c) * kL + l], want, 1e-4);
      }
}

TEST(TrainingSession, BatchNormGradientsCanBeAnchored) {
  auto s = TrainingSession::createFromOnnxModel(
      bnModel(), DataFlow(1, std::vector<TensorId>{"loss", "Gradient___bn.weight", "Gradient___bn.bias"}), "loss",
      ConstSGD(0.0f), cpu());
  Batch b = batchFor(0);
  auto anchors = s->initAnchorArrays();
  StepIO io({{"x", NDArray::wrap(b.x.data(), DataType::Float, {kN, kL, kIn})},
             {"t", NDArray::wrap(b.t.data(), DataType::Float, {kN, kC})}},
            anchors);
  s->run(io);
  Reference before, after;
  after.step(b, 1.0);  // with lr 1 a parameter changes by minus its gradient
  for (int64_t c = 0; c < kC; ++c) {
    EXPECT_NEAR(anchors.at("Gradient___bn.weight").data<float>()[c], before.gamma[c] - after.gamma[c], 1e-5);
    EXPECT_NEAR(anchors.at("Gradient___bn.bias").data<float>()[c], before.beta[c] - after.beta[c], 1e-5);
  }
}

TEST(TrainingSession, BatchNormResumeFromCheckpointIsBitIdentical) {
  // With Dropout too once the ONNX Dropout op is registered: its masks come from the seed
  // Variable saved in the checkpoint.
  const ops::OpDef* dropoutDef = ops::Registry::instance().find("", "Dropout");
  bool dropout = dropoutDef && dropoutDef->reference;
  std::string model = bnModel(dropout);
  SGD opt({{"defaultLearningRate", {0.05f, true}}, {"defaultMomentum", {0.9f, true}}});
  auto full = TrainingSession::createFromOnnxModel(model, DataFlow(1, {"loss"}), "loss", opt, cpu());
  auto first = TrainingSession::createFromOnnxModel(model, DataFlow(1, {"loss"}), "loss", opt, cpu());
  for (int step = 0; step < 5; ++step) runStep(*full, batchFor(step));
  for (int step = 0; step < 2; ++step) runStep(*first, batchFor(step));
  std::string path = (std::filesystem::temp_directory_path() / "graft_bn_checkpoint_test.onnx").string();
  first->modelToHost(path);
  auto resumed = TrainingSession::createFromOnnxModel(path, DataFlow(1, {"loss"}), "loss", opt, cpu());
  std::filesystem::remove(path);
  for (int step = 2; step < 5; ++step) runStep(*resumed, batchFor(step));
  auto ids = kState;
  ids.push_back({"Accl___W", {kIn, kC}});
  ids.push_back({"Accl___bn.weight", {kC}});
  WeightsIO a = readState(*full, ids), b = readState(*resumed, ids);
  for (const auto& [id, arr] : a.arrays())
    EXPECT_EQ(0, std::memcmp(arr.rawData(), b.weight(id).rawData(), arr.nbytes())) << id << " differs after resuming";
  if (dropout) {
    WeightsIO sa, sb;
    sa.insert("randomSeed___", NDArray(DataType::Int64, {2}));
    sb.insert("randomSeed___", NDArray(DataType::Int64, {2}));
    full->readWeights(sa);
    resumed->readWeights(sb);
    EXPECT_EQ(sa.weight("randomSeed___").data<int64_t>()[1], 5);
    EXPECT_EQ(sb.weight("randomSeed___").data<int64_t>()[1], 5);
  }
}

TEST(TrainingSession, BatchNormNeedsMoreThanOneValuePerChannel) {
  ir::Graph g("bn1");
  ir::Tensor* x =
      g.addTensor("x", ir::ValueType::tensor(TensorInfo(DataType::Float, Shape{1, 2})), ir::TensorKind::Input);
  g.addInput(x);
  auto p = [&](const std::string& id, float v) { return g.addInitializer(id, fromVec({v, v}, {2})); };
  ir::Node* bn = g.addNode("BatchNormalization", "", {x, p("s", 1), p("b", 0), p("m", 0), p("v", 1)}, {"z"});
  ir::Attributes a;
  a.set("reduction", std::string("Sum"));
  g.addOutput(g.addNode("IdentityLoss", "ai.graphcore", {bn->output(0)}, {"loss"}, a)->output(0));
  g.otherOpsets["ai.graphcore"] = 1;
  passes::PassContext ctx;
  passes::runPipeline(g, {"infer-shapes"}, ctx);
  auto s = TrainingSession::createFromOnnxModel(onnxio::saveModelBytes(g), DataFlow(1, {"loss"}), "loss",
                                                ConstSGD(0.1f), cpu());
  try {
    s->prepareDevice();
    FAIL() << "a batch of one must be rejected in training";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("more than one value per channel"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace graft
