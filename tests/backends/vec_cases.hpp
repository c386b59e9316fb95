#pragma once
// Cases for the cpu backend's vectorised kernels, each run both through the cpu backend and
// through the op's reference kernel (the matrix in cpu_vs_reference_test.cpp compares them).
// Families register their cases with GRAFT_VEC_CASES; the matrix fails for a registered kernel
// that no case selects.
#include <functional>
#include <string>
#include <vector>

#include "../ops/op_test_util.hpp"

namespace graft::testing {

struct VecCase {
  std::string label;  ///< shown on failure
  OpCase op;
  double rtol = 1e-5, atol = 1e-6;
  /// In-place ops without outputs (optimizer updates): compare these inputs after the run.
  std::vector<int> mutatedInputs;
  /// The cpu backend must pick a fast kernel (not the reference) for this case.
  bool expectFast = true;
  /// Non-empty: bad input that both backends must refuse with a graft::Error saying this.
  std::string expectError;
};

using VecCaseBuilder = void (*)(std::vector<VecCase>&);

/// The GRAFT_VEC_CASES blocks. They run on the first call of vecCases(), not at start-up: their
/// random inputs would otherwise be drawn by every process ctest starts for a single test.
std::vector<VecCaseBuilder>& vecCaseBuilders();

/// Every registered case, from every GRAFT_VEC_CASES block (built once, on first use).
const std::vector<VecCase>& vecCases();

}  // namespace graft::testing

#define GRAFT_VEC_CASES(name)                                                                \
  static void graftVecCases_##name(std::vector<::graft::testing::VecCase>& cases);       \
  [[maybe_unused]] static const bool graftVecCasesAdded_##name =                             \
      (::graft::testing::vecCaseBuilders().push_back(&graftVecCases_##name), true);                        \
  static void graftVecCases_##name(std::vector<::graft::testing::VecCase>& cases)
