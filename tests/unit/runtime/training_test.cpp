// TrainingSession end to end on a linear model, checked against the same training computed by
// hand in double precision: SGD (momentum, weight decay, nesterov), Adam/AdamW, gradient
// accumulation, hyper-parameter updates without recompiling, and checkpoint/resume.
#include <gtest/gtest.h>

#include <graft/graft.hpp>

#include <cmath>
#include <cstring>
#include <filesystem>
#include <random>

#include "../unit_test_util.hpp"
#include "ir/graph.hpp"
#include "onnx/model_io.hpp"
#include "passes/pass.hpp"
#include "support/thread_pool.hpp"

namespace graft {
namespace {

constexpr int64_t kN = 4, kIn = 3, kOut = 2;

using testing::fromVec;
using testing::randomVec;

// y = x @ W + b; loss = MseLoss(y, t) with the given reduction.
std::string linearModel(const std::string& reduction, int64_t rows = kN) {
  ir::Graph g("linear");
  g.otherOpsets["ai.graft"] = 1;
  ir::Tensor* x = g.addTensor("x", ir::ValueType::tensor(TensorInfo(DataType::Float, Shape{rows, kIn})), ir::TensorKind::Input);
  ir::Tensor* t = g.addTensor("t", ir::ValueType::tensor(TensorInfo(DataType::Float, Shape{rows, kOut})), ir::TensorKind::Input);
  g.addInput(x);
  g.addInput(t);
  ir::Tensor* w = g.addInitializer("W", fromVec(randomVec(kIn * kOut, 1), {kIn, kOut}));
  ir::Tensor* b = g.addInitializer("b", fromVec(randomVec(kOut, 2), {kOut}));
  ir::Node* mm = g.addNode("MatMul", "", {x, w}, {"xw"});
  ir::Node* add = g.addNode("Add", "", {mm->output(0), b}, {"y"});
  ir::Attributes a;
  a.set("reduction", reduction);
  ir::Node* loss = g.addNode("MseLoss", "ai.graft", {add->output(0), t}, {"loss"}, a);
  g.addOutput(loss->output(0));
  passes::PassContext ctx;
  passes::runPipeline(g, {"infer-shapes"}, ctx);  // export writes the outputs' types
  return onnxio::saveModelBytes(g);
}

// The same model and update rules in double precision.
struct Reference {
  std::vector<double> W, b, vW, vb, mW, mb, sW, sb;
  int step = 0;
  Reference() {
    auto w = randomVec(kIn * kOut, 1), bb = randomVec(kOut, 2);
    W.assign(w.begin(), w.end());
    b.assign(bb.begin(), bb.end());
    vW.assign(W.size(), 0);
    vb.assign(b.size(), 0);
    mW = vW;
    mb = vb;
    sW = vW;
    sb = vb;
  }
  // Gradients of loss = scale * sum((xW + b - t)^2) over `rows` rows.
  void grads(const std::vector<float>& x, const std::vector<float>& t, int64_t rows, double scale, std::vector<double>& gW,
             std::vector<double>& gb) const {
    gW.assign(W.size(), 0);
    gb.assign(b.size(), 0);
    for (int64_t r = 0; r < rows; ++r)
      for (int64_t o = 0; o < kOut; ++o) {
        double y = b[o];
        for (int64_t i = 0; i < kIn; ++i) y += x[r * kIn + i] * W[i * kOut + o];
        double dy = 2 * scale * (y - t[r * kOut + o]);
        gb[o] += dy;
        for (int64_t i = 0; i < kIn; ++i) gW[i * kOut + o] += dy * x[r * kIn + i];
      }
  }
  void sgd(const std::vector<double>& gW, const std::vector<double>& gb, double lr, double wd, double mm, bool nesterov) {
    auto upd = [&](std::vector<double>& w, std::vector<double>& v, const std::vector<double>& g) {
      for (size_t i = 0; i < w.size(); ++i) {
        double gi = g[i] + wd * w[i];
        v[i] = mm * v[i] + gi;
        w[i] -= lr * (nesterov ? gi + mm * v[i] : v[i]);
      }
    };
    upd(W, vW, gW);
    upd(b, vb, gb);
  }
  void adam(const std::vector<double>& gW, const std::vector<double>& gb, double lr, double wd, double b1, double b2,
            double eps, bool decoupled) {
    ++step;
    auto upd = [&](std::vector<double>& w, std::vector<double>& m, std::vector<double>& s, const std::vector<double>& g) {
      for (size_t i = 0; i < w.size(); ++i) {
        double gi = decoupled ? g[i] : g[i] + wd * w[i];
        m[i] = b1 * m[i] + (1 - b1) * gi;
        s[i] = b2 * s[i] + (1 - b2) * gi * gi;
        double mc = m[i] / (1 - std::pow(b1, step)), vc = s[i] / (1 - std::pow(b2, step));
        double u = mc / (std::sqrt(vc) + eps) + (decoupled ? wd * w[i] : 0.0);
        w[i] -= lr * u;
      }
    };
    upd(W, mW, sW, gW);
    upd(b, mb, sb, gb);
  }
};

struct Batch {
  std::vector<float> x, t;
};
Batch batchFor(int step, int64_t rows = kN) { return {randomVec(rows * kIn, 100 + step), randomVec(rows * kOut, 200 + step)}; }

void runStep(TrainingSession& s, const Batch& data, Shape xs, Shape ts) {
  std::vector<float> x = data.x, t = data.t;
  auto anchors = s.initAnchorArrays();
  StepIO io({{"x", NDArray::wrap(x.data(), DataType::Float, xs)}, {"t", NDArray::wrap(t.data(), DataType::Float, ts)}}, anchors);
  s.run(io);
}

void expectWeights(TrainingSession& s, const Reference& ref, double tol) {
  WeightsIO io;
  io.insert("W", NDArray(DataType::Float, {kIn, kOut}));
  io.insert("b", NDArray(DataType::Float, {kOut}));
  s.readWeights(io);
  for (size_t i = 0; i < ref.W.size(); ++i) EXPECT_NEAR(io.weight("W").data<float>()[i], ref.W[i], tol) << "W[" << i << "]";
  for (size_t i = 0; i < ref.b.size(); ++i) EXPECT_NEAR(io.weight("b").data<float>()[i], ref.b[i], tol) << "b[" << i << "]";
}

// Both sessions hold the same W and b within `tol`.
void expectSameWeights(TrainingSession& s1, TrainingSession& s2, double tol, const std::string& when) {
  WeightsIO a, b;
  for (WeightsIO* io : {&a, &b}) {
    io->insert("W", NDArray(DataType::Float, {kIn, kOut}));
    io->insert("b", NDArray(DataType::Float, {kOut}));
  }
  s1.readWeights(a);
  s2.readWeights(b);
  for (const char* id : {"W", "b"})
    for (int64_t i = 0; i < a.weight(id).numel(); ++i)
      EXPECT_NEAR(a.weight(id).data<float>()[i], b.weight(id).data<float>()[i], tol) << id << "[" << i << "] " << when;
}

std::shared_ptr<DeviceInfo> cpu() { return DeviceManager::createDeviceManager().createCpuDevice(); }

// Two replicas in one process (each on its own worker thread and core; the gradients summed by
// whichever replica completes each bucket, the optimizer step once) train exactly as one replica
// with twice the micro-batch. make test-tsan runs this under ThreadSanitizer.
TEST(TrainingSession, TwoReplicasTrainAsOneReplicaWithTwiceTheBatch) {
  if (support::ThreadPool::hardwareThreads() < 2)
    GTEST_SKIP() << "two replicas of one kernel thread each need two cores (the session refuses fewer)";
  SGD opt({{"defaultLearningRate", {0.05f, true}}, {"defaultMomentum", {0.9f, true}}});
  SessionOptions o;
  o.enableReplicatedGraphs = true;
  o.replicatedGraphCount = 2;
  o.accumulationAndReplicationReductionType = ReductionType::Mean;
  o.gradientBucketBytes = 0;  // one bucket per gradient: the buckets complete on either replica
  auto dm = DeviceManager::createDeviceManager();
  auto two = TrainingSession::createFromOnnxModel(linearModel("Mean"), DataFlow(1, {"loss"}), "loss", opt,
                                                  dm.createCpuDevice(2, 1), {}, o);
  auto one = TrainingSession::createFromOnnxModel(linearModel("Mean", 2 * kN), DataFlow(1, {"loss"}), "loss", opt,
                                                  dm.createCpuDevice(1, 1));
  two->prepareDevice();
  one->prepareDevice();
  for (int step = 0; step < 4; ++step) {
    Batch d = batchFor(step, 2 * kN);
    runStep(*two, d, {2, kN, kIn}, {2, kN, kOut});  // PopART's layout: the replica dimension first
    runStep(*one, d, {2 * kN, kIn}, {2 * kN, kOut});
    expectSameWeights(*two, *one, 1e-5, "after step " + std::to_string(step));
  }
}

TEST(TrainingSession, SgdWithMomentumAndWeightDecayMatchesHandComputation) {
  for (bool nesterov : {false, true}) {
    SGD opt({{"defaultLearningRate", {0.05f, true}}, {"defaultMomentum", {0.9f, true}}, {"defaultWeightDecay", {0.01f, true}},
             {"nesterov", {nesterov ? 1.0f : 0.0f, true}}});
    auto s = TrainingSession::createFromOnnxModel(linearModel("Mean"), DataFlow(1, {"loss"}), "loss", opt, cpu());
    s->prepareDevice();
    EXPECT_EQ(s->trainedWeightIds(), (std::vector<TensorId>{"W", "b"}));
    Reference ref;
    for (int step = 0; step < 5; ++step) {
      Batch d = batchFor(step);
      runStep(*s, d, {kN, kIn}, {kN, kOut});
      std::vector<double> gW, gb;
      ref.grads(d.x, d.t, kN, 1.0 / (kN * kOut), gW, gb);
      ref.sgd(gW, gb, 0.05, 0.01, 0.9, nesterov);
    }
    expectWeights(*s, ref, 1e-5);
  }
}

TEST(TrainingSession, AdamAndAdamWMatchHandComputation) {
  for (bool decoupled : {true, false}) {
    Adam opt({{"defaultLearningRate", {0.01f, true}}, {"defaultWeightDecay", {0.1f, true}}, {"defaultEps", {1e-8f, true}}},
             AdamMode::Adam, decoupled ? WeightDecayMode::Decay : WeightDecayMode::L2Regularization);
    auto s = TrainingSession::createFromOnnxModel(linearModel("Sum"), DataFlow(1, {"loss"}), "loss", opt, cpu());
    Reference ref;
    for (int step = 0; step < 6; ++step) {
      Batch d = batchFor(step);
      runStep(*s, d, {kN, kIn}, {kN, kOut});
      std::vector<double> gW, gb;
      ref.grads(d.x, d.t, kN, 1.0, gW, gb);
      ref.adam(gW, gb, 0.01, 0.1, 0.9, 0.999, 1e-8, decoupled);
    }
    expectWeights(*s, ref, 1e-5);
  }
}

TEST(TrainingSession, GradientAccumulationEqualsTheLargeBatch) {
  // Two micro-batches of 2 rows with Sum accumulation = one batch of 4 rows with a Sum loss.
  SGD opt({{"defaultLearningRate", {0.02f, true}}, {"defaultMomentum", {0.5f, true}}});
  SessionOptions o;
  o.enableGradientAccumulation = true;
  o.accumulationFactor = 2;
  auto acc = TrainingSession::createFromOnnxModel(linearModel("Sum", 2), DataFlow(1, {"loss"}), "loss", opt, cpu(), {}, o);
  auto big = TrainingSession::createFromOnnxModel(linearModel("Sum", 4), DataFlow(1, {"loss"}), "loss", opt, cpu());
  EXPECT_EQ(acc->inputArrayShape("x"), (Shape{2, 2, kIn}));
  EXPECT_EQ(acc->anchorArrayShape("loss"), (Shape{2}));
  for (int step = 0; step < 3; ++step) {
    Batch d = batchFor(step);
    runStep(*acc, d, {2, 2, kIn}, {2, 2, kOut});
    runStep(*big, d, {4, kIn}, {4, kOut});
  }
  expectSameWeights(*acc, *big, 1e-5, "after 3 steps");
}

TEST(TrainingSession, NonConstantLearningRateChangesWithoutRecompiling) {
  SGD opt({{"defaultLearningRate", {0.05f, false}}});
  auto s = TrainingSession::createFromOnnxModel(linearModel("Mean"), DataFlow(1, {"loss"}), "loss", opt, cpu());
  Reference ref;
  for (int step = 0; step < 4; ++step) {
    double lr = step < 2 ? 0.05 : 0.2;
    if (step == 2) s->updateOptimizerFromHost(SGD({{"defaultLearningRate", {0.2f, false}}}));
    Batch d = batchFor(step);
    runStep(*s, d, {kN, kIn}, {kN, kOut});
    std::vector<double> gW, gb;
    ref.grads(d.x, d.t, kN, 1.0 / (kN * kOut), gW, gb);
    ref.sgd(gW, gb, lr, 0, 0, false);
  }
  expectWeights(*s, ref, 1e-5);
  // A constant hyper-parameter cannot change.
  auto c = TrainingSession::createFromOnnxModel(linearModel("Mean"), DataFlow(1, {"loss"}), "loss", ConstSGD(0.1f), cpu());
  EXPECT_THROW(c->updateOptimizerFromHost(ConstSGD(0.2f)), Error);
  EXPECT_THROW(c->updateOptimizerFromHost(Adam()), Error);
}

TEST(TrainingSession, ResumeFromCheckpointIsBitIdentical) {
  Adam opt({{"defaultLearningRate", {0.01f, true}}});
  auto full = TrainingSession::createFromOnnxModel(linearModel("Mean"), DataFlow(1, {"loss"}), "loss", opt, cpu());
  auto first = TrainingSession::createFromOnnxModel(linearModel("Mean"), DataFlow(1, {"loss"}), "loss", opt, cpu());
  for (int step = 0; step < 4; ++step) runStep(*full, batchFor(step), {kN, kIn}, {kN, kOut});
  for (int step = 0; step < 2; ++step) runStep(*first, batchFor(step), {kN, kIn}, {kN, kOut});
  std::string path = (std::filesystem::temp_directory_path() / "graft_checkpoint_test.onnx").string();
  first->modelToHost(path);
  auto resumed = TrainingSession::createFromOnnxModel(path, DataFlow(1, {"loss"}), "loss", opt, cpu());
  for (int step = 2; step < 4; ++step) runStep(*resumed, batchFor(step), {kN, kIn}, {kN, kOut});
  std::filesystem::remove(path);
  WeightsIO a, b;
  for (auto* io : {&a, &b}) {
    io->insert("W", NDArray(DataType::Float, {kIn, kOut}));
    io->insert("Accl1___W", NDArray(DataType::Float, {kIn, kOut}));
    io->insert("Accl2___W", NDArray(DataType::Float, {kIn, kOut}));
    io->insert("Step___W", NDArray(DataType::Float, {}));
  }
  full->readWeights(a);
  resumed->readWeights(b);
  for (const auto& [id, arr] : a.arrays())
    EXPECT_EQ(0, std::memcmp(arr.rawData(), b.weight(id).rawData(), arr.nbytes())) << id << " differs after resuming";
  EXPECT_EQ(b.weight("Step___W").data<float>()[0], 4.0f);
}

TEST(TrainingSession, ResumedSessionUsesItsOwnOptimizerValues) {
  // The checkpoint holds learningRate___W = 0.05 (non-constant); a session created from it with
  // learning rate 0 must not move the weights.
  SGD opt({{"defaultLearningRate", {0.05f, false}}, {"lossScaling", {4.0f, false}}});
  auto first = TrainingSession::createFromOnnxModel(linearModel("Mean"), DataFlow(1, {"loss"}), "loss", opt, cpu());
  runStep(*first, batchFor(0), {kN, kIn}, {kN, kOut});
  std::string path = (std::filesystem::temp_directory_path() / "graft_checkpoint_lr_test.onnx").string();
  first->modelToHost(path);
  SGD frozen({{"defaultLearningRate", {0.0f, false}}, {"lossScaling", {2.0f, false}}});
  auto resumed = TrainingSession::createFromOnnxModel(path, DataFlow(1, {"loss"}), "loss", frozen, cpu());
  std::filesystem::remove(path);
  WeightsIO before, after;
  for (auto* io : {&before, &after}) io->insert("W", NDArray(DataType::Float, {kIn, kOut}));
  resumed->prepareDevice();
  resumed->readWeights(before);
  runStep(*resumed, batchFor(1), {kN, kIn}, {kN, kOut});
  resumed->readWeights(after);
  EXPECT_EQ(0, std::memcmp(before.weight("W").rawData(), after.weight("W").rawData(), before.weight("W").nbytes()));
}

TEST(TrainingSession, GradientsCanBeAnchored) {
  auto s = TrainingSession::createFromOnnxModel(linearModel("Mean"), DataFlow(1, std::vector<TensorId>{"loss", "Gradient___b"}), "loss",
                                                ConstSGD(0.0f), cpu());
  s->prepareDevice();
  EXPECT_EQ(s->anchorArrayShape("Gradient___b"), (Shape{kOut}));
  Batch d = batchFor(0);
  std::vector<float> x = d.x, t = d.t;
  auto anchors = s->initAnchorArrays();
  StepIO io({{"x", NDArray::wrap(x.data(), DataType::Float, {kN, kIn})}, {"t", NDArray::wrap(t.data(), DataType::Float, {kN, kOut})}},
            anchors);
  s->run(io);
  Reference ref;
  std::vector<double> gW, gb;
  ref.grads(d.x, d.t, kN, 1.0 / (kN * kOut), gW, gb);
  for (int64_t o = 0; o < kOut; ++o) EXPECT_NEAR(anchors.at("Gradient___b").data<float>()[o], gb[o], 1e-5);
}

TEST(TrainingSession, ClearErrors) {
  EXPECT_THROW(TrainingSession::createFromOnnxModel(linearModel("Mean"), DataFlow(1, {"loss"}), "nope", ConstSGD(0.1f), cpu()),
               Error);
  EXPECT_THROW(TrainingSession::createFromOnnxModel(linearModel("Mean"), DataFlow(1, std::vector<TensorId>{"Gradient___nope"}), "loss",
                                                    ConstSGD(0.1f), cpu()),
               Error);
  try {
    TrainingSession::createFromOnnxModel(linearModel("None"), DataFlow(1, {"loss"}), "loss", ConstSGD(0.1f), cpu())->prepareDevice();
    FAIL() << "a non-scalar loss must be rejected";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("scalar"), std::string::npos) << e.what();
  }
  EXPECT_THROW(SGD({{"defaultLearningRat", {0.1f, true}}}), Error);
}

}  // namespace
}  // namespace graft
