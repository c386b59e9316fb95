"""One instance of a distributed training run (started by test_distributed.py under mpirun or
``graft launch``): the MLP of test_replication.py, each instance training its replicas on its slice
of a batch that every instance generates alike.

    python distributed_train.py MODE OUT [STEPS] [OPTIMIZER] [ACCUMULATION] [OPTIONS]

MODE: train (write the final weights to OUT.npz on rank 0, and a checkpoint OUT.onnx),
hang (rank 1 stops answering before step 2), kill (rank 1 is killed before step 2),
mismatch (rank 1 builds another model), popdist (configured with graft.distributed only),
collectives (the collective ops over every replica of every instance, in CommGroups:
OUT.rank<r>.npz holds their anchors and the weights w, v, u after one step through them; see
test_distributed.py). OPTIONS: comma-separated bucket=<gradientBucketBytes>, shard
(shardOptimizerState).
"""
import os
import signal
import sys
import time

import numpy as np

# This checkout's graft (as conftest.py does), not one a venv's .pth names for another checkout.
_HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.normpath(os.path.join(_HERE, "..", "..", "python")))
sys.path.insert(0, _HERE)

import graft  # noqa: E402
import graft.distributed as popdist  # noqa: E402
from test_replication import IN, OUT, mlp, optimizer  # noqa: E402

B = 3


def data(steps, total_replicas, accum, seed=5):
    rng = np.random.default_rng(seed)
    xs = rng.standard_normal((steps, accum, total_replicas, B, IN)).astype(np.float32)
    ys = rng.integers(0, OUT, (steps, accum, total_replicas, B)).astype(np.int32)
    return xs, ys


def main():
    mode, out = sys.argv[1], sys.argv[2]
    steps = int(sys.argv[3]) if len(sys.argv) > 3 else 3
    opt = sys.argv[4] if len(sys.argv) > 4 else "adam"
    accum = int(sys.argv[5]) if len(sys.argv) > 5 else 2
    extra = [o for o in (sys.argv[6] if len(sys.argv) > 6 else "").split(",") if o]
    rank = popdist.getInstanceIndex()
    opts = graft.SessionOptions()
    popdist.configureSessionOptions(opts)
    for o in extra:
        if o.startswith("bucket="):
            opts.gradientBucketBytes = int(o.split("=")[1])
        elif o == "shard":
            opts.shardOptimizerState = True
    if mode == "collectives":
        return collectives(out, opts, rank)
    if mode in ("hang", "kill"):
        opts.collectiveTimeoutSeconds = 3.0
    opts.enableGradientAccumulation = True
    opts.accumulationFactor = accum
    opts.accumulationAndReplicationReductionType = graft.ReductionType.Mean
    local, offset, total = popdist.getNumLocalReplicas(), popdist.getReplicaIndexOffset(), popdist.getNumTotalReplicas()
    # Different initial weights per rank: weightsFromHost must make them rank 0's.
    model, x, label, loss, weights = mlp(B, seed=rank)
    if mode == "mismatch" and rank == 1:
        opts.accumulationFactor = accum + 1  # other options than rank 0's
    session = graft.TrainingSession(fnModel=model, loss=loss,
                                    dataFlow=graft.DataFlow(1, {loss: graft.AnchorReturnType("All")}),
                                    optimizer=optimizer(opt), deviceInfo=popdist.getDevice(),
                                    userOptions=opts)
    try:
        session.prepareDevice()
        session.weightsFromHost()
        xs, ys = data(steps, total, accum)
        for step in range(steps):
            if step == 1 and rank == 1 and mode == "hang":
                time.sleep(60)
            if step == 1 and rank == 1 and mode == "kill":
                os.kill(os.getpid(), signal.SIGKILL)
            mine = slice(offset, offset + local)
            # PopART's layout [accumulationFactor, replicas, ...], dimensions of size 1 left out.
            lead = [d for d in (accum, local) if d > 1]
            xi, yi = xs[step][:, mine].reshape(lead + [B, IN]), ys[step][:, mine].reshape(lead + [B])
            session.run(graft.PyStepIO({x: np.ascontiguousarray(xi), label: np.ascontiguousarray(yi)},
                                       session.initAnchorArrays()))
            session.modelToHost(out + ".onnx")
    except graft.Error as e:
        print(f"rank {rank}: graft.Error: {e}", flush=True)
        sys.stdout.flush()
        os._exit(3)  # MPI cannot finalise with a dead peer
    w = {k: np.zeros(session.getInfo(k).shape(), np.float32) for k in weights}
    session.weightsToHost()
    session.readWeights(graft.PyWeightsIO(w))
    np.savez(f"{out}.rank{rank}.npz", **w)
    print(f"rank {rank}: pinned to CPUs {sorted(pinned_cpus())}", flush=True)
    print(f"rank {rank}: done", flush=True)


