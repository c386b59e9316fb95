// expand-gradient: replaces each ai.onnx.preview.training Gradient node with the graph that
// computes its outputs, built with graft's autodiff.
//
// Gradient(xs, zs, y) reads the values of the tensors named in xs and then in zs, and returns for
// each x the gradient of y with respect to x at those values. A non-scalar y is summed first
// (the backward pass starts from ones shaped like y), as in ONNX's own examples. The tensors of
// xs and zs are the independent variables: the computation of y is followed back from y to them
// and no further, and one of them may not be computed from another.
//
// The computation of y is copied into a private graph whose inputs are those values, the
// backward pass is grown there (so that it sees nothing else of the graph and its tensor names
// cannot clash with the graph's), and both are moved into the graph. Where the node's inputs
// are the very tensors xs and zs name (the usual case), the copied forward nodes would compute
// what the graph computes already, so the backward nodes read the graph's own tensors instead.
//
// The pass runs before constant folding and dead-code elimination: it reads the forward graph
// by the names in the node's attributes, which those passes do not see. A Gradient whose y is
// computed by another Gradient node (a second derivative) is expanded after that one.
#include <set>
#include <unordered_map>

#include "autodiff/autodiff.hpp"
#include "ops/infer.hpp"
#include "ops/registry.hpp"
#include "passes/pass.hpp"
#include "support/check.hpp"
#include "support/float16.hpp"

