"""Replicas in one process (docs/replication.md): R replicas train exactly as one replica with R
times the micro-batch, step by step, with SGD and Adam, with and without gradient accumulation and
pipelining; PopART's input and anchor layout; errors for what does not fit."""
import contextlib

import numpy as np
import pytest

import graft

IN, HID, OUT = 6, 12, 4


def mlp(batch, pipelined=False, reduction="Mean", seed=0):
    """x [batch, IN] -> matmul, relu -> matmul -> log-softmax -> nll loss. Returns (model, x, label,
    loss, weight ids)."""
    rng = np.random.default_rng(seed)
    b = graft.Builder()
    x = b.addInputTensor(graft.TensorInfo("FLOAT", [batch, IN]), "x")
    label = b.addInputTensor(graft.TensorInfo("INT32", [batch]), "label")
    w0 = b.addInitializedInputTensor(rng.standard_normal((IN, HID)).astype(np.float32) * 0.5, "w0")
    w1 = b.addInitializedInputTensor(rng.standard_normal((HID, OUT)).astype(np.float32) * 0.5, "w1")

    def stage(i):
        s = contextlib.ExitStack()
        if not pipelined:
            return s
        s.enter_context(b.virtualGraph(i))
        s.enter_context(b.pipelineStage(i))
        return s

    with stage(0):
        h = b.aiOnnx.relu([b.aiOnnx.matmul([x, w0])])
    with stage(1):
        lp = b.aiOnnx.logsoftmax([b.aiOnnx.matmul([h, w1])], axis=-1)
        red = graft.ReductionType.Mean if reduction == "Mean" else graft.ReductionType.Sum
        loss = b.aiGraphcore.nllloss([lp, label], red, inputIsLogProbability=True)
    return b.getModelProto(), x, label, loss, [w0, w1]


def optimizer(kind):
    if kind == "sgd":
        return graft.SGD({"defaultLearningRate": (0.1, True), "defaultMomentum": (0.9, True)})
    if kind == "lamb":  # needs whole weights: one optimizer step, not split between the replicas
        return graft.Adam({"defaultLearningRate": (0.01, True), "defaultEps": (1e-6, True)}, mode=graft.AdamMode.Lamb)
    return graft.Adam({"defaultLearningRate": (0.01, True), "defaultEps": (1e-6, True)})


def options(replicas, accum, mean, pipelined=False):
    o = graft.SessionOptions()
    if replicas > 1:
        o.enableReplicatedGraphs = True
        o.replicatedGraphCount = replicas
    if accum > 1:
        o.enableGradientAccumulation = True
        o.accumulationFactor = accum
    o.accumulationAndReplicationReductionType = graft.ReductionType.Mean if mean else graft.ReductionType.Sum
    if pipelined:
        o.virtualGraphMode = graft.VirtualGraphMode.Manual
        o.enablePipelining = True
    return o


def session(batch, replicas, accum, opt, mean, pipelined=False, bps=1, loss_reduction="Mean"):
    model, x, label, loss, weights = mlp(batch, pipelined, loss_reduction)
    stages = 2 if pipelined else 1
    device = graft.DeviceManager().createCpuDevice(replicas * stages, 1)
    s = graft.TrainingSession(fnModel=model, loss=loss,
                              dataFlow=graft.DataFlow(bps, {loss: graft.AnchorReturnType("All")}),
                              optimizer=optimizer(opt), deviceInfo=device,
                              userOptions=options(replicas, accum, mean, pipelined))
    s.prepareDevice()
    s.weightsFromHost()
    return s, x, label, loss, weights


def read(s, weights):
    out = {w: np.zeros(s.getInfo(w).shape(), np.float32) for w in weights}
    s.weightsToHost()
    s.readWeights(graft.PyWeightsIO(out))
    return out


def lead(*dims):
    """PopART's rule: leading dimensions of size 1 are left out."""
    return [d for d in dims if d > 1]


CASES = [  # optimizer, accumulation factor, mean reduction, loss reduction
    ("sgd", 1, True, "Mean"),
    ("sgd", 1, False, "Sum"),
    ("adam", 1, True, "Mean"),
    ("sgd", 3, True, "Mean"),
    ("sgd", 2, False, "Sum"),
    ("adam", 2, True, "Mean"),
    ("lamb", 1, True, "Mean"),
    ("lamb", 2, False, "Sum"),
]


