#include "ops/composite.hpp"

#include <unordered_map>

#include "ops/infer.hpp"
#include "ops/registry.hpp"
#include "support/check.hpp"

namespace graft::ops {
namespace {

// The composition graph of `n` for input types `in`; fills `inputs` and `outputs`.
std::unique_ptr<ir::Graph> buildGraph(const ir::Node& n, const std::vector<ir::ValueType>& in,
                                      const CompositeBuilder& build, std::vector<ir::Tensor*>& inputs,
                                      std::vector<ir::Tensor*>& outputs) {
  auto g = std::make_unique<ir::Graph>(n.type());
  g->otherOpsets[kGraftDomain] = 1;
  g->otherOpsets[kGraphcoreDomain] = 1;
  for (size_t i = 0; i < n.numInputs(); ++i) {
    ir::Tensor* t = nullptr;
    if (n.hasInput(i) && i < in.size() && in[i].known()) {
      t = g->addTensor("in" + std::to_string(i), in[i], ir::TensorKind::Input);
      g->addInput(t);
    }
    inputs.push_back(t);
  }
  outputs = build(n, *g, inputs);
  GRAFT_ASSERT(outputs.size() <= n.numOutputs(), "{}: composition has {} outputs, the node {}", n.describe(),
               outputs.size(), n.numOutputs());
  return g;
}

class InnerCompileContext : public CompileContext {
 public:
  InnerCompileContext(const ir::Node& n, support::ThreadPool& pool) : node_(n), pool_(pool) {}
  const ir::Node& node() const override { return node_; }
  const NDArray* constantInput(size_t i) const override {
    const ir::Tensor* t = node_.input(i);
    return t && t->kind() == ir::TensorKind::Constant ? t->data() : nullptr;
  }
  std::shared_ptr<SubgraphRunner> compileSubgraph(const ir::Graph&) override {
    GRAFT_THROW("{}: compositions hold no subgraphs", node_.describe());
  }
  support::ThreadPool& pool() override { return pool_; }

 private:
  const ir::Node& node_;
  support::ThreadPool& pool_;
};

}  // namespace

ir::Tensor* addInner(ir::Graph& g, const std::string& type, const std::string& domain, const std::vector<ir::Tensor*>& inputs,
                     ir::Attributes attrs, std::vector<ir::Tensor*>* allOutputs, size_t numOutputs) {
  std::vector<std::string> ids;
  // Distinct bases per output: uniqueId only avoids the tensors that exist already.
  for (size_t i = 0; i < numOutputs; ++i) ids.push_back(g.uniqueId(type + "_out" + std::to_string(i)));
  ir::Node* node = g.addNode(type, domain, inputs, ids, std::move(attrs), type);
  inferNode(*node, false);
  if (allOutputs) *allOutputs = node->outputs();
  return node->output(0);
}

ir::Tensor* addScalar(ir::Graph& g, float v) {
  return g.addInitializer(g.uniqueId("scalar"), NDArray::scalar<float>(DataType::Float, v), ir::TensorKind::Constant);
}

std::vector<ir::ValueType> inferComposite(const ir::Node& n, const std::vector<ir::ValueType>& in,
                                          const CompositeBuilder& build) {
  std::vector<ir::Tensor*> inputs, outputs;
  auto g = buildGraph(n, in, build, inputs, outputs);
  std::vector<ir::ValueType> out;
  for (ir::Tensor* t : outputs) out.push_back(t ? t->type() : ir::ValueType{});
  return out;
}

KernelFn compileComposite(CompileContext& ctx, const CompositeBuilder& build) {
  const ir::Node& n = ctx.node();
  std::vector<ir::ValueType> in;
  for (size_t i = 0; i < n.numInputs(); ++i) in.push_back(n.hasInput(i) ? ctx.inputType(i) : ir::ValueType{});
  std::vector<ir::Tensor*> inputs, outputs;
  std::shared_ptr<ir::Graph> g = buildGraph(n, in, build, inputs, outputs);

  struct Step {
    KernelFn fn;
    std::vector<int> in, out;
  };
  struct Program {
    std::shared_ptr<ir::Graph> graph;  // keeps the inner nodes the kernels refer to alive
    std::vector<Step> steps;
    std::vector<Value> constants;  // slot values of constants
    std::vector<int> inputSlots, outputSlots;
    size_t numSlots = 0;
  };
  auto prog = std::make_shared<Program>();
  prog->graph = g;
  std::unordered_map<const ir::Tensor*, int> slot;
  auto slotOf = [&](const ir::Tensor* t) {
    auto [it, fresh] = slot.emplace(t, static_cast<int>(slot.size()));
    return it->second;
  };
  for (ir::Tensor* t : inputs) prog->inputSlots.push_back(t ? slotOf(t) : -1);
  for (ir::Tensor* t : g->tensors())
    if (t->kind() == ir::TensorKind::Constant && t->data()) slotOf(t);
  for (ir::Node* node : g->schedule()) {
    const OpDef* def = Registry::instance().find(*node);
    GRAFT_CHECK(def && def->reference, "{}: inner op {} has no reference kernel", n.describe(), node->type());
    InnerCompileContext cc(*node, ctx.pool());
    Step s;
    s.fn = def->reference(cc);
    for (ir::Tensor* t : node->inputs()) s.in.push_back(t ? slotOf(t) : -1);
    for (ir::Tensor* t : node->outputs()) s.out.push_back(t ? slotOf(t) : -1);
    prog->steps.push_back(std::move(s));
  }
  for (ir::Tensor* t : outputs) prog->outputSlots.push_back(t ? slotOf(t) : -1);
  prog->numSlots = slot.size();
  prog->constants.resize(prog->numSlots);
  for (const auto& [t, s] : slot)
    if (t->kind() == ir::TensorKind::Constant && t->data()) prog->constants[s] = Value::fromTensor(*t->data());

  return [prog](KernelContext& k) {
    std::vector<Value> slots = prog->constants;
    for (size_t i = 0; i < prog->inputSlots.size(); ++i)
      if (prog->inputSlots[i] >= 0 && k.hasInput(i)) slots[prog->inputSlots[i]] = k.inputValue(i);
    for (Step& s : prog->steps) {
      KernelContext inner(slots.data(), s.in.data(), s.in.size(), s.out.data(), s.out.size(), nullptr, 0, &k.pool());
      s.fn(inner);
    }
    for (size_t i = 0; i < prog->outputSlots.size(); ++i)
      if (prog->outputSlots[i] >= 0) k.setOutputValue(i, std::move(slots[prog->outputSlots[i]]));
  };
}

}  // namespace graft::ops
