// cse: common-subexpression elimination. Two nodes of the same op with the same inputs (the very
// same tensors) and equal attributes compute the same values: the later one is removed and its
// readers read the earlier one's outputs. Small constants with equal contents are merged first,
// so that computations on copies of one constant (autodiff creates many) are found equal too.
// Random ops, ops with side effects, subgraph ops and nodes with control dependencies stay.
#include <cstring>
#include <functional>
#include <unordered_map>

#include "ops/registry.hpp"
#include "passes/pass.hpp"

namespace graft::passes {
namespace {

constexpr int64_t kMaxMergedConstantElements = 64;

size_t mix(size_t h, size_t v) { return h ^ (v + 0x9e3779b97f4a7c15ull + (h << 6) + (h >> 2)); }

bool sameArray(const NDArray& a, const NDArray& b) {
  if (a.dtype() != b.dtype() || a.shape() != b.shape()) return false;
  if (a.sharesBufferWith(b)) return true;
  if (a.dtype() == DataType::String) {
    for (int64_t i = 0; i < a.numel(); ++i)
      if (a.data<std::string>()[i] != b.data<std::string>()[i]) return false;
    return true;
  }
  return a.nbytes() == 0 || std::memcmp(a.rawData(), b.rawData(), a.nbytes()) == 0;
}

size_t hashArray(const NDArray& a) {
  size_t h = mix(static_cast<size_t>(a.dtype()), a.shape().size());
  for (int64_t d : a.shape()) h = mix(h, static_cast<size_t>(d));
  if (a.dtype() == DataType::String) return h;
  const auto* p = static_cast<const unsigned char*>(a.rawData());
  for (size_t i = 0; i < std::min<size_t>(a.nbytes(), 256); ++i) h = mix(h, p[i]);
  return h;
}

// Attribute values compare by content; floats bitwise (so that NaN equals NaN); graphs never.
bool sameAttr(const ir::AttrValue& a, const ir::AttrValue& b) {
  if (a.index() != b.index()) return false;
  return std::visit(
      [&](const auto& x) -> bool {
        using V = std::decay_t<decltype(x)>;
        const V& y = std::get<V>(b);
        if constexpr (std::is_same_v<V, float>) {
          // NOLINTNEXTLINE(bugprone-suspicious-memory-comparison): bitwise on purpose (NaN equals NaN, 0 and -0 differ)
          return std::memcmp(&x, &y, sizeof(float)) == 0;
        } else if constexpr (std::is_same_v<V, std::vector<float>>) {
          return x.size() == y.size() && (x.empty() || std::memcmp(x.data(), y.data(), x.size() * sizeof(float)) == 0);
        } else if constexpr (std::is_same_v<V, NDArray>) {
          return sameArray(x, y);
        } else if constexpr (std::is_same_v<V, std::vector<NDArray>>) {
          if (x.size() != y.size()) return false;
          for (size_t i = 0; i < x.size(); ++i)
            if (!sameArray(x[i], y[i])) return false;
          return true;
        } else if constexpr (std::is_same_v<V, ir::GraphPtr> || std::is_same_v<V, std::vector<ir::GraphPtr>>) {
          return false;
        } else {
          return x == y;
        }
      },
      a);
}

bool sameNode(const ir::Node& a, const ir::Node& b) {
  if (a.type() != b.type() || a.domain() != b.domain() || a.inputs() != b.inputs() ||
      a.numOutputs() != b.numOutputs() || a.attrs().size() != b.attrs().size())
    return false;
  for (size_t i = 0; i < a.numOutputs(); ++i)
    if ((a.output(i) == nullptr) != (b.output(i) == nullptr)) return false;
  auto ia = a.attrs().all().begin();
  for (auto ib = b.attrs().all().begin(); ib != b.attrs().all().end(); ++ia, ++ib)
    if (ia->first != ib->first || !sameAttr(ia->second, ib->second)) return false;
  return true;
}

size_t hashNode(const ir::Node& n) {
  size_t h = std::hash<std::string>()(n.type());
  h = mix(h, std::hash<std::string>()(n.domain()));
  for (const ir::Tensor* t : n.inputs()) h = mix(h, std::hash<const void*>()(t));
  for (const auto& [k, v] : n.attrs().all()) h = mix(h, std::hash<std::string>()(k));
  return h;
}

bool eligible(const ir::Node& n, const std::unordered_map<const ir::Node*, int>& dependents) {
  if (!ops::repeatable(n)) return false;
  if (!n.implicitInputs().empty() || !n.runsAfter().empty() || dependents.count(&n)) return false;
  for (const ir::Tensor* t : n.outputs()) {
    if (!t) continue;
    if (t->isGraphOutput()) return false;
    for (const ir::Use& u : t->uses())
      if (u.implicit) return false;  // read by a subgraph through its id
  }
  return true;
}

// Replaces every use of small constants by the first constant of equal contents.
bool mergeConstants(ir::Graph& g) {
  bool changed = false;
  std::unordered_map<size_t, std::vector<ir::Tensor*>> seen;
  for (ir::Tensor* t : g.initializers()) {
    if (t->kind() != ir::TensorKind::Constant || !t->data() || t->isGraphOutput()) continue;
    const NDArray& a = *t->data();
    if (a.numel() > kMaxMergedConstantElements || a.dtype() == DataType::String) continue;
    bool implicit = false;
    for (const ir::Use& u : t->uses()) implicit |= u.implicit;
    if (implicit) continue;
    auto& bucket = seen[hashArray(a)];
    ir::Tensor* same = nullptr;
    for (ir::Tensor* c : bucket)
      if (sameArray(*c->data(), a)) same = c;
    if (!same) {
      bucket.push_back(t);
      continue;
    }
    if (t->uses().empty()) continue;
    g.replaceAllUses(t, same);
    changed = true;
  }
  return changed;
}

class CommonSubexpressionElimination : public Pass {
 public:
  std::string_view name() const override { return "cse"; }
  bool run(ir::Graph& g, PassContext&) override {
    bool changed = mergeConstants(g);
    // Nodes that others must run after (control dependencies) keep their identity.
    std::unordered_map<const ir::Node*, int> dependents;
    for (const ir::Node* n : g.nodes())
      for (const ir::Node* a : n->runsAfter()) ++dependents[a];
    std::unordered_map<size_t, std::vector<ir::Node*>> table;
    for (ir::Node* n : g.schedule()) {
      if (!eligible(*n, dependents)) continue;
      auto& bucket = table[hashNode(*n)];
      ir::Node* same = nullptr;
      for (ir::Node* m : bucket)
        if (sameNode(*m, *n)) same = m;
      if (!same) {
        bucket.push_back(n);
        continue;
      }
      std::vector<ir::Tensor*> outs = n->outputs();
      for (size_t i = 0; i < outs.size(); ++i)
        if (outs[i]) g.replaceAllUses(outs[i], same->output(i));
      g.removeNode(n);
      for (ir::Tensor* t : outs)
        if (t) g.removeTensor(t);
      changed = true;
    }
    if (changed)
      for (ir::Tensor* t : g.tensors())
        if (t->kind() == ir::TensorKind::Constant && !t->producer() && t->uses().empty() && !t->isGraphOutput())
          g.removeTensor(t);
    return changed;
  }
};

GRAFT_REGISTER_PASS("cse", CommonSubexpressionElimination);

}  // namespace
}  // namespace graft::passes
