// Sharding and pipelining: split and pipelined inference against the unsplit model, the
// validation errors of annotations and options, Auto mode, the timeline, errors raised inside a
// stage, and pipelined training with gradient accumulation against unpipelined training.
#include <gtest/gtest.h>

#include <graft/graft.hpp>

#include <cmath>
#include <fstream>
#include <random>
#include <regex>
#include <sstream>

#include "../unit_test_util.hpp"
#include "ir/graph.hpp"
#include "onnx/model_io.hpp"
#include "passes/pass.hpp"
#include "runtime/pipeline.hpp"

namespace graft {
namespace {

using testing::errorOf;

using testing::fromVec;
using testing::randomVec;

struct Place {
  std::optional<int64_t> vg, stage;
};

// An MLP of `layers.size()` layers (MatMul, Add, Relu; the last without Relu) on x [rows, 8], plus
// a skip connection: out = last + first layer's activation (both 8 wide). layers[i] places layer
// i's ops. With `loss`, an ai.graft MseLoss against t in the last layer's place.
std::string mlp(const std::vector<Place>& layers, int64_t rows, bool loss = false, bool skip = true) {
  constexpr int64_t kW = 8;
  ir::Graph g("mlp");
  g.otherOpsets["ai.graft"] = 1;
  ir::Tensor* x =
      g.addTensor("x", ir::ValueType::tensor(TensorInfo(DataType::Float, Shape{rows, kW})), ir::TensorKind::Input);
  g.addInput(x);
  ir::Tensor* t = nullptr;
  if (loss) {
    t = g.addTensor("t", ir::ValueType::tensor(TensorInfo(DataType::Float, Shape{rows, kW})), ir::TensorKind::Input);
    g.addInput(t);
  }
  ir::Tensor* h = x;
  ir::Tensor* firstAct = nullptr;
  auto place = [](ir::Node* n, const Place& p) {
    n->virtualGraph = p.vg;
    n->pipelineStage = p.stage;
  };
  for (size_t i = 0; i < layers.size(); ++i) {
    std::string s = std::to_string(i);
    ir::Tensor* w = g.addInitializer("W" + s, fromVec(randomVec(kW * kW, 10 + i, 0.5f), {kW, kW}));
    ir::Tensor* b = g.addInitializer("b" + s, fromVec(randomVec(kW, 20 + i, 0.1f), {kW}));
    ir::Node* mm = g.addNode("MatMul", "", {h, w}, {"mm" + s}, {}, "matmul" + s);
    ir::Node* add = g.addNode("Add", "", {mm->output(0), b}, {"add" + s}, {}, "add" + s);
    place(mm, layers[i]);
    place(add, layers[i]);
    h = add->output(0);
    if (i + 1 < layers.size()) {
      ir::Node* r = g.addNode("Relu", "", {h}, {"relu" + s}, {}, "relu" + s);
      place(r, layers[i]);
      h = r->output(0);
      if (!firstAct) firstAct = h;
    }
  }
  if (skip && firstAct) {
    ir::Node* sum = g.addNode("Add", "", {h, firstAct}, {"skip"}, {}, "skip");
    place(sum, layers.back());
    h = sum->output(0);
  }
  ir::Node* id = g.addNode("Identity", "", {h}, {"y"}, {}, "out");
  place(id, layers.back());
  g.addOutput(id->output(0));
  if (loss) {
    ir::Attributes a;
    a.set("reduction", std::string("Mean"));
    ir::Node* l = g.addNode("MseLoss", "ai.graft", {id->output(0), t}, {"loss"}, a, "mse");
    place(l, layers.back());
    g.addOutput(l->output(0));
  }
  passes::PassContext ctx;
  passes::runPipeline(g, {"infer-shapes"}, ctx);
  return onnxio::saveModelBytes(g);
}

std::shared_ptr<DeviceInfo> cpu(int n = 1) { return DeviceManager::createDeviceManager().createCpuDevice(n); }

SessionOptions staged(VirtualGraphMode mode, bool pipelining) {
  SessionOptions o;
  o.virtualGraphMode = mode;
  o.enablePipelining = pipelining;
  return o;
}

// Runs one step of `bps` micro-batches of x [rows, 8] and returns the "y" anchor (All).
std::vector<float> infer(const std::string& model, std::shared_ptr<DeviceInfo> dev, const SessionOptions& o, int bps,
                         int64_t rows, uint32_t seed = 7) {
  auto s = InferenceSession::createFromOnnxModel(model, DataFlow(bps, {"y"}), dev, {}, o);
  s->prepareDevice();
  std::vector<float> x = randomVec(static_cast<size_t>(bps * rows * 8), seed);
  Shape xs = bps > 1 ? Shape{bps, rows, 8} : Shape{rows, 8};
  auto anchors = s->initAnchorArrays();
  StepIO io({{"x", NDArray::wrap(x.data(), DataType::Float, xs)}}, anchors);
  s->run(io);
  const NDArray& y = anchors.at("y");
  return std::vector<float>(y.data<float>(), y.data<float>() + y.numel());
}

void expectClose(const std::vector<float>& a, const std::vector<float>& b, float tol = 1e-5f) {
  ASSERT_EQ(a.size(), b.size());
  for (size_t i = 0; i < a.size(); ++i) ASSERT_NEAR(a[i], b[i], tol) << "element " << i;
}

// The cores of one host are split among its processes (distributed replication, replication.cpp):
// process k of n takes the k-th run of count x threads CPUs, and nobody is pinned when they are
// too few for all n.
TEST(Pipeline, CpuBlocksOfSeveralProcessesOnOneHostAreDisjoint) {
  using graft::pipeline::VirtualDevices;
  cpu_set_t set;
  CPU_ZERO(&set);
  ASSERT_EQ(sched_getaffinity(0, sizeof(set), &set), 0);
  std::vector<int> cpus;
  for (int c = 0; c < CPU_SETSIZE; ++c)
    if (CPU_ISSET(c, &set)) cpus.push_back(c);
  const int n = static_cast<int>(cpus.size());
  for (int share = 0; share < n; ++share) {
    auto blocks = VirtualDevices::cpuBlocks(1, 1, share, n);
    ASSERT_EQ(blocks.size(), 1u);
    EXPECT_EQ(blocks[0], std::vector<int>{cpus[share]}) << "process " << share << " of " << n;
  }
  // One more process than CPUs: no process is pinned.
  for (const auto& b : VirtualDevices::cpuBlocks(1, 1, 0, n + 1)) EXPECT_TRUE(b.empty());
  // Out-of-range shares pin nothing.
  for (const auto& b : VirtualDevices::cpuBlocks(1, 1, n, n)) EXPECT_TRUE(b.empty());
  // The default (one process) starts at the first CPU.
  EXPECT_EQ(VirtualDevices::cpuBlocks(1, 1)[0], std::vector<int>{cpus[0]});
}

TEST(Pipeline, PipelinedInferenceEqualsTheUnsplitModel) {
  std::string model = mlp({{0, 0}, {1, 1}, {1, 1}}, 4);
  auto ref = infer(model, cpu(), {}, 8, 4);
  auto got = infer(model, cpu(2), staged(VirtualGraphMode::Manual, true), 8, 4);
  expectClose(got, ref);
  // Three stages on three virtual devices, the skip connection crossing two stages.
  std::string three = mlp({{0, 0}, {1, 1}, {2, 2}}, 4);
  expectClose(infer(three, cpu(3), staged(VirtualGraphMode::Manual, true), 8, 4), infer(three, cpu(), {}, 8, 4));
  // Stages default to the virtual graphs; one micro-batch per step; fewer micro-batches than stages.
  std::string vgOnly = mlp({{0, {}}, {1, {}}, {2, {}}}, 2);
  expectClose(infer(vgOnly, cpu(3), staged(VirtualGraphMode::Manual, true), 1, 2), infer(vgOnly, cpu(), {}, 1, 2));
  expectClose(infer(vgOnly, cpu(3), staged(VirtualGraphMode::Manual, true), 2, 2), infer(vgOnly, cpu(), {}, 2, 2));
}

TEST(Pipeline, ShardedInferenceEqualsTheUnsplitModel) {
  // Without pipelining, the virtual graphs may go back and forth (0 -> 1 -> 0).
  std::string model = mlp({{0, {}}, {1, {}}, {0, {}}}, 3);
  expectClose(infer(model, cpu(2), staged(VirtualGraphMode::Manual, false), 5, 3), infer(model, cpu(), {}, 5, 3));
  // The reference device too.
  auto refDev = DeviceManager::createDeviceManager().createReferenceDevice(2);
  expectClose(infer(model, refDev, staged(VirtualGraphMode::Manual, false), 2, 3), infer(model, cpu(), {}, 2, 3));
}

TEST(Pipeline, AnchorReturnTypesAndStagesText) {
  std::string model = mlp({{0, 0}, {1, 1}}, 2);
  for (const char* art : {"Sum", "Final", "EVERYN"}) {
    AnchorReturnTypeMap m{{"y", std::string(art) == "EVERYN" ? AnchorReturnType("EVERYN", 2) : AnchorReturnType(art)}};
    std::vector<float> x = randomVec(6 * 2 * 8, 3);
    std::vector<std::vector<float>> results;
    for (bool split : {false, true}) {
      auto s = InferenceSession::createFromOnnxModel(model, DataFlow(6, m), split ? cpu(2) : cpu(), {},
                                                     split ? staged(VirtualGraphMode::Manual, true) : SessionOptions{});
      auto anchors = s->initAnchorArrays();
      StepIO io({{"x", NDArray::wrap(x.data(), DataType::Float, {6, 2, 8})}}, anchors);
      s->run(io);
      const NDArray& y = anchors.at("y");
      results.emplace_back(y.data<float>(), y.data<float>() + y.numel());
      if (split) {
        std::string text = s->stagesText();
        EXPECT_NE(text.find("stage 0"), std::string::npos) << text;
        EXPECT_NE(text.find("stage 1"), std::string::npos) << text;
        EXPECT_NE(s->graphText().find("# program 1"), std::string::npos);
      }
    }
    expectClose(results[1], results[0], 1e-4f);
  }
}

TEST(Pipeline, AutoModeSplitsByCostAndMatches) {
  std::string model = mlp({{}, {}, {}, {}}, 4);  // no annotations
  for (bool pipelining : {false, true}) {
    SessionOptions o = staged(VirtualGraphMode::Auto, pipelining);
    expectClose(infer(model, cpu(2), o, 4, 4), infer(model, cpu(), {}, 4, 4));
  }
  auto s = InferenceSession::createFromOnnxModel(model, DataFlow(1, {"y"}), cpu(2), {},
                                                 staged(VirtualGraphMode::Auto, true));
  s->prepareDevice();
  std::string text = s->stagesText();
  EXPECT_NE(text.find("stage 1"), std::string::npos) << text;
  EXPECT_EQ(text.find("stage 2"), std::string::npos) << text;
}

TEST(Pipeline, ValidationErrorsNameTheNode) {
  // Manual mode: every op needs a virtual graph.
  std::string partial = mlp({{0, 0}, {}}, 2);
  std::string msg = errorOf([&] {
    InferenceSession::createFromOnnxModel(partial, DataFlow(1, {"y"}), cpu(2), {},
                                          staged(VirtualGraphMode::Manual, false));
  });
  EXPECT_NE(msg.find("no virtual graph"), std::string::npos) << msg;
  EXPECT_NE(msg.find("matmul1"), std::string::npos) << msg;
  // More virtual graphs than the device has.
  std::string wide = mlp({{0, 0}, {2, 1}}, 2);
  msg = errorOf([&] {
    InferenceSession::createFromOnnxModel(wide, DataFlow(1, {"y"}), cpu(2), {}, staged(VirtualGraphMode::Manual, true));
  });
  EXPECT_NE(msg.find("virtual graph 2"), std::string::npos) << msg;
  EXPECT_NE(msg.find("has 2 virtual devices"), std::string::npos) << msg;
  EXPECT_NE(msg.find("matmul1"), std::string::npos) << msg;
  // A stage reading a tensor of a later stage.
  std::string backwards = mlp({{1, 1}, {0, 0}}, 2);
  msg = errorOf([&] {
    InferenceSession::createFromOnnxModel(backwards, DataFlow(1, {"y"}), cpu(2), {},
                                          staged(VirtualGraphMode::Manual, true));
  });
  EXPECT_NE(msg.find("later stage"), std::string::npos) << msg;
  EXPECT_NE(msg.find("matmul1"), std::string::npos) << msg;
  // ... which sharding alone allows.
  EXPECT_EQ(errorOf([&] {
              InferenceSession::createFromOnnxModel(backwards, DataFlow(1, {"y"}), cpu(2), {},
                                                    staged(VirtualGraphMode::Manual, false));
            }),
            "");
  // Stages on some ops only; a stage on two virtual graphs.
  std::string mixed = mlp({{0, 0}, {1, {}}}, 2);
  msg = errorOf([&] {
    InferenceSession::createFromOnnxModel(mixed, DataFlow(1, {"y"}), cpu(2), {},
                                          staged(VirtualGraphMode::Manual, true));
  });
  EXPECT_NE(msg.find("matmul1"), std::string::npos) << msg;
  std::string split = mlp({{0, 0}, {1, 0}}, 2);
  msg = errorOf([&] {
    InferenceSession::createFromOnnxModel(split, DataFlow(1, {"y"}), cpu(2), {},
                                          staged(VirtualGraphMode::Manual, true));
  });
  EXPECT_NE(msg.find("two virtual graphs"), std::string::npos) << msg;
  // Pipelining needs a virtual graph mode.
  msg = errorOf([&] {
    InferenceSession::createFromOnnxModel(mlp({{0, 0}}, 2), DataFlow(1, {"y"}), cpu(), {},
                                          staged(VirtualGraphMode::Off, true));
  });
  EXPECT_NE(msg.find("enablePipelining"), std::string::npos) << msg;
  // Pipelined training needs accumulationFactor >= stages.
  std::string train = mlp({{0, 0}, {1, 1}, {2, 2}}, 2, true);
  SessionOptions o = staged(VirtualGraphMode::Manual, true);
  o.enableGradientAccumulation = true;
  o.accumulationFactor = 2;
  msg = errorOf([&] {
    TrainingSession::createFromOnnxModel(train, DataFlow(1, {"loss"}), "loss", ConstSGD(0.1f), cpu(3), {}, o);
  });
  EXPECT_NE(msg.find("accumulationFactor >= 3"), std::string::npos) << msg;
  EXPECT_NE(msg.find("got 2"), std::string::npos) << msg;
}

TEST(Pipeline, ErrorsInsideAStageReachTheCaller) {
  // Gather in stage 1 with indices from the host: a bad index fails on virtual device 1.
  ir::Graph g("gather");
  ir::Tensor* x =
      g.addTensor("x", ir::ValueType::tensor(TensorInfo(DataType::Float, Shape{4, 3})), ir::TensorKind::Input);
  ir::Tensor* idx =
      g.addTensor("i", ir::ValueType::tensor(TensorInfo(DataType::Int64, Shape{2})), ir::TensorKind::Input);
  g.addInput(x);
  g.addInput(idx);
  ir::Node* r = g.addNode("Relu", "", {x}, {"r"}, {}, "relu");
  r->virtualGraph = 0;
  ir::Node* ga = g.addNode("Gather", "", {r->output(0), idx}, {"y"}, {}, "gather");
  ga->virtualGraph = 1;
  g.addOutput(ga->output(0));
  passes::PassContext ctx;
  passes::runPipeline(g, {"infer-shapes"}, ctx);
  auto s = InferenceSession::createFromOnnxModel(onnxio::saveModelBytes(g), DataFlow(4, {"y"}), cpu(2), {},
                                                 staged(VirtualGraphMode::Manual, true));
  std::vector<float> xs(4 * 4 * 3, 1.0f);
  for (int64_t bad : {int64_t{9}, int64_t{1}}) {
    std::vector<int64_t> is(4 * 2, 1);
    is[5] = bad;  // micro-batch 2
    auto anchors = s->initAnchorArrays();
    StepIO io({{"x", NDArray::wrap(xs.data(), DataType::Float, {4, 4, 3})},
               {"i", NDArray::wrap(is.data(), DataType::Int64, {4, 2})}},
              anchors);
    std::string msg = errorOf([&] { s->run(io); });
    if (bad == 9) {
      EXPECT_NE(msg.find("gather"), std::string::npos) << msg;
    } else {
      EXPECT_EQ(msg, "");  // the session still works after the failed step
      EXPECT_FLOAT_EQ(anchors.at("y").data<float>()[0], 1.0f);
    }
  }
}

TEST(Pipeline, TimelineIsAChromeTrace) {
  testing::TempDir dir;
  SessionOptions o = staged(VirtualGraphMode::Manual, true);
  o.timelinePath = dir.file("trace_{step}.json");
  std::string model = mlp({{0, 0}, {1, 1}}, 2);
  auto s = InferenceSession::createFromOnnxModel(model, DataFlow(4, {"y"}), cpu(2), {}, o);
  std::vector<float> x = randomVec(4 * 2 * 8, 1);
  for (int step = 0; step < 2; ++step) {
    auto anchors = s->initAnchorArrays();
    StepIO io({{"x", NDArray::wrap(x.data(), DataType::Float, {4, 2, 8})}}, anchors);
    s->run(io);
  }
  std::string json = s->timelineJson();
  EXPECT_NE(json.find("\"traceEvents\""), std::string::npos);
  EXPECT_NE(json.find("virtual device 1"), std::string::npos);
  EXPECT_NE(json.find("\"microBatch\":3"), std::string::npos);
  EXPECT_NE(json.find("\"idle\""), std::string::npos);
  std::ifstream f(dir.file("trace_1.json"));
  ASSERT_TRUE(f.good());
  std::stringstream ss;
  ss << f.rdbuf();
  EXPECT_NE(ss.str().find("stage 1"), std::string::npos);
}

// ---- training ----------------------------------------------------------------------------------

struct TrainResult {
  std::vector<float> losses;
  std::map<std::string, std::vector<float>> weights;
};

TrainResult train(const std::string& model, const Optimizer& opt, std::shared_ptr<DeviceInfo> dev, SessionOptions o,
                  int accum, int bps, int steps, int64_t rows) {
  o.enableGradientAccumulation = accum > 1;
  o.accumulationFactor = accum;
  auto s = TrainingSession::createFromOnnxModel(model, DataFlow(bps, {{"loss", AnchorReturnType("All")}}), "loss", opt,
                                                dev, {}, o);
  TrainResult r;
  for (int step = 0; step < steps; ++step) {
    size_t n = static_cast<size_t>(bps * accum * rows * 8);
    std::vector<float> x = randomVec(n, 100 + step), t = randomVec(n, 200 + step);
    Shape lead;
    if (bps > 1) lead.push_back(bps);
    if (accum > 1) lead.push_back(accum);
    Shape xs = lead;
    xs.push_back(rows);
    xs.push_back(8);
    auto anchors = s->initAnchorArrays();
    StepIO io(
        {{"x", NDArray::wrap(x.data(), DataType::Float, xs)}, {"t", NDArray::wrap(t.data(), DataType::Float, xs)}},
        anchors);
    s->run(io);
    const NDArray& l = anchors.at("loss");
    r.losses.insert(r.losses.end(), l.data<float>(), l.data<float>() + l.numel());
  }
  WeightsIO w;
  for (const auto& id : s->trainedWeightIds()) {
    TensorInfo info = s->getInfo(id);
    w.insert(id, NDArray(info.dataType(), info.shape()));
  }
  s->readWeights(w);
  for (const auto& [id, a] : w.arrays())
    r.weights[id] = std::vector<float>(a.data<float>(), a.data<float>() + a.numel());
  return r;
}

void expectSameTraining(const TrainResult& got, const TrainResult& ref) {
  expectClose(got.losses, ref.losses, 1e-5f);
  ASSERT_EQ(got.weights.size(), ref.weights.size());
  for (const auto& [id, w] : ref.weights) {
    SCOPED_TRACE(id);
    expectClose(got.weights.at(id), w, 1e-5f);
  }
}

TEST(PipelineTraining, MatchesUnpipelinedAccumulationWithSgdAndAdam) {
  std::string model = mlp({{0, 0}, {1, 1}, {1, 1}}, 2, true);
  SGD sgd({{"defaultLearningRate", {0.05f, true}}, {"defaultMomentum", {0.9f, true}}});
  Adam adam({{"defaultLearningRate", {0.01f, true}}});
  for (const Optimizer* opt : {static_cast<const Optimizer*>(&sgd), static_cast<const Optimizer*>(&adam)}) {
    SCOPED_TRACE(opt->str());
    TrainResult ref = train(model, *opt, cpu(), {}, 4, 2, 3, 2);
    for (auto recompute : {RecomputationType::None, RecomputationType::Standard}) {
      SessionOptions o = staged(VirtualGraphMode::Manual, true);
      o.autoRecomputation = recompute;
      expectSameTraining(train(model, *opt, cpu(2), o, 4, 2, 3, 2), ref);
    }
  }
}

TEST(PipelineTraining, ShardedTrainingWithoutAccumulationMatches) {
  std::string model = mlp({{0, {}}, {1, {}}, {0, {}}}, 3, true);
  SGD sgd({{"defaultLearningRate", {0.05f, true}}});
  TrainResult ref = train(model, sgd, cpu(), {}, 1, 3, 2, 3);
  expectSameTraining(train(model, sgd, cpu(2), staged(VirtualGraphMode::Manual, false), 1, 3, 2, 3), ref);
}

TEST(PipelineTraining, AutoModeTrainsLikeUnsplit) {
  std::string model = mlp({{}, {}, {}}, 2, true);
  Adam adam({{"defaultLearningRate", {0.01f, true}}});
  TrainResult ref = train(model, adam, cpu(), {}, 3, 1, 2, 2);
  expectSameTraining(train(model, adam, cpu(2), staged(VirtualGraphMode::Auto, true), 3, 1, 2, 2), ref);
}

}  // namespace
}  // namespace graft

