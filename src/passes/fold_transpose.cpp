// fold-transpose (cpu pipelines): Transposes that feed or follow a matrix product become strides
// of the product instead of copies. oneDNN's matmul reads its operands and writes its result
// through any strides, so
//   MatMul / FusedMatMul (A = Transpose(X, p), ...)  -> FusedMatMul(X, ...) {perm_a = p}
//   (likewise B and perm_b; Transposes of Transposes compose, the identity disappears)
//   Transpose(MatMul / FusedMatMul(...), p)          -> FusedMatMul(...) {perm_y = p}
//   Gemm / FusedGemm (Transpose(X) ...)              -> transA / transB toggled
//   Transpose(Gemm / FusedGemm(A, B) without C)      -> Gemm(B, A) with both flags swapped
// The VJPs of MatMul and of Transpose make many of these (dA = dY Bᵀ, dB = Aᵀ dY, the gradient
// of a transposed weight), as does attention (Kᵀ, the head split and merge). A Transpose that
// others still read stays; dce removes those nobody reads.
#include <algorithm>
#include <numeric>

#include "ops/infer.hpp"
#include "ops/registry.hpp"
#include "passes/fuse_util.hpp"

namespace graft::passes {
namespace {

bool isOp(const ir::Node* n, const char* type, const std::string& domain) {
  return n && n->domain() == domain && n->type() == type;
}
bool isStaticFloat(const ir::Tensor* t) { return fuse::isFloat(t) && t->info().isStatic(); }

// The perm of a Transpose node (its default reverses the axes); empty when invalid.
std::vector<int64_t> transposePerm(const ir::Node& t) {
  const ir::Tensor* x = t.input(0);
  if (!isStaticFloat(x) || !isStaticFloat(t.output(0))) return {};
  auto rank = static_cast<int64_t>(x->info().rank());
  std::vector<int64_t> perm(static_cast<size_t>(rank));
  std::iota(perm.rbegin(), perm.rend(), int64_t{0});
  if (t.attrs().has("perm")) perm = t.attrInts("perm");
  if (static_cast<int64_t>(perm.size()) != rank) return {};
  std::vector<bool> seen(perm.size(), false);
  for (int64_t p : perm) {
    if (p < 0 || p >= rank || seen[p]) return {};
    seen[p] = true;
  }
  return perm;
}

bool isIdentity(const std::vector<int64_t>& p) {
  for (size_t i = 0; i < p.size(); ++i)
    if (p[i] != static_cast<int64_t>(i)) return false;
  return true;
}

bool isOnnxTranspose(const ir::Node* n) {
  return isOp(n, "Transpose", "") && n->numInputs() == 1 && n->numOutputs() == 1;
}

// Follows Transposes up from `t`: the array actually read and the composed perm (the identity
// when nothing was folded). `perm` holds the operand's current perm (empty: none).
ir::Tensor* foldInput(ir::Tensor* t, std::vector<int64_t>& perm) {
  while (t && isOnnxTranspose(t->producer())) {
    std::vector<int64_t> p = transposePerm(*t->producer());
    if (p.empty()) break;
    // Reading Transpose(T, q) where T = Transpose(X, p): axis j of the result is X's axis p[q[j]].
    if (perm.empty()) perm = p;
    else
      for (int64_t& q : perm) q = p[static_cast<size_t>(q)];
    t = t->producer()->input(0);
  }
  return t;
}

class FoldTranspose : public Pass {
 public:
  std::string_view name() const override { return "fold-transpose"; }
  bool run(ir::Graph& g, PassContext&) override {
    bool changed = false;
    std::vector<ir::Node*> heads;
    for (ir::Node* n : g.schedule())
      if (isOp(n, "MatMul", "") || isOp(n, "FusedMatMul", ops::kGraftDomain) || isOp(n, "Gemm", "") ||
          isOp(n, "FusedGemm", ops::kGraftDomain))
        heads.push_back(n);
    // Replacing a node never deletes another head: only the head itself and a Transpose after it.
    for (ir::Node* head : heads) {
      if (head->numOutputs() != 1 || !isStaticFloat(head->output(0)) || !isStaticFloat(head->input(0)) ||
          !isStaticFloat(head->input(1)))
        continue;
      bool gemm = head->type() == "Gemm" || head->type() == "FusedGemm";
      if (gemm ? foldGemm(g, head) : foldMatMul(g, head)) changed = true;
    }
    return changed;
  }

