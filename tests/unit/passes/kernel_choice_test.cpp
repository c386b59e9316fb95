// The kernel a compiled step runs is recorded in the step (and is the one that ran), the ISA limit
// turns an ISA-specific variant off on any host, each backend owns its pass pipelines, and the
// pipeline can stop after a named pass.
#include <gtest/gtest.h>

#include <graft/error.hpp>

#include <algorithm>
#include <fstream>

#include "backends/backend.hpp"
#include "pass_test_util.hpp"
#include "support/cpu_features.hpp"
#include "support/thread_pool.hpp"

namespace graft::passes::testing {
namespace {

// Restores the ISA limit a test changed.
struct IsaLimit {
  support::CpuIsa saved = support::cpuIsaLimit();
  explicit IsaLimit(support::CpuIsa isa) { support::setCpuIsaLimit(isa); }
  ~IsaLimit() { support::setCpuIsaLimit(saved); }
};

// X [8, 64] times a constant B [64, 1024], then Relu: the shape the AVX2 sgemm takes.
struct MatMulGraph {
  GraphBuilder b;
  NDArray x = randomFloats({8, 64}, 1);
  MatMulGraph() {
    ir::Tensor* in = b.input({8, 64});
    ir::Tensor* w = b.constant(randomFloats({64, 1024}, 2));
    b.outputs({b.op("Relu", {b.op("MatMul", {in, w})})});
  }
};

std::vector<plan::StepKernel> compiledKernels(const ir::Graph& g, backends::Backend& backend, NDArray x,
                                              NDArray* out = nullptr) {
  support::ThreadPool pool(backend.numThreads());
  auto exe = plan::compile(g, backend, pool);
  auto res = exe->run({ops::Value::fromTensor(std::move(x))});
  if (out) *out = res.at(0).tensor;
  return exe->stepKernels();
}

std::string kernelOf(const std::vector<plan::StepKernel>& ks, const std::string& opType) {
  for (const auto& k : ks)
    if (k.opType == opType) return k.kernel;
  return "(no " + opType + " step)";
}

TEST(KernelChoice, StepsRecordTheKernelTheyRun) {
  MatMulGraph m;
  auto ref = backends::makeReferenceBackend();
  auto cpu = backends::makeCpuBackend(1);
  NDArray want, got;
  auto refKernels = compiledKernels(*m.b.g, *ref, m.x.clone(), &want);
  EXPECT_EQ(kernelOf(refKernels, "MatMul"), "reference");
  EXPECT_EQ(kernelOf(refKernels, "Relu"), "reference");
  auto cpuKernels = compiledKernels(*m.b.g, *cpu, m.x.clone(), &got);
  EXPECT_EQ(kernelOf(cpuKernels, "Relu"), "vec_unary");
  const auto& f = support::cpuFeatures();
  // AVX-512 hosts (below GRAFT_CPU_ISA) leave matmuls to oneDNN's faster sgemm.
  EXPECT_EQ(kernelOf(cpuKernels, "MatMul"), f.avx2 && f.fma && !f.avx512f ? "sgemm_avx2_matmul" : "onednn_matmul");
  EXPECT_TRUE(close(got, want, 1e-4, 1e-4));
}

TEST(KernelChoice, OneDnnKernelsNameTheirImplementation) {
  MatMulGraph m;
  IsaLimit limit(support::CpuIsa::Baseline);  // no sgemm: oneDNN's matmul runs
  auto cpu = backends::makeCpuBackend(1);
  for (const auto& k : compiledKernels(*m.b.g, *cpu, m.x.clone()))
    if (k.opType == "MatMul") {
      EXPECT_EQ(k.kernel, "onednn_matmul");
      EXPECT_FALSE(k.implementation.empty()) << "oneDNN's impl_info_str() is recorded";
    }
}

TEST(CpuFeatures, IsaLimitTurnsTheAvx2SgemmOffOnAnyHost) {
  MatMulGraph m;
  auto ref = backends::makeReferenceBackend();
  NDArray want, got;
  compiledKernels(*m.b.g, *ref, m.x.clone(), &want);
  {
    IsaLimit limit(support::CpuIsa::Baseline);
    EXPECT_FALSE(support::cpuFeatures().avx2);
    EXPECT_FALSE(support::cpuFeatures().avx512f);
    EXPECT_EQ(support::cpuFeatures().isaName(), "baseline");
    auto cpu = backends::makeCpuBackend(1);
    EXPECT_EQ(kernelOf(compiledKernels(*m.b.g, *cpu, m.x.clone(), &got), "MatMul"), "onednn_matmul");
    EXPECT_TRUE(close(got, want, 1e-4, 1e-4));
  }
  {
    IsaLimit limit(support::CpuIsa::Avx2);
    EXPECT_FALSE(support::cpuFeatures().avx512f);
    EXPECT_EQ(support::cpuFeatures().avx2, support::hostCpuFeatures().avx2);
  }
}

// The vectorised loops (backends/cpu/vec_common.hpp, GRAFT_VEC_RUN) run the variant of the limit:
// the baseline under Baseline on any host, AVX2 under Avx2 where the CPU is x86-64-v3, AVX-512 with
// no limit where it is x86-64-v4; and the loops' results are the same in every variant.
TEST(CpuFeatures, IsaLimitPicksTheVecLoopVariant) {
  const auto& host = support::hostCpuFeatures();
  {
    IsaLimit limit(support::CpuIsa::Baseline);
    EXPECT_EQ(support::vecLoopIsa(), support::CpuIsa::Baseline);
    EXPECT_FALSE(support::cpuFeatures().x86_64_v3);
  }
  {
    IsaLimit limit(support::CpuIsa::Avx2);
    EXPECT_EQ(support::vecLoopIsa(), host.x86_64_v3 ? support::CpuIsa::Avx2 : support::CpuIsa::Baseline);
    EXPECT_FALSE(support::cpuFeatures().x86_64_v4);
  }
  {
    IsaLimit limit(support::CpuIsa::Native);
    support::CpuIsa want = host.x86_64_v4   ? support::CpuIsa::Avx512
                           : host.x86_64_v3 ? support::CpuIsa::Avx2
                                            : support::CpuIsa::Baseline;
    EXPECT_EQ(support::vecLoopIsa(), want);
  }
  // Tanh over a tensor in each variant, against the reference.
  GraphBuilder b;
  NDArray x = randomFloats({3, 1000}, 7);
  b.outputs({b.op("Tanh", {b.input({3, 1000})})});
  auto ref = backends::makeReferenceBackend();
  NDArray want;
  compiledKernels(*b.g, *ref, x.clone(), &want);
  for (auto isa : {support::CpuIsa::Baseline, support::CpuIsa::Avx2, support::CpuIsa::Native}) {
    IsaLimit limit(isa);
    auto cpu = backends::makeCpuBackend(1);
    NDArray got;
    EXPECT_EQ(kernelOf(compiledKernels(*b.g, *cpu, x.clone(), &got), "Tanh"), "vec_unary");
    EXPECT_TRUE(close(got, want, 1e-5, 1e-6)) << "variant " << static_cast<int>(support::vecLoopIsa());
  }
}

// graft reads f16c and the x86-64-v3/v4 levels from CPUID itself (clang 14's builtin knows
// neither): they agree with GCC's __builtin_cpu_supports on this host.
TEST(CpuFeatures, LevelsAgreeWithTheCompilersBuiltin) {
#if defined(__GNUC__) && !defined(__clang__) && defined(__x86_64__)
  const auto& host = support::hostCpuFeatures();
  EXPECT_EQ(host.f16c, __builtin_cpu_supports("f16c") && __builtin_cpu_supports("avx") != 0);
  EXPECT_EQ(host.x86_64_v3, __builtin_cpu_supports("x86-64-v3") != 0);
  EXPECT_EQ(host.x86_64_v4, __builtin_cpu_supports("x86-64-v4") != 0);
#else
  GTEST_SKIP() << "needs GCC's __builtin_cpu_supports levels (GCC 12+ on x86-64)";
#endif
}

// Half-rate AVX-512 is AMD's family 19h (Zen 4) with avx512f, as /proc/cpuinfo reads; an ISA
// limit below AVX-512 clears it with the other AVX-512 features.
TEST(CpuFeatures, HalfRateAvx512IsZen4) {
  std::ifstream in("/proc/cpuinfo");
  if (!in) GTEST_SKIP() << "no /proc/cpuinfo to compare with";
  std::string line, vendor, family;
  bool avx512f = false;
  while (std::getline(in, line) && !line.empty()) {
    auto value = [&] { return line.substr(line.find(':') + 2); };
    if (line.rfind("vendor_id", 0) == 0) vendor = value();
    if (line.rfind("cpu family", 0) == 0) family = value();
    if (line.rfind("flags", 0) == 0) avx512f = (" " + value() + " ").find(" avx512f ") != std::string::npos;
  }
  EXPECT_EQ(support::hostCpuFeatures().avx512HalfRate, vendor == "AuthenticAMD" && family == "25" && avx512f)
      << vendor << " family " << family;
  IsaLimit limit(support::CpuIsa::Avx2);
  EXPECT_FALSE(support::cpuFeatures().avx512HalfRate);
}

TEST(CpuFeatures, UnknownIsaNamesTheVariable) {
  try {
    support::parseCpuIsa("avx9000");
    FAIL() << "no error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("GRAFT_CPU_ISA"), std::string::npos) << e.what();
  }
  EXPECT_EQ(support::parseCpuIsa("avx2"), support::CpuIsa::Avx2);
}

TEST(BackendPasses, EachBackendOwnsItsPipelinesWithTheCommonPrefix) {
  auto ref = backends::makeReferenceBackend();
  auto cpu = backends::makeCpuBackend(1);
  const auto& prefix = commonPrefix();
  EXPECT_EQ(ref->passes(backends::PassMode::Inference), prefix);
  EXPECT_EQ(ref->passes(backends::PassMode::Training), prefix);
  for (auto mode : {backends::PassMode::Inference, backends::PassMode::Training}) {
    const auto& p = cpu->passes(mode);
    ASSERT_GT(p.size(), prefix.size());
    EXPECT_TRUE(std::equal(prefix.begin(), prefix.end(), p.begin()));
    for (const auto& id : p) EXPECT_NO_THROW(createPass(id)) << id;
  }
  const auto& inf = cpu->passes(backends::PassMode::Inference);
  EXPECT_NE(std::find(inf.begin(), inf.end(), "cpu-layout"), inf.end());
  const auto& train = cpu->passes(backends::PassMode::Training);
  EXPECT_EQ(std::find(train.begin(), train.end(), "constant-weights"), train.end());
}

TEST(BackendPasses, PipelineStopsAfterANamedPass) {
  MatMulGraph m;
  auto cpu = backends::makeCpuBackend(1);
  PassContext ctx;
  ctx.weightsAreConstant = true;
  ctx.stopAfterPass = "cse";
  auto g = ir::cloneGraph(*m.b.g);
  runPipeline(*g, cpu->passes(backends::PassMode::Inference), ctx);
  // Nothing after cse ran: the MatMul is not fused with its Relu.
  EXPECT_EQ(opCounts(*g)["MatMul"], 1);
  EXPECT_EQ(opCounts(*g)["FusedMatMul"], 0);
  PassContext all;
  all.weightsAreConstant = true;
  auto h = ir::cloneGraph(*m.b.g);
  runPipeline(*h, cpu->passes(backends::PassMode::Inference), all);
  EXPECT_EQ(opCounts(*h)["FusedMatMul"], 1);
}

}  // namespace
}  // namespace graft::passes::testing
