#include "backends/backend.hpp"
#include "ops/registry.hpp"

namespace graft::backends {
namespace {

class ReferenceBackend : public Backend {
 public:
  std::string name() const override { return "reference"; }
  int numThreads() const override { return 1; }
  bool supports(const ir::Node& n) const override {
    const ops::OpDef* d = ops::Registry::instance().find(n);
    return d && d->reference;
  }
  ops::KernelFn createKernel(ops::CompileContext& ctx) override {
    const ops::OpDef* d = ops::Registry::instance().find(ctx.node());
    GRAFT_CHECK(d && d->reference, "{}: no reference kernel", ctx.node().describe());
    return d->reference(ctx);
  }
};

}  // namespace

std::unique_ptr<Backend> makeReferenceBackend() { return std::make_unique<ReferenceBackend>(); }

}  // namespace graft::backends
