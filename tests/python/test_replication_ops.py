"""Replication in one process, continued (docs/replication.md): gradient buckets that overlap the
backward pass, per-replica random seeds, and the collective ops (builder.aiGraphcore.replicated*)
with their gradients."""
import json

import numpy as np
import pytest

import graft
import collective_reference
from collective_reference import comm_group, operator
from test_replication import IN, OUT, lead, optimizer, read


def deep_mlp(batch, layers=4, width=8, seed=0):
    rng = np.random.default_rng(seed)
    b = graft.Builder()
    x = b.addInputTensor(graft.TensorInfo("FLOAT", [batch, IN]), "x")
    label = b.addInputTensor(graft.TensorInfo("INT32", [batch]), "label")
    h, weights, n = x, [], IN
    for i in range(layers):
        m = OUT if i == layers - 1 else width
        w = b.addInitializedInputTensor(rng.standard_normal((n, m)).astype(np.float32) * 0.5, f"w{i}")
        weights.append(w)
        h = b.aiOnnx.matmul([h, w])
        if i < layers - 1:
            h = b.aiOnnx.relu([h])
        n = m
    lp = b.aiOnnx.logsoftmax([h], axis=-1)
    loss = b.aiGraphcore.nllloss([lp, label], graft.ReductionType.Mean, inputIsLogProbability=True)
    return b.getModelProto(), x, label, loss, weights


def train(model_fn, bucket, steps=3, replicas=2, opt="sgd", B=3):
    model, x, label, loss, weights = model_fn(B)
    o = graft.SessionOptions(enableReplicatedGraphs=True, replicatedGraphCount=replicas, gradientBucketBytes=bucket,
                             accumulationAndReplicationReductionType=graft.ReductionType.Mean)
    s = graft.TrainingSession(fnModel=model, loss=loss, dataFlow=graft.DataFlow(1, {loss: graft.AnchorReturnType("All")}),
                              optimizer=optimizer(opt), deviceInfo=graft.DeviceManager().createCpuDevice(replicas, 1),
                              userOptions=o)
    s.prepareDevice()
    s.weightsFromHost()
    rng = np.random.default_rng(3)
    for _ in range(steps):
        xs = rng.standard_normal((replicas, B, IN)).astype(np.float32)
        ys = rng.integers(0, OUT, (replicas, B)).astype(np.int32)
        s.run(graft.PyStepIO({x: xs, label: ys}, s.initAnchorArrays()))
    return s, read(s, weights), weights


@pytest.mark.parametrize("opt", ["sgd", "adam"])
def test_in_one_process_each_replica_sums_and_updates_its_slice(opt):
    # SGD and Adam work element by element: each replica's worker sums its slice of both
    # replicas' gradients and updates that slice of every weight, in parallel; nothing is summed
    # during the backward pass, and the host thread runs no optimizer step of its own.
    s, _, _ = train(deep_mlp, 1, steps=1, opt=opt)
    trace = [e for e in json.loads(s.timelineJson())["traceEvents"] if e.get("cat") == "busy"]
    names = [e["name"] for e in trace]
    assert not [n for n in names if n.startswith("all-reduce started")], names
    assert [n for n in names if n.startswith("complete (summed in the optimizer step)")] == [
        f"complete (summed in the optimizer step): bucket {b} (Accum___w{i})" for b, i in enumerate((3, 2, 1, 0))]
    slices = sorted(e["tid"] for e in trace if e["name"] == "optimizer step of its slice")
    assert slices == [1, 2], trace  # one on each replica's worker
    assert "sharded optimizer step" in names
    # Each replica's step reads the one whole optimizer state (no shardOptimizerState).
    per = s.replicaOptimizerStateBytes()
    elems = sum(np.prod(s.getInfo(w).shape()) for w in s.trainedWeightIds())
    assert per == [elems * 4 * (1 if opt == "sgd" else 2) + (0 if opt == "sgd" else 4 * 4)] * 2, per


