"""One instance of a distributed training run (started by test_distributed.py under mpirun or
``graft launch``): the MLP of test_replication.py, each instance training its replicas on its slice
of a batch that every instance generates alike.

    python distributed_train.py MODE OUT [STEPS]

MODE: train (write the final weights to OUT.npz on rank 0, and a checkpoint OUT.onnx),
hang (rank 1 stops answering before step 2), kill (rank 1 is killed before step 2),
mismatch (rank 1 builds another model), popdist (configured with graft.distributed only).
"""
import os
import signal
import sys
import time

import numpy as np

import graft
import graft.distributed as popdist

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
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
    rank = popdist.getInstanceIndex()
    opts = graft.SessionOptions()
    popdist.configureSessionOptions(opts)
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
    print(f"rank {rank}: done", flush=True)


if __name__ == "__main__":
    main()
