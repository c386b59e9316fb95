#pragma once
// The gradient all-reduce between the processes of one host through memory they share
// (docs/replication.md, "Processes on one host"). Each process's gradient accumulators live in its
// segment of a shared-memory object (collectives::SharedSegments), at the same offsets in every
// segment. When a bucket of accumulators is complete in every process, local process j sums
// slice j of the bucket over all the segments and writes the sum into every segment's slice j:
// afterwards each process's accumulators hold the sum over the host, and no byte went through
// MPI. Flags at the start of each segment say how far each process is: a bucket's "ready" flag
// (its accumulators are complete) and its "done" flag (this process's slice of it is summed
// everywhere), each set to the step's generation, which counts the reductions.
// With processes on other hosts too (`across`: the processes of this local rank, one per host),
// local process j sums slice j over its host into its own segment, all-reduces that slice with
// its peers on the other hosts over MPI, and writes the result into the other local segments
// once that completes (in wait()).
#include <graft/ndarray.hpp>

#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "runtime/collectives.hpp"

namespace graft {

class LocalReduce {
 public:
  /// Part of a bucket: `numel` elements of `dtype` at `offset` bytes into every process's segment.
  struct Span {
    size_t offset = 0;
    int64_t numel = 0;
    DataType dtype = DataType::Float;
  };
  using Bucket = std::vector<Span>;

  /// Flags for up to `maxBuckets` buckets at the start of each segment; `timeoutSeconds` bounds
  /// every wait for the other processes.
  LocalReduce(std::unique_ptr<collectives::SharedSegments> memory, size_t maxBuckets, double timeoutSeconds,
              std::shared_ptr<collectives::Communicator> across = nullptr);
  /// True when the reduction continues across hosts.
  bool hierarchical() const { return across_ != nullptr; }
  /// The bytes of flags for `maxBuckets` buckets (where the accumulators may start).
  static size_t headerBytes(size_t maxBuckets);
  int localRank() const { return memory_->localRank(); }
  int localSize() const { return memory_->localSize(); }
  /// Elements of this process's segment at `offset` as an array (which keeps the memory mapped).
  NDArray array(size_t offset, DataType dtype, const Shape& shape) const;
  /// Where `bytes` bytes at `p` lie in this process's segment, or -1 when they are not all in it.
  int64_t offsetOf(const void* p, size_t bytes) const;
  /// The buckets of the coming reductions (the same in every process) and their names for errors.
  void setBuckets(std::vector<Bucket> buckets, std::vector<std::string> names);
  size_t numBuckets() const { return buckets_.size(); }
  /// Bucket b's accumulators are complete in this process: its sums may start.
  void ready(size_t b);
  /// Sums this process's slice of every bucket that all processes have made ready; returns at
  /// once when another thread is in a call. Called between the kernels of the backward pass.
  void progress();
  /// Waits until every process has summed its slice of every bucket: the accumulators then hold
  /// the sums over the host. Throws graft::Error naming the bucket and the process that did not
  /// get there within the timeout (after which the reduction cannot be used again).
  void wait();
  /// Forgets a failed step: when this process made buckets ready (the others may read them), it
  /// waits for those as wait() does; then the next reduction starts afresh.
  void discard();

 private:
  int64_t& flag(int process, size_t b, int which) const;
  /// Whether `process` has raised its flag `which` of bucket b in this generation (acquire).
  bool reached(int process, size_t b, int which) const;
  /// Raises this process's flag `which` of bucket b to this generation (release: what it wrote
  /// before is visible to whoever sees the flag).
  void raise(size_t b, int which);
  void checkUsable() const;
  /// The first process that has not reached flag `which` of bucket b in this generation, or -1.
  int firstBehind(size_t b, int which) const;
  /// Sums this process's slice of bucket b over the host: into every segment, or (across hosts)
  /// into its own, then starts the slice's all-reduce across hosts.
  void sumSlice(size_t b);
  void progressLocked();
  void waitFor(const std::vector<size_t>& buckets, int which);
  [[noreturn]] void timedOut(size_t b);
  /// Across hosts: the slices summed here and all-reduced across hosts, then copied into the
  /// other local segments; the done flags follow.
  void finishAcross();
  /// Waits until `buckets` are summed everywhere, then starts the next generation.
  void complete(const std::vector<size_t>& buckets);

  std::shared_ptr<collectives::SharedSegments> memory_;
  std::shared_ptr<collectives::Communicator> across_;
  struct Region {
    size_t offset, bytes;
  };
  std::vector<Region> crossed_;  ///< this generation's slices all-reduced across hosts
  size_t maxBuckets_;
  double timeout_;
  std::vector<Bucket> buckets_;
  std::vector<std::string> names_;
  std::vector<bool> mine_;    ///< per bucket: ready here in this generation
  std::vector<bool> summed_;  ///< per bucket: this process's slice summed in this generation
  int64_t generation_ = 1;
  bool broken_ = false;
  std::mutex mu_;
};

}  // namespace graft
