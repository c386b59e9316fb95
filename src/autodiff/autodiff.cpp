#include "autodiff/autodiff.hpp"

#include <set>
#include <unordered_map>

#include "ops/grad.hpp"
#include "ops/infer.hpp"
#include "ops/registry.hpp"
#include "support/check.hpp"

namespace graft::autodiff {
namespace {

// Floating-point tensors carry gradients; with an integer loss integer tensors do too, as in
// PopART (a loss of integers, such as a sum of medians, has integer gradients).
bool differentiable(const ir::Tensor* t, bool integers) {
  if (!t || !t->type().isTensor()) return false;
  DataType dt = t->info().dataType();
  return isFloatingPoint(dt) || (integers && isInteger(dt));
}

std::string opName(const ir::Node& n) { return n.domain().empty() ? n.type() : n.domain() + "::" + n.type(); }

}  // namespace

std::map<ir::Tensor*, ir::Tensor*> differentiate(ir::Graph& g, ir::Tensor* loss, const std::vector<ir::Tensor*>& wrt,
                                                 ir::Tensor* seed) {
  bool integers = loss && loss->type().isTensor() && isInteger(loss->info().dataType());
  GRAFT_CHECK(differentiable(loss, integers), "the loss '{}' must be a floating-point or integer tensor, it is {}",
              loss->id(), loss->type().str());
  std::vector<ir::Node*> order = g.schedule();

  // Tensors that depend on a `wrt` tensor through differentiable values.
  std::set<const ir::Tensor*> reach(wrt.begin(), wrt.end());
  for (ir::Node* n : order) {
    bool any = false;
    for (ir::Tensor* t : n->inputs())
      if (t && reach.count(t)) any = true;
    if (!any) continue;
    for (ir::Tensor* t : n->outputs())
      if (differentiable(t, integers)) reach.insert(t);
  }
  std::map<ir::Tensor*, ir::Tensor*> result;
  for (ir::Tensor* t : wrt) result[t] = nullptr;
  if (!reach.count(loss)) return result;

  // Partial gradients per tensor, summed when consumed.
  std::unordered_map<const ir::Tensor*, std::vector<ir::Tensor*>> partials;
  partials[loss].push_back(seed);
  ops::GradBuilder* current = nullptr;
  auto total = [&](ir::Node& ctx, const ir::Tensor* t) -> ir::Tensor* {
    auto it = partials.find(t);
    if (it == partials.end() || it->second.empty()) return nullptr;
    auto& ps = it->second;
    if (ps.size() > 1) {
      ops::GradBuilder gb(g, ctx, {}, {});
      ir::Tensor* s = gb.op("Sum", ps);
      ps.assign(1, s);
    }
    return ps[0];
  };
  (void)current;

  for (auto it = order.rbegin(); it != order.rend(); ++it) {
    ir::Node* n = *it;
    bool onPath = false;
    for (ir::Tensor* t : n->inputs())
      if (t && reach.count(t)) onPath = true;
    if (!onPath) continue;
    std::vector<ir::Tensor*> dys;
    bool anyDy = false;
    for (ir::Tensor* t : n->outputs()) {
      ir::Tensor* d = (t && reach.count(t)) ? total(*n, t) : nullptr;
      dys.push_back(d);
      anyDy |= d != nullptr;
    }
    if (!anyDy) continue;
    const ops::OpDef* def = ops::Registry::instance().find(*n);
    GRAFT_CHECK(def && def->vjp, "{}: op {} has no gradient, but the loss '{}' depends on its output through it",
                n->describe(), opName(*n), loss->id());
    std::vector<bool> wanted(n->numInputs(), false);
    for (size_t i = 0; i < n->numInputs(); ++i) {
      ir::Tensor* t = n->input(i);
      bool nonDiff = std::find(def->nonDifferentiableInputs.begin(), def->nonDifferentiableInputs.end(),
                               static_cast<int>(i)) != def->nonDifferentiableInputs.end();
      wanted[i] = t && reach.count(t) && !nonDiff;
    }
    ops::GradBuilder gb(g, *n, dys, wanted);
    def->vjp(gb);
    for (size_t i = 0; i < n->numInputs(); ++i) {
      if (!wanted[i]) continue;
      ir::Tensor* dx = gb.dxs()[i];
      GRAFT_ASSERT(dx, "{}: the gradient of input {} ('{}') was not produced", n->describe(), i, n->input(i)->id());
      partials[n->input(i)].push_back(dx);
    }
  }

  for (ir::Tensor* t : wrt) {
    auto it = partials.find(t);
    if (it == partials.end() || it->second.empty()) continue;
    ir::Node* anchorNode = it->second[0]->producer() ? it->second[0]->producer() : nullptr;
    ir::Tensor* sum;
    if (it->second.size() == 1) {
      sum = it->second[0];
    } else {
      GRAFT_ASSERT(anchorNode, "partial gradient of '{}' has no producer", t->id());
      ops::GradBuilder gb(g, *anchorNode, {}, {});
      sum = gb.op("Sum", it->second);
    }
    // The gradient gets PopART's name so that users can anchor it.
    std::string id = std::string(kGradientPrefix) + t->id();
    GRAFT_CHECK(!g.hasTensor(id), "the model already has a tensor named '{}', which graft reserves for a gradient", id);
    ir::Node* ident = g.addNode("Identity", "", {sum}, {id}, {}, id);
    ops::inferNode(*ident, false);
    result[t] = ident->output(0);
  }
  return result;
}

}  // namespace graft::autodiff
