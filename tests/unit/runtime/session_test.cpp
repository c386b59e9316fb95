// runtime: DataFlow and AnchorReturnType, StepIO and StepIOCallback over steps of several batches,
// and the errors a session reports for bad inputs and unsupported models.
#include <gtest/gtest.h>

#include <graft/graft.hpp>

#include "../unit_test_util.hpp"
#include "ir/graph.hpp"
#include "onnx/model_io.hpp"
#include "support/cpu_features.hpp"

namespace graft {
namespace {

using testing::errorOf;

TEST(AnchorReturnType, NamesAndPeriods) {
  EXPECT_EQ(AnchorReturnType("ALL").id(), AnchorReturnTypeId::All);
  EXPECT_EQ(AnchorReturnType("final").id(), AnchorReturnTypeId::Final);
  EXPECT_EQ(AnchorReturnType("Sum").str(), "Sum");
  AnchorReturnType every("EveryN", 3);
  EXPECT_EQ(every.id(), AnchorReturnTypeId::EveryN);
  EXPECT_EQ(every.rp(), 3);
  EXPECT_EQ(AnchorReturnType("All", 5).rp(), 0);  // the period only applies to EveryN
  EXPECT_NE(errorOf([] { AnchorReturnType("Some"); }).find("unknown anchor return type 'Some'"), std::string::npos);
  EXPECT_NE(errorOf([] { AnchorReturnType("EveryN"); }).find("return period > 0"), std::string::npos);
  EXPECT_NE(errorOf([] { AnchorReturnType("EveryN", -2); }).find("got -2"), std::string::npos);
}

TEST(DataFlow, Validation) {
  DataFlow df(4, {{"a", AnchorReturnType("All")}, {"b", AnchorReturnType("EveryN", 2)}});
  EXPECT_EQ(df.batchesPerStep(), 4);
  EXPECT_TRUE(df.isAnchored("a"));
  EXPECT_FALSE(df.isAnchored("c"));
  EXPECT_EQ(df.art("b").rp(), 2);
  EXPECT_NE(errorOf([&] { df.art("c"); }).find("'c' is not an anchor"), std::string::npos);
  EXPECT_NE(errorOf([] { DataFlow(0, std::vector<TensorId>{"a"}); }).find("at least 1, got 0"), std::string::npos);
  std::string msg = errorOf([] { DataFlow(3, {{"a", AnchorReturnType("EveryN", 2)}}); });
  EXPECT_NE(msg.find("anchor 'a' returns every 2 batches, which does not divide batchesPerStep 3"), std::string::npos)
      << msg;
  EXPECT_NE(errorOf([] { DataFlow(1, std::vector<TensorId>{""}); }).find("empty tensor id"), std::string::npos);
  DataFlow list(2, std::vector<TensorId>{"y", "x"}, AnchorReturnType("Final"));
  EXPECT_EQ(list.anchors(), (std::vector<TensorId>{"y", "x"}));  // order kept
  EXPECT_EQ(list.art("x").id(), AnchorReturnTypeId::Final);
}

// Four outputs y0..y3 = x + k (k = 0..3), x FLOAT [2]; serialized ONNX.
std::string fourOutputs() {
  ir::Graph g("four");
  ir::Tensor* x = g.addTensor("x", ir::ValueType::tensor(TensorInfo(DataType::Float, Shape{2})), ir::TensorKind::Input);
  g.addInput(x);
  for (int k = 0; k < 4; ++k) {
    NDArray c(DataType::Float, Shape{});
    *c.data<float>() = static_cast<float>(k);
    ir::Tensor* ct = g.addInitializer("c" + std::to_string(k), c, ir::TensorKind::Constant);
    ir::Tensor* y = g.addNode("Add", "", {x, ct}, {"y" + std::to_string(k)})->output(0);
    y->setType(ir::ValueType::tensor(TensorInfo(DataType::Float, Shape{2})));
    g.addOutput(y);
  }
  return onnxio::saveModelBytes(g);
}

std::shared_ptr<DeviceInfo> refDevice() { return DeviceManager::createDeviceManager().createReferenceDevice(); }

NDArray stepInput(int batches) {
  // Batch b holds {10b, 10b + 1}.
  NDArray x(DataType::Float, {batches, 2});
  for (int b = 0; b < batches; ++b) {
    x.data<float>()[2 * b] = 10.0f * static_cast<float>(b);
    x.data<float>()[2 * b + 1] = 10.0f * static_cast<float>(b) + 1;
  }
  return x;
}

TEST(StepIO, EveryAnchorReturnTypeWithSeveralBatches) {
  const int bps = 4;
  DataFlow df(bps, {{"y0", AnchorReturnType("All")},
                    {"y1", AnchorReturnType("EveryN", 2)},
                    {"y2", AnchorReturnType("Final")},
                    {"y3", AnchorReturnType("Sum")}});
  auto s = InferenceSession::createFromOnnxModel(fourOutputs(), df, refDevice());
  s->prepareDevice();
  EXPECT_EQ(s->inputArrayShape("x"), (Shape{4, 2}));
  // PopART's anchor shapes.
  EXPECT_EQ(s->anchorArrayShape("y0"), (Shape{4, 2}));
  EXPECT_EQ(s->anchorArrayShape("y1"), (Shape{2, 2}));
  EXPECT_EQ(s->anchorArrayShape("y2"), (Shape{2}));
  EXPECT_EQ(s->anchorArrayShape("y3"), (Shape{2}));
  auto anchors = s->initAnchorArrays();
  StepIO io({{"x", stepInput(bps)}}, anchors);
  for (int step = 0; step < 2; ++step) {  // a second step starts over
    s->run(io);
    const float* all = anchors["y0"].data<float>();
    for (int b = 0; b < bps; ++b) {
      EXPECT_EQ(all[2 * b], 10.0f * b);
      EXPECT_EQ(all[2 * b + 1], 10.0f * b + 1);
    }
    const float* every = anchors["y1"].data<float>();  // batches 1 and 3, plus 1
    EXPECT_EQ(every[0], 11.0f);
    EXPECT_EQ(every[1], 12.0f);
    EXPECT_EQ(every[2], 31.0f);
    EXPECT_EQ(every[3], 32.0f);
    const float* fin = anchors["y2"].data<float>();  // batch 3, plus 2
    EXPECT_EQ(fin[0], 32.0f);
    EXPECT_EQ(fin[1], 33.0f);
    const float* sum = anchors["y3"].data<float>();  // sum over batches of x + 3
    EXPECT_EQ(sum[0], 0 + 10 + 20 + 30 + 4 * 3.0f);
    EXPECT_EQ(sum[1], 1 + 11 + 21 + 31 + 4 * 3.0f);
  }
}

TEST(StepIO, OneBatchPerStepHasNoLeadingDimension) {
  auto s = InferenceSession::createFromOnnxModel(fourOutputs(), DataFlow(1, {"y1"}), refDevice());
  s->prepareDevice();
  EXPECT_EQ(s->inputArrayShape("x"), (Shape{2}));
  EXPECT_EQ(s->anchorArrayShape("y1"), (Shape{2}));
  auto anchors = s->initAnchorArrays();
  NDArray x(DataType::Float, {2});
  x.data<float>()[0] = 5;
  x.data<float>()[1] = 6;
  StepIO io({{"x", x}}, anchors);
  s->run(io);
  EXPECT_EQ(anchors["y1"].data<float>()[0], 6.0f);
  EXPECT_EQ(anchors["y1"].data<float>()[1], 7.0f);
}

TEST(StepIO, WrongLeadingDimensionNamesTheInput) {
  auto s = InferenceSession::createFromOnnxModel(fourOutputs(), DataFlow(3, {"y0"}), refDevice());
  s->prepareDevice();
  auto anchors = s->initAnchorArrays();
  StepIO io({{"x", stepInput(2)}}, anchors);
  std::string msg = errorOf([&] { s->run(io); });
  EXPECT_NE(msg.find("input 'x'"), std::string::npos) << msg;
  EXPECT_NE(msg.find("[3]"), std::string::npos) << msg;
  EXPECT_NE(msg.find("[2, 2]"), std::string::npos) << msg;
}

TEST(StepIOCallback, PullsInputsAndPushesAnchorsPerBatch) {
  const int bps = 3;
  auto s = InferenceSession::createFromOnnxModel(fourOutputs(), DataFlow(bps, {"y2"}), refDevice());
  int ins = 0, inDone = 0, outs = 0, outDone = 0;
  std::vector<NDArray> results;
  StepIOCallback io(
      [&](const TensorId& id, bool) {
        EXPECT_EQ(id, "x");
        NDArray a(DataType::Float, {2});
        a.data<float>()[0] = static_cast<float>(ins);
        a.data<float>()[1] = static_cast<float>(100 + ins);
        ++ins;
        return a;
      },
      [&](const TensorId&) { ++inDone; },
      [&](const TensorId& id) {
        EXPECT_EQ(id, "y2");
        ++outs;
        results.emplace_back(DataType::Float, Shape{2});
        return results.back();
      },
      [&](const TensorId&) { ++outDone; });
  s->run(io);
  EXPECT_EQ(ins, bps);
  EXPECT_EQ(inDone, bps);
  EXPECT_EQ(outs, bps);  // "All" by default
  EXPECT_EQ(outDone, bps);
  ASSERT_EQ(results.size(), 3u);
  EXPECT_EQ(results[2].data<float>()[0], 2.0f + 2);
  EXPECT_EQ(results[2].data<float>()[1], 102.0f + 2);
  // An output callback returning the wrong shape is reported.
  StepIOCallback bad([&](const TensorId&, bool) { return NDArray(DataType::Float, {2}); }, nullptr,
                     [&](const TensorId&) { return NDArray(DataType::Float, {3}); }, nullptr);
  std::string msg = errorOf([&] { s->run(bad); });
  EXPECT_NE(msg.find("output callback for 'y2'"), std::string::npos) << msg;
}

// ---- errors of issue 2 ----------------------------------------------------------------------------

class SessionErrors : public ::testing::Test {
 protected:
  void SetUp() override {
    session = InferenceSession::createFromOnnxModel(fourOutputs(), DataFlow(1, {"y0"}), refDevice());
    session->prepareDevice();
    anchors = session->initAnchorArrays();
  }
  std::unique_ptr<InferenceSession> session;
  std::map<TensorId, NDArray> anchors;
};

TEST_F(SessionErrors, WrongInputName) {
  StepIO io({{"x", NDArray(DataType::Float, {2})}, {"nope", NDArray(DataType::Float, {2})}}, anchors);
  std::string msg = errorOf([&] { session->run(io); });
  EXPECT_NE(msg.find("'nope'"), std::string::npos) << msg;
  EXPECT_NE(msg.find("inputs: x"), std::string::npos) << msg;
}

TEST_F(SessionErrors, MissingInput) {
  StepIO io({}, anchors);
  std::string msg = errorOf([&] { session->run(io); });
  EXPECT_NE(msg.find("'x'"), std::string::npos) << msg;
}

TEST_F(SessionErrors, WrongShape) {
  StepIO io({{"x", NDArray(DataType::Float, {3})}}, anchors);
  std::string msg = errorOf([&] { session->run(io); });
  EXPECT_NE(msg.find("input 'x' has shape [3], but the model expects FLOAT [2]"), std::string::npos) << msg;
}

TEST_F(SessionErrors, WrongDtype) {
  StepIO io({{"x", NDArray(DataType::Int32, {2})}}, anchors);
  std::string msg = errorOf([&] { session->run(io); });
  EXPECT_NE(msg.find("input 'x' is INT32"), std::string::npos) << msg;
  EXPECT_NE(msg.find("FLOAT"), std::string::npos) << msg;
}

TEST_F(SessionErrors, AnchorArrayOfTheWrongType) {
  std::map<TensorId, NDArray> wrong{{"y0", NDArray(DataType::Double, {2})}};
  StepIO io({{"x", NDArray(DataType::Float, {2})}}, wrong);
  std::string msg = errorOf([&] { session->run(io); });
  EXPECT_NE(msg.find("anchor array 'y0'"), std::string::npos) << msg;
}

TEST(SessionCreation, UnknownAnchorAndNoAnchors) {
  std::string msg = errorOf([] { InferenceSession::createFromOnnxModel(fourOutputs(), DataFlow(1, {"zz"}), refDevice()); });
  EXPECT_NE(msg.find("anchor 'zz' is not a tensor of the model"), std::string::npos) << msg;
  msg = errorOf([] { InferenceSession::createFromOnnxModel(fourOutputs(), DataFlow(1, AnchorReturnTypeMap{}), refDevice()); });
  EXPECT_NE(msg.find("no anchors"), std::string::npos) << msg;
  msg = errorOf([] { InferenceSession::createFromOnnxModel("no/such/model.onnx", DataFlow(1, {"y"}), refDevice()); });
  EXPECT_NE(msg.find("'no/such/model.onnx' does not exist"), std::string::npos) << msg;
}

// SessionOptions.enableBf16 is refused by name where it cannot be honoured: where the CPU (below
// GRAFT_CPU_ISA) has no avx512_bf16 (an AVX2 limit shows that on any host) and on the reference
// device (float32 only). tests/unit/runtime/bf16_test.cpp runs it where it can.
TEST(SessionCreation, Bf16IsRefusedWhereItCannotRun) {
  SessionOptions o;
  o.enableBf16 = true;
  auto create = [&](std::shared_ptr<DeviceInfo> dev) {
    return [&o, dev] {
      InferenceSession::createFromOnnxModel(fourOutputs(), DataFlow(1, {"y0"}), dev, InputShapeInfo(), o);
    };
  };
  auto cpuDevice = DeviceManager::createDeviceManager().createCpuDevice();
  std::string msg = errorOf(create(refDevice()));
  if (!support::cpuFeatures().avx512bf16) EXPECT_NE(msg.find("this CPU has no avx512_bf16"), std::string::npos) << msg;
  else
    EXPECT_NE(msg.find("SessionOptions.enableBf16: the reference device computes in float32 only"), std::string::npos)
        << msg;
  support::CpuIsa saved = support::cpuIsaLimit();
  support::setCpuIsaLimit(support::CpuIsa::Avx2);
  msg = errorOf(create(cpuDevice));
  support::setCpuIsaLimit(saved);
  EXPECT_NE(msg.find("SessionOptions.enableBf16: this CPU has no avx512_bf16 (its kernels use avx2, limited by "
                     "GRAFT_CPU_ISA)"),
            std::string::npos)
      << msg;
  if (support::cpuFeatures().avx512bf16) EXPECT_EQ(errorOf(create(cpuDevice)), "");
  o.enableBf16 = false;
  EXPECT_EQ(errorOf(create(refDevice())), "");
}

TEST(SessionCreation, ListsEveryUnsupportedOpAtOnce) {
  // Ops of a custom domain that graft will never implement, so the test keeps its meaning.
  auto m = testing::makeModel();
  auto* d = m.add_opset_import();
  d->set_domain("com.example");
  d->set_version(1);
  testing::addInput(m, "x", {int64_t{2}});
  testing::addNode(m.mutable_graph(), "Frobnicate", {"x"}, {"a"}, "com.example")->set_name("frob1");
  testing::addNode(m.mutable_graph(), "Relu", {"a"}, {"b"});
  testing::addNode(m.mutable_graph(), "Frobnicate", {"b"}, {"c"}, "com.example")->set_name("frob2");
  testing::addNode(m.mutable_graph(), "Twiddle", {"c"}, {"y"}, "com.example")->set_name("twiddle");
  testing::addOutput(m, "y", {int64_t{2}});
  std::string msg = errorOf([&] {
    InferenceSession::createFromOnnxModel(testing::serialize(m), DataFlow(1, {"y"}), refDevice());
  });
  EXPECT_NE(msg.find("2 op types of this model are not supported"), std::string::npos) << msg;
  EXPECT_NE(msg.find("com.example::Frobnicate (2 nodes: 'frob1', 'frob2')"), std::string::npos) << msg;
  EXPECT_NE(msg.find("com.example::Twiddle (1 node: 'twiddle')"), std::string::npos) << msg;
  EXPECT_EQ(msg.find("Relu"), std::string::npos) << msg;
}

TEST(SessionCreation, InputShapeInfoForSymbolicDims) {
  auto m = testing::makeModel();
  testing::addInput(m, "x", {std::string("n")});
  testing::addNode(m.mutable_graph(), "Neg", {"x"}, {"y"});
  testing::addOutput(m, "y", {std::string("n")});
  InputShapeInfo shapes;
  shapes.add("x", TensorInfo(DataType::Float, Shape{5}));
  auto s = InferenceSession::createFromOnnxModel(testing::serialize(m), DataFlow(1, {"y"}), refDevice(), shapes);
  s->prepareDevice();
  EXPECT_EQ(s->anchorArrayShape("y"), (Shape{5}));
  InputShapeInfo wrong;
  wrong.add("q", TensorInfo(DataType::Float, Shape{5}));
  std::string msg = errorOf([&] {
    InferenceSession::createFromOnnxModel(testing::serialize(m), DataFlow(1, {"y"}), refDevice(), wrong);
  });
  EXPECT_NE(msg.find("InputShapeInfo names 'q'"), std::string::npos) << msg;
  // Symbolic dimensions bind per run; inputs that disagree on a shared symbol are reported.
  auto m2 = testing::makeModel();
  testing::addInput(m2, "a", {std::string("n")});
  testing::addInput(m2, "b", {std::string("n")});
  testing::addNode(m2.mutable_graph(), "Add", {"a", "b"}, {"y"});
  testing::addOutput(m2, "y", {std::string("n")});
  auto s2 = InferenceSession::createFromOnnxModel(testing::serialize(m2), DataFlow(1, {"y"}), refDevice());
  std::map<TensorId, NDArray> out{{"y", NDArray(DataType::Float, {3})}};
  StepIO io({{"a", NDArray(DataType::Float, {3})}, {"b", NDArray(DataType::Float, {4})}}, out);
  msg = errorOf([&] { s2->run(io); });
  EXPECT_NE(msg.find("input 'b' has n = 4"), std::string::npos) << msg;
}

}  // namespace
}  // namespace graft
