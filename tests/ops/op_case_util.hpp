#pragma once
// Building an OpCase and running it on the reference backend in one call, for op tests that
// compare with values computed in the test itself.
#include <string>
#include <utility>
#include <vector>

#include "op_test_util.hpp"

namespace graft::testing {

/// An OpCase of `type` (ai.onnx) with these inputs, attributes and number of outputs.
inline OpCase opCase(const std::string& type, std::vector<NDArray> in, ir::Attributes a = {}, int numOutputs = 1) {
  OpCase c;
  c.type = type;
  c.inputs = std::move(in);
  c.attrs = std::move(a);
  c.numOutputs = numOutputs;
  return c;
}

/// Output 0 of `type` on the reference backend.
inline NDArray run1(const std::string& type, std::vector<NDArray> in, ir::Attributes a = {}) {
  return runReference(opCase(type, std::move(in), std::move(a))).at(0);
}

/// Every output of `type` on the reference backend.
inline std::vector<NDArray> runOutputs(const std::string& type, std::vector<NDArray> in, ir::Attributes a = {},
                                       int numOutputs = 1) {
  return runReference(opCase(type, std::move(in), std::move(a), numOutputs));
}

}  // namespace graft::testing
