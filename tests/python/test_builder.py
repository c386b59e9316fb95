"""graft.Builder: PopART's Builder API, tensor ids, shapes, opsets, attributes and errors."""
import numpy as np
import onnx
import pytest

import graft
from conftest import run_model


def _mlp_builder(rng):
    b = graft.Builder()
    x = b.addInputTensor(graft.TensorInfo("FLOAT", [4, 3]), "x")
    w = b.addInitializedInputTensor(rng.standard_normal((3, 5)).astype(np.float32), "w")
    bias = b.addInitializedInputTensor(rng.standard_normal(5).astype(np.float32), "b")
    h = b.aiOnnx.matmul([x, w])
    y = b.aiOnnx.relu([b.aiOnnx.add([h, bias])])
    b.addOutputTensor(y)
    return b, x, w, bias, y


def test_ids_follow_popart(rng):
    b, x, w, bias, y = _mlp_builder(rng)
    assert (x, w, bias) == ("x", "w", "b")
    assert b.getValueTensorIds() == ["MatMul:0", "Add:0", "Relu:0"]
    assert y == "Relu:0"
    # Unnamed inputs and repeated ops get PopART's "/n" suffixes.
    i0 = b.addInputTensor("FLOAT", [4, 5])
    i1 = b.addInputTensor("FLOAT", [4, 5])
    assert (i0, i1) == ("input", "input/1")
    assert b.aiOnnx.relu([i0]) == "Relu:0/1"
    assert b.addInitializedInputTensor(np.zeros(2, np.float32)) == "init_input"
    assert b.getInputTensorIds() == ["x", "w", "b", "input", "input/1", "init_input"]
    assert b.getOutputTensorIds() == ["Relu:0"]
    assert b.getTrainableTensorIds() == ["w", "b", "init_input"]


def test_shapes_come_from_inference(rng):
    b, x, w, bias, y = _mlp_builder(rng)
    assert b.getTensorShape("MatMul:0") == [4, 5]
    assert b.getTensorShape(y) == [4, 5]
    assert b.getTensorDtypeString(y) == "float32"
    t = b.aiOnnx.transpose([y], perm=[1, 0])
    assert b.getTensorShape(t) == [5, 4]
    r = b.reshape_const(b.aiOnnx, [t], [20])
    assert b.getTensorShape(r) == [20]
    c = b.aiOnnx.cast([r], "INT32")
    assert b.getTensorDtypeString(c) == "int32"
    assert b.isInitializer(w) and not b.isInitializer(x)


def test_symbolic_dims(rng):
    b = graft.Builder()
    x = b.addInputTensor(graft.TensorInfo("FLOAT", ["batch", 3]), "x")
    w = b.addInitializedInputTensor(np.ones((3, 2), np.float32), "w")
    y = b.aiOnnx.matmul([x, w])
    assert b.getTensorInfo(y).dims() == ["batch", 2]
    with pytest.raises(graft.Error, match="not fully known"):
        b.getTensorShape(y)


def test_model_proto_is_valid_onnx(rng, tmp_path):
    b, x, w, bias, y = _mlp_builder(rng)
    proto = b.getModelProto()
    assert isinstance(proto, bytes)
    m = onnx.load_model_from_string(proto)
    onnx.checker.check_model(m)
    assert [o.domain for o in m.opset_import if o.domain == ""] == [""]
    assert [o.version for o in m.opset_import if o.domain == ""] == [graft.defaultAiOnnxOpset]
    assert [n.op_type for n in m.graph.node] == ["MatMul", "Add", "Relu"]
    path = tmp_path / "mlp.onnx"
    b.saveModelProto(str(path))
    assert onnx.load(str(path)).graph.output[0].name == y


