// PopART's replicated collectives as graph ops (ai.graphcore, docs/replication.md):
//
// - ReplicatedAllReduce(x) -> y: y = x reduced over the replicas of x's group, same shape.
// - ReplicatedReduceScatter(x) -> y: x flattened, reduced over the group, zero-padded to a
//   multiple of the group size k; y [ceil(n / k)] is the shard at the replica's position.
// - ReplicatedAllGather(x) -> y: y [k * n], the flattened x of every replica of the group, in the
//   group's order.
//
// Attributes as PopART's builder writes them: __collectiveOperator (CollectiveOperator: Add,
// Mean, Mul, Min, Max, LogicalAnd, LogicalOr, SquareAdd, Local; default Add) and
// __collectiveCommGroup ([CommGroupType, replicaGroupSize]; default All). The session sets
// __replicationFactor (the global replica count) before it infers shapes, and the check that a
// Consecutive or Orthogonal group divides the replicas happens then. Without it (the Builder's
// view) shapes are inferred for one replica: All is that replica alone, a Consecutive or
// Orthogonal group has the size it names. A thread without a ReplicaContext
// (ops/replica_context.hpp) runs as the one replica of a graph built for one: AllReduce and
// AllGather are the identity (flattened for AllGather) and ReduceScatter flattens.
//
// Gradients, for the loss that data parallelism trains (the sum of every replica's loss):
// AllReduce(Add) -> AllReduce(Add) of dy, AllReduce(Mean) -> AllReduce(Mean) of dy, Local -> dy;
// ReduceScatter(Add or Mean) -> AllGather of dy (scaled by 1/k for Mean), trimmed and reshaped;
// AllGather -> ReduceScatter(Add) of dy, reshaped. Other operators have no gradient.
#include <algorithm>
#include <cmath>
#include <cstring>

#include "ops/dtype_dispatch.hpp"
#include "ops/grad.hpp"
#include "ops/registry.hpp"
#include "ops/replica_context.hpp"
#include "support/check.hpp"

