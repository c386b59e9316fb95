#include "passes/pipeline_stages.hpp"

#include <algorithm>
#include <map>
#include <set>

#include "ops/cost.hpp"
#include "ops/registry.hpp"
#include "support/check.hpp"

namespace graft::passes {
namespace {

double bytesOf(const ir::Tensor* t) {
  if (!t || !t->type().isTensor() || !t->info().isStatic()) return 0;
  return static_cast<double>(t->info().nbytes());
}

// Constant ops carry no work and no placement: PopART turns them into tensors.
bool needsPlacement(const ir::Node& n) { return !(n.domain().empty() && n.type() == "Constant"); }

std::string nodeList(const std::vector<const ir::Node*>& nodes) {
  std::vector<std::string> s;
  for (size_t i = 0; i < nodes.size() && i < 5; ++i) s.push_back(nodes[i]->describe());
  if (nodes.size() > 5) s.push_back(fmt::format("... ({} in all)", nodes.size()));
  return fmt::format("{}", fmt::join(s, ", "));
}

// The forward stage of an annotated node: its pipeline stage, or its virtual graph when the
// model sets no stages (PopART's default).
std::optional<int64_t> stageOf(const ir::Node& n, bool anyStage) {
  if (anyStage) return n.pipelineStage;
  return n.virtualGraph;
}

}  // namespace

NodeCost estimateCost(const ir::Node& n) {
  NodeCost c;
  for (const ir::Tensor* t : n.inputs()) c.bytes += bytesOf(t);
  for (const ir::Tensor* t : n.outputs()) c.bytes += bytesOf(t);
  c.flops = ops::estimateFlops(n);
  return c;
}

void checkStageAnnotations(const ir::Graph& g, const StageConfig& c) {
  if (c.mode == VirtualGraphMode::Off) {
    GRAFT_CHECK(!c.pipelining,
                "SessionOptions.enablePipelining needs SessionOptions.virtualGraphMode Manual or Auto "
                "(it is Off): pipelining runs the stages on virtual devices");
    return;
  }
  GRAFT_CHECK(c.numVirtualDevices >= 1, "the device has no virtual devices");
  if (c.mode == VirtualGraphMode::Auto) {
    if (c.training && c.pipelining)
      GRAFT_CHECK(c.accumulationFactor >= c.numVirtualDevices,
                  "pipelined training over {} stages needs SessionOptions.accumulationFactor >= {} (with "
                  "enableGradientAccumulation), got {}: each weight update must see at least one micro-batch per stage",
                  c.numVirtualDevices, c.numVirtualDevices, c.accumulationFactor);
    return;
  }
  // Manual mode.
  std::vector<const ir::Node*> unplaced, staged, unstaged;
  for (const ir::Node* n : g.nodes()) {
    if (!needsPlacement(*n)) continue;
    if (!n->virtualGraph) unplaced.push_back(n);
    (n->pipelineStage ? staged : unstaged).push_back(n);
    if (n->virtualGraph)
      GRAFT_CHECK(
          *n->virtualGraph >= 0 && *n->virtualGraph < c.numVirtualDevices,
          "{} is on virtual graph {} (__ipu_number), but the device has {} virtual device{} (ids 0 to {}); create "
          "the device with more, e.g. DeviceManager.createCpuDevice(numVirtualDevices={})",
          n->describe(), *n->virtualGraph, c.numVirtualDevices, c.numVirtualDevices == 1 ? "" : "s",
          c.numVirtualDevices - 1, *n->virtualGraph + 1);
  }
  GRAFT_CHECK(unplaced.empty(),
              "virtualGraphMode is Manual but {} op{} ha{} no virtual graph (__ipu_number): {}; place "
              "every op, e.g. with `with builder.virtualGraph(0):`",
              unplaced.size(), unplaced.size() == 1 ? "" : "s", unplaced.size() == 1 ? "s" : "ve", nodeList(unplaced));
  if (!c.pipelining) return;
  bool anyStage = !staged.empty();
  GRAFT_CHECK(!anyStage || unstaged.empty(),
              "pipelining: {} op{} ha{} a pipeline stage (__pipeline_stage) but {} ha{} "
              "none: {}; set a stage on every op or on none (the stage then follows the virtual graph)",
              staged.size(), staged.size() == 1 ? "" : "s", staged.size() == 1 ? "s" : "ve", unstaged.size(),
              unstaged.size() == 1 ? "s" : "ve", nodeList(unstaged));
  std::map<int64_t, const ir::Node*> stageDevice;
  for (const ir::Node* n : g.nodes()) {
    if (!needsPlacement(*n)) continue;
    int64_t s = *stageOf(*n, anyStage);
    GRAFT_CHECK(s >= 0, "{} has pipeline stage {}; stages are >= 0", n->describe(), s);
    auto [it, fresh] = stageDevice.emplace(s, n);
    GRAFT_CHECK(fresh || *it->second->virtualGraph == *n->virtualGraph,
                "pipeline stage {} is on two virtual graphs: {} is on {} and {} on {}; all ops of a stage run on one "
                "virtual device",
                s, it->second->describe(), *it->second->virtualGraph, n->describe(), *n->virtualGraph);
  }
  for (const ir::Node* n : g.nodes()) {
    if (!needsPlacement(*n)) continue;
    int64_t s = *stageOf(*n, anyStage);
    std::vector<const ir::Tensor*> reads(n->inputs().begin(), n->inputs().end());
    reads.insert(reads.end(), n->implicitInputs().begin(), n->implicitInputs().end());
    for (const ir::Tensor* t : reads) {
      const ir::Node* p = t ? t->producer() : nullptr;
      if (!p || !needsPlacement(*p)) continue;
      int64_t ps = *stageOf(*p, anyStage);
      GRAFT_CHECK(ps <= s,
                  "{} in pipeline stage {} reads '{}', which {} computes in the later stage {}; a stage may read "
                  "only tensors of its own or earlier stages",
                  n->describe(), s, t->id(), p->describe(), ps);
    }
  }
  int stages = static_cast<int>(stageDevice.size());
  if (c.training)
    GRAFT_CHECK(c.accumulationFactor >= stages,
                "pipelined training over {} stages needs SessionOptions.accumulationFactor >= {} (with "
                "enableGradientAccumulation), got {}: each weight update must see at least one micro-batch per stage",
                stages, stages, c.accumulationFactor);
}

std::string autoAssignStages(ir::Graph& g, int parts) {
  GRAFT_CHECK(parts >= 1, "Auto mode needs at least 1 virtual device, got {}", parts);
  std::vector<ir::Node*> order = g.schedule();
  std::vector<double> cost;
  double total = 0;
  for (const ir::Node* n : order) {
    cost.push_back(estimateCost(*n).weight());
    total += cost.back();
  }
  // The smallest largest part: binary search on the bound, greedy cuts in schedule order.
  auto partsFor = [&](double bound) {
    int used = 1;
    double run = 0;
    for (double w : cost) {
      if (run + w > bound && run > 0) {
        ++used;
        run = 0;
      }
      run += w;
    }
    return used;
  };
  double lo = 0, hi = std::max(total, 1.0);
  for (double w : cost) lo = std::max(lo, w);
  for (int it = 0; it < 60 && hi - lo > 1e-9 * hi; ++it) {
    double mid = (lo + hi) / 2;
    (partsFor(mid) <= parts ? hi : lo) = mid;
  }
  std::vector<int> partOf(order.size());
  int part = 0;
  double run = 0;
  for (size_t i = 0; i < order.size(); ++i) {
    // Keep enough nodes for the remaining parts (every part gets one where it can).
    bool mustCut = part < parts - 1 && static_cast<int>(order.size() - i) <= parts - 1 - part;
    if (part < parts - 1 && run > 0 && (run + cost[i] > hi || mustCut)) {
      ++part;
      run = 0;
    }
    run += cost[i];
    partOf[i] = part;
  }
  std::vector<double> partCost(parts, 0);
  std::vector<int> partNodes(parts, 0);
  for (size_t i = 0; i < order.size(); ++i) {
    order[i]->virtualGraph = partOf[i];
    order[i]->pipelineStage = partOf[i];
    partCost[partOf[i]] += cost[i];
    partNodes[partOf[i]]++;
  }
  std::string out = fmt::format("Auto split of '{}' over {} virtual device{} (estimated cost: FLOPs + bytes):\n",
                                g.name(), parts, parts == 1 ? "" : "s");
  for (int p = 0; p < parts; ++p) {
    std::string first, last;
    for (size_t i = 0; i < order.size(); ++i)
      if (partOf[i] == p) {
        if (first.empty()) first = order[i]->describe();
        last = order[i]->describe();
      }
    out += fmt::format("  stage {}: {} ops, cost {:.3g} ({:.1f}%){}\n", p, partNodes[p], partCost[p],
                       total > 0 ? 100.0 * partCost[p] / total : 0.0,
                       first.empty() ? "" : fmt::format(", from {} to {}", first, last));
  }
  return out;
}

ProgramAssignment assignPrograms(const ir::Graph& g, const StageConfig& c, const ir::Tensor* seed) {
  ProgramAssignment a;
  std::vector<ir::Node*> order = g.schedule();
  std::unordered_map<const ir::Node*, size_t> pos;
  for (size_t i = 0; i < order.size(); ++i) pos[order[i]] = i;
  auto readsOf = [](const ir::Node* n) {
    std::vector<const ir::Tensor*> r;
    for (const ir::Tensor* t : n->inputs())
      if (t) r.push_back(t);
    for (const ir::Tensor* t : n->implicitInputs()) r.push_back(t);
    return r;
  };
  // Nodes without a producer among their inputs take the program of their first consumer.
  auto placeSources = [&](std::vector<int>& key) {
    for (auto it = order.rbegin(); it != order.rend(); ++it) {
      const ir::Node* n = *it;
      if (key[pos[n]] >= 0) continue;
      int best = -1;
      for (const ir::Tensor* t : n->outputs())
        if (t)
          for (const ir::Use& u : t->uses()) {
            int k = key[pos[u.node]];
            if (k >= 0 && (best < 0 || k < best)) best = k;
          }
      key[pos[n]] = std::max(best, 0);
    }
  };

  std::vector<int> prog(order.size(), -1);
  if (!c.pipelining) {
    // Sharding: a program is a run of nodes on one virtual graph; its level rises by one at every
    // move to another virtual graph, so programs of one level never read each other.
    std::vector<int> level(order.size(), -1), vg(order.size(), -1);
    for (size_t i = 0; i < order.size(); ++i) {
      const ir::Node* n = order[i];
      int best = -1, bestVg = -1;
      for (const ir::Tensor* t : readsOf(n))
        if (const ir::Node* p = t->producer(); p && level[pos[p]] >= 0 && level[pos[p]] > best) {
          best = level[pos[p]];
          bestVg = vg[pos[p]];
        }
      if (n->virtualGraph)
        vg[i] = static_cast<int>(*n->virtualGraph);
      else if (bestVg >= 0)
        vg[i] = bestVg;
      else
        continue;  // placed with its consumers below
      int lv = 0;
      for (const ir::Tensor* t : readsOf(n))
        if (const ir::Node* p = t->producer(); p && level[pos[p]] >= 0)
          lv = std::max(lv, level[pos[p]] + (vg[pos[p]] != vg[i] ? 1 : 0));
      level[i] = lv;
    }
    std::vector<int> key(order.size(), -1);
    std::map<std::pair<int, int>, int> programOf;  // (level, vg) -> key
    for (size_t i = 0; i < order.size(); ++i)
      if (level[i] >= 0) programOf.emplace(std::make_pair(level[i], vg[i]), 0);
    int k = 0;
    for (auto& [lv, idx] : programOf) idx = k++;
    for (size_t i = 0; i < order.size(); ++i)
      if (level[i] >= 0) key[i] = programOf.at({level[i], vg[i]});
    placeSources(key);
    prog = key;
    if (programOf.empty()) programOf.emplace(std::make_pair(0, 0), 0);
    for (const auto& [lv, idx] : programOf)
      a.programs.push_back(
          {lv.second, lv.first, false, fmt::format("shard {} (virtual graph {})", lv.first, lv.second)});
  } else {
    bool anyStage = false;
    for (const ir::Node* n : order) anyStage |= n->pipelineStage.has_value();
    std::map<int64_t, int> dense;  // stage id -> 0..S-1
    std::map<int64_t, int> deviceOfStage;
    for (const ir::Node* n : order)
      if (auto s = stageOf(*n, anyStage)) {
        dense.emplace(*s, 0);
        if (n->virtualGraph) deviceOfStage.emplace(*s, static_cast<int>(*n->virtualGraph));
      }
    int S = 0;
    for (auto& [s, d] : dense) d = S++;
    if (S == 0) S = 1;
    // Training: nodes downstream of the seed are the backward pass.
    std::set<const ir::Node*> backward;
    if (seed) {
      std::vector<const ir::Tensor*> stack{seed};
      std::set<const ir::Tensor*> seen;
      while (!stack.empty()) {
        const ir::Tensor* t = stack.back();
        stack.pop_back();
        if (!seen.insert(t).second) continue;
        for (const ir::Use& u : t->uses()) {
          backward.insert(u.node);
          for (const ir::Tensor* o : u.node->outputs())
            if (o) stack.push_back(o);
        }
      }
    }
    int numPrograms = seed ? 2 * S - 1 : S;
    for (size_t i = 0; i < order.size(); ++i) {
      const ir::Node* n = order[i];
      if (auto s = stageOf(*n, anyStage)) {
        int d = dense.at(*s);
        prog[i] = backward.count(n) ? 2 * (S - 1) - d : d;
      } else {
        int best = -1;
        for (const ir::Tensor* t : readsOf(n))
          if (const ir::Node* p = t->producer(); p && prog[pos[p]] > best) best = prog[pos[p]];
        prog[i] = best;  // -1: placed with its consumers below
      }
    }
    placeSources(prog);
    std::vector<int> stageDevice(S, 0);
    for (const auto& [s, d] : dense) {
      auto it = deviceOfStage.find(s);
      stageDevice[d] = it != deviceOfStage.end() ? it->second : 0;
    }
    for (int p = 0; p < numPrograms; ++p) {
      int s = p < S ? p : 2 * (S - 1) - p;
      bool bwd = p >= S;
      std::string name = !seed        ? fmt::format("stage {}", s)
                         : p == S - 1 ? fmt::format("stage {} (forward and backward)", s)
                                      : fmt::format("stage {} ({})", s, bwd ? "backward" : "forward");
      a.programs.push_back({stageDevice[s], s, bwd, name});
    }
  }
  for (size_t i = 0; i < order.size(); ++i) {
    const ir::Node* n = order[i];
    for (const ir::Tensor* t : readsOf(n)) {
      const ir::Node* p = t->producer();
      if (!p) continue;
      int pp = prog[pos[p]], np = prog[i];
      GRAFT_CHECK(pp <= np,
                  "{} ({}) reads '{}', which {} computes in the later {}; a stage may read only tensors of its "
                  "own or earlier stages",
                  n->describe(), a.programs[np].name, t->id(), p->describe(), a.programs[pp].name);
    }
    a.nodePrograms[n] = {prog[i]};
  }

  // Recomputation: a backward program recomputes the forward nodes of its stage whose outputs it
  // reads, rather than receiving them stashed (random and state-writing ops stay stashed).
  if (c.pipelining && c.recompute && seed) {
    int S = static_cast<int>((a.programs.size() + 1) / 2);
    for (size_t i = 0; i < order.size(); ++i) {
      int b = prog[i];
      if (b < S) continue;
      int fwd = 2 * (S - 1) - b;
      std::vector<const ir::Node*> stack{order[i]};
      std::set<const ir::Node*> seen;
      while (!stack.empty()) {
        const ir::Node* n = stack.back();
        stack.pop_back();
        for (const ir::Tensor* t : readsOf(n)) {
          const ir::Node* p = t->producer();
          if (!p || prog[pos[p]] != fwd || !seen.insert(p).second) continue;
          if (!ops::repeatable(*p)) continue;
          auto& progs = a.nodePrograms[p];
          if (std::find(progs.begin(), progs.end(), b) == progs.end()) progs.push_back(b);
          stack.push_back(p);
        }
      }
    }
  }
  return a;
}

std::vector<ProgramGraph> splitPrograms(const ir::Graph& g, const ProgramAssignment& a) {
  std::vector<ir::Node*> nodes = g.nodes();
  auto runsIn = [&](const ir::Node* n, int p) {
    const auto& ps = a.nodePrograms.at(n);
    return std::find(ps.begin(), ps.end(), p) != ps.end();
  };
  std::set<const ir::Tensor*> graphOutputs(g.outputs().begin(), g.outputs().end());
  std::vector<ProgramGraph> out;
  for (int p = 0; p < static_cast<int>(a.programs.size()); ++p) {
    ProgramGraph pg;
    // Inputs in the order nodes first read them; outputs in the order nodes make them.
    std::vector<const ir::Tensor*> inputs, outputs;
    std::set<const ir::Tensor*> seenIn, seenOut;
    for (const ir::Node* n : g.schedule()) {
      if (!runsIn(n, p)) continue;
      std::vector<const ir::Tensor*> reads(n->inputs().begin(), n->inputs().end());
      reads.insert(reads.end(), n->implicitInputs().begin(), n->implicitInputs().end());
      for (const ir::Tensor* t : reads) {
        if (!t) continue;
        const ir::Node* prod = t->producer();
        bool crossing = prod ? !runsIn(prod, p) : t->kind() == ir::TensorKind::Input;
        if (crossing && seenIn.insert(t).second) {
          inputs.push_back(t);
          pg.inputSources.push_back(prod ? a.home(prod) : -1);
        }
      }
      if (a.home(n) != p) continue;
      for (const ir::Tensor* t : n->outputs()) {
        if (!t) continue;
        bool needed = graphOutputs.count(t) > 0;
        for (const ir::Use& u : t->uses())
          if (!runsIn(u.node, p)) needed = true;
        if (needed && seenOut.insert(t).second) outputs.push_back(t);
      }
    }
    // Graph outputs that are model inputs are delivered by the host, not by a program.
    pg.graph = ir::cloneGraph(g);
    ir::Graph& sg = *pg.graph;
    sg.setName(fmt::format("{}_p{}", g.name(), p));
    std::vector<ir::Node*> copies = sg.nodes();
    GRAFT_ASSERT(copies.size() == nodes.size(), "clone changed the number of nodes");
    for (size_t i = 0; i < nodes.size(); ++i)
      if (!runsIn(nodes[i], p)) sg.removeNode(copies[i]);
    std::vector<ir::Tensor*> ins, outs;
    for (const ir::Tensor* t : inputs) {
      ir::Tensor& c = sg.tensor(t->id());
      c.setKind(ir::TensorKind::Input);
      ins.push_back(&c);
    }
    for (const ir::Tensor* t : outputs) outs.push_back(&sg.tensor(t->id()));
    sg.setInputs(ins);
    sg.setOutputs(outs);
    std::set<const ir::Tensor*> keep(ins.begin(), ins.end());
    for (ir::Tensor* t : sg.tensors()) {
      if (t->producer() || !t->uses().empty() || keep.count(t) || t->isGraphOutput()) continue;
      if (t->kind() == ir::TensorKind::Variable) continue;  // weights stay (weights IO, optimizer state)
      sg.removeTensor(t);
    }
    out.push_back(std::move(pg));
  }
  return out;
}

std::string describePrograms(const ir::Graph& g, const ProgramAssignment& a) {
  struct Row {
    int ops = 0, recomputed = 0;
    double flops = 0, paramBytes = 0, activationBytes = 0;
    std::set<const ir::Tensor*> params;
  };
  std::vector<Row> rows(a.programs.size());
  for (const ir::Node* n : g.nodes()) {
    const auto& ps = a.nodePrograms.at(n);
    for (size_t k = 0; k < ps.size(); ++k) {
      Row& r = rows[ps[k]];
      (k == 0 ? r.ops : r.recomputed)++;
      NodeCost c = estimateCost(*n);
      r.flops += c.flops;
      for (const ir::Tensor* t : n->inputs())
        if (t && (t->kind() == ir::TensorKind::Variable || t->kind() == ir::TensorKind::Constant) &&
            r.params.insert(t).second)
          r.paramBytes += bytesOf(t);
      for (const ir::Tensor* t : n->outputs()) r.activationBytes += bytesOf(t);
    }
  }
  // 1.5 k, 2.3 M, ... (bytes in powers of 1000 too: these are estimates).
  auto si = [](double v) {
    const char* units[] = {"", " k", " M", " G", " T"};
    int u = 0;
    while (v >= 1000 && u < 4) v /= 1000, ++u;
    return u == 0 ? fmt::format("{:.0f}", v) : fmt::format("{:.3g}{}", v, units[u]);
  };
  std::string out = fmt::format("{:<36} {:>6} {:>7} {:>10} {:>12} {:>12}\n", "program", "device", "ops", "FLOPs",
                                "params B", "activations B");
  for (size_t p = 0; p < rows.size(); ++p) {
    const Row& r = rows[p];
    std::string ops = r.recomputed ? fmt::format("{}+{}", r.ops, r.recomputed) : fmt::format("{}", r.ops);
    out += fmt::format("{:<36} {:>6} {:>7} {:>10} {:>12} {:>12}\n", fmt::format("{}: {}", p, a.programs[p].name),
                       a.programs[p].device, ops, si(r.flops), si(r.paramBytes), si(r.activationBytes));
  }
  out += "(ops+k: k forward ops recomputed in the backward program instead of stashed; FLOPs and bytes estimated)\n";
  return out;
}

}  // namespace graft::passes
