// Optimizer-state sharding (SessionOptions::shardOptimizerState; docs/replication.md): PopART's
// replicated tensor sharding of the optimizer state, ZeRO's stage 1. After the gradients are
// all-reduced, local replica i runs the optimizer step of its shard only (on its own worker):
// its slice of every weight (a view into the shared weight, so that in one process the updated
// shards land in place) and its shards of the optimizer state, which only it holds. Over MPI the
// processes then all-gather the weights' shards. The model graph holds the full state only while
// weights IO or a checkpoint needs it (materializeShardedState); the next step scatters it back.
#include <cstring>

#include "ops/dtype_dispatch.hpp"
#include "runtime/session_impl.hpp"
#include "support/check.hpp"

namespace graft {
namespace {

int globalOffset(const SessionOptions& o) { return o.enableDistributedReplicatedGraphs ? o.globalReplicaOffset : 0; }

char* bytesOf(NDArray& a) { return static_cast<char*>(a.rawData()); }

}  // namespace

void Session::Impl::compileShards(Plan& p) {
  if (!sharding) setUpSharding();
  GRAFT_ASSERT(sharding, "optimizer-state sharding without a sharding layout");
  releaseShardedState();  // the shards take the model's state (initial values, or a checkpoint's)
  passes::PassContext ctx;
  ctx.weightsAreConstant = false;
  ctx.verifyEachPass = options.verifyPasses;
  for (int i = 0; i < localReplicas(); ++i) {
    p.shardGraphs.push_back(buildShardGraph(p, i));
    ir::Graph& g = *p.shardGraphs.back();
    pipeline::VirtualDevices& devs = *p.replicas[i]->devices;
    devs.runOn(0, [&] {
      passes::runPipeline(g, pipeline(), ctx);
      p.shardExes.push_back(plan::compile(g, devs.backend(0), devs.pool(0)));
    });
    // The step's graphs never read the optimizer state: their copies of it go.
    for (const auto& w : sharding->weights)
      for (const auto* ids : {&w.state, &w.private_})
        for (const TensorId& id : *ids)
          if (ir::Tensor* t = p.replicas[i]->graph->findTensor(id); t && t->data() && t->uses().empty())
            t->setData(NDArray(t->data()->dtype(), {0}));
  }
}

void Session::Impl::runShards(Plan& p) {
  const int r = localReplicas();
  for (int i = 0; i < r; ++i)
    p.replicas[i]->devices->start([&, i](int d) {
      if (d != 0) return;
      double t0 = lastTimeline ? lastTimeline->now() : 0;
      p.shardExes[i]->run({});
      if (lastTimeline) lastTimeline->add({1 + i, "optimizer step of its slice", t0, lastTimeline->now() - t0, -1});
    });
  std::exception_ptr first;
  for (int i = 0; i < r; ++i) {
    try {
      p.replicas[i]->devices->wait();
    } catch (...) {
      if (!first) first = std::current_exception();
    }
  }
  if (first) std::rethrow_exception(first);
  // One process: the shards were updated in place, in the shared weights, and each step zeroed
  // its slices of the accumulators (buildShardGraph).
  if (!comm) return;
  if (!overwritesAccumulators())
    for (NDArray& a : p.replicas[0]->accumulators)
      if (a.nbytes()) std::memset(a.rawData(), 0, a.nbytes());
  // Every process contributes its replicas' shards of every weight (padded to the shard size).
  const int offset = globalOffset(options);
  size_t per = 0;
  for (const auto& w : sharding->weights)
    per += static_cast<size_t>(r * w.shard) * dtypeSize(model.graph->tensor(w.id).data()->dtype());
  std::vector<uint8_t> mine(per, 0);
  size_t at = 0;
  for (const auto& w : sharding->weights) {
    NDArray full = *model.graph->tensor(w.id).data();
    const size_t es = dtypeSize(full.dtype());
    for (int i = 0; i < r; ++i) {
      int64_t b = sharding->begin(w, offset + i), n = sharding->length(w, offset + i);
      if (n > 0) std::memcpy(mine.data() + at, bytesOf(full) + b * es, static_cast<size_t>(n) * es);
      at += static_cast<size_t>(w.shard) * es;
    }
  }
  std::vector<uint8_t> all = comm->allgatherBytes(mine.data(), mine.size(), "the all-gather of the weights' shards");
  for (int proc = 0; proc < comm->size(); ++proc) {
    at = static_cast<size_t>(proc) * per;
    for (const auto& w : sharding->weights) {
      NDArray full = *model.graph->tensor(w.id).mutableData();
      const size_t es = dtypeSize(full.dtype());
      for (int i = 0; i < r; ++i) {
        int g = proc * r + i;
        int64_t b = sharding->begin(w, g), n = sharding->length(w, g);
        if (n > 0 && proc != comm->rank())
          std::memcpy(bytesOf(full) + b * es, all.data() + at, static_cast<size_t>(n) * es);
        at += static_cast<size_t>(w.shard) * es;
      }
    }
  }
}

void Session::Impl::materializeShardedState() {
  if (!sharding || sharding->materialized) return;
  const int r = localReplicas(), offset = globalOffset(options);
  // Full arrays from the local shards; over MPI the other processes' shards come from them.
  // (Views: the model graph holds the per-element state all along.)
  std::vector<std::pair<const Sharding::Weight*, TensorId>> items;
  for (const auto& w : sharding->weights)
    for (const TensorId& id : w.state)
      if (!sharding->views) items.emplace_back(&w, id);
  std::vector<NDArray> full;
  for (const auto& [w, id] : items) {
    const NDArray& shard0 = sharding->state[0].at(id);
    full.emplace_back(shard0.dtype(), model.graph->tensor(id).info().shape());
    const size_t es = dtypeSize(shard0.dtype());
    for (int i = 0; i < r; ++i) {
      const NDArray& s = sharding->state[i].at(id);
      if (s.nbytes()) std::memcpy(bytesOf(full.back()) + sharding->begin(*w, offset + i) * es, s.rawData(), s.nbytes());
    }
  }
  if (comm) {
    size_t per = 0;
    for (const auto& [w, id] : items)
      per += static_cast<size_t>(r * w->shard) * dtypeSize(sharding->state[0].at(id).dtype());
    std::vector<uint8_t> mine(per, 0);
    size_t at = 0;
    for (const auto& [w, id] : items) {
      const size_t es = dtypeSize(sharding->state[0].at(id).dtype());
      for (int i = 0; i < r; ++i) {
        const NDArray& s = sharding->state[i].at(id);
        if (s.nbytes()) std::memcpy(mine.data() + at, s.rawData(), s.nbytes());
        at += static_cast<size_t>(w->shard) * es;
      }
    }
    std::vector<uint8_t> all = comm->allgatherBytes(mine.data(), mine.size(), "the all-gather of the optimizer state");
    for (int proc = 0; proc < comm->size(); ++proc) {
      at = static_cast<size_t>(proc) * per;
      for (size_t k = 0; k < items.size(); ++k) {
        const Sharding::Weight& w = *items[k].first;
        const size_t es = dtypeSize(full[k].dtype());
        for (int i = 0; i < r; ++i) {
          int g = proc * r + i;
          int64_t n = sharding->length(w, g);
          if (n > 0)
            std::memcpy(bytesOf(full[k]) + sharding->begin(w, g) * es, all.data() + at, static_cast<size_t>(n) * es);
          at += static_cast<size_t>(w.shard) * es;
        }
      }
    }
  }
  for (size_t k = 0; k < items.size(); ++k) model.graph->tensor(items[k].second).setData(std::move(full[k]));
  for (const auto& w : sharding->weights)
    for (const TensorId& id : w.private_) model.graph->tensor(id).mutableData()->copyFrom(sharding->state[0].at(id));
  sharding->materialized = true;
}

void Session::Impl::releaseShardedState() {
  if (!sharding || !sharding->materialized) return;
  const int r = localReplicas(), offset = globalOffset(options);
  for (const auto& w : sharding->weights) {
    for (const TensorId& id : w.state) {
      if (sharding->views) break;  // stays in the model graph
      ir::Tensor& t = model.graph->tensor(id);
      NDArray full = *t.data();
      const size_t es = dtypeSize(full.dtype());
      for (int i = 0; i < r; ++i) {
        NDArray& s = sharding->state[i].at(id);
        if (s.nbytes()) std::memcpy(s.rawData(), bytesOf(full) + sharding->begin(w, offset + i) * es, s.nbytes());
      }
      t.setData(NDArray(full.dtype(), {0}));  // the shards hold it now
    }
    for (const TensorId& id : w.private_)
      for (int i = 0; i < r; ++i) sharding->state[i].at(id).copyFrom(*model.graph->tensor(id).data());
  }
  sharding->materialized = false;
}

std::vector<int64_t> Session::Impl::replicaOptimizerStateBytes() const {
  std::vector<int64_t> out;
  const Plan* p = lastPlan;
  if (!p) return out;
  auto stateBytes = [](const ir::Graph& g) {
    int64_t bytes = 0;
    for (const ir::Tensor* t : g.initializers()) {
      auto pos = t->id().find("___");
      if (!t->data() || pos == std::string::npos) continue;
      std::string kind = t->id().substr(0, pos);
      if (kind == "Accl" || kind == "Accl1" || kind == "Accl2" || kind == "Accl3" || kind == "Step")
        bytes += static_cast<int64_t>(t->data()->nbytes());
    }
    return bytes;
  };
  if (!p->shardGraphs.empty() && sharding && !sharding->views) {
    for (const auto& g : p->shardGraphs) out.push_back(stateBytes(*g));
  } else if (!p->shardGraphs.empty()) {
    // Split but unsharded: every replica's slice of the step works in the one full state.
    out.assign(static_cast<size_t>(localReplicas()), stateBytes(*model.graph));
  } else if (p->applyGraph) {
    // Unsharded: every replica's update reads the one full state.
    out.assign(static_cast<size_t>(localReplicas()), stateBytes(*p->applyGraph));
  }
  return out;
}

}  // namespace graft
