// TrainingSession end to end on a tiny CNN (Conv -> Relu -> MaxPool -> Conv -> Relu -> Reshape ->
// Gemm -> SoftmaxCrossEntropyLoss) on the cpu device: the first SGD step's update of every weight
// matches central finite differences of the same model computed here in double precision, and
// a few steps on a fixed batch lower the loss.
#include <gtest/gtest.h>

#include <graft/graft.hpp>

#include <cmath>
#include <random>

#include "../unit_test_util.hpp"
#include "ir/graph.hpp"
#include "onnx/model_io.hpp"
#include "passes/pass.hpp"

namespace graft {
namespace {

// x [N, 1, 6, 6] -> Conv 3x3 pad 1 -> [N, 3, 6, 6] -> Relu -> MaxPool 2x2 -> [N, 3, 3, 3] -> Conv 2x2
// -> [N, 4, 2, 2] -> Relu -> Reshape [N, 16] -> Gemm -> [N, 4] -> SoftmaxCrossEntropyLoss.
constexpr int64_t kN = 4, kC = 3, kH = 6, kK = 3, kP = kH / 2, kC2 = 4, kK2 = 2, kH2 = kP - kK2 + 1,
                  kFlat = kC2 * kH2 * kH2, kClasses = 4;

using testing::fromVec;
using testing::randomVec;

struct Weights {
  std::vector<double> convW, convB, conv2W, conv2B, fcW, fcB;
};

std::vector<double> randomDoubles(size_t n, uint64_t seed, float scale) {
  auto v = randomVec(n, seed, scale);
  return {v.begin(), v.end()};
}

Weights initialWeights() {
  return {randomDoubles(kC * kK * kK, 1, 0.5f),         randomDoubles(kC, 2, 0.1f),
          randomDoubles(kC2 * kC * kK2 * kK2, 5, 0.5f), randomDoubles(kC2, 6, 0.1f),
          randomDoubles(kFlat * kClasses, 3, 0.3f),     randomDoubles(kClasses, 4, 0.1f)};
}

std::vector<float> toFloat(const std::vector<double>& v) { return {v.begin(), v.end()}; }

std::string cnnModel() {
  Weights w = initialWeights();
  ir::Graph g("cnn");
  ir::Tensor* x =
      g.addTensor("x", ir::ValueType::tensor(TensorInfo(DataType::Float, Shape{kN, 1, kH, kH})), ir::TensorKind::Input);
  ir::Tensor* t =
      g.addTensor("t", ir::ValueType::tensor(TensorInfo(DataType::Int64, Shape{kN})), ir::TensorKind::Input);
  g.addInput(x);
  g.addInput(t);
  ir::Attributes ca;
  ca.set("pads", std::vector<int64_t>{1, 1, 1, 1});
  ir::Tensor* h = g.addNode("Conv", "",
                            {x, g.addInitializer("conv.W", fromVec(toFloat(w.convW), {kC, 1, kK, kK})),
                             g.addInitializer("conv.b", fromVec(toFloat(w.convB), {kC}))},
                            {"conv"}, ca)
                      ->output(0);
  h = g.addNode("Relu", "", {h}, {"relu"})->output(0);
  ir::Attributes pa;
  pa.set("kernel_shape", std::vector<int64_t>{2, 2});
  pa.set("strides", std::vector<int64_t>{2, 2});
  h = g.addNode("MaxPool", "", {h}, {"pool"}, pa)->output(0);
  h = g.addNode("Conv", "",
                {h, g.addInitializer("conv2.W", fromVec(toFloat(w.conv2W), {kC2, kC, kK2, kK2})),
                 g.addInitializer("conv2.b", fromVec(toFloat(w.conv2B), {kC2}))},
                {"conv2"})
          ->output(0);
  h = g.addNode("Relu", "", {h}, {"relu2"})->output(0);
  NDArray shape(DataType::Int64, {2});
  shape.data<int64_t>()[0] = kN;
  shape.data<int64_t>()[1] = kFlat;
  h = g.addNode("Reshape", "", {h, g.addInitializer("flat", shape, ir::TensorKind::Constant)}, {"flat_h"})->output(0);
  h = g.addNode("Gemm", "",
                {h, g.addInitializer("fc.W", fromVec(toFloat(w.fcW), {kFlat, kClasses})),
                 g.addInitializer("fc.b", fromVec(toFloat(w.fcB), {kClasses}))},
                {"logits"})
          ->output(0);
  g.addOutput(g.addNode("SoftmaxCrossEntropyLoss", "", {h, t}, {"loss"})->output(0));
  passes::PassContext ctx;
  passes::runPipeline(g, {"infer-shapes"}, ctx);
  return onnxio::saveModelBytes(g);
}

// Naive Conv + Relu of one [C, H, H] sample by W [M, C, K, K] with symmetric padding.
std::vector<double> convRelu(const std::vector<double>& in, int64_t C, int64_t H, const std::vector<double>& w,
                             const std::vector<double>& b, int64_t M, int64_t K, int64_t pad) {
  int64_t O = H + 2 * pad - K + 1;
  std::vector<double> out(M * O * O);
  for (int64_t m = 0; m < M; ++m)
    for (int64_t i = 0; i < O; ++i)
      for (int64_t j = 0; j < O; ++j) {
        double acc = b[m];
        for (int64_t c = 0; c < C; ++c)
          for (int64_t a = 0; a < K; ++a)
            for (int64_t e = 0; e < K; ++e) {
              int64_t ii = i + a - pad, jj = j + e - pad;
              if (ii >= 0 && ii < H && jj >= 0 && jj < H)
                acc += w[((m * C + c) * K + a) * K + e] * in[(c * H + ii) * H + jj];
            }
        out[(m * O + i) * O + j] = std::max(acc, 0.0);
      }
  return out;
}

// The same model in double precision: mean cross-entropy of the batch.
double lossOf(const Weights& w, const std::vector<float>& x, const std::vector<int64_t>& t) {
  double total = 0;
  for (int64_t n = 0; n < kN; ++n) {
    std::vector<double> img(x.begin() + n * kH * kH, x.begin() + (n + 1) * kH * kH);
    std::vector<double> act = convRelu(img, 1, kH, w.convW, w.convB, kC, kK, 1);
    std::vector<double> pooled(kC * kP * kP);
    for (int64_t c = 0; c < kC; ++c)
      for (int64_t i = 0; i < kP; ++i)
        for (int64_t j = 0; j < kP; ++j) {
          double m = -1e300;
          for (int64_t a = 0; a < 2; ++a)
            for (int64_t b = 0; b < 2; ++b) m = std::max(m, act[(c * kH + 2 * i + a) * kH + 2 * j + b]);
          pooled[(c * kP + i) * kP + j] = m;
        }
    std::vector<double> flat = convRelu(pooled, kC, kP, w.conv2W, w.conv2B, kC2, kK2, 0);
    std::vector<double> logits(kClasses);
    double mx = -1e300;
    for (int64_t k = 0; k < kClasses; ++k) {
      logits[k] = w.fcB[k];
      for (int64_t f = 0; f < kFlat; ++f) logits[k] += flat[f] * w.fcW[f * kClasses + k];
      mx = std::max(mx, logits[k]);
    }
    double sum = 0;
    for (double l : logits) sum += std::exp(l - mx);
    total += -(logits[t[n]] - mx - std::log(sum));
  }
  return total / kN;
}

std::shared_ptr<DeviceInfo> cpu() { return DeviceManager::createDeviceManager().createCpuDevice(); }

struct Data {
  std::vector<float> x = randomVec(kN * kH * kH, 10);
  std::vector<int64_t> t = {0, 3, 1, 2};
};

float runStep(TrainingSession& s, Data& d) {
  auto anchors = s.initAnchorArrays();
  StepIO io({{"x", NDArray::wrap(d.x.data(), DataType::Float, {kN, 1, kH, kH})},
             {"t", NDArray::wrap(d.t.data(), DataType::Int64, {kN})}},
            anchors);
  s.run(io);
  return anchors.at("loss").data<float>()[0];
}

const std::vector<std::pair<TensorId, Shape>> kWeights = {
    {"conv.W", {kC, 1, kK, kK}}, {"conv.b", {kC}}, {"fc.W", {kFlat, kClasses}}, {"fc.b", {kClasses}}};

std::vector<double>& part(Weights& w, size_t i) { return i == 0 ? w.convW : i == 1 ? w.convB : i == 2 ? w.fcW : w.fcB; }

TEST(TrainingSession, CnnFirstSgdStepMatchesFiniteDifferences) {
  constexpr float kLr = 0.1f;
  auto s = TrainingSession::createFromOnnxModel(cnnModel(), DataFlow(1, {"loss"}), "loss", ConstSGD(kLr), cpu());
  Data d;
  Weights w0 = initialWeights();
  float loss = runStep(*s, d);
  EXPECT_NEAR(loss, lossOf(w0, d.x, d.t), 1e-5);
  WeightsIO io;
  for (const auto& [id, shape] : kWeights) io.insert(id, NDArray(DataType::Float, shape));
  s->readWeights(io);
  const double eps = 1e-6;
  for (size_t p = 0; p < kWeights.size(); ++p) {
    const float* after = io.weight(kWeights[p].first).data<float>();
    for (size_t i = 0; i < part(w0, p).size(); ++i) {
      Weights plus = w0, minus = w0;
      part(plus, p)[i] += eps;
      part(minus, p)[i] -= eps;
      double grad = (lossOf(plus, d.x, d.t) - lossOf(minus, d.x, d.t)) / (2 * eps);
      double update = static_cast<double>(static_cast<float>(part(w0, p)[i])) - after[i];
      EXPECT_NEAR(update, kLr * grad, 2e-6) << kWeights[p].first << "[" << i << "]";
    }
  }
}

TEST(TrainingSession, CnnLossDecreasesWithSgd) {
  SGD opt({{"defaultLearningRate", {0.1f, true}}, {"defaultMomentum", {0.9f, true}}});
  auto s = TrainingSession::createFromOnnxModel(cnnModel(), DataFlow(1, {"loss"}), "loss", opt, cpu());
  Data d;
  std::vector<float> losses;
  for (int step = 0; step < 12; ++step) losses.push_back(runStep(*s, d));
  for (float l : losses) EXPECT_TRUE(std::isfinite(l));
  EXPECT_LT(losses.back(), 0.5f * losses.front()) << ::testing::PrintToString(losses);
}

}  // namespace
}  // namespace graft
