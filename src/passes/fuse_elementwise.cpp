// fuse-elementwise: chains of elementwise ops on floating-point tensors of one shape become one
// ai.graft::FusedElementwise node (ops/fused_program.hpp), which computes them in one loop.
//
// Nodes join, in schedule order, the group of the producer of one of their inputs when the
// output shape and type match and everything else they read comes from before the group
// (which keeps the graph acyclic). Inputs of other shapes broadcast; scalar constants become program constants. A group
// output is every member output read outside the group. Groups of one node stay as they are.
// Predicates (comparisons, And/Or/Not: BOOL results) join no group by themselves: they wait for
// a reader (Where) and join its group with it when all their readers are there, so that an
// activation's gradient Where(x > 0, dy, 0), whose x is long computed, fuses with its
// predicate and the BOOL mask never reaches memory.
#include <algorithm>
#include <optional>
#include <unordered_map>
#include <unordered_set>

#include "ops/elementwise_table.hpp"
#include "ops/fused_program.hpp"
#include "ops/registry.hpp"
#include "passes/pass.hpp"
#include "support/check.hpp"
#include "support/float16.hpp"

namespace graft::passes {
namespace {

using ops::fused::Code;

constexpr size_t kMaxInstructions = 64;
constexpr size_t kMaxInputs = 16;

// How a node becomes instructions: one or two codes over its inputs.
struct Mapping {
  std::vector<Code> codes;    // applied in order; the second (if any) takes the first's result
  std::vector<int> operands;  // node input indices for the first code
  std::vector<int> extra;     // node input indices appended after the previous result (Clip's max)
  float imm = 0;
  bool predicate = false;  // BOOL output
  bool boolInputs = false;
};

bool isFloatType(DataType dt) {
  return dt == DataType::Float || dt == DataType::Double || dt == DataType::Float16 || dt == DataType::BFloat16;
}

const NDArray* scalarConstant(const ir::Tensor* t) {
  if (!t || t->kind() != ir::TensorKind::Constant || !t->data() || t->data()->numel() != 1) return nullptr;
  return t->data();
}

std::optional<double> scalarValue(const ir::Tensor* t) {
  const NDArray* a = scalarConstant(t);
  if (!a) return std::nullopt;
  switch (a->dtype()) {
    case DataType::Float:
      return a->data<float>()[0];
    case DataType::Double:
      return a->data<double>()[0];
    case DataType::Float16:
      return static_cast<float>(a->data<Half>()[0]);
    case DataType::BFloat16:
      return static_cast<float>(a->data<BFloat16>()[0]);
    default:
      return std::nullopt;
  }
}

// ZerosLike (autodiff's zeros) read by a member becomes the program constant 0.
bool isZeros(const ir::Tensor* t) {
  const ir::Node* p = t ? t->producer() : nullptr;
  return p && p->type() == "ZerosLike" && p->domain() == ops::kGraftDomain && t->type().isTensor() &&
         isFloatType(t->info().dataType());
}

std::optional<Mapping> mapNode(const ir::Node& n) {
  Mapping m;
  const std::string& t = n.type();
  // Sum of two is Add; Pow by 2 is Square; Clip is below.
  const ops::ew::Row* row =
      n.domain().empty() && t == "Sum" ? &ops::ew::row(ops::ew::Op::Add) : ops::ew::find(n.domain(), t);
  if (row && row->code >= 0) {
    if (n.numInputs() != static_cast<size_t>(row->arity)) return std::nullopt;
    for (int i = 0; i < row->arity; ++i) {
      if (!n.input(i)) return std::nullopt;
      m.operands.push_back(i);
    }
    m.codes = {static_cast<Code>(row->code)};
    m.imm = ops::ew::params(*row, n).p0;
    m.predicate = row->predicate;
    m.boolInputs = row->types == ops::ew::Types::Bool;
    if (row->op == ops::ew::Op::Pow)
      if (auto v = scalarValue(n.input(1)); v && *v == 2.0) m.codes = {Code::Square}, m.operands = {0};
    return m;
  }
  if (!n.domain().empty()) return std::nullopt;
  if (t == "Clip" && n.input(0)) {
    // min(max(x, lo), hi): the same values as Clip, NaN included.
    bool lo = n.hasInput(1), hi = n.hasInput(2);
    if (lo && hi)
      m.codes = {Code::Max, Code::Min}, m.operands = {0, 1}, m.extra = {2};
    else if (lo)
      m.codes = {Code::Max}, m.operands = {0, 1};
    else if (hi)
      m.codes = {Code::Min}, m.operands = {0, 2};
    else
      return std::nullopt;
    return m;
  }
  return std::nullopt;
}

// The broadcast of the inputs' dims as FusedElementwise infers it (nullopt for an input of
// unknown rank).
std::optional<std::vector<Dim>> broadcastDims(const std::vector<ir::Tensor*>& inputs) {
  size_t rank = 0;
  for (const ir::Tensor* t : inputs) {
    if (!t->info().hasShape()) return std::nullopt;
    rank = std::max(rank, t->info().dims().size());
  }
  std::vector<Dim> out(rank, Dim(1));
  for (const ir::Tensor* t : inputs) {
    const auto& d = t->info().dims();
    for (size_t i = 0; i < d.size(); ++i) {
      Dim& o = out[rank - d.size() + i];
      if (d[i].known() && d[i].value == 1) continue;
      if (d[i].known() || (o.known() && o.value == 1)) o = d[i];
    }
  }
  return out;
}

struct Group {
  std::vector<ir::Node*> members;
  std::vector<Dim> dims;
  DataType dtype = DataType::Undefined;
  int firstPos = 0;
  size_t instructions = 0;
};

class FuseElementwise : public Pass {
 public:
  std::string_view name() const override { return "fuse-elementwise"; }
  bool run(ir::Graph& g, PassContext&) override {
    std::vector<ir::Node*> order = g.schedule();
    for (size_t i = 0; i < order.size(); ++i) pos_[order[i]] = static_cast<int>(i);
    for (ir::Node* n : order) consider(n);
    bool changed = false;
    for (size_t gi = 0; gi < groups_.size(); ++gi)
      if (groups_[gi].members.size() >= 2) changed |= fuse(g, groups_[gi]);
    return changed;
  }

