// The kernel libraries' cases of the backend test matrix (cpu_vs_reference_test.cpp says how they
// run): many shapes and attribute combinations per op, weights both constant (packed at compile
// time) and fed at run time. This file holds the list and the helpers; the cases themselves are
// in backend_cases_<family>.cpp (convolutions, matmuls, pools and normalisations, recurrent cells).
#include "backend_cases.hpp"

#include <cctype>
#include <functional>
#include <limits>

namespace graft::testing {
namespace cases {
namespace {

std::vector<BackendCase>& registry() {
  static std::vector<BackendCase> all;
  return all;
}

uint64_t seedOf(const std::string& s) { return std::hash<std::string>{}(s)&0xffffff; }

}  // namespace

void add(std::string name, OpCase op, std::vector<bool> constant, double tol) {
  for (char& ch : name)
    if (!isalnum(static_cast<unsigned char>(ch))) ch = '_';
  constant.resize(op.inputs.size(), false);
  registry().push_back({std::move(name), std::move(op), std::move(constant), tol, tol});
}

BackendCase& last() { return registry().back(); }

NDArray rnd(Shape s, const std::string& salt, double lo, double hi) {
  return randomArray(DataType::Float, std::move(s), seedOf(salt), lo, hi);
}

// Plain [N, C, S...] -> [N, ceil(C/b), S..., b].
NDArray blockOf(const NDArray& x, int64_t b) {
  OpCase c{"ToBlocked", {x}, attrs({{"block", b}})};
  c.domain = "ai.graft";
  return runReference(c).at(0);
}

// x (float32) rounded to bf16, as a BFLOAT16 array (the reference's Cast: to nearest even).
NDArray toBf16(const NDArray& x) {
  return runReference(OpCase{"Cast", {x}, attrs({{"to", static_cast<int64_t>(DataType::BFloat16)}})}).at(0);
}

ir::Attributes activationAttrs(const std::string& act) {
  ir::Attributes a;
  if (act.empty()) return a;
  if (act == "Gelu") {
    a.set("activation", act);
    a.set("activation_domain", std::string("ai.graphcore"));
    return a;
  }
  if (act == "GeluErf") {  // ai.graft's exact Gelu (fuse-gelu writes it)
    a.set("activation", act);
    a.set("activation_domain", std::string("ai.graft"));
    return a;
  }
  a.set("activation", act);
  if (act == "LeakyRelu") a.set("activation_alpha", 0.1f);
  if (act == "Elu") a.set("activation_alpha", 0.8f);
  if (act == "HardSigmoid") {
    a.set("activation_alpha", 0.25f);
    a.set("activation_beta", 0.4f);
  }
  if (act == "Clip") {
    a.set("activation_alpha", -0.3f);
    a.set("activation_beta", 0.6f);
  }
  return a;
}

// `x` with NaN, +inf, -inf and denormals sprinkled in (issue 16: the cpu's max pooling dropped
// NaN, the reference kept it).
NDArray sprinkled(const NDArray& x) {
  NDArray y = x.clone();
  float* p = y.data<float>();
  for (int64_t i = 0; i < y.numel(); ++i) {
    if (i % 23 == 5)
      p[i] = std::numeric_limits<float>::quiet_NaN();
    else if (i % 29 == 7)
      p[i] = std::numeric_limits<float>::infinity();
    else if (i % 31 == 11)
      p[i] = -std::numeric_limits<float>::infinity();
    else if (i % 37 == 13)
      p[i] = 1e-40f;
  }
  return y;
}

const std::vector<std::string> kActivations = {"",          "Relu",        "LeakyRelu", "Sigmoid",  "Tanh", "Elu",
                                               "HardSwish", "HardSigmoid", "Clip",      "Softplus", "Gelu", "GeluErf"};

}  // namespace cases

const std::vector<BackendCase>& allCases() {
  static bool built = [] {
    using namespace cases;
    convCases();
    convChainCases();
    matmulCases();
    poolCases();
    normCases();
    reorderCases();
    rnnCases();
    smallBatchLstmCases();
    rnnGradCases();
    lstmTrainingCases();
    channelsLastTrainingCases();
    return true;
  }();
  (void)built;
  return cases::registry();
}

}  // namespace graft::testing
