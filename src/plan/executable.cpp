#include "plan/executable.hpp"

#include <algorithm>
#include <cstdlib>
#include <map>
#include <set>
#include <unordered_map>

#include "ops/registry.hpp"
#include "support/check.hpp"
#include "support/logging.hpp"

namespace graft::plan {
namespace {

class SubgraphRunnerImpl : public ops::SubgraphRunner {
 public:
  SubgraphRunnerImpl(std::shared_ptr<Executable> exe, std::vector<int> outerToImplicit)
      : exe_(std::move(exe)), outerToImplicit_(std::move(outerToImplicit)), outer_(outerToImplicit_.size()) {}
  std::vector<ops::Value> run(std::vector<ops::Value> inputs, const ops::KernelContext& owner) override {
    for (size_t k = 0; k < outer_.size(); ++k) outer_[k] = &owner.implicitInput(outerToImplicit_[k]);
    return exe_->run(std::move(inputs), outer_);
  }
  size_t numInputs() const override { return exe_->inputIds().size(); }
  size_t numOutputs() const override { return exe_->outputIds().size(); }

 private:
  std::shared_ptr<Executable> exe_;
  std::vector<int> outerToImplicit_;
  std::vector<const ops::Value*> outer_;  // reused by every run: bodies run once per iteration
};

class PlanCompileContext : public ops::CompileContext {
 public:
  PlanCompileContext(const ir::Node& n, KernelProvider& provider, support::ThreadPool& pool,
                     std::vector<std::shared_ptr<Executable>>& children, const CompileOptions& options)
      : node_(n), provider_(provider), pool_(pool), children_(children), options_(options) {}
  const ir::Node& node() const override { return node_; }
  const NDArray* constantInput(size_t i) const override {
    const ir::Tensor* t = node_.input(i);
    return t && t->kind() == ir::TensorKind::Constant ? t->data() : nullptr;
  }
  std::shared_ptr<ops::SubgraphRunner> compileSubgraph(const ir::Graph& g) override {
    std::shared_ptr<Executable> exe = compile(g, provider_, pool_, options_);
    std::vector<int> map;
    for (const std::string& id : exe->outerIds()) {
      const auto& imp = node_.implicitInputs();
      auto it = std::find_if(imp.begin(), imp.end(), [&](const ir::Tensor* t) { return t->id() == id; });
      GRAFT_ASSERT(it != imp.end(), "{}: subgraph reads '{}', which is not an implicit input", node_.describe(), id);
      map.push_back(static_cast<int>(it - imp.begin()));
    }
    children_.push_back(exe);
    return std::make_shared<SubgraphRunnerImpl>(std::move(exe), std::move(map));
  }
  support::ThreadPool& pool() override { return pool_; }

