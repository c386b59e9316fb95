#pragma once
/// @file options.hpp  Session options (PopART's SessionOptions, plus graft's own).
#include <map>
#include <string>
#include <vector>

namespace graft {

enum class VirtualGraphMode { Off, Manual, Auto };
enum class RecomputationType { None, Standard, NormOnly, Pipeline, RecomputeAll };
/// How gradients of micro-batches combine under gradient accumulation.
enum class ReductionType { Sum, Mean, NoReduction };

/// PopART-compatible session options. Fields PopART has that do not apply to graft's devices
/// are accepted by the Python layer with a warning (see docs/python-api.md).
struct SessionOptions {
  // Training.
  bool enableGradientAccumulation = false;
  int accumulationFactor = 1;
  /// Sum (PopART's default) or Mean of the accumulated micro-batch gradients.
  ReductionType accumulationAndReplicationReductionType = ReductionType::Sum;
  // Sharding and pipelining.
  VirtualGraphMode virtualGraphMode = VirtualGraphMode::Off;
  bool enablePipelining = false;
  RecomputationType autoRecomputation = RecomputationType::None;
  // Replication.
  bool enableReplicatedGraphs = false;
  int replicatedGraphCount = 1;
  // Inference: weights never change after prepareDevice, so computations on them may be folded.
  bool constantWeights = true;

  // graft's own.
  /// Kernel threads per virtual device (0: the device's default).
  int numThreads = 0;
  /// Collect per-op timings (Session::profile()).
  bool enableProfiling = false;
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