namespace graft {
namespace {

TEST(PipelineTraining, ForwardAndBackwardProgramsPerStage) {
  std::string model = mlp({{0, 0}, {1, 1}, {1, 1}}, 2, true);
  for (auto recompute : {RecomputationType::None, RecomputationType::Standard}) {
    SessionOptions o = staged(VirtualGraphMode::Manual, true);
    o.enableGradientAccumulation = true;
    o.accumulationFactor = 2;
    o.autoRecomputation = recompute;
    auto s = TrainingSession::createFromOnnxModel(model, DataFlow(1, {"loss"}), "loss", ConstSGD(0.1f), cpu(2), {}, o);
    s->prepareDevice();
    std::string text = s->stagesText();
    EXPECT_NE(text.find("0: stage 0 (forward)"), std::string::npos) << text;
    EXPECT_NE(text.find("1: stage 1 (forward and backward)"), std::string::npos) << text;
    EXPECT_NE(text.find("2: stage 0 (backward)"), std::string::npos) << text;
    // Recomputation: the backward program of stage 0 runs forward ops again ("ops+recomputed").
    bool recomputed = std::regex_search(text, std::regex(R"( [0-9]+\+[0-9]+ )"));
    EXPECT_EQ(recomputed, recompute != RecomputationType::None) << text;
  }
}

}  // namespace
}  // namespace graft