 private:
  // The element type a node computes in, or Undefined when it cannot be fused.
  DataType computeType(const ir::Node& n, const Mapping& m) const {
    const ir::Tensor* out = n.output(0);
    if (n.numOutputs() != 1 || !out || !out->type().isTensor() || !out->info().hasShape()) return DataType::Undefined;
    if (m.boolInputs) {
      for (const ir::Tensor* t : n.inputs())
        if (!t || t->info().dataType() != DataType::Bool) return DataType::Undefined;
      return DataType::Bool;  // joins a group of any float type
    }
    DataType dt = m.predicate ? n.input(0)->info().dataType() : out->info().dataType();
    if (!isFloatType(dt)) return DataType::Undefined;
    if (m.predicate && out->info().dataType() != DataType::Bool) return DataType::Undefined;
    for (size_t i = 0; i < n.numInputs(); ++i) {
      const ir::Tensor* t = n.input(i);
      if (!t || !t->type().isTensor() || !t->info().hasShape()) return DataType::Undefined;
      DataType it = t->info().dataType();
      bool cond = n.type() == "Where" && i == 0;
      if (cond ? it != DataType::Bool : it != dt) return DataType::Undefined;
    }
    return dt;
  }

  // Joining group gi is safe when everything else n reads comes from before the group's first
  // member: then, along every edge of the graph with groups contracted to nodes, the position
  // of the first member grows, so no cycle can appear (even through other groups). BOOL values
  // from pending predicates are pulled into the group with n where they can be (`pulled`, in
  // no particular order); otherwise they too must come from before the group.
  bool early(ir::Node* p, int gi) {
    if (!p) return true;
    auto it = groupOf_.find(p);
    return (it != groupOf_.end() && it->second == gi) || pos_[p] < groups_[gi].firstPos;
  }

  bool readsOnlyEarlierThan(ir::Node* n, int gi, std::vector<ir::Node*>& pulled, size_t& budget) {
    for (ir::Tensor* y : n->inputs()) {
      if (!y || isZeros(y)) continue;
      if (tryPull(y->producer(), gi, n, pulled, budget)) continue;
      if (!early(y->producer(), gi)) return false;
    }
    for (ir::Tensor* y : n->implicitInputs())
      if (!early(y->producer(), gi)) return false;
    for (ir::Node* a : n->runsAfter())
      if (!early(a, gi)) return false;
    return true;
  }

  // Whether pending predicate p can join group gi together with its reader `reader` (which is
  // about to join): every reader of p is then in the group, and what p reads is early or pulled
  // too. On failure `pulled` and `budget` are as they were.
  bool tryPull(ir::Node* p, int gi, ir::Node* reader, std::vector<ir::Node*>& pulled, size_t& budget) {
    if (!p || !pending_.count(p) || groupOf_.count(p)) return false;
    if (std::find(pulled.begin(), pulled.end(), p) != pulled.end()) return true;
    const Group& grp = groups_[gi];
    const PendingPredicate& pp = pending_.at(p);
    if (pp.dtype != DataType::Bool && pp.dtype != grp.dtype) return false;
    if (p->output(0)->info().dims() != grp.dims || p->output(0)->isGraphOutput()) return false;
    if (budget < pp.instructions) return false;
    for (const ir::Use& u : p->output(0)->uses()) {
      bool inside = u.node == reader || std::find(pulled.begin(), pulled.end(), u.node) != pulled.end();
      auto it = groupOf_.find(u.node);
      if (u.implicit || !(inside || (it != groupOf_.end() && it->second == gi))) return false;
    }
    size_t mark = pulled.size(), budgetBefore = budget;
    pulled.push_back(p);
    budget -= pp.instructions;
    if (readsOnlyEarlierThan(p, gi, pulled, budget)) return true;
    pulled.resize(mark);
    budget = budgetBefore;
    return false;
  }

