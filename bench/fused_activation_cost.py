#!/usr/bin/env python3
"""What keeping NaN through a fused Relu costs (issue 16): oneDNN 2.6's Relu post-op is max(x, 0),
which drops NaN, so the cpu backend applies Relu (and Clip, HardSigmoid) itself after the
primitive. This counts the instructions of one step (callgrind: load-independent) of a Gemm and
two Convs, each fused with Relu (graft's pass after the primitive) and with LeakyRelu(0.01)
(still a oneDNN post-op inside the primitive, about as cheap as the old Relu post-op), and prints
relu / leakyrelu per model: the cost of the change, with the primitive's own work included.

    .venv/bin/python bench/fused_activation_cost.py [--graft build/tools/graft] [--threads 1]

A step's count is the difference of two runs (3 and 1 timed steps) so that import, compilation
and weight packing cancel.
"""
import argparse
import os
import re
import subprocess
import sys
import tempfile

import numpy as np
import onnx
import onnx.helper as oh

ROOT = os.path.normpath(os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))


def model(kind, act):
    rng = np.random.default_rng(0)
    t = onnx.numpy_helper.from_array
    if kind == "gemm":
        x, w, b = [64, 784], rng.standard_normal((784, 256)).astype(np.float32), np.zeros(256, np.float32)
        nodes = [oh.make_node("Gemm", ["x", "w", "b"], ["p"])]
        y = [64, 256]
    else:
        cin = 1 if kind == "conv_c1" else 32
        x, w, b = [8, cin, 28, 28], rng.standard_normal((32, cin, 3, 3)).astype(np.float32), np.zeros(32, np.float32)
        nodes = [oh.make_node("Conv", ["x", "w", "b"], ["p"], pads=[1, 1, 1, 1])]
        y = [8, 32, 28, 28]
    nodes.append(oh.make_node(act, ["p"], ["y"], **({"alpha": 0.01} if act == "LeakyRelu" else {})))
    g = oh.make_graph(nodes, kind, [oh.make_tensor_value_info("x", onnx.TensorProto.FLOAT, x)],
                      [oh.make_tensor_value_info("y", onnx.TensorProto.FLOAT, y)],
                      [t(w, "w"), t(b, "b")])
    return oh.make_model(g, opset_imports=[oh.make_opsetid("", 17)], ir_version=8).SerializeToString()


def instructions(graft, path, steps, threads):
    with tempfile.TemporaryDirectory() as d:
        out = os.path.join(d, "cg.out")
        subprocess.run(["valgrind", "--tool=callgrind", f"--callgrind-out-file={out}", graft, "bench", path,
                        "--steps", str(steps), "--warmup", "0", "--threads", str(threads)],
                       check=True, capture_output=True, env=dict(os.environ, OMP_WAIT_POLICY="passive"))
        with open(out) as f:
            m = re.search(r"^summary:\s+(\d+)", f.read(), re.M)
        return int(m.group(1))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--graft", default=os.path.join(ROOT, "build", "tools", "graft"))
    ap.add_argument("--threads", type=int, default=1)
    a = ap.parse_args()
    print(f"{'model':<10} {'Relu instr/step':>16} {'LeakyRelu instr/step':>21} {'ratio':>7}")
    with tempfile.TemporaryDirectory() as d:
        for kind in ("gemm", "conv_c32", "conv_c1"):
            per = {}
            for act in ("Relu", "LeakyRelu"):
                p = os.path.join(d, f"{kind}_{act}.onnx")
                with open(p, "wb") as f:
                    f.write(model(kind, act))
                per[act] = (instructions(a.graft, p, 3, a.threads) - instructions(a.graft, p, 1, a.threads)) / 2
            print(f"{kind:<10} {per['Relu']:>16.0f} {per['LeakyRelu']:>21.0f} {per['Relu'] / per['LeakyRelu']:>7.3f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
