#pragma once
// Internals shared by the session kinds.
#include <graft/session.hpp>

#include <algorithm>
#include <map>
#include <memory>
#include <mutex>
#include <set>

#include "backends/backend.hpp"
#include "ir/graph.hpp"
#include "onnx/model_io.hpp"
#include "passes/pass.hpp"
#include "passes/pipeline_stages.hpp"
#include "plan/executable.hpp"
#include "runtime/collectives.hpp"
#include "runtime/local_reduce.hpp"
#include "runtime/pipeline.hpp"
#include "runtime/replica_exchange.hpp"
#include "support/thread_pool.hpp"

namespace graft {

struct Session::Impl {
  virtual ~Impl() = default;

  /// Serialises the calls on one session (run, prepareDevice, weights and checkpoint IO,
  /// optimizer updates) from several threads: one session runs one step at a time. Recursive
  /// because public calls nest (run prepares, resetHostWeights writes weights).
  mutable std::recursive_mutex mutex;
  onnxio::Model model;
  DataFlow dataFlow;
  std::shared_ptr<DeviceInfo> device;
  SessionOptions options;
  std::unique_ptr<backends::Backend> backend;
  /// SessionOptions::autoThreads: a one-thread backend and pool for small inference plans.
  std::unique_ptr<backends::Backend> backend1;
  std::unique_ptr<support::ThreadPool> pool1;
  std::unique_ptr<support::ThreadPool> pool;
  std::vector<TensorId> inputIds;
  std::map<TensorId, TensorInfo> inputInfos;

