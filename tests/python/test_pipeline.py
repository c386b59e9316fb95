"""Sharding and pipelining from Python: Builder annotations as context managers, PopART-annotated
ONNX files, devices with virtual devices, pipelined inference and training against the unsplit
model, the validation errors, stagesText and the Chrome trace timeline."""
import json

import numpy as np
import onnx
import onnx.helper as oh
import onnx.numpy_helper
import pytest

import graft

W = 8


def _mlp(places, rows=4, loss=False, seed=0):
    """An MLP with one layer per entry of `places` ((virtualGraph, pipelineStage) or None)."""
    rng = np.random.default_rng(seed)
    b = graft.Builder()
    x = b.addInputTensor(graft.TensorInfo("FLOAT", [rows, W]), "x")
    h = x
    for i, place in enumerate(places):
        w = b.addInitializedInputTensor(rng.uniform(-0.5, 0.5, (W, W)).astype(np.float32), f"w{i}")
        if place is None:
            h = b.aiOnnx.relu([b.aiOnnx.matmul([h, w])])
            continue
        with b.virtualGraph(place[0]), b.pipelineStage(place[1]):
            h = b.aiOnnx.relu([b.aiOnnx.matmul([h, w])])
    out = {"y": h}
    if loss:
        t = b.addInputTensor(graft.TensorInfo("FLOAT", [rows, W]), "t")
        if places[-1] is None:
            out["loss"] = b.aiGraft.mseloss([h, t])
        else:
            with b.virtualGraph(places[-1][0]), b.pipelineStage(places[-1][1]):
                out["loss"] = b.aiGraft.mseloss([h, t])
    b.addOutputTensor(h)
    return b.getModelProto(), out


def _options(mode=graft.VirtualGraphMode.Manual, pipelining=True, **kw):
    o = graft.SessionOptions(**kw)
    o.virtualGraphMode = mode
    o.enablePipelining = pipelining
    return o


def _infer(model, y, x, bps, device, options=None):
    s = graft.InferenceSession(model, graft.DataFlow(bps, [y]), device, userOptions=options)
    s.prepareDevice()
    out = s.initAnchorArrays()
    s.run(graft.PyStepIO({"x": x}, out))
    return out[y], s


def test_builder_context_managers_annotate_ops():
    model, out = _mlp([(0, 0), (1, 1)])
    m = onnx.load_from_string(model)
    attrs = [{a.name: a.i for a in n.attribute if a.name.startswith("__")} for n in m.graph.node]
    assert attrs == [{"__ipu_number": 0, "__pipeline_stage": 0}] * 2 + [{"__ipu_number": 1, "__pipeline_stage": 1}] * 2


def test_pipelined_inference_equals_unsplit(rng):
    model, out = _mlp([(0, 0), (0, 0), (1, 1)])
    x = rng.standard_normal((6, 4, W)).astype(np.float32)
    ref, _ = _infer(model, out["y"], x, 6, graft.DeviceManager().createCpuDevice())
    dev = graft.DeviceManager().createCpuDevice(numVirtualDevices=2, coresPerVirtualDevice=1)
    assert dev.numVirtualDevices == 2 and dev.threadsPerVirtualDevice == 1
    got, s = _infer(model, out["y"], x, 6, dev, _options())
    np.testing.assert_allclose(got, ref, rtol=1e-5, atol=1e-6)
    assert "stage 1" in s.stagesText()
    trace = json.loads(s.timelineJson())
    names = {e["args"]["name"] for e in trace["traceEvents"] if e["ph"] == "M"}
    assert names == {"host", "virtual device 0", "virtual device 1"}
    busy = [e for e in trace["traceEvents"] if e.get("cat") == "busy" and e["tid"] == 2]
    assert sorted(e["args"]["microBatch"] for e in busy) == list(range(6))
    # acquireAvailableDevice(n), PopART's way, and sharding without pipelining.
    with graft.DeviceManager().acquireAvailableDevice(2) as d:
        got, _ = _infer(model, out["y"], x, 6, d, _options(pipelining=False))
    np.testing.assert_allclose(got, ref, rtol=1e-5, atol=1e-6)