 private:
  // replaceChain, keeping the head's place in the schedule, its placement (virtual graph,
  // pipeline stage) and the chain's control dependencies (weight updates run after readers).
  static void replace(ir::Graph& g, const std::vector<ir::Node*>& chain, const char* type,
                      const std::vector<ir::Tensor*>& ins, ir::Attributes attrs) {
    auto vg = chain[0]->virtualGraph;
    auto stage = chain[0]->pipelineStage;
    int64_t id = chain[0]->id();
    auto inChain = [&](const ir::Node* x) { return std::find(chain.begin(), chain.end(), x) != chain.end(); };
    std::vector<ir::Node*> after, before;
    for (ir::Node* m : chain)
      for (ir::Node* a : m->runsAfter())
        if (!inChain(a)) after.push_back(a);
    for (ir::Node* x : g.nodes())
      if (!inChain(x))
        for (ir::Node* a : x->runsAfter())
          if (inChain(a)) before.push_back(x);
    ir::Node* n = fuse::replaceChain(g, chain, type, ins, std::move(attrs));
    g.reuseNodeId(n, id);
    n->virtualGraph = vg;
    n->pipelineStage = stage;
    for (ir::Node* a : after) n->addRunsAfter(a);
    for (ir::Node* b : before) b->addRunsAfter(n);
    ops::inferNode(*n, false);
  }

  static bool foldMatMul(ir::Graph& g, ir::Node* head) {
    ir::Attributes attrs = head->attrs();
    std::vector<ir::Tensor*> ins(head->inputs().begin(), head->inputs().end());
    bool changed = false;
    const char* permNames[] = {"perm_a", "perm_b"};
    for (size_t i = 0; i < 2; ++i) {
      std::vector<int64_t> perm = attrs.has(permNames[i]) ? head->attrInts(permNames[i]) : std::vector<int64_t>{};
      ir::Tensor* x = foldInput(ins[i], perm);
      if (x == ins[i]) continue;
      ins[i] = x;
      if (isIdentity(perm)) attrs.erase(permNames[i]);
      else attrs.set(permNames[i], perm);
      changed = true;
    }
    std::vector<ir::Node*> chain{head};
    ir::Node* next = fuse::soleConsumer(head->output(0));
    bool matrices = head->input(0)->info().rank() >= 2 && head->input(1)->info().rank() >= 2;
    if (matrices && !attrs.has("perm_y") && isOnnxTranspose(next)) {
      std::vector<int64_t> p = transposePerm(*next);
      if (!p.empty()) {
        if (!isIdentity(p)) attrs.set("perm_y", p);
        chain.push_back(next);
        changed = true;
      }
    }
    if (!changed) return false;
    replace(g, chain, "FusedMatMul", ins, std::move(attrs));
    return true;
  }

  static bool foldGemm(ir::Graph& g, ir::Node* head) {
    ir::Attributes attrs = head->attrs();
    std::vector<ir::Tensor*> ins(head->inputs().begin(), head->inputs().end());
    bool changed = false;
    const char* flags[] = {"transA", "transB"};
    int64_t trans[2];
    for (size_t i = 0; i < 2; ++i) {
      trans[i] = head->attrInt(flags[i], 0) != 0;
      // Gemm's operands are matrices: each Transpose of one swaps its two axes.
      for (ir::Node* p = ins[i]->producer();
           isOnnxTranspose(p) && p->input(0)->info().rank() == 2 && !transposePerm(*p).empty();
           p = ins[i]->producer()) {
        ins[i] = p->input(0);
        trans[i] = !trans[i];
        changed = true;
      }
    }
    std::vector<ir::Node*> chain{head};
    ir::Node* next = fuse::soleConsumer(head->output(0));
    if (!head->hasInput(2) && isOnnxTranspose(next) && !transposePerm(*next).empty()) {
      // (op(A) op(B))ᵀ = op(B)ᵀ op(A)ᵀ: the operands swap and so do their flags, negated.
      std::swap(ins[0], ins[1]);
      int64_t ta = trans[0];
      trans[0] = !trans[1];
      trans[1] = !ta;
      chain.push_back(next);
      changed = true;
    }
    attrs.set("transA", trans[0]);
    attrs.set("transB", trans[1]);
    if (!changed) return false;
    replace(g, chain, "FusedGemm", ins, std::move(attrs));
    return true;
  }
};

GRAFT_REGISTER_PASS("fold-transpose", FoldTranspose);

}  // namespace
}  // namespace graft::passes
