"""InferenceSession, DataFlow, anchors, PyStepIO and PyStepIOCallback, and the errors a user meets."""
import numpy as np
import pytest

import graft
from conftest import run_model


def _affine_model():
    """y = 2 * x + 1 and z = relu(x), x of shape [2, 3]."""
    b = graft.Builder()
    x = b.addInputTensor("FLOAT", [2, 3], "x")
    two = b.aiOnnx.constant(np.array(2, np.float32))
    one = b.aiOnnx.constant(np.array(1, np.float32))
    y = b.aiOnnx.add([b.aiOnnx.mul([x, two]), one], "y")
    z = b.aiOnnx.relu([x])
    b.addOutputTensor(y)
    b.addOutputTensor(z)
    return b.getModelProto(), x, y, z


def _session(model, anchors, bps=1, device=None, **kw):
    flow = graft.DataFlow(bps, anchors)
    s = graft.InferenceSession(fnModel=model, dataFlow=flow,
                               deviceInfo=device or graft.DeviceManager().createCpuDevice(), **kw)
    s.prepareDevice()
    return s


@pytest.mark.parametrize("bps", [1, 4])
def test_anchor_return_types(bps, rng):
    model, x, y, z = _affine_model()
    arts = {
        "All": graft.AnchorReturnType("All"),
        "Final": graft.AnchorReturnType("FINAL"),
        "Sum": graft.AnchorReturnType("Sum"),
        "EveryN": graft.AnchorReturnType("EveryN", 2 if bps > 1 else 1),
    }
    data = rng.standard_normal((bps, 2, 3) if bps > 1 else (2, 3)).astype(np.float32)
    batches = data if bps > 1 else data[None]
    per_batch = 2 * batches + 1
    for name, art in arts.items():
        s = _session(model, {y: art, z: graft.AnchorReturnType("All")}, bps)
        anchors = s.initAnchorArrays()
        n = 2 if (name == "EveryN" and bps > 1) else 1
        expect_shape = {
            "All": [bps, 2, 3] if bps > 1 else [2, 3],
            "Final": [2, 3],
            "Sum": [2, 3],
            "EveryN": [bps // n, 2, 3] if bps // n > 1 else [2, 3],
        }[name]
        assert list(anchors[y].shape) == expect_shape, name
        assert anchors[y].dtype == np.float32
        s.run(graft.PyStepIO({x: data}, anchors))
        if name == "All":
            expect = per_batch if bps > 1 else per_batch[0]
        elif name == "Final":
            expect = per_batch[-1]
        elif name == "Sum":
            expect = per_batch.sum(axis=0)
        else:
            expect = per_batch[n - 1::n]
            expect = expect if expect.shape[0] > 1 else expect[0]
        np.testing.assert_allclose(anchors[y], expect, rtol=1e-5, atol=1e-6, err_msg=name)
        np.testing.assert_allclose(anchors[z], np.maximum(data, 0), rtol=1e-6)


def test_dataflow_api():
    f = graft.DataFlow(4, ["a", "b"], graft.AnchorReturnType("EveryN", 2))
    assert f.batchesPerStep() == 4 and f.anchors() == ["a", "b"] and f.nAnchors() == 2
    assert f.isAnchored("a") and not f.isAnchored("c")
    assert f.art("a").id() == graft.AnchorReturnTypeId.EveryN and f.art("a").rp() == 2
    f2 = graft.DataFlow(1, {"a": graft.AnchorReturnType("All")})
    assert f2.art("a").id() == graft.AnchorReturnTypeId.All
    with pytest.raises(graft.Error, match="does not divide batchesPerStep"):
        graft.DataFlow(3, {"a": graft.AnchorReturnType("EveryN", 2)})
    with pytest.raises(graft.Error, match="unknown anchor return type"):
        graft.AnchorReturnType("Most")
    with pytest.raises(graft.Error, match="at least 1"):
        graft.DataFlow(0, ["a"])
    # PopART's tileSet / exchangeStrategy arguments are accepted.
    graft.AnchorReturnType("All", graft.TileSet.Compute, graft.ExchangeStrategy.JustInTime)


def test_session_info_and_model(tmp_path):
    model, x, y, z = _affine_model()
    s = _session(model, {y: graft.AnchorReturnType("All")}, 2)
    assert s.getInfo(y).shape() == [2, 3] and s.getInfo(y).data_type() == "FLOAT"
    assert s.dataFlow.batchesPerStep() == 2
    assert s.replicationFactor == 1 and s.accumulationFactor == 1
    assert s.inputIds() == [x]
    path = tmp_path / "back.onnx"
    s.modelToHost(str(path))
    s2 = _session(str(path), {y: graft.AnchorReturnType("Final")})
    out = s2.initAnchorArrays()
    s2.run(graft.PyStepIO({x: np.ones((2, 3), np.float32)}, out))
    np.testing.assert_allclose(out[y], 3.0)
    s.weightsFromHost()
    s.weightsToHost()


def test_input_errors_name_the_tensor():
    model, x, y, z = _affine_model()
    s = _session(model, {y: graft.AnchorReturnType("All")})
    out = s.initAnchorArrays()
    good = np.ones((2, 3), np.float32)
    with pytest.raises(graft.Error, match="'xx'.*not an input of the model"):
        s.run(graft.PyStepIO({x: good, "xx": good}, out))
    with pytest.raises(graft.Error, match="input 'x' has shape \\[3, 2\\]"):
        s.run(graft.PyStepIO({x: np.ones((3, 2), np.float32)}, out))
    with pytest.raises(graft.Error, match="input 'x' is INT32"):
        s.run(graft.PyStepIO({x: np.ones((2, 3), np.int32)}, out))
    with pytest.raises(graft.Error, match="no input array for model input 'x'"):
        s.run(graft.PyStepIO({}, out))
    with pytest.raises(graft.Error, match="input 'x'.*not C-contiguous"):
        graft.PyStepIO({x: np.ones((3, 2), np.float32).T}, out)
    with pytest.raises(graft.Error, match="input 'x'.*complex"):
        graft.PyStepIO({x: np.ones((2, 3), np.complex64)}, out)
    # A list is a sequence value (docs/python-api.md, Types); a tensor input refuses it by name.
    with pytest.raises(graft.Error, match="no input array for model input 'x'"):
        s.run(graft.PyStepIO({x: [[1.0, 2.0, 3.0]] * 2}, out))
    ro = np.zeros((2, 3), np.float32)
    ro.flags.writeable = False
    with pytest.raises(graft.Error, match=f"anchor '{y}'.*read-only"):
        graft.PyStepIO({x: good}, {y: ro})
    with pytest.raises(graft.Error, match=f"anchor array '{y}'"):
        s.run(graft.PyStepIO({x: good}, {y: np.zeros((2, 3), np.float64)}))
    # After the errors, a correct run still works.
    s.run(graft.PyStepIO({x: good}, out))
    np.testing.assert_allclose(out[y], 3.0)


def test_batches_per_step_input_shape_error():
    model, x, y, z = _affine_model()
    s = _session(model, {y: graft.AnchorReturnType("All")}, 3)
    out = s.initAnchorArrays()
    with pytest.raises(graft.Error, match=r"input 'x'.*leading dimensions \[3\]"):
        s.run(graft.PyStepIO({x: np.ones((2, 3), np.float32)}, out))


def test_session_errors():
    model, x, y, z = _affine_model()
    dev = graft.DeviceManager().createCpuDevice()
    with pytest.raises(graft.Error, match="anchor 'nope' is not a tensor of the model"):
        graft.InferenceSession(model, graft.DataFlow(1, ["nope"]), dev)
    with pytest.raises(graft.Error, match="dataFlow must be a graft.DataFlow"):
        graft.InferenceSession(model, {"y": "All"}, dev)
    with pytest.raises(graft.Error, match="does not exist"):
        graft.InferenceSession("/no/such/model.onnx", graft.DataFlow(1, [y]), dev)
    with pytest.raises(graft.Error, match="not an ONNX model"):
        graft.InferenceSession(b"\x08\x01garbage\xff\xff", graft.DataFlow(1, [y]), dev)


def test_callbacks(rng):
    model, x, y, z = _affine_model()
    bps = 3
    s = _session(model, {y: graft.AnchorReturnType("All")}, bps)
    data = [rng.standard_normal((2, 3)).astype(np.float32) for _ in range(bps)]
    results, log = [], []

    def input_callback(tid, prefetch):
        log.append(("in", tid))
        return data[len([e for e in log if e[0] == "in"]) - 1]

    def input_complete_callback(tid):
        log.append(("in_done", tid))

    def output_callback(tid):
        results.append(np.zeros((2, 3), np.float32))
        return results[-1]

    def output_complete_callback(tid):
        log.append(("out_done", tid))

    io = graft.PyStepIOCallback(input_callback, input_complete_callback, output_callback, output_complete_callback)
    s.run(io)
    assert len(results) == bps
    for d, r in zip(data, results):
        np.testing.assert_allclose(r, 2 * d + 1, rtol=1e-6)
    assert log.count(("in_done", x)) == bps and log.count(("out_done", y)) == bps

    def bad_input(tid, prefetch):
        return np.ones((5,), np.float32)

    with pytest.raises(graft.Error, match="input 'x' has shape \\[5\\]"):
        s.run(graft.PyStepIOCallback(bad_input, None, output_callback, None))

    def raising(tid, prefetch):
        raise ValueError("from the callback")

    with pytest.raises(ValueError, match="from the callback"):
        s.run(graft.PyStepIOCallback(raising, None, output_callback, None))


def test_symbolic_batch_with_input_shape_info(rng):
    b = graft.Builder()
    x = b.addInputTensor(graft.TensorInfo("FLOAT", ["batch", 3]), "x")
    w = b.addInitializedInputTensor(np.arange(6, dtype=np.float32).reshape(3, 2), "w")
    y = b.aiOnnx.matmul([x, w])
    b.addOutputTensor(y)
    shapes = graft.InputShapeInfo()
    shapes.add(x, graft.TensorInfo("FLOAT", [5, 3]))
    assert shapes.has(x) and shapes.get(x).shape() == [5, 3]
    data = rng.standard_normal((5, 3)).astype(np.float32)
    out = run_model(b.getModelProto(), {x: data}, [y], shapes=shapes)
    np.testing.assert_allclose(out[y], data @ np.arange(6, dtype=np.float32).reshape(3, 2), rtol=1e-5)
    # Without InputShapeInfo the anchor shapes are unknown until a run: initAnchorArrays gives None,
    # and the run puts in the array of the shape it produced.
    s = graft.InferenceSession(b.getModelProto(), graft.DataFlow(1, [y]), graft.DeviceManager().createCpuDevice())
    s.prepareDevice()
    assert not s.anchorIsFixed(y)
    with pytest.raises(graft.Error, match="not known before running"):
        s.anchorArrayShape(y)
    out = s.initAnchorArrays()
    assert out == {y: None}
    s.run(graft.PyStepIO({x: data[:2]}, out))
    np.testing.assert_allclose(out[y], data[:2] @ np.arange(6, dtype=np.float32).reshape(3, 2), rtol=1e-5)


def test_reference_device_and_profiling(rng):
    model, x, y, z = _affine_model()
    opts = graft.SessionOptions()
    opts.enableProfiling = True
    s = _session(model, {y: graft.AnchorReturnType("All")}, device=graft.DeviceManager().createReferenceDevice(),
                 userOptions=opts)
    out = s.initAnchorArrays()
    s.run(graft.PyStepIO({x: np.ones((2, 3), np.float32)}, out))
    np.testing.assert_allclose(out[y], 3.0)
    assert "calls" in s.getSummaryReport()


def test_profile_by_node():
    """profileByNode: one entry per node, named; the per-type profile has no node names, and its
    calls equal the per-node entries' summed by type."""
    b = graft.Builder()
    x = b.addInputTensor("FLOAT", [2, 3], "x")
    a = b.aiOnnx.sqrt([b.aiOnnx.relu([x], "first")], "root")
    y = b.aiOnnx.relu([a], "second")
    b.addOutputTensor(y)
    runs = {}
    for by_node in (False, True):
        opts = graft.SessionOptions()
        opts.enableProfiling = True
        opts.profileByNode = by_node
        s = _session(b.getModelProto(), {y: graft.AnchorReturnType("All")},
                     device=graft.DeviceManager().createReferenceDevice(), userOptions=opts)
        out = s.initAnchorArrays()
        for _ in range(2):
            s.run(graft.PyStepIO({x: np.full((2, 3), 4, np.float32)}, out))
        np.testing.assert_allclose(out[y], 2.0)
        runs[by_node] = s.profile()
    assert {p.node for p in runs[False]} == {""}
    assert {(p.opType, p.calls) for p in runs[False]} == {("Relu", 4), ("Sqrt", 2)}
    by_node = {p.node: (p.opType, p.calls) for p in runs[True]}
    assert set(by_node) == {"first", "second", "root"}, by_node
    assert by_node["first"] == ("Relu", 2) and by_node["root"] == ("Sqrt", 2)
    assert "second" in s.getSummaryReport()


def test_devices():
    dm = graft.DeviceManager()
    assert dm is not None and graft.DeviceManager().createCpuDevice().numIpus == 1
    d = dm.createIpuModelDevice({"numIPUs": 2, "tilesPerIPU": 1216})
    assert d.numIpus == 2 and d.type == graft.DeviceType.Cpu
    with dm.acquireAvailableDevice(1) as dev:
        assert dev.attach() and dev.isAttached
    assert dm.createOfflineIPUDevice({"numIPUs": 1}).numIpus == 1
    assert dm.createReferenceDevice().type == graft.DeviceType.Reference
    with pytest.raises(graft.Error, match="numIPUs must be an integer"):
        dm.createIpuModelDevice({"numIPUs": "two"})


def test_read_and_write_weights():
    """PopART's weights round trip: readWeights into numpy arrays, writeWeights from them."""
    b = graft.Builder()
    x = b.addInputTensor("FLOAT", [1, 2], "x")
    w = b.addInitializedInputTensor(np.ones((2, 2), np.float32), "w")
    y = b.aiOnnx.matmul([x, w])
    b.addOutputTensor(y)
    s = _session(b.getModelProto(), {y: graft.AnchorReturnType("All")})
    assert s.weightIds() == [w]
    got = {w: np.zeros((2, 2), np.float32)}
    s.readWeights(graft.PyWeightsIO(got))
    np.testing.assert_array_equal(got[w], 1.0)
    s.writeWeights(graft.PyWeightsIO({w: np.full((2, 2), 3.0, np.float32)}))
    out = s.initAnchorArrays()
    s.run(graft.PyStepIO({x: np.ones((1, 2), np.float32)}, out))
    np.testing.assert_allclose(out[y], [[6.0, 6.0]])
    ro = np.zeros((2, 2), np.float32)
    ro.flags.writeable = False
    with pytest.raises(graft.Error, match="weight 'w'.*read-only"):
        s.readWeights(graft.PyWeightsIO({w: ro}))
    with pytest.raises(graft.Error, match="'nope' is not a weight"):
        s.readWeights(graft.PyWeightsIO({"nope": np.zeros(2, np.float32)}))
