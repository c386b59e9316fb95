#pragma once
// Collectives between the processes of a distributed session (docs/replication.md). The MPI
// implementation (collectives_mpi.cpp) starts every operation non-blocking and polls it against
// a deadline, so that a peer that died or hangs makes the others fail with graft::Error instead
// of waiting forever.
#include <graft/ndarray.hpp>

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

namespace graft::collectives {

/// Memory the processes of one host share (Communicator::shareWithLocalProcesses): a segment of
/// the same size for each of them, mapped in every one. Unmapped on destruction; nothing waits.
class SharedSegments {
 public:
  virtual ~SharedSegments() = default;
  /// The segment of local process `i` (0 .. localSize() - 1), page-aligned, zero at first.
  virtual char* segment(int i) const = 0;
  /// Bytes in each segment.
  virtual size_t bytes() const = 0;
  virtual int localRank() const = 0;
  virtual int localSize() const = 0;
};

/// The processes of a distributed session.
class Communicator {
 public:
  virtual ~Communicator() = default;
  virtual int rank() const = 0;
  virtual int size() const = 0;
  /// This process's index among the processes on its host, and how many there are (MPI's
  /// shared-memory split): the processes of one host share its cores (replication.cpp).
  virtual int localRank() const { return 0; }
  virtual int localSize() const { return 1; }
  /// Starts summing `a` (Float or Double, contiguous) over all processes, in place; `what` names it
  /// in errors. The array must stay alive and untouched until waitAll().
  virtual void startAllreduceSum(NDArray a, const std::string& what) = 0;
  /// Moves the operations started since the last waitAll() on, without waiting (MPI progresses a
  /// non-blocking operation only inside MPI calls); returns at once when another thread is in a
  /// call. Called between the kernels of the backward pass.
  virtual void progress() {}
  /// Waits for every operation started since the last waitAll(); throws graft::Error naming the
  /// first that did not finish within the timeout.
  virtual void waitAll() = 0;
  /// Copies `a` from process `root` into every other process's `a` (blocking, with the timeout).
  virtual void broadcast(NDArray a, int root, const std::string& what) = 0;
  /// Every process's `value`, by rank (blocking, with the timeout).
  virtual std::vector<uint64_t> allgather(uint64_t value, const std::string& what) = 0;
  /// Every process's `bytes` bytes at `data` (the same count in every process), by rank, on a
  /// communicator of their own (the collective ops'), so that they never interleave with the
  /// operations above (blocking, with the timeout). Thread-safe, as are all the calls here.
  virtual std::vector<uint8_t> allgatherBytes(const void* data, size_t bytes, const std::string& what) = 0;
  /// Seconds an operation may take before it fails.
  virtual void setTimeout(double seconds) = 0;
  /// The processes with this process's local rank, one on each host (collective, with the
  /// timeout): a hierarchical reduction sums over a host in shared memory, then across hosts
  /// here. Null where there is no host split.
  virtual std::shared_ptr<Communicator> acrossHosts(const std::string& what) {
    (void)what;
    return nullptr;
  }
  /// `bytes` of memory for each process on this host, shared by all of them (collective over
  /// them, with the timeout); `what` names it in messages. Null, in every one of them, when there
  /// is a single local process or the host cannot provide it (then a warning says why).
  virtual std::unique_ptr<SharedSegments> shareWithLocalProcesses(size_t bytes, const std::string& what) {
    (void)bytes, (void)what;
    return nullptr;
  }
};

/// True when graft was built with MPI.
bool mpiAvailable();
/// MPI's world (MPI is initialised on the first call, finalised at exit unless a collective
/// failed). Throws graft::Error when graft was built without MPI.
std::shared_ptr<Communicator> mpiWorld();

}  // namespace graft::collectives
