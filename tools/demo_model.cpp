#include "demo_model.hpp"

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

}  // namespace graft::tools
