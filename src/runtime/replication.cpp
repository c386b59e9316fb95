// Data parallelism (docs/replication.md). A replicated plan is compiled once per local replica,
// each copy on the replica's own virtual devices (worker threads, kernel pools, cores). A step
// reads the micro-batches of every replica on the host thread, in PopART's order (micro-batch
// major, replica minor), runs the replicas side by side, and before each optimizer step sums the
// replicas' gradient accumulators, here and then over MPI across processes. The optimizer step
// itself runs once per process on the shared weights, so replicas can never drift apart.
#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <map>
#include <mutex>
#include <set>
#include <thread>

#include "ops/dtype_dispatch.hpp"
#include "ops/registry.hpp"
#include "ops/replica_context.hpp"
#include "optim/optimizer_graph.hpp"
#include "passes/training_mode.hpp"
#include "runtime/session_impl.hpp"
#include "support/check.hpp"
#include "support/logging.hpp"

namespace graft {
namespace {

void addInto(NDArray& acc, const NDArray& v, const std::string& what) {
  ops::dispatch<ops::kFloats>(acc.dtype(), what, [&](auto tag) {
    using T = typename decltype(tag)::type;
    using C = ops::ComputeType<T>;
    T* a = acc.data<T>();
    const T* b = v.data<T>();
    for (int64_t i = 0; i < acc.numel(); ++i) a[i] = static_cast<T>(static_cast<C>(a[i]) + static_cast<C>(b[i]));
  });
}

// The ops whose kernels draw random numbers (ops/random.cpp, ops/training_mode_ops.cpp).
bool isRandomOp(const ir::Node& n) {
  if (n.domain() == ops::kGraftDomain) return n.type() == "Dropout";
  if (!n.domain().empty() && n.domain() != "ai.onnx") return false;
  static const std::set<std::string> kRandom{"RandomUniform",    "RandomNormal", "RandomUniformLike",
                                             "RandomNormalLike", "Bernoulli",    "Multinomial"};
  return kRandom.count(n.type()) > 0;
}

// FNV-1a: the same value in every process for the same text (std::hash promises no such thing).
uint64_t fnv1a(const std::string& s) {
  uint64_t h = 1469598103934665603ull;
  for (unsigned char c : s) {
    h ^= c;
    h *= 1099511628211ull;
  }
  return h;
}

}  // namespace

struct Session::Impl::Plan::Reduction {
  std::map<std::string, size_t> index;  ///< accumulator id -> position in accumulatorIds
  /// Per accumulator: the Accumulate runs of the current weight update so far.
  std::unique_ptr<std::atomic<int>[]> added;
  /// Accumulators reduced together (SessionOptions::gradientBucketBytes), in the order the
  /// backward pass completes them.
  struct Bucket {
    std::vector<size_t> members;
    int64_t bytes = 0;
    /// Over MPI, a bucket of several tensors: their sums side by side, all-reduced at once.
    NDArray packed;
    std::string name;
    /// Where the reduction starts in the first replica's schedule: after step `step` of program
    /// `program`, the Accumulate `node` of the last member (-1: before the optimizer step).
    int program = 0;
    int64_t step = -1;
    std::string node;
  };
  std::vector<Bucket> buckets;
  std::vector<size_t> bucketOf;                  ///< per accumulator
  std::unique_ptr<std::atomic<int>[]> pending;   ///< per bucket: members not complete yet
  std::unique_ptr<std::atomic<bool>[]> started;  ///< per bucket
  /// Accumulate runs per accumulator in one weight update: micro-batches x local replicas.
  int target = 0;
  std::mutex commMutex;  ///< MPI calls come from several workers, one at a time
  /// Over MPI where the processes of each host share memory (Impl::localReduce): the buckets'
  /// places in the shared segments; the buckets are summed there (then across hosts by slices).
  bool local = false;
  std::vector<LocalReduce::Bucket> localBuckets;
  /// The step's timeline (events: each gradient complete, each bucket's all-reduce started).
  pipeline::Timeline* timeline = nullptr;