@pytest.mark.parametrize("opt", ["sgd", "adam"])
def test_buckets_of_any_size_give_the_weights_of_one_all_reduce_per_tensor(opt):
    _, want, weights = train(deep_mlp, 0, opt=opt)
    for bucket in (1, 300, 1 << 30):  # each tensor alone, pairs, everything in one bucket
        _, got, _ = train(deep_mlp, bucket, opt=opt)
        for w in weights:
            np.testing.assert_array_equal(got[w], want[w], err_msg=f"{w}, buckets of {bucket} bytes")


def _events(session):
    trace = json.loads(session.timelineJson())["traceEvents"]
    return sorted((e for e in trace if e.get("cat") == "busy"), key=lambda e: e["args"]["seq"])


def _schedule(session):
    """The first replica's compiled schedule (serializedIr lists the ops in the order they run)."""
    return json.loads(session._serializeIr())["maingraph"]


def _producer_step(ops, tensor):
    return next(i for i, op in enumerate(ops) if any(o["name"] == tensor for o in op["outputs"]))


def test_the_first_bucket_starts_before_the_backward_pass_ends():
    # Buckets of one tensor each: w3's gradient (the last layer's) is complete first and its
    # bucket's all-reduce is issued while the replicas still compute the gradients of w2, w1, w0.
    # (Lamb needs whole weights, so its optimizer step is not split between the replicas: their
    # gradients are summed bucket by bucket during the backward pass, as over MPI.)
    s, _, _ = train(deep_mlp, 1, steps=1, opt="lamb")
    ops = _schedule(s)
    accumulates = [i for i, op in enumerate(ops) if op["type"] == "Accumulate"]
    assert [ops[i]["name"] for i in accumulates] == [f"accumulate_w{i}" for i in (3, 2, 1, 0)]
    for i in accumulates:  # each runs right after the op that computes its gradient
        assert _producer_step(ops, ops[i]["inputs"][1]["name"]) == i - 1, ops[i - 1]
    buckets = s.gradientBuckets()
    assert [b.accumulators for b in buckets] == [[f"Accum___w{i}"] for i in (3, 2, 1, 0)]
    assert [b.step for b in buckets] == accumulates
    assert buckets[0].node == "Accumulate node 'accumulate_w3'" and buckets[0].bytes == 8 * OUT * 4
    # The compiled plan: bucket 0 is issued before the gradient of the first layer is computed,
    # i.e. before the last backward op.
    last_backward = max(i for i, op in enumerate(ops) if op["type"] != "Accumulate")
    assert buckets[0].step < _producer_step(ops, ops[accumulates[-1]]["inputs"][1]["name"]) <= last_backward
    # What the step did (the timeline's event record, in the order the events happened): the same.
    events = [e["name"] for e in _events(s)]
    started = [n for n in events if n.startswith("all-reduce started")]
    complete = [n for n in events if n.startswith("gradient complete")]
    assert started[0] == "all-reduce started: bucket 0 (Accum___w3)", events
    assert complete == [f"gradient complete: Accum___w{i}" for i in (3, 2, 1, 0)], events
    assert events.index(started[0]) < events.index("gradient complete: Accum___w0"), events
    assert len(started) == 4
    # One bucket for everything starts only once the last gradient is complete.
    s, _, _ = train(deep_mlp, 1 << 30, steps=1, opt="lamb")
    ops = _schedule(s)
    (one,) = s.gradientBuckets()
    assert one.accumulators == [f"Accum___w{i}" for i in (3, 2, 1, 0)]
    assert one.step == max(i for i, op in enumerate(ops) if op["type"] == "Accumulate")
    assert ops[one.step]["name"] == "accumulate_w0"
    events = [e["name"] for e in _events(s)]
    started = [n for n in events if n.startswith("all-reduce started")]
    assert started == ["all-reduce started: bucket 0 (Accum___w3, Accum___w2, Accum___w1, Accum___w0)"], events
    assert events.index(started[0]) > events.index("gradient complete: Accum___w0")


