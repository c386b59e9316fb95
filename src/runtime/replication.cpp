// Data parallelism (docs/replication.md). A replicated plan is compiled once per local replica,
// each copy on the replica's own virtual devices (worker threads, kernel pools, cores). A step
// reads the micro-batches of every replica on the host thread, in PopART's order (micro-batch
// major, replica minor), runs the replicas side by side, and before each optimizer step sums the
// replicas' gradient accumulators, here and then over MPI across processes. The optimizer step
// itself runs once per process on the shared weights, so replicas can never drift apart.
#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstring>
#include <map>
#include <mutex>
#include <set>
#include <thread>

#include "ops/dtype_dispatch.hpp"
#include "ops/registry.hpp"
#include "passes/training_mode.hpp"
#include "runtime/session_impl.hpp"
#include "support/check.hpp"
#include "support/logging.hpp"

namespace graft {
namespace {

int kernelThreads(const SessionOptions& o, const DeviceInfo& d) {
  if (d.type() == DeviceType::Reference) return 1;
  return o.numThreads > 0 ? o.numThreads : d.threadsPerVirtualDevice();
}

void addInto(NDArray& acc, const NDArray& v, const std::string& what) {
  ops::dispatch<ops::kFloats>(acc.dtype(), what, [&](auto tag) {
    using T = typename decltype(tag)::type;
    using C = ops::ComputeType<T>;
    T* a = acc.data<T>();
    const T* b = v.data<T>();
    for (int64_t i = 0; i < acc.numel(); ++i) a[i] = static_cast<T>(static_cast<C>(a[i]) + static_cast<C>(b[i]));
  });
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
  std::unique_ptr<std::atomic<int>[]> added;
  std::unique_ptr<std::atomic<bool>[]> started;
  /// Accumulate runs per accumulator in one weight update: micro-batches x local replicas.
  int target = 0;
  std::mutex commMutex;  ///< MPI calls come from several workers, one at a time
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
  const int threads = kernelThreads(o, *device);
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
  const int threads = kernelThreads(options, *device);
  if (replicaDevices.empty()) {
    auto blocks = pipeline::VirtualDevices::cpuBlocks(r * per, threads);
    for (int i = 0; i < r; ++i) {
      std::vector<std::vector<int>> mine;
      if (!blocks.empty()) mine.assign(blocks.begin() + i * per, blocks.begin() + (i + 1) * per);
      replicaDevices.push_back(std::make_unique<pipeline::VirtualDevices>(device->type(), per, threads, mine));
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
  red->started.reset(new std::atomic<bool>[count]);
  for (size_t k = 0; k < count; ++k) red->added[k] = 0, red->started[k] = false;
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
      rep->exe->setProfiling(options.enableProfiling);
    }
    if (count == 0) continue;
    Plan* plan = &p;
    auto hook = [this, plan](const ir::Node& n) { afterReplicaNode(*plan, n); };
    if (rep->exe) rep->exe->setAfterNode(hook);
    if (rep->staged)
      for (auto& e : rep->staged->exes) e->setAfterNode(hook);
  }
}

void Session::Impl::afterReplicaNode(Plan& p, const ir::Node& n) {
  if (n.type() != "Accumulate" || n.numInputs() < 1 || !n.input(0)) return;
  Plan::Reduction& red = *p.reduction;
  auto it = red.index.find(n.input(0)->id());
  if (it == red.index.end()) return;
  // The last replica to finish this gradient sums it, while the others go on with backward.
  if (red.added[it->second].fetch_add(1) + 1 != red.target) return;
  reduceAccumulator(p, it->second);
}

void Session::Impl::reduceAccumulator(Plan& p, size_t k) {
  Plan::Reduction& red = *p.reduction;
  if (red.started[k].exchange(true)) return;
  const TensorId& id = p.accumulatorIds[k];
  NDArray& sum = p.replicas[0]->accumulators[k];
  for (size_t i = 1; i < p.replicas.size(); ++i) {
    NDArray& a = p.replicas[i]->accumulators[k];
    addInto(sum, a, "all-reduce of '" + id + "'");
    if (a.nbytes()) std::memset(a.rawData(), 0, a.nbytes());
  }
  if (comm) {
    std::lock_guard<std::mutex> lock(red.commMutex);
    comm->startAllreduceSum(sum, id);
  }
}

void Session::Impl::reduceGradients(Plan& p) {
  Plan::Reduction& red = *p.reduction;
  // Accumulators whose last Accumulate did not report (none should) are reduced here.
  for (size_t k = 0; k < p.accumulatorIds.size(); ++k) reduceAccumulator(p, k);
  if (comm) {
    std::lock_guard<std::mutex> lock(red.commMutex);
    comm->waitAll();
  }
  for (size_t k = 0; k < p.accumulatorIds.size(); ++k) red.added[k] = 0, red.started[k] = false;
}

void Session::Impl::broadcastWeights() {
  for (const TensorId& id : persistentIds()) {
    ir::Tensor* t = model.graph->findTensor(id);
    if (!t || !t->data() || t->data()->dtype() == DataType::String) continue;
    comm->broadcast(*t->mutableData(), 0, id);
  }
  weightsBroadcast = true;
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
  beginStep(io);
  lastTimeline.reset();
  const int r = localReplicas();
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
      GRAFT_ASSERT(static_cast<int>(p->replicas.size()) == r, "a replicated session compiled {} replicas, not {}",
                   p->replicas.size(), r);
    }
    // A failed step leaves no partial gradient sums behind: the session stays usable.
    auto discardGradients = [&] {
      if (comm && p->reduction) {
        std::lock_guard<std::mutex> lock(p->reduction->commMutex);
        comm->waitAll();  // the all-reduces already started must not write into the next step
      }
      for (auto& rep : p->replicas)
        for (NDArray& a : rep->accumulators)
          if (a.nbytes()) std::memset(a.rawData(), 0, a.nbytes());
      for (size_t k = 0; k < p->accumulatorIds.size(); ++k)
        p->reduction->added[k] = 0, p->reduction->started[k] = false;
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
          for (int m = 0; m < n; ++m) out[m][i] = p->replicas[i]->exe->run(std::move(in[m][i]));
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
    if (p->applyExe) {
      reduceGradients(*p);
      p->applyExe->run({});
    }
  }
  ++steps;
  lastRunSeconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

}  // namespace graft
