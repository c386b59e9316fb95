#!/usr/bin/env python3
"""Writes the fuzzing seeds in tests/fuzz/seeds/: small valid models that cover the importer's
paths (symbolic dims, initializers, opset conversion, subgraphs, local functions, sparse and
external data, sequences, PopART annotations). `make fuzz` adds small models of the ONNX
conformance data to the corpus as well.

    .venv/bin/python tests/fuzz/make_seeds.py
"""
import os

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

OUT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "seeds")


def save(name, graph, opset=17, **kw):
    kw.setdefault("opset_imports", [helper.make_opsetid("", opset)])
    m = helper.make_model(graph, producer_name="graft-seeds", **kw)
    m.ir_version = 8
    onnx.checker.check_model(m)
    with open(os.path.join(OUT, name + ".onnx"), "wb") as f:
        f.write(m.SerializeToString())


def f32(name, shape):
    return helper.make_tensor_value_info(name, TensorProto.FLOAT, shape)


def init(name, shape, seed):
    rng = np.random.default_rng(seed)
    return numpy_helper.from_array(rng.uniform(-1, 1, shape).astype(np.float32), name)


def main():
    os.makedirs(OUT, exist_ok=True)
    # An MLP with a symbolic batch dimension.
    save("mlp_symbolic", helper.make_graph(
        [helper.make_node("MatMul", ["x", "w"], ["h"]), helper.make_node("Add", ["h", "b"], ["hb"]),
         helper.make_node("Relu", ["hb"], ["y"])],
        "mlp", [f32("x", ["batch", 4])], [f32("y", ["batch", 3])], [init("w", (4, 3), 1), init("b", (3,), 2)]))
    # Opset 9: converted to 17 on import (Unsqueeze's axes move from attribute to input).
    save("opset9_unsqueeze", helper.make_graph(
        [helper.make_node("Unsqueeze", ["x"], ["u"], axes=[0]), helper.make_node("Sigmoid", ["u"], ["y"])],
        "old", [f32("x", [3])], [f32("y", [1, 3])]), opset=9)
    # If with branches that read an outer-scope value.
    then_g = helper.make_graph([helper.make_node("Add", ["x", "x"], ["t"])], "then", [], [f32("t", [2])])
    else_g = helper.make_graph([helper.make_node("Neg", ["x"], ["e"])], "else", [], [f32("e", [2])])
    save("if_outer_scope", helper.make_graph(
        [helper.make_node("If", ["c"], ["y"], then_branch=then_g, else_branch=else_g)], "cond",
        [helper.make_tensor_value_info("c", TensorProto.BOOL, []), f32("x", [2])], [f32("y", [2])]))
    # Loop with a counter and a carried value.
    body = helper.make_graph(
        [helper.make_node("Identity", ["cond_in"], ["cond_out"]), helper.make_node("Add", ["v_in", "x"], ["v_out"])],
        "body", [helper.make_tensor_value_info("i", TensorProto.INT64, []),
                 helper.make_tensor_value_info("cond_in", TensorProto.BOOL, []), f32("v_in", [2])],
        [helper.make_tensor_value_info("cond_out", TensorProto.BOOL, []), f32("v_out", [2])])
    save("loop", helper.make_graph(
        [helper.make_node("Loop", ["n", "", "v0"], ["v"], body=body)], "loop",
        [helper.make_tensor_value_info("n", TensorProto.INT64, []), f32("v0", [2]), f32("x", [2])], [f32("v", [2])]))
    # A model-local function.
    fn = helper.make_function("local", "AddTwice", ["a", "b"], ["c"],
                              [helper.make_node("Add", ["a", "b"], ["t"]), helper.make_node("Add", ["t", "b"], ["c"])],
                              [helper.make_opsetid("", 17)])
    save("local_function", helper.make_graph(
        [helper.make_node("AddTwice", ["x", "y"], ["z"], domain="local")], "fn", [f32("x", [2]), f32("y", [2])],
        [f32("z", [2])]), opset_imports=[helper.make_opsetid("", 17), helper.make_opsetid("local", 1)], functions=[fn])
    # A sparse initializer and a Constant with a tensor attribute.
    sparse = helper.make_sparse_tensor(
        numpy_helper.from_array(np.array([1.0, 2.0], np.float32), "s"),
        numpy_helper.from_array(np.array([1, 4], np.int64), "s_idx"), [2, 3])
    g = helper.make_graph(
        [helper.make_node("Constant", [], ["k"], value=numpy_helper.from_array(np.ones((2, 3), np.float32))),
         helper.make_node("Add", ["s", "k"], ["y"])], "sparse", [], [f32("y", [2, 3])])
    g.sparse_initializer.append(sparse)
    save("sparse_constant", g)
    # External data (refused when loading from bytes: there is no folder).
    ext = init("w", (2,), 3)
    ext.ClearField("raw_data")
    ext.data_location = TensorProto.EXTERNAL
    for k, v in (("location", "w.bin"), ("offset", "0"), ("length", "8")):
        e = ext.external_data.add()
        e.key, e.value = k, v
    m = helper.make_model(helper.make_graph([helper.make_node("Add", ["x", "w"], ["y"])], "ext", [f32("x", [2])],
                                            [f32("y", [2])], [ext]), opset_imports=[helper.make_opsetid("", 17)])
    m.ir_version = 8
    with open(os.path.join(OUT, "external_data.onnx"), "wb") as f:
        f.write(m.SerializeToString())
    # Sequences.
    save("sequence", helper.make_graph(
        [helper.make_node("SequenceConstruct", ["x", "x"], ["s"]),
         helper.make_node("ConcatFromSequence", ["s"], ["y"], axis=0)], "seq", [f32("x", [2])], [f32("y", [4])]))
    # Integer, bool and half types; Cast and Where.
    save("types", helper.make_graph(
        [helper.make_node("Cast", ["i"], ["f"], to=TensorProto.FLOAT16), helper.make_node("Where", ["c", "f", "f"], ["y"])],
        "types", [helper.make_tensor_value_info("i", TensorProto.INT32, [2, "n"]),
                  helper.make_tensor_value_info("c", TensorProto.BOOL, [2, 1])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT16, [2, "n"])]))
    # PopART annotations and an ai.graphcore op.
    n = helper.make_node("Gelu", ["x"], ["y"], domain="ai.graphcore")
    n.attribute.append(helper.make_attribute("__ipu_number", 1))
    r = helper.make_node("Relu", ["y"], ["z"])
    r.attribute.append(helper.make_attribute("__pipeline_stage", 0))
    m = helper.make_model(helper.make_graph([n, r], "popart", [f32("x", [3])], [f32("z", [3])]),
                          opset_imports=[helper.make_opsetid("", 17), helper.make_opsetid("ai.graphcore", 1)])
    m.ir_version = 8
    with open(os.path.join(OUT, "popart_annotations.onnx"), "wb") as f:
        f.write(m.SerializeToString())
    checkpoints()