def test_no_buckets_without_replication():
    model, x, label, loss, _ = deep_mlp(3)
    s = graft.TrainingSession(fnModel=model, loss=loss, dataFlow=graft.DataFlow(1, {loss: graft.AnchorReturnType("All")}),
                              optimizer=optimizer("sgd"), deviceInfo=graft.DeviceManager().createCpuDevice())
    s.prepareDevice()
    assert s.gradientBuckets() == []


# ---- per-replica random seeds -------------------------------------------------------------------

def _dropout_run(replicas, seed, steps=2):
    F = 64
    b = graft.Builder()
    t = b.addInputTensor(graft.TensorInfo("FLOAT", [F]), "t")
    w = b.addInitializedInputTensor(np.ones(F, np.float32), "w")
    y = b.aiOnnx.dropout([b.aiOnnx.mul([t, w])], 1, 0.5)[0]
    loss = b.aiGraphcore.identityloss([y], reduction=graft.ReductionType.Sum)
    o = graft.SessionOptions()
    if replicas > 1:
        o.enableReplicatedGraphs, o.replicatedGraphCount = True, replicas
    s = graft.TrainingSession(fnModel=b.getModelProto(), dataFlow=graft.DataFlow(1, {y: graft.AnchorReturnType("All")}),
                              loss=loss, optimizer=graft.ConstSGD(0.0),
                              deviceInfo=graft.DeviceManager().createCpuDevice(replicas, 1), userOptions=o)
    s.prepareDevice()
    s.setRandomSeed(seed)
    s.weightsFromHost()
    masks = []
    for _ in range(steps):
        out = s.initAnchorArrays()
        s.run(graft.PyStepIO({t: np.ones([replicas, F] if replicas > 1 else [F], np.float32)}, out))
        masks.append(out[y].copy())
    return masks


def test_replicas_draw_their_own_dropout_masks_reproducibly():
    a = _dropout_run(2, 7)
    b = _dropout_run(2, 7)
    for step in range(2):
        np.testing.assert_array_equal(a[step], b[step])  # the same seed: the same masks
        assert not np.array_equal(a[step][0], a[step][1]), "both replicas drew the same mask"
    assert not np.array_equal(a[0], a[1])  # and a new one each step
    assert not np.array_equal(_dropout_run(2, 8)[0][1], a[0][1])  # another seed: other masks for replica 1
    # Replica 0 draws what an unreplicated session draws from the seed; the others derive theirs.
    single = _dropout_run(1, 7)
    for step in range(2):
        np.testing.assert_array_equal(a[step][0], single[step])


# ---- collective ops -----------------------------------------------------------------------------

def _inference(build, feeds, replicas=2):
    b = graft.Builder()
    outs, inputs = build(b)
    o = graft.SessionOptions(enableReplicatedGraphs=True, replicatedGraphCount=replicas)
    s = graft.InferenceSession(fnModel=b.getModelProto(),
                               dataFlow=graft.DataFlow(1, {t: graft.AnchorReturnType("All") for t in outs}),
                               deviceInfo=graft.DeviceManager().createCpuDevice(replicas, 1), userOptions=o)
    s.prepareDevice()
    anchors = s.initAnchorArrays()
    s.run(graft.PyStepIO(feeds(inputs), anchors))
    return [anchors[t] for t in outs]


