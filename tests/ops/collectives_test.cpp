// Tests of the collective ops (src/ops/collectives.cpp): one replica (no ReplicaContext: the
// reference semantics), and four replicas seen from one of them through a context whose other
// replicas hold fixed values; groups of PopART's CommGroup; gradients against finite differences
// (one replica) and by hand (four replicas). The replicated runtime is tested in
// tests/python/test_replication_ops.py and test_distributed.py.
#include "op_test_util.hpp"
#include "ops/replica_context.hpp"

namespace graft::testing {
namespace {

OpCase gc(const std::string& type, std::vector<NDArray> in, ir::Attributes a = {}) {
  return OpCase{type, std::move(in), std::move(a), 1, "ai.graphcore"};
}

// Replica `me` of 4; replica r gives x + 10 r (its own value is the kernel's input).
class FourReplicas : public ops::ReplicaContext {
 public:
  explicit FourReplicas(int me) : me_(me) { ops::setCurrentReplica(this); }
  ~FourReplicas() override { ops::setCurrentReplica(nullptr); }
  int replicas() const override { return 4; }
  int replica() const override { return me_; }
  std::vector<NDArray> exchange(const std::string&, const NDArray& mine) override {
    ++calls;
    std::vector<NDArray> all;
    for (int r = 0; r < 4; ++r) {
      if (r == me_) {
        all.push_back(mine);
        continue;
      }
      NDArray a = mine.clone();
      for (int64_t i = 0; i < a.numel(); ++i) a.data<float>()[i] += 10.0f * static_cast<float>(r - me_);
      all.push_back(a);
    }
    return all;
  }
  int calls = 0;