  void reset() {
    for (size_t k = 0; k < bucketOf.size(); ++k) added[k] = 0;
    for (size_t b = 0; b < buckets.size(); ++b)
      pending[b] = static_cast<int>(buckets[b].members.size()), started[b] = false;
  }
};

void Session::Impl::checkReplication() {
  const SessionOptions& o = options;
  GRAFT_CHECK(o.replicatedGraphCount >= 1, "SessionOptions.replicatedGraphCount must be at least 1, got {}",
              o.replicatedGraphCount);
  GRAFT_CHECK(o.replicatedGraphCount == 1 || o.enableReplicatedGraphs,
              "SessionOptions.replicatedGraphCount is {} but enableReplicatedGraphs is off; turn it on to replicate",
              o.replicatedGraphCount);
  if (!o.enableDistributedReplicatedGraphs)
    GRAFT_CHECK(o.globalReplicationFactor == 1 && o.globalReplicaOffset == 0,
                "SessionOptions.globalReplicationFactor ({}) and globalReplicaOffset ({}) need "
                "enableDistributedReplicatedGraphs = True",
                o.globalReplicationFactor, o.globalReplicaOffset);
  if (!replicated()) return;
  const int r = localReplicas();
  const int nvd = device->numVirtualDevices();
  if (usesStages())
    GRAFT_CHECK(nvd % r == 0,
                "SessionOptions.replicatedGraphCount = {}: the device's {} virtual devices do not divide "
                "among {} replicas (the device needs replicatedGraphCount x the virtual devices of one replica)",
                r, nvd, r);
  else
    GRAFT_CHECK(nvd == r,
                "SessionOptions.replicatedGraphCount = {}: each replica runs on its own virtual device, so the "
                "device needs {} virtual devices (DeviceManager().createCpuDevice({})), it has {}",
                r, r, r, nvd);
  const int threads = threadsPerDevice();
  const int cores = support::ThreadPool::hardwareThreads();
  GRAFT_CHECK(r * threads <= cores,
              "SessionOptions.replicatedGraphCount = {} replicas x {} kernel thread{} each need {} "
              "cores, this machine has {}: use fewer replicas or threads (SessionOptions.numThreads, "
              "createCpuDevice's coresPerVirtualDevice)",
              r, threads, threads == 1 ? "" : "s", r * threads, cores);
  if (!o.enableDistributedReplicatedGraphs) return;
  const int g = o.globalReplicationFactor;
  GRAFT_CHECK(g >= r && g % r == 0,
              "SessionOptions.globalReplicationFactor ({}) must be a multiple of the replicas of "
              "one process (replicatedGraphCount, {})",
              g, r);
  GRAFT_CHECK(o.globalReplicaOffset >= 0 && o.globalReplicaOffset % r == 0 && o.globalReplicaOffset + r <= g,
              "SessionOptions.globalReplicaOffset ({}) must be a multiple of replicatedGraphCount ({}) below "
              "globalReplicationFactor ({})",
              o.globalReplicaOffset, r, g);
  GRAFT_CHECK(o.collectiveTimeoutSeconds > 0, "SessionOptions.collectiveTimeoutSeconds must be > 0, got {}",
              o.collectiveTimeoutSeconds);
  comm = collectives::mpiWorld();
  comm->setTimeout(o.collectiveTimeoutSeconds);
  GRAFT_CHECK(comm->size() == g / r,
              "SessionOptions.globalReplicationFactor = {} with {} replica{} per process means {} "
              "processes, but MPI's world has {} (launch with `graft launch --num-instances {} --num-replicas {}`, or "
              "mpirun -np {})",
              g, r, r == 1 ? "" : "s", g / r, comm->size(), g / r, g, g / r);
  GRAFT_CHECK(comm->rank() == o.globalReplicaOffset / r,
              "SessionOptions.globalReplicaOffset = {} holds the replicas of "
              "process {}, but this is MPI rank {} (offset {} expected)",
              o.globalReplicaOffset, o.globalReplicaOffset / r, comm->rank(), comm->rank() * r);
}

void Session::Impl::bindCollectives() {
  bool any = false;
  for (ir::Node* n : model.graph->nodes()) {
    if (n->domain() != ops::kGraphcoreDomain || n->type().rfind("Replicated", 0) != 0) continue;
    n->attrs().set("__replicationFactor", static_cast<int64_t>(globalReplicas()));
    any = true;
  }
  if (!any) return;
  if (comm && usesStages())
    GRAFT_THROW(
        "the model has collective ops (ai.graphcore Replicated*), which graft runs across processes only without "
        "virtual graphs (SessionOptions.virtualGraphMode Off): the programs of a replica's pipeline would reach "
        "them in different orders in different processes");
  passes::PassContext ctx;
  passes::runPipeline(*model.graph, {"infer-shapes"}, ctx);
}

Session::Impl::Plan::Replica::~Replica() {
  staged.reset();
  if (!devices || !exe) return;
  try {
    devices->runOn(0, [&] { exe.reset(); });
  } catch (...) {
    // Destructors do not throw; the kernels are then freed here.
  }
}

void Session::Impl::compileReplicated(Plan& p) {
  const int r = localReplicas();
  const int per = usesStages() ? virtualDevicesPerReplica() : 1;
  const int threads = threadsPerDevice();
  if (replicaDevices.empty()) {
    // Over MPI the processes of one host each see all its cores: each takes its own block of
    // them (without this every process would pin its replicas to the first cores).
    const int share = comm ? comm->localRank() : 0, shares = comm ? comm->localSize() : 1;
    auto blocks = pipeline::VirtualDevices::cpuBlocks(r * per, threads, share, shares);
    // cpuBlocks leaves the lists empty when the cores are too few for every local process.
    if (shares > 1 && blocks[0].empty())
      GRAFT_LOG_WARN(
          "distributed replication: {} processes on this host x {} replica{} x {} virtual device{} x {} kernel "
          "thread{} need {} cores, the host has {}: the threads are not pinned, and steps will be slow (use "
          "fewer threads per process: SessionOptions.numThreads or createCpuDevice's coresPerVirtualDevice)",
          shares, r, r == 1 ? "" : "s", per, per == 1 ? "" : "s", threads, threads == 1 ? "" : "s",
          static_cast<int64_t>(shares) * r * per * threads, support::ThreadPool::hardwareThreads());
    for (int i = 0; i < r; ++i) {
      std::vector<std::vector<int>> mine;
      const auto from = static_cast<std::ptrdiff_t>(i) * per;
      mine.assign(blocks.begin() + from, blocks.begin() + from + per);
      replicaDevices.push_back(
          std::make_unique<pipeline::VirtualDevices>(device->type(), per, threads, mine, options.enableBf16));
    }
    exchange = std::make_unique<ReplicaExchange>(
        r, options.enableDistributedReplicatedGraphs ? options.globalReplicaOffset : 0, globalReplicas(), comm,
        options.collectiveTimeoutSeconds);
    // Every worker of replica i runs its collective ops as replica i.
    for (int i = 0; i < r; ++i)
      for (int d = 0; d < replicaDevices[i]->size(); ++d) {
        ops::ReplicaContext* ctx = exchange->context(i);
        replicaDevices[i]->runOn(d, [ctx] { ops::setCurrentReplica(ctx); });
      }
  }
  // Copies first: compiling optimises a graph in place.
  for (int i = 0; i < r; ++i) {
    auto rep = std::make_unique<Plan::Replica>();
    rep->devices = replicaDevices[i].get();
    if (i == 0) {
      rep->graph = p.graph.get();
    } else {
      rep->ownGraph = ir::cloneGraph(*p.graph);
      rep->graph = rep->ownGraph.get();
      // The state a step writes in place (accumulators, running statistics, the dropout step)
      // becomes the replica's own; the weights stay shared (only the optimizer step writes them).
      std::set<ir::Tensor*> done;
      for (ir::Node* n : rep->graph->nodes()) {
        const ops::OpDef* def = ops::Registry::instance().find(*n);
        if (!def || !def->traits.sideEffects) continue;
        for (size_t k = 0; k < n->numInputs(); ++k) {
          ir::Tensor* t = n->input(k);
          if (!t || !t->data() || t->kind() != ir::TensorKind::Variable || !done.insert(t).second) continue;
          t->setData(t->data()->clone());
        }
      }
    }
    // Each replica draws its own random numbers from the session's seed (as PopART derives each
    // replica's seed from it): random ops without a seed attribute mix in the global index.
    const int64_t global = (options.enableDistributedReplicatedGraphs ? options.globalReplicaOffset : 0) + i;
    if (global != 0)
      for (ir::Node* n : rep->graph->nodes())
        if (isRandomOp(*n)) n->attrs().set("replica", global);
    for (const auto& id : p.accumulatorIds) {
      ir::Tensor* t = rep->graph->findTensor(id);
      GRAFT_ASSERT(t && t->data(), "replica {} has no accumulator '{}'", i, id);
      rep->accumulators.push_back(*t->data());
    }
    p.replicas.push_back(std::move(rep));
  }
  auto red = std::make_shared<Plan::Reduction>();
  const size_t count = p.accumulatorIds.size();
  for (size_t k = 0; k < count; ++k) red->index[p.accumulatorIds[k]] = k;
  red->added.reset(new std::atomic<int>[count]);
  p.reduction = red;
  passes::PassContext ctx;
  ctx.weightsAreConstant = weightsAreConstant();
  ctx.verifyEachPass = options.verifyPasses;
  ctx.dumpAfter = options.dumpGraphAfterPass;
  for (auto& rep : p.replicas) {
    if (usesStages()) {
      rep->staged = compileStagedGraph(*rep->graph, *rep->devices);
    } else {
      rep->devices->runOn(0, [&] {
        passes::runPipeline(*rep->graph, pipeline(), ctx);
        rep->exe = plan::compile(*rep->graph, rep->devices->backend(0), rep->devices->pool(0));
      });
      rep->exe->setProfiling(options.enableProfiling, options.profileByNode);
    }
    if (count == 0) continue;
    Plan* plan = &p;
    int index = static_cast<int>(&rep - &p.replicas[0]);
    auto hook = [this, plan, index](const ir::Node& n) { afterReplicaNode(*plan, n, index); };
    if (rep->exe) rep->exe->setAfterNode(hook);
    if (rep->staged)
      for (auto& e : rep->staged->exes) e->setAfterNode(hook);
  }
  formBuckets(p);
  if (splitsOptimizerStep()) compileShards(p);
}

void Session::Impl::formBuckets(Plan& p) {
  Plan::Reduction& red = *p.reduction;
  const size_t count = p.accumulatorIds.size();
  // The order the backward pass completes the accumulators: the first replica's schedule (the
  // order its compiled graph runs in; its programs in order with virtual graphs), where each
  // one's Accumulate runs.
  std::vector<const ir::Graph*> programs;
  const Plan::Replica& first = *p.replicas[0];
  if (first.exe) programs.push_back(first.graph);
  if (first.staged)
    for (auto& pg : first.staged->graphs) programs.push_back(pg.graph.get());
  std::vector<size_t> ks;
  std::vector<bool> seen(count, false);
  struct Where {
    int program = 0;
    int64_t step = -1;
    std::string node;
  };
  std::vector<Where> where(count);
  for (size_t prog = 0; prog < programs.size(); ++prog) {
    // The order the compiled program runs in (plan::compile schedules the same way).
    std::vector<ir::Node*> order = programs[prog]->schedule();
    for (size_t i = 0; i < order.size(); ++i) {
      const ir::Node* n = order[i];
      if (n->type() != "Accumulate" || n->numInputs() < 1 || !n->input(0)) continue;
      auto it = red.index.find(n->input(0)->id());
      if (it == red.index.end() || seen[it->second]) continue;
      seen[it->second] = true;
      ks.push_back(it->second);
      where[it->second] = {static_cast<int>(prog), static_cast<int64_t>(i), n->describe()};
    }
  }
  for (size_t k = 0; k < count; ++k)
    if (!seen[k]) ks.push_back(k);  // (none expected) reduced before the optimizer step
  const int64_t cap = options.gradientBucketBytes;
  red.bucketOf.assign(count, 0);
  Plan::Reduction::Bucket open;
  auto close = [&] {
    if (open.members.empty()) return;
    red.buckets.push_back(std::move(open));
    open = {};
  };
  const auto& acc = first.accumulators;
  for (size_t k : ks) {
    if (!open.members.empty() && acc[k].dtype() != acc[open.members[0]].dtype()) close();
    open.members.push_back(k);
    open.bytes += static_cast<int64_t>(acc[k].nbytes());
    if (open.bytes >= cap) close();
  }
  close();
  for (size_t b = 0; b < red.buckets.size(); ++b) {
    auto& bucket = red.buckets[b];
    std::vector<std::string> names;
    for (size_t k : bucket.members) {
      red.bucketOf[k] = b;
      names.push_back(p.accumulatorIds[k]);
    }
    bucket.name = fmt::format("bucket {} ({})", b, fmt::join(names, ", "));
    const Where& w = where[bucket.members.back()];
    bucket.program = w.program;
    bucket.step = w.step;
    bucket.node = w.node;
  }
  // Every process must take the same path for this plan's buckets: the shared one only where
  // every accumulator lies in the shared segment in every process.
  if (localReduce) {
    bool inShared = true;
    for (auto& bucket : red.buckets) {
      LocalReduce::Bucket spans;
      for (size_t k : bucket.members) {
        int64_t at = localReduce->offsetOf(acc[k].rawData(), acc[k].nbytes());
        inShared = inShared && at >= 0;
        spans.push_back({static_cast<size_t>(std::max<int64_t>(at, 0)), acc[k].numel(), acc[k].dtype()});
      }
      red.localBuckets.push_back(std::move(spans));
    }
    auto all = comm->allgather(inShared ? 1 : 0, "the check that every process sums its gradients in shared memory");
    red.local = std::all_of(all.begin(), all.end(), [](uint64_t v) { return v == 1; });
    if (!red.local) {
      red.localBuckets.clear();
      GRAFT_LOG_WARN(
          "distributed replication: the gradient accumulators of a plan are not all in the memory the processes "
          "of this host share; its gradients are all-reduced through MPI");
    }
  }
  if (comm && !red.local)
    for (auto& bucket : red.buckets) {
      int64_t elems = 0;
      for (size_t k : bucket.members) elems += acc[k].numel();
      if (bucket.members.size() > 1) bucket.packed = NDArray(acc[bucket.members[0]].dtype(), {elems});
    }
  red.pending.reset(new std::atomic<int>[red.buckets.size()]);
  red.started.reset(new std::atomic<bool>[red.buckets.size()]);
  red.reset();
}

void Session::Impl::afterReplicaNode(Plan& p, const ir::Node& n, int replica) {
  // The all-reduces already started move on between the kernels, not only when the next starts.
  if (p.reduction->local)
    localReduce->progress();
  else if (comm)
    comm->progress();
  if (n.type() != "Accumulate" || n.numInputs() < 1 || !n.input(0)) return;
  Plan::Reduction& red = *p.reduction;
  auto it = red.index.find(n.input(0)->id());
  if (it == red.index.end()) return;
  // The last replica to finish this gradient completes it; the last gradient of a bucket starts
  // the bucket's reduction, while the replicas go on with the backward pass.
  if (red.added[it->second].fetch_add(1) + 1 != red.target) return;
  if (red.timeline) {
    double t = red.timeline->now();
    red.timeline->add({1 + replica, "gradient complete: " + p.accumulatorIds[it->second], t, 0, -1});
  }
  size_t b = red.bucketOf[it->second];
  if (red.pending[b].fetch_sub(1) - 1 == 0) startBucket(p, b, replica);
}

void Session::Impl::startBucket(Plan& p, size_t b, int replica) {
  Plan::Reduction& red = *p.reduction;
  if (red.started[b].exchange(true)) return;
  double t0 = red.timeline ? red.timeline->now() : 0;
  Plan::Reduction::Bucket& bucket = red.buckets[b];
  // In one process a split optimizer step sums each slice of the replicas' gradients itself, on
  // the replica that updates it (buildShardGraph); nothing to do here then.
  if (!comm && splitsOptimizerStep()) {
    if (red.timeline)
      red.timeline->add({1 + replica, "complete (summed in the optimizer step): " + bucket.name, t0, 0, -1});
    return;
  }
  for (size_t k : bucket.members) {
    const TensorId& id = p.accumulatorIds[k];
    NDArray& sum = p.replicas[0]->accumulators[k];
    for (size_t i = 1; i < p.replicas.size(); ++i) {
      NDArray& a = p.replicas[i]->accumulators[k];
      addInto(sum, a, "all-reduce of '" + id + "'");
      if (a.nbytes() && !overwritesAccumulators()) std::memset(a.rawData(), 0, a.nbytes());
    }
  }
  if (red.local) {
    localReduce->ready(b);  // the sums start as soon as every process has this bucket
  } else if (comm) {
    NDArray target = p.replicas[0]->accumulators[bucket.members[0]];
    if (bucket.members.size() > 1) {
      auto* dst = static_cast<char*>(bucket.packed.rawData());
      for (size_t k : bucket.members) {
        const NDArray& a = p.replicas[0]->accumulators[k];
        if (a.nbytes()) std::memcpy(dst, a.rawData(), a.nbytes());
        dst += a.nbytes();
      }
      target = bucket.packed;
    }
    std::lock_guard<std::mutex> lock(red.commMutex);
    comm->startAllreduceSum(target, bucket.name);
  }
  if (red.timeline)
    red.timeline->add({1 + replica, "all-reduce started: " + bucket.name, t0, red.timeline->now() - t0, -1});
}

void Session::Impl::reduceGradients(Plan& p) {
  Plan::Reduction& red = *p.reduction;
  // Buckets whose last Accumulate did not report (none should) are reduced here.
  for (size_t b = 0; b < red.buckets.size(); ++b) startBucket(p, b, -1);
  if (red.local) {
    localReduce->wait();
  } else if (comm) {
    std::lock_guard<std::mutex> lock(red.commMutex);
    comm->waitAll();
    for (auto& bucket : red.buckets) {
      if (bucket.members.size() < 2) continue;
      const auto* src = static_cast<const char*>(bucket.packed.rawData());
      for (size_t k : bucket.members) {
        NDArray& a = p.replicas[0]->accumulators[k];
        if (a.nbytes()) std::memcpy(a.rawData(), src, a.nbytes());
        src += a.nbytes();
      }
    }
  }
  red.reset();
}

std::vector<GradientBucket> Session::gradientBuckets() const {
  std::lock_guard<std::recursive_mutex> lock(impl_->mutex);
  std::vector<GradientBucket> out;
  const Impl::Plan* p = impl_->lastPlan;
  if (!p || !p->reduction || p->replicas.empty()) return out;
  for (const auto& b : p->reduction->buckets) {
    GradientBucket g;
    for (size_t k : b.members) g.accumulators.push_back(p->accumulatorIds[k]);
    g.bytes = b.bytes;
    g.program = b.program;
    g.step = b.step;
    g.node = b.node;
    out.push_back(std::move(g));
  }
  return out;
}

void Session::Impl::writeReplicaCopies(const TensorId& id, const NDArray& value) {
  for (auto& [shapes, plan] : plans)
    for (size_t i = 1; i < plan->replicas.size(); ++i) {
      ir::Tensor* t = plan->replicas[i]->graph->findTensor(id);
      // (Sharding empties the copies the step never reads: they have no elements then.)
      if (t && t->data() && t->data()->rawData() != value.rawData() && t->data()->shape() == value.shape())
        t->mutableData()->copyFrom(value);
    }
}

void Session::Impl::broadcastWeights() {
  materializeShardedState();  // rank 0's full state, scattered into the shards at the next step
  for (const TensorId& id : persistentIds()) {
    ir::Tensor* t = model.graph->findTensor(id);
    if (!t || !t->data() || t->data()->dtype() == DataType::String) continue;
    comm->broadcast(*t->mutableData(), 0, id);
  }
  weightsBroadcast = true;
}

void Session::Impl::shareAccumulators(const std::vector<TensorId>& weights) {
  if (!comm || comm->size() < 2) return;
  const char* env = std::getenv("GRAFT_LOCAL_REDUCE");
  const bool wanted = !(env && std::string(env) == "0");
  std::vector<ir::Tensor*> accs;
  for (const TensorId& w : weights)
    if (ir::Tensor* t = model.graph->findTensor(optim::stateId("Accum", w)); t && t->data()) accs.push_back(t);
  const size_t header = LocalReduce::headerBytes(accs.size());
  std::vector<size_t> offsets;
  size_t bytes = header;
  for (ir::Tensor* t : accs) {
    offsets.push_back(bytes);
    bytes += (t->data()->nbytes() + 63) / 64 * 64;
  }
  // Every process decides alike: the same model (its accumulators' bytes), nobody opting out, and
  // the same number of processes on every host (more than one), so that local process j of each
  // host sums the same slices.
  const std::string what = "the check that every process can share its gradient accumulators";
  auto all = comm->allgather(wanted ? bytes : 0, what);
  auto locals = comm->allgather(static_cast<uint64_t>(comm->localSize()), what);
  if (std::any_of(all.begin(), all.end(), [](uint64_t v) { return v == 0; }))
    GRAFT_LOG_INFO("distributed replication: GRAFT_LOCAL_REDUCE=0 in a process: gradients go through MPI");
  if (accs.empty() || std::any_of(all.begin(), all.end(), [&](uint64_t v) { return v != all[0] || v == 0; }) ||
      std::any_of(locals.begin(), locals.end(), [&](uint64_t v) { return v != locals[0]; }) || locals[0] < 2)
    return;  // (processes with different models fail at prepareDevice, saying so)
  auto memory = comm->shareWithLocalProcesses(bytes, "the gradient accumulators");
  // Every host, or none: otherwise the hosts would reduce in different ways.
  auto shared = comm->allgather(memory ? 1 : 0, "the check that every host shares its gradient accumulators");
  if (std::any_of(shared.begin(), shared.end(), [](uint64_t v) { return v == 0; })) return;
  const bool hosts = comm->localSize() < comm->size();
  std::shared_ptr<collectives::Communicator> across;
  if (hosts) {
    across = comm->acrossHosts("the gradient all-reduce across hosts");  // (with the world's timeout)
    GRAFT_ASSERT(across, "no communicator across hosts where the processes of a host share memory");
  }
  localReduce = std::make_shared<LocalReduce>(std::move(memory), accs.size(), options.collectiveTimeoutSeconds,
                                              std::move(across));
  for (size_t k = 0; k < accs.size(); ++k) {
    const NDArray& old = *accs[k]->data();
    NDArray a = localReduce->array(offsets[k], old.dtype(), old.shape());
    a.copyFrom(old);
    accs[k]->setData(a);
  }
  GRAFT_LOG_INFO(
      "distributed replication: the {} processes on this host sum their gradients in shared memory ({:.1f} MB "
      "each){}",
      comm->localSize(), static_cast<double>(bytes) / 1e6,
      hosts ? fmt::format(", then each its slice with the other {} host{} over MPI",
                          comm->size() / comm->localSize() - 1, comm->size() / comm->localSize() == 2 ? "" : "s")
            : "");
}

void Session::Impl::checkPeersAgree() {
  // The model's structure and the options that shape a step; not the weights' values, which
  // weightsFromHost makes equal.
  std::string text = ir::printGraph(*model.graph);
  text += fmt::format("|bps={}|accum={}|local={}|global={}|reduction={}|pipelining={}|vgm={}|training={}",
                      dataFlow.batchesPerStep(), accumulationFactor(), localReplicas(), globalReplicas(),
                      static_cast<int>(options.accumulationAndReplicationReductionType), options.enablePipelining,
                      static_cast<int>(options.virtualGraphMode), isTraining());
  for (const auto& id : dataFlow.anchors()) text += "|anchor=" + id;
  auto all = comm->allgather(fnv1a(text), "the check that every process has the same model and options");
  for (size_t i = 0; i < all.size(); ++i)
    GRAFT_CHECK(all[i] == all[0],
                "distributed replication: process {} has another model or other session options "
                "than process 0 (checked at prepareDevice; hashes {:016x} vs {:016x}): every process must build the "
                "same model with the same options",
                i, all[i], all[0]);
}

void Session::Impl::runReplicated(IStepIO& io) {
  auto t0 = std::chrono::steady_clock::now();
  if (comm && !weightsBroadcast) broadcastWeights();  // identical weights even without weightsFromHost
  releaseShardedState();  // weights IO or a checkpoint gathered the optimizer state since the last step
  beginStep(io);
  const int r = localReplicas();
  std::vector<std::string> names{"host"};
  for (int i = 0; i < r; ++i) names.push_back(fmt::format("replica {}", i));
  lastTimeline = std::make_unique<pipeline::Timeline>(std::move(names));
  const int runs = dataFlow.batchesPerStep() * accumulationFactor();
  const int group = isTraining() ? accumulationFactor() : runs;
  // Callback StepIOs may reuse an input's memory once told it is consumed.
  const bool copyInputs = dynamic_cast<StepIO*>(&io) == nullptr;
  std::vector<AnchorSums> sums(r);
  std::vector<Shape> shapes;
  Plan* p = nullptr;
  using Values = std::vector<ops::Value>;
  for (int start = 0; start < runs; start += group) {
    const int n = std::min(group, runs - start);
    std::vector<std::vector<Values>> in(n, std::vector<Values>(r)), out(n, std::vector<Values>(r));
    for (int m = 0; m < n; ++m)
      for (int i = 0; i < r; ++i) {
        Values v = readInputs(io);
        std::vector<Shape> s;
        for (auto& x : v) {
          s.push_back(x.isTensor() ? x.tensor.shape() : Shape{-1});
          if (copyInputs && x.isTensor()) x.tensor = x.tensor.clone();
        }
        for (const auto& id : inputIds) io.inComplete(id);
        if (shapes.empty()) shapes = s;
        for (size_t k = 0; k < s.size(); ++k)
          GRAFT_CHECK(s[k] == shapes[k],
                      "input '{}' of micro-batch {}, replica {} has shape {}, but the step's first "
                      "had {}: every micro-batch and replica of a step has the same shapes",
                      inputIds[k], start + m, i, shapeToString(s[k]), shapeToString(shapes[k]));
        in[m][i] = std::move(v);
      }
    if (!p) {
      p = &planFor(shapes);
      lastPlan = p;
      p->reduction->timeline = lastTimeline.get();
      if (p->reduction->local && localReducePlan != p) {
        std::vector<std::string> names;
        for (const auto& bucket : p->reduction->buckets) names.push_back(bucket.name);
        localReduce->setBuckets(p->reduction->localBuckets, std::move(names));
        localReducePlan = p;
      }
      GRAFT_ASSERT(static_cast<int>(p->replicas.size()) == r, "a replicated session compiled {} replicas, not {}",
                   p->replicas.size(), r);
    }
    // A failed step leaves no partial gradient sums behind: the session stays usable.
    auto discardGradients = [&] {
      if (p->reduction && p->reduction->local) {
        localReduce->discard();  // the others may still be summing this process's accumulators
      } else if (comm && p->reduction) {
        std::lock_guard<std::mutex> lock(p->reduction->commMutex);
        comm->waitAll();  // the all-reduces already started must not write into the next step
      }
      for (auto& rep : p->replicas)
        for (NDArray& a : rep->accumulators)
          if (a.nbytes()) std::memset(a.rawData(), 0, a.nbytes());
      p->reduction->reset();
      exchange->reset();
    };
    p->reduction->target = n * r;
    if (p->replicas[0]->staged) {
      // Each replica's pipeline has its own host loop; inputs were read above, in order.
      std::vector<std::exception_ptr> errors(r);
      auto runOne = [&](int i) {
        try {
          pipeline::HostIO host;
          host.read = [&, i](int m) { return std::move(in[m][i]); };
          host.deliver = [&, i](int m, Values& a) { out[m][i] = std::move(a); };
          p->replicas[i]->staged->executor->run(n, host, nullptr);
        } catch (...) {
          errors[i] = std::current_exception();
          exchange->abort();  // the others fail at their next collective op instead of waiting
        }
      };
      std::vector<std::thread> hosts;
      for (int i = 1; i < r; ++i) hosts.emplace_back(runOne, i);
      runOne(0);
      for (auto& t : hosts) t.join();
      for (auto& e : errors)
        if (e) {
          discardGradients();
          std::rethrow_exception(e);
        }
    } else {
      for (int i = 0; i < r; ++i)
        p->replicas[i]->devices->start([&, i](int) {
          for (int m = 0; m < n; ++m) {
            double t0 = lastTimeline->now();
            try {
              out[m][i] = p->replicas[i]->exe->run(std::move(in[m][i]));
            } catch (...) {
              exchange->abort();  // the others fail at their next collective op instead of waiting
              throw;
            }
            lastTimeline->add({1 + i, "forward and backward", t0, lastTimeline->now() - t0, start + m});
          }
        });
      std::exception_ptr first;
      for (int i = 0; i < r; ++i) {
        try {
          p->replicas[i]->devices->wait();
        } catch (...) {
          if (!first) first = std::current_exception();
        }
      }
      if (first) {
        discardGradients();
        std::rethrow_exception(first);
      }
    }
    for (int m = 0; m < n; ++m)
      for (int i = 0; i < r; ++i) deliverAnchors(io, out[m][i], start + m, sums[i]);
    if (p->applyExe || !p->shardExes.empty()) {
      double t0 = lastTimeline->now();
      reduceGradients(*p);
      double t1 = lastTimeline->now();
      lastTimeline->add({0, "all-reduce wait", t0, t1 - t0, -1});
      if (p->applyExe)
        p->applyExe->run({});
      else
        runShards(*p);
      lastTimeline->add(
          {0, p->applyExe ? "optimizer step" : "sharded optimizer step", t1, lastTimeline->now() - t1, -1});
    }
  }
  ++steps;
  writeTimeline();
  lastRunSeconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

}  // namespace graft