 private:
  const ir::Node& node_;
  KernelProvider& provider_;
  support::ThreadPool& pool_;
  std::vector<std::shared_ptr<Executable>>& children_;
  const CompileOptions& options_;
};

std::string withNode(const ir::Node* n, const std::string& msg) {
  if (!n || msg.find(n->describe()) != std::string::npos) return msg;
  return n->describe() + ": " + msg;
}

}  // namespace

std::unique_ptr<Executable> compile(const ir::Graph& g, KernelProvider& provider, support::ThreadPool& pool,
                                    const CompileOptions& options) {
  auto exe = std::make_unique<Executable>();
  exe->pool_ = &pool;
  std::unordered_map<const ir::Tensor*, int> slot;
  auto slotOf = [&](const ir::Tensor* t) {
    auto it = slot.find(t);
    if (it != slot.end()) return it->second;
    int s = static_cast<int>(slot.size());
    slot.emplace(t, s);
    return s;
  };
  for (const ir::Tensor* t : g.inputs()) {
    exe->inputSlots_.push_back(slotOf(t));
    exe->inputIds_.push_back(t->id());
  }
  for (const ir::Tensor* t : g.tensors()) {
    if (t->kind() == ir::TensorKind::OuterScope) {
      exe->outerSlots_.push_back(slotOf(t));
      exe->outerIds_.push_back(t->id());
    }
  }
  std::vector<std::pair<int, ops::Value>> persistent;
  for (const ir::Tensor* t : g.tensors()) {
    if ((t->kind() == ir::TensorKind::Variable || t->kind() == ir::TensorKind::Constant) && t->data()) {
      int s = slotOf(t);
      persistent.emplace_back(s, ops::Value::fromTensor(*t->data()));
      exe->persistentSlots_[t->id()] = s;
    }
  }
  std::vector<const ir::Node*> order;
  for (const ir::Node* n : g.schedule()) order.push_back(n);
  for (const ir::Node* n : order) {
    Step st;
    st.node = n;
    for (const ir::Tensor* t : n->inputs()) st.in.push_back(t ? slotOf(t) : -1);
    for (const ir::Tensor* t : n->outputs()) st.out.push_back(t ? slotOf(t) : -1);
    for (const ir::Tensor* t : n->implicitInputs()) st.implicit.push_back(slotOf(t));
    PlanCompileContext cc(*n, provider, pool, exe->children_, options);
    try {
      KernelChoice choice;
      st.fn = provider.chooseKernel(cc, choice);
      st.kernel = choice.kernel;
      st.implementation = choice.implementation;
      st.kernelLabel = st.implementation.empty() ? st.kernel : st.kernel + " (" + st.implementation + ")";
      st.profileType = n->type();
      if (n->type() == "ChannelBlocked" && n->domain() == ops::kGraftDomain)
        st.profileType += "(" + n->attrString("op", "") + ")";
    } catch (const Error& e) {
      throw Error(withNode(n, e.what()));
    }
    exe->steps_.push_back(std::move(st));
  }
  for (const ir::Tensor* t : g.outputs()) {
    exe->outputSlots_.push_back(slotOf(t));
    exe->outputIds_.push_back(t->id());
  }
  // Liveness: release each transient slot after its last reader.
  std::set<int> keep(exe->outputSlots_.begin(), exe->outputSlots_.end());
  for (const auto& [s, v] : persistent) keep.insert(s);
  for (int s : exe->outerSlots_) keep.insert(s);
  std::unordered_map<int, size_t> lastUse;
  for (size_t i = 0; i < exe->steps_.size(); ++i) {
    const Step& st = exe->steps_[i];
    for (int s : st.in)
      if (s >= 0) lastUse[s] = i;
    for (int s : st.implicit) lastUse[s] = i;
    for (int s : st.out)
      if (s >= 0 && !lastUse.count(s)) lastUse[s] = i;  // produced but never read
  }
  for (const auto& [s, i] : lastUse)
    if (!keep.count(s)) exe->steps_[i].release.push_back(s);
  for (int s : exe->outputSlots_) {
    bool p = false;
    for (const auto& [ps, v] : persistent) p |= ps == s;
    exe->outputPersistent_.push_back(p);
  }
  exe->slots_.resize(slot.size());
  for (auto& [s, v] : persistent) exe->slots_[s] = std::move(v);

  exe->region_.assign(slot.size(), {0, 0});
  for (Step& st : exe->steps_) {
    st.planned.assign(st.out.size(), ops::PlannedOutput{});
    st.plannedOffset.assign(st.out.size(), -1);
  }
  if (options.planMemory) {
    MemoryPlanOptions mo;
    mo.inplace = options.inplace;
    exe->memory_ = planMemory(g, order, mo);
    if (options.verifyPlan) exe->memory_.verify();
    for (Step& st : exe->steps_) {
      for (size_t k = 0; k < st.out.size(); ++k) {
        const ir::Tensor* t = st.node->output(k);
        const MemoryEntry* e = t ? exe->memory_.find(t) : nullptr;
        if (!e || e->buffer < 0) continue;
        const Buffer& b = exe->memory_.buffers[e->buffer];
        exe->region_[st.out[k]] = {b.offset, b.offset + static_cast<int64_t>(b.bytes)};
        if (e->placement == Placement::View || !e->reason.empty()) continue;  // views are set, not allocated
        st.plannedOffset[k] = b.offset;
        st.planned[k].dtype = t->info().dataType();
        st.planned[k].shape = t->info().shape();
        st.planned[k].inplace = e->placement == Placement::InPlace;
      }
    }
    exe->placeGradientsInAccumulators();
  }
  return exe;
}

void Executable::placeGradientsInAccumulators() {
  // An overwriting Accumulate (replication without gradient accumulation: acc = g) whose gradient
  // is read by nothing else: the op computing the gradient writes it straight into the
  // accumulator (its planned output region is the accumulator's buffer), and the Accumulate, seeing
  // one buffer, copies nothing. A gradient MatMul's output is a weight's size: this saves writing
  // it twice and reading it once per step. Identity chains (autodiff's Gradient___<w>) are views.
  std::unordered_map<const ir::Node*, Step*> stepOf;
  for (Step& st : steps_) stepOf[st.node] = &st;
  for (Step& st : steps_) {
    const ir::Node& n = *st.node;
    if (n.type() != "Accumulate" || n.domain() != ops::kGraftDomain || n.attrInt("overwrite", 0) == 0) continue;
    if (n.numInputs() < 2 || !n.input(0) || !n.input(1) || !n.input(0)->data()) continue;
    const NDArray& acc = *n.input(0)->data();
    const ir::Tensor* t = n.input(1);
    auto onlyReadOnce = [](const ir::Tensor* x) { return x->uses().size() == 1 && !x->isGraphOutput(); };
    while (onlyReadOnce(t) && t->producer() && t->producer()->type() == "Identity" && t->producer()->domain().empty() &&
           t->producer()->numInputs() == 1 && t->producer()->input(0))
      t = t->producer()->input(0);
    if (!onlyReadOnce(t) || !t->producer()) continue;
    auto it = stepOf.find(t->producer());
    if (it == stepOf.end()) continue;
    Step& prod = *it->second;
    for (size_t k = 0; k < prod.out.size(); ++k) {
      if (prod.node->output(k) != t || prod.plannedOffset[k] < 0 || prod.planned[k].inplace) continue;
      if (prod.planned[k].dtype != acc.dtype() || prod.planned[k].shape != acc.shape()) continue;
      prod.plannedOffset[k] = -1;  // (its arena region stays unused)
      prod.planned[k].data = const_cast<void*>(acc.rawData());
      region_[prod.out[k]] = {0, 0};
      inAccumulators_.push_back(t->id());
      GRAFT_LOG_DEBUG("plan: {} writes its output '{}' into the accumulator of {}", prod.node->describe(), t->id(),
                      n.describe());
    }
  }
}

void Executable::allocateArena() {
  size_t bytes = std::max<size_t>(memory_.arenaBytes, 64);
  void* p = std::aligned_alloc(64, (bytes + 63) / 64 * 64);
  if (!p) throw Error(fmt::format("out of memory allocating the {}-byte activation arena", bytes));
  arena_ = std::shared_ptr<void>(p, [](void* q) { std::free(q); });
  arenaBase_ = static_cast<std::byte*>(p);
  for (Step& st : steps_)
    for (size_t k = 0; k < st.planned.size(); ++k)
      if (st.plannedOffset[k] >= 0) st.planned[k].data = arenaBase_ + st.plannedOffset[k];
}

void Executable::releaseArena() {
  arena_.reset();
  arenaBase_ = nullptr;
  for (Step& st : steps_)
    for (size_t k = 0; k < st.planned.size(); ++k)
      if (st.plannedOffset[k] >= 0) st.planned[k].data = nullptr;
}

bool Executable::adoptStep(size_t i, const Executable& other, const std::string& note) {
  if (i >= steps_.size() || i >= other.steps_.size()) return false;
  Step& st = steps_[i];
  const Step& o = other.steps_[i];
  if (st.node != o.node || st.kernel != o.kernel || st.implementation != o.implementation || !o.fn) return false;
  st.fn = o.fn;
  st.pool = o.pool ? o.pool : other.pool_;
  st.kernelLabel = o.kernelLabel + note;
  return true;
}

void Executable::keepOutOfArena(ops::Value& v, int slot) const {
  const std::byte* lo = arenaBase_;
  const std::byte* hi = arenaBase_ + memory_.arenaBytes;
  auto inArena = [&](const NDArray& a) {
    const auto* p = static_cast<const std::byte*>(a.rawData());
    return p && p >= lo && p < hi;
  };
  if (v.isTensor()) {
    if (!inArena(v.tensor)) return;
    const auto* p = static_cast<const std::byte*>(v.tensor.rawData());
    auto [first, last] = region_[slot];
    if (p >= lo + first && p + v.tensor.nbytes() <= lo + last) return;
    // A kernel returned a view the plan does not know about: its buffer may be reused while the
    // view lives, so the value moves to the heap.
    v.tensor = v.tensor.clone();
  } else if (v.isSequence()) {
    bool any = false;
    for (const NDArray& a : *v.sequence) any |= inArena(a);
    if (!any) return;
    std::vector<NDArray> copy;
    for (const NDArray& a : *v.sequence) copy.push_back(inArena(a) ? a.clone() : a);
    v = ops::Value::fromSequence(std::move(copy));
  }
}

ops::Value* Executable::persistent(const std::string& id) {
  auto it = persistentSlots_.find(id);
  return it == persistentSlots_.end() ? nullptr : &slots_[it->second];
}

std::vector<ops::Value> Executable::run(std::vector<ops::Value> inputs, const std::vector<const ops::Value*>& outer) {
  GRAFT_ASSERT(!running_, "an executable was re-entered");
  GRAFT_ASSERT(inputs.size() == inputSlots_.size(), "got {} inputs for {} graph inputs", inputs.size(), inputSlots_.size());
  GRAFT_ASSERT(outer.size() == outerSlots_.size(), "got {} outer values for {}", outer.size(), outerSlots_.size());
  running_ = true;
  struct Reset {
    bool& flag;
    ~Reset() { flag = false; }
  } reset{running_};
  for (size_t i = 0; i < inputs.size(); ++i) slots_[inputSlots_[i]] = std::move(inputs[i]);
  for (size_t i = 0; i < outer.size(); ++i) slots_[outerSlots_[i]] = *outer[i];
  if (!arena_ && memory_.arenaBytes > 0) allocateArena();
  if (stepTiming_) stepSeconds_.assign(steps_.size(), 0.0);
  for (size_t i = 0; i < steps_.size(); ++i) {
    Step& st = steps_[i];
    ops::KernelContext kc(slots_.data(), st.in.data(), st.in.size(), st.out.data(), st.out.size(), st.implicit.data(),
                          st.implicit.size(), st.pool ? st.pool : pool_, st.planned.data(), &arena_);
    try {
      if (stepTiming_) {
        auto t0 = std::chrono::steady_clock::now();
        st.fn(kc);
        stepSeconds_[i] = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
      } else if (profiling_) {
        auto t0 = std::chrono::steady_clock::now();
        st.fn(kc);
        double dt = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
        auto& e = profile_[st.profileKey];
        if (e.calls == 0) {
          e.opType = st.profileType;
          if (profileByNode_) e.node = st.node->name();
        }
        e.calls++;
        e.seconds += dt;
        e.kernels.insert(st.kernelLabel);
      } else {
        st.fn(kc);
      }
    } catch (const InternalError& e) {
      throw InternalError(withNode(st.node, e.what()));
    } catch (const Error& e) {
      throw Error(withNode(st.node, e.what()));
    } catch (const std::bad_alloc&) {
      throw Error(withNode(st.node, "out of memory"));
    } catch (const std::exception& e) {
      throw InternalError(withNode(st.node, e.what()));
    }
    if (arenaBase_)
      for (int s : st.out)
        if (s >= 0) keepOutOfArena(slots_[s], s);
    for (int s : st.release) slots_[s] = ops::Value{};
    if (afterNode_) afterNode_(*st.node);
  }
  std::vector<ops::Value> out;
  out.reserve(outputSlots_.size());
  for (int s : outputSlots_) out.push_back(slots_[s]);
  // Outputs that are not persistent are handed over, not kept.
  for (size_t i = 0; i < outputSlots_.size(); ++i)
    if (!outputPersistent_[i]) slots_[outputSlots_[i]] = ops::Value{};
  for (int s : inputSlots_) slots_[s] = ops::Value{};
  for (int s : outerSlots_) slots_[s] = ops::Value{};
  return out;
}

void Executable::setProfiling(bool on, bool byNode) {
  profiling_ = on;
  profileByNode_ = byNode;
  for (Step& st : steps_) st.profileKey = byNode ? st.profileType + '\n' + st.node->name() : st.profileType;
  for (const auto& c : children_) c->setProfiling(on, byNode);
}

void Executable::collectProfile(std::unordered_map<std::string, ProfileEntry>& into) const {
  for (const auto& [k, e] : profile_) {
    ProfileEntry& d = into[k];
    d.opType = e.opType;
    d.node = e.node;
    d.calls += e.calls;
    d.seconds += e.seconds;
    d.kernels.insert(e.kernels.begin(), e.kernels.end());
  }
  for (const auto& c : children_) c->collectProfile(into);
}

std::vector<StepKernel> Executable::stepKernels() const {
  std::vector<StepKernel> out;
  for (const Step& st : steps_)
    out.push_back({st.node ? st.node->describe() : "", st.node ? st.node->type() : "", st.kernel, st.implementation});
  return out;
}

std::vector<ProfileEntry> Executable::profile() const {
  std::unordered_map<std::string, ProfileEntry> all;
  collectProfile(all);
  std::vector<ProfileEntry> out;
  out.reserve(all.size());
  for (const auto& [k, e] : all) out.push_back(e);
  std::sort(out.begin(), out.end(), [](const ProfileEntry& a, const ProfileEntry& b) { return a.seconds > b.seconds; });
  return out;
}

std::vector<const ir::Node*> unsupportedNodes(const ir::Graph& g, const KernelProvider& provider) {
  std::vector<const ir::Node*> out;
  for (const ir::Node* n : g.nodes()) {
    if (!provider.supports(*n)) out.push_back(n);
    for (const ir::Graph* sub : n->subgraphs()) {
      auto inner = unsupportedNodes(*sub, provider);
      out.insert(out.end(), inner.begin(), inner.end());
    }
  }
  return out;
}

std::string unsupportedOpsMessage(const std::vector<const ir::Node*>& nodes) {
  std::map<std::string, std::vector<std::string>> byOp;
  std::map<std::string, std::string> versionOf;
  for (const ir::Node* n : nodes) {
    std::string op = n->domain().empty() ? n->type() : n->domain() + "::" + n->type();
    // The domain's opset version as the model imports it (a subgraph's node: the root graph's).
    const ir::Graph* root = &n->graph();
    while (root->parent()) root = root->parent();
    auto v = root->otherOpsets.find(n->domain());
    if (!n->domain().empty())
      versionOf[op] = v != root->otherOpsets.end()
                          ? fmt::format(" of domain '{}', opset version {}", n->domain(), v->second)
                          : fmt::format(" of domain '{}', of which the model imports no opset", n->domain());
    std::string name = !n->name().empty() ? n->name() : (n->output(0) ? "output " + n->output(0)->id() : "#" + std::to_string(n->id()));
    byOp[op].push_back("'" + name + "'");
  }
  std::vector<std::string> parts;
  for (auto& [op, names] : byOp) {
    std::string shown = names.size() > 3 ? fmt::format("{}, ...", fmt::join(names.begin(), names.begin() + 3, ", "))
                                         : fmt::format("{}", fmt::join(names, ", "));
    parts.push_back(
        fmt::format("{} ({} node{}: {}){}", op, names.size(), names.size() == 1 ? "" : "s", shown, versionOf[op]));
  }
  return fmt::format("{} op type{} of this model {} not supported by graft: {}", byOp.size(), byOp.size() == 1 ? "" : "s",
                     byOp.size() == 1 ? "is" : "are", fmt::join(parts, "; "));
}

}  // namespace graft::plan
