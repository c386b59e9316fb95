#pragma once
/// @file options.hpp  Session options (PopART's SessionOptions, plus graft's own).
#include <cstdint>
#include <map>
#include <string>
#include <vector>

namespace graft {

enum class VirtualGraphMode { Off, Manual, Auto };
enum class RecomputationType { None, Standard, NormOnly, Pipeline, RecomputeAll };
/// How gradients of micro-batches combine under gradient accumulation.
enum class ReductionType { Sum, Mean, NoReduction };
/// Where the division of a Mean reduction happens (PopART's MeanReductionStrategy). graft divides
/// once, after accumulating and all-reducing, for every strategy: the results differ from PopART's
/// Running strategy only by rounding.
enum class MeanReductionStrategy { Running, Post, PostAndLoss };

/// PopART-compatible session options. Fields PopART has that do not apply to graft's devices
/// are accepted by the Python layer with a warning (see docs/python-api.md).
struct SessionOptions {
  // Training.
  bool enableGradientAccumulation = false;
  int accumulationFactor = 1;
  /// Sum (PopART's default) or Mean of the accumulated micro-batch gradients.
  ReductionType accumulationAndReplicationReductionType = ReductionType::Sum;
  /// With a Mean reduction: see MeanReductionStrategy.
  MeanReductionStrategy meanAccumulationAndReplicationReductionStrategy = MeanReductionStrategy::Post;
  // Sharding and pipelining.
  VirtualGraphMode virtualGraphMode = VirtualGraphMode::Off;
  bool enablePipelining = false;
  RecomputationType autoRecomputation = RecomputationType::None;
  // Replication.
  /// Data parallelism (docs/replication.md): replicatedGraphCount copies of the graph in this
  /// process, each on its own virtual devices, gradients all-reduced before every weight update.
  bool enableReplicatedGraphs = false;
  /// Replicas in this process.
  int replicatedGraphCount = 1;
  /// Replicas in several processes (over MPI): globalReplicationFactor replicas in all, this
  /// process holding replicas [globalReplicaOffset, globalReplicaOffset + replicatedGraphCount).
  bool enableDistributedReplicatedGraphs = false;
  int globalReplicationFactor = 1;
  int globalReplicaOffset = 0;
  // Inference: weights never change after prepareDevice, so computations on them may be folded.
  bool constantWeights = true;

  // graft's own.
  /// Kernel threads per virtual device (0: the device's default).
  int numThreads = 0;
  /// Inference on the cpu device with more than one kernel thread: when the first step of a plan
  /// takes under 20 ms, it is also compiled for one thread, both are timed on that step's inputs,
  /// step by step, and the fastest of the two and a mixed plan (the steps that ran faster on one
  /// thread on one thread) runs from then on (docs/cpu-backend.md, "Threads": with passive OpenMP
  /// waits every short parallel region wakes a sleeping thread). Session::kernelThreads() says
  /// whether it is the one-thread plan, the profile names the steps on one thread; false keeps
  /// numThreads. GRAFT_AUTO_THREADS=0 turns it off, =1 keeps the one-thread plan and =steps the
  /// mixed plan with every step that can, whatever the timing says (for tests).
  bool autoThreads = true;
  /// Collect per-op timings (Session::profile()).
  bool enableProfiling = false;
  /// With enableProfiling: one profile entry per node (OpProfile::node names it) instead of one
  /// per op type, to find the slow nodes of a model.
  bool profileByNode = false;
  /// Run the cpu device's matmuls and convolutions (MatMul, Gemm, Conv, ConvTranspose, and in
  /// training their gradients) in bfloat16 with float32 accumulation and float32 outputs; every
  /// other op, the weights and the optimizer update stay float32 (docs/cpu-backend.md). Needs a
  /// CPU with avx512_bf16 (below GRAFT_CPU_ISA) and the cpu device: otherwise the session throws
  /// graft::Error naming the option.
  bool enableBf16 = false;
  /// Verify the IR after every pass (slower compilation; for debugging).
  bool verifyPasses = false;
  /// Print the graph after the pass with this id (see graft inspect --passes).
  std::string dumpGraphAfterPass;
  /// Folder for logs and dumps (empty: none written).
  std::string logDir;
  /// After every step, write what each thread did (per virtual device: busy and idle time, each
  /// program and micro-batch) as a Chrome trace JSON file here (open it in chrome://tracing or
  /// ui.perfetto.dev). "{step}" in the path is replaced by the step number (from 0), to keep one
  /// file per step; otherwise each step overwrites the file. Empty: nothing is written.
  std::string timelinePath;
  /// Pipelining: micro-batches inside the pipeline at once (bounds every queue between stages);
  /// 0: twice the number of programs.
  int pipelineDepth = 0;
  /// Watch for non-finite values: after every model run an anchor (the loss, when anchored)
  /// holding NaN or inf, and after every step a weight or optimizer state that went non-finite
  /// (a gradient or update that was not finite), throws graft::Error naming the step and the
  /// first such tensor. Off by default (it scans the values); `graft train` turns it on.
  bool detectNonFinite = false;
  /// Distributed replication: seconds a process waits for its peers in a collective (all-reduce,
  /// broadcast, the option check) before it fails with graft::Error (a peer died or hangs).
  double collectiveTimeoutSeconds = 60;
  /// Replication: gradients are all-reduced in buckets of about this many bytes, each bucket as
  /// soon as its last gradient is complete (overlapping the rest of the backward pass); a bucket
  /// closes once it holds at least this many bytes. 0: one all-reduce per gradient tensor.
  /// graft's own (PopART has no such option; PyTorch's DDP calls it bucket_cap_mb).
  int64_t gradientBucketBytes = 4 << 20;
  /// Replicated training: shard the optimizer state and the weight update across the replicas
  /// (PopART's replicated tensor sharding of the optimizer state, ZeRO's stage 1): each replica
  /// holds and updates 1/globalReplicationFactor of every weight's optimizer state, then the
  /// updated weight shards are all-gathered. The Python layer also sets it from PopART's
  /// optimizerStateTensorLocationSettings.location.replicatedTensorSharding = On.
  bool shardOptimizerState = false;
};

}  // namespace graft

namespace graft {

/// PopART's pattern levels. graft's own graph passes replace PopART's patterns; the object is
/// accepted so that PopART programs run unchanged, and its settings are recorded.
enum class PatternsLevel { NoPatterns, Minimal, Default, All };

class Patterns {
 public:
  Patterns(PatternsLevel level = PatternsLevel::Default) : level_(level) {}  // NOLINT
  explicit Patterns(std::vector<std::string> names) : level_(PatternsLevel::Default), names_(std::move(names)) {}
  PatternsLevel level() const { return level_; }
  const std::vector<std::string>& names() const { return names_; }
  Patterns& enableRuntimeAsserts(bool) { return *this; }

 private:
  PatternsLevel level_;
  std::vector<std::string> names_;
};

}  // namespace graft
