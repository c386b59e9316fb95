"""Throughput of a 2-stage pipeline (2 virtual devices, 1 core each) against the same model on one
core and against the unsplit model using 2 threads inside each op, for an MLP and an LSTM at
batch 1 and 4. Not a test: run it on an otherwise idle machine with at least 2 cores.

    python bench/pipeline_bench.py [--steps 5] [--bps 64] [--repeats 3] [--json out.json]
"""
import argparse
import json
import os
import sys
import time

import numpy as np

_HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.normpath(os.path.join(_HERE, "..", "python")))

import graft  # noqa: E402

graft_dm = graft.DeviceManager()


def mlp(batch, width=512, layers=8):
    """`layers` MatMul+Add+Relu; the first half on virtual device 0, the rest on 1."""
    rng = np.random.default_rng(0)
    b = graft.Builder()
    h = b.addInputTensor(graft.TensorInfo("FLOAT", [batch, width]), "x")
    for i in range(layers):
        stage = 0 if i < layers // 2 else 1
        with b.virtualGraph(stage), b.pipelineStage(stage):
            w = b.addInitializedInputTensor((rng.standard_normal((width, width)) / np.sqrt(width)).astype(np.float32))
            bias = b.addInitializedInputTensor(np.zeros(width, np.float32))
            h = b.aiOnnx.relu([b.aiOnnx.add([b.aiOnnx.matmul([h, w]), bias])])
    b.addOutputTensor(h)
    return b.getModelProto(), h, [batch, width]


def lstm(batch, hidden=256, seq=32, layers=2):
    """`layers` stacked LSTMs; layer i on virtual device i * 2 // layers."""
    rng = np.random.default_rng(0)
    b = graft.Builder()
    x = b.addInputTensor(graft.TensorInfo("FLOAT", [seq, batch, hidden]), "x")
    h = x
    for i in range(layers):
        stage = i * 2 // layers
        with b.virtualGraph(stage), b.pipelineStage(stage):
            s = 1 / np.sqrt(hidden)
            W = b.addInitializedInputTensor(rng.uniform(-s, s, (1, 4 * hidden, hidden)).astype(np.float32))
            R = b.addInitializedInputTensor(rng.uniform(-s, s, (1, 4 * hidden, hidden)).astype(np.float32))
            B = b.addInitializedInputTensor(np.zeros((1, 8 * hidden), np.float32))
            y = b.aiOnnx.lstm([h, W, R, B], 1, hidden_size=hidden)
            y = y[0] if isinstance(y, list) else y
            h = b.aiOnnx.squeeze([y], axes=[1])
    b.addOutputTensor(h)
    return b.getModelProto(), h, [seq, batch, hidden]


def throughput(model, out, shape, device, options, bps, steps, repeats):
    """Best of `repeats` of samples per second (a sample is one micro-batch row)."""
    s = graft.InferenceSession(model, graft.DataFlow(bps, {out: graft.AnchorReturnType("Final")}), device,
                               userOptions=options)
    s.prepareDevice()
    x = np.random.default_rng(1).standard_normal([bps] + shape).astype(np.float32)
    anchors = s.initAnchorArrays()
    io = graft.PyStepIO({"x": x}, anchors)
    s.run(io)  # warm-up
    best = 0.0
    batch = shape[0] if len(shape) == 2 else shape[1]
    for _ in range(repeats):
        t0 = time.perf_counter()
        for _ in range(steps):
            s.run(io)
        dt = time.perf_counter() - t0
        best = max(best, steps * bps * batch / dt)
    return best


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--steps", type=int, default=5)
    p.add_argument("--bps", type=int, default=64)
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--json", default="")
    p.add_argument("--models", default="mlp,lstm")
    p.add_argument("--batches", default="1,4")
    a = p.parse_args()
    configs = {
        "1 core": (lambda: graft_dm.createCpuDevice(1, coresPerVirtualDevice=1), graft.SessionOptions()),
        "unsplit, 2 threads": (lambda: graft_dm.createCpuDevice(1, coresPerVirtualDevice=2), graft.SessionOptions()),
        "2-stage pipeline": (lambda: graft_dm.createCpuDevice(2, coresPerVirtualDevice=1),
                             graft.SessionOptions(virtualGraphMode=graft.VirtualGraphMode.Manual,
                                                  enablePipelining=True)),
    }
    rows = []
    print(f"cores available: {len(os.sched_getaffinity(0))}, load average: {os.getloadavg()[0]:.2f}")
    print(f"{'model':<10}{'batch':>6}" + "".join(f"{k:>22}" for k in configs) + f"{'vs 1 core':>12}{'vs 2 threads':>14}")
    builders = {"mlp": mlp, "lstm": lstm}
    for name in a.models.split(","):
        build = builders[name]
        for batch in (int(v) for v in a.batches.split(",")):
            model, out, shape = build(batch)
            r = {k: throughput(model, out, shape, dev(), opts, a.bps, a.steps, a.repeats) for k, (dev, opts) in configs.items()}
            pipe = r["2-stage pipeline"]
            rows.append({"model": name, "batch": batch, **r,
                         "speedup_vs_1_core": pipe / r["1 core"], "speedup_vs_2_threads": pipe / r["unsplit, 2 threads"]})
            print(f"{name:<10}{batch:>6}" + "".join(f"{v:>18.0f} s/s" for v in r.values()) +
                  f"{pipe / r['1 core']:>11.2f}x{pipe / r['unsplit, 2 threads']:>13.2f}x", flush=True)
    if a.json:
        with open(a.json, "w") as f:
            json.dump(rows, f, indent=1)


if __name__ == "__main__":
    main()