  // Adds n (and the predicates it pulls, before it in schedule order) to group gi.
  void join(ir::Node* n, int gi, std::vector<ir::Node*> pulled, size_t instructions) {
    Group& grp = groups_[gi];
    std::sort(pulled.begin(), pulled.end(), [&](ir::Node* a, ir::Node* b) { return pos_[a] < pos_[b]; });
    pulled.push_back(n);
    for (ir::Node* m : pulled) {
      grp.members.push_back(m);
      groupOf_[m] = gi;
    }
    grp.instructions = instructions;
  }

  void consider(ir::Node* n) {
    auto m = mapNode(*n);
    if (!m) return;
    DataType dt = computeType(*n, *m);
    if (dt == DataType::Undefined) return;
    // A BOOL result only lives inside a program: the predicate waits for a reader to join.
    if (m->predicate) {
      pending_[n] = PendingPredicate{dt, m->codes.size()};
      return;
    }
    const std::vector<Dim>& dims = n->output(0)->info().dims();
    for (ir::Tensor* x : n->inputs()) {
      if (!x || !x->producer()) continue;
      auto it = groupOf_.find(x->producer());
      if (it == groupOf_.end()) continue;
      int gi = it->second;
      Group& grp = groups_[gi];
      if (grp.dims != dims || dt != grp.dtype) continue;
      if (grp.instructions + m->codes.size() > kMaxInstructions) continue;
      std::vector<ir::Node*> pulled;
      size_t budget = kMaxInstructions - grp.instructions - m->codes.size();
      if (!readsOnlyEarlierThan(n, gi, pulled, budget)) continue;
      join(n, gi, std::move(pulled), kMaxInstructions - budget);
      return;
    }
    Group grp;
    grp.dims = dims;
    grp.dtype = dt;
    grp.firstPos = pos_[n];
    int gi = static_cast<int>(groups_.size());
    groups_.push_back(std::move(grp));
    // Everything n reads is earlier than n: only the predicates to pull are in question.
    std::vector<ir::Node*> pulled;
    size_t budget = kMaxInstructions - m->codes.size();
    for (ir::Tensor* y : n->inputs())
      if (y && !isZeros(y)) tryPull(y->producer(), gi, n, pulled, budget);
    join(n, gi, std::move(pulled), kMaxInstructions - budget);
  }

