#include "ops/evaluate.hpp"

#include "ops/registry.hpp"

namespace graft::ops {
namespace {

class EvalCompileContext : public CompileContext {
 public:
  EvalCompileContext(const ir::Node& n, const std::vector<Value>& inputs, support::ThreadPool& pool)
      : node_(n), inputs_(inputs), pool_(pool) {}
  const ir::Node& node() const override { return node_; }
  const NDArray* constantInput(size_t i) const override {
    return i < inputs_.size() && inputs_[i].isTensor() ? &inputs_[i].tensor : nullptr;
  }
  std::shared_ptr<SubgraphRunner> compileSubgraph(const ir::Graph&) override {
    GRAFT_THROW("{}: subgraphs cannot be evaluated outside a compiled plan", node_.describe());
  }
  support::ThreadPool& pool() override { return pool_; }

 private:
  const ir::Node& node_;
  const std::vector<Value>& inputs_;
  support::ThreadPool& pool_;
};

}  // namespace

support::ThreadPool& serialPool() {
  static support::ThreadPool pool(1);
  return pool;
}

std::vector<Value> evaluateNode(const ir::Node& node, const std::vector<Value>& inputs, support::ThreadPool& pool) {
  const OpDef* def = Registry::instance().find(node);
  GRAFT_CHECK(def && def->reference, "{}: op {} has no reference kernel", node.describe(),
              node.domain().empty() ? node.type() : node.domain() + "::" + node.type());
  EvalCompileContext cc(node, inputs, pool);
  KernelFn fn = def->reference(cc);
  size_t nin = node.numInputs(), nout = node.numOutputs();
  std::vector<Value> slots(nin + nout);
  std::vector<int> in(nin), out(nout);
  for (size_t i = 0; i < nin; ++i) {
    in[i] = (i < inputs.size() && !inputs[i].empty()) ? static_cast<int>(i) : -1;
    if (in[i] >= 0) slots[i] = inputs[i];
  }
  for (size_t i = 0; i < nout; ++i) out[i] = node.output(i) ? static_cast<int>(nin + i) : -1;
  KernelContext kc(slots.data(), in.data(), nin, out.data(), nout, nullptr, 0, &pool);
  fn(kc);
  std::vector<Value> result(nout);
  for (size_t i = 0; i < nout; ++i)
    if (out[i] >= 0) result[i] = std::move(slots[nin + i]);
  return result;
}

}  // namespace graft::ops