def pinned_cpus():
    """The CPUs of this process's threads that are pinned to one CPU (graft's replica workers)."""
    allowed = os.sched_getaffinity(0)
    cpus = set()
    for tid in os.listdir("/proc/self/task"):
        try:
            mine = os.sched_getaffinity(int(tid))
        except OSError:  # the thread ended meanwhile
            continue
        if len(mine) == 1 and mine != allowed:
            cpus |= mine
    return cpus


# The groups of the training step through the collectives (collective_reference.training_model).
COLLECTIVE_GROUPS = (("Consecutive", 2), ("Orthogonal", 2), ("Orthogonal", 2), "Mean")


def collectives(out, opts, rank):
    """Forward: each collective over the 4 replicas of 2 instances, in groups; training: one SGD
    step through an all-reduce, an all-gather and a reduce-scatter, each over a group of 2."""
    import collective_reference as ref

    local, offset, total = popdist.getNumLocalReplicas(), popdist.getReplicaIndexOffset(), popdist.getNumTotalReplicas()
    mine = slice(offset, offset + local)
    b = graft.Builder()
    x = b.addInputTensor(graft.TensorInfo("FLOAT", [3]), "x")
    G, T = graft.CommGroup, graft.CommGroupType
    outs = {
        "all": b.aiGraphcore.replicatedallreduce([x]),
        "consecutive": b.aiGraphcore.replicatedallreduce([x], graft.CollectiveOperator.Add, G(T.Consecutive, 2)),
        "orthogonal": b.aiGraphcore.replicatedallreduce([x], graft.CollectiveOperator.Add, G(T.Orthogonal, 2)),
        "scatter": b.aiGraphcore.replicatedreducescatter([x]),
        "scatter_consecutive": b.aiGraphcore.replicatedreducescatter([x], graft.CollectiveOperator.Add,
                                                                     G(T.Consecutive, 2)),
        "gather": b.aiGraphcore.replicatedallgather([x], G(T.Orthogonal, 2)),
        "gather_consecutive": b.aiGraphcore.replicatedallgather([x], G(T.Consecutive, 2)),
    }
    s = graft.InferenceSession(fnModel=b.getModelProto(),
                               dataFlow=graft.DataFlow(1, {t: graft.AnchorReturnType("All") for t in outs.values()}),
                               deviceInfo=popdist.getDevice(), userOptions=opts)
    s.prepareDevice()
    xs = collective_inputs(total)
    anchors = s.initAnchorArrays()
    s.run(graft.PyStepIO({x: np.ascontiguousarray(xs[mine])}, anchors))
    result = {k: anchors[t].copy() for k, t in outs.items()}
    # Training through the collectives (as test_replication_ops.py does in one process).
    model, inputs, weights, loss, _ = ref.training_model(total, *COLLECTIVE_GROUPS)
    t = graft.TrainingSession(fnModel=model, loss=loss,
                              dataFlow=graft.DataFlow(1, {loss: graft.AnchorReturnType("All")}),
                              optimizer=graft.ConstSGD(ref.LR), deviceInfo=popdist.getDevice(), userOptions=opts)
    t.prepareDevice()
    t.weightsFromHost()
    data = ref.training_data(total, COLLECTIVE_GROUPS[2])
    t.run(graft.PyStepIO({i: np.ascontiguousarray(a[mine]) for i, a in zip(inputs, data)}, t.initAnchorArrays()))
    got = {k: np.zeros(t.getInfo(k).shape(), np.float32) for k in weights}
    t.weightsToHost()
    t.readWeights(graft.PyWeightsIO(got))
    np.savez(f"{out}.rank{rank}.npz", **result, **{name: got[k] for name, k in zip("wvu", weights)})
    print(f"rank {rank}: done", flush=True)


def collective_inputs(total):
    """Replica g's x of the forward collectives: [g + 1, 10 (g + 1), 100 (g + 1)]."""
    return np.array([[g + 1, 10 * (g + 1), 100 * (g + 1)] for g in range(total)], np.float32)


if __name__ == "__main__":
    main()