@pytest.mark.parametrize("opt,accum,mean,loss_reduction", CASES)
def test_two_replicas_train_as_one_with_twice_the_batch(opt, accum, mean, loss_reduction):
    # With a Mean loss and Mean reduction, the mean over 2 replicas of B samples is the mean over 2B;
    # with Sum and Sum it is the sum. Either way the two runs see the same gradients.
    B, R, steps, bps = 3, 2, 4, 2
    rep, x, label, loss, weights = session(B, R, accum, opt, mean, bps=bps, loss_reduction=loss_reduction)
    one, *_ = session(R * B, 1, accum, opt, mean, bps=bps, loss_reduction=loss_reduction)
    assert rep.replicationFactor == 2
    assert list(rep.anchorArrayShape(loss)) == lead(bps, accum, R)
    rng = np.random.default_rng(1)
    start = read(one, weights)
    for step in range(steps):
        xs = rng.standard_normal((bps, accum, R, B, IN)).astype(np.float32)
        ys = rng.integers(0, OUT, (bps, accum, R, B)).astype(np.int32)
        shape = lead(bps, accum, R)
        anchors = rep.initAnchorArrays()
        rep.run(graft.PyStepIO({x: xs.reshape(shape + [B, IN]), label: ys.reshape(shape + [B])}, anchors))
        ref_anchors = one.initAnchorArrays()
        one.run(graft.PyStepIO({x: xs.reshape(lead(bps, accum) + [R * B, IN]),
                                label: ys.reshape(lead(bps, accum) + [R * B])}, ref_anchors))
        got, want = read(rep, weights), read(one, weights)
        for w in weights:
            np.testing.assert_allclose(got[w], want[w], rtol=2e-5, atol=2e-6, err_msg=f"{w} after step {step}")
        # The replicas' losses: each the loss of its own samples; together the batch's loss.
        per_replica = anchors[loss].reshape(bps, accum, R)
        total = ref_anchors[loss].reshape(bps, accum)
        combined = per_replica.mean(-1) if loss_reduction == "Mean" else per_replica.sum(-1)
        np.testing.assert_allclose(combined, total, rtol=2e-5, atol=1e-6)
        assert not np.allclose(per_replica[..., 0], per_replica[..., 1])
    # The weights moved: the comparison was not between two untrained models.
    assert not np.allclose(read(rep, weights)[weights[0]], start[weights[0]])


@pytest.mark.parametrize("opt", ["sgd", "adam"])
def test_two_replicas_each_pipelined_train_as_one_with_twice_the_batch(opt):
    B, R, accum, steps = 2, 2, 2, 3
    rep, x, label, loss, weights = session(B, R, accum, opt, True, pipelined=True)
    one, *_ = session(R * B, 1, accum, opt, True, pipelined=True)
    assert "on 2 virtual devices" in rep.stagesText()  # each replica: its own 2-stage pipeline
    rng = np.random.default_rng(2)
    start = read(one, weights)
    for step in range(steps):
        xs = rng.standard_normal((accum, R, B, IN)).astype(np.float32)
        ys = rng.integers(0, OUT, (accum, R, B)).astype(np.int32)
        rep.run(graft.PyStepIO({x: xs, label: ys}, rep.initAnchorArrays()))
        one.run(graft.PyStepIO({x: xs.reshape(accum, R * B, IN), label: ys.reshape(accum, R * B)},
                               one.initAnchorArrays()))
        got, want = read(rep, weights), read(one, weights)
        for w in weights:
            np.testing.assert_allclose(got[w], want[w], rtol=2e-5, atol=2e-6, err_msg=f"{w} after step {step}")
    assert not np.allclose(read(one, weights)[weights[1]], start[weights[1]])