namespace graft::ops {

namespace {
thread_local ReplicaContext* tCurrent = nullptr;
}  // namespace

ReplicaContext* currentReplica() { return tCurrent; }
void setCurrentReplica(ReplicaContext* ctx) { tCurrent = ctx; }

std::vector<int> groupMembers(const CommGroup& g, int replicas, int replica, const std::string& what) {
  GRAFT_CHECK(replicas >= 1 && replica >= 0 && replica < replicas, "{}: replica {} of {}", what, replica, replicas);
  std::vector<int> out;
  switch (g.type) {
    case CommGroupType::All:
      for (int r = 0; r < replicas; ++r) out.push_back(r);
      return out;
    case CommGroupType::None:
      return {replica};
    case CommGroupType::Consecutive:
    case CommGroupType::Orthogonal: {
      const int64_t k = g.size;
      const char* kind = g.type == CommGroupType::Consecutive ? "Consecutive" : "Orthogonal";
      GRAFT_CHECK(k >= 1, "{}: the {} CommGroup needs replicaGroupSize >= 1, got {}", what, kind, k);
      GRAFT_CHECK(replicas % k == 0,
                  "{}: the {} CommGroup of replicaGroupSize {} does not divide the session's {} replicas "
                  "(replicatedGraphCount, or globalReplicationFactor across processes)",
                  what, kind, k, replicas);
      const int groups = static_cast<int>(replicas / k);
      if (g.type == CommGroupType::Consecutive) {
        int first = replica / static_cast<int>(k) * static_cast<int>(k);
        for (int i = 0; i < k; ++i) out.push_back(first + i);
      } else {
        for (int i = 0; i < k; ++i) out.push_back(replica % groups + i * groups);
      }
      return out;
    }
  }
  GRAFT_THROW("{}: unknown CommGroupType {}", what, static_cast<int>(g.type));
}

namespace {

const char* kOperatorAttr = "__collectiveOperator";
const char* kGroupAttr = "__collectiveCommGroup";
const char* kReplicasAttr = "__replicationFactor";

const char* operatorName(CollectiveOp op) {
  static const char* names[] = {"Add", "Mean", "Mul", "Min", "Max", "LogicalAnd", "LogicalOr", "SquareAdd", "Local"};
  return names[static_cast<int>(op)];
}

CollectiveOp collectiveOp(const ir::Node& n) {
  int64_t v = n.attrInt(kOperatorAttr, 0);
  GRAFT_CHECK(v >= 0 && v <= static_cast<int64_t>(CollectiveOp::Local),
              "{}: attribute {} must be a CollectiveOperator (0 Add .. 8 Local), got {}", n.describe(), kOperatorAttr,
              v);
  return static_cast<CollectiveOp>(v);
}

CommGroup commGroup(const ir::Node& n) {
  GRAFT_CHECK(!n.attrs().has("__collectiveReplicaGrouping"),
              "{}: attribute __collectiveReplicaGrouping is not supported; give the group as __collectiveCommGroup "
              "([CommGroupType, replicaGroupSize], PopART's CommGroup)",
              n.describe());
  std::vector<int64_t> v = n.attrInts(kGroupAttr, {0, 0});
  GRAFT_CHECK(v.size() == 2 && v[0] >= 0 && v[0] <= 3 && v[1] >= 0,
              "{}: attribute {} must be [CommGroupType (0 All, 1 Consecutive, 2 Orthogonal, 3 None), "
              "replicaGroupSize >= 0], got {}",
              n.describe(), kGroupAttr, fmt::join(v, ", "));
  return {static_cast<CommGroupType>(v[0]), v[1]};
}

int replicasOf(const ir::Node& n) {
  int64_t r = n.attrInt(kReplicasAttr, 1);
  GRAFT_CHECK(r >= 1, "{}: attribute {} must be >= 1, got {}", n.describe(), kReplicasAttr, r);
  return static_cast<int>(r);
}

// The group's size (every group has the same size). Before a session gives the node the replica
// count (__replicationFactor; the Builder infers shapes for one replica), a Consecutive or
// Orthogonal group has the size it names and All is the one replica; the session checks that the
// group divides its replicas when it sets the count (Session::Impl::bindCollectives).
int64_t groupSize(const ir::Node& n) {
  CommGroup g = commGroup(n);
  if (!n.attrs().has(kReplicasAttr) && (g.type == CommGroupType::Consecutive || g.type == CommGroupType::Orthogonal)) {
    GRAFT_CHECK(g.size >= 1, "{}: the {} CommGroup needs replicaGroupSize >= 1, got {}", n.describe(),
                g.type == CommGroupType::Consecutive ? "Consecutive" : "Orthogonal", g.size);
    return g.size;
  }
  return static_cast<int64_t>(groupMembers(g, replicasOf(n), 0, n.describe()).size());
}

template <class T>
T combine(CollectiveOp op, T a, T b) {
  using C = ComputeType<T>;
  C x = static_cast<C>(a), y = static_cast<C>(b);
  switch (op) {
    case CollectiveOp::Mul:
      return static_cast<T>(x * y);
    case CollectiveOp::Min:
      return static_cast<T>(std::min(x, y));
    case CollectiveOp::Max:
      return static_cast<T>(std::max(x, y));
    case CollectiveOp::SquareAdd:
      return static_cast<T>(x + y * y);
    default:
      return static_cast<T>(x + y);  // Add, Mean (divided after)
  }
}

// The reduction of the members' x (all of x's dtype and shape) into a new array.
NDArray reduceOver(CollectiveOp op, const std::vector<NDArray>& all, const std::vector<int>& members,
                   const std::string& what) {
  const NDArray& first = all.at(members[0]);
  NDArray out(first.dtype(), first.shape());
  if (op == CollectiveOp::LogicalAnd || op == CollectiveOp::LogicalOr) {
    GRAFT_CHECK(first.dtype() == DataType::Bool, "{}: collectiveOperator {} needs a BOOL tensor, got {}", what,
                operatorName(op), dtypeName(first.dtype()));
    bool* o = out.data<bool>();
    for (int64_t i = 0; i < out.numel(); ++i) {
      bool v = op == CollectiveOp::LogicalAnd;
      for (int m : members)
        v = op == CollectiveOp::LogicalAnd ? (v && all[m].data<bool>()[i]) : (v || all[m].data<bool>()[i]);
      o[i] = v;
    }
    return out;
  }
  dispatch<kNumeric>(first.dtype(), what, [&](auto tag) {
    using T = typename decltype(tag)::type;
    using C = ComputeType<T>;
    T* o = out.data<T>();
    for (int64_t i = 0; i < out.numel(); ++i) {
      C x0 = static_cast<C>(all[members[0]].data<T>()[i]);
      T v = static_cast<T>(op == CollectiveOp::SquareAdd ? x0 * x0 : x0);
      for (size_t j = 1; j < members.size(); ++j) v = combine(op, v, all[members[j]].data<T>()[i]);
      if (op == CollectiveOp::Mean) v = static_cast<T>(static_cast<C>(v) / static_cast<C>(members.size()));
      o[i] = v;
    }
  });
  return out;
}

// What a collective kernel knows from compile time: the node's attributes, read once.
struct Call {
  std::string what, key;
  CollectiveOp op = CollectiveOp::Add;
  CommGroup group;
  int replicas = 1;
};

Call callOf(const ir::Node& n) {
  Call c;
  c.what = n.describe();
  c.key = n.type() + "/" + (n.name().empty() ? (n.numOutputs() && n.output(0) ? n.output(0)->id() : "") : n.name());
  c.op = collectiveOp(n);
  c.group = commGroup(n);
  c.replicas = replicasOf(n);
  return c;
}

// Every replica's x (by global index) and this replica's group: the one-replica view without a
// context.
struct Exchanged {
  std::vector<NDArray> all;
  std::vector<int> members;
  int position = 0;  ///< this replica's place in members
};

Exchanged exchange(const Call& c, const NDArray& x) {
  Exchanged e;
  ReplicaContext* ctx = currentReplica();
  if (!ctx) {
    GRAFT_CHECK(c.replicas == 1,
                "{}: the graph was built for {} replicas, but it runs outside a replicated session's replica", c.what,
                c.replicas);
    e.all = {x};
    e.members = {0};
    return e;
  }
  GRAFT_CHECK(ctx->replicas() == c.replicas, "{}: the graph was built for {} replicas, the session has {}", c.what,
              c.replicas, ctx->replicas());
  e.members = groupMembers(c.group, c.replicas, ctx->replica(), c.what);
  e.position = static_cast<int>(std::find(e.members.begin(), e.members.end(), ctx->replica()) - e.members.begin());
  e.all = ctx->exchange(c.key, x);
  return e;
}

KernelFn allReduceKernel(CompileContext& cc) {
  return [c = callOf(cc.node())](KernelContext& k) {
    const NDArray& x = k.input(0);
    if (c.op == CollectiveOp::Local) {
      k.setOutput(0, x);
      return;
    }
    Exchanged e = exchange(c, x);
    k.setOutput(0, reduceOver(c.op, e.all, e.members, c.what));
  };
}

KernelFn reduceScatterKernel(CompileContext& cc) {
  return [c = callOf(cc.node())](KernelContext& k) {
    const NDArray& x = k.input(0);
    Exchanged e = exchange(c, x);
    NDArray full =
        c.op == CollectiveOp::Local ? e.all.at(e.members[e.position]) : reduceOver(c.op, e.all, e.members, c.what);
    const int64_t size = static_cast<int64_t>(e.members.size());
    const int64_t shard = (x.numel() + size - 1) / size;
    NDArray& y = k.allocOutputUninit(0, x.dtype(), {shard});
    if (y.nbytes()) std::memset(y.rawData(), 0, y.nbytes());  // the padding
    const int64_t begin = std::min(x.numel(), e.position * shard), end = std::min(x.numel(), begin + shard);
    const size_t es = dtypeSize(x.dtype());
    if (end > begin)
      std::memcpy(y.rawData(), static_cast<const char*>(full.rawData()) + begin * es,
                  static_cast<size_t>(end - begin) * es);
  };
}

KernelFn allGatherKernel(CompileContext& cc) {
  return [c = callOf(cc.node())](KernelContext& k) {
    const NDArray& x = k.input(0);
    Exchanged e = exchange(c, x);
    NDArray& y = k.allocOutputUninit(0, x.dtype(), {static_cast<int64_t>(e.members.size()) * x.numel()});
    auto* dst = static_cast<char*>(y.rawData());
    for (int m : e.members) {
      const NDArray& part = e.all.at(m);
      GRAFT_CHECK(part.shape() == x.shape(), "{}: replica {} gave shape {}, this replica {}", c.what, m,
                  shapeToString(part.shape()), shapeToString(x.shape()));
      if (part.nbytes()) std::memcpy(dst, part.rawData(), part.nbytes());
      dst += part.nbytes();
    }
  };
}

using InferIn = std::vector<ir::ValueType>;

std::vector<ir::ValueType> inferFlat(const ir::Node& n, const InferIn& in, bool scatter) {
  const TensorInfo& x = in.at(0).info;
  const int64_t k = groupSize(n);
  if (!x.hasShape() || !x.isStatic()) return {ir::ValueType::tensor(TensorInfo(x.dataType(), std::vector<Dim>{Dim()}))};
  const int64_t numel = x.nelms();
  return {ir::ValueType::tensor(TensorInfo(x.dataType(), Shape{scatter ? (numel + k - 1) / k : k * numel}))};
}

ir::Attributes collectiveAttrs(const ir::Node& n, CollectiveOp op) {
  ir::Attributes a;
  a.set(kOperatorAttr, static_cast<int64_t>(op));
  CommGroup g = commGroup(n);
  a.set(kGroupAttr, std::vector<int64_t>{static_cast<int64_t>(g.type), g.size});
  // The gradient spans the forward's group; without a replica count yet, neither has one.
  if (n.attrs().has(kReplicasAttr)) a.set(kReplicasAttr, static_cast<int64_t>(replicasOf(n)));
  return a;
}

void noGradientFor(GradBuilder& g, CollectiveOp op) {
  GRAFT_THROW("{}: collectiveOperator {} has no gradient (Add and Mean have one{})", g.node().describe(),
              operatorName(op), g.node().type() == "ReplicatedAllReduce" ? ", and Local" : "");
}

}  // namespace

GRAFT_REGISTER_OPS(collectives) {
  const std::string d = kGraphcoreDomain;
  r.add("ReplicatedAllReduce", d)
      .setReference(allReduceKernel)
      .nondeterministic()  // never folded or merged: every replica must run it
      .setInfer([](const ir::Node& n, const InferIn& in, const std::vector<const NDArray*>&) {
        collectiveOp(n);
        groupSize(n);
        return std::vector<ir::ValueType>{in.at(0)};
      })
      .setVjp([](GradBuilder& g) {
        CollectiveOp op = collectiveOp(g.node());
        if (op == CollectiveOp::Local) return g.setDx(0, g.dy());
        if (op != CollectiveOp::Add && op != CollectiveOp::Mean) return noGradientFor(g, op);
        g.setDx(0, g.op("ReplicatedAllReduce", {g.dy()}, collectiveAttrs(g.node(), op), kGraphcoreDomain));
      });
  r.add("ReplicatedReduceScatter", d)
      .setReference(reduceScatterKernel)
      .nondeterministic()
      .setInfer([](const ir::Node& n, const InferIn& in, const std::vector<const NDArray*>&) {
        collectiveOp(n);
        return inferFlat(n, in, true);
      })
      .setVjp([](GradBuilder& g) {
        CollectiveOp op = collectiveOp(g.node());
        if (op != CollectiveOp::Add && op != CollectiveOp::Mean) return noGradientFor(g, op);
        ir::Tensor* x = g.in(0);
        GRAFT_CHECK(x->info().isStatic(), "{}: the gradient needs the input's static shape, got {}",
                    g.node().describe(), x->info().str());
        ir::Tensor* all =
            g.op("ReplicatedAllGather", {g.dy()}, collectiveAttrs(g.node(), CollectiveOp::Add), kGraphcoreDomain);
        ir::Tensor* trimmed = g.op("Slice", {all, g.int64s({0}), g.int64s({x->info().nelms()}), g.int64s({0})});
        ir::Tensor* dx = g.reshapeLike(trimmed, x);
        if (op == CollectiveOp::Mean) dx = g.scale(dx, 1.0 / static_cast<double>(groupSize(g.node())));
        g.setDx(0, dx);
      });
  r.add("ReplicatedAllGather", d)
      .setReference(allGatherKernel)
      .nondeterministic()
      .setInfer([](const ir::Node& n, const InferIn& in, const std::vector<const NDArray*>&) {
        return inferFlat(n, in, false);
      })
      .setVjp([](GradBuilder& g) {
        ir::Tensor* x = g.in(0);
        GRAFT_CHECK(x->info().isStatic(), "{}: the gradient needs the input's static shape, got {}",
                    g.node().describe(), x->info().str());
        ir::Tensor* mine =
            g.op("ReplicatedReduceScatter", {g.dy()}, collectiveAttrs(g.node(), CollectiveOp::Add), kGraphcoreDomain);
        g.setDx(0, g.reshapeLike(mine, x));
      });
}

}  // namespace graft::ops
