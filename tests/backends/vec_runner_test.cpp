// Every case of the vectorised kernels (vec_cases.hpp) through the cpu backend and the reference
// kernel, compared element by element; and the check that each registered vectorised cpu kernel
// (named vec_*) has cases. Kernel libraries' kernels have their own cases and check.
#include <map>
#include <set>

#include "backends/cpu/cpu_kernels.hpp"
#include "ops/registry.hpp"
#include "passes/pass.hpp"
#include "vec_cases.hpp"

namespace graft::testing {

std::vector<VecCaseBuilder>& vecCaseBuilders() {
  static std::vector<VecCaseBuilder> builders;
  return builders;
}

const std::vector<VecCase>& vecCases() {
  static const std::vector<VecCase> cases = [] {
    std::vector<VecCase> all;
    for (VecCaseBuilder build : vecCaseBuilders()) build(all);
    return all;
  }();
  return cases;
}

namespace {

std::string opName(const std::string& domain, const std::string& type) { return domain.empty() ? type : domain + "::" + type; }

std::vector<NDArray> cloneAll(const std::vector<NDArray>& v) {
  std::vector<NDArray> out;
  for (const auto& a : v) out.push_back(a.valid() ? a.clone() : NDArray());
  return out;
}

// The cpu kernel the backend picks for the case's node (nullptr: the reference kernel).
const backends::cpu::CpuKernelDef* chosenKernel(const OpCase& c) {
  try {
    auto g = singleNodeGraph(c);
    passes::PassContext ctx;
    passes::runPipeline(*g, {"infer-shapes"}, ctx);
    return backends::cpu::CpuKernelRegistry::instance().find(*g->nodes()[0]);
  } catch (const Error&) {
    return nullptr;
  }
}

TEST(VecKernels, EveryRegisteredKernelHasCases) {
  std::set<std::string> covered;
  for (const VecCase& c : vecCases()) covered.insert(opName(c.op.domain, c.op.type));
  std::set<std::string> missing;
  for (const auto* d : backends::cpu::CpuKernelRegistry::instance().all())
    if (d->name.rfind("vec_", 0) == 0 && !covered.count(opName(d->domain, d->type)))
      missing.insert(opName(d->domain, d->type) + " (" + d->name + ")");
  EXPECT_TRUE(missing.empty()) << missing.size() << " cpu kernel(s) have no case comparing them with the reference: "
                               << ::testing::PrintToString(missing);
}

TEST(VecKernels, MatchTheReference) {
  auto cpu = backends::makeCpuBackend(2);
  std::map<std::string, int> skipped;
  int ran = 0;
  for (const VecCase& c : vecCases()) {
    SCOPED_TRACE(opName(c.op.domain, c.op.type) + " " + c.label);
    const ops::OpDef* def = ops::Registry::instance().find(c.op.domain, c.op.type);
    if (!def || !def->reference) {
      ++skipped[opName(c.op.domain, c.op.type)];
      continue;
    }
    if (c.expectFast) {
      EXPECT_NE(chosenKernel(c.op), nullptr) << "the cpu backend does not pick a fast kernel";
    }
    OpCase refCase = c.op, cpuCase = c.op;
    refCase.inputs = cloneAll(c.op.inputs);
    cpuCase.inputs = cloneAll(c.op.inputs);
    std::vector<NDArray> want, got;
    try {
      want = runReference(refCase);
    } catch (const Error& e) {
      // Bad input: the cpu kernel must refuse it too.
      EXPECT_THROW(runOnBackend(cpuCase, *cpu), Error) << "the reference throws: " << e.what();
      ++ran;
      continue;
    }
    got = runOnBackend(cpuCase, *cpu);
    ASSERT_EQ(got.size(), want.size());
    for (size_t i = 0; i < want.size(); ++i) {
      if (!want[i].valid()) continue;
      EXPECT_TRUE(allClose(got[i], want[i], c.rtol, c.atol)) << "output " << i;
    }
    for (int i : c.mutatedInputs)
      EXPECT_TRUE(allClose(cpuCase.inputs[i], refCase.inputs[i], c.rtol, c.atol)) << "updated input " << i;
    ++ran;
  }
  EXPECT_GT(ran, 0);
  if (!skipped.empty()) {
    std::string s;
    for (const auto& [op, n] : skipped) s += " " + op + "(" + std::to_string(n) + ")";
    std::cout << "[   NOTE   ] no reference kernel registered for:" << s << "; those cases were skipped\n";
  }
}

}  // namespace
}  // namespace graft::testing