def test_built_model_runs_and_matches_numpy(rng):
    b, x, w, bias, y = _mlp_builder(rng)
    data = rng.standard_normal((4, 3)).astype(np.float32)
    out = run_model(b.getModelProto(), {x: data}, [y])
    wv = b.getNodeAttribute if False else None  # noqa: F841 (weights read back below)
    m = onnx.load_model_from_string(b.getModelProto())
    weights = {t.name: onnx.numpy_helper.to_array(t) for t in m.graph.initializer}
    expect = np.maximum(data @ weights["w"] + weights["b"], 0)
    np.testing.assert_allclose(out[y], expect, rtol=1e-5, atol=1e-6)


def test_opset_selection():
    b = graft.Builder()
    x = b.addInputTensor("FLOAT", [2])
    b.aiOnnxOpset11.relu([x])
    assert b.onnxOpsetVersion() == 11
    assert b.aiOnnx is b.aiOnnxOpset11
    with pytest.raises(graft.Error, match="already defined as 11"):
        b.aiOnnxOpset13.relu([x])
    b2 = graft.Builder(opsets={"ai.onnx": 13, "ai.graphcore": 1})
    assert b2.aiOnnx.version == 13
    with pytest.raises(AttributeError):
        graft.Builder().aiOnnxOpset5
    # An op that does not exist at the chosen opset (HardSwish arrived in opset 14).
    b3 = graft.Builder()
    assert not hasattr(b3.aiOnnxOpset10, "hardswish")
    assert hasattr(graft.Builder().aiOnnxOpset14, "hardswish")


def test_every_registry_op_has_a_method():
    ops17 = graft.supportedOps("ai.onnx", 17)
    assert {"MatMul", "Gemm", "Relu", "Add", "Reshape", "Cast"} <= set(ops17)
    b = graft.Builder()
    methods = set(b.aiOnnxOpset17.ops())
    for op in ops17:
        assert graft.opsets.method_name(op) in methods
    assert {"logical_and", "logical_or", "logical_not", "logical_xor"} <= methods
    assert {"gelu", "nllloss", "l1loss", "identityloss"} <= set(b.aiGraphcore.ops())


def test_positional_and_keyword_attributes(rng):
    # PopART's gemm(args, alpha, beta, transA, transB, debugContext) with bools for flags.
    b = graft.Builder()
    a = b.addInputTensor("FLOAT", [3, 2], "a")
    w = b.addInputTensor("FLOAT", [4, 2], "w")
    c = b.addInputTensor("FLOAT", [4], "c")
    g = b.aiOnnx.gemm([a, w, c], 2.0, 0.5, False, True, "mygemm")
    g2 = b.aiOnnx.gemm([a, w, c], transB=1, alpha=2.0, beta=0.5, debugContext=graft.DebugContext("named"))
    assert b.getTensorShape(g) == [3, 4]
    m = onnx.load_model_from_string(b.getModelProto())
    nodes = {n.output[0]: n for n in m.graph.node}
    assert nodes[g].name == "mygemm" and nodes[g2].name == "named"
    attrs = {a.name: onnx.helper.get_attribute_value(a) for a in nodes[g].attribute}
    assert attrs == {"alpha": 2.0, "beta": 0.5, "transA": 0, "transB": 1}
    for out in (g, g2):
        b.addOutputTensor(out)
    av = rng.standard_normal((3, 2)).astype(np.float32)
    wv = rng.standard_normal((4, 2)).astype(np.float32)
    cv = rng.standard_normal(4).astype(np.float32)
    res = run_model(b.getModelProto(), {a: av, w: wv, c: cv}, [g, g2])
    np.testing.assert_allclose(res[g], 2 * av @ wv.T + 0.5 * cv, rtol=1e-5)
    np.testing.assert_allclose(res[g2], res[g], rtol=1e-6)


