#include "plan/memory.hpp"

#include <algorithm>
#include <map>
#include <numeric>

#include "ops/registry.hpp"
#include "support/check.hpp"

namespace graft::plan {

std::string_view placementName(Placement p) {
  switch (p) {
    case Placement::Arena: return "arena";
    case Placement::View: return "view";
    case Placement::InPlace: return "in-place";
    case Placement::Heap: return "heap";
  }
  return "?";
}

namespace {

size_t alignUp(size_t n, size_t a) { return (n + a - 1) / a * a; }

// Why a value cannot be the root of an arena buffer ("" when it can).
std::string heapReason(const ir::Tensor& t) {
  const ir::ValueType& vt = t.type();
  if (!vt.isTensor()) return "not a tensor";
  DataType dt = vt.info.dataType();
  if (dt == DataType::Undefined) return "type not known";
  if (dt == DataType::String) return "strings";
  if (!vt.info.isStatic()) return "shape known at run time";
  if (t.isGraphOutput()) return "graph output";
  if (vt.info.nbytes() == 0) return "empty";
  return "";
}

int findRoot(std::vector<int>& parent, int e) {
  while (parent[e] != e) {
    parent[e] = parent[parent[e]];
    e = parent[e];
  }
  return e;
}

// Best-fit placement of regions in one growing arena.
class Arena {
 public:
  int64_t allocate(size_t bytes) {
    auto best = holes_.end();
    for (auto it = holes_.begin(); it != holes_.end(); ++it)
      if (it->second >= bytes && (best == holes_.end() || it->second < best->second)) best = it;
    if (best != holes_.end()) {
      int64_t off = best->first;
      size_t left = best->second - bytes;
      holes_.erase(best);
      if (left) holes_[off + static_cast<int64_t>(bytes)] = left;
      return off;
    }
    // No hole fits: grow the arena, starting inside a hole that ends at its end.
    if (!holes_.empty()) {
      auto last = std::prev(holes_.end());
      if (last->first + static_cast<int64_t>(last->second) == end_) {
        int64_t off = last->first;
        holes_.erase(last);
        end_ = off + static_cast<int64_t>(bytes);
        return off;
      }
    }
    int64_t off = end_;
    end_ += static_cast<int64_t>(bytes);
    return off;
  }
  void release(int64_t off, size_t bytes) {
    auto [it, fresh] = holes_.emplace(off, bytes);
    GRAFT_ASSERT(fresh, "region at {} released twice", off);
    auto next = std::next(it);
    if (next != holes_.end() && it->first + static_cast<int64_t>(it->second) == next->first) {
      it->second += next->second;
      holes_.erase(next);
    }
    if (it != holes_.begin()) {
      auto prev = std::prev(it);
      if (prev->first + static_cast<int64_t>(prev->second) == it->first) {
        prev->second += it->second;
        holes_.erase(it);
      }
    }
  }
  size_t size() const { return static_cast<size_t>(end_); }