  struct Plan {
    std::unique_ptr<ir::Graph> graph;
    std::unique_ptr<plan::Executable> exe;
    /// The kernel threads `exe` runs on, set by its first step (SessionOptions::autoThreads may
    /// have kept a one-thread copy); 0 until then, and for replicated and staged plans.
    int threads = 0;
    /// autoThreads' one-thread compilation of `graph`, kept while some of `exe`'s steps run its
    /// kernels (tryFewerThreads's mixed plan); its arena is released.
    std::unique_ptr<plan::Executable> oneThread;
    /// Training with gradient accumulation: the optimizer step, run once every
    /// accumulationFactor micro-batches.
    std::unique_ptr<ir::Graph> applyGraph;
    std::unique_ptr<plan::Executable> applyExe;
    /// Sharding and pipelining (virtualGraphMode Manual or Auto): the graph split into programs
    /// that run on the virtual devices; `exe` is null then.
    struct Staged {
      /// Destroys the kernels on the workers that created them (oneDNN's per-thread state).
      ~Staged();
      pipeline::VirtualDevices* devices = nullptr;
      passes::ProgramAssignment assignment;
      std::vector<passes::ProgramGraph> graphs;
      std::vector<std::unique_ptr<plan::Executable>> exes;
      std::unique_ptr<pipeline::PipelineExecutor> executor;
      /// describePrograms() of the split.
      std::string summary;
    };
    std::unique_ptr<Staged> staged;
    /// Replication (runtime/replication.cpp): one copy of the plan per local replica, on the
    /// replica's own virtual devices; `exe` and `staged` above are null then.
    struct Replica {
      /// Destroys the kernels on the worker that created them.
      ~Replica();
      pipeline::VirtualDevices* devices = nullptr;
      /// Replicas after the first own a copy of the graph, with private copies of the state the
      /// step writes (gradient accumulators, running statistics); the first uses `graph` above.
      std::unique_ptr<ir::Graph> ownGraph;
      ir::Graph* graph = nullptr;
      std::unique_ptr<plan::Executable> exe;  ///< unsplit: compiled on the replica's worker
      std::unique_ptr<Staged> staged;         ///< virtual graphs: the replica's own pipeline
      std::vector<NDArray> accumulators;      ///< this replica's buffers of accumulatorIds
    };
    std::vector<std::unique_ptr<Replica>> replicas;
    /// Training with replication: the gradient accumulators, all-reduced across replicas before
    /// every optimizer step.
    std::vector<TensorId> accumulatorIds;
    /// Replication: per accumulator, the replica runs that have added to it in the current weight
    /// update (runtime/replication.cpp; shared_ptr: the type is complete there only).
    struct Reduction;
    std::shared_ptr<Reduction> reduction;
    /// Optimizer-state sharding: per local replica, the optimizer step of its shard (instead of
    /// applyGraph), compiled on the replica's first virtual device.
    std::vector<std::unique_ptr<ir::Graph>> shardGraphs;
    std::vector<std::unique_ptr<plan::Executable>> shardExes;
  };
  /// Optimizer-state sharding (runtime/sharding.cpp): each trained weight's per-element optimizer
  /// state (SGD's velocity, Adam's moments) is split into globalReplicationFactor shards of
  /// ceil(n / G) elements; global replica g holds elements [g s, min(n, (g + 1) s)) of each.
  struct Sharding {
    /// The split optimizer step of one process's replicas without shardOptimizerState: the
    /// per-element state stays whole in the model graph, and each replica's step reads and writes
    /// a view of its slice (only the work is shared out; private_ state is still a copy each).
    bool views = false;
    struct Weight {
      TensorId id;
      int64_t numel = 0, shard = 0;
      std::vector<TensorId> state;     ///< per-element state: sharded
      std::vector<TensorId> private_;  ///< scalar state written by the step (Adam's step): a copy each
    };
    std::vector<Weight> weights;
    /// Per local replica: its shards and private copies, by state id.
    std::vector<std::map<TensorId, NDArray>> state;
    /// True while the model graph holds the full state (gathered for weights IO and checkpoints);
    /// the next step scatters it back into the shards and frees it.
    bool materialized = false;
    int64_t begin(const Weight& w, int global) const { return std::min(w.numel, global * w.shard); }
    int64_t length(const Weight& w, int global) const {
      return std::min(w.numel, begin(w, global) + w.shard) - begin(w, global);
    }
  };
  std::unique_ptr<Sharding> sharding;
  /// Worker threads of the virtual devices (created with the first staged plan; they outlive the
  /// plans, whose kernels they run).
  std::unique_ptr<pipeline::VirtualDevices> virtualDevices;
  /// Replication: each local replica's virtual devices (its own workers, pools and cores).
  std::vector<std::unique_ptr<pipeline::VirtualDevices>> replicaDevices;
  /// Distributed replication: the processes (MPI's world).
  std::shared_ptr<collectives::Communicator> comm;
  /// Distributed replication where the processes of each host can share memory: the gradient
  /// accumulators live there and are summed there (local_reduce.hpp), then across hosts by slices.
  std::shared_ptr<LocalReduce> localReduce;
  /// The plan whose buckets localReduce holds.
  const void* localReducePlan = nullptr;
  /// Training over MPI: moves the accumulators into memory shared with the other processes of
  /// this host, when every host has the same number of them, more than one (collective;
  /// GRAFT_LOCAL_REDUCE=0 turns it off).
  void shareAccumulators(const std::vector<TensorId>& weights);
  /// Replication: the collective ops' rendezvous; each replica's workers carry its context.
  std::unique_ptr<ReplicaExchange> exchange;
  /// Distributed replication: whether weights were broadcast from rank 0 yet.
  bool weightsBroadcast = false;
  std::map<std::vector<Shape>, std::unique_ptr<Plan>> plans;
  Plan* lastPlan = nullptr;
  bool prepared = false;
  double lastRunSeconds = 0, lastCompileSeconds = 0;
  /// What every thread did during the last step (SessionOptions::timelinePath writes it).
  std::unique_ptr<pipeline::Timeline> lastTimeline;
  int64_t steps = 0;

