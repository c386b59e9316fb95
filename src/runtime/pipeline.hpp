#pragma once
// The pipeline executor: one worker thread per virtual device, each with its own kernel thread
// pool and backend (and, where the cores suffice, its own cores). A split plan's programs run on
// their devices' workers once per micro-batch; tensors crossing programs travel through bounded
// FIFO queues, and at most `maxInFlight` micro-batches are inside the pipeline at once (fill,
// steady state, drain). The calling thread is the host: it feeds micro-batches and collects
// anchors.
#include <graft/device.hpp>

#include <chrono>
#include <condition_variable>
#include <deque>
#include <exception>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "backends/backend.hpp"
#include "ops/kernel.hpp"
#include "plan/executable.hpp"
#include "support/thread_pool.hpp"

namespace graft::pipeline {

/// What every thread did during one step, for a Chrome trace (chrome://tracing, ui.perfetto.dev).
class Timeline {
 public:
  struct Event {
    int thread;  ///< 0: host, 1 + i: virtual device i
    std::string name;
    double start, duration;  ///< seconds since the timeline began
    int microBatch;          ///< -1: none
  };
  explicit Timeline(std::vector<std::string> threadNames);
  /// Seconds since construction.
  double now() const;
  /// Thread-safe.
  void add(Event e);
  /// The trace as JSON: busy events per thread, and idle events filling the gaps of the workers.
  std::string chromeTraceJson() const;
  /// Busy seconds per thread.
  std::vector<double> busySeconds() const;

 private:
  std::vector<std::string> names_;
  std::chrono::steady_clock::time_point t0_;
  mutable std::mutex mu_;
  std::vector<Event> events_;
};

/// Worker threads, one per virtual device, each owning a kernel thread pool and a backend.
class VirtualDevices {
 public:
  /// `cpus[i]` (when not empty) pins device i's worker and its pool to those CPUs. `bf16`: the
  /// cpu backends compute matmuls and convolutions in bf16 (SessionOptions.enableBf16).
  VirtualDevices(DeviceType type, int count, int threadsEach, const std::vector<std::vector<int>>& cpus,
                 bool bf16 = false);
  ~VirtualDevices();
  VirtualDevices(const VirtualDevices&) = delete;
  VirtualDevices& operator=(const VirtualDevices&) = delete;

  int size() const { return static_cast<int>(workers_.size()); }
  support::ThreadPool& pool(int i);
  backends::Backend& backend(int i);
  /// True when device i's worker is pinned to its CPUs.
  bool pinned(int i) const;
  /// Runs fn on device i's worker and waits for it; rethrows its error. Kernels are compiled on
  /// the thread that runs them: oneDNN keeps per-thread state (its global scratchpad) that a
  /// primitive created on one thread and executed on another would miss.
  void runOn(int i, const std::function<void()>& fn);
  /// Starts fn(i) on every device's worker (asynchronously).
  void start(const std::function<void(int)>& fn);
  /// Waits until every worker has finished what start() gave it; rethrows the first error.
  void wait();

  /// Disjoint blocks of `threadsEach` CPUs of this process's CPUs for `count` devices; empty
  /// lists when there are not enough CPUs (the workers are then not pinned). `share` of
  /// `shares` (the processes of one host that see the same CPUs, each with `count` devices):
  /// the blocks start after those of the shares before it, and are empty when the CPUs are too
  /// few for all of them.
  static std::vector<std::vector<int>> cpuBlocks(int count, int threadsEach, int share = 0, int shares = 1);

 private:
  struct Worker;
  std::vector<std::unique_ptr<Worker>> workers_;
};

/// Where a program input or an anchor comes from.
struct Source {
  int program = -1;  ///< -1: the host (a model input)
  int index = 0;     ///< output index of the program, or index of the model input
};

/// One program of a split plan.
struct ProgramRun {
  std::string name;
  int device = 0;
  plan::Executable* exe = nullptr;
  std::vector<Source> inputs;  ///< one per exe input
};

/// The host side of a run over micro-batches.
struct HostIO {
  /// The model inputs of micro-batch m (called on the host thread, in order).
  std::function<std::vector<ops::Value>(int m)> read;
  /// The anchors of micro-batch m, in anchor order (called on the host thread, in order).
  std::function<void(int m, std::vector<ops::Value>& anchors)> deliver;
};

/// Runs the programs of one plan over micro-batches.
class PipelineExecutor {
 public:
  PipelineExecutor(VirtualDevices& devices, std::vector<ProgramRun> programs, std::vector<Source> anchors,
                   int maxInFlight);

  /// Runs `count` micro-batches through the programs; returns when all are delivered. Throws the
  /// first error of any thread (the other threads stop at their next micro-batch).
  void run(int count, const HostIO& io, Timeline* timeline);

  int maxInFlight() const { return maxInFlight_; }
  const std::vector<ProgramRun>& programs() const { return programs_; }

 private:
  struct Edge {
    int program, input;  ///< consumer (program -1: an anchor)
  };
  void workerLoop(int device, int count, Timeline* tl);
  bool runnable(int p, int count) const;
  void fail(std::exception_ptr e);

  VirtualDevices& devices_;
  std::vector<ProgramRun> programs_;
  std::vector<Source> anchors_;
  int maxInFlight_;
  /// Per program output (and per model input): the queues it feeds.
  std::vector<std::vector<std::vector<Edge>>> consumers_;
  std::vector<std::vector<Edge>> hostConsumers_;

  // Run state, guarded by mu_.
  std::mutex mu_;
  std::condition_variable cv_;
  std::vector<std::vector<std::deque<ops::Value>>> queues_;  ///< [program][input]
  std::vector<std::deque<ops::Value>> anchorQueues_;
  std::vector<int> next_;      ///< next micro-batch of each program
  std::vector<int> finished_;  ///< per in-flight slot: programs done with that micro-batch
  int fed_ = 0, collected_ = 0, inFlight_ = 0;
  bool abort_ = false;
  std::exception_ptr error_;
};

}  // namespace graft::pipeline