 private:
  std::map<int64_t, size_t> holes_;
  int64_t end_ = 0;
};

std::string humanBytes(double b) {
  const char* units[] = {"B", "KiB", "MiB", "GiB", "TiB"};
  int u = 0;
  while (b >= 1024 && u < 4) b /= 1024, ++u;
  return u == 0 ? fmt::format("{:.0f} {}", b, units[u]) : fmt::format("{:.1f} {}", b, units[u]);
}

}  // namespace

MemoryPlan planMemory(const ir::Graph& g, const std::vector<const ir::Node*>& schedule, const MemoryPlanOptions& options) {
  GRAFT_ASSERT(options.alignment > 0 && (options.alignment & (options.alignment - 1)) == 0, "alignment {} is not a power of two",
               options.alignment);
  MemoryPlan plan;
  std::unordered_map<const ir::Node*, int> stepOf;
  for (size_t i = 0; i < schedule.size(); ++i) stepOf[schedule[i]] = static_cast<int>(i);
  int end = static_cast<int>(schedule.size());

  // Entries and their live ranges.
  for (size_t i = 0; i < schedule.size(); ++i) {
    for (const ir::Tensor* t : schedule[i]->outputs()) {
      if (!t) continue;
      MemoryEntry e;
      e.tensor = t;
      e.firstStep = e.lastStep = static_cast<int>(i);
      for (const ir::Use& u : t->uses()) {
        auto it = stepOf.find(u.node);
        if (it != stepOf.end()) e.lastStep = std::max(e.lastStep, it->second);
      }
      if (t->isGraphOutput()) e.lastStep = end;
      e.reason = heapReason(*t);
      if (e.reason.empty()) e.bytes = t->info().nbytes();
      plan.entryOf[t] = static_cast<int>(plan.entries.size());
      plan.entries.push_back(std::move(e));
    }
  }
  size_t n = plan.entries.size();
  std::vector<int> parent(n);
  std::iota(parent.begin(), parent.end(), 0);
  auto traitsOf = [](const ir::Node& node) -> ops::OpTraits {
    const ops::OpDef* d = ops::Registry::instance().find(node);
    return d ? d->traits : ops::OpTraits{};
  };
  auto entryIndex = [&](const ir::Tensor* t) {
    auto it = plan.entryOf.find(t);
    return it == plan.entryOf.end() ? -1 : it->second;
  };

  // Views join their input's buffer, whatever their own type: at run time they point into it.
  for (const ir::Node* node : schedule) {
    ops::OpTraits tr = traitsOf(*node);
    if (tr.viewOfInput < 0 || !node->output(0)) continue;
    int src = entryIndex(node->input(tr.viewOfInput));
    int e = entryIndex(node->output(0));
    if (src < 0) {
      // A view of a graph input, weight or constant: no buffer of its own.
      if (node->input(tr.viewOfInput) && plan.entries[e].reason.empty()) plan.entries[e].reason = "view of an input or weight";
      continue;
    }
    parent[findRoot(parent, e)] = findRoot(parent, src);
    plan.entries[e].placement = Placement::View;
    plan.entries[e].aliasOf = node->input(tr.viewOfInput);
  }

  // A buffer is planned when its root has a static size and no member escapes as a graph output.
  std::vector<bool> planned(n, false);
  std::vector<int> groupLast(n, 0);
  for (size_t e = 0; e < n; ++e) {
    int r = findRoot(parent, static_cast<int>(e));
    if (static_cast<int>(e) == r) planned[r] = plan.entries[r].reason.empty();
  }
  for (size_t e = 0; e < n; ++e) {
    int r = findRoot(parent, static_cast<int>(e));
    if (plan.entries[e].tensor->isGraphOutput()) planned[r] = false;
    groupLast[r] = std::max(groupLast[r], plan.entries[e].lastStep);
  }

  // In place: the output takes over an input's buffer when nothing reads that buffer later.
  if (options.inplace) {
    for (size_t i = 0; i < schedule.size(); ++i) {
      const ir::Node* node = schedule[i];
      ops::OpTraits tr = traitsOf(*node);
      if (tr.inplaceInput < 0 || !node->output(0)) continue;
      const ir::Tensor* x = node->input(tr.inplaceInput);
      int src = entryIndex(x), e = entryIndex(node->output(0));
      if (src < 0 || e < 0) continue;
      int rs = findRoot(parent, src), re = findRoot(parent, e);
      if (rs == re || re != e || !planned[rs] || !planned[re] || groupLast[rs] != static_cast<int>(i)) continue;
      const MemoryEntry& in = plan.entries[src];
      const MemoryEntry& out = plan.entries[e];
      if (!in.reason.empty() || in.bytes != out.bytes || in.bytes != plan.entries[rs].bytes ||
          x->info().dataType() != out.tensor->info().dataType())
        continue;
      bool implicit = std::find(node->implicitInputs().begin(), node->implicitInputs().end(), x) != node->implicitInputs().end();
      if (implicit) continue;
      parent[re] = rs;
      groupLast[rs] = std::max(groupLast[rs], groupLast[re]);
      plan.entries[e].placement = Placement::InPlace;
      plan.entries[e].aliasOf = x;
    }
  }

  // Buffers, and the placement of every member.
  std::vector<int> bufferOfRoot(n, -1);
  for (size_t e = 0; e < n; ++e) {
    int r = findRoot(parent, static_cast<int>(e));
    if (!planned[r]) continue;
    if (bufferOfRoot[r] < 0) {
      Buffer b;
      b.root = r;
      b.firstStep = plan.entries[r].firstStep;
      b.lastStep = groupLast[r];
      b.bytes = alignUp(plan.entries[r].bytes, options.alignment);
      bufferOfRoot[r] = static_cast<int>(plan.buffers.size());
      plan.buffers.push_back(b);
    }
    plan.entries[e].buffer = bufferOfRoot[r];
    if (static_cast<int>(e) == r) plan.entries[e].placement = Placement::Arena;
  }
  for (size_t e = 0; e < n; ++e) {
    MemoryEntry& m = plan.entries[e];
    if (m.buffer >= 0) continue;
    m.placement = Placement::Heap;
    int r = findRoot(parent, static_cast<int>(e));
    if (!m.reason.empty()) continue;
    m.reason = r != static_cast<int>(e) && !plan.entries[r].reason.empty() ? "view of a heap value"
                                                                           : "shares its buffer with a graph output";
  }

  // Offsets: best fit, walking the schedule; a step's outputs are placed before its dying
  // inputs are released, so the two never overlap (except in place, by design).
  std::vector<std::vector<int>> startAt(schedule.size() + 1), endAt(schedule.size() + 1);
  for (size_t b = 0; b < plan.buffers.size(); ++b) {
    startAt[plan.buffers[b].firstStep].push_back(static_cast<int>(b));
    endAt[std::min<int>(plan.buffers[b].lastStep, end)].push_back(static_cast<int>(b));
  }
  Arena arena;
  for (size_t s = 0; s <= schedule.size(); ++s) {
    for (int b : startAt[s]) {
      plan.buffers[b].offset = arena.allocate(plan.buffers[b].bytes);
      plan.unsharedBytes += plan.buffers[b].bytes;
    }
    for (int b : endAt[s]) arena.release(plan.buffers[b].offset, plan.buffers[b].bytes);
  }
  plan.arenaBytes = arena.size();
  return plan;
}

void MemoryPlan::verify() const {
  for (size_t a = 0; a < buffers.size(); ++a) {
    const Buffer& x = buffers[a];
    GRAFT_ASSERT(x.offset >= 0 && static_cast<size_t>(x.offset) + x.bytes <= arenaBytes, "buffer of '{}' leaves the arena",
                 entries[x.root].tensor->id());
    for (size_t b = a + 1; b < buffers.size(); ++b) {
      const Buffer& y = buffers[b];
      bool together = x.firstStep <= y.lastStep && y.firstStep <= x.lastStep;
      bool overlap = x.offset < y.offset + static_cast<int64_t>(y.bytes) && y.offset < x.offset + static_cast<int64_t>(x.bytes);
      GRAFT_ASSERT(!(together && overlap), "buffers of '{}' (steps {}..{}, bytes {}..{}) and '{}' (steps {}..{}, bytes {}..{}) overlap",
                   entries[x.root].tensor->id(), x.firstStep, x.lastStep, x.offset, x.offset + x.bytes,
                   entries[y.root].tensor->id(), y.firstStep, y.lastStep, y.offset, y.offset + y.bytes);
    }
  }
}

std::string MemoryPlan::summary(bool perValue) const {
  size_t counts[4] = {0, 0, 0, 0};
  size_t heapKnown = 0;
  std::map<std::string, size_t> reasons;
  for (const MemoryEntry& e : entries) {
    ++counts[static_cast<int>(e.placement)];
    if (e.placement == Placement::Heap) {
      ++reasons[e.reason];
      if (e.tensor->type().isTensor() && e.tensor->info().isStatic() && e.tensor->info().dataType() != DataType::Undefined &&
          e.tensor->info().dataType() != DataType::String)
        heapKnown += e.tensor->info().nbytes();
    }
  }
  std::string out = fmt::format("arena       {} peak ({} bytes) for {} buffers; {} without reuse\n", humanBytes(arenaBytes),
                                arenaBytes, buffers.size(), humanBytes(unsharedBytes));
  out += fmt::format("values      {} in the arena, {} views, {} in place, {} on the heap", counts[0], counts[1], counts[2],
                     counts[3]);
  if (heapKnown) out += fmt::format(" ({} of them known statically)", humanBytes(heapKnown));
  out += "\n";
  for (const auto& [why, c] : reasons) out += fmt::format("  heap: {} {}\n", c, why);
  if (!perValue) return out;
  size_t w = 6;
  for (const MemoryEntry& e : entries) w = std::max(w, std::min<size_t>(e.tensor->id().size(), 48));
  out += fmt::format("{:>5}  {:<{}}  {:<8}  {:>12}  {:>12}  {:>9}  {}\n", "step", "value", w, "where", "bytes", "offset", "live",
                     "note");
  for (const MemoryEntry& e : entries) {
    std::string off = e.buffer >= 0 ? std::to_string(buffers[e.buffer].offset) : "-";
    std::string note = e.placement == Placement::Heap ? e.reason : e.aliasOf ? "of " + e.aliasOf->id() : "";
    std::string live = fmt::format("{}..{}", e.firstStep, e.lastStep);
    out += fmt::format("{:>5}  {:<{}}  {:<8}  {:>12}  {:>12}  {:>9}  {}\n", e.firstStep, e.tensor->id(), w,
                       placementName(e.placement), e.bytes, off, live, note);
  }
  return out;
}

}  // namespace graft::plan
