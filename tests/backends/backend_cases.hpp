#pragma once
// The kernel libraries' cases of the backend test matrix (cpu_vs_reference_test.cpp): many shapes
// and attribute combinations per op, built in backend_cases.cpp.
#include <functional>
#include <string>
#include <vector>

#include "../ops/op_test_util.hpp"
#include "support/cpu_features.hpp"

namespace graft::testing {

struct BackendCase {
  std::string name;
  OpCase op;
  /// Inputs that are Constants of the graph (the others are graph inputs).
  std::vector<bool> constant;
  double rtol = 1e-4, atol = 1e-4;
  /// Non-empty: both backends must throw graft::Error with this in its message.
  std::string expectError = {};
  /// The ISA limit the case runs under (GRAFT_CPU_ISA's): Avx2 for the AVX2 kernels, which an
  /// AVX-512 host would otherwise leave to oneDNN, so that they are checked on every host.
  support::CpuIsa isa = support::CpuIsa::Native;
  /// Set where some inputs are functions of the others (LSTMGrad's last input, the forward's Y):
  /// rebuilds them, in place, after the second run has changed the others.
  std::function<void(std::vector<NDArray>& inputs)> derive = {};
};

/// Every case of backend_cases.cpp (convolutions, matmuls, pools, normalisations, reorders,
/// recurrent cells and their gradients), built on first use.
const std::vector<BackendCase>& allCases();

}  // namespace graft::testing
