#!/usr/bin/env python3
"""Hostile calls of graft's Python API (issue 16's categories), each in a forked child with an
address-space cap and a timeout: absurd thread and virtual-device counts, huge batches per step,
out-of-range Python integers, bad optimizer values, wrong anchor arrays, special files as models
and inputs, byte-flipped checkpoints, names that are not UTF-8, run() from several threads.

A case passes when it ends normally or with graft.Error; another exception, a signal, a memory
kill or the timeout is a finding. Prints the counts per category and exits 1 on any finding.

    .venv/bin/python tests/fuzz/campaign_api.py [--cases-per-category N] [--seed S]
"""
import argparse
import os
import random
import sys
import tempfile
import threading

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "..", "python"))

import numpy as np  # noqa: E402
import onnx  # noqa: E402
import onnx.helper as oh  # noqa: E402

import graft  # noqa: E402
from forked import l1_regression_model, run_forked  # noqa: E402

MEMORY_CAP = 4 << 30
TIMEOUT = 60
HUGE = [0, -1, 1, 2, 7, 2000, 40000, 100000, 10**6, 2**31 - 1, 2**31, 2**32, 2**63 - 1, 2**63, -2**31, 10**30]
FLOATS = [float("nan"), float("inf"), -float("inf"), -1.0, 0.0, 1.0, 1e30, -1e-30, 0.5, 2.0]


def mlp():
    b = graft.Builder()
    x = b.addInputTensor(graft.TensorInfo("FLOAT", [2, 4]), "x")
    w = b.addInitializedInputTensor(np.ones((4, 4), np.float32), "w")
    y = b.aiOnnx.relu([b.aiOnnx.matmul([x, w])], "y")
    b.addOutputTensor(y)
    return b.getModelProto(), y


train_model = l1_regression_model


def device():
    return graft.DeviceManager().createCpuDevice()


# ---- the categories: each draws one case from `rng` and runs it --------------------------------


def threads(rng, tmp):
    model, y = mlp()
    o = graft.SessionOptions()
    o.numThreads = rng.choice(HUGE)
    s = graft.InferenceSession(model, graft.DataFlow(1, [y]), device(), userOptions=o)
    s.prepareDevice()


def devices(rng, tmp):
    dm = graft.DeviceManager()
    n, c = rng.choice(HUGE), rng.choice(HUGE)
    d = dm.createCpuDevice(n, c) if rng.random() < 0.7 else dm.createReferenceDevice(n)
    if rng.random() < 0.3:
        model, y = mlp()
        o = graft.SessionOptions()
        o.virtualGraphMode = graft.VirtualGraphMode.Auto
        s = graft.InferenceSession(model, graft.DataFlow(1, [y]), d, userOptions=o)
        s.prepareDevice()


def batches(rng, tmp):
    model, y = mlp()
    bps = rng.choice(HUGE)
    s = graft.InferenceSession(model, graft.DataFlow(bps, [y]), device())
    s.prepareDevice()
    out = s.initAnchorArrays()
    s.run(graft.PyStepIO({"x": np.ones((bps, 2, 4) if bps > 1 else (2, 4), np.float32)}, out))


def optimizers(rng, tmp):
    model, loss, _ = train_model()
    keys = ["defaultLearningRate", "defaultMomentum", "defaultDampening", "defaultVelocityScaling",
            "defaultWeightDecay", "lossScaling"]
    if rng.random() < 0.5:
        params = {k: (rng.choice(FLOATS), rng.random() < 0.5) for k in rng.sample(keys, 2)}
        opt = graft.SGD(params)
    else:
        keys = ["defaultLearningRate", "defaultBeta1", "defaultBeta2", "defaultEps", "defaultWeightDecay"]
        opt = graft.Adam({k: (rng.choice(FLOATS), rng.random() < 0.5) for k in rng.sample(keys, 2)})
    s = graft.TrainingSession(model, graft.DataFlow(1, [loss]), loss, opt, device())
    s.prepareDevice()
    out = s.initAnchorArrays()
    s.run(graft.PyStepIO({"x": np.ones((2, 4), np.float32)}, out))


def anchors(rng, tmp):
    model, y = mlp()
    bps = rng.choice([1, 2, 4])
    art = rng.choice([graft.AnchorReturnType("All"), graft.AnchorReturnType("Final"), graft.AnchorReturnType("Sum")])
    s = graft.InferenceSession(model, graft.DataFlow(bps, {y: art}), device())
    s.prepareDevice()
    shape = [rng.choice([0, 1, 2, 3, 4, 8, 200]) for _ in range(rng.choice([0, 1, 2, 3]))]
    xs = (bps, 2, 4) if bps > 1 else (2, 4)
    if rng.random() < 0.3:
        xs = tuple(rng.choice([0, 1, 2, 4, 5]) for _ in range(rng.choice([1, 2, 3])))
    s.run(graft.PyStepIO({"x": np.ones(xs, np.float32)}, {y: np.zeros(shape, np.float32)}))


