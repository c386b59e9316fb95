// tools: the graft command, run in-process.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <fstream>
#include <sstream>

#include "../unit_test_util.hpp"
#include "cli.hpp"
#include "cli_test_util.hpp"
#include "demo_model.hpp"
#include "ir/graph.hpp"
#include "npy.hpp"
#include "onnx/model_io.hpp"
#include "support/cpu_features.hpp"

namespace graft::tools {
namespace {

using testing::cli;
using testing::contains;
using testing::Result;

// y = Relu(x @ W + b), x FLOAT [batch, 2], W = [[1, -1, 0], [2, 0, -3]], b = [0.5, 0, 1].
void writeSmallModel(const std::string& path) {
  ir::Graph g("small");
  ir::Tensor* x = g.addTensor("x", ir::ValueType::tensor(TensorInfo(DataType::Float, {Dim("batch"), Dim(2)})),
                              ir::TensorKind::Input);
  g.addInput(x);
  NDArray w(DataType::Float, {2, 3});
  float wv[] = {1, -1, 0, 2, 0, -3};
  std::copy(wv, wv + 6, w.data<float>());
  NDArray b(DataType::Float, {3});
  float bv[] = {0.5f, 0, 1};
  std::copy(bv, bv + 3, b.data<float>());
  ir::Tensor* mm = g.addNode("MatMul", "", {x, g.addInitializer("W", w)}, {"mm"})->output(0);
  ir::Tensor* add = g.addNode("Add", "", {mm, g.addInitializer("b", b)}, {"add"})->output(0);
  ir::Tensor* y = g.addNode("Relu", "", {add}, {"y:0"})->output(0);
  y->setType(ir::ValueType::tensor(TensorInfo(DataType::Float, {Dim("batch"), Dim(3)})));
  g.addOutput(y);
  onnxio::saveModelFile(g, path);
}

std::vector<float> expected(float x0, float x1) {
  auto relu = [](float v) { return v > 0 ? v : 0; };
  return {relu(x0 + 2 * x1 + 0.5f), relu(-x0), relu(-3 * x1 + 1)};
}

class Cli : public ::testing::Test {
 protected:
  void SetUp() override {
    model = dir.file("small.onnx");
    writeSmallModel(model);
  }
  testing::TempDir dir;
  std::string model;
};

TEST_F(Cli, UsageErrorsExitWithTwo) {
  EXPECT_EQ(cli({}).code, 2);
  EXPECT_EQ(cli({"frobnicate"}).code, 2);
  Result r = cli({"run", model, "--device", "gpu"});
  EXPECT_EQ(r.code, 2);
  EXPECT_TRUE(contains(r.err, "gpu")) << r.err;
  EXPECT_EQ(cli({"run", model, "--steps", "0"}).code, 2);
  EXPECT_EQ(cli({"run"}).code, 2);
  Result help = cli({"--help"});
  EXPECT_EQ(help.code, 0);
  EXPECT_TRUE(contains(help.out, "inspect")) << help.out;
}

TEST_F(Cli, OpsListsTheRegistryByDomain) {
  Result r = cli({"ops"});
  EXPECT_EQ(r.code, 0);
  EXPECT_TRUE(contains(r.out, "ai.onnx (")) << r.out;
  EXPECT_TRUE(contains(r.out, " MatMul")) << r.out;
  EXPECT_TRUE(contains(r.out, "ai.graphcore (")) << r.out;
}

TEST_F(Cli, InspectSummarisesTheModel) {
  Result r = cli({"inspect", model});
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_TRUE(contains(r.out, "x         FLOAT [batch, 2]")) << r.out;
  EXPECT_TRUE(contains(r.out, "y:0       FLOAT [batch, 3]")) << r.out;
  EXPECT_TRUE(contains(r.out, "opsets      ai.onnx 28")) << r.out;
  EXPECT_TRUE(contains(r.out, "3 nodes of 3 types")) << r.out;
  EXPECT_TRUE(contains(r.out, "parameters  9 values in 2 tensors (36 B)")) << r.out;
  EXPECT_TRUE(contains(r.out, "unsupported none")) << r.out;
  EXPECT_FALSE(contains(r.out, "graph small")) << r.out;
  Result g = cli({"inspect", model, "--graph"});
  EXPECT_TRUE(contains(g.out, "y:0 = Relu(add)")) << g.out;
}

TEST_F(Cli, InspectStagesShowsTheSplit) {
  // The demo model has no annotations: graft's Auto split over 2 virtual devices.
  Result r = cli({"inspect", model, "--stages", "--dim", "batch=4"});
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_TRUE(contains(r.out, "stages      Auto split over 2 virtual devices")) << r.out;
  EXPECT_TRUE(contains(r.out, "0: stage 0")) << r.out;
  EXPECT_TRUE(contains(r.out, "1: stage 1")) << r.out;
  EXPECT_TRUE(contains(r.out, "FLOPs")) << r.out;
  Result one = cli({"inspect", model, "--stages", "--virtual-devices", "1"});
  ASSERT_EQ(one.code, 0) << one.err;
  EXPECT_FALSE(contains(one.out, "1: stage 1")) << one.out;
}

TEST_F(Cli, InspectListsUnsupportedOpsAndTheOriginalOpset) {
  auto m = testing::makeModel(17);
  auto* d = m.add_opset_import();
  d->set_domain("com.example");
  d->set_version(1);
  testing::addInput(m, "x", {int64_t{2}});
  testing::addNode(m.mutable_graph(), "Frob", {"x"}, {"a"}, "com.example")->set_name("f1");
  testing::addNode(m.mutable_graph(), "Frob", {"a"}, {"b"}, "com.example")->set_name("f2");
  testing::addNode(m.mutable_graph(), "Wobble", {"b"}, {"y"}, "com.example");
  testing::addOutput(m, "y", {int64_t{2}});
  std::string path = dir.file("custom.onnx");
  std::ofstream(path, std::ios::binary) << testing::serialize(m);
  Result r = cli({"inspect", path});
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_TRUE(contains(r.out, "ai.onnx 28 (converted from 17), com.example 1")) << r.out;
  EXPECT_TRUE(contains(r.out, "unsupported 2 op types (3 nodes)")) << r.out;
  EXPECT_TRUE(contains(r.out, "com.example::Frob         2  'f1', 'f2'")) << r.out;
  EXPECT_TRUE(contains(r.out, "com.example::Wobble       1  output 'y'")) << r.out;
  // run refuses the model with the same list, on stderr, exit code 1.
  Result run = cli({"run", path});
  EXPECT_EQ(run.code, 1);
  EXPECT_TRUE(contains(run.err, "graft: error: 2 op types of this model are not supported")) << run.err;
}

TEST_F(Cli, InspectShowsTheOriginalOpset) {
  auto m = testing::makeModel(9);
  testing::addInput(m, "x", {int64_t{3}});
  testing::addNode(m.mutable_graph(), "Relu", {"x"}, {"y"});
  testing::addOutput(m, "y", {int64_t{3}});
  std::string path = dir.file("old.onnx");
  std::ofstream(path, std::ios::binary) << testing::serialize(m);
  Result r = cli({"inspect", path});
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_TRUE(contains(r.out, "opsets      ai.onnx 28 (converted from 9)")) << r.out;
}

TEST_F(Cli, RunWithGivenInputsWritesOutputs) {
  NDArray x(DataType::Float, {2, 2});
  float xv[] = {1, 2, -3, 0.5f};
  std::copy(xv, xv + 4, x.data<float>());
  writeNpy(dir.file("x.npy"), x);
  std::string outDir = dir.file("out");
  Result r = cli({"run", model, "--input", "x=" + dir.file("x.npy"), "--output-dir", outDir, "--steps", "3", "--device",
                  "reference"});
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_TRUE(contains(r.out, "compile")) << r.out;
  EXPECT_TRUE(contains(r.out, "median of 3 steps")) << r.out;
  EXPECT_TRUE(contains(r.out, "y:0  FLOAT [2, 3]")) << r.out;
  NDArray y = readNpy(outDir + "/y_0.npy");  // ':' is not kept in file names
  ASSERT_EQ(y.shape(), (Shape{2, 3}));
  for (int row = 0; row < 2; ++row) {
    std::vector<float> want = expected(xv[2 * row], xv[2 * row + 1]);
    for (int c = 0; c < 3; ++c) EXPECT_FLOAT_EQ(y.data<float>()[row * 3 + c], want[c]) << row << "," << c;
  }
}

TEST_F(Cli, RunWithSeveralBatchesPerStep) {
  // A step array [3, 1, 2]: one batch of shape [1, 2] per row.
  NDArray x(DataType::Float, {3, 1, 2});
  float xv[] = {1, 1, 2, -1, -5, 3};
  std::copy(xv, xv + 6, x.data<float>());
  writeNpy(dir.file("steps.npy"), x);
  Result r = cli({"run", model, "-i", "x=" + dir.file("steps.npy"), "--batches-per-step", "3", "-o", dir.file("o"),
                  "--steps", "1"});
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_TRUE(contains(r.out, "one batch per row")) << r.out;
  NDArray y = readNpy(dir.file("o/y_0.npy"));
  ASSERT_EQ(y.shape(), (Shape{3, 1, 3}));
  for (int b = 0; b < 3; ++b) {
    std::vector<float> want = expected(xv[2 * b], xv[2 * b + 1]);
    for (int c = 0; c < 3; ++c) EXPECT_FLOAT_EQ(y.data<float>()[b * 3 + c], want[c]);
  }
  // One batch given for a step of three is used for every batch.
  NDArray one(DataType::Float, {1, 2});
  writeNpy(dir.file("one.npy"), one);
  r = cli({"run", model, "-i", "x=" + dir.file("one.npy"), "--batches-per-step", "3", "--steps", "1"});
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_TRUE(contains(r.out, "the same for every batch")) << r.out;
  EXPECT_TRUE(contains(r.out, "y:0  FLOAT [3, 1, 3]")) << r.out;
}

TEST_F(Cli, RunWithRandomInputsAndSymbolicDims) {
  Result r = cli({"run", model, "--dim", "batch=5", "--steps", "2", "--threads", "2"});
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_TRUE(contains(r.out, "x  FLOAT [5, 2]  random")) << r.out;
  EXPECT_TRUE(contains(r.out, "y:0  FLOAT [5, 3]")) << r.out;
  EXPECT_TRUE(contains(r.out, "min 0")) << r.out;  // Relu
  r = cli({"run", model, "--steps", "1"});
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_TRUE(contains(r.out, "x  FLOAT [1, 2]  random (batch=1; set with --dim)")) << r.out;
}

TEST_F(Cli, BenchTimesStepsAndProfilesKernels) {
  // Batch 8: from 5 rows the matmul is oneDNN's (vec_gemv takes 4 and fewer).
  Result r = cli({"bench", model, "--dim", "batch=8", "--steps", "3", "--warmup", "1", "--threads", "2", "--profile"});
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_TRUE(contains(r.out, "x  FLOAT [8, 2]  random")) << r.out;
  EXPECT_TRUE(contains(r.out, "prepare ")) << r.out;
  EXPECT_TRUE(contains(r.out, "warm-up   1 step, first")) << r.out;
  EXPECT_TRUE(contains(r.out, "step      median ")) << r.out;
  EXPECT_TRUE(contains(r.out, "of 3 steps")) << r.out;
  // The cpu pipeline fuses MatMul + Add + Relu; the profile names the kernels that ran.
  EXPECT_TRUE(contains(r.out, "FusedMatMul")) << r.out;
  EXPECT_TRUE(contains(r.out, "onednn_matmul (")) << r.out;  // with oneDNN's implementation name
  // The layout conversions of the timed steps (none here: a dense model has no activation layouts).
  EXPECT_TRUE(contains(r.out, "reorders  0.0 per step, 0.00 MB")) << r.out;
  // The ISA the kernels use, with the limit where one is set.
  EXPECT_TRUE(contains(r.out, "isa       " + support::cpuFeatures().isaName())) << r.out;
  // SessionOptions.autoThreads, forced to keep its one-thread plan: bench says so; --exact-threads
  // keeps --threads.
  setenv("GRAFT_AUTO_THREADS", "1", 1);
  r = cli({"bench", model, "--dim", "batch=4", "--steps", "2", "--threads", "2"});
  Result exact = cli({"bench", model, "--dim", "batch=4", "--steps", "2", "--threads", "2", "--exact-threads"});
  unsetenv("GRAFT_AUTO_THREADS");
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_TRUE(contains(r.out, "threads   1 of --threads 2 (SessionOptions.autoThreads")) << r.out;
  ASSERT_EQ(exact.code, 0) << exact.err;
  EXPECT_FALSE(contains(exact.out, "threads   ")) << exact.out;
  r = cli({"bench", model, "--steps", "2", "--device", "reference", "--profile", "--batches-per-step", "2"});
  ASSERT_EQ(r.code, 0) << r.err;
  // Every step of the reference device ran the reference kernel (as recorded when compiling).
  EXPECT_TRUE(contains(r.out, "%  reference\n")) << r.out;
  EXPECT_FALSE(contains(r.out, "onednn")) << r.out;
  EXPECT_TRUE(contains(r.out, "(2 batches per step)")) << r.out;
  auto fails = [&](std::vector<std::string> args, const std::string& part) {
    Result f = cli(args);
    EXPECT_EQ(f.code, 1) << f.out;
    EXPECT_TRUE(contains(f.err, part)) << "expected '" << part << "' in: " << f.err;
  };
  fails({"bench", dir.file("absent.onnx")}, "does not exist");
  fails({"bench", model, "--dim", "height=3"}, "no random input of the model has a dimension named 'height'");
  fails({"bench", model, "--input", "nope=" + dir.file("x.npy")}, "the model has no input 'nope'");
  EXPECT_EQ(cli({"bench", model, "--steps", "0"}).code, 2);
  // bf16: refused by name where the CPU (below GRAFT_CPU_ISA) has no avx512_bf16; where it has,
  // the profile shows the matmul in bf16.
  {
    support::CpuIsa saved = support::cpuIsaLimit();
    support::setCpuIsaLimit(support::CpuIsa::Avx2);
    fails({"bench", model, "--dtype", "bf16"}, "SessionOptions.enableBf16: this CPU has no avx512_bf16");
    Result limited = cli({"bench", model, "--steps", "1"});
    EXPECT_TRUE(contains(limited.out, "isa       " + support::cpuFeatures().isaName() + " (limited by GRAFT_CPU_ISA)"))
        << limited.out;
    support::setCpuIsaLimit(saved);
  }
  if (support::cpuFeatures().avx512bf16) {
    Result b =
        cli({"bench", model, "--dim", "batch=4", "--steps", "2", "--warmup", "0", "--dtype", "bf16", "--profile"});
    ASSERT_EQ(b.code, 0) << b.err;
    EXPECT_TRUE(contains(b.out, "onednn_matmul (")) << b.out;
    EXPECT_TRUE(contains(b.out, ", bf16)")) << b.out;
  }
  EXPECT_EQ(cli({"bench", model, "--dtype", "fp8"}).code, 2);
}

TEST_F(Cli, RunErrorsNameTheProblem) {
  auto fails = [&](std::vector<std::string> args, const std::string& part) {
    Result r = cli(args);
    EXPECT_EQ(r.code, 1) << r.out;
    EXPECT_TRUE(contains(r.err, "graft: error: ")) << r.err;
    EXPECT_TRUE(contains(r.err, part)) << "expected '" << part << "' in: " << r.err;
  };
  fails({"run", dir.file("absent.onnx")}, "absent.onnx' does not exist");
  fails({"run", model, "--input", "nope=" + dir.file("x.npy")}, "the model has no input 'nope' (its inputs: x)");
  fails({"run", model, "--input", "x"}, "expected NAME=FILE.npy");
  fails({"run", model, "--input", "x=" + dir.file("missing.npy")}, "missing.npy");
  fails({"run", model, "--dim", "batch"}, "expected NAME=SIZE");
  fails({"run", model, "--dim", "batch=-2"}, "non-negative integer");
  fails({"run", model, "--dim", "height=3"}, "no random input of the model has a dimension named 'height'");
  NDArray wrongType(DataType::Int32, {1, 2});
  writeNpy(dir.file("int.npy"), wrongType);
  fails({"run", model, "-i", "x=" + dir.file("int.npy")}, "input 'x' is INT32");
  NDArray wrongShape(DataType::Float, {1, 5});
  writeNpy(dir.file("wide.npy"), wrongShape);
  fails({"run", model, "-i", "x=" + dir.file("wide.npy")}, "input 'x' has shape [1, 5]");
  NDArray wrongSteps(DataType::Float, {2, 1, 2});
  writeNpy(dir.file("two.npy"), wrongSteps);
  fails({"run", model, "-i", "x=" + dir.file("two.npy"), "--batches-per-step", "3"}, "leading dimension of 3");
  std::ofstream(dir.file("text.onnx")) << "not a model";
  fails({"run", dir.file("text.onnx")}, "is not an ONNX model");
  fails({"inspect", dir.file("text.onnx")}, "is not an ONNX model");
}

TEST(DemoModel, IsAnMlpWithASymbolicBatch) {
  auto g = buildDemoMlp();
  ASSERT_EQ(g->inputs().size(), 1u);
  EXPECT_EQ(g->inputs()[0]->info().str(), "FLOAT [batch, 784]");
  EXPECT_EQ(g->outputs()[0]->info().str(), "FLOAT [batch, 10]");
  std::vector<std::string> types;
  for (const ir::Node* n : g->schedule()) types.push_back(n->type());
  EXPECT_EQ(types, (std::vector<std::string>{"MatMul", "Add", "Relu", "MatMul", "Add", "Softmax"}));
  // The weights are a fixed function of the seed.
  auto again = buildDemoMlp();
  const NDArray* w1 = g->tensor("fc1.weight").data();
  const NDArray* w2 = again->tensor("fc1.weight").data();
  EXPECT_EQ(std::memcmp(w1->rawData(), w2->rawData(), w1->nbytes()), 0);
  float bound = 1.0f / 28.0f;  // 1/sqrt(784)
  for (int64_t i = 0; i < w1->numel(); ++i) ASSERT_LE(std::abs(w1->data<float>()[i]), bound);
  DemoMlpOptions other;
  other.seed = 7;
  EXPECT_NE(std::memcmp(buildDemoMlp(other)->tensor("fc1.weight").data()->rawData(), w1->rawData(), w1->nbytes()), 0);
  // It survives export and import.
  onnxio::Model back = onnxio::loadModelBytes(onnxio::saveModelBytes(*g));
  EXPECT_EQ(back.graph->numNodes(), 6u);
}

}  // namespace
}  // namespace graft::tools
