#!/usr/bin/env python3
"""Writes tests/fuzz/regressions/: the model and checkpoint files of issue 16's findings (and of
later campaigns), which `ctest -R fuzz_regressions` replays on every test run, each file as a model
and as a checkpoint in a forked child (tests/fuzz/campaign.cpp). Findings of a campaign
(build/findings/) are copied there by hand, with a line in README.md.

    .venv/bin/python tests/fuzz/make_regressions.py
"""
import os

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

HERE = os.path.dirname(os.path.abspath(__file__))
OUT = os.path.join(HERE, "regressions")


def f32(name, shape):
    return helper.make_tensor_value_info(name, TensorProto.FLOAT, shape)


def model(nodes, inputs, outputs, inits=(), graphcore=False):
    ops = [helper.make_opsetid("", 17)] + ([helper.make_opsetid("ai.graphcore", 1)] if graphcore else [])
    m = helper.make_model(helper.make_graph(nodes, "g", inputs, outputs, list(inits)), opset_imports=ops)
    m.ir_version = 8
    return m


def write(name, data):
    with open(os.path.join(OUT, name), "wb") as f:
        f.write(data if isinstance(data, bytes) else data.SerializeToString())


def with_name_bytes(m, old: bytes, new: bytes):
    """protobuf's Python API refuses invalid UTF-8: swap a length-prefixed name in the bytes."""
    data = m.SerializeToString()
    return data.replace(bytes([len(old)]) + old, bytes([len(new)]) + new)


def main():
    os.makedirs(OUT, exist_ok=True)
    relu = model([helper.make_node("Relu", ["xname"], ["y"], name="relu")], [f32("xname", [2])], [f32("y", [2])])
    write("non_utf8_input_name.onnx", with_name_bytes(relu, b"xname", b"\x9e\x9e\x9e\x9e\x9e"))
    write("non_utf8_node_name.onnx", with_name_bytes(relu, b"relu", b"r\xffl\xc0"))
    write("declared_int64_output.onnx",
          model([helper.make_node("Relu", ["x"], ["y"])], [f32("x", [10, 1])],
                [helper.make_tensor_value_info("y", TensorProto.INT64, [10, 1])]))
    write("declared_huge_dim_output.onnx",
          model([helper.make_node("Relu", ["x"], ["y"])], [f32("x", [10, 1])], [f32("y", [10, 2**63 - 1])]))
    write("huge_anchor_output.onnx",
          model([helper.make_node("Expand", ["x", "s"], ["y"])], [f32("x", [1, 1])], [f32("y", [2**31, 2**31])],
                [numpy_helper.from_array(np.array([2**31, 2**31], np.int64), "s")]))
    # Checkpoints of the checkpoint target's base model (fuzz_entries.cpp): optimizer state of the
    # wrong shape, and a weight name flipped to bytes that are not UTF-8.
    seed = onnx.load(os.path.join(HERE, "seeds", "ckpt_sgd_momentum.onnx"))
    for t in seed.graph.initializer:
        if t.name.startswith("Accl") and t.name.endswith("___w"):
            t.CopyFrom(numpy_helper.from_array(np.zeros(3, np.float32), t.name))
    write("ckpt_wrong_shape_accl.onnx", seed)
    seed = onnx.load(os.path.join(HERE, "seeds", "ckpt_sgd_momentum.onnx"))
    write("ckpt_non_utf8_weight.onnx", with_name_bytes(seed, b"w", b"\x9e"))


if __name__ == "__main__":
    main()
