// The backend test matrix: every kernel variant of the cpu backend against the reference backend,
// on the same inputs. Two lists of cases feed it: the kernel libraries' cases (backend_cases.cpp:
// many shapes and attribute combinations per op, weights both constant, packed at compile time,
// and fed at run time, re-packed each run: the second run changes them), and the vectorised kernels' cases
// (GRAFT_VEC_CASES blocks, vec_cases.hpp). Tolerances are those of float accumulation in another
// order (the reference accumulates in double).
//
// KernelVsReference.EveryCaseMatches/cpu_<kernel> runs, per registered cpu kernel, the cases
// that select it, and fails when there are none; cpu_reference runs those that select none. A
// case meant to fail names the error it expects (expectError): both backends must throw a
// graft::Error saying it; any other throw of the reference fails the case.
//
// KernelVsReference.EveryCaseMatches/cpu_avx2_<kernel> and cpu_baseline_<kernel> run the cases of
// each of graft's vectorised kernels (vec_*) again under an ISA limit of AVX2 and of the x86-64
// baseline, so that every variant of their loops (GRAFT_VEC_RUN, backends/cpu/vec_common.hpp) and
// of the F16C conversions is checked on any host; the cases that select another kernel under that
// limit are left out, and the test fails when none is left.
//
// KernelVsReference.EveryCaseMatches/cpu_winograd_onednn_conv_* runs onednn_conv's cases with
// oneDNN's Winograd kernels wherever it has them (GRAFT_CONV_WINOGRAD=on), and fails unless some
// ran there; it skips on hosts without AVX-512. cpu_sgemm_onednn_matmul_* and cpu_sgemm_onednn_gemm_*
// run the matrix products' cases on oneDNN's sgemm wherever their operands allow
// (GRAFT_MATMUL_SGEMM=on), and fail unless some ran there.
//
// KernelVsReference.EveryCaseMatches/cpu_bf16_<kernel> runs the cases of each kernel that
// honours bf16 (CpuKernelDef::bf16) on a bf16 cpu backend (SessionOptions.enableBf16) against
// the reference run on the operands rounded to bf16, and checks that bf16 really ran (the
// recorded implementation says so, and the results differ from the reference on the unrounded
// inputs as bf16 rounding does). It skips on hosts without avx512_bf16.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <cstring>
#include <limits>

#include <map>
#include <optional>
#include <set>

#include "../ops/op_test_util.hpp"
#include "backend_cases.hpp"
#include "backends/backend.hpp"
#include "backends/cpu/bf16.hpp"
#include "backends/cpu/cpu_kernels.hpp"
#include "backends/cpu/onednn_common.hpp"
#include "passes/pass.hpp"
#include "plan/executable.hpp"
#include "support/cpu_features.hpp"
#include "vec_cases.hpp"

