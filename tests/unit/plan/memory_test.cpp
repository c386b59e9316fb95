// Static memory planning (src/plan/memory.cpp): buffers live at the same step never overlap,
// views and in-place results share regions only when that is safe, values the plan cannot size
// stay on the heap, and compiled graphs compute the same results with and without the plan.
#include <gtest/gtest.h>

#include <graft/graft.hpp>

#include <cmath>
#include <cstring>
#include <random>

#include "backends/backend.hpp"
#include "ir/graph.hpp"
#include "onnx/model_io.hpp"
#include "ops/registry.hpp"
#include "passes/pass.hpp"
#include "plan/executable.hpp"
#include "plan/memory.hpp"
#include "runtime/session_impl.hpp"

namespace graft::plan {
namespace {

ir::ValueType floatType(Shape s) { return ir::ValueType::tensor(TensorInfo(DataType::Float, std::move(s))); }

struct Builder {
  ir::Graph g{"test"};
  int next = 0;
  ir::Tensor* input(Shape s) {
    ir::Tensor* t = g.addTensor("x" + std::to_string(next++), floatType(std::move(s)), ir::TensorKind::Input);
    g.addInput(t);
    return t;
  }
  ir::Tensor* op(const std::string& type, std::vector<ir::Tensor*> in) {
    return g.addNode(type, "", in, {"v" + std::to_string(next++)})->output(0);
  }
  ir::Tensor* reshape(ir::Tensor* x, Shape s) {
    NDArray shape(DataType::Int64, {static_cast<int64_t>(s.size())});
    for (size_t i = 0; i < s.size(); ++i) shape.data<int64_t>()[i] = s[i];
    ir::Tensor* c = g.addInitializer("shape" + std::to_string(next++), shape, ir::TensorKind::Constant);
    return op("Reshape", {x, c});
  }
  void finish(std::vector<ir::Tensor*> outs) {
    g.setOutputs(std::move(outs));
    passes::PassContext ctx;
    passes::runPipeline(g, {"infer-shapes"}, ctx);
  }
  MemoryPlan plan(bool inplace = true) {
    std::vector<const ir::Node*> order;
    for (const ir::Node* n : g.schedule()) order.push_back(n);
    MemoryPlanOptions o;
    o.inplace = inplace;
    MemoryPlan p = planMemory(g, order, o);
    p.verify();
    return p;
  }
};

const MemoryEntry& entry(const MemoryPlan& p, const ir::Tensor* t) {
  const MemoryEntry* e = p.find(t);
  EXPECT_NE(e, nullptr) << t->id();
  return *e;
}

TEST(MemoryPlan, ChainReusesTwoBuffers) {
  Builder b;
  ir::Tensor* x = b.input({256});
  ir::Tensor* v = x;
  for (int i = 0; i < 6; ++i) v = b.op("Exp", {v});
  ir::Tensor* out = b.op("Exp", {v});
  b.finish({out});
  MemoryPlan p = b.plan(false);
  // Each Exp reads the previous value while writing the next: two regions of 1 KiB suffice.
  EXPECT_EQ(p.arenaBytes, 2048u);
  EXPECT_EQ(p.unsharedBytes, 6u * 1024);
  EXPECT_EQ(entry(p, out).placement, Placement::Heap);
  EXPECT_EQ(entry(p, out).reason, "graph output");
  // In place, every Exp overwrites its input: one region.
  MemoryPlan q = b.plan(true);
  EXPECT_EQ(q.arenaBytes, 1024u);
  EXPECT_EQ(q.buffers.size(), 1u);
}

TEST(MemoryPlan, InPlaceWhenTheInputDies) {
  Builder b;
  ir::Tensor* x = b.input({64});
  ir::Tensor* e = b.op("Exp", {x});
  ir::Tensor* r = b.op("Relu", {e});      // e dies here: r may overwrite it
  ir::Tensor* s = b.op("Sigmoid", {r});
  ir::Tensor* r2 = b.op("Relu", {s});     // s is read again below: not in place
  ir::Tensor* out = b.op("Add", {r2, s});
  b.finish({out});
  MemoryPlan p = b.plan();
  EXPECT_EQ(entry(p, r).placement, Placement::InPlace);
  EXPECT_EQ(entry(p, r).aliasOf, e);
  EXPECT_EQ(entry(p, r).buffer, entry(p, e).buffer);
  EXPECT_NE(entry(p, r2).placement, Placement::InPlace);
  EXPECT_NE(entry(p, r2).buffer, entry(p, s).buffer);
  MemoryPlan off = b.plan(false);
  EXPECT_EQ(entry(off, r).placement, Placement::Arena);
}

TEST(MemoryPlan, NoInPlaceOverGraphInputsOrOutputs) {
  Builder b;
  ir::Tensor* x = b.input({64});
  ir::Tensor* r = b.op("Relu", {x});  // x belongs to the caller
  ir::Tensor* e = b.op("Exp", {r});
  ir::Tensor* r2 = b.op("Relu", {e});  // e is a graph output
  b.finish({r2, e});
  MemoryPlan p = b.plan();
  EXPECT_EQ(entry(p, r).placement, Placement::Arena);
  EXPECT_EQ(entry(p, e).placement, Placement::Heap);
  EXPECT_EQ(entry(p, r2).placement, Placement::Heap);
}

TEST(MemoryPlan, ViewsKeepTheirSourceAlive) {
  Builder b;
  ir::Tensor* x = b.input({4, 16});
  ir::Tensor* e = b.op("Exp", {x});
  ir::Tensor* view = b.reshape(e, {64});
  ir::Tensor* t1 = b.op("Sigmoid", {x});
  ir::Tensor* t2 = b.op("Tanh", {t1});
  ir::Tensor* t3 = b.op("Exp", {t2});
  ir::Tensor* out = b.op("Add", {b.reshape(t3, {64}), view});
  b.finish({out});
  MemoryPlan p = b.plan();
  const MemoryEntry& ve = entry(p, view);
  EXPECT_EQ(ve.placement, Placement::View);
  EXPECT_EQ(ve.buffer, entry(p, e).buffer);
  // e's region stays reserved until the view's last reader, so t1..t3 cannot take it.
  const Buffer& eb = p.buffers[ve.buffer];
  EXPECT_EQ(eb.lastStep, ve.lastStep);
  for (const ir::Tensor* t : {t1, t2, t3}) EXPECT_NE(entry(p, t).buffer, ve.buffer);
}

TEST(MemoryPlan, ViewOfAGraphOutputIsOnTheHeap) {
  Builder b;
  ir::Tensor* x = b.input({4, 4});
  ir::Tensor* e = b.op("Exp", {x});
  ir::Tensor* view = b.reshape(e, {16});
  ir::Tensor* out = b.op("Exp", {e});
  b.finish({out, view});
  MemoryPlan p = b.plan();
  EXPECT_EQ(entry(p, e).placement, Placement::Heap);
  EXPECT_EQ(entry(p, view).placement, Placement::Heap);
}

TEST(MemoryPlan, RunTimeShapesStayOnTheHeap) {
  Builder b;
  ir::Tensor* x = b.g.addTensor("x", ir::ValueType::tensor(TensorInfo(DataType::Float, std::vector<Dim>{Dim("n"), Dim(4)})),
                                ir::TensorKind::Input);
  b.g.addInput(x);
  ir::Tensor* e = b.op("Exp", {x});
  ir::Tensor* out = b.op("Exp", {e});
  b.finish({out});
  MemoryPlan p = b.plan();
  EXPECT_EQ(entry(p, e).placement, Placement::Heap);
  EXPECT_EQ(entry(p, e).reason, "shape known at run time");
  EXPECT_EQ(p.arenaBytes, 0u);
  EXPECT_NE(p.summary(true).find("shape known at run time"), std::string::npos);
}

// Random graphs of elementwise ops, views and in-place ops: the plan never overlaps live buffers
// (verify() throws), every value's range covers its readers, and running with the plan gives
// exactly the results of running without it.
TEST(MemoryPlan, RandomGraphsNeverOverlapAndComputeTheSame) {
  std::mt19937 rng(7);
  auto backend = backends::makeCpuBackend(2);
  support::ThreadPool pool(2);
  for (int trial = 0; trial < 40; ++trial) {
    Builder b;
    std::vector<ir::Tensor*> vals{b.input({8, 16}), b.input({8, 16})};
    int steps = 10 + static_cast<int>(rng() % 30);
    for (int i = 0; i < steps; ++i) {
      ir::Tensor* a = vals[rng() % vals.size()];
      ir::Tensor* c = vals[rng() % vals.size()];
      switch (rng() % 6) {
        case 0: vals.push_back(b.op("Add", {a, c})); break;
        case 1: vals.push_back(b.op("Mul", {a, c})); break;
        case 2: vals.push_back(b.op("Relu", {a})); break;
        case 3: vals.push_back(b.op("Tanh", {a})); break;
        case 4: vals.push_back(b.reshape(b.reshape(a, {128}), {8, 16})); break;
        default: vals.push_back(b.op("Sigmoid", {a})); break;
      }
    }
    std::vector<ir::Tensor*> outs{vals.back(), vals[vals.size() / 2]};
    if (outs[0] == outs[1] || outs[1]->kind() == ir::TensorKind::Input) outs.pop_back();
    b.finish(outs);
    MemoryPlan p = b.plan();
    std::unordered_map<const ir::Node*, int> stepOf;
    int s = 0;
    for (const ir::Node* n : b.g.schedule()) stepOf[n] = s++;
    for (const MemoryEntry& e : p.entries)
      for (const ir::Use& u : e.tensor->uses()) EXPECT_LE(stepOf[u.node], e.lastStep) << e.tensor->id();

    NDArray x0(DataType::Float, {8, 16}), x1(DataType::Float, {8, 16});
    for (int64_t i = 0; i < 128; ++i) x0.data<float>()[i] = std::sin(0.1f * i), x1.data<float>()[i] = std::cos(0.3f * i);
    CompileOptions planned, unplanned;
    unplanned.planMemory = false;
    planned.verifyPlan = true;
    auto e1 = compile(b.g, *backend, pool, planned);
    auto e2 = compile(b.g, *backend, pool, unplanned);
    for (int run = 0; run < 2; ++run) {
      auto r1 = e1->run({ops::Value::fromTensor(x0.clone()), ops::Value::fromTensor(x1.clone())});
      auto r2 = e2->run({ops::Value::fromTensor(x0.clone()), ops::Value::fromTensor(x1.clone())});
      ASSERT_EQ(r1.size(), r2.size());
      for (size_t i = 0; i < r1.size(); ++i) {
        ASSERT_EQ(r1[i].tensor.nbytes(), r2[i].tensor.nbytes());
        EXPECT_EQ(std::memcmp(r1[i].tensor.rawData(), r2[i].tensor.rawData(), r1[i].tensor.nbytes()), 0)
            << "trial " << trial << " output " << i;
      }
    }
  }
}

// Outputs handed to the caller are not in the arena: the next run must not change them.
TEST(MemoryPlan, OutputsSurviveTheNextRun) {
  Builder b;
  ir::Tensor* x = b.input({32});
  ir::Tensor* e = b.op("Exp", {x});
  ir::Tensor* view = b.reshape(e, {4, 8});  // a view the caller keeps: e must be on the heap
  ir::Tensor* out = b.op("Relu", {b.op("Tanh", {e})});
  b.finish({out, view});
  auto backend = backends::makeCpuBackend(1);
  support::ThreadPool pool(1);
  auto exe = compile(b.g, *backend, pool);
  NDArray in(DataType::Float, {32});
  for (int i = 0; i < 32; ++i) in.data<float>()[i] = 0.1f * i;
  auto first = exe->run({ops::Value::fromTensor(in)});
  std::vector<NDArray> copies{first[0].tensor.clone(), first[1].tensor.clone()};
  NDArray other(DataType::Float, {32});
  for (int i = 0; i < 32; ++i) other.data<float>()[i] = -0.2f * i;
  exe->run({ops::Value::fromTensor(other)});
  for (int i = 0; i < 2; ++i)
    EXPECT_EQ(std::memcmp(first[i].tensor.rawData(), copies[i].rawData(), copies[i].nbytes()), 0) << "output " << i;
}

// Replication without gradient accumulation: an overwriting Accumulate's gradient, read by
// nothing else, is computed in the accumulator itself; one with another reader, or one that is
// added (not overwritten), goes through the arena as before. Either way the accumulators hold the
// gradients of the last run only.
TEST(MemoryPlan, GradientsAreComputedInTheirOverwritingAccumulators) {
  Builder b;
  b.g.otherOpsets[ops::kGraftDomain] = 1;
  ir::Tensor* x = b.input({4, 3});
  ir::Tensor* y = b.input({3, 5});
  auto accumulator = [&](const std::string& id, Shape s) {
    return b.g.addInitializer(id, NDArray(DataType::Float, std::move(s)), ir::TensorKind::Variable);
  };
  ir::Tensor* acc = accumulator("Accum___a", {4, 5});
  ir::Tensor* acc2 = accumulator("Accum___b", {4, 3});
  ir::Tensor* acc3 = accumulator("Accum___c", {4, 3});
  ir::Tensor* product = b.op("MatMul", {x, y});
  ir::Tensor* e = b.op("Exp", {x});   // also a graph output
  ir::Tensor* t = b.op("Tanh", {x});  // added, not overwritten
  ir::Attributes overwrite;
  overwrite.set("overwrite", int64_t{1});
  b.g.addNode("Accumulate", ops::kGraftDomain, {acc, product}, {}, overwrite, "accumulate_a");
  b.g.addNode("Accumulate", ops::kGraftDomain, {acc2, e}, {}, overwrite, "accumulate_b");
  b.g.addNode("Accumulate", ops::kGraftDomain, {acc3, t}, {}, {}, "accumulate_c");
  b.finish({e});
  auto backend = backends::makeCpuBackend(1);
  support::ThreadPool pool(1);
  auto exe = compile(b.g, *backend, pool);
  EXPECT_EQ(exe->gradientsInAccumulators(), std::vector<std::string>{product->id()});
  for (int run = 0; run < 2; ++run) {
    NDArray xs(DataType::Float, {4, 3}), ys(DataType::Float, {3, 5});
    for (int i = 0; i < 12; ++i) xs.data<float>()[i] = 0.1f * static_cast<float>(i - 5 + run);
    for (int i = 0; i < 15; ++i) ys.data<float>()[i] = 0.2f * static_cast<float>(7 - i - run);
    auto out = exe->run({ops::Value::fromTensor(xs), ops::Value::fromTensor(ys)});
    const float* a = acc->data()->data<float>();
    for (int i = 0; i < 4; ++i)
      for (int j = 0; j < 5; ++j) {
        float want = 0;
        for (int k = 0; k < 3; ++k) want += xs.data<float>()[i * 3 + k] * ys.data<float>()[k * 5 + j];
        EXPECT_NEAR(a[i * 5 + j], want, 1e-5f) << "run " << run << " (" << i << ", " << j << ")";
      }
    EXPECT_NE(acc2->data()->rawData(), out[0].tensor.rawData());
    for (int i = 0; i < 12; ++i)
      EXPECT_FLOAT_EQ(acc2->data()->data<float>()[i], out[0].tensor.data<float>()[i]) << "run " << run;
    if (run == 1) {  // the tanh of both runs, added
      for (int i = 0; i < 12; ++i)
        EXPECT_NEAR(acc3->data()->data<float>()[i],
                    std::tanh(0.1f * static_cast<float>(i - 5)) + std::tanh(0.1f * static_cast<float>(i - 4)), 1e-5f);
    }
  }
}

// A training step (forward, backward, SGD update) of a small model, planned and checked.
TEST(MemoryPlan, TrainingGraphIsPlannedWithoutOverlaps) {
  ir::Graph g("mlp");
  g.otherOpsets["ai.graft"] = 1;
  auto randn = [](Shape s, int seed) {
    NDArray a(DataType::Float, std::move(s));
    std::mt19937 r(seed);
    std::normal_distribution<float> d(0, 0.3f);
    for (int64_t i = 0; i < a.numel(); ++i) a.data<float>()[i] = d(r);
    return a;
  };
  ir::Tensor* x = g.addTensor("x", floatType({16, 32}), ir::TensorKind::Input);
  ir::Tensor* t = g.addTensor("t", floatType({16, 8}), ir::TensorKind::Input);
  g.addInput(x);
  g.addInput(t);
  ir::Tensor* h = x;
  int64_t width = 32;
  for (int layer = 0; layer < 3; ++layer) {
    int64_t out = layer == 2 ? 8 : 64;
    ir::Tensor* w = g.addInitializer("W" + std::to_string(layer), randn({width, out}, layer));
    ir::Tensor* bias = g.addInitializer("b" + std::to_string(layer), randn({out}, 10 + layer));
    h = g.addNode("MatMul", "", {h, w}, {"mm" + std::to_string(layer)})->output(0);
    h = g.addNode("Add", "", {h, bias}, {"lin" + std::to_string(layer)})->output(0);
    if (layer < 2) h = g.addNode("Tanh", "", {h}, {"act" + std::to_string(layer)})->output(0);
    width = out;
  }
  ir::Attributes a;
  a.set("reduction", std::string("Mean"));
  ir::Tensor* loss = g.addNode("MseLoss", "ai.graft", {h, t}, {"loss"}, a)->output(0);
  g.addOutput(loss);
  passes::PassContext ctx;
  passes::runPipeline(g, {"infer-shapes"}, ctx);
  std::string model = onnxio::saveModelBytes(g);

  auto device = DeviceManager::createDeviceManager().createCpuDevice();
  auto session = TrainingSession::createFromOnnxModel(model, DataFlow(1, {"loss"}), "loss", SGD({{"defaultLearningRate", {0.1f, true}}}),
                                                      device);
  session->prepareDevice();
  const auto& exe = *session->impl().lastPlan->exe;
  exe.memoryPlan().verify();
  MemoryPlanSummary m = session->memoryPlan(true);
  EXPECT_GT(m.arenaBytes, 0);
  EXPECT_LE(m.arenaBytes, m.unsharedBytes);
  EXPECT_GT(m.arenaValues, 5);
  EXPECT_GT(m.persistentBytes, 0);
  EXPECT_NE(m.text.find("arena"), std::string::npos);
  // Train a few steps: the planned step keeps working, and the loss falls.
  NDArray xs = randn({16, 32}, 99), ts = randn({16, 8}, 98);
  std::vector<float> losses;
  for (int step = 0; step < 5; ++step) {
    auto anchors = session->initAnchorArrays();
    StepIO io({{"x", xs}, {"t", ts}}, anchors);
    session->run(io);
    losses.push_back(anchors.at("loss").data<float>()[0]);
  }
  EXPECT_LT(losses.back(), losses.front());
}

}  // namespace
}  // namespace graft::plan
