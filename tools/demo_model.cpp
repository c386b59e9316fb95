#include "demo_model.hpp"

#include <graft/builder.hpp>

#include <cmath>

namespace graft::tools {
namespace {

// splitmix64: a fixed, platform-independent sequence (std:: distributions differ between
// standard libraries, and the demo model must be the same everywhere).
struct SplitMix {
  uint64_t state;
  uint64_t next() {
    uint64_t z = (state += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
  }
  // Uniform in [-1, 1).
  float uniform() { return static_cast<float>(static_cast<double>(next() >> 11) * 0x1.0p-53 * 2.0 - 1.0); }
};

NDArray uniformArray(Shape shape, float scale, SplitMix& rng) {
  NDArray a(DataType::Float, std::move(shape));
  for (int64_t i = 0; i < a.numel(); ++i) a.data<float>()[i] = scale * rng.uniform();
  return a;
}

}  // namespace

std::unique_ptr<ir::Graph> buildDemoMlp(const DemoMlpOptions& o) {
  SplitMix rng{o.seed};
  auto g = std::make_unique<ir::Graph>("mlp");
  g->setOpsetVersion(17);
  auto info = [](std::vector<Dim> dims) { return ir::ValueType::tensor(TensorInfo(DataType::Float, std::move(dims))); };
  ir::Tensor* x = g->addTensor("x", info({Dim("batch"), Dim(o.inputs)}), ir::TensorKind::Input);
  g->addInput(x);
  float s1 = 1.0f / std::sqrt(static_cast<float>(o.inputs));
  float s2 = 1.0f / std::sqrt(static_cast<float>(o.hidden));
  ir::Tensor* w1 = g->addInitializer("fc1.weight", uniformArray({o.inputs, o.hidden}, s1, rng));
  ir::Tensor* b1 = g->addInitializer("fc1.bias", uniformArray({o.hidden}, s1, rng));
  ir::Tensor* w2 = g->addInitializer("fc2.weight", uniformArray({o.hidden, o.classes}, s2, rng));
  ir::Tensor* b2 = g->addInitializer("fc2.bias", uniformArray({o.classes}, s2, rng));

  auto op = [&](const std::string& type, std::vector<ir::Tensor*> ins, const std::string& out, ir::Attributes a = {}) {
    return g->addNode(type, "", ins, {out}, std::move(a), out)->output(0);
  };
  ir::Tensor* h = op("MatMul", {x, w1}, "fc1/MatMul");
  h = op("Add", {h, b1}, "fc1/Add");
  h = op("Relu", {h}, "relu");
  ir::Tensor* logits = op("MatMul", {h, w2}, "fc2/MatMul");
  logits = op("Add", {logits, b2}, "logits");
  ir::Attributes sa;
  sa.set("axis", int64_t{-1});
  ir::Tensor* probs = op("Softmax", {logits}, "probs", std::move(sa));
  probs->setType(info({Dim("batch"), Dim(o.classes)}));
  g->addOutput(probs);
  ir::verifyGraph(*g);
  return g;
}

std::string buildFashionModel(FashionModelKind kind, uint64_t seed) {
  SplitMix rng{seed};
  Builder b;
  constexpr int kOpset = 17;
  TensorId image = b.addInputTensor(TensorInfo(DataType::UInt8, {Dim("batch"), Dim(28), Dim(28)}), "image");
  auto op = [&](const std::string& type, const std::vector<TensorId>& ins, const AttributeMap& attrs = {}) {
    return b.addOp(type, "", kOpset, ins, attrs).at(0);
  };
  // Constants as Constant ops: floating-point initializers would be trained.
  auto scalar = [&](float v) {
    NDArray a(DataType::Float, {});
    a.data<float>()[0] = v;
    return op("Constant", {}, {{"value", a}});
  };
  auto ints = [&](std::vector<int64_t> v, const std::string& name) {
    NDArray a(DataType::Int64, {static_cast<int64_t>(v.size())});
    std::copy(v.begin(), v.end(), a.data<int64_t>());
    return b.addInitializedInputTensor(a, name);
  };
  // Pixel statistics of the Fashion-MNIST training set (mean 72.94 / 255, std 90.02 / 255).
  constexpr float kMean = 0.2860f, kStd = 0.3530f;
  b.pushNameScope("normalize");
  TensorId x = op("Cast", {image}, {{"to", int64_t{1}}});
  x = op("Mul", {x, scalar(1.0f / (255.0f * kStd))});
  x = op("Add", {x, scalar(-kMean / kStd)});
  b.popNameScope();

  auto heUniform = [&](Shape shape, int64_t fanIn) {
    return uniformArray(std::move(shape), std::sqrt(6.0f / static_cast<float>(fanIn)), rng);
  };
  auto dense = [&](const std::string& name, TensorId in, int64_t fanIn, int64_t fanOut, bool relu) {
    b.pushNameScope(name);
    TensorId w = b.addInitializedInputTensor(heUniform({fanOut, fanIn}, fanIn), "weight");
    TensorId bias = b.addInitializedInputTensor(NDArray(DataType::Float, {fanOut}), "bias");
    TensorId y = op("Gemm", {in, w, bias}, {{"transB", int64_t{1}}});
    if (relu) y = op("Relu", {y});
    b.popNameScope();
    return y;
  };
  if (kind == FashionModelKind::Cnn) {
    x = op("Unsqueeze", {x, ints({1}, "channel_axis")});
    auto conv = [&](const std::string& name, TensorId in, int64_t cin, int64_t cout) {
      b.pushNameScope(name);
      TensorId w = b.addInitializedInputTensor(heUniform({cout, cin, 3, 3}, cin * 9), "weight");
      TensorId bias = b.addInitializedInputTensor(NDArray(DataType::Float, {cout}), "bias");
      TensorId y = op("Conv", {in, w, bias},
                      {{"kernel_shape", std::vector<int64_t>{3, 3}}, {"pads", std::vector<int64_t>{1, 1, 1, 1}}});
      y = op("Relu", {y});
      y = op("MaxPool", {y}, {{"kernel_shape", std::vector<int64_t>{2, 2}}, {"strides", std::vector<int64_t>{2, 2}}});
      b.popNameScope();
      return y;
    };
    x = conv("conv1", x, 1, 16);   // [batch, 16, 14, 14]
    x = conv("conv2", x, 16, 32);  // [batch, 32, 7, 7]
    x = op("Flatten", {x}, {{"axis", int64_t{1}}});
    x = dense("fc1", x, 32 * 7 * 7, 128, true);
  } else {
    x = op("Flatten", {x}, {{"axis", int64_t{1}}});
    x = dense("fc1", x, 28 * 28, 256, true);
  }
  TensorId logits = dense("fc2", x, kind == FashionModelKind::Cnn ? 128 : 256, 10, false);
  b.addOutputTensor(logits);
  b.setGraphName(kind == FashionModelKind::Cnn ? "fashion_cnn" : "fashion_mlp");
  return b.getModelProto();
}

}  // namespace graft::tools
