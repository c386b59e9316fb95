"""Bad models through the Python API: each gets a graft.Error that says what is wrong, never a crash.
- an IR version or opset newer than graft supports: the version found and the newest supported;
- an op of an unknown domain or at a version its domain does not define: the node, the domain and
  the version;
- a model the ONNX checker rejects: the checker's message, with the node named.
"""
import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper

import graft

NEWEST_IR = onnx.IR_VERSION            # the linked library's (1.23: 14)
NEWEST_OPSET = graft._graft.newestAiOnnxOpset


def relu_model(opset=20, ir_version=10, op="Relu", domain="", name="act", extra_opsets=(), **attrs):
    node = helper.make_node(op, ["x"], ["y"], name=name, domain=domain, **attrs)
    g = helper.make_graph([node], "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2])])
    opsets = [helper.make_opsetid("", opset)] + [helper.make_opsetid(d, v) for d, v in extra_opsets]
    return helper.make_model(g, opset_imports=opsets, ir_version=ir_version).SerializeToString()


def error_of(model):
    with pytest.raises(graft.Error) as e:
        s = graft.InferenceSession(model, graft.DataFlow(1, ["y"]), graft.DeviceManager().createCpuDevice())
        s.prepareDevice()
        s.run(graft.PyStepIO({"x": np.ones(2, np.float32)}, s.initAnchorArrays()))
    return str(e.value)


def test_the_newest_versions_load():
    assert NEWEST_OPSET == max(s.since_version for s in onnx.defs.get_all_schemas_with_history() if s.domain == "")
    s = graft.InferenceSession(relu_model(NEWEST_OPSET, NEWEST_IR), graft.DataFlow(1, ["y"]),
                               graft.DeviceManager().createCpuDevice())
    out = s.initAnchorArrays()
    s.run(graft.PyStepIO({"x": np.array([-1, 2], np.float32)}, out))
    np.testing.assert_array_equal(out["y"], [0, 2])


def test_newer_ir_version_names_found_and_newest():
    msg = error_of(relu_model(ir_version=NEWEST_IR + 1))
    assert f"has IR version {NEWEST_IR + 1}, newer than graft supports" in msg, msg
    assert f"newest: IR version {NEWEST_IR}" in msg, msg


def test_newer_opset_names_found_and_newest():
    msg = error_of(relu_model(opset=NEWEST_OPSET + 1, ir_version=NEWEST_IR))
    assert f"uses ai.onnx opset {NEWEST_OPSET + 1}, newer than graft supports" in msg, msg
    assert f"newest: ai.onnx opset {NEWEST_OPSET}" in msg, msg
    msg = error_of(relu_model(extra_opsets=[("ai.onnx.ml", 99)]))
    assert "uses ai.onnx.ml opset 99, newer than graft supports" in msg, msg


def test_op_of_an_unknown_domain_names_node_domain_and_version():
    msg = error_of(relu_model(op="Frobnicate", domain="com.example", name="frob", extra_opsets=[("com.example", 3)]))
    assert "com.example::Frobnicate" in msg and "'frob'" in msg, msg
    assert "domain 'com.example', opset version 3" in msg, msg


def test_op_at_a_version_its_domain_does_not_define():
    # Gelu entered ai.onnx at opset 20: an opset-17 model cannot use it.
    msg = error_of(relu_model(opset=17, ir_version=8, op="Gelu", name="gelu_node"))
    assert "is not a valid ONNX model" in msg, msg
    assert "Gelu" in msg and "gelu_node" in msg and "17" in msg, msg
    # A newer op of a known domain: ai.onnx.ml's TreeEnsemble is opset 5 of that domain.
    msg = error_of(relu_model(op="TreeEnsemble", domain="ai.onnx.ml", name="trees", extra_opsets=[("ai.onnx.ml", 3)]))
    assert "TreeEnsemble" in msg and "trees" in msg and "3" in msg, msg


def test_checker_rejection_names_the_node():
    # Relu has no attribute 'alpha': the checker's message, with the node's name.
    msg = error_of(relu_model(name="bad_relu", alpha=0.5))
    assert "is not a valid ONNX model" in msg, msg
    assert "alpha" in msg and "bad_relu" in msg, msg


def test_not_an_onnx_model():
    msg = error_of(b"\x08\x07\x12\x03abc\xff\xff")
    assert "is not an ONNX model" in msg, msg