namespace graft {
namespace {

// An LSTM on virtual device 0 feeding a MatMul on device 1 (oneDNN's RNN primitives keep
// per-thread state: kernels are compiled on the worker that runs them).
TEST(Pipeline, LstmStageMatchesUnsplit) {
  constexpr int64_t T = 5, N = 2, I = 4, H = 6;
  ir::Graph g("lstm");
  ir::Tensor* x =
      g.addTensor("x", ir::ValueType::tensor(TensorInfo(DataType::Float, Shape{T, N, I})), ir::TensorKind::Input);
  g.addInput(x);
  ir::Tensor* w = g.addInitializer("W", fromVec(randomVec(4 * H * I, 1, 0.4f), {1, 4 * H, I}));
  ir::Tensor* r = g.addInitializer("R", fromVec(randomVec(4 * H * H, 2, 0.4f), {1, 4 * H, H}));
  ir::Tensor* p = g.addInitializer("P", fromVec(randomVec(H * 3, 3, 0.4f), {H, 3}));
  ir::Attributes a;
  a.set("hidden_size", int64_t{H});
  ir::Node* lstm = g.addNode("LSTM", "", {x, w, r}, {"ys"}, a, "lstm");
  lstm->virtualGraph = 0;
  ir::Node* mm = g.addNode("MatMul", "", {lstm->output(0), p}, {"y"}, {}, "proj");
  mm->virtualGraph = 1;
  g.addOutput(mm->output(0));
  passes::PassContext ctx;
  passes::runPipeline(g, {"infer-shapes"}, ctx);
  std::string model = onnxio::saveModelBytes(g);
  auto run = [&](std::shared_ptr<DeviceInfo> dev, const SessionOptions& o) {
    auto s = InferenceSession::createFromOnnxModel(model, DataFlow(3, {"y"}), dev, {}, o);
    std::vector<float> xs = randomVec(3 * T * N * I, 9);
    auto anchors = s->initAnchorArrays();
    StepIO io({{"x", NDArray::wrap(xs.data(), DataType::Float, {3, T, N, I})}}, anchors);
    s->run(io);
    const NDArray& y = anchors.at("y");
    return std::vector<float>(y.data<float>(), y.data<float>() + y.numel());
  };
  expectClose(run(cpu(2), staged(VirtualGraphMode::Manual, true)), run(cpu(), {}), 1e-5f);
}

}  // namespace
}  // namespace graft