def test_signature_order_matches_popart():
    import inspect

    b = graft.Builder()
    sig = inspect.signature(b.aiOnnxOpset11.gemm)
    assert list(sig.parameters) == ["args", "alpha", "beta", "transA", "transB", "debugContext", "debugPrefix"]
    # Ops that are not registered yet still get PopART's order from the generator.
    for op, version, expect in [
        ("Conv", 11, ["args", "dilations", "group", "kernel_shape", "pads", "strides", "debugContext"]),
        ("AveragePool", 11, ["args", "kernel_shape", "ceil_mode", "count_include_pad", "pads", "strides",
                             "debugContext"]),
        ("BatchNormalization", 11, ["args", "num_outputs", "epsilon", "momentum", "debugContext"]),
        ("MaxPool", 11, ["args", "num_outputs", "kernel_shape", "ceil_mode", "dilations", "pads", "storage_order",
                         "strides", "debugContext"]),
        ("Split", 11, ["args", "num_outputs", "axis", "split", "debugContext"]),
        ("TopK", 11, ["args", "axis", "largest", "sorted", "debugContext"]),
    ]:
        method = graft.opsets._make_method(graft.findOpSignature("", op, version), "", version)
        params = inspect.signature(method).parameters.values()
        assert [p.name for p in params if p.kind == p.POSITIONAL_OR_KEYWORD][1:] == expect, op


def test_multi_output_ops_return_lists():
    b = graft.Builder()
    x = b.addInputTensor("FLOAT", [6, 2], "x")
    opset = b.aiOnnxOpset11
    split = graft.opsets._make_method(graft.findOpSignature("", "Split", 11), "", 11)
    outs = split(opset, [x], 3, 0, [1, 2, 3])
    assert outs == ["Split:0", "Split:1", "Split:2"]
    assert [b.getTensorShape(o) for o in outs] == [[1, 2], [2, 2], [3, 2]]
    topk = graft.opsets._make_method(graft.findOpSignature("", "TopK", 11), "", 11)
    k = b.aiOnnxOpset11.constant(np.array([2], np.int64))
    vals, idx = topk(opset, [x, k], axis=0)
    assert b.getTensorShape(vals) == [2, 2] and b.getTensorDtypeString(idx) == "int64"


def test_annotations_and_scopes():
    b = graft.Builder()
    x = b.addInputTensor("FLOAT", [2], "x")
    with b.virtualGraph(1), b.pipelineStage(0):
        assert b.getVirtualGraph() == 1 and b.hasPipelineStage()
        y = b.aiOnnx.relu([x])
    with b.nameScope("enc"), b.nameScope("l0"):
        z = b.aiOnnx.neg([y], "n")
        i = b.addInputTensor("FLOAT", [2])
    assert z == "enc/l0/Neg:0" and i == "enc/l0/input"
    assert not b.hasVirtualGraph()
    b.virtualGraph(z, 2)
    b.pipelineStage([z], 1)
    assert b.getVirtualGraph(y) == 1 and b.getVirtualGraph(z) == 2 and b.getPipelineStage(z) == 1
    b.recomputeOutputInBackwardPass(z)
    assert b.getRecomputeOutputInBackwardPass(z)
    b.addOutputTensor(z)
    m = onnx.load_model_from_string(b.getModelProto())
    nodes = {n.output[0]: n for n in m.graph.node}
    attrs = {a.name: a.i for a in nodes[y].attribute}
    assert attrs == {"__ipu_number": 1, "__pipeline_stage": 0}
    assert nodes[z].name == "enc/l0/n"
    assert {a.name: a.i for a in nodes[z].attribute}["__ipu_number"] == 2
    # The IPU hints are accepted for existing tensors and rejected for unknown ones.
    b.setAvailableMemoryProportion(z, 0.3)
    b.setPartialsType(z, "HALF")
    with pytest.raises(graft.Error, match="unknown tensor 'nope'"):
        b.setAvailableMemoryProportion("nope", 0.3)
    with b.outlineAttributes({"a": "b"}), b.schedulePriority(1.0), b.executionPhase(0):
        pass