def test_replicated_inference_splits_the_batch_by_replica():
    model, x, label, loss, weights = mlp(2)
    o = graft.SessionOptions(enableReplicatedGraphs=True, replicatedGraphCount=2)
    s = graft.InferenceSession(model, graft.DataFlow(3, {"x": graft.AnchorReturnType("All"),
                                                         loss: graft.AnchorReturnType("Final")}),
                               graft.DeviceManager().createCpuDevice(2, 1), userOptions=o)
    s.prepareDevice()
    assert list(s.inputArrayShape(x)) == [3, 2, 2, IN]
    assert list(s.anchorArrayShape(loss)) == [2]
    xs = np.arange(3 * 2 * 2 * IN, dtype=np.float32).reshape(3, 2, 2, IN)
    ys = np.zeros((3, 2, 2), np.int32)
    anchors = s.initAnchorArrays()
    s.run(graft.PyStepIO({x: xs, label: ys}, anchors))
    np.testing.assert_array_equal(anchors["x"], xs)  # each replica got its own slice, in order
    ref = graft.InferenceSession(model, graft.DataFlow(1, {loss: graft.AnchorReturnType("All")}),
                                 graft.DeviceManager().createCpuDevice())
    for r in range(2):  # Final: the last batch's loss of each replica
        out = ref.initAnchorArrays()
        ref.run(graft.PyStepIO({x: xs[2, r], label: ys[2, r]}, out))
        np.testing.assert_allclose(anchors[loss][r], out[loss], rtol=1e-6)


def test_input_without_the_replica_dimension_is_an_error():
    s, x, label, loss, _ = session(3, 2, 1, "sgd", True)
    xs = np.zeros((3, IN), np.float32)
    ys = np.zeros((3,), np.int32)
    with pytest.raises(graft.Error, match=r"input 'x'.*leading dimensions \[2\].*replicatedGraphCount"):
        s.run(graft.PyStepIO({x: xs, label: ys}, s.initAnchorArrays()))
    with pytest.raises(graft.Error, match=r"input 'x'.*leading dimensions \[2\]"):
        s.run(graft.PyStepIO({x: np.zeros((3, 3, IN), np.float32), label: np.zeros((2, 3), np.int32)},
                             s.initAnchorArrays()))
    # The session stays usable.
    s.run(graft.PyStepIO({x: np.zeros((2, 3, IN), np.float32), label: np.zeros((2, 3), np.int32)},
                         s.initAnchorArrays()))


def test_replica_count_that_does_not_fit_the_device_is_an_error():
    model, x, label, loss, _ = mlp(2)
    df = graft.DataFlow(1, {loss: graft.AnchorReturnType("All")})
    with pytest.raises(graft.Error, match=r"replicatedGraphCount = 2.*needs 2 virtual devices.*it has 1"):
        graft.TrainingSession(model, df, loss, optimizer("sgd"), graft.DeviceManager().createCpuDevice(1, 1),
                              userOptions=options(2, 1, True))
    with pytest.raises(graft.Error, match=r"replicatedGraphCount is 2 but enableReplicatedGraphs is off"):
        graft.TrainingSession(model, df, loss, optimizer("sgd"), graft.DeviceManager().createCpuDevice(2, 1),
                              userOptions=graft.SessionOptions(replicatedGraphCount=2))


def test_replica_count_that_does_not_fit_the_cores_is_an_error():
    import os
    cores = os.cpu_count()
    model, x, label, loss, _ = mlp(2)
    df = graft.DataFlow(1, {loss: graft.AnchorReturnType("All")})
    r = cores + 1
    with pytest.raises(graft.Error, match=rf"replicatedGraphCount = {r} replicas x 1 kernel thread each need {r} "
                                          rf"cores, this machine has {cores}"):
        graft.TrainingSession(model, df, loss, optimizer("sgd"), graft.DeviceManager().createCpuDevice(r, 1),
                              userOptions=options(r, 1, True))


def test_distributed_options_without_mpi_world_are_errors():
    model, x, label, loss, _ = mlp(2)
    df = graft.DataFlow(1, {loss: graft.AnchorReturnType("All")})
    o = graft.SessionOptions(globalReplicationFactor=2)
    with pytest.raises(graft.Error, match="globalReplicationFactor .2. and globalReplicaOffset .0. need "
                                          "enableDistributedReplicatedGraphs"):
        graft.TrainingSession(model, df, loss, optimizer("sgd"), graft.DeviceManager().createCpuDevice(1, 1),
                              userOptions=o)