def test_collective_ops_across_two_replicas():
    xs = np.array([[1, 2, 3], [10, 20, 30]], np.float32)  # replica 0, replica 1

    def build(b):
        x = b.addInputTensor(graft.TensorInfo("FLOAT", [3]), "x")
        add = b.aiGraphcore.replicatedallreduce([x])
        mean = b.aiGraphcore.replicatedallreduce([x], graft.CollectiveOperator.Mean)
        mx = b.aiGraphcore.replicatedallreduce([x], graft.CollectiveOperator.Max, graft.CommGroup(graft.CommGroupType.All, 0))
        alone = b.aiGraphcore.replicatedallreduce([x], graft.CollectiveOperator.Add,
                                                  graft.CommGroup(graft.CommGroupType.Ungrouped, 0))
        scatter = b.aiGraphcore.replicatedreducescatter([x])
        gather = b.aiGraphcore.replicatedallgather([x])
        return [add, mean, mx, alone, scatter, gather], x

    add, mean, mx, alone, scatter, gather = _inference(build, lambda x: {x: xs})
    for r in range(2):
        np.testing.assert_array_equal(add[r], xs.sum(0))
        np.testing.assert_array_equal(mean[r], xs.mean(0))
        np.testing.assert_array_equal(mx[r], xs.max(0))
        np.testing.assert_array_equal(alone[r], xs[r])
        np.testing.assert_array_equal(gather[r], xs.reshape(-1))
    # Shards of ceil(3 / 2) = 2 of the sum [11 22 33], the last padded with 0.
    assert scatter.shape == (2, 2)
    np.testing.assert_array_equal(scatter, [[11, 22], [33, 0]])


