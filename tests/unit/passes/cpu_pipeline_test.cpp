// The cpu inference pipeline (cse, fold-batchnorm, fuse-layernorm, fuse-gelu, fuse-conv,
// fuse-matmul, constant-weights, cpu-layout, fuse-elementwise) on small convolutional and dense models: the graph it
// produces, and its results on the cpu backend against the original graph on the reference backend. Sessions: weights
// written after compilation reach the packed kernels.
#include <gtest/gtest.h>

#include <graft/graft.hpp>

#include <cstdlib>
#include <map>
#include <random>

#include "backends/backend.hpp"
#include "backends/cpu/onednn_common.hpp"
#include "backends/cpu/reorder_stats.hpp"
#include "ir/graph.hpp"
#include "onnx/model_io.hpp"
#include "passes/pass.hpp"
#include "plan/executable.hpp"
#include "support/cpu_features.hpp"

namespace graft {
namespace {

NDArray randomArray(Shape s, uint32_t seed, float lo = -1, float hi = 1) {
  NDArray a(DataType::Float, std::move(s));
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> u(lo, hi);
  for (int64_t i = 0; i < a.numel(); ++i) a.data<float>()[i] = u(rng);
  return a;
}

struct Builder {
  ir::Graph g{"model"};
  uint32_t seed = 100;
  ir::Tensor* input(const std::string& id, Shape s) {
    ir::Tensor* t = g.addTensor(id, ir::ValueType::tensor(TensorInfo(DataType::Float, s)), ir::TensorKind::Input);
    g.addInput(t);
    return t;
  }
  ir::Tensor* weight(Shape s, float lo = -0.5f, float hi = 0.5f) {
    return g.addInitializer(g.uniqueId("w"), randomArray(std::move(s), seed++, lo, hi));
  }
  ir::Tensor* op(const std::string& type, std::vector<ir::Tensor*> in, ir::Attributes a = {},
                 const std::string& domain = "") {
    return g.addNode(type, domain, in, {g.uniqueId(type)}, std::move(a))->output(0);
  }
  ir::Tensor* conv(ir::Tensor* x, int64_t cin, int64_t cout, int64_t k, int64_t stride, int64_t group = 1) {
    ir::Attributes a;
    int64_t p = k / 2;
    a.set("pads", std::vector<int64_t>{p, p, p, p});
    a.set("strides", std::vector<int64_t>{stride, stride});
    a.set("group", group);
    return op("Conv", {x, weight({cout, cin / group, k, k}), weight({cout})}, a);
  }
  ir::Tensor* bn(ir::Tensor* x, int64_t c) {
    return op("BatchNormalization", {x, weight({c}, 0.5f, 1.5f), weight({c}), weight({c}), weight({c}, 0.5f, 2.f)});
  }
};

// A small ResNet/MobileNet/SqueezeNet mix: stem conv, a residual block, a depthwise conv with
// ReLU6, a fire-style concat, pooling and a classifier.
std::unique_ptr<ir::Graph> convModel(int64_t batch) {
  auto b = std::make_unique<Builder>();
  ir::Tensor* x = b->input("x", {batch, 3, 16, 16});
  ir::Tensor* s = b->op("Relu", {b->bn(b->conv(x, 3, 16, 3, 1), 16)});
  ir::Tensor* r = b->op("Relu", {b->bn(b->conv(s, 16, 16, 3, 1), 16)});
  r = b->bn(b->conv(r, 16, 16, 3, 1), 16);
  r = b->op("Relu", {b->op("Add", {r, s})});
  ir::Attributes mp;
  mp.set("kernel_shape", std::vector<int64_t>{2, 2});
  mp.set("strides", std::vector<int64_t>{2, 2});
  r = b->op("MaxPool", {r}, mp);
  ir::Tensor* lo = b->g.addInitializer("lo", NDArray::scalar<float>(DataType::Float, 0.f), ir::TensorKind::Constant);
  ir::Tensor* hi = b->g.addInitializer("hi", NDArray::scalar<float>(DataType::Float, 6.f), ir::TensorKind::Constant);
  ir::Tensor* d = b->op("Clip", {b->bn(b->conv(r, 16, 16, 3, 1, 16), 16), lo, hi});
  ir::Tensor* e1 = b->op("Relu", {b->conv(d, 16, 16, 1, 1)});
  ir::Tensor* e3 = b->op("Relu", {b->conv(d, 16, 12, 3, 1)});
  ir::Attributes cat;
  cat.set("axis", int64_t{1});
  ir::Tensor* c = b->op("Concat", {e1, e3}, cat);
  ir::Tensor* gp = b->op("GlobalAveragePool", {c});
  ir::Tensor* f = b->op("Flatten", {gp});
  ir::Attributes gm;
  gm.set("transB", int64_t{1});
  ir::Tensor* y = b->op("Relu", {b->op("Gemm", {f, b->weight({10, 28}), b->weight({10})}, gm)});
  b->g.addOutput(b->op("Softmax", {y}));
  return ir::cloneGraph(b->g);
}

// An MLP with MatMul + Add + activation chains.
std::unique_ptr<ir::Graph> denseModel(int64_t batch) {
  Builder b;
  ir::Tensor* x = b.input("x", {batch, 32});
  ir::Tensor* h = b.op("Tanh", {b.op("Add", {b.op("MatMul", {x, b.weight({32, 64})}), b.weight({64})})});
  ir::Tensor* gl =
      b.op("Gelu", {b.op("Add", {b.weight({48}), b.op("MatMul", {h, b.weight({64, 48})})})}, {}, "ai.graphcore");
  b.g.otherOpsets["ai.graphcore"] = 1;
  b.g.addOutput(b.op("MatMul", {gl, b.weight({48, 8})}));
  return ir::cloneGraph(b.g);
}

std::map<std::string, int> countOps(const ir::Graph& g) {
  std::map<std::string, int> n;
  for (const ir::Node* node : g.nodes()) n[node->type()]++;
  return n;
}

std::vector<NDArray> runGraph(const ir::Graph& src, const std::vector<std::string>& pipeline, bool constWeights,
                              backends::Backend& backend, const std::vector<NDArray>& inputs,
                              ir::Graph** keep = nullptr, std::unique_ptr<ir::Graph>* owner = nullptr) {
  auto g = ir::cloneGraph(src);
  passes::PassContext ctx;
  ctx.weightsAreConstant = constWeights;
  ctx.verifyEachPass = true;
  passes::runPipeline(*g, pipeline, ctx);
  support::ThreadPool pool(backend.numThreads());
  auto exe = plan::compile(*g, backend, pool);
  std::vector<ops::Value> in;
  for (const NDArray& a : inputs) in.push_back(ops::Value::fromTensor(a));
  auto outs = exe->run(in);
  std::vector<NDArray> res;
  for (auto& v : outs) res.push_back(v.tensor);
  if (owner) *owner = std::move(g);
  return res;
}

void expectClose(const NDArray& a, const NDArray& b, double tol) {
  ASSERT_EQ(a.shape(), b.shape());
  for (int64_t i = 0; i < a.numel(); ++i)
    ASSERT_NEAR(a.data<float>()[i], b.data<float>()[i], tol * (1 + std::abs(b.data<float>()[i]))) << "element " << i;
}

TEST(CpuPipeline, ConvModelIsFusedBlockedAndMatchesReference) {
  auto g = convModel(2);
  auto ref = backends::makeReferenceBackend();
  auto cpu = backends::makeCpuBackend(2);
  NDArray x = randomArray({2, 3, 16, 16}, 7);
  auto want = runGraph(*g, passes::commonPrefix(), true, *ref, {x});
  std::unique_ptr<ir::Graph> compiled;
  auto got = runGraph(*g, backends::makeCpuBackend(1)->passes(backends::PassMode::Inference), true, *cpu, {x}, nullptr,
                      &compiled);
  expectClose(got.at(0), want.at(0), 1e-4);
  auto ops = countOps(*compiled);
  EXPECT_EQ(ops["BatchNormalization"], 0) << ir::printGraph(*compiled);
  EXPECT_EQ(ops["Conv"], 0) << ir::printGraph(*compiled);
  EXPECT_EQ(ops["FusedConv"], 6);
  EXPECT_EQ(ops["FusedGemm"], 1);
  if (backends::cpu::onednn::activationLayout()) {
    // Activations stay blocked from the first convolution to the global pooling: one
    // conversion in (or none, when the stem reads plain input) and one out.
    EXPECT_LE(ops["ToBlocked"], 1) << ir::printGraph(*compiled);
    EXPECT_EQ(ops["FromBlocked"], 1) << ir::printGraph(*compiled);
    EXPECT_EQ(ops["ChannelBlocked"], 2) << ir::printGraph(*compiled);  // MaxPool, GlobalAveragePool
  }
}

// A residual FusedConv (Sum input) writes over the residual's buffer, which dies there: the sum
// post-op accumulates in place, without a copy.
TEST(CpuPipeline, ResidualFusedConvWritesInPlaceOverItsSum) {
  auto g = convModel(2);
  auto compiled = ir::cloneGraph(*g);
  passes::PassContext ctx;
  ctx.weightsAreConstant = true;
  auto cpu = backends::makeCpuBackend(2);
  passes::runPipeline(*compiled, cpu->passes(backends::PassMode::Inference), ctx);
  support::ThreadPool pool(2);
  auto exe = plan::compile(*compiled, *cpu, pool);
  int residual = 0, inPlace = 0;
  for (const ir::Node* n : compiled->nodes()) {
    if (n->type() != "FusedConv" || !n->hasInput(3)) continue;
    ++residual;
    for (const plan::MemoryEntry& e : exe->memoryPlan().entries)
      if (e.tensor == n->output(0) && e.placement == plan::Placement::InPlace && e.aliasOf == n->input(3)) ++inPlace;
  }
  EXPECT_GE(residual, 1) << ir::printGraph(*compiled);
  EXPECT_EQ(inPlace, residual) << ir::printGraph(*compiled);
}

// GRAFT_CPU_LAYOUT for one scope (the cpu-layout pass reads it each time it runs).
struct LayoutEnv {
  explicit LayoutEnv(const char* v) { setenv("GRAFT_CPU_LAYOUT", v, 1); }
  ~LayoutEnv() { unsetenv("GRAFT_CPU_LAYOUT"); }
};

// Each activation layout the pass can choose, forced on this host: results match the reference,
// and a step runs reorders (graph nodes and conversions inside kernels alike, counted by
// onednn::execute) only at the graph's edges: the input into the layout, the pooled features out.
TEST(CpuPipeline, EveryLayoutMatchesReferenceAndReordersOnlyAtTheEdges) {
  auto g = convModel(2);
  auto ref = backends::makeReferenceBackend();
  NDArray x = randomArray({2, 3, 16, 16}, 9);
  auto want = runGraph(*g, passes::commonPrefix(), true, *ref, {x});
  for (const char* layout : {"plain", "blocked", "nhwc"}) {
    SCOPED_TRACE(layout);
    LayoutEnv env(layout);
    auto cpu = backends::makeCpuBackend(2);
    auto compiled = ir::cloneGraph(*g);
    passes::PassContext ctx;
    ctx.weightsAreConstant = true;
    ctx.verifyEachPass = true;
    passes::runPipeline(*compiled, cpu->passes(backends::PassMode::Inference), ctx);
    support::ThreadPool pool(2);
    auto exe = plan::compile(*compiled, *cpu, pool);
    backends::cpu::resetReorderStats();
    auto outs = exe->run({ops::Value::fromTensor(x)});
    backends::cpu::ReorderStats st = backends::cpu::reorderStats();
    expectClose(outs.at(0).tensor, want.at(0), 1e-4);
    auto ops = countOps(*compiled);
    if (std::string(layout) == "plain") {
      EXPECT_EQ(ops["ToBlocked"] + ops["FromBlocked"] + ops["ChannelBlocked"], 0) << ir::printGraph(*compiled);
      continue;
    }
    EXPECT_LE(ops["ToBlocked"], 1) << ir::printGraph(*compiled);
    // (Channel blocks forced where oneDNN prefers channels last, on AVX-512 hosts, included: the
    // 16 -> 12 channel convolution reads its 16-channel input tagged as 16-channel blocks
    // (onednn::activationDescs); tagged channels last, oneDNN 2.6 had only its reference kernel for
    // it, and that branch stayed plain.)
    EXPECT_EQ(ops["FromBlocked"], 1) << ir::printGraph(*compiled);
    EXPECT_EQ(ops["ChannelBlocked"], 2) << ir::printGraph(*compiled);  // MaxPool, GlobalAveragePool
    // No conversion hides inside a kernel: every reorder a step runs is a graph node.
    EXPECT_EQ(st.count, ops["ToBlocked"] + ops["FromBlocked"]) << ir::printGraph(*compiled);
  }
}

TEST(CpuPipeline, VariableWeightsAreNotFoldedButStillFused) {
  auto g = convModel(1);
  auto ref = backends::makeReferenceBackend();
  auto cpu = backends::makeCpuBackend(2);
  NDArray x = randomArray({1, 3, 16, 16}, 8);
  auto want = runGraph(*g, passes::commonPrefix(), false, *ref, {x});
  std::unique_ptr<ir::Graph> compiled;
  auto got = runGraph(*g, backends::makeCpuBackend(1)->passes(backends::PassMode::Inference), false, *cpu, {x}, nullptr,
                      &compiled);
  expectClose(got.at(0), want.at(0), 1e-4);
  auto ops = countOps(*compiled);
  EXPECT_GT(ops["BatchNormalization"] + ops["ChannelBlocked"], 0);  // BN kept: its parameters may change
}

TEST(CpuPipeline, DenseModelFusesMatMulBiasActivation) {
  auto g = denseModel(4);
  auto ref = backends::makeReferenceBackend();
  auto cpu = backends::makeCpuBackend(2);
  NDArray x = randomArray({4, 32}, 9);
  auto want = runGraph(*g, passes::commonPrefix(), true, *ref, {x});
  std::unique_ptr<ir::Graph> compiled;
  auto got = runGraph(*g, backends::makeCpuBackend(1)->passes(backends::PassMode::Inference), true, *cpu, {x}, nullptr,
                      &compiled);
  expectClose(got.at(0), want.at(0), 1e-4);
  auto ops = countOps(*compiled);
  EXPECT_EQ(ops["FusedMatMul"], 2) << ir::printGraph(*compiled);
  EXPECT_EQ(ops["MatMul"], 1);
  EXPECT_EQ(ops["Add"], 0);
}

TEST(CpuPipeline, FusionKeepsValuesOthersRead) {
  // The conv output is also a graph output: nothing may be fused into it.
  Builder b;
  ir::Tensor* x = b.input("x", {1, 4, 5, 5});
  ir::Tensor* c = b.conv(x, 4, 8, 3, 1);
  b.g.addOutput(c);
  b.g.addOutput(b.op("Relu", {c}));
  auto g = ir::cloneGraph(b.g);
  passes::PassContext ctx;
  ctx.weightsAreConstant = true;
  passes::runPipeline(*g, backends::makeCpuBackend(1)->passes(backends::PassMode::Inference), ctx);
  EXPECT_EQ(countOps(*g)["Relu"], 1) << ir::printGraph(*g);
  auto ref = backends::makeReferenceBackend();
  auto cpu = backends::makeCpuBackend(1);
  NDArray xv = randomArray({1, 4, 5, 5}, 10);
  auto want = runGraph(*ir::cloneGraph(b.g), passes::commonPrefix(), true, *ref, {xv});
  auto got = runGraph(*ir::cloneGraph(b.g), backends::makeCpuBackend(1)->passes(backends::PassMode::Inference), true,
                      *cpu, {xv});
  ASSERT_EQ(got.size(), 2u);
  expectClose(got[0], want[0], 1e-4);
  expectClose(got[1], want[1], 1e-4);
}

// Sessions: weights written after prepareDevice must be used, whether the session folds them
// (constantWeights: recompiles) or reads them at run time (re-packs every run).
// A transformer-style block as exporters write it: LayerNorm spelled out (mean, variance,
// normalise, scale, shift), GELU as x/2 (1 + erf(x / sqrt 2)), the same subexpression computed
// twice, and a residual elementwise tail. cse, fuse-layernorm, fuse-gelu and fuse-elementwise
// rewrite it; the cpu backend (memory plan checked for overlaps) matches the reference backend.
TEST(CpuPipeline, CseAndElementwiseFusionMatchReference) {
  Builder b;
  ir::Tensor* x = b.input("x", {16, 24, 64});
  auto scalar = [&](float v) {
    return b.g.addInitializer(b.g.uniqueId("c"), NDArray::scalar<float>(DataType::Float, v));
  };
  ir::Attributes last;
  last.set("axes", std::vector<int64_t>{-1});
  auto mean = [&](ir::Tensor* t) { return b.op("ReduceMean", {t}, last); };
  ir::Tensor* mu = mean(x);
  ir::Tensor* d = b.op("Sub", {x, mu});
  ir::Tensor* var = mean(b.op("Pow", {d, scalar(2.f)}));
  ir::Tensor* nrm = b.op("Div", {d, b.op("Sqrt", {b.op("Add", {var, scalar(1e-5f)})})});
  ir::Tensor* ln = b.op("Add", {b.op("Mul", {nrm, b.weight({64}, 0.5f, 1.5f)}), b.weight({64})});
  ir::Tensor* h = b.op("Add", {b.op("MatMul", {ln, b.weight({64, 64})}), b.weight({64})});
  ir::Tensor* erf = b.op("Erf", {b.op("Div", {h, scalar(1.4142135f)})});
  ir::Tensor* gelu = b.op("Mul", {b.op("Mul", {h, b.op("Add", {erf, scalar(1.f)})}), scalar(0.5f)});
  // Twice the same sigmoid gate: cse keeps one.
  ir::Tensor* g1 = b.op("Sigmoid", {gelu});
  ir::Tensor* g2 = b.op("Sigmoid", {gelu});
  ir::Tensor* y = b.op("Add", {b.op("Mul", {b.op("Mul", {gelu, g1}), b.op("Tanh", {g2})}), x});
  b.g.addOutput(b.op("Mul", {y, scalar(0.25f)}));
  auto ref = backends::makeReferenceBackend();
  auto cpu = backends::makeCpuBackend(2);
  NDArray xv = randomArray({16, 24, 64}, 11);
  auto want = runGraph(b.g, passes::commonPrefix(), true, *ref, {xv});
  std::unique_ptr<ir::Graph> compiled;
  auto got = runGraph(b.g, backends::makeCpuBackend(1)->passes(backends::PassMode::Inference), true, *cpu, {xv},
                      nullptr, &compiled);
  expectClose(got.at(0), want.at(0), 1e-4);
  auto ops = countOps(*compiled);
  EXPECT_EQ(ops["LayerNormalization"], 1) << ir::printGraph(*compiled);
  EXPECT_EQ(ops["Sigmoid"] + ops["Erf"] + ops["Tanh"] + ops["ReduceMean"], 0) << ir::printGraph(*compiled);
  EXPECT_GE(ops["FusedElementwise"], 1) << ir::printGraph(*compiled);
  // The plan of the compiled graph never places two live values over each other.
  support::ThreadPool pool(2);
  plan::CompileOptions o;
  o.verifyPlan = true;
  auto exe = plan::compile(*compiled, *cpu, pool, o);
  EXPECT_GT(exe->memoryPlan().arenaBytes, 0u);
  EXPECT_LE(exe->memoryPlan().arenaBytes, exe->memoryPlan().unsharedBytes);
}

TEST(CpuPipeline, WrittenWeightsReachPackedKernels) {
  for (bool constant : {true, false}) {
    auto g = convModel(1);
    passes::PassContext ctx;
    passes::runPipeline(*g, {"infer-shapes"}, ctx);
    std::string model = onnxio::saveModelBytes(*g);
    SessionOptions opts;
    opts.constantWeights = constant;
    std::string out = g->outputs()[0]->id();
    auto cpuSession = InferenceSession::createFromOnnxModel(
        model, DataFlow(1, {out}), DeviceManager::createDeviceManager().createCpuDevice(), {}, opts);
    auto refSession = InferenceSession::createFromOnnxModel(
        model, DataFlow(1, {out}), DeviceManager::createDeviceManager().createReferenceDevice(), {}, opts);
    cpuSession->prepareDevice();
    refSession->prepareDevice();
    NDArray x = randomArray({1, 3, 16, 16}, 11);
    auto runBoth = [&] {
      NDArray a(DataType::Float, {1, 10}), r(DataType::Float, {1, 10});
      StepIO io1({{"x", x}}, {{out, a}});
      cpuSession->run(io1);
      StepIO io2({{"x", x}}, {{out, r}});
      refSession->run(io2);
      return std::make_pair(a, r);
    };
    auto [a0, r0] = runBoth();
    expectClose(a0, r0, 1e-4);
    // New values for every weight of the first convolution and the classifier.
    WeightsIO w;
    for (const auto& id : cpuSession->weightIds()) {
      const ir::Tensor* t = g->findTensor(id);
      w.insert(id, randomArray(t->info().shape(), 1000 + static_cast<uint32_t>(id.size()), 0.1f, 0.9f));
    }
    cpuSession->writeWeights(w);
    refSession->writeWeights(w);
    auto [a1, r1] = runBoth();
    expectClose(a1, r1, 1e-4);
    bool differs = false;
    for (int64_t i = 0; i < a0.numel(); ++i) differs |= std::abs(a0.data<float>()[i] - a1.data<float>()[i]) > 1e-6;
    EXPECT_TRUE(differs) << "constantWeights=" << constant;
  }
}

// ---- cpu-bf16-activations (the inference pipeline of a bf16 backend) ---------------------------

// A small ResNet: stem conv + Relu, two residual blocks (conv + Relu, conv + Sum + Relu), a conv
// whose output only a pooling reads, the pooled features out.
std::unique_ptr<ir::Graph> residualModel() {
  auto b = std::make_unique<Builder>();
  ir::Tensor* x = b->input("x", {2, 16, 14, 14});
  ir::Tensor* s = b->op("Relu", {b->conv(x, 16, 32, 3, 1)});
  for (int block = 0; block < 2; ++block) {
    ir::Tensor* h = b->op("Relu", {b->conv(s, 32, 32, 3, 1)});
    s = b->op("Relu", {b->op("Add", {b->conv(h, 32, 32, 3, 1), s})});
  }
  ir::Tensor* last = b->op("Relu", {b->conv(s, 32, 32, 1, 1)});
  b->g.addOutput(b->op("GlobalAveragePool", {last}));
  return ir::cloneGraph(b->g);
}

bool isBf16(const ir::Tensor* t) { return t && t->info().dataType() == DataType::BFloat16; }

// The pass's rules on the graph it leaves: every bf16 tensor is a FusedConv's output (y_dtype
// BFLOAT16) or a Concat's of bf16 tensors, which only FusedConvs read (as X or Sum) or Concats
// with a bf16 output; no graph output is bf16; a Sum has its convolution's output type. Returns
// the number of bf16 tensors.
int checkBf16Rules(const ir::Graph& g) {
  int count = 0;
  for (const ir::Node* n : g.nodes()) {
    for (size_t i = 0; i < n->numOutputs(); ++i) {
      const ir::Tensor* t = n->output(i);
      if (!isBf16(t)) continue;
      ++count;
      if (n->type() == "Concat") {
        for (const ir::Tensor* in : n->inputs()) EXPECT_TRUE(isBf16(in)) << t->id() << " from " << in->id();
      } else {
        EXPECT_EQ(n->type(), "FusedConv") << t->id();
        EXPECT_EQ(n->attrInt("y_dtype", 1), static_cast<int64_t>(DataType::BFloat16)) << t->id();
      }
      EXPECT_FALSE(t->isGraphOutput()) << t->id();
      for (const ir::Use& u : t->uses()) {
        if (u.node->type() == "Concat") {
          EXPECT_TRUE(isBf16(u.node->output(0))) << t->id() << " read by " << u.node->describe();
          continue;
        }
        EXPECT_EQ(u.node->type(), "FusedConv") << t->id() << " read by " << u.node->describe();
        EXPECT_TRUE(u.index == 0 || u.index == 3) << t->id() << " read as input " << u.index;
      }
    }
    if (n->type() == "FusedConv" && n->hasInput(3)) {
      EXPECT_EQ(isBf16(n->input(3)), isBf16(n->output(0))) << n->describe();
    }
  }
  return count;
}

// The inference pipeline of a bf16 backend without its last pass (cpu-bf16-activations).
std::vector<std::string> withoutBf16Activations(const std::vector<std::string>& pipeline) {
  std::vector<std::string> p = pipeline;
  EXPECT_EQ(p.back(), "cpu-bf16-activations");
  p.pop_back();
  return p;
}

// One input through a bf16 backend's inference pipeline, with and without its last pass, and
// through the reference: the compiled graphs, the results and the conversions each step ran.
struct Bf16Runs {
  std::unique_ptr<ir::Graph> with, without;
  std::vector<NDArray> got, plain, want;
  int64_t reordersWith = 0, reordersWithout = 0;
  double scale = 0;  // max |want|
};

Bf16Runs runBf16(const ir::Graph& g, const NDArray& x) {
  Bf16Runs r;
  auto bf16 = backends::makeCpuBackend(2, /*bf16=*/true);
  auto ref = backends::makeReferenceBackend();
  const auto& pipeline = bf16->passes(backends::PassMode::Inference);
  backends::cpu::resetReorderStats();
  r.got = runGraph(g, pipeline, true, *bf16, {x}, nullptr, &r.with);
  r.reordersWith = backends::cpu::reorderStats().count;
  backends::cpu::resetReorderStats();
  r.plain = runGraph(g, withoutBf16Activations(pipeline), true, *bf16, {x}, nullptr, &r.without);
  r.reordersWithout = backends::cpu::reorderStats().count;
  r.want = runGraph(g, passes::commonPrefix(), true, *ref, {x});
  for (int64_t i = 0; i < r.want[0].numel(); ++i)
    r.scale = std::max(r.scale, std::abs(double(r.want[0].data<float>()[i])));
  return r;
}

TEST(CpuBf16Activations, HoldsActivationsBetweenBf16ConvolutionsInBf16) {
  if (!support::cpuFeatures().avx512bf16) GTEST_SKIP() << "bf16 convolutions need avx512_bf16, which this host lacks";
  Bf16Runs r = runBf16(*residualModel(), randomArray({2, 16, 14, 14}, 11));

  int held = checkBf16Rules(*r.with);
  EXPECT_EQ(checkBf16Rules(*r.without), 0);
  if (backends::cpu::onednn::activationLayout() == backends::cpu::onednn::kChannelsLast) {
    // oneDNN 2.6's bf16 brgemm convolutions take every convolution here in NHWC: the stem's and
    // both blocks' outputs (the residual stream) and the blocks' inner activations are bf16;
    // the last convolution's output, which the pooling reads, stays float32.
    EXPECT_EQ(held, 5) << ir::printGraph(*r.with);
  }  // (a forced blocked layout: the rules above hold; how many are bf16 depends on oneDNN's kernels)
  // Fewer conversions per step: each bf16 activation saves its reader's.
  if (held > 0) {
    EXPECT_LT(r.reordersWith, r.reordersWithout);
  }
  ASSERT_EQ(r.got.at(0).dtype(), DataType::Float);
  // The convolutions read the same values either way (float32 rounded to nearest even), except
  // the residual Sums, which add the rounded stream: bf16's error, as against float32.
  expectClose(r.got[0], r.plain[0], 2e-2 * r.scale);
  expectClose(r.got[0], r.want[0], 3e-2 * r.scale);
}

// SqueezeNet's fire modules: squeeze (1x1), expand 1x1 and 3x3, Concat, twice, then a conv whose
// output a pooling reads. The expands' outputs and the first Concat are bf16 (the next squeeze
// reads it); the second Concat feeds the last conv too, so it is bf16 as well.
std::unique_ptr<ir::Graph> fireModel() {
  auto b = std::make_unique<Builder>();
  ir::Tensor* x = b->input("x", {2, 32, 13, 13});
  ir::Attributes cat;
  cat.set("axis", int64_t{1});
  for (int fire = 0; fire < 2; ++fire) {
    ir::Tensor* sq = b->op("Relu", {b->conv(x, 32, 16, 1, 1)});
    ir::Tensor* e1 = b->op("Relu", {b->conv(sq, 16, 16, 1, 1)});
    ir::Tensor* e3 = b->op("Relu", {b->conv(sq, 16, 16, 3, 1)});
    x = b->op("Concat", {e1, e3}, cat);
  }
  b->g.addOutput(b->op("GlobalAveragePool", {b->op("Relu", {b->conv(x, 32, 32, 1, 1)})}));
  return ir::cloneGraph(b->g);
}

TEST(CpuBf16Activations, ConcatOfBf16ConvolutionsStaysBf16) {
  if (!support::cpuFeatures().avx512bf16) GTEST_SKIP() << "bf16 convolutions need avx512_bf16, which this host lacks";
  Bf16Runs r = runBf16(*fireModel(), randomArray({2, 32, 13, 13}, 13));
  int held = checkBf16Rules(*r.with);
  int concats = 0;
  for (const ir::Node* n : r.with->nodes()) concats += n->type() == "Concat" && isBf16(n->output(0));
  if (backends::cpu::onednn::activationLayout() == backends::cpu::onednn::kChannelsLast) {
    // Both squeezes' outputs, the four expands', both Concats.
    EXPECT_EQ(held, 8) << ir::printGraph(*r.with);
    EXPECT_EQ(concats, 2) << ir::printGraph(*r.with);
    EXPECT_LT(r.reordersWith, r.reordersWithout);
  }
  // The convolutions read what they read before (rounded to bf16 by the producer instead of at
  // their input): the same results up to float32 rounding.
  expectClose(r.got[0], r.plain[0], 1e-5 * r.scale);
  expectClose(r.got[0], r.want[0], 3e-2 * r.scale);
}

// Tensors that any other op reads, and graph outputs, stay float32: in the conv model above the
// residual block's output feeds a MaxPool, so neither it nor the Sum it pairs with is bf16, and
// the depthwise convolution (float32 under bf16) and the Concat's operands are float32.
TEST(CpuBf16Activations, LeavesWhatOtherOpsReadFloat32) {
  if (!support::cpuFeatures().avx512bf16) GTEST_SKIP() << "bf16 convolutions need avx512_bf16, which this host lacks";
  auto g = convModel(2);
  auto bf16 = backends::makeCpuBackend(2, true);
  auto ref = backends::makeReferenceBackend();
  NDArray x = randomArray({2, 3, 16, 16}, 12);
  std::unique_ptr<ir::Graph> compiled;
  auto got = runGraph(*g, bf16->passes(backends::PassMode::Inference), true, *bf16, {x}, nullptr, &compiled);
  auto want = runGraph(*g, passes::commonPrefix(), true, *ref, {x});
  int held = checkBf16Rules(*compiled);
  EXPECT_LE(held, 1) << ir::printGraph(*compiled);  // at most the block's inner activation
  expectClose(got[0], want[0], 3e-2);
}

// y_dtype is FLOAT or BFLOAT16; anything else is refused, naming the attribute.
TEST(CpuBf16Activations, FusedConvRefusesOtherOutputTypes) {
  Builder b;
  ir::Tensor* x = b.input("x", {1, 4, 5, 5});
  ir::Attributes a;
  a.set("y_dtype", static_cast<int64_t>(DataType::Float16));
  b.g.otherOpsets["ai.graft"] = 1;
  ir::Tensor* y = b.op("FusedConv", {x, b.weight({4, 4, 3, 3})}, a, "ai.graft");
  b.g.addOutput(y);
  passes::PassContext ctx;
  try {
    passes::runPipeline(b.g, {"infer-shapes"}, ctx);
    FAIL() << "a FusedConv with y_dtype FLOAT16 was accepted";
  } catch (const InternalError& e) {
    FAIL() << "internal error instead of a user error: " << e.what();
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("y_dtype must be 1 (FLOAT) or 16 (BFLOAT16), got 10"), std::string::npos)
        << e.what();
  }
}

}  // namespace
}  // namespace graft
