"""Training throughput (samples/s) of data parallelism on 2 cores, for an MLP at a global batch of
256 (--batch; docs/replication.md):

  1 process, 1 replica, 2 kernel threads           (createCpuDevice(1, 2), batch 256)
  1 process, 2 in-process replicas x 1 thread      (createCpuDevice(2, 1), 2 x 128)
  mpirun -np 2, 1 replica x 1 thread per process   (2 x 128, gradients summed between the processes:
                                                    in shared memory on one host, else over MPI)

then the cost model of the all-reduce for 2 -> 64 hosts from the model's gradient bytes and the
measured step time. Not a test: run it on an otherwise idle machine.

    python bench/replication_bench.py [--steps 20] [--width 512] [--layers 4] [--json out.json]

With --models mlp,resnet18,bert4 it measures the zoo's models instead (bench/zoo.py: PyTorch
definitions exported to ONNX with their loss by bench/export.py, run in the benchmark venv
.venv-bench that `make bench` makes), each at the global batch --zoo-batches gives (default mlp 512,
resnet18 8, bert4 4), the same three configurations, SGD. (The MLPs' defaults were 64 until
2026-12-04: a step of under 1 ms, or one bound by memory bandwidth, which no split between two
cores can speed up: docs/replication.md, "What the machine allows".)
"""
import argparse
import json
import os
import shutil
import subprocess
import sys
import time

import numpy as np

_HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.normpath(os.path.join(_HERE, "..", "python")))

import graft  # noqa: E402
import graft.distributed as popdist  # noqa: E402

CLASSES = 10


def mlp(batch, width, layers, seed=0):
    rng = np.random.default_rng(seed)
    b = graft.Builder()
    x = b.addInputTensor(graft.TensorInfo("FLOAT", [batch, width]), "x")
    label = b.addInputTensor(graft.TensorInfo("INT32", [batch]), "label")
    h, weights = x, []
    for i in range(layers):
        out = CLASSES if i == layers - 1 else width
        w = b.addInitializedInputTensor((rng.standard_normal((width, out)) / np.sqrt(width)).astype(np.float32))
        weights.append(w)
        h = b.aiOnnx.matmul([h, w])
        if i < layers - 1:
            h = b.aiOnnx.relu([h])
    lp = b.aiOnnx.logsoftmax([h], axis=-1)
    loss = b.aiGraphcore.nllloss([lp, label], graft.ReductionType.Mean, inputIsLogProbability=True)
    return b.getModelProto(), x, label, loss, weights


BUCKET_BYTES = None  # --bucket-bytes: SessionOptions.gradientBucketBytes (None: graft's default)
SHARD = False  # --shard: SessionOptions.shardOptimizerState (each replica updates its shard)


def rank_args():
    """--bucket-bytes and --shard for the mpirun ranks, as this process was given them."""
    return ([] if BUCKET_BYTES is None else ["--bucket-bytes", str(BUCKET_BYTES)]) + (["--shard"] if SHARD else [])


def session_options(replicas, distributed):
    opts = graft.SessionOptions(accumulationAndReplicationReductionType=graft.ReductionType.Mean)
    if BUCKET_BYTES is not None:
        opts.gradientBucketBytes = BUCKET_BYTES
    if SHARD and (distributed or replicas > 1):
        opts.shardOptimizerState = True
    if distributed:
        popdist.configureSessionOptions(opts)
    elif replicas > 1:
        opts.enableReplicatedGraphs = True
        opts.replicatedGraphCount = replicas
    return opts


def replicas_of(replicas, distributed):
    """(replicas in this process, replicas in all processes)."""
    if distributed:
        return popdist.getNumLocalReplicas(), popdist.getNumTotalReplicas()
    return replicas, replicas


def median_step(session, feeds, steps, warmup):
    """Seconds per step: the median of `steps` runs after `warmup` runs."""
    session.prepareDevice()
    session.weightsFromHost()
    anchors = session.initAnchorArrays()
    times = []
    for i in range(steps + warmup):
        t0 = time.perf_counter()
        session.run(graft.PyStepIO(feeds, anchors))
        if i >= warmup:
            times.append(time.perf_counter() - t0)
    return float(np.median(times))


def measure(global_batch, width, layers, steps, replicas, threads, distributed=False):
    """Seconds per step (median of `steps` after 3 warm-up steps) of one process's session, and the
    gradient bytes."""
    local, total = replicas_of(replicas, distributed)
    micro = global_batch // total
    model, x, label, loss, weights = mlp(micro, width, layers)
    s = graft.TrainingSession(fnModel=model, loss=loss, dataFlow=graft.DataFlow(1, {loss: graft.AnchorReturnType("Final")}),
                              optimizer=graft.SGD({"defaultLearningRate": (0.01, True)}),
                              deviceInfo=graft.DeviceManager().createCpuDevice(local, threads),
                              userOptions=session_options(replicas, distributed))
    rng = np.random.default_rng(1)
    lead = [local] if local > 1 else []
    xs = rng.standard_normal(lead + [micro, width]).astype(np.float32)
    ys = rng.integers(0, CLASSES, lead + [micro]).astype(np.int32)
    t = median_step(s, {x: xs, label: ys}, steps, 3)
    return t, sum(int(np.prod(s.getInfo(w).shape())) * 4 for w in weights)


