// Every registered op must have a test suite of its own, named after it: TEST(Relu, ...) for
// ai.onnx ops, TEST(Graphcore_Gelu, ...) for ai.graphcore, TEST(Graft_X, ...) for ai.graft and
// TEST(Training_Adam, ...) for ai.onnx.preview.training.
#include <gtest/gtest.h>

#include <set>

#include "ops/registry.hpp"

namespace {

std::string suiteNameFor(const std::string& domain, const std::string& type) {
  if (domain.empty()) return type;
  if (domain == "ai.graphcore") return "Graphcore_" + type;
  if (domain == "ai.graft") return "Graft_" + type;
  if (domain == "ai.onnx.preview.training") return "Training_" + type;
  if (domain == "ai.onnx.ml") return "ML_" + type;
  return domain + "_" + type;
}

TEST(OpCoverage, EveryRegisteredOpHasATestSuite) {
  std::set<std::string> suites;
  auto* ut = ::testing::UnitTest::GetInstance();
  for (int i = 0; i < ut->total_test_suite_count(); ++i) suites.insert(ut->GetTestSuite(i)->name());
  std::vector<std::string> missing;
  for (const auto* def : graft::ops::Registry::instance().all()) {
    std::string suite = suiteNameFor(def->domain, def->type);
    if (!suites.count(suite)) missing.push_back(suite);
  }
  EXPECT_TRUE(missing.empty()) << missing.size() << " registered op(s) have no test suite of their own: "
                               << ::testing::PrintToString(missing);
}

// Every op with a VJP must have a finite-difference case: a test of its suite whose name says
// gradient (TEST(Relu, Gradient), TEST(Conv, GradientStrided), ...; they call gradCheck).
TEST(VjpCoverage, EveryOpWithAVjpHasAGradientTest) {
  std::set<std::string> suites;
  auto* ut = ::testing::UnitTest::GetInstance();
  for (int i = 0; i < ut->total_test_suite_count(); ++i) {
    const ::testing::TestSuite* s = ut->GetTestSuite(i);
    for (int j = 0; j < s->total_test_count(); ++j)
      if (std::string(s->GetTestInfo(j)->name()).find("Grad") != std::string::npos) suites.insert(s->name());
  }
  std::vector<std::string> missing;
  for (const auto* def : graft::ops::Registry::instance().all()) {
    if (!def->vjp) continue;
    std::string suite = suiteNameFor(def->domain, def->type);
    if (!suites.count(suite)) missing.push_back(suite);
  }
  EXPECT_TRUE(missing.empty()) << missing.size() << " op(s) with a VJP have no gradient test in their suite: "
                               << ::testing::PrintToString(missing);
}

}  // namespace
