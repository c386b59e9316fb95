#include "backends/backend.hpp"
#include "ops/registry.hpp"
#include "support/thread_pool.hpp"

namespace graft::backends {
namespace {

// The fast CPU backend. Until its own kernels land (oneDNN and vectorised loops), every node
// runs its reference kernel.
class CpuBackend : public Backend {
 public:
  explicit CpuBackend(int threads) : threads_(threads > 0 ? threads : support::ThreadPool::hardwareThreads()) {}
  std::string name() const override { return "cpu"; }
  int numThreads() const override { return threads_; }
  bool supports(const ir::Node& n) const override {
    const ops::OpDef* d = ops::Registry::instance().find(n);
    return d && d->reference;
  }
  ops::KernelFn createKernel(ops::CompileContext& ctx) override {
    const ops::OpDef* d = ops::Registry::instance().find(ctx.node());
    GRAFT_CHECK(d && d->reference, "{}: no kernel", ctx.node().describe());
    return d->reference(ctx);
  }

 private:
  int threads_;
};

}  // namespace

std::unique_ptr<Backend> makeCpuBackend(int numThreads) { return std::make_unique<CpuBackend>(numThreads); }

}  // namespace graft::backends
