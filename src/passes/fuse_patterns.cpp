// Pattern fusions of what exporters spell out op by op:
// fuse-gelu: x/2 (1 + erf(x / sqrt 2)) in its usual arrangements -> ai.graft::GeluErf(x);
// fuse-layernorm: (x - mean) / sqrt(mean((x - mean)^2) + eps) [* gamma] [+ beta], the means over
//   trailing axes -> LayerNormalization(x, gamma, beta){axis, epsilon}.
// Every intermediate must be read only inside the pattern (so nothing else needs it).
#include <algorithm>
#include <cmath>
#include <optional>

#include "ops/registry.hpp"
#include "passes/pass.hpp"
#include "support/float16.hpp"

namespace graft::passes {
namespace {

bool isOp(const ir::Node* n, const char* type) { return n && n->domain().empty() && n->type() == type; }

// The node's only reader when `t` has exactly one use (and is not a graph output).
ir::Node* soleUser(const ir::Tensor* t) {
  if (!t || t->isGraphOutput() || t->uses().size() != 1 || t->uses()[0].implicit) return nullptr;
  return t->uses()[0].node;
}

std::optional<double> constantScalar(const ir::Tensor* t) {
  if (!t || !t->data() || t->kind() != ir::TensorKind::Constant || t->data()->numel() != 1) return std::nullopt;
  const NDArray& a = *t->data();
  switch (a.dtype()) {
    case DataType::Float: return a.data<float>()[0];
    case DataType::Double: return a.data<double>()[0];
    case DataType::Float16: return static_cast<float>(a.data<Half>()[0]);
    case DataType::BFloat16: return static_cast<float>(a.data<BFloat16>()[0]);
    default: return std::nullopt;
  }
}

bool near(std::optional<double> v, double want) { return v && std::abs(*v - want) <= 1e-4 * std::abs(want); }

// For a binary node with a constant scalar operand near `value`: the other operand.
ir::Tensor* otherThanConstant(const ir::Node* n, double value, bool commutative = true) {
  if (!n || n->numInputs() != 2) return nullptr;
  if (near(constantScalar(n->input(1)), value)) return n->input(0);
  if (commutative && near(constantScalar(n->input(0)), value)) return n->input(1);
  return nullptr;
}

// The operand of a binary node other than `t` (nullptr when `t` is not an operand).
ir::Tensor* otherOperand(const ir::Node* n, const ir::Tensor* t) {
  if (!n || n->numInputs() != 2) return nullptr;
  if (n->input(0) == t) return n->input(1);
  if (n->input(1) == t) return n->input(0);
  return nullptr;
}

bool isFloat(const ir::Tensor* t) {
  if (!t || !t->type().isTensor()) return false;
  DataType dt = t->info().dataType();
  return dt == DataType::Float || dt == DataType::Double || dt == DataType::Float16 || dt == DataType::BFloat16;
}

// Replaces `remove` (in any order) by one node producing `out`.
ir::Node* replaceWith(ir::Graph& g, const std::vector<ir::Node*>& remove, ir::Tensor* out, const std::string& type,
                      const std::string& domain, const std::vector<ir::Tensor*>& inputs, ir::Attributes attrs) {
  std::string id = out->id();
  int64_t firstId = remove.front()->id();
  for (ir::Node* n : remove) firstId = std::min(firstId, n->id());
  std::vector<ir::Tensor*> outs;
  for (ir::Node* n : remove)
    for (ir::Tensor* t : n->outputs())
      if (t && t != out) outs.push_back(t);
  for (ir::Node* n : remove) g.removeNode(n);
  for (ir::Tensor* t : outs)
    if (!t->producer() && t->uses().empty() && !t->isGraphOutput()) g.removeTensor(t);
  if (!domain.empty() && !g.otherOpsets.count(domain)) g.otherOpsets[domain] = 1;
  ir::Node* n = g.addNode(type, domain, inputs, {id}, std::move(attrs), "fused_" + id);
  g.reuseNodeId(n, firstId);  // run where the pattern began
  return n;
}

bool noControlDeps(const std::vector<ir::Node*>& nodes, const std::vector<ir::Node*>& all) {
  for (ir::Node* n : nodes)
    if (!n->runsAfter().empty()) return false;
  for (ir::Node* x : all)
    for (ir::Node* a : x->runsAfter())
      for (ir::Node* n : nodes)
        if (a == n) return false;
  return true;
}

// ---- GELU ------------------------------------------------------------------------------------

bool fuseGeluAt(ir::Graph& g, ir::Node* erf, const std::vector<ir::Node*>& all) {
  ir::Tensor* u = erf->input(0);
  ir::Node* scale = u ? u->producer() : nullptr;
  if (!scale || soleUser(u) != erf) return false;
  ir::Tensor* x = isOp(scale, "Div") ? otherThanConstant(scale, std::sqrt(2.0), false)
                  : isOp(scale, "Mul") ? otherThanConstant(scale, std::sqrt(0.5))
                                       : nullptr;
  if (!x || !isFloat(x)) return false;
  ir::Node* add = soleUser(erf->output(0));
  if (!isOp(add, "Add") || otherOperand(add, erf->output(0)) == nullptr ||
      !near(constantScalar(otherOperand(add, erf->output(0))), 1.0))
    return false;
  ir::Tensor* a = add->output(0);  // 1 + erf(x / sqrt 2)
  ir::Node* m = soleUser(a);
  if (!isOp(m, "Mul")) return false;
  ir::Tensor* q = otherOperand(m, a);
  std::vector<ir::Node*> nodes{scale, erf, add, m};
  ir::Tensor* y = nullptr;
  if (q == x) {
    // (x * a) * 0.5
    ir::Node* h = soleUser(m->output(0));
    if (!isOp(h, "Mul") || !near(constantScalar(otherOperand(h, m->output(0))), 0.5)) return false;
    nodes.push_back(h);
    y = h->output(0);
  } else if (q && q->producer() && isOp(q->producer(), "Mul") && soleUser(q) == m) {
    // (x * 0.5) * a
    ir::Node* h = q->producer();
    if (otherThanConstant(h, 0.5) != x) return false;
    nodes.push_back(h);
    y = m->output(0);
  } else if (near(constantScalar(q), 0.5)) {
    // x * (a * 0.5)
    ir::Node* h = soleUser(m->output(0));
    if (!isOp(h, "Mul") || otherOperand(h, m->output(0)) != x) return false;
    nodes.push_back(h);
    y = h->output(0);
  } else {
    return false;
  }
  if (y->info().dataType() != x->info().dataType() || !noControlDeps(nodes, all)) return false;
  replaceWith(g, nodes, y, "GeluErf", ops::kGraftDomain, {x}, {});
  return true;
}

class FuseGelu : public Pass {
 public:
  std::string_view name() const override { return "fuse-gelu"; }
  bool run(ir::Graph& g, PassContext&) override {
    bool changed = false;
    // The Erf nodes first: a fusion removes the nodes around its Erf (the Div, Add and Muls), so a
    // list of all nodes would hold freed ones after it (ASan found a use-after-free here). Each
    // pattern holds one Erf, so no fusion removes another candidate.
    std::vector<ir::Node*> erfs;
    for (ir::Node* n : g.nodes())
      if (isOp(n, "Erf")) erfs.push_back(n);
    for (ir::Node* n : erfs)
      if (fuseGeluAt(g, n, g.nodes())) changed = true;
    return changed;
  }
};

// ---- LayerNorm -------------------------------------------------------------------------------

// The first axis of the trailing axes a ReduceMean (keepdims) averages over, or nullopt. The axes
// are a constant input (opset 18) or, in graphs built at older opsets, the attribute.
std::optional<int64_t> trailingAxes(const ir::Node* r, int64_t rank) {
  if (!isOp(r, "ReduceMean") || r->attrInt("keepdims", 1) != 1 || r->numInputs() > 2) return std::nullopt;
  std::vector<int64_t> axes = r->attrInts("axes", {});
  if (r->numInputs() == 2 && r->input(1)) {
    const ir::Tensor* t = r->input(1);
    if (!t->data() || t->kind() != ir::TensorKind::Constant || t->data()->dtype() != DataType::Int64 ||
        t->data()->rank() > 1)
      return std::nullopt;
    const NDArray& a = *t->data();
    axes.assign(a.data<int64_t>(), a.data<int64_t>() + a.numel());
  }
  if (axes.empty() && r->attrInt("noop_with_empty_axes", 0) != 0) return std::nullopt;
  if (axes.empty()) return int64_t{0};
  for (int64_t& a : axes) {
    if (a < -rank || a >= rank) return std::nullopt;
    if (a < 0) a += rank;
  }
  std::sort(axes.begin(), axes.end());
  for (size_t i = 0; i < axes.size(); ++i)
    if (axes[i] != rank - static_cast<int64_t>(axes.size()) + static_cast<int64_t>(i)) return std::nullopt;
  return axes.front();
}

// True when `p`'s static shape, without leading 1s, is the normalized shape.
bool matchesNormalized(const ir::Tensor* p, const std::vector<Dim>& norm) {
  if (!p || !p->type().isTensor() || !p->info().hasShape()) return false;
  std::vector<Dim> d = p->info().dims();
  while (d.size() > norm.size() && d.front() == Dim(1)) d.erase(d.begin());
  if (d.size() != norm.size()) return false;
  for (size_t i = 0; i < d.size(); ++i)
    if (!d[i].known() || d[i] != norm[i]) return false;
  return true;
}

bool fuseLayerNormAt(ir::Graph& g, ir::Node* mean, const std::vector<ir::Node*>& all) {
  ir::Tensor* x = mean->input(0);
  if (!isFloat(x) || !x->info().hasShape()) return false;
  int64_t rank = x->info().rank();
  auto axis = trailingAxes(mean, rank);
  if (!axis) return false;
  ir::Node* sub = soleUser(mean->output(0));
  if (!isOp(sub, "Sub") || sub->input(0) != x || sub->input(1) != mean->output(0)) return false;
  ir::Tensor* d = sub->output(0);
  if (d->isGraphOutput()) return false;
  ir::Node *square = nullptr, *div = nullptr;
  for (const ir::Use& u : d->uses()) {
    if (u.implicit) return false;
    ir::Node* n = u.node;
    if ((isOp(n, "Pow") && n->input(0) == d && near(constantScalar(n->input(1)), 2.0)) ||
        (isOp(n, "Mul") && n->input(0) == d && n->input(1) == d)) {
      if (square && square != n) return false;
      square = n;
    } else if (isOp(n, "Div") && n->input(0) == d) {
      if (div) return false;
      div = n;
    } else {
      return false;
    }
  }
  if (!square || !div) return false;
  ir::Node* var = soleUser(square->output(0));
  if (!var || trailingAxes(var, rank) != axis || var->input(0) != square->output(0)) return false;
  ir::Node* addEps = soleUser(var->output(0));
  if (!isOp(addEps, "Add")) return false;
  auto eps = constantScalar(otherOperand(addEps, var->output(0)));
  if (!eps || *eps < 0) return false;
  ir::Node* sqrt = soleUser(addEps->output(0));
  if (!isOp(sqrt, "Sqrt") || soleUser(sqrt->output(0)) != div || div->input(1) != sqrt->output(0)) return false;
  std::vector<ir::Node*> nodes{mean, sub, square, var, addEps, sqrt, div};
  std::vector<Dim> norm(x->info().dims().begin() + *axis, x->info().dims().end());
  ir::Tensor* y = div->output(0);
  ir::Tensor* gamma = nullptr;
  ir::Tensor* beta = nullptr;
  if (ir::Node* mul = soleUser(y); isOp(mul, "Mul")) {
    ir::Tensor* gm = otherOperand(mul, y);
    if (gm != y && matchesNormalized(gm, norm) && gm->info().dataType() == x->info().dataType()) {
      gamma = gm;
      nodes.push_back(mul);
      y = mul->output(0);
      if (ir::Node* add = soleUser(y); isOp(add, "Add")) {
        ir::Tensor* bt = otherOperand(add, y);
        if (bt != y && matchesNormalized(bt, norm) && bt->info().dataType() == x->info().dataType()) {
          beta = bt;
          nodes.push_back(add);
          y = add->output(0);
        }
      }
    }
  }
  if (y->info().dataType() != x->info().dataType() || !y->info().hasShape() || y->info().dims() != x->info().dims() ||
      !noControlDeps(nodes, all))
    return false;
  if (!gamma) {
    // LayerNormalization needs a scale: ones of the normalized shape.
    Shape s;
    for (const Dim& dim : norm) {
      if (!dim.known()) return false;
      s.push_back(dim.value);
    }
    NDArray ones(x->info().dataType(), s);
    int64_t nel = ones.numel();
    switch (ones.dtype()) {
      case DataType::Float: std::fill(ones.data<float>(), ones.data<float>() + nel, 1.0f); break;
      case DataType::Double: std::fill(ones.data<double>(), ones.data<double>() + nel, 1.0); break;
      case DataType::Float16: std::fill(ones.data<Half>(), ones.data<Half>() + nel, Half(1.0f)); break;
      default: std::fill(ones.data<BFloat16>(), ones.data<BFloat16>() + nel, BFloat16(1.0f)); break;
    }
    gamma = g.addInitializer(g.uniqueId(y->id() + "_scale"), ones, ir::TensorKind::Constant);
  }
  ir::Attributes attrs;
  attrs.set("axis", *axis);
  attrs.set("epsilon", static_cast<float>(*eps));
  std::vector<ir::Tensor*> inputs{x, gamma};
  if (beta) inputs.push_back(beta);
  replaceWith(g, nodes, y, "LayerNormalization", "", inputs, std::move(attrs));
  return true;
}

class FuseLayerNorm : public Pass {
 public:
  std::string_view name() const override { return "fuse-layernorm"; }
  bool run(ir::Graph& g, PassContext&) override {
    bool changed = false;
    // By id: a fusion deletes the nodes of its pattern, the variance's ReduceMean included.
    std::vector<int64_t> candidates;
    for (ir::Node* n : g.nodes())
      if (isOp(n, "ReduceMean")) candidates.push_back(n->id());
    for (int64_t id : candidates) {
      std::vector<ir::Node*> all = g.nodes();
      auto it = std::find_if(all.begin(), all.end(), [&](ir::Node* n) { return n->id() == id; });
      if (it != all.end() && fuseLayerNormAt(g, *it, all)) changed = true;
    }
    return changed;
  }
};

GRAFT_REGISTER_PASS("fuse-gelu", FuseGelu);
GRAFT_REGISTER_PASS("fuse-layernorm", FuseLayerNorm);

}  // namespace
}  // namespace graft::passes