  /// Loads the model, checks anchors, inputs and op support.
  void init(const std::string& modelArg, const DataFlow& df, std::shared_ptr<DeviceInfo> dev,
            const InputShapeInfo& shapes, const SessionOptions& opts);
  /// The graph to compile (inference: the model's graph; training adds the backward pass).
  virtual const ir::Graph& sourceGraph() const { return *model.graph; }
  /// The passes run before compiling: the backend's own.
  virtual const std::vector<std::string>& pipeline() const { return backend->passes(backends::PassMode::Inference); }
  virtual bool weightsAreConstant() const { return options.constantWeights; }
  /// Adds to a plan's graph (inputs typed, before anchors are set) what the session kind needs:
  /// training adds the backward pass and the optimizer.
  virtual void transform(ir::Graph& g, Plan& p) {}
  /// Throws when `id` cannot be an anchor.
  virtual void checkAnchor(const TensorId& id) const;
  /// Micro-batches per batch (gradient accumulation factor; 1 for inference).
  virtual int accumulationFactor() const { return 1; }
  virtual bool isTraining() const { return false; }
  /// Training: the tensor the backward pass starts from (backward nodes depend on it).
  virtual const ir::Tensor* lossGradientSeed(const ir::Graph&) const { return nullptr; }
  /// Leading dimensions of StepIO arrays: [batchesPerStep, accumulationFactor], each if > 1.
  Shape leadingDims() const;
  /// Persistent tensors a user may read and write with WeightsIO.
  virtual std::vector<TensorId> persistentIds() const;

  /// The plan for these input shapes (compiled on first use).
  Plan& planFor(const std::vector<Shape>& shapes);
  /// Shapes from the model (with InputShapeInfo applied) when all are static.
  std::optional<std::vector<Shape>> staticInputShapes() const;
  void run(IStepIO& io);

  // Sharding and pipelining (runtime/pipeline_session.cpp).
  /// True when virtualGraphMode is Manual or Auto: plans are split into programs.
  bool usesStages() const { return options.virtualGraphMode != VirtualGraphMode::Off; }
  passes::StageConfig stageConfig() const;
  /// Checks the options and the model's annotations at session creation.
  void checkStages() const;
  /// Splits a plan's graph (input shapes set, session transform done) into programs and compiles
  /// them on the virtual devices.
  void compileStaged(Plan& p);
  void runStaged(IStepIO& io);
  /// Compiles `g`'s programs on `devs` (compileStaged's work, for one replica).
  std::unique_ptr<Plan::Staged> compileStagedGraph(ir::Graph& g, pipeline::VirtualDevices& devs);
  /// Writes lastTimeline where SessionOptions::timelinePath says.
  void writeTimeline() const;