def test_gradients_through_collective_ops_train_the_sum_of_the_replicas_losses():
    # Replica r: y = allreduce(x_r @ w), loss_r = sum(y * c_r); then z = allgather(x_r @ v),
    # loss_r += sum(z * z) (the builder types z for one replica, so z meets no other tensor). The session sums the replicas' weight gradients (Sum reduction), so it
    # trains L = sum_r loss_r, whose gradient numpy gives directly.
    R, B, N = 2, 2, 3
    rng = np.random.default_rng(0)
    w0 = rng.standard_normal((IN, N)).astype(np.float32)
    v0 = rng.standard_normal((IN, N)).astype(np.float32)
    b = graft.Builder()
    x = b.addInputTensor(graft.TensorInfo("FLOAT", [B, IN]), "x")
    c = b.addInputTensor(graft.TensorInfo("FLOAT", [B, N]), "c")
    w = b.addInitializedInputTensor(w0, "w")
    v = b.addInitializedInputTensor(v0, "v")
    y = b.aiGraphcore.replicatedallreduce([b.aiOnnx.matmul([x, w])])
    z = b.aiGraphcore.replicatedallgather([b.aiOnnx.matmul([x, v])])
    total = b.aiOnnx.add([b.aiOnnx.reducesum([b.aiOnnx.mul([y, c])], keepdims=0),
                          b.aiOnnx.reducesum([b.aiOnnx.mul([z, z])], keepdims=0)])
    loss = b.aiGraphcore.identityloss([total], reduction=graft.ReductionType.Sum)
    o = graft.SessionOptions(enableReplicatedGraphs=True, replicatedGraphCount=R)
    lr = 0.1
    s = graft.TrainingSession(fnModel=b.getModelProto(), loss=loss,
                              dataFlow=graft.DataFlow(1, {loss: graft.AnchorReturnType("All")}),
                              optimizer=graft.ConstSGD(lr), deviceInfo=graft.DeviceManager().createCpuDevice(R, 1),
                              userOptions=o)
    s.prepareDevice()
    s.weightsFromHost()
    xs = rng.standard_normal((R, B, IN)).astype(np.float32)
    cs = rng.standard_normal((R, B, N)).astype(np.float32)
    s.run(graft.PyStepIO({x: xs, c: cs}, s.initAnchorArrays()))
    got = read(s, [w, v])
    # dL/dw = sum_s x_s^T (sum_r c_r); dL/dv = sum_s x_s^T (R * 2 x_s v): every replica's z holds x_s v.
    csum = cs.sum(0)
    gw = sum(xs[s_].T @ csum for s_ in range(R))
    gv = sum(xs[s_].T @ (R * 2 * (xs[s_] @ v0)) for s_ in range(R))
    np.testing.assert_allclose(got[w], w0 - lr * gw, rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(got[v], v0 - lr * gv, rtol=1e-5, atol=1e-5)


GROUPS = [("Consecutive", 1), ("Consecutive", 2), ("Orthogonal", 1), ("Orthogonal", 2), ("All", 0), ("Ungrouped", 0)]


def test_collective_ops_in_comm_groups_across_two_replicas():
    # Built without a replica count (groups of 2 included: the session checks them), run on 2.
    xs = np.array([[1, 2, 3, 4, 5], [10, 20, 30, 40, 50]], np.float32)
    kinds = [("allreduce", "Add"), ("allreduce", "Mean"), ("allgather", None), ("reducescatter", "Add"),
             ("reducescatter", "Mean")]

    def build(b):
        x = b.addInputTensor(graft.TensorInfo("FLOAT", [5]), "x")
        outs = []
        for group in GROUPS:
            for kind, op in kinds:
                f = getattr(b.aiGraphcore, "replicated" + kind)
                args = [operator(op), comm_group(*group)] if op else [comm_group(*group)]
                outs.append(f([x], *args))
        return outs, x

    got = iter(_inference(build, lambda x: {x: xs}))
    for group in GROUPS:
        for kind, op in kinds:
            want = {"allreduce": lambda: collective_reference.allreduce(xs, group, op),
                    "allgather": lambda: collective_reference.allgather(xs, group),
                    "reducescatter": lambda: collective_reference.reducescatter(xs, group, op)}[kind]()
            np.testing.assert_allclose(next(got), want, rtol=1e-6, err_msg=f"{kind} {op} over {group}")


@pytest.mark.parametrize("groups", [(("Consecutive", 1), ("Orthogonal", 2), ("Consecutive", 2), "Mean"),
                                    (("Orthogonal", 2), ("Consecutive", 1), ("Orthogonal", 1), "Add"),
                                    (("Ungrouped", 0), ("Consecutive", 2), ("Orthogonal", 2), "Add")])
def test_gradients_through_collective_ops_in_comm_groups(groups):
    # The VJPs of the three collectives over their groups: one SGD step against numpy's gradient
    # of the sum of the replicas' losses (collective_reference.trained_weights).
    R = 2
    model, (x, c, d), weights, loss, init = collective_reference.training_model(R, *groups)
    s = graft.TrainingSession(fnModel=model, loss=loss, dataFlow=graft.DataFlow(1, {loss: graft.AnchorReturnType("All")}),
                              optimizer=graft.ConstSGD(collective_reference.LR),
                              deviceInfo=graft.DeviceManager().createCpuDevice(R, 1),
                              userOptions=graft.SessionOptions(enableReplicatedGraphs=True, replicatedGraphCount=R))
    s.prepareDevice()
    s.weightsFromHost()
    xs, cs, ds = collective_reference.training_data(R, groups[2])
    s.run(graft.PyStepIO({x: xs, c: cs, d: ds}, s.initAnchorArrays()))
    got = read(s, weights)
    want = collective_reference.trained_weights(init, xs, cs, ds, *groups)
    for w, expected in zip(weights, want):
        np.testing.assert_allclose(got[w], expected, rtol=1e-5, atol=1e-5, err_msg=w)
    assert not np.allclose(got[weights[2]], init[2])  # the reduce-scatter's weight moved


def test_a_comm_group_that_does_not_divide_the_replicas_is_refused_by_the_session():
    b = graft.Builder()
    x = b.addInputTensor(graft.TensorInfo("FLOAT", [3]), "x")
    y = b.aiGraphcore.replicatedallgather([x], comm_group("Consecutive", 3), debugContext="gather3")
    assert b.getTensorShape(y) == [9]  # the Builder types the group of 3 it names
    flow = graft.DataFlow(1, {y: graft.AnchorReturnType("All")})
    o = graft.SessionOptions(enableReplicatedGraphs=True, replicatedGraphCount=2)
    with pytest.raises(graft.Error, match=r"ReplicatedAllGather node 'gather3.*': the Consecutive CommGroup of "
                                          r"replicaGroupSize 3 does not divide the session's 2 replicas"):
        graft.InferenceSession(fnModel=b.getModelProto(), dataFlow=flow,
                               deviceInfo=graft.DeviceManager().createCpuDevice(2, 1), userOptions=o)
    b = graft.Builder()
    x = b.addInputTensor(graft.TensorInfo("FLOAT", [3]), "x")
    y = b.aiGraphcore.replicatedallreduce([x], operator("Add"), comm_group("Orthogonal", 2))
    with pytest.raises(graft.Error, match=r"the Orthogonal CommGroup of replicaGroupSize 2 does not divide the "
                                          r"session's 1 replicas"):
        graft.InferenceSession(fnModel=b.getModelProto(), dataFlow=graft.DataFlow(1, {y: graft.AnchorReturnType("All")}),
                               deviceInfo=graft.DeviceManager().createCpuDevice())
    with pytest.raises(graft.Error, match="the Consecutive CommGroup needs replicaGroupSize >= 1, got 0"):
        b.aiGraphcore.replicatedallgather([x], comm_group("Consecutive", 0))


def test_a_collective_op_outside_replication_runs_as_one_replica():
    b = graft.Builder()
    x = b.addInputTensor(graft.TensorInfo("FLOAT", [2, 2]), "x")
    y = b.aiGraphcore.replicatedallgather([b.aiGraphcore.replicatedallreduce([x])])
    s = graft.InferenceSession(fnModel=b.getModelProto(), dataFlow=graft.DataFlow(1, {y: graft.AnchorReturnType("All")}),
                               deviceInfo=graft.DeviceManager().createCpuDevice())
    s.prepareDevice()
    out = s.initAnchorArrays()
    s.run(graft.PyStepIO({x: np.arange(4, dtype=np.float32).reshape(2, 2)}, out))
    np.testing.assert_array_equal(out[y], np.arange(4, dtype=np.float32))
    with pytest.raises(graft.Error, match="commGroup must be a CommGroup"):
        b.aiGraphcore.replicatedallreduce([x], graft.CollectiveOperator.Add, [1, 2, 3])


# ---- optimizer-state sharding -------------------------------------------------------------------

def _sharded_session(shard, opt, accum=1, replicas=2, popart_name=False, model_fn=deep_mlp, B=3):
    model, x, label, loss, weights = model_fn(B)
    o = graft.SessionOptions(enableReplicatedGraphs=True, replicatedGraphCount=replicas,
                             accumulationAndReplicationReductionType=graft.ReductionType.Mean)
    if accum > 1:
        o.enableGradientAccumulation, o.accumulationFactor = True, accum
    if shard and popart_name:
        o.optimizerStateTensorLocationSettings.location.replicatedTensorSharding = graft.ReplicatedTensorSharding.On
    elif shard:
        o.shardOptimizerState = True
    s = graft.TrainingSession(fnModel=model, loss=loss, dataFlow=graft.DataFlow(1, {loss: graft.AnchorReturnType("All")}),
                              optimizer=optimizer(opt), deviceInfo=graft.DeviceManager().createCpuDevice(replicas, 1),
                              userOptions=o)
    s.prepareDevice()
    s.weightsFromHost()
    return s, x, label, weights


def _steps(s, x, label, steps, accum=1, replicas=2, B=3, seed=3):
    rng = np.random.default_rng(seed)
    for _ in range(steps):
        xs = rng.standard_normal((accum, replicas, B, IN)).astype(np.float32)
        ys = rng.integers(0, OUT, (accum, replicas, B)).astype(np.int32)
        shape = lead(accum, replicas)
        s.run(graft.PyStepIO({x: xs.reshape(shape + [B, IN]), label: ys.reshape(shape + [B])}, s.initAnchorArrays()))


def _state(s, weights, kinds):
    ids = [f"{k}___{w}" for w in weights for k in kinds]
    out = {i: np.zeros(s.getInfo(i).shape(), np.float32) for i in ids}
    s.readWeights(graft.PyWeightsIO(out))
    return out


@pytest.mark.parametrize("opt,accum,kinds", [("sgd", 1, ["Accl"]), ("sgd", 2, ["Accl"]),
                                             ("adam", 1, ["Accl1", "Accl2", "Step"]), ("adam", 2, ["Accl1", "Accl2"])])
def test_sharded_optimizer_state_gives_the_unsharded_update(opt, accum, kinds):
    full, x, label, weights = _sharded_session(False, opt, accum)
    shard, *_ = _sharded_session(True, opt, accum, popart_name=(opt == "adam"))
    for step in range(3):
        _steps(full, x, label, 1, accum, seed=step)
        _steps(shard, x, label, 1, accum, seed=step)
        want, got = read(full, weights), read(shard, weights)
        for w in weights:
            np.testing.assert_allclose(got[w], want[w], rtol=1e-6, atol=1e-7, err_msg=f"{w} after step {step}")
    # The state itself, gathered from the shards for weights IO, is the unsharded state.
    a, b = _state(full, weights, kinds), _state(shard, weights, kinds)
    for k in a:
        np.testing.assert_allclose(b[k], a[k], rtol=1e-6, atol=1e-7, err_msg=k)
    # Each replica holds half of the per-element state (measured in its optimizer step's tensors).
    per_full, per_shard = full.replicaOptimizerStateBytes(), shard.replicaOptimizerStateBytes()
    assert len(per_full) == len(per_shard) == 2
    elems = sum(np.prod(full.getInfo(w).shape()) for w in weights)
    per_element = sum(1 for k in kinds if k != "Step") * 4 * elems
    steps = (4 * len(weights)) if opt == "adam" else 0  # Adam's step counter: one float per weight each
    assert per_full == [per_element + steps] * 2
    assert per_shard == [per_element // 2 + steps] * 2, per_shard  # every weight has an even element count


@pytest.mark.parametrize("shard", [True, False])
def test_written_state_reaches_every_replicas_slice_of_the_step(shard):
    # Adam's step counter is a private copy in each replica's slice of the optimizer step (split
    # with the state sharded or whole): a session given another's weights and state, step counter
    # included, continues exactly as the other (with the counter of a fresh session, Adam's bias
    # correction would differ and so would the weights).
    a, x, label, weights = _sharded_session(shard, "adam")
    b, *_ = _sharded_session(shard, "adam")
    _steps(a, x, label, 2)
    state = _state(a, weights, ["Accl1", "Accl2", "Step"])
    assert all(np.all(state[f"Step___{w}"] == 2) for w in weights), state
    state.update(read(a, weights))
    b.writeWeights(graft.PyWeightsIO(state))
    _steps(a, x, label, 1, seed=9)
    _steps(b, x, label, 1, seed=9)
    got, want = read(b, weights), read(a, weights)
    for w in weights:
        np.testing.assert_array_equal(got[w], want[w], err_msg=w)
    assert all(np.all(_state(b, weights, ["Step"])[f"Step___{w}"] == 3) for w in weights)


def test_sharding_errors_name_the_option():
    model, x, label, loss, weights = deep_mlp(3)
    flow = graft.DataFlow(1, {loss: graft.AnchorReturnType("All")})
    with pytest.raises(graft.Error, match="shardOptimizerState shards the optimizer state across replicas"):
        graft.TrainingSession(fnModel=model, loss=loss, dataFlow=flow, optimizer=optimizer("sgd"),
                              deviceInfo=graft.DeviceManager().createCpuDevice(1, 1),
                              userOptions=graft.SessionOptions(shardOptimizerState=True))
    o = graft.SessionOptions(enableReplicatedGraphs=True, replicatedGraphCount=2, shardOptimizerState=True)
    lamb = graft.Adam({"defaultLearningRate": (0.01, True)}, mode=graft.AdamMode.Lamb)
    with pytest.raises(graft.Error, match="Lamb scales each weight's update"):
        graft.TrainingSession(fnModel=model, loss=loss, dataFlow=flow, optimizer=lamb,
                              deviceInfo=graft.DeviceManager().createCpuDevice(2, 1), userOptions=o)