def test_node_attributes():
    b = graft.Builder()
    x = b.addInputTensor("FLOAT", [2], "x")
    y = b.aiOnnx.leakyrelu([x], alpha=0.2)
    assert b.getNodeAttribute("alpha", [y]) == pytest.approx(0.2)
    b.addNodeAttribute("alpha", 0.5, {y})
    assert b.getNodeAttribute("alpha", [y]) == pytest.approx(0.5)
    assert b.nodeHasAttribute("alpha", [y])
    b.addNodeAttribute("__ipu_number", 3, {y})
    assert b.getVirtualGraph(y) == 3
    assert sorted(b.getAllNodeAttributeNames([y])) == ["__ipu_number", "alpha"]
    b.removeNodeAttribute("alpha", [y])
    assert not b.nodeHasAttribute("alpha", [y])
    with pytest.raises(graft.Error, match="not an attribute of LeakyRelu"):
        b.addNodeAttribute("beta", 1.0, {y})


def test_builder_errors_name_the_op_or_tensor():
    b = graft.Builder()
    x = b.addInputTensor("FLOAT", [2, 3], "x")
    w = b.addInputTensor("FLOAT", [4, 5], "w")
    with pytest.raises(graft.Error, match="unknown tensor 'nope'"):
        b.aiOnnx.relu(["nope"])
    with pytest.raises(graft.Error, match="MatMul"):
        b.aiOnnx.matmul([x, w])
    with pytest.raises(graft.Error, match="takes 1 inputs, got 2"):
        b.aiOnnx.relu([x, w])
    with pytest.raises(TypeError, match="unexpected keyword"):
        b.aiOnnx.relu([x], alpha=1.0)
    with pytest.raises(graft.Error, match="attribute 'perm' must be a list"):
        b.aiOnnx.transpose([x], perm=3)
    with pytest.raises(graft.Error, match="Relu"):
        b.aiOnnx.relu([b.addInputTensor("BOOL", [2])])  # no version of Relu takes BOOL
    with pytest.raises(graft.Error, match="unknown data type 'FLOAT33'"):
        b.aiOnnx.cast([x], "FLOAT33")
    with pytest.raises(graft.Error, match="unknown tensor"):
        b.addOutputTensor("missing")
    # A failed op leaves nothing behind: the next op gets the first id.
    assert b.getValueTensorIds() == []
    assert b.aiOnnx.relu([x]) == "Relu:0"


def test_custom_op_and_graphcore_ops(rng):
    b = graft.Builder()
    x = b.addInputTensor("FLOAT", [2, 3], "x")
    g = b.aiGraphcore.gelu([x])
    assert g == "Gelu:0" and b.getTensorShape(g) == [2, 3]
    lbl = b.addInputTensor("INT32", [2], "label")
    probs = b.aiOnnx.sigmoid([g])
    nll = b.aiGraphcore.nllloss([probs, lbl], graft.ReductionType.Sum, ignoreIndex=0)
    l1 = b.aiGraphcore.l1loss([g], 0.1, graft.ReductionType.NoReduction)
    idl = b.aiGraphcore.identityloss([g])
    assert b.getTensorShape(nll) == [] and b.getTensorShape(l1) == [2, 3] and b.getTensorShape(idl) == []
    m = onnx.load_model_from_string(b.getModelProto())
    types = {n.output[0]: (n.domain, n.op_type) for n in m.graph.node}
    assert types[nll] == ("ai.graphcore", "Nll") and types[l1] == ("ai.graphcore", "L1")
    assert {o.domain: o.version for o in m.opset_import}["ai.graphcore"] == 1
    attrs = {a.name: onnx.helper.get_attribute_value(a) for a in m.graph.node[2].attribute}
    assert attrs == {"reduction": b"Sum", "ignoreIndex": 0, "inputIsLogProbability": 0}
    out = b.customOp("Relu", 6, "ai.onnx", [x], {}, 1)
    assert out == ["Relu:0"]


def test_gelu_runs():
    b = graft.Builder()
    x = b.addInputTensor("FLOAT", [5], "x")
    y = b.aiGraphcore.gelu([x])
    b.addOutputTensor(y)
    data = np.linspace(-3, 3, 5).astype(np.float32)
    out = run_model(b.getModelProto(), {x: data}, [y])
    expect = 0.5 * data * (1 + np.tanh(np.sqrt(2 / np.pi) * (data + 0.044715 * data ** 3)))
    np.testing.assert_allclose(out[y], expect, rtol=1e-5, atol=1e-6)


