#pragma once
// The small model `make demo` runs: an MLP classifier built directly as graft IR.
#include <cstdint>
#include <memory>

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

}  // namespace graft::tools
