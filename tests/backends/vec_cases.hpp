#pragma once
// Cases for the cpu backend's kernels, each run both through the cpu backend and through the op's
// reference kernel (backend_vs_reference_test.cpp compares them). Kernel families register their
// cases with GRAFT_BACKEND_CASES; the coverage check fails when a registered cpu kernel has none.
#include <functional>
#include <string>
#include <vector>

#include "../ops/op_test_util.hpp"

namespace graft::testing {

struct BackendCase {
  std::string label;  ///< shown on failure
  OpCase op;
  double rtol = 1e-5, atol = 1e-6;
  /// In-place ops without outputs (optimizer updates): compare these inputs after the run.
  std::vector<int> mutatedInputs;
  /// The cpu backend must pick a fast kernel (not the reference) for this case.
  bool expectFast = true;
};

/// Every registered case, from every GRAFT_BACKEND_CASES block.
std::vector<BackendCase>& backendCases();

}  // namespace graft::testing

#define GRAFT_BACKEND_CASES(name)                                                                \
  static void graftBackendCases_##name(std::vector<::graft::testing::BackendCase>& cases);       \
  [[maybe_unused]] static const bool graftBackendCasesAdded_##name =                             \
      (graftBackendCases_##name(::graft::testing::backendCases()), true);                        \
  static void graftBackendCases_##name(std::vector<::graft::testing::BackendCase>& cases)