namespace graft::passes {
namespace {

constexpr const char* kTrainingDomain = "ai.onnx.preview.training";

bool isGradient(const ir::Node& n) { return n.domain() == kTrainingDomain && n.type() == "Gradient"; }

struct GradientSpec {
  std::vector<std::string> xs, zs;
  std::string y;
  /// xs then zs: the names the node's inputs give values to.
  std::vector<std::string> leaves;
};

GradientSpec readSpec(const ir::Graph& g, const ir::Node& n) {
  GradientSpec s;
  s.xs = n.attrStrings("xs");
  s.zs = n.attrStrings("zs");
  s.y = n.attrString("y");
  GRAFT_CHECK(!s.xs.empty(), "{}: attribute 'xs' must name at least one tensor", n.describe());
  s.leaves = s.xs;
  s.leaves.insert(s.leaves.end(), s.zs.begin(), s.zs.end());
  GRAFT_CHECK(n.numInputs() == s.leaves.size(),
              "{}: expected {} inputs (the values of the {} tensors of xs, then of the {} of zs), got {}", n.describe(),
              s.leaves.size(), s.xs.size(), s.zs.size(), n.numInputs());
  GRAFT_CHECK(n.numOutputs() <= s.xs.size(), "{}: expected at most {} outputs (one per tensor of xs), got {}",
              n.describe(), s.xs.size(), n.numOutputs());
  std::set<std::string> seen;
  for (size_t i = 0; i < s.leaves.size(); ++i) {
    const std::string& id = s.leaves[i];
    const char* attr = i < s.xs.size() ? "xs" : "zs";
    GRAFT_CHECK(seen.insert(id).second, "{}: '{}' appears more than once in xs and zs", n.describe(), id);
    const ir::Tensor* t = g.findTensor(id);
    GRAFT_CHECK(t, "{}: attribute '{}' names '{}', which is not a tensor of the graph", n.describe(), attr, id);
    const ir::Tensor* v = n.input(i);
    GRAFT_CHECK(v, "{}: input {} (the value of '{}') is missing", n.describe(), i, id);
    GRAFT_CHECK(v->type().isTensor() && t->type().isTensor(), "{}: '{}' and its value '{}' must be tensors",
                n.describe(), id, v->id());
    DataType want = t->info().dataType(), got = v->info().dataType();
    GRAFT_CHECK(want == DataType::Undefined || got == DataType::Undefined || want == got,
                "{}: input {} ('{}') is {}, but '{}' of {} is {}", n.describe(), i, v->id(), dtypeName(got), id, attr,
                dtypeName(want));
    if (i < s.xs.size())
      GRAFT_CHECK(got == DataType::Undefined || isFloatingPoint(got),
                  "{}: '{}' of xs must be a floating-point tensor to have a gradient, its value '{}' is {}",
                  n.describe(), id, v->id(), dtypeName(got));
  }
  const ir::Tensor* y = g.findTensor(s.y);
  GRAFT_CHECK(y, "{}: attribute 'y' names '{}', which is not a tensor of the graph", n.describe(), s.y);
  return s;
}

// The nodes that compute `y` from the leaves (and from values no leaf determines), in
// schedule order.
std::vector<ir::Node*> forwardNodes(const ir::Graph& g, ir::Tensor* y, const std::set<const ir::Tensor*>& leaves) {
  std::set<const ir::Node*> found;
  std::vector<const ir::Tensor*> stack{y};
  while (!stack.empty()) {
    const ir::Tensor* t = stack.back();
    stack.pop_back();
    if (leaves.count(t) || !t->producer() || !found.insert(t->producer()).second) continue;
    for (const ir::Tensor* in : t->producer()->inputs())
      if (in) stack.push_back(in);
    for (const ir::Tensor* in : t->producer()->implicitInputs()) stack.push_back(in);
  }
  std::vector<ir::Node*> order;
  for (ir::Node* n : g.schedule())
    if (found.count(n)) order.push_back(n);
  return order;
}

// Throws when a leaf is computed from another leaf: both would not be independent variables.
void checkIndependent(const ir::Node& n, const std::vector<ir::Tensor*>& leaves) {
  std::set<const ir::Tensor*> leafSet(leaves.begin(), leaves.end());
  for (const ir::Tensor* leaf : leaves) {
    if (!leaf->producer()) continue;
    std::set<const ir::Tensor*> seen;
    std::vector<const ir::Tensor*> stack;
    for (const ir::Tensor* in : leaf->producer()->inputs())
      if (in) stack.push_back(in);
    while (!stack.empty()) {
      const ir::Tensor* t = stack.back();
      stack.pop_back();
      if (!seen.insert(t).second) continue;
      GRAFT_CHECK(!leafSet.count(t), "{}: '{}' is computed from '{}'; the tensors of xs and zs must be independent",
                  n.describe(), leaf->id(), t->id());
      if (const ir::Node* p = t->producer()) {
        for (const ir::Tensor* in : p->inputs())
          if (in) stack.push_back(in);
        for (const ir::Tensor* in : p->implicitInputs()) stack.push_back(in);
      }
    }
  }
}

// Ones of y's type and shape: where the backward pass of sum(y) starts.
ir::Tensor* onesLike(ir::Graph& s, ir::Tensor* y) {
  DataType dt = y->info().dataType();
  auto fill = [&](NDArray& a) {
    for (int64_t i = 0; i < a.numel(); ++i) switch (dt) {
        case DataType::Float:
          a.data<float>()[i] = 1.0f;
          break;
        case DataType::Double:
          a.data<double>()[i] = 1.0;
          break;
        case DataType::Float16:
          a.data<Half>()[i] = Half(1.0f);
          break;
        case DataType::BFloat16:
          a.data<BFloat16>()[i] = BFloat16(1.0f);
          break;
        default:
          GRAFT_ASSERT(false, "onesLike of {}", dtypeName(dt));
      }
  };
  if (y->info().isStatic()) {
    NDArray ones(dt, y->info().shape());
    fill(ones);
    return s.addInitializer(s.uniqueId("gradient_seed"), std::move(ones), ir::TensorKind::Constant);
  }
  ir::Node* shape = s.addNode("Shape", "", {y}, {s.uniqueId("gradient_seed_shape")});
  ops::inferNode(*shape, false);
  NDArray one(dt, {1});
  fill(one);
  ir::Attributes a;
  a.set("value", std::move(one));
  ir::Node* ones = s.addNode("ConstantOfShape", "", {shape->output(0)}, {s.uniqueId("gradient_seed")}, std::move(a));
  ops::inferNode(*ones, false);
  return ones->output(0);
}

// Ids for the tensors moved into `g`: `base`, unless g has it or an earlier output of the same node
// took it.
std::string freshId(const ir::Graph& g, const std::string& base, std::set<std::string>& taken) {
  std::string id = g.uniqueId(base);
  for (int k = 1; taken.count(id); ++k) id = g.uniqueId(base + "_" + std::to_string(k));
  taken.insert(id);
  return id;
}

// Expands `n`; returns false (changing nothing) when y is computed by another Gradient node that
// has to be expanded first.
bool expand(ir::Graph& g, ir::Node& n, const PassContext& ctx) {
  GradientSpec spec = readSpec(g, n);
  std::vector<ir::Tensor*> leaves;
  for (const auto& id : spec.leaves) leaves.push_back(&g.tensor(id));
  std::set<const ir::Tensor*> leafSet(leaves.begin(), leaves.end());
  ir::Tensor* y = &g.tensor(spec.y);
  std::vector<ir::Node*> fwd = forwardNodes(g, y, leafSet);
  for (ir::Node* f : fwd) {
    GRAFT_CHECK(f != &n, "{}: y '{}' is computed from this node's own outputs", n.describe(), spec.y);
    if (isGradient(*f)) return false;
    GRAFT_CHECK(
        f->subgraphs().empty(),
        "{}: y '{}' is computed through {}, which holds subgraphs; graft cannot differentiate through subgraphs",
        n.describe(), spec.y, f->describe());
  }
  checkIndependent(n, leaves);
  GRAFT_CHECK(y->type().isTensor() && isFloatingPoint(y->info().dataType()),
              "{}: y '{}' must be a floating-point tensor, it is {}", n.describe(), spec.y, y->type().str());

  // The private graph: the leaves become its inputs, typed as the node's inputs are; values no
  // leaf determines are read as they are (initializers keep their data: some gradients need it).
  ir::Graph s("gradient");
  s.setOpsetVersion(g.opsetVersion());
  s.otherOpsets = g.otherOpsets;
  s.otherOpsets[ops::kGraftDomain] = 1;
  std::unordered_map<const ir::Tensor*, ir::Tensor*> toGraph;  // private tensor -> tensor of g
  std::vector<ir::Tensor*> sLeaves;
  for (size_t i = 0; i < leaves.size(); ++i) {
    ir::Tensor* t = s.addTensor(spec.leaves[i], n.input(i)->type(), ir::TensorKind::Input);
    s.addInput(t);
    sLeaves.push_back(t);
    toGraph[t] = n.input(i);
  }
  auto read = [&](ir::Tensor* t) -> ir::Tensor* {
    if (!t) return nullptr;
    if (ir::Tensor* c = s.findTensor(t->id())) return c;
    ir::Tensor* c = t->data() ? s.addInitializer(t->id(), *t->data(), t->kind())
                              : s.addTensor(t->id(), t->type(), ir::TensorKind::Input);
    toGraph[c] = t;
    return c;
  };
  std::set<const ir::Node*> sForward;
  for (ir::Node* f : fwd) {
    std::vector<ir::Tensor*> ins;
    for (ir::Tensor* t : f->inputs()) ins.push_back(read(t));
    std::vector<std::string> outs;
    for (ir::Tensor* t : f->outputs()) outs.push_back(t ? t->id() : "");
    ir::Node* c = s.addNode(f->type(), f->domain(), ins, outs, f->attrs(), f->name());
    ops::inferNode(*c, ctx.weightsAreConstant);
    sForward.insert(c);
  }
  ir::Tensor* sy = s.findTensor(spec.y);
  std::vector<ir::Tensor*> sGrads(spec.xs.size(), nullptr);
  if (sy) {
    GRAFT_CHECK(sy->type().isTensor() && isFloatingPoint(sy->info().dataType()),
                "{}: y '{}' must be a floating-point tensor, it is {} for these inputs", n.describe(), spec.y,
                sy->type().str());
    std::vector<ir::Tensor*> wrt(sLeaves.begin(), sLeaves.begin() + static_cast<std::ptrdiff_t>(spec.xs.size()));
    auto grads = autodiff::differentiate(s, sy, wrt, onesLike(s, sy));
    for (size_t i = 0; i < wrt.size(); ++i) sGrads[i] = grads.at(wrt[i]);
  }
  // y does not depend on x: its gradient is zero.
  for (size_t i = 0; i < sGrads.size() && i < n.numOutputs(); ++i) {
    if (sGrads[i] || !n.output(i)) continue;
    ir::Node* z = s.addNode("ZerosLike", ops::kGraftDomain, {sLeaves[i]}, {s.uniqueId(spec.xs[i] + "_zero_gradient")});
    ops::inferNode(*z, false);
    sGrads[i] = z->output(0);
  }

  // Into the graph. With the node's inputs being the leaves themselves, the copied forward nodes
  // compute what g computes already.
  bool reuseForward = true;
  for (size_t i = 0; i < leaves.size(); ++i) reuseForward &= n.input(i) == leaves[i];
  std::string prefix = (n.name().empty() ? "Gradient" : n.name()) + "/";
  for (const auto& [domain, version] : s.otherOpsets)
    if (!domain.empty() && !g.otherOpsets.count(domain)) g.otherOpsets[domain] = version;
  for (ir::Node* c : s.schedule()) {
    if (reuseForward && sForward.count(c)) {
      for (ir::Tensor* t : c->outputs())
        if (t) toGraph[t] = &g.tensor(t->id());
      continue;
    }
    GRAFT_ASSERT(c->subgraphs().empty() && c->runsAfter().empty(),
                 "{}: gradient node {} holds subgraphs or control "
                 "dependencies",
                 n.describe(), c->describe());
    std::vector<ir::Tensor*> ins;
    for (ir::Tensor* t : c->inputs()) {
      if (!t) {
        ins.push_back(nullptr);
        continue;
      }
      auto it = toGraph.find(t);
      if (it == toGraph.end()) {
        // Constants the backward pass made.
        GRAFT_ASSERT(t->data(), "{}: gradient tensor '{}' has no value", n.describe(), t->id());
        it = toGraph.emplace(t, g.addInitializer(g.uniqueId(prefix + t->id()), *t->data(), ir::TensorKind::Constant))
                 .first;
      }
      ins.push_back(it->second);
    }
    std::set<std::string> taken;
    std::vector<std::string> outs;
    for (ir::Tensor* t : c->outputs()) outs.push_back(t ? freshId(g, prefix + t->id(), taken) : "");
    ir::Node* m = g.addNode(c->type(), c->domain(), ins, outs, c->attrs(), prefix + c->name());
    m->virtualGraph = n.virtualGraph;
    m->pipelineStage = n.pipelineStage;
    for (size_t k = 0; k < c->numOutputs(); ++k)
      if (c->output(k)) {
        m->output(k)->setType(c->output(k)->type());
        toGraph[c->output(k)] = m->output(k);
      }
  }
  // The node's outputs keep their tensors (and ids: users anchor them), now written by Identity.
  std::vector<std::pair<ir::Tensor*, ir::Tensor*>> results;  // (output, its gradient in g)
  for (size_t i = 0; i < n.numOutputs(); ++i)
    if (n.output(i)) results.emplace_back(n.output(i), toGraph.at(sGrads[i]));
  std::string name = n.name();
  auto vg = n.virtualGraph;
  auto stage = n.pipelineStage;
  g.removeNode(&n);
  for (auto& [out, grad] : results) {
    ir::Node* id = g.addNode("Identity", "", {grad}, {out->id()}, {}, name);
    id->virtualGraph = vg;
    id->pipelineStage = stage;
    out->setType(grad->type());
  }
  return true;
}

class ExpandGradient : public Pass {
 public:
  std::string_view name() const override { return "expand-gradient"; }
  bool run(ir::Graph& g, PassContext& ctx) override {
    bool changed = false;
    for (;;) {
      std::vector<ir::Node*> pending;
      for (ir::Node* n : g.nodes())
        if (isGradient(*n)) pending.push_back(n);
      if (pending.empty()) return changed;
      bool progress = false;
      for (ir::Node* n : pending)
        if (expand(g, *n, ctx)) {
          progress = changed = true;
          break;  // the graph changed: look again
        }
      GRAFT_CHECK(progress, "{}: the y of each of these {} Gradient nodes is computed by another of them",
                  pending[0]->describe(), pending.size());
    }
  }
};

GRAFT_REGISTER_PASS("expand-gradient", ExpandGradient);

}  // namespace
}  // namespace graft::passes