ZOO_BATCHES = {"mlp": 512, "resnet18": 8, "bert4": 4}


def export_zoo(names, batches, zoo_dir):
    """Training ONNX models of the zoo at each global batch and half of it (one replica's), with the
    benchmark venv's PyTorch."""
    py = os.path.join(_HERE, "..", ".venv-bench", "bin", "python")
    todo = [(n, b) for n in names for b in (batches[n], batches[n] // 2)
            if not os.path.exists(os.path.join(zoo_dir, f"{n}_b{b}_train.onnx"))]
    if not todo:
        return
    os.makedirs(zoo_dir, exist_ok=True)
    code = ("import sys, json, os; sys.path.insert(0, %r); import export as E; meta = {}\n"
            "for n, b in %r: E.export_one(n, b, %r, meta); print('exported', n, b, flush=True)") % (_HERE, todo, zoo_dir)
    subprocess.run([py, "-c", code], check=True)


def measure_zoo(name, global_batch, zoo_dir, steps, replicas, threads, distributed=False):
    """Seconds per step (median of `steps` after 1 warm-up step) of a zoo model's training, and the
    gradient bytes."""
    local, total = replicas_of(replicas, distributed)
    micro = global_batch // total
    stem = os.path.join(zoo_dir, f"{name}_b{micro}")
    s = graft.TrainingSession(fnModel=stem + "_train.onnx", loss="loss",
                              dataFlow=graft.DataFlow(1, {"loss": graft.AnchorReturnType("Final")}),
                              optimizer=graft.SGD({"defaultLearningRate": (0.001, True)}),
                              deviceInfo=graft.DeviceManager().createCpuDevice(local, threads),
                              userOptions=session_options(replicas, distributed))
    x, y = np.load(stem + "_x.npy"), np.load(stem + "_y.npy")
    # Labels as the model declares them (inputInfo's dataType is a graft.DataType).
    if y.dtype == np.int64 and s.inputInfo("y").dataType().name != "INT64":
        y = y.astype(np.int32)
    if local > 1:
        x, y = np.stack([x] * local), np.stack([y] * local)
    t = median_step(s, {"x": x, "y": y}, steps, 1)
    return t, sum(int(np.prod(s.getInfo(w).shape())) * 4 for w in s.trainedWeightIds())


def mpirun_case(child_args):
    """Seconds per step of this script's --child under `mpirun -np 2` (rank 0's), or None when it
    cannot run (the reason on stderr)."""
    mpirun = shutil.which("mpirun")
    if not mpirun:
        print("mpirun case skipped: no mpirun (scripts/setup.sh installs openmpi-bin)", file=sys.stderr)
        return None
    cmd = [mpirun, "-np", "2", "--oversubscribe", "--bind-to", "none", "-x", "GRAFT_NUM_INSTANCES=2",
           "-x", "GRAFT_NUM_REPLICAS=2"]
    if os.geteuid() == 0:
        cmd.append("--allow-run-as-root")
    # OpenMPI's shared-memory transport copies large messages in one system call (CMA) where the
    # kernel lets the processes read each other's memory; some containers refuse it, and then
    # the run is repeated with the fragment-by-fragment copy (single_copy_mechanism none, about
    # 2x slower for this benchmark's all-reduce), named in the output.
    for mechanism in (None, "none"):
        env = dict(os.environ)
        if mechanism:
            env["OMPI_MCA_btl_vader_single_copy_mechanism"] = mechanism
        p = subprocess.run(cmd + [sys.executable, __file__, "--child"] + child_args, capture_output=True, text=True,
                           env=env)
        line = [ln for ln in p.stdout.splitlines() if ln.startswith("{")]
        if p.returncode == 0 and line:
            if mechanism:
                print(f"mpirun case: ran with btl_vader_single_copy_mechanism={mechanism}", file=sys.stderr)
            return json.loads(line[0])["seconds"]
        print(f"mpirun case failed (single_copy_mechanism {mechanism or 'default'}):", p.stdout, p.stderr,
              file=sys.stderr)
    return None


def three_configurations(measure_one, child_args):
    """The rows of the table: measure_one(replicas, threads) -> (seconds, gradient bytes) for 1 x 2
    threads and 2 replicas x 1 thread in this process, and mpirun -np 2 x 1 thread."""
    rows = {}
    rows["1 process, 2 threads"], grad_bytes = measure_one(1, 2)
    rows["2 in-process replicas x 1 thread"], _ = measure_one(2, 1)
    t = mpirun_case(child_args)
    if t is not None:
        rows["mpirun -np 2 x 1 thread"] = t
    return rows, grad_bytes


def print_rows(rows, batch):
    base = rows["1 process, 2 threads"]
    print(f"{'configuration':<36}{'ms/step':>10}{'samples/s':>12}{'vs 2 threads':>14}")
    for k, v in rows.items():
        print(f"{k:<36}{v * 1e3:>10.2f}{batch / v:>12.1f}{base / v:>14.2f}", flush=True)


def zoo_main(a):
    names = a.models.split(",")
    batches = dict(ZOO_BATCHES)
    for item in filter(None, a.zoo_batches.split(",")):
        k, v = item.split("=")
        batches[k] = int(v)
    export_zoo(names, batches, a.zoo)
    load = os.getloadavg()[0]
    results = {}
    for name in names:
        rows, grad_bytes = three_configurations(
            lambda replicas, threads: measure_zoo(name, batches[name], a.zoo, a.steps, replicas, threads),
            ["--models", name, "--zoo", a.zoo, "--steps", str(a.steps), "--batch", str(batches[name])] +
            rank_args())
        results[name] = {"rows": rows, "grad_bytes": grad_bytes, "batch": batches[name]}
        print(f"\n{name}, global batch {batches[name]}, SGD; {grad_bytes / 1e6:.2f} MB of gradients")
        print_rows(rows, batches[name])
    load_after = os.getloadavg()[0]
    print(f"\nload average (1 min): {load:.1f} before, {load_after:.1f} after")
    if a.json:
        with open(a.json, "w") as f:
            json.dump({"models": results, "load_before": load, "load_after": load_after}, f, indent=1)


def ring_allreduce_seconds(nbytes, hosts, gbit=25.0, latency=20e-6):
    """Ring all-reduce: 2 (n - 1) steps, each moving nbytes / n over every link."""
    if hosts <= 1:
        return 0.0
    bw = gbit * 1e9 / 8
    return 2 * (hosts - 1) / hosts * nbytes / bw + 2 * (hosts - 1) * latency


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--steps", type=int, default=20)
    ap.add_argument("--batch", type=int, default=256)
    ap.add_argument("--width", type=int, default=512)
    ap.add_argument("--layers", type=int, default=4)
    ap.add_argument("--json")
    ap.add_argument("--models", help="zoo models (mlp, resnet18, bert4) instead of the built-in MLP")
    ap.add_argument("--zoo", default=os.path.join(_HERE, "..", "build", "replication_zoo"),
                    help="folder of the exported zoo models")
    ap.add_argument("--zoo-batches", default="", help="e.g. resnet18=8,bert4=4 (global batches)")
    ap.add_argument("--bucket-bytes", type=int, help="SessionOptions.gradientBucketBytes (default: graft's)")
    ap.add_argument("--shard", action="store_true",
                    help="SessionOptions.shardOptimizerState in the replicated configurations")
    ap.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    a = ap.parse_args()
    global BUCKET_BYTES, SHARD
    BUCKET_BYTES = a.bucket_bytes
    SHARD = a.shard
    if a.child:  # one rank of the mpirun case
        if a.models:
            t, _ = measure_zoo(a.models, a.batch, a.zoo, a.steps, 1, 1, distributed=True)
        else:
            t, _ = measure(a.batch, a.width, a.layers, a.steps, 1, 1, distributed=True)
        if popdist.getInstanceIndex() == 0:
            print(json.dumps({"seconds": t}), flush=True)
        return
    if a.models:
        return zoo_main(a)
    rows, grad_bytes = three_configurations(
        lambda replicas, threads: measure(a.batch, a.width, a.layers, a.steps, replicas, threads),
        ["--steps", str(a.steps), "--batch", str(a.batch), "--width", str(a.width), "--layers", str(a.layers)] +
        rank_args())
    print(f"MLP {a.layers} x {a.width}, global batch {a.batch}, SGD; {grad_bytes / 1e6:.2f} MB of gradients")
    print_rows(rows, a.batch)
    # The cost model: backward ~ 2/3 of the step; the all-reduce hides behind it while shorter.
    print("\ncost model: ring all-reduce at 25 Gbit/s, 20 us per hop, against this step's compute")
    print(f"{'hosts':>6}{'all-reduce ms':>16}{'backward ms':>14}{'hidden':>8}")
    bwd = rows["1 process, 2 threads"] * 2 / 3
    model_rows = []
    for hosts in (2, 4, 8, 16, 32, 64):
        ar = ring_allreduce_seconds(grad_bytes, hosts)
        model_rows.append({"hosts": hosts, "allreduce_s": ar, "backward_s": bwd})
        print(f"{hosts:>6}{ar * 1e3:>16.3f}{bwd * 1e3:>14.2f}{'yes' if ar <= bwd else 'no':>8}")
    if a.json:
        with open(a.json, "w") as f:
            json.dump({"rows": rows, "grad_bytes": grad_bytes, "batch": a.batch, "cost_model": model_rows}, f, indent=1)


if __name__ == "__main__":
    main()