def test_popart_annotated_onnx_file_loads_and_pipelines(tmp_path, rng):
    # What PopART writes: standard ops carrying __ipu_number and __pipeline_stage.
    w0 = rng.standard_normal((W, W)).astype(np.float32)
    w1 = rng.standard_normal((W, W)).astype(np.float32)
    nodes = [
        oh.make_node("MatMul", ["x", "w0"], ["h0"], name="mm0", __ipu_number=0, __pipeline_stage=0),
        oh.make_node("Tanh", ["h0"], ["a0"], name="tanh0", __ipu_number=0, __pipeline_stage=0),
        oh.make_node("MatMul", ["a0", "w1"], ["y"], name="mm1", __ipu_number=1, __pipeline_stage=1),
    ]
    g = oh.make_graph(nodes, "popart", [oh.make_tensor_value_info("x", onnx.TensorProto.FLOAT, [2, W])],
                      [oh.make_tensor_value_info("y", onnx.TensorProto.FLOAT, [2, W])],
                      [onnx.numpy_helper.from_array(w0, "w0"), onnx.numpy_helper.from_array(w1, "w1")])
    path = str(tmp_path / "annotated.onnx")
    onnx.save(oh.make_model(g, opset_imports=[oh.make_opsetid("", 13)], ir_version=8), path)
    x = rng.standard_normal((4, 2, W)).astype(np.float32)
    got, _ = _infer(path, "y", x, 4, graft.DeviceManager().createCpuDevice(2), _options())
    np.testing.assert_allclose(got, np.tanh(x @ w0) @ w1, rtol=1e-4, atol=1e-5)
    b = graft.Builder(path)
    assert b.getVirtualGraph("y") == 1 and b.getPipelineStage("h0") == 0


def test_validation_errors_name_the_node():
    model, out = _mlp([(0, 0), None])
    with pytest.raises(graft.Error, match="no virtual graph.*MatMul"):
        graft.InferenceSession(model, graft.DataFlow(1, [out["y"]]), graft.DeviceManager().createCpuDevice(2),
                               userOptions=_options())
    model, out = _mlp([(0, 0), (3, 1)])
    with pytest.raises(graft.Error, match="virtual graph 3.*2 virtual devices"):
        graft.InferenceSession(model, graft.DataFlow(1, [out["y"]]), graft.DeviceManager().createCpuDevice(2),
                               userOptions=_options())
    model, out = _mlp([(1, 1), (0, 0)])
    with pytest.raises(graft.Error, match="later stage"):
        graft.InferenceSession(model, graft.DataFlow(1, [out["y"]]), graft.DeviceManager().createCpuDevice(2),
                               userOptions=_options())
    model, out = _mlp([(0, 0), (1, 1), (1, 2)], loss=True)
    with pytest.raises(graft.Error, match="accumulationFactor >= 3"):
        graft.TrainingSession(model, graft.DataFlow(1, [out["loss"]]), out["loss"], graft.ConstSGD(0.1),
                              graft.DeviceManager().createCpuDevice(2),
                              userOptions=_options(enableGradientAccumulation=True, accumulationFactor=2))


def _train(model, loss, optimizer, device, options, steps=3, accum=4, rows=4):
    options.enableGradientAccumulation = True
    options.accumulationFactor = accum
    s = graft.TrainingSession(model, graft.DataFlow(1, {loss: graft.AnchorReturnType("All")}), loss, optimizer, device,
                              userOptions=options)
    s.prepareDevice()
    s.weightsFromHost()
    losses = []
    rng = np.random.default_rng(5)
    for _ in range(steps):
        feed = {"x": rng.standard_normal((accum, rows, W)).astype(np.float32),
                "t": rng.standard_normal((accum, rows, W)).astype(np.float32)}
        out = s.initAnchorArrays()
        s.run(graft.PyStepIO(feed, out))
        losses.append(out[loss].copy())
    weights = {w: np.zeros((W, W), np.float32) for w in s.trainedWeightIds()}
    s.readWeights(graft.PyWeightsIO(weights))
    return np.concatenate(losses), weights


@pytest.mark.parametrize("recompute", [False, True])
def test_pipelined_training_matches_unpipelined(recompute):
    model, out = _mlp([(0, 0), (1, 1), (1, 1)], loss=True)
    for opt in (graft.SGD({"defaultLearningRate": (0.05, True), "defaultMomentum": (0.9, True)}),
                graft.Adam({"defaultLearningRate": (0.01, True)})):
        ref_l, ref_w = _train(model, out["loss"], opt, graft.DeviceManager().createCpuDevice(), graft.SessionOptions())
        o = _options()
        if recompute:
            o.autoRecomputation = graft.RecomputationType.Standard
        got_l, got_w = _train(model, out["loss"], opt, graft.DeviceManager().createCpuDevice(2), o)
        np.testing.assert_allclose(got_l, ref_l, rtol=1e-5, atol=1e-6)
        for k in ref_w:
            np.testing.assert_allclose(got_w[k], ref_w[k], rtol=1e-5, atol=1e-6)


def test_auto_mode_prints_and_matches(rng, capfd):
    model, out = _mlp([None, None, None, None])
    x = rng.standard_normal((4, 4, W)).astype(np.float32)
    ref, _ = _infer(model, out["y"], x, 4, graft.DeviceManager().createCpuDevice())
    got, s = _infer(model, out["y"], x, 4, graft.DeviceManager().createCpuDevice(2),
                    _options(mode=graft.VirtualGraphMode.Auto))
    np.testing.assert_allclose(got, ref, rtol=1e-5, atol=1e-6)
    assert "Auto split" in capfd.readouterr().err
    assert "1: stage 1" in s.stagesText()
