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

/// Every case of backend_cases_*.cpp (convolutions, matmuls, pools, normalisations, reorders,
/// recurrent cells and their gradients), built on first use.
const std::vector<BackendCase>& allCases();

/// What the case files share (backend_cases.cpp).
namespace cases {
using Ints = std::vector<int64_t>;
/// Adds a case; its name made an identifier; `constant` per input (missing: fed at run time).
void add(std::string name, OpCase op, std::vector<bool> constant = {}, double tol = 1e-4);
/// The case added last (to set its ISA, expected error or derived inputs).
BackendCase& last();
/// A float array of shape s, uniform in [lo, hi), seeded by `salt`.
NDArray rnd(Shape s, const std::string& salt, double lo = -1, double hi = 1);
/// Plain [N, C, S...] -> [N, ceil(C/b), S..., b].
NDArray blockOf(const NDArray& x, int64_t b);
/// x (float32) rounded to bf16, as a BFLOAT16 array (the reference's Cast: to nearest even).
NDArray toBf16(const NDArray& x);
/// The FusedConv / FusedMatMul attributes of activation `act` ("" for none).
ir::Attributes activationAttrs(const std::string& act);
/// `x` with NaN, +inf, -inf and denormals sprinkled in.
NDArray sprinkled(const NDArray& x);
/// The activations the fused kernels' cases run ("" for none).
extern const std::vector<std::string> kActivations;

/// The case families, each in its file.
void convCases();                  // backend_cases_conv.cpp
void convChainCases();             // backend_cases_conv.cpp
void channelsLastTrainingCases();  // backend_cases_conv.cpp
void matmulCases();                // backend_cases_matmul.cpp
void poolCases();                  // backend_cases_pool_norm.cpp
void normCases();                  // backend_cases_pool_norm.cpp
void reorderCases();               // backend_cases_pool_norm.cpp
void rnnCases();                   // backend_cases_rnn.cpp
void smallBatchLstmCases();        // backend_cases_rnn.cpp
void rnnGradCases();               // backend_cases_rnn.cpp
void lstmTrainingCases();          // backend_cases_rnn.cpp
}  // namespace cases

}  // namespace graft::testing
