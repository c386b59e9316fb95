#pragma once
// The rendezvous of a replicated session's collective ops (ops/collectives.cpp): each local
// replica's worker threads carry a ReplicaContext whose exchange() hands this replica's tensor
// in and every global replica's back. In one process the last local replica to arrive collects
// the others'; over MPI it then all-gathers the local parts of every process (on a communicator
// of their own, so that they never interleave with the gradient all-reduces).
#include <condition_variable>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "ops/replica_context.hpp"
#include "runtime/collectives.hpp"

namespace graft {

class ReplicaExchange {
 public:
  /// `local` replicas here, global indices offset .. offset + local - 1 of `global`; `comm` (may
  /// be null) reaches the other processes.
  ReplicaExchange(int local, int offset, int global, std::shared_ptr<collectives::Communicator> comm,
                  double timeoutSeconds);
  /// Local replica i's context (owned by the exchange).
  ops::ReplicaContext* context(int i) { return contexts_.at(i).get(); }
  /// Local replica i's call `key` with `mine`: every global replica's value, by global index.
  std::vector<NDArray> exchange(int i, const std::string& key, const NDArray& mine);
  /// A replica failed: the waiting ones fail too (instead of waiting for the timeout).
  void abort();
  /// Forgets the calls of a failed step; the exchange is usable again.
  void reset();

 private:
  struct Slot {
    std::vector<NDArray> parts;  ///< per local replica
    int arrived = 0, taken = 0;
    bool done = false;
    std::vector<NDArray> result;  ///< per global replica
  };
  int local_, offset_, global_;
  std::shared_ptr<collectives::Communicator> comm_;
  double timeout_;
  std::vector<std::unique_ptr<ops::ReplicaContext>> contexts_;
  std::mutex mu_;
  std::condition_variable cv_;
  std::map<std::string, Slot> slots_;
  std::map<std::pair<int, std::string>, int64_t> calls_;  ///< per (local replica, key): calls so far
  bool aborted_ = false;
};

}  // namespace graft