def test_builder_from_model(tmp_path, rng):
    b, x, w, bias, y = _mlp_builder(rng)
    path = tmp_path / "m.onnx"
    b.saveModelProto(str(path))
    b2 = graft.Builder(str(path))
    assert b2.aiOnnx.version == graft._graft.newestAiOnnxOpset == 28  # models are converted to the newest opset on loading
    lbl = b2.addInputTensor("INT32", [4], "label")
    nll = b2.aiGraphcore.nllloss([y, lbl])
    assert b2.getTensorShape(nll) == []
    b3 = graft.Builder(b.getModelProto())
    assert b3.getInputTensorIds()[:1] == ["x"] and b3.getTensorShape(y) == [4, 5]


@pytest.mark.parametrize("version", list(graft.AI_ONNX_OPSETS))
def test_every_opset_builds_and_runs(version):
    """A model at each ai.onnx opset, with an ai.graphcore op in it, converts to the newest opset and runs
    (Unsqueeze/Squeeze take axes as attributes before opset 13 and as inputs from 13 on)."""
    b = graft.Builder()
    o = getattr(b, f"aiOnnxOpset{version}")
    x = b.addInputTensor("FLOAT", [2, 3], "x")
    w = b.addInitializedInputTensor(np.arange(6, dtype=np.float32).reshape(3, 2) / 6)
    y = o.add([o.matmul([x, w]), b.addInitializedInputTensor(np.ones(2, np.float32))])
    y = o.reshape([y, o.constant(np.array([4], np.int64))])
    if version < 13:
        y = o.squeeze([o.unsqueeze([y], axes=[0])], axes=[0])
    else:
        axes = o.constant(np.array([0], np.int64))
        y = o.squeeze([o.unsqueeze([y, axes]), axes])
    y = b.aiGraphcore.gelu([o.sigmoid([y])])
    b.addOutputTensor(y)
    assert b.getTensorShape(y) == [4]
    data = np.ones((2, 3), np.float32)
    out = run_model(b.getModelProto(), {x: data}, [y])
    s = 1 / (1 + np.exp(-((data @ (np.arange(6, dtype=np.float32).reshape(3, 2) / 6)) + 1).reshape(4)))
    expect = 0.5 * s * (1 + np.tanh(np.sqrt(2 / np.pi) * (s + 0.044715 * s ** 3)))
    np.testing.assert_allclose(out[y], expect, rtol=1e-5)


def test_loss_ops_run(rng):
    b = graft.Builder()
    p = b.addInputTensor("FLOAT", [4, 3], "probs")
    lbl = b.addInputTensor("INT32", [4], "label")
    nll = b.aiGraphcore.nllloss([p, lbl], graft.ReductionType.Mean)
    nll_sum = b.aiGraphcore.nllloss([p, lbl], "Sum", ignoreIndex=2)
    l1 = b.aiGraphcore.l1loss([p], 0.5, graft.ReductionType.NoReduction)
    idl = b.aiGraphcore.identityloss([p], graft.ReductionType.Sum)
    for t in (nll, nll_sum, l1, idl):
        b.addOutputTensor(t)
    probs = rng.uniform(0.1, 1.0, (4, 3)).astype(np.float32)
    labels = np.array([0, 2, 1, 2], np.int32)
    out = run_model(b.getModelProto(), {p: probs, lbl: labels}, [nll, nll_sum, l1, idl])
    picked = -np.log(probs[np.arange(4), labels])
    np.testing.assert_allclose(out[nll], picked.mean(), rtol=1e-5)
    np.testing.assert_allclose(out[nll_sum], picked[labels != 2].sum(), rtol=1e-5)
    np.testing.assert_allclose(out[l1], 0.5 * np.abs(probs), rtol=1e-6)
    np.testing.assert_allclose(out[idl], probs.sum(), rtol=1e-5)
    with pytest.raises(graft.Error, match="reduction must be a ReductionType"):
        b.aiGraphcore.identityloss([p], "Median")