 private:
  int me_;
};

ir::Attributes group(int64_t type, int64_t size, int64_t op = 0) {
  return attrs({{"__collectiveCommGroup", std::vector<int64_t>{type, size}},
                {"__collectiveOperator", op},
                {"__replicationFactor", int64_t{4}}});
}

TEST(CommGroup, MembersOfAllConsecutiveOrthogonalAndNone) {
  using ops::CommGroupType;
  EXPECT_EQ(ops::groupMembers({CommGroupType::All, 0}, 4, 2, "t"), (std::vector<int>{0, 1, 2, 3}));
  EXPECT_EQ(ops::groupMembers({CommGroupType::Consecutive, 2}, 4, 3, "t"), (std::vector<int>{2, 3}));
  EXPECT_EQ(ops::groupMembers({CommGroupType::Orthogonal, 2}, 4, 3, "t"), (std::vector<int>{1, 3}));
  EXPECT_EQ(ops::groupMembers({CommGroupType::Orthogonal, 2}, 4, 0, "t"), (std::vector<int>{0, 2}));
  EXPECT_EQ(ops::groupMembers({CommGroupType::None, 0}, 4, 1, "t"), (std::vector<int>{1}));
  EXPECT_THROW(ops::groupMembers({CommGroupType::Consecutive, 3}, 4, 0, "t"), Error);
  EXPECT_THROW(ops::groupMembers({CommGroupType::Orthogonal, 0}, 4, 0, "t"), Error);
}

TEST(Graphcore_ReplicatedAllReduce, OneReplicaIsTheIdentityAndGradient) {
  auto x = arr<float>({2, 2}, {1, -2, 3, 4});
  EXPECT_TRUE(allClose(runReference(gc("ReplicatedAllReduce", {x}))[0], x));
  EXPECT_TRUE(allClose(
      runReference(gc("ReplicatedAllReduce", {x}, attrs({{"__collectiveOperator", int64_t{7}}})))[0],  // SquareAdd
      arr<float>({2, 2}, {1, 4, 9, 16})));
  EXPECT_TRUE(gradCheck(gc("ReplicatedAllReduce", {randomArray(DataType::Double, {3, 2}, 1)}), {0}));
  EXPECT_TRUE(gradCheck(
      gc("ReplicatedAllReduce", {randomArray(DataType::Double, {3}, 2)}, attrs({{"__collectiveOperator", int64_t{1}}})),
      {0}));
}

TEST(Graphcore_ReplicatedAllReduce, FourReplicasInGroups) {
  FourReplicas ctx(1);  // replicas hold x - 10, x, x + 10, x + 20
  auto x = arr<float>({2}, {1, 2});
  EXPECT_TRUE(allClose(runReference(gc("ReplicatedAllReduce", {x}, group(0, 0)))[0], arr<float>({2}, {24, 28})));
  // Consecutive 2: {0, 1}; Orthogonal 2: {1, 3}; None: {1}.
  EXPECT_TRUE(allClose(runReference(gc("ReplicatedAllReduce", {x}, group(1, 2)))[0], arr<float>({2}, {-8, -6})));
  EXPECT_TRUE(allClose(runReference(gc("ReplicatedAllReduce", {x}, group(2, 2)))[0], arr<float>({2}, {22, 24})));
  EXPECT_TRUE(allClose(runReference(gc("ReplicatedAllReduce", {x}, group(3, 0)))[0], x));
  EXPECT_TRUE(allClose(runReference(gc("ReplicatedAllReduce", {x}, group(0, 0, 1)))[0], arr<float>({2}, {6, 7})));
  EXPECT_TRUE(allClose(runReference(gc("ReplicatedAllReduce", {x}, group(0, 0, 4)))[0], arr<float>({2}, {21, 22})));
  EXPECT_TRUE(allClose(runReference(gc("ReplicatedAllReduce", {x}, group(2, 2, 3)))[0], x));  // Min
  // Local: no exchange at all.
  int before = ctx.calls;
  EXPECT_TRUE(allClose(runReference(gc("ReplicatedAllReduce", {x}, group(0, 0, 8)))[0], x));
  EXPECT_EQ(ctx.calls, before);
  // The graph's replica count must be the session's.
  EXPECT_THROW(runReference(gc("ReplicatedAllReduce", {x}, attrs({{"__replicationFactor", int64_t{2}}}))), Error);
  EXPECT_THROW(runReference(gc("ReplicatedAllReduce", {x}, group(1, 3))), Error);  // 3 does not divide 4
}

// Without __replicationFactor (the Builder's view, before a session sets it) a Consecutive or
// Orthogonal group has the size it names and nothing checks it against replicas yet.
TEST(CommGroup, GroupsOfTheirNamedSizeBeforeTheReplicaCountIsKnown) {
  auto x = arr<float>({2, 3}, {1, 2, 3, 4, 5, 6});
  auto named = [](int64_t type, int64_t size) {
    return attrs({{"__collectiveCommGroup", std::vector<int64_t>{type, size}}});
  };
  EXPECT_EQ(inferTypes(gc("ReplicatedAllGather", {x}, named(1, 2)))[0].info.shape(), (Shape{12}));
  EXPECT_EQ(inferTypes(gc("ReplicatedAllGather", {x}, named(2, 3)))[0].info.shape(), (Shape{18}));
  EXPECT_EQ(inferTypes(gc("ReplicatedReduceScatter", {x}, named(2, 4)))[0].info.shape(), (Shape{2}));
  EXPECT_EQ(inferTypes(gc("ReplicatedAllReduce", {x}, named(1, 2)))[0].info.shape(), (Shape{2, 3}));
  EXPECT_EQ(inferTypes(gc("ReplicatedAllGather", {x}, named(0, 0)))[0].info.shape(), (Shape{6}));  // All: one
  EXPECT_THROW(inferTypes(gc("ReplicatedAllGather", {x}, named(1, 0))), Error);
  // Once the count is set, the group must divide it.
  auto counted = named(1, 2);
  counted.set("__replicationFactor", int64_t{3});
  EXPECT_THROW(inferTypes(gc("ReplicatedAllGather", {x}, counted)), Error);
}

TEST(Graphcore_ReplicatedAllReduce, GradientOverFourReplicasIsTheAllReduceOfDy) {
  FourReplicas ctx(0);
  // dy + (dy + 10) + (dy + 20) + (dy + 30): the other replicas' output gradients, summed.
  auto g = vjpOf(gc("ReplicatedAllReduce", {arr<float>({2}, {5, 6})}, group(0, 0)), {0}, {arr<float>({2}, {1, 2})});
  EXPECT_TRUE(allClose(g[0], arr<float>({2}, {64, 68})));
  EXPECT_THROW(
      vjpOf(gc("ReplicatedAllReduce", {arr<float>({2}, {5, 6})}, group(0, 0, 4)), {0}, {arr<float>({2}, {1, 2})}),
      Error);  // Max has no gradient
}

TEST(Graphcore_ReplicatedAllReduce, GradientOverAGroupIsTheAllReduceOfDyOverIt) {
  FourReplicas ctx(1);  // the others' dy: dy - 10, dy + 10, dy + 20
  auto x = arr<float>({2}, {5, 6});
  auto dy = arr<float>({2}, {1, 2});
  // Consecutive 2: {0, 1}; Orthogonal 2: {1, 3}; Mean divides by the group's 2.
  EXPECT_TRUE(allClose(vjpOf(gc("ReplicatedAllReduce", {x}, group(1, 2)), {0}, {dy})[0], arr<float>({2}, {-8, -6})));
  EXPECT_TRUE(allClose(vjpOf(gc("ReplicatedAllReduce", {x}, group(2, 2)), {0}, {dy})[0], arr<float>({2}, {22, 24})));
  EXPECT_TRUE(allClose(vjpOf(gc("ReplicatedAllReduce", {x}, group(2, 2, 1)), {0}, {dy})[0], arr<float>({2}, {11, 12})));
}

TEST(Graphcore_ReplicatedReduceScatter, OneReplicaFlattensAndGradient) {
  auto x = arr<float>({2, 3}, {1, 2, 3, 4, 5, 6});
  auto types = inferTypes(gc("ReplicatedReduceScatter", {x}));
  EXPECT_EQ(types[0].info.shape(), (Shape{6}));
  EXPECT_TRUE(allClose(runReference(gc("ReplicatedReduceScatter", {x}))[0], arr<float>({6}, {1, 2, 3, 4, 5, 6})));
  EXPECT_TRUE(gradCheck(gc("ReplicatedReduceScatter", {randomArray(DataType::Double, {2, 3}, 3)}), {0}));
}

TEST(Graphcore_ReplicatedReduceScatter, FourReplicasShardsPaddedWithZeros) {
  auto x = arr<float>({5}, {1, 2, 3, 4, 6});
  auto c = gc("ReplicatedReduceScatter", {x}, group(0, 0));
  EXPECT_EQ(inferTypes(c)[0].info.shape(), (Shape{2}));  // shards of ceil(5 / 4)
  {
    FourReplicas ctx(1);  // the sum over the 4: 4 x + 20 = 24 28 32 36 44
    EXPECT_TRUE(allClose(runReference(c)[0], arr<float>({2}, {32, 36})));
  }
  {
    FourReplicas ctx(2);  // 4 x - 20 = -16 -12 -8 -4 4: shard 2 is element 4, then the padding
    EXPECT_TRUE(allClose(runReference(c)[0], arr<float>({2}, {4, 0})));
    // Orthogonal 2 from replica 2: {0, 2}: x - 20 + x; shards of 3, replica 2 second.
    EXPECT_TRUE(
        allClose(runReference(gc("ReplicatedReduceScatter", {x}, group(2, 2)))[0], arr<float>({3}, {-12, -8, 0})));
  }
}

TEST(Graphcore_ReplicatedReduceScatter, GradientOverFourReplicasIsTheAllGatherOfDy) {
  FourReplicas ctx(0);
  // dx = [dy_0, dy_1, dy_2, dy_3] trimmed to x's 3 elements (shards of 1).
  auto g =
      vjpOf(gc("ReplicatedReduceScatter", {arr<float>({3}, {1, 2, 3})}, group(0, 0)), {0}, {arr<float>({1}, {0.5f})});
  EXPECT_TRUE(allClose(g[0], arr<float>({3}, {0.5f, 10.5f, 20.5f})));
}

TEST(Graphcore_ReplicatedReduceScatter, GradientOverAGroupIsTheAllGatherOfDyOverIt) {
  FourReplicas ctx(2);  // the others' dy: dy - 20, dy - 10, dy + 10
  auto x = arr<float>({3}, {1, 2, 3});
  auto dy = arr<float>({2}, {1, 2});  // shards of ceil(3 / 2)
  // Orthogonal 2 from replica 2: {0, 2}: [dy_0, dy_2] trimmed to 3; Consecutive 2: {2, 3}.
  EXPECT_TRUE(
      allClose(vjpOf(gc("ReplicatedReduceScatter", {x}, group(2, 2)), {0}, {dy})[0], arr<float>({3}, {-19, -18, 1})));
  EXPECT_TRUE(
      allClose(vjpOf(gc("ReplicatedReduceScatter", {x}, group(1, 2)), {0}, {dy})[0], arr<float>({3}, {1, 2, 11})));
  // Mean: divided by the group's 2.
  EXPECT_TRUE(allClose(vjpOf(gc("ReplicatedReduceScatter", {x}, group(1, 2, 1)), {0}, {dy})[0],
                       arr<float>({3}, {0.5f, 1, 5.5f})));
}

TEST(Graphcore_ReplicatedAllGather, OneReplicaFlattensAndGradient) {
  auto x = arr<float>({2, 2}, {1, 2, 3, 4});
  EXPECT_TRUE(allClose(runReference(gc("ReplicatedAllGather", {x}))[0], arr<float>({4}, {1, 2, 3, 4})));
  EXPECT_TRUE(gradCheck(gc("ReplicatedAllGather", {randomArray(DataType::Double, {2, 2}, 4)}), {0}));
}

TEST(Graphcore_ReplicatedAllGather, FourReplicasInGroupOrder) {
  FourReplicas ctx(2);
  auto x = arr<float>({1}, {1});
  auto all = gc("ReplicatedAllGather", {x}, group(0, 0));
  EXPECT_EQ(inferTypes(all)[0].info.shape(), (Shape{4}));
  EXPECT_TRUE(allClose(runReference(all)[0], arr<float>({4}, {-19, -9, 1, 11})));
  EXPECT_TRUE(allClose(runReference(gc("ReplicatedAllGather", {x}, group(1, 2)))[0], arr<float>({2}, {1, 11})));
  EXPECT_TRUE(allClose(runReference(gc("ReplicatedAllGather", {x}, group(2, 2)))[0], arr<float>({2}, {-19, 1})));
}

TEST(Graphcore_ReplicatedAllGather, GradientOverFourReplicasIsTheReduceScatterOfDy) {
  FourReplicas ctx(1);
  // Every replica's dy [4] is this one's + 10 (r - 1): summed, shard 1 (element 1).
  auto g = vjpOf(gc("ReplicatedAllGather", {arr<float>({1}, {7})}, group(0, 0)), {0}, {arr<float>({4}, {1, 2, 3, 4})});
  EXPECT_TRUE(allClose(g[0], arr<float>({1}, {4 * 2 + 20})));
}

TEST(Graphcore_ReplicatedAllGather, GradientOverAGroupIsTheReduceScatterOfDyOverIt) {
  FourReplicas ctx(3);  // the others' dy: dy - 30, dy - 20, dy - 10
  auto x = arr<float>({2}, {7, 8});
  auto dy = arr<float>({4}, {1, 2, 3, 4});  // [k * n] = [2 * 2]
  // Consecutive 2 from replica 3: {2, 3}, position 1: (dy_2 + dy_3)[2:4] = 2 dy - 10.
  EXPECT_TRUE(allClose(vjpOf(gc("ReplicatedAllGather", {x}, group(1, 2)), {0}, {dy})[0], arr<float>({2}, {-4, -2})));
  // Orthogonal 2: {1, 3}, position 1: (dy_1 + dy_3)[2:4] = 2 dy - 20.
  EXPECT_TRUE(allClose(vjpOf(gc("ReplicatedAllGather", {x}, group(2, 2)), {0}, {dy})[0], arr<float>({2}, {-14, -12})));
}

}  // namespace
}  // namespace graft::testing