namespace graft::testing {
namespace {

using Ints = std::vector<int64_t>;

// Sets a case's ISA limit for the scope (a no-op for Native).
struct CaseIsa {
  support::CpuIsa saved = support::cpuIsaLimit();
  explicit CaseIsa(support::CpuIsa isa) {
    if (isa != support::CpuIsa::Native) support::setCpuIsaLimit(isa);
  }
  ~CaseIsa() { support::setCpuIsaLimit(saved); }
};

// Compiles c's single-node graph for `backend` and runs it; when some inputs are graph inputs,
// runs a second time with those inputs changed (kernels must not keep stale packed copies).
// `kernels`: where to put the kernels the compiled steps chose (when not null).
std::vector<std::vector<NDArray>> runCase(const BackendCase& c, backends::Backend& backend,
                                          std::vector<plan::StepKernel>* kernels = nullptr) {
  CaseIsa isa(c.isa);
  auto g = singleNodeGraph(c.op, c.constant);
  passes::PassContext ctx;
  passes::runPipeline(*g, {"infer-shapes"}, ctx);
  support::ThreadPool pool(backend.numThreads());
  auto exe = plan::compile(*g, backend, pool);
  if (kernels) *kernels = exe->stepKernels();
  std::vector<std::vector<NDArray>> results;
  for (int round = 0; round < 2; ++round) {
    std::vector<NDArray> values;
    for (size_t i = 0; i < c.op.inputs.size(); ++i) {
      const NDArray& a = c.op.inputs[i];
      bool changed = round == 1 && a.valid() && !c.constant[i];  // a graph input in the second run
      NDArray v = changed ? a.clone() : a;
      if (changed && i > 0 && v.dtype() == DataType::Float)
        for (int64_t j = 0; j < v.numel(); ++j) v.data<float>()[j] *= 0.5f;
      values.push_back(v);
    }
    if (round == 1 && c.derive) c.derive(values);
    std::vector<ops::Value> in;
    for (size_t i = 0; i < values.size(); ++i)
      if (values[i].valid() && !c.constant[i]) in.push_back(ops::Value::fromTensor(values[i]));
    auto outs = exe->run(std::move(in));
    std::vector<NDArray> r;
    for (auto& v : outs) r.push_back(v.isTensor() ? v.tensor : NDArray{});
    results.push_back(std::move(r));
  }
  return results;
}

std::vector<NDArray> cloneAll(const std::vector<NDArray>& v) {
  std::vector<NDArray> out;
  for (const auto& a : v) out.push_back(a.valid() ? a.clone() : NDArray());
  return out;
}

// ---- the matrix ---------------------------------------------------------------------------------
// Every case of both lists, grouped by the cpu kernel the backend's registry selects for its node
// (CpuKernelRegistry::find, after type inference, as when compiling); cases that select none run
// on the reference kernel inside the cpu backend (the group "reference"). One test per kernel
// variant: it fails when no case selects the kernel, and compares each of its cases with the
// reference backend.

struct MatrixCase {
  std::string name;
  const BackendCase* b = nullptr;  ///< one of the two
  const VecCase* v = nullptr;
  const OpCase& op() const { return b ? b->op : v->op; }
  const std::string& expectError() const { return b ? b->expectError : v->expectError; }
  bool expectFast() const { return v ? v->expectFast : false; }
};

struct Group {
  const backends::cpu::CpuKernelDef* kernel = nullptr;  ///< nullptr: the reference
  std::vector<size_t> cases;                            ///< indices into matrixCases()
};

std::string opName(const std::string& domain, const std::string& type) {
  return domain.empty() ? type : domain + "::" + type;
}

std::string kernelName(const backends::cpu::CpuKernelDef* d) {
  return d ? d->name + "_" + opName(d->domain, d->type) : std::string("reference");
}

const std::vector<MatrixCase>& matrixCases() {
  static const std::vector<MatrixCase> all = [] {
    std::vector<MatrixCase> m;
    for (const BackendCase& c : allCases()) m.push_back({c.name, &c, nullptr});
    for (const VecCase& c : vecCases()) m.push_back({opName(c.op.domain, c.op.type) + " " + c.label, nullptr, &c});
    return m;
  }();
  return all;
}

// The kernel a case selects under the current ISA limit (nullptr: none; a case that shape
// inference refuses selects none).
const backends::cpu::CpuKernelDef* selectedKernel(const MatrixCase& mc) {
  try {
    auto graph = mc.b ? singleNodeGraph(mc.op(), mc.b->constant) : singleNodeGraph(mc.op());
    passes::PassContext ctx;
    passes::runPipeline(*graph, {"infer-shapes"}, ctx);
    return backends::cpu::CpuKernelRegistry::instance().find(*graph->nodes()[0]);
  } catch (const Error&) {
    return nullptr;  // refused by shape inference: an expected-error case (checked when it runs)
  }
}

// The kernel each case selects.
const std::map<const backends::cpu::CpuKernelDef*, Group>& groups() {
  static const std::map<const backends::cpu::CpuKernelDef*, Group> g = [] {
    std::map<const backends::cpu::CpuKernelDef*, Group> out;
    for (const auto* d : backends::cpu::CpuKernelRegistry::instance().all()) out[d].kernel = d;
    out[nullptr].kernel = nullptr;
    const auto& cases = matrixCases();
    for (size_t i = 0; i < cases.size(); ++i) {
      CaseIsa isa(cases[i].b ? cases[i].b->isa : support::CpuIsa::Native);
      out[selectedKernel(cases[i])].cases.push_back(i);
    }
    return out;
  }();
  return g;
}

// The cases of a kernel that takes nodes only in bf16 sessions (CpuKernelDef::bf16Only): those that
// select it under bf16 compute, with GRAFT_CONV_WINOGRAD=on so that they select it whatever its
// rule says on this host's class (the rule has its own tests). None on a host without avx512_bf16.
std::vector<size_t> bf16OnlyCases(const backends::cpu::CpuKernelDef* kernel) {
  std::vector<size_t> out;
  backends::cpu::Bf16Scope bf16(true);
  backends::cpu::onednn::WinogradScope on(backends::cpu::onednn::WinogradMode::On);
  const auto& cases = matrixCases();
  for (size_t i = 0; i < cases.size(); ++i) {
    CaseIsa isa(cases[i].b ? cases[i].b->isa : support::CpuIsa::Native);
    if (selectedKernel(cases[i]) == kernel) out.push_back(i);
  }
  return out;
}

// Runs one case on the cpu backend and the reference backend and compares them; where the case
// expects an error, both must throw graft::Error (not InternalError) whose message has it.
void checkCase(const MatrixCase& mc, backends::Backend& cpu, backends::Backend& ref) {
  const std::string& expect = mc.expectError();
  std::vector<std::vector<NDArray>> want, got;
  std::vector<NDArray> refInputs, cpuInputs;
  auto runOn = [&](backends::Backend& backend, std::vector<NDArray>* inputsAfter) {
    if (mc.b) return runCase(*mc.b, backend);
    OpCase c = mc.v->op;
    c.inputs = cloneAll(mc.v->op.inputs);
    std::vector<std::vector<NDArray>> r{&backend == &ref ? runReference(c) : runOnBackend(c, backend)};
    *inputsAfter = std::move(c.inputs);
    return r;
  };
  if (!expect.empty()) {
    for (backends::Backend* b : {&ref, &cpu}) {
      std::string which = b == &ref ? "the reference" : "the cpu backend";
      try {
        std::vector<NDArray> ignored;
        runOn(*b, &ignored);
        ADD_FAILURE() << which << " does not throw; expected an error with '" << expect << "'";
      } catch (const Error& e) {
        EXPECT_NE(std::string(e.what()).find(expect), std::string::npos)
            << which << " throws another error: " << e.what() << " (expected '" << expect << "')";
      }
    }
    return;
  }
  try {
    want = runOn(ref, &refInputs);
  } catch (const Error& e) {
    FAIL() << "the reference throws (set expectError where an error is meant): " << e.what();
  }
  got = runOn(cpu, &cpuInputs);
  ASSERT_EQ(got.size(), want.size());
  double rtol = mc.b ? mc.b->rtol : mc.v->rtol, atol = mc.b ? mc.b->atol : mc.v->atol;
  for (size_t round = 0; round < want.size(); ++round) {
    ASSERT_EQ(got[round].size(), want[round].size());
    for (size_t i = 0; i < want[round].size(); ++i) {
      if (!want[round][i].valid()) continue;
      EXPECT_TRUE(allClose(got[round][i], want[round][i], rtol, atol)) << "run " << round << ", output " << i;
    }
  }
  if (mc.v) {
    for (int i : mc.v->mutatedInputs) {
      EXPECT_TRUE(allClose(cpuInputs[i], refInputs[i], rtol, atol)) << "updated input " << i;
    }
  }
}

// ---- the bf16 variant ---------------------------------------------------------------------------
// A bf16 kernel reads its two operands (inputs 0 and 1: X and W, A and B, dY and W, X and dY)
// rounded to bf16 (to nearest even) and accumulates their products, exact in float32, in
// float32; bias, residual sums, Gemm's C and the activations are float32. So its results match
// the reference run on those two inputs rounded to bf16 within the case's float32 tolerance: a
// test that fails for a wrong operand, layout, conversion or accumulation, and for a bias or
// accumulator kept in bf16. Against the reference on the inputs as given, they differ as bf16
// rounding does (about 2^-8 of the output's RMS), which shows that bf16 ran. A case oneDNN has no
// fast bf16 implementation for runs float32 (the kernel records it) and is compared as float32.

// x rounded to the nearest bf16 (ties to even), as a float array; NaN and infinities kept.
NDArray roundedToBf16(const NDArray& x) {
  NDArray y = x.clone();
  float* p = y.data<float>();
  for (int64_t i = 0; i < y.numel(); ++i) {
    if (std::isnan(p[i])) continue;
    uint32_t u;
    std::memcpy(&u, &p[i], 4);
    u = (u + 0x7fffu + ((u >> 16) & 1u)) & 0xffff0000u;
    std::memcpy(&p[i], &u, 4);
  }
  return y;
}

// Root mean square of the finite elements (1 when none).
double rmsOf(const NDArray& a) {
  double sum = 0;
  int64_t n = 0;
  for (double v : toDoubles(a))
    if (std::isfinite(v)) sum += v * v, ++n;
  return n && sum > 0 ? std::sqrt(sum / static_cast<double>(n)) : 1.0;
}

// The largest |got - want| / rms(want) over the finite elements of both.
double normalizedError(const NDArray& got, const NDArray& want) {
  std::vector<double> g = toDoubles(got), w = toDoubles(want);
  double rms = rmsOf(want), worst = 0;
  for (size_t i = 0; i < g.size() && i < w.size(); ++i)
    if (std::isfinite(g[i]) && std::isfinite(w[i])) worst = std::max(worst, std::abs(g[i] - w[i]) / rms);
  return worst;
}

struct Bf16Tally {
  int bf16 = 0;                       ///< cases whose kernel recorded a bf16 implementation
  std::vector<std::string> fellBack;  ///< cases that ran float32 (oneDNN has no fast bf16 one)
  std::vector<std::string> skipped;   ///< cases under a lower ISA limit (no avx512_bf16 there)
  double maxError = 0;                ///< the largest normalizedError against unrounded inputs
};

// Kernels that round more than their two operands compare with the reference on the inputs as
// given: the same elements non-finite, and every finite one within the kernel's bound of the
// output's RMS. Recurrent kernels (oneDNN's RNN and LSTM in bf16): R and the hidden state of every
// step are bf16 too, so their error grows with the sequence. winograd_bf16: its operands are the
// transformed tiles B' d B and G g G', rounded to bf16 after the transforms' sums.
constexpr double kRecurrentBf16Error = 6e-2;
constexpr double kWinogradBf16Error = 6e-2;
double roundingBound(const backends::cpu::CpuKernelDef* k) {
  if (!k) return 0;
  const std::string name = k->name;
  if (name == "onednn_rnn" || name == "onednn_lstm") return kRecurrentBf16Error;
  if (name == "winograd_bf16") return kWinogradBf16Error;
  return 0;
}

::testing::AssertionResult closeWithin(const NDArray& got, const NDArray& want, double bound) {
  if (got.shape() != want.shape() || got.dtype() != want.dtype())
    return ::testing::AssertionFailure() << "shape or type differs";
  std::vector<double> g = toDoubles(got), w = toDoubles(want);
  for (size_t i = 0; i < g.size(); ++i)
    if (std::isfinite(g[i]) != std::isfinite(w[i]) || (!std::isfinite(w[i]) && std::isnan(g[i]) != std::isnan(w[i])))
      return ::testing::AssertionFailure() << "element " << i << ": " << g[i] << " vs " << w[i];
  double e = normalizedError(got, want);
  if (e > bound)
    return ::testing::AssertionFailure() << "largest difference " << e << " of the output's RMS (at most " << bound
                                         << ")";
  return ::testing::AssertionSuccess();
}

// One case on the bf16 cpu backend against the reference backend (see above).
void checkBf16Case(const MatrixCase& mc, backends::Backend& cpu, backends::Backend& ref, Bf16Tally& tally,
                   const backends::cpu::CpuKernelDef* kernel) {
  if (!mc.expectError().empty()) return checkCase(mc, cpu, ref);
  if (!mc.b || mc.b->isa != support::CpuIsa::Native) {
    // Cases of graft's AVX2 kernels (run under an AVX2 limit, where bf16 cannot run), and vec
    // cases (they run without a compiled step to say which implementation ran).
    tally.skipped.push_back(mc.name);
    return;
  }
  std::vector<plan::StepKernel> kernels;
  std::vector<std::vector<NDArray>> got = runCase(*mc.b, cpu, &kernels), want = runCase(*mc.b, ref);
  bool ranBf16 = false;
  for (const auto& k : kernels)
    if (k.implementation.size() >= 6 && k.implementation.compare(k.implementation.size() - 6, 6, ", bf16") == 0)
      ranBf16 = true;
  std::vector<std::vector<NDArray>> wantRounded = want;
  const double bound = ranBf16 ? roundingBound(kernel) : 0;
  if (bound > 0) {
    ++tally.bf16;  // compared with the unrounded reference below
  } else if (ranBf16) {
    ++tally.bf16;
    BackendCase rounded = *mc.b;
    for (int i : {0, 1})
      if (rounded.op.inputs[i].valid() && rounded.op.inputs[i].dtype() == DataType::Float)
        rounded.op.inputs[i] = roundedToBf16(rounded.op.inputs[i]);
    wantRounded = runCase(rounded, ref);
  } else {
    tally.fellBack.push_back(mc.name + (kernels.empty() ? "" : " (" + kernels[0].implementation + ")"));
  }
  ASSERT_EQ(got.size(), want.size());
  for (size_t round = 0; round < want.size(); ++round) {
    ASSERT_EQ(got[round].size(), want[round].size());
    for (size_t i = 0; i < want[round].size(); ++i) {
      if (!want[round][i].valid()) continue;
      if (bound > 0 && (want[round][i].dtype() == DataType::Float || want[round][i].dtype() == DataType::BFloat16))
        EXPECT_TRUE(closeWithin(got[round][i], want[round][i], bound))
            << "run " << round << ", output " << i << " (a kernel that rounds more than its operands)";
      else
        EXPECT_TRUE(allClose(got[round][i], wantRounded[round][i], mc.b->rtol, mc.b->atol))
            << "run " << round << ", output " << i << (ranBf16 ? " (against inputs 0 and 1 rounded to bf16)" : "");
      if (ranBf16 && want[round][i].dtype() == DataType::Float)
        tally.maxError = std::max(tally.maxError, normalizedError(got[round][i], want[round][i]));
    }
  }
}

struct Param {
  std::string backend;
  const backends::cpu::CpuKernelDef* kernel;
  std::string name;  ///< the test's name: backend and kernel (a count where one repeats)
  support::CpuIsa isa = support::CpuIsa::Native;  ///< the ISA limit the test runs under
};

class KernelVsReference : public ::testing::TestWithParam<Param> {};

// A variant of a oneDNN kernel under its switch forced on: the cpu_winograd variant runs
// onednn_conv's cases with Winograd wherever oneDNN has it (WinogradMode::On), cpu_sgemm
// onednn_matmul's with sgemm wherever the operands allow (SgemmScope On). Each fails unless some
// case ran on the variant (the recorded implementation contains `marker`).
void checkVariant(const Group& g, const char* label, const char* marker) {
  auto cpu = backends::makeCpuBackend(2);
  auto ref = backends::makeReferenceBackend();
  int ran = 0;
  for (size_t i : g.cases) {
    const MatrixCase& mc = matrixCases()[i];
    if (!mc.b || !mc.expectError().empty()) continue;
    SCOPED_TRACE(mc.name);
    std::vector<plan::StepKernel> kernels;
    std::vector<std::vector<NDArray>> got = runCase(*mc.b, *cpu, &kernels), want = runCase(*mc.b, *ref);
    for (const auto& k : kernels)
      if (k.implementation.find(marker) != std::string::npos) ++ran;
    ASSERT_EQ(got.size(), want.size());
    for (size_t round = 0; round < want.size(); ++round)
      for (size_t o = 0; o < want[round].size(); ++o) {
        if (!want[round][o].valid()) continue;
        EXPECT_TRUE(allClose(got[round][o], want[round][o], mc.b->rtol, mc.b->atol))
            << "run " << round << ", output " << o;
      }
  }
  std::printf("%s: %d of %zu cases ran the variant (%s)\n", label, ran, g.cases.size(), marker);
  EXPECT_GT(ran, 0) << "no case of " << kernelName(g.kernel) << " ran on " << marker;
}

void checkWinograd(const Group& g) {
  if (!support::cpuFeatures().avx512f)
    GTEST_SKIP() << "oneDNN's Winograd convolutions need AVX-512, which this host (below GRAFT_CPU_ISA) does not have";
  backends::cpu::onednn::WinogradScope on(backends::cpu::onednn::WinogradMode::On);
  checkVariant(g, "winograd", "wino");
}

void checkSgemm(const Group& g) {
  backends::cpu::onednn::SgemmScope on(backends::cpu::onednn::KernelMode::On);
  checkVariant(g, "sgemm", "sgemm");
}

TEST_P(KernelVsReference, EveryCaseMatches) {
  if (GetParam().backend == "cpu_winograd") return checkWinograd(groups().at(GetParam().kernel));
  if (GetParam().backend == "cpu_sgemm") return checkSgemm(groups().at(GetParam().kernel));
  bool bf16 = GetParam().backend == "cpu_bf16";
  if (bf16 && !support::cpuFeatures().avx512bf16)
    GTEST_SKIP() << "bf16 needs avx512_bf16, which this host (below GRAFT_CPU_ISA) does not have";
  const backends::cpu::CpuKernelDef* kernel = GetParam().kernel;
  if (kernel && kernel->bf16Only && !bf16)
    GTEST_SKIP() << kernelName(kernel) << " computes only in bf16 sessions: its cases run in cpu_bf16_"
                 << kernelName(kernel);
  Group g = groups().at(kernel);
  // A bf16-only kernel's cases run with its switch on (bf16OnlyCases); the other kernels' bf16
  // cases with it off, so that they run on the kernel they are grouped under (winograd_bf16 would
  // take the 3x3 ones on half-rate AVX-512 hosts; its own group runs them).
  std::optional<backends::cpu::onednn::WinogradScope> winograd;
  if (kernel && kernel->bf16Only) {
    g.cases = bf16OnlyCases(kernel);
    winograd.emplace(backends::cpu::onednn::WinogradMode::On);
  } else if (bf16) {
    winograd.emplace(backends::cpu::onednn::WinogradMode::Off);
  }
  // graft's AVX-512 kernels (named *_avx512) select nothing on a host without AVX-512: their cases
  // fall to other kernels there, and run on them in those kernels' groups.
  if (g.cases.empty() && g.kernel && g.kernel->name.find("_avx512") != std::string::npos &&
      !support::cpuFeatures().avx512f)
    GTEST_SKIP() << kernelName(g.kernel) << " needs AVX-512, which this host (below GRAFT_CPU_ISA) does not have";
  ASSERT_FALSE(g.cases.empty()) << "no case selects the cpu kernel " << kernelName(g.kernel)
                                << ": add one (tests/backends/cpu_vs_reference_test.cpp or a GRAFT_VEC_CASES block)";
  auto cpu = backends::makeCpuBackend(2, bf16);
  auto ref = backends::makeReferenceBackend();
  if (bf16) {
    Bf16Tally tally;
    for (size_t i : g.cases) {
      const MatrixCase& mc = matrixCases()[i];
      SCOPED_TRACE(mc.name);
      checkBf16Case(mc, *cpu, *ref, tally, g.kernel);
    }
    std::string fellBack = ::testing::PrintToString(tally.fellBack), skipped = ::testing::PrintToString(tally.skipped);
    std::printf(
        "bf16: %d cases in bf16 (largest difference from unrounded inputs' results: %.2e of the output's RMS); "
        "float32 fallback in %zu: %s; left out (AVX2 kernels' and vec cases) %zu\n",
        tally.bf16, tally.maxError, tally.fellBack.size(), fellBack.c_str(), tally.skipped.size());
    EXPECT_GT(tally.bf16, 0) << "no case of " << kernelName(g.kernel)
                             << " ran in bf16; float32 fallbacks: " << fellBack;
    // float32 with float32 accumulation errs by ~1e-6 of the RMS; bf16 operands by ~1e-3.
    if (tally.bf16) {
      EXPECT_GT(tally.maxError, 1.0 / 4096) << "bf16 cases match float32 too closely: bf16 did not run";
    }
    return;
  }
  support::CpuIsa limit = GetParam().isa;
  CaseIsa scope(limit);
  if (limit != support::CpuIsa::Native) {
    // The loops run the variant of the limit (or a lower one, on a host without that level).
    support::CpuIsa want =
        limit == support::CpuIsa::Avx2 && !support::hostCpuFeatures().x86_64_v3 ? support::CpuIsa::Baseline : limit;
    ASSERT_EQ(static_cast<int>(support::vecLoopIsa()), static_cast<int>(want));
  }
  int ran = 0;
  for (size_t i : g.cases) {
    const MatrixCase& mc = matrixCases()[i];
    SCOPED_TRACE(mc.name);
    bool ownLimit = mc.b && mc.b->isa != support::CpuIsa::Native;
    if (limit != support::CpuIsa::Native && (ownLimit || selectedKernel(mc) != g.kernel)) continue;
    if (!g.kernel && mc.expectFast() && mc.expectError().empty())
      ADD_FAILURE() << "the cpu backend picks no fast kernel";
    checkCase(mc, *cpu, *ref);
    ++ran;
  }
  EXPECT_GT(ran, 0) << "no case of " << kernelName(g.kernel) << " selects it under the ISA limit";
}

std::vector<Param> params() {
  std::vector<Param> p;
  for (const auto* d : backends::cpu::CpuKernelRegistry::instance().all()) p.push_back({"cpu", d, ""});
  p.push_back({"cpu", nullptr, ""});
  // The AVX2 and baseline variants of graft's vectorised kernels.
  for (auto isa : {support::CpuIsa::Avx2, support::CpuIsa::Baseline})
    for (const auto* d : backends::cpu::CpuKernelRegistry::instance().all())
      if (d->name.rfind("vec_", 0) == 0)
        p.push_back({isa == support::CpuIsa::Avx2 ? "cpu_avx2" : "cpu_baseline", d, "", isa});
  // The bf16 variant of every kernel that honours bf16.
  for (const auto* d : backends::cpu::CpuKernelRegistry::instance().all())
    if (d->bf16) p.push_back({"cpu_bf16", d, ""});
  // oneDNN's Winograd convolutions (onednn_conv under WinogradMode::On).
  for (const auto* d : backends::cpu::CpuKernelRegistry::instance().all())
    if (d->name == "onednn_conv" && (d->type == "Conv" || d->type == "FusedConv")) p.push_back({"cpu_winograd", d, ""});
  // oneDNN's sgemm for products of two changing operands (onednn_matmul under SgemmScope On).
  for (const auto* d : backends::cpu::CpuKernelRegistry::instance().all())
    if (d->name == "onednn_matmul" || d->name == "onednn_gemm") p.push_back({"cpu_sgemm", d, ""});
  std::map<std::string, int> seen;
  for (Param& q : p) {
    q.name = q.backend + "_" + kernelName(q.kernel);
    for (char& ch : q.name)
      if (!isalnum(static_cast<unsigned char>(ch))) ch = '_';
    if (int k = seen[q.name]++) q.name += "_" + std::to_string(k + 1);
  }
  return p;
}

INSTANTIATE_TEST_SUITE_P(Backends, KernelVsReference, ::testing::ValuesIn(params()),
                         [](const ::testing::TestParamInfo<Param>& i) { return i.param.name; });

}  // namespace

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

}  // namespace graft::testing
