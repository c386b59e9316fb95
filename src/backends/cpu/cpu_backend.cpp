#include <algorithm>
#include <utility>

#include "backends/backend.hpp"
#include "backends/cpu/bf16.hpp"
#include "backends/cpu/cpu_kernels.hpp"
#include "ops/registry.hpp"
#include "support/thread_pool.hpp"

namespace graft::backends {
namespace cpu {

CpuKernelRegistry& CpuKernelRegistry::instance() {
  static CpuKernelRegistry r;
  return r;
}

void CpuKernelRegistry::add(CpuKernelDef def) {
  auto& list = defs_[{def.domain, def.type}];
  // Names identify kernels in profiles and inspect: two registrations under one name would be a
  // bug (or a second copy of the kernel objects in the process: see src/CMakeLists.txt).
  for (const auto& d : list)
    GRAFT_ASSERT(d.name != def.name, "cpu kernel '{}' for {} registered twice", def.name, def.type);
  list.push_back(std::move(def));
  std::stable_sort(list.begin(), list.end(), [](const CpuKernelDef& a, const CpuKernelDef& b) { return a.priority > b.priority; });
}

std::vector<const CpuKernelDef*> CpuKernelRegistry::candidates(const ir::Node& n) const {
  std::vector<const CpuKernelDef*> out;
  auto it = defs_.find({n.domain(), n.type()});
  if (it == defs_.end()) return out;
  for (const auto& d : it->second)
    if (!d.supports || d.supports(n)) out.push_back(&d);
  return out;
}

namespace {
thread_local std::string currentImplementation;
}  // namespace

void noteImplementation(std::string name) { currentImplementation = std::move(name); }

std::string takeImplementation() { return std::exchange(currentImplementation, std::string()); }

const CpuKernelDef* CpuKernelRegistry::find(const ir::Node& n) const {
  auto it = defs_.find({n.domain(), n.type()});
  if (it == defs_.end()) return nullptr;
  for (const auto& d : it->second)
    if (!d.supports || d.supports(n)) return &d;
  return nullptr;
}

std::vector<const CpuKernelDef*> CpuKernelRegistry::all() const {
  std::vector<const CpuKernelDef*> out;
  for (const auto& [k, list] : defs_)
    for (const auto& d : list) out.push_back(&d);
  return out;
}

}  // namespace cpu

namespace {

// Inference: the common prefix, then weight freezing, fusions into ai.graft ops (oneDNN post-ops)
// and the channel-blocked layout. The fusions of kernel libraries (conv/matmul + bias +
// activation) go before fuse-elementwise, which then takes the elementwise ops that remain (on
// blocked arrays too: it runs position-wise).
const std::vector<std::string>& inferencePasses() {
  static const std::vector<std::string> p = passes::withCommonPrefix({
      "cse",                // compute equal expressions once (equal small constants merged first)
      "constant-weights",   // constantWeights sessions: weights become constants (packed once)
      "fold-batchnorm",     // BatchNormalization after Conv folded into its weights and bias
      "fuse-layernorm",     // mean/variance/normalise/scale/shift chains -> LayerNormalization
      "fuse-gelu",          // x/2 (1 + erf(x / sqrt 2)) -> ai.graft::GeluErf
      "split-concat-conv",  // Conv(Concat(A, B)) -> Conv(A) + Conv(B): the Concat is never written
      "fuse-conv",          // Conv + Add + activation -> ai.graft::FusedConv (oneDNN post-ops)
      "fuse-matmul",        // MatMul + bias + activation, Gemm + activation -> FusedMatMul/FusedGemm
      "fold-transpose",     // Transposes around matrix products become strides (perm_a/b/y, transA/B)
      "cpu-layout",         // channel-blocked activations between oneDNN ops, reorders at the edges (onednn_layout.cpp)
      "fuse-elementwise",   // chains of elementwise ops -> ai.graft::FusedElementwise (one loop)
      "dce",                // weights folding left unused, reorders nobody reads
      "cpu-conv-chains",    // runs of channels-last FusedConvs -> FusedConvChain (onednn_conv_chain.cpp)
  });
  return p;
}

// Inference on a bf16 backend (SessionOptions.enableBf16): the same, then activations between
// bf16 convolutions held in bf16 (bf16_activations.cpp).
const std::vector<std::string>& bf16InferencePasses() {
  static const std::vector<std::string> p = [] {
    std::vector<std::string> q = inferencePasses();
    // No split-concat-conv: the partial sums would be held in bf16 between the convolutions (a
    // rounding the Concat's one sum does not have), and bf16 Concats move half the bytes anyway.
    q.erase(std::find(q.begin(), q.end(), "split-concat-conv"));
    for (std::string& pass : q) {
      if (pass == "cpu-layout") pass = "cpu-layout-bf16";  // no Winograd convolutions (float32 only)
      // Chains run in float32 (no bf16 form): only those with a depthwise stage, which gain.
      if (pass == "cpu-conv-chains") pass = "cpu-conv-chains-bf16";
    }
    q.push_back("cpu-bf16-activations");
    return q;
  }();
  return p;
}

// A training step (forward, backward and optimizer graph): no weight freezing, and fusions that
// keep every value the backward pass reads; in-place reuse is decided by the memory plan.
const std::vector<std::string>& trainingPasses() {
  static const std::vector<std::string> p = passes::withCommonPrefix({
      "cse",                    // autodiff repeats subexpressions and constants
      "sum-of-pads-to-concat",  // gradients of Slices that tile a tensor (gate reordering) -> one Concat
      "fuse-layernorm",         // only where the backward pass reads no intermediate
      "fuse-gelu",              // likewise
      "fold-transpose",         // the VJPs' Transposes around matrix products become strides
      "cpu-layout-training",    // channels-last activations and gradients between oneDNN ops (onednn_layout.cpp)
      "dce",                    // the conversions nobody reads, before fusion counts their readers
      "fuse-elementwise",       // forward and backward elementwise chains, several outputs each
      "lstm-save-gates",        // LSTM -> LSTMTrain, whose gates its LSTMGrad reads (vec_lstm_grad.cpp)
      "fuse-sgd-outer",         // SGD of a batch-1 weight gradient a (x) b -> SGDOuterUpdate (never stored)
      "dce",                    // what the rewrites left unused
  });
  return p;
}

// The fast CPU backend: a registered fast kernel where one handles the node, the op's reference
// kernel elsewhere.
class CpuBackend : public Backend {
 public:
  CpuBackend(int threads, bool bf16)
      : threads_(threads > 0 ? threads : support::ThreadPool::hardwareThreads()), bf16_(bf16) {}
  std::string name() const override { return "cpu"; }
  int numThreads() const override { return threads_; }
  bool supports(const ir::Node& n) const override {
    const ops::OpDef* d = ops::Registry::instance().find(n);
    return (d && d->reference) || cpu::CpuKernelRegistry::instance().find(n);
  }
  const std::vector<std::string>& passes(PassMode mode) const override {
    if (mode == PassMode::Training) return trainingPasses();
    return bf16_ ? bf16InferencePasses() : inferencePasses();
  }
  // The registered kernels that support the node, in priority order (in a bf16 backend, those
  // that honour bf16 first within a priority): the first whose factory does not decline (an
  // empty KernelFn) runs it; the op's reference kernel when all decline.
  ops::KernelFn chooseKernel(ops::CompileContext& ctx, plan::KernelChoice& choice) override {
    cpu::Bf16Scope bf16(bf16_);
    auto candidates = cpu::CpuKernelRegistry::instance().candidates(ctx.node());
    // In a bf16 backend, of the kernels of one priority those that honour bf16 go first; a kernel
    // of higher priority still goes before them (graft's small-batch LSTM: lstm2 b1 4.5-5.3 ms in
    // float32 against 6.6-11.1 with oneDNN's bf16 LSTM, docs/cpu-backend.md).
    if (bf16_)
      std::stable_sort(candidates.begin(), candidates.end(),
                       [](const cpu::CpuKernelDef* a, const cpu::CpuKernelDef* b) {
                         return a->priority != b->priority ? a->priority > b->priority : a->bf16 && !b->bf16;
                       });
    for (const cpu::CpuKernelDef* fast : candidates) {
      cpu::takeImplementation();
      if (ops::KernelFn fn = fast->factory(ctx)) {
        choice = {fast->name, cpu::takeImplementation()};
        return fn;
      }
    }
    cpu::takeImplementation();
    const ops::OpDef* d = ops::Registry::instance().find(ctx.node());
    GRAFT_CHECK(d && d->reference, "{}: no kernel", ctx.node().describe());
    choice = {"reference", ""};
    return d->reference(ctx);
  }
  ops::KernelFn createKernel(ops::CompileContext& ctx) override {
    plan::KernelChoice choice;
    return chooseKernel(ctx, choice);
  }

 private:
  int threads_;
  bool bf16_;
};

}  // namespace

std::unique_ptr<Backend> makeCpuBackend(int numThreads, bool bf16) {
  return std::make_unique<CpuBackend>(numThreads, bf16);
}

}  // namespace graft::backends