def special_files(rng, tmp):
    kind = rng.choice(["fifo", "dir", "devzero", "missing", "empty", "loop", "devnull"])
    path = os.path.join(tmp, f"p{rng.random()}")
    if kind == "fifo":
        os.mkfifo(path)
    elif kind == "dir":
        os.mkdir(path)
    elif kind == "devzero":
        path = "/dev/zero"
    elif kind == "devnull":
        path = "/dev/null"
    elif kind == "empty":
        open(path, "wb").close()
    elif kind == "loop":
        os.symlink(path, path)
    model, y = mlp()
    what = rng.choice(["model", "resetHostWeights", "modelToHost"])
    if what == "model":
        graft.InferenceSession(path, graft.DataFlow(1, ["y"]), device())
    else:
        s = graft.InferenceSession(model, graft.DataFlow(1, [y]), device())
        getattr(s, what)(path)


def checkpoints(rng, tmp):
    model, loss, _ = train_model()
    opt = graft.SGD({"defaultLearningRate": (0.1, True), "defaultMomentum": (0.9, True)})
    s = graft.TrainingSession(model, graft.DataFlow(1, [loss]), loss, opt, device())
    s.prepareDevice()
    path = os.path.join(tmp, "ck.onnx")
    s.modelToHost(path)
    data = bytearray(open(path, "rb").read())
    for _ in range(rng.randint(1, 6)):
        p = rng.randrange(len(data))
        data[p] = rng.randrange(256)
    t = graft.TrainingSession(bytes(data), graft.DataFlow(1, [loss]), loss, opt, device())
    t.inputIds(), t.weightIds()
    t.prepareDevice()
    out = t.initAnchorArrays()
    t.run(graft.PyStepIO({"x": np.ones((2, 4), np.float32)}, out))


def names(rng, tmp):
    raw = bytes(rng.randrange(256) for _ in range(4))
    g = oh.make_graph([oh.make_node("Relu", ["abcd"], ["y"], name="relu")], "g",
                      [oh.make_tensor_value_info("abcd", onnx.TensorProto.FLOAT, [2])],
                      [oh.make_tensor_value_info("y", onnx.TensorProto.FLOAT, [2])])
    m = oh.make_model(g, opset_imports=[oh.make_opsetid("", 17)], ir_version=8).SerializeToString()
    s = graft.InferenceSession(m.replace(b"abcd", raw), graft.DataFlow(1, ["y"]), device())
    s.inputIds()
    s.prepareDevice()


def concurrent(rng, tmp):
    model, y = mlp()
    s = graft.InferenceSession(model, graft.DataFlow(1, [y]), device())
    s.prepareDevice()
    errors = []

    def work():
        for _ in range(20):
            out = s.initAnchorArrays()
            try:
                s.run(graft.PyStepIO({"x": np.ones((2, 4), np.float32)}, out))
            except Exception as e:  # noqa: BLE001
                errors.append(e)
            if not np.all(out[y] == 4):
                errors.append(AssertionError("wrong result"))

    ts = [threading.Thread(target=work) for _ in range(rng.randint(2, 6))]
    for t in ts:
        t.start()
    for t in ts:
        t.join()
    if errors:
        raise errors[0]


def python_ints(rng, tmp):
    v = rng.choice(HUGE + [1.5, "3", None, np.int64(2**40), True])
    target = rng.choice(["DataFlow", "AnchorReturnType", "createCpuDevice", "numThreads", "accumulationFactor"])
    if target == "DataFlow":
        graft.DataFlow(v, ["y"])
    elif target == "AnchorReturnType":
        graft.AnchorReturnType("EveryN", v)
    elif target == "createCpuDevice":
        graft.DeviceManager().createCpuDevice(v)
    else:
        setattr(graft.SessionOptions(), target, v)


CATEGORIES = [threads, devices, batches, optimizers, anchors, special_files, checkpoints, names, concurrent,
              python_ints]


def run_case(fn, seed, tmp):
    def case():
        try:
            fn(random.Random(seed), tmp)
        except graft.Error:
            pass
        except TypeError as e:
            # pybind11's argument mismatch for a value of the wrong Python type (a str or None
            # where an int is due) is Python's own contract, not a finding.
            if "incompatible function arguments" not in str(e) and "must be" not in str(e):
                raise

    return run_forked(case, MEMORY_CAP, TIMEOUT, tmp, exception_outcome="other", poll_s=0.005)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--cases-per-category", type=int, default=30)
    ap.add_argument("--seed", type=int, default=1)
    a = ap.parse_args()
    findings = 0
    total = {}
    with tempfile.TemporaryDirectory() as tmp:
        for fn in CATEGORIES:
            counts = {}
            for i in range(a.cases_per_category):
                o = run_case(fn, a.seed * 100003 + i, tmp)
                counts[o] = counts.get(o, 0) + 1
                total[o] = total.get(o, 0) + 1
                if o != "ok":
                    findings += 1
                    print(f"FINDING {fn.__name__} case {i} (seed {a.seed * 100003 + i}): {o}", flush=True)
            print(f"{fn.__name__:<14} " + ", ".join(f"{k} {v}" for k, v in sorted(counts.items())), flush=True)
    print("total          " + ", ".join(f"{k} {v}" for k, v in sorted(total.items())))
    return 1 if findings else 0


if __name__ == "__main__":
    sys.exit(main())