  bool fuse(ir::Graph& g, Group& grp) {
    // A predicate can be pulled in after a member that already reads it (its last reader joins
    // later): the program follows the schedule, in which every value comes before its readers.
    std::sort(grp.members.begin(), grp.members.end(), [&](ir::Node* a, ir::Node* b) { return pos_[a] < pos_[b]; });
    std::unordered_set<ir::Node*> members(grp.members.begin(), grp.members.end());
    auto usedOutside = [&](const ir::Tensor* t) {
      if (t->isGraphOutput()) return true;
      for (const ir::Use& u : t->uses())
        if (u.implicit || !members.count(u.node)) return true;
      return false;
    };
    ops::fused::Program prog;
    prog.dtype = grp.dtype;
    // Inputs: a tensor of the group's full shape first, so that the output may overwrite it.
    std::vector<ir::Tensor*> inputs;
    std::unordered_map<const ir::Tensor*, int> reg;
    auto addInput = [&](ir::Tensor* t) {
      if (reg.count(t)) return;
      reg[t] = static_cast<int>(inputs.size());
      inputs.push_back(t);
    };
    std::vector<ir::Tensor*> external;
    for (ir::Node* n : grp.members)
      for (ir::Tensor* t : n->inputs())
        if (t && !members.count(t->producer()) && !isZeros(t)) external.push_back(t);
    bool embedConstants = grp.dtype != DataType::Double;  // a float immediate would round a double
    for (ir::Tensor* t : external)
      if (t->info().hasShape() && t->info().dims() == grp.dims && !(embedConstants && scalarConstant(t))) {
        addInput(t);
        break;
      }
    for (ir::Tensor* t : external)
      if (!(embedConstants && scalarValue(t))) addInput(t);
    // The inputs must broadcast to the group's shape; with zeros and constants turned into
    // immediates they may not: then a tensor of the full shape comes along (unread).
    if (broadcastDims(inputs) != grp.dims) {
      ir::Tensor* carrier = nullptr;
      for (ir::Node* n : grp.members)
        for (ir::Tensor* t : n->inputs())
          if (t && isZeros(t) && t->producer()->input(0) && t->producer()->input(0)->info().dims() == grp.dims) {
            ir::Tensor* c = t->producer()->input(0);
            // Read from before the group, like every other input (no cycle).
            if (!c->producer() || pos_[c->producer()] < grp.firstPos) carrier = c;
          }
      if (!carrier) return false;
      addInput(carrier);
      if (broadcastDims(inputs) != grp.dims) return false;
    }
    if (inputs.size() > kMaxInputs) return false;
    prog.numInputs = static_cast<int>(inputs.size());
    auto emit = [&](Code c, int a, int b, int cc, float imm) {
      prog.instrs.push_back({c, a, b, cc, imm});
      return prog.numInputs + static_cast<int>(prog.instrs.size()) - 1;
    };
    auto operand = [&](ir::Tensor* t) {
      auto it = reg.find(t);
      if (it != reg.end()) return it->second;
      auto v = isZeros(t) ? std::optional<double>(0.0) : scalarValue(t);
      GRAFT_ASSERT(v, "fuse-elementwise: operand '{}' has no register", t->id());
      int r = emit(Code::Const, -1, -1, -1, static_cast<float>(*v));
      reg[t] = r;
      return r;
    };
    for (ir::Node* n : grp.members) {
      auto m = mapNode(*n);
      int ops[3] = {-1, -1, -1};
      for (size_t k = 0; k < m->operands.size(); ++k) ops[k] = operand(n->input(m->operands[k]));
      int r = emit(m->codes[0], ops[0], ops[1], ops[2], m->imm);
      if (m->codes.size() > 1) r = emit(m->codes[1], r, operand(n->input(m->extra[0])), -1, 0.0f);
      reg[n->output(0)] = r;
    }
    std::vector<ir::Tensor*> outputs;
    for (ir::Node* n : grp.members) {
      ir::Tensor* t = n->output(0);
      if (!usedOutside(t)) continue;
      if (t->info().dataType() != grp.dtype) return false;  // a BOOL result escapes: leave the group alone
      outputs.push_back(t);
      prog.outputs.push_back(reg.at(t));
    }
    if (outputs.empty()) return false;
    // Control dependencies of the members move to the fused node.
    std::vector<ir::Node*> after, before;
    for (ir::Node* n : grp.members)
      for (ir::Node* a : n->runsAfter())
        if (!members.count(a)) after.push_back(a);
    for (ir::Node* x : g.nodes())
      if (!members.count(x))
        for (ir::Node* a : x->runsAfter())
          if (members.count(a)) before.push_back(x);
    std::vector<std::string> outIds;
    for (ir::Tensor* t : outputs) outIds.push_back(t->id());
    int64_t firstId = grp.members.front()->id();
    for (ir::Node* n : grp.members) firstId = std::min(firstId, n->id());
    for (ir::Node* n : grp.members) g.removeNode(n);
    for (ir::Node* n : grp.members) groupOf_.erase(n);
    ir::Attributes attrs;
    prog.toAttributes(attrs);
    if (!g.otherOpsets.count(ops::kGraftDomain)) g.otherOpsets[ops::kGraftDomain] = 1;
    ir::Node* f =
        g.addNode("FusedElementwise", ops::kGraftDomain, inputs, outIds, std::move(attrs), "fused_" + outIds.back());
    g.reuseNodeId(f, firstId);  // run where the chain began
    for (ir::Node* a : after) f->addRunsAfter(a);
    for (ir::Node* b : before) b->addRunsAfter(f);
    // Member outputs only read inside the group are gone.
    for (ir::Tensor* t : g.tensors())
      if (!t->producer() && t->uses().empty() && !t->isGraphOutput() && t->kind() == ir::TensorKind::Activation)
        g.removeTensor(t);
    return true;
  }

  struct PendingPredicate {
    DataType dtype;  // what it compares (BOOL for logic: joins a group of any float type)
    size_t instructions;
  };

  std::unordered_map<ir::Node*, int> pos_;
  std::unordered_map<ir::Node*, int> groupOf_;
  std::unordered_map<ir::Node*, PendingPredicate> pending_;
  std::vector<Group> groups_;
};

GRAFT_REGISTER_PASS("fuse-elementwise", FuseElementwise);

}  // namespace
}  // namespace graft::passes
