#pragma once
// What the collective ops (ops/collectives.cpp: ai.graphcore ReplicatedAllReduce,
// ReplicatedReduceScatter, ReplicatedAllGather) see of the replicas of a replicated step. The
// runtime (runtime/replication.cpp) puts a ReplicaContext on every worker thread of a replica;
// a thread without one runs the collectives as a single replica (the reference semantics).
#include <graft/ndarray.hpp>

#include <string>
#include <vector>

namespace graft::ops {

/// PopART's CollectiveOperator (the __collectiveOperator attribute).
enum class CollectiveOp { Add = 0, Mean, Mul, Min, Max, LogicalAnd, LogicalOr, SquareAdd, Local };
/// PopART's CommGroupType (the first value of the __collectiveCommGroup attribute).
enum class CommGroupType { All = 0, Consecutive, Orthogonal, None };

/// PopART's CommGroup: which replicas a collective spans.
struct CommGroup {
  CommGroupType type = CommGroupType::All;
  int64_t size = 0;  ///< replicaGroupSize (Consecutive, Orthogonal)
};

/// The global replicas of the group that `replica` belongs to, in the group's order (a replica's
/// position in it is its shard index). Throws graft::Error naming `what` when the group does not
/// divide `replicas`.
std::vector<int> groupMembers(const CommGroup& g, int replicas, int replica, const std::string& what);

/// One replica's view of the step's replicas (all processes together).
class ReplicaContext {
 public:
  virtual ~ReplicaContext() = default;
  /// Replicas in all processes (SessionOptions' globalReplicationFactor).
  virtual int replicas() const = 0;
  /// This replica's global index.
  virtual int replica() const = 0;
  /// Every global replica's `mine` for the call named `key` (the same key on every replica for
  /// the same node, called in the same order): indexed by global replica. Blocks until every
  /// replica has called; throws graft::Error when one does not within the collective timeout.
  virtual std::vector<NDArray> exchange(const std::string& key, const NDArray& mine) = 0;
};

/// The calling thread's context (nullptr: not a replica's thread).
ReplicaContext* currentReplica();
/// Sets the calling thread's context (the runtime, once per worker thread).
void setCurrentReplica(ReplicaContext* ctx);

}  // namespace graft::ops
