#pragma once
// The small models of `make demo`: an MLP classifier built directly as graft IR (for `graft run`),
// and Fashion-MNIST classifiers built with the Builder (trained by `graft train`).
#include <cstdint>
#include <memory>
#include <string>

#include "ir/graph.hpp"

namespace graft::tools {

struct DemoMlpOptions {
  int64_t inputs = 784;  ///< features per example (a flattened 28x28 image)
  int64_t hidden = 128;
  int64_t classes = 10;
  uint64_t seed = 42;  ///< the weights are a fixed function of the seed
};

/// x FLOAT [batch, inputs] -> MatMul, Add, Relu -> MatMul, Add -> Softmax -> probs FLOAT [batch, classes].
/// "batch" is a symbolic dimension. Weights are uniform in +-1/sqrt(fan_in) from a fixed
/// pseudo-random sequence, so every build writes the same model.
std::unique_ptr<ir::Graph> buildDemoMlp(const DemoMlpOptions& options = {});

/// The architectures of buildFashionModel.
enum class FashionModelKind {
  /// Conv(16, 3x3) Relu MaxPool(2) Conv(32, 3x3) Relu MaxPool(2) Gemm(128) Relu Gemm(10): 225k weights
  Cnn,
  /// Gemm(256) Relu Gemm(10): 204k weights
  Mlp,
};

/// A Fashion-MNIST classifier as serialized ONNX (built with graft's Builder): input "image"
/// UINT8 [batch, 28, 28] (the dataset's raw pixels), output logits FLOAT [batch, 10]. The model
/// scales the pixels itself ((x / 255 - mean) / std, with the training set's mean and standard
/// deviation), so the trained model takes the dataset's images as they are. Weights are He-uniform
/// (+-sqrt(6 / fan_in)) from a fixed pseudo-random sequence of `seed`; biases are zero.
std::string buildFashionModel(FashionModelKind kind, uint64_t seed = 42);

}  // namespace graft::tools
