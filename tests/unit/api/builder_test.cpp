// The C++ Builder: ids, inference, annotations, errors, and a built model running in a session.
#include <graft/builder.hpp>
#include <graft/graft.hpp>
#include <gtest/gtest.h>

namespace graft {
namespace {

NDArray floats(Shape shape, std::vector<float> v) {
  NDArray a(DataType::Float, std::move(shape));
  std::copy(v.begin(), v.end(), a.data<float>());
  return a;
}

TEST(Builder, IdsShapesAndModel) {
  Builder b;
  TensorId x = b.addInputTensor(TensorInfo("FLOAT", {2, 3}), "x");
  TensorId w = b.addInitializedInputTensor(floats({3, 2}, {1, 2, 3, 4, 5, 6}), "w");
  TensorId y = b.addOp("MatMul", "", 10, {x, w}).at(0);
  TensorId z = b.addOp("Relu", "ai.onnx", 10, {y}, {}, -1, "act").at(0);
  EXPECT_EQ(y, "MatMul:0");
  EXPECT_EQ(z, "Relu:0");
  EXPECT_EQ(b.addOp("Relu", "", 10, {z}).at(0), "Relu:0/1");
  EXPECT_EQ(b.getTensorShape(y), (Shape{2, 2}));
  EXPECT_EQ(b.getTensorDtypeString(z), "float32");
  EXPECT_EQ(b.getInputTensorIds(), (std::vector<TensorId>{"x", "w"}));
  EXPECT_EQ(b.getTrainableTensorIds(), (std::vector<TensorId>{"w"}));
  EXPECT_EQ(b.onnxOpsetVersion(), 10);
  b.addOutputTensor(z);

  auto session = InferenceSession::createFromOnnxModel(b.getModelProto(), DataFlow(1, {z}),
                                                       DeviceManager::createDeviceManager().createReferenceDevice());
  session->prepareDevice();
  auto anchors = session->initAnchorArrays();
  NDArray in = floats({2, 3}, {1, 0, -1, 0, 1, 0});
  StepIO io({{x, in}}, anchors);
  session->run(io);
  // [1,0,-1] @ w = [1-5, 2-6] = [-4, -4] -> relu 0; [0,1,0] @ w = [3, 4].
  const float* out = anchors.at(z).data<float>();
  EXPECT_EQ(std::vector<float>(out, out + 4), (std::vector<float>{0, 0, 3, 4}));
}

TEST(Builder, AttributesAreCheckedAndConverted) {
  Builder b;
  TensorId x = b.addInputTensor("FLOAT", {4, 2}, "x");
  TensorId w = b.addInputTensor("FLOAT", {3, 2}, "w");
  // An integer for the float attribute alpha is converted.
  TensorId g = b.addOp("Gemm", "", 11, {x, w}, {{"alpha", int64_t{2}}, {"transB", int64_t{1}}}).at(0);
  EXPECT_EQ(b.getTensorShape(g), (Shape{4, 3}));
  EXPECT_FLOAT_EQ(std::get<float>(b.getNodeAttribute("alpha", {g})), 2.0f);
  EXPECT_THROW(b.addOp("Gemm", "", 11, {x, w}, {{"gamma", 1.0f}}), Error);
  EXPECT_THROW(b.addOp("Gemm", "", 11, {x, w}, {{"alpha", std::string("big")}}), Error);
  EXPECT_THROW(b.addOp("Transpose", "", 11, {x}, {{"perm", 1.5f}}), Error);
}

TEST(Builder, ErrorsNameTheOpOrTensor) {
  Builder b;
  TensorId x = b.addInputTensor("FLOAT", {2, 3}, "x");
  TensorId w = b.addInputTensor("FLOAT", {4, 5}, "w");
  auto message = [&](auto f) {
    try {
      f();
    } catch (const Error& e) {
      return std::string(e.what());
    }
    return std::string("no error");
  };
  EXPECT_NE(message([&] { b.addOp("MatMul", "", 10, {x, w}); }).find("MatMul"), std::string::npos);
  EXPECT_NE(message([&] { b.addOp("Relu", "", 10, {"nope"}); }).find("unknown tensor 'nope'"), std::string::npos);
  EXPECT_NE(message([&] { b.addOp("Relu", "", 10, {x, w}); }).find("takes 1 inputs, got 2"), std::string::npos);
  EXPECT_NE(message([&] { b.addOp("NoSuchOp", "", 10, {x}); }).find("no op 'NoSuchOp'"), std::string::npos);
  EXPECT_NE(message([&] { b.addOp("HardSwish", "", 10, {x}); }).find("exists from opset 14"), std::string::npos);
  b.addOp("Relu", "", 10, {x});
  EXPECT_NE(message([&] { b.addOp("Relu", "", 11, {x}); }).find("already uses ai.onnx opset 10"), std::string::npos);
  // The failed ops left nothing behind.
  EXPECT_EQ(b.getValueTensorIds(), (std::vector<TensorId>{"Relu:0"}));
}

TEST(Builder, AnnotationsAndScopes) {
  Builder b;
  TensorId x = b.addInputTensor("FLOAT", {2}, "x");
  b.pushAttributeScope("__ipu_number", 1);
  b.pushNameScope("enc");
  TensorId y = b.addOp("Neg", "", 13, {x}).at(0);
  b.popNameScope();
  b.popAttributeScope("__ipu_number");
  EXPECT_EQ(y, "enc/Neg:0");
  EXPECT_EQ(b.getVirtualGraph(y), 1);
  b.pipelineStage(y, 2);
  EXPECT_EQ(b.getPipelineStage(y), 2);
  EXPECT_THROW(b.popNameScope(), Error);
  EXPECT_THROW(b.getPipelineStage(x), Error);
  // Annotations survive the round trip through ONNX.
  b.addOutputTensor(y);
  auto b2 = Builder::createFromOnnxModel(b.getModelProto());
  EXPECT_EQ(b2->getVirtualGraph(y), 1);
  EXPECT_EQ(b2->getPipelineStage(y), 2);
}

TEST(Builder, GraphcoreOpsAtOlderOpsetsLoadInSessions) {
  Builder b;
  TensorId x = b.addInputTensor("FLOAT", {3}, "x");
  TensorId r = b.addOp("Relu", "", 10, {x}).at(0);
  TensorId g = b.addOp("Gelu", "ai.graphcore", 1, {r}).at(0);
  TensorId n = b.addOp("Neg", "", 10, {g}).at(0);
  b.addOutputTensor(n);
  auto session = InferenceSession::createFromOnnxModel(b.getModelProto(), DataFlow(1, {n}),
                                                       DeviceManager::createDeviceManager().createCpuDevice());
  session->prepareDevice();
  auto anchors = session->initAnchorArrays();
  StepIO io({{x, floats({3}, {-1, 0, 1})}}, anchors);
  session->run(io);
  const float* out = anchors.at(n).data<float>();
  EXPECT_FLOAT_EQ(out[0], 0.0f);
  EXPECT_NEAR(out[2], -0.841192f, 1e-5);
}

TEST(Builder, Signatures) {
  auto ops = builderOpSignatures("ai.onnx", 11);
  ASSERT_FALSE(ops.empty());
  auto gemm = std::find_if(ops.begin(), ops.end(), [](const auto& s) { return s.type == "Gemm"; });
  ASSERT_NE(gemm, ops.end());
  EXPECT_EQ(gemm->sinceVersion, 11);
  EXPECT_EQ(gemm->attributes.size(), 4u);
  auto split = findOpSignature("", "Split", 11);
  ASSERT_TRUE(split.has_value());
  EXPECT_EQ(split->maxOutputs, -1);
  EXPECT_FALSE(findOpSignature("", "HardSwish", 13).has_value());
  auto gc = builderOpSignatures("ai.graphcore", 1);
  EXPECT_GE(gc.size(), 4u);
  EXPECT_THROW(builderOpSignatures("com.example", 1), Error);
}

}  // namespace
}  // namespace graft