def checkpoints():
    """Checkpoints of fuzz_entries.cpp's base model (y = x @ w, L1 loss 'loss') written by modelToHost
    after a step of SGD with momentum and of Adam: the seeds of the checkpoint target (ckpt_*)."""
    import sys
    sys.path.insert(0, os.path.join(os.path.dirname(OUT), "..", "..", "python"))
    import graft

    w = numpy_helper.from_array((0.1 * np.arange(6, dtype=np.float32)).reshape(3, 2), "w")
    loss = helper.make_node("L1", ["y"], ["loss"], domain="ai.graphcore", reduction=0)
    loss.attribute.append(helper.make_attribute("lambda", 0.1))
    g = helper.make_graph([helper.make_node("MatMul", ["x", "w"], ["y"]), loss], "ckpt", [f32("x", [2, 3])],
                          [f32("y", [2, 2])], [w])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17), helper.make_opsetid("ai.graphcore", 1)])
    m.ir_version = 8
    for name, opt in [("sgd_momentum", graft.SGD({"defaultLearningRate": (0.1, True), "defaultMomentum": (0.9, True)})),
                      ("adam", graft.Adam({"defaultLearningRate": (0.01, True)}))]:
        s = graft.TrainingSession(m.SerializeToString(), graft.DataFlow(1, ["loss"]), "loss", opt,
                                  graft.DeviceManager().createReferenceDevice())
        s.prepareDevice()
        out = s.initAnchorArrays()
        s.run(graft.PyStepIO({"x": np.ones((2, 3), np.float32)}, out))
        s.modelToHost(os.path.join(OUT, f"ckpt_{name}.onnx"))


if __name__ == "__main__":
    main()