  // Replication (runtime/replication.cpp).
  /// Replicas in this process (1 without replication).
  int localReplicas() const { return options.enableReplicatedGraphs ? options.replicatedGraphCount : 1; }
  /// Replicas in all processes.
  int globalReplicas() const {
    return options.enableDistributedReplicatedGraphs ? options.globalReplicationFactor : localReplicas();
  }
  /// True when plans are replicated (several replicas here, or replicas in other processes).
  bool replicated() const { return localReplicas() > 1 || options.enableDistributedReplicatedGraphs; }
  /// Virtual devices each replica runs on.
  int virtualDevicesPerReplica() const { return device->numVirtualDevices() / localReplicas(); }
  /// Checks the replication options against the device and the cores; joins MPI's world.
  void checkReplication();
  /// Replicated: gives the model's collective ops (ops/collectives.cpp) the global replica count
  /// and infers their shapes again.
  void bindCollectives();
  /// Compiles one copy of a plan's graph per local replica.
  void compileReplicated(Plan& p);
  void runReplicated(IStepIO& io);
  /// Sums the gradient accumulators of all replicas (here, then over MPI) into the first's: those
  /// whose reduction has not started yet, then waits for all.
  void reduceGradients(Plan& p);
  /// Groups the accumulators into buckets of SessionOptions::gradientBucketBytes, in the order
  /// the backward pass completes them.
  void formBuckets(Plan& p);
  /// Sums bucket b's accumulators of all replicas into the first's and starts its all-reduce over
  /// MPI (`replica`: whose worker runs it, -1: the host; for the timeline).
  void startBucket(Plan& p, size_t b, int replica);
  /// Runs on replica `replica`'s worker after each node: once every replica's last Accumulate of
  /// a weight update has run for each accumulator of a bucket, the bucket's reduction starts
  /// (overlapping the rest of the backward pass).
  void afterReplicaNode(Plan& p, const ir::Node& n, int replica);
  /// Replicated: writes `value` into the replicas' private copies of persistent tensor `id`
  /// (state a step writes in place: running statistics, the dropout seed), where they have one.
  void writeReplicaCopies(const TensorId& id, const NDArray& value);
  // Optimizer-state sharding (runtime/sharding.cpp).
  /// True when SessionOptions::shardOptimizerState applies (a replicated training session).
  bool shardsOptimizerState() const { return options.shardOptimizerState && isTraining() && replicated(); }
  /// True when each local replica runs the optimizer step of its slice of every weight on its
  /// own worker, after summing that slice of every replica's gradient: with shardOptimizerState,
  /// and in one process with several replicas where the optimizer allows it (set at creation;
  /// docs/replication.md, "The optimizer step").
  bool splitsOptimizerStep() const { return shardsOptimizerState() || splitUnshardedStep; }
  /// True when a weight update has one micro-batch (replication without gradient accumulation):
  /// its one Accumulate overwrites the accumulator (`Accumulate {overwrite=1}`), so nothing zeroes
  /// the accumulators between updates.
  bool overwritesAccumulators() const { return accumulationFactor() <= 1; }
  bool splitUnshardedStep = false;
  /// Training: the trained weights and their optimizer state, split into shards (once).
  virtual void setUpSharding() {}
  /// Training: local replica i's optimizer step over its shards of p's accumulators.
  virtual std::unique_ptr<ir::Graph> buildShardGraph(Plan& p, int i) { return nullptr; }
  /// Builds and compiles p's shard programs.
  void compileShards(Plan& p);
  /// Each replica updates its shard, then the weights' shards are all-gathered (over MPI).
  void runShards(Plan& p);
  /// The full optimizer state into the model graph (all-gathered over MPI: every process calls it).
  void materializeShardedState();
  /// The model graph's state back into the shards; frees it there.
  void releaseShardedState();
  /// Bytes of optimizer state each local replica's optimizer step holds (the last plan's).
  std::vector<int64_t> replicaOptimizerStateBytes() const;
  /// Distributed: weights and optimizer state from rank 0 to every process.
  void broadcastWeights();
  /// Distributed: throws unless every process has the same model and options.
  void checkPeersAgree();

  // Shared by run() and runStaged().
  /// Checks a StepIO's arrays and starts its step.
  void beginStep(IStepIO& io);
  /// Inputs whose INT64 data readInputs converted to INT32 (warned about once each).
  std::set<TensorId> int64InputsWarned_;
  /// The inputs of the next micro-batch from `io`, checked against the model's input types.
  std::vector<ops::Value> readInputs(IStepIO& io);
  /// Running sums of Sum anchors within a step.
  using AnchorSums = std::map<TensorId, NDArray>;
  /// Hands micro-batch r's anchors (DataFlow order) to `io` as their AnchorReturnTypes say.
  void deliverAnchors(IStepIO& io, const std::vector<ops::Value>& outs, int r, AnchorSums& sums);
  /// One batch through the plan for these inputs (tensors, sequences or optionals, in
  /// inputIds order); returns the anchors in DataFlow order. `shapes` keys the plan cache.
  std::vector<ops::Value> execute(std::vector<ops::Value> inputs);
  /// Kernel threads of each virtual device: SessionOptions::numThreads, else the device's; 1 on
  /// the reference device, whose kernels are single-threaded.
  int threadsPerDevice() const {
    if (device->type() == DeviceType::Reference) return 1;
    return options.numThreads > 0 ? options.numThreads : device->threadsPerVirtualDevice();
  }
  /// The first step of plan p (SessionOptions::autoThreads): times p.exe against a one-thread
  /// copy on these inputs, keeps the faster, and runs the step on it.
  std::vector<ops::Value> tryFewerThreads(Plan& p, std::vector<ops::Value> inputs);
  Plan& anyPlan() const;
};

/// Loads a model argument that is either a file path or serialized ONNX bytes.
onnxio::Model loadModelArgument(const std::string& model);

}  // namespace graft
