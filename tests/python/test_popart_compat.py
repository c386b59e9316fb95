"""PopART programs graft runs as written: ai.graphcore ops on the Builder, training without
weights, gradients of inputs, subgraph builders, and PopART's device and settings names. Each
against numpy or torch."""
import numpy as np
import pytest
import torch

import graft


def _run(builder, outputs, inputs, train_loss=None):
    anchors = {o: graft.AnchorReturnType("All") for o in outputs}
    flow = graft.DataFlow(1, anchors)
    device = graft.DeviceManager().createCpuDevice()
    if train_loss is None:
        s = graft.InferenceSession(fnModel=builder.getModelProto(), dataFlow=flow, deviceInfo=device)
    else:
        s = graft.TrainingSession(fnModel=builder.getModelProto(), dataFlow=flow, loss=train_loss,
                                  optimizer=graft.ConstSGD(0.01), deviceInfo=device)
    s.prepareDevice()
    out = s.initAnchorArrays()
    if train_loss is not None:
        s.weightsFromHost()
    s.run(graft.PyStepIO(inputs, out))
    return out


def test_device_names_and_settings_are_real():
    assert graft.DeviceManager().enumerateDevices() == []
    assert graft.DeviceSelectionCriterion.Random != graft.DeviceSelectionCriterion.First
    assert graft.SubgraphCopyingStrategy.JustInTime.name == "JustInTime"
    s = graft.BatchSerializationSettings(factor=4)
    assert s.factor == 4 and s.concatOnVirtualGraphChange is True
    loc = graft.TensorLocationSettings(graft.TensorLocation(graft.TensorStorage.OffChip), 16)
    assert loc.location.storage == graft.TensorStorage.OffChip and loc.minElementsForOffChip == 16
    with pytest.raises(TypeError):
        graft.ExecutionPhaseSettings(nonsense=1)
    assert graft.CommGroup(graft.CommGroupType.Consecutive, 2).replicaGroupSize == 2


def test_reducemedian_matches_torch():
    x = np.random.default_rng(0).standard_normal((3, 5, 4)).astype(np.float32)
    b = graft.Builder()
    t = b.addInputTensor(graft.TensorInfo(x))
    values, indices = b.aiGraphcore.reducemedian([t], axes=[1], keepdims=0)
    out = _run(b, [values, indices], {t: x})
    ref = torch.median(torch.tensor(x), dim=1)
    np.testing.assert_array_equal(out[values], ref.values.numpy())
    np.testing.assert_array_equal(out[indices], ref.indices.numpy().astype(np.int32))
    with pytest.raises(graft.Error, match=r"Axis 3 is out of acceptable range \[-3, 2\]"):
        b.aiGraphcore.reducemedian([t], axes=[3])


def test_training_without_weights_gives_input_gradients():
    # loss = mean(log1p(x) * 2): d loss / dx = 2 / (1 + x) / n
    x = np.random.default_rng(1).uniform(0.5, 2.0, (2, 3)).astype(np.float32)
    b = graft.Builder()
    t = b.addInputTensor(graft.TensorInfo(x))
    y = b.aiGraphcore.scale([b.aiGraphcore.log1p([t])], 2.0)
    loss = b.aiGraphcore.identityloss([y], reduction=graft.ReductionType.Mean)
    gx = graft.reservedGradientPrefix() + t
    gy = graft.reservedGradientPrefix() + y
    out = _run(b, [loss, gx, gy], {t: x}, train_loss=loss)
    np.testing.assert_allclose(out[gy], np.full_like(x, 1 / 6), rtol=1e-6)
    np.testing.assert_allclose(out[gx], 2 / (1 + x) / 6, rtol=1e-5)


def test_gradient_anchor_of_a_tensor_the_loss_ignores_is_an_error():
    b = graft.Builder()
    t = b.addInputTensor(graft.TensorInfo("FLOAT", [2]))
    u = b.addInputTensor(graft.TensorInfo("FLOAT", [2]))
    loss = b.aiGraphcore.identityloss([b.aiGraphcore.detach([t])])
    flow = graft.DataFlow(1, {graft.reservedGradientPrefix() + u: graft.AnchorReturnType("All")})
    with pytest.raises(graft.Error, match="does not depend on"):
        graft.TrainingSession(fnModel=b.getModelProto(), dataFlow=flow, loss=loss, optimizer=graft.ConstSGD(0.1),
                              deviceInfo=graft.DeviceManager().createCpuDevice())


def test_sort_and_bucketize_match_torch():
    x = np.array([[3.0, 1.0, 2.0, 1.0], [0.5, -1.0, 4.0, 2.0]], np.float32)
    bounds = np.array([0.0, 1.0, 2.5], np.float32)
    b = graft.Builder()
    t = b.addInputTensor(graft.TensorInfo(x))
    bt = b.addInputTensor(graft.TensorInfo(bounds))
    values, indices = b.aiGraphcore.sort([t], axis=1, descending=1, stable=1)
    buckets = b.aiGraphcore.bucketize([t, bt], right=0)
    out = _run(b, [values, indices, buckets], {t: x, bt: bounds})
    ref = torch.sort(torch.tensor(x), dim=1, descending=True, stable=True)
    np.testing.assert_array_equal(out[values], ref.values.numpy())
    np.testing.assert_array_equal(out[indices], ref.indices.numpy().astype(np.int32))
    np.testing.assert_array_equal(out[buckets], torch.bucketize(torch.tensor(x), torch.tensor(bounds),
                                                                out_int32=True).numpy())


def test_subgraph_call_runs_twice_with_its_own_inputs():
    b = graft.Builder()
    i0 = b.addInputTensor(graft.TensorInfo("FLOAT", [2]))
    i1 = b.addInputTensor(graft.TensorInfo("FLOAT", [2]))
    sub = b.createSubgraphBuilder()
    a = sub.addUntypedInputTensor()
    c = sub.addUntypedInputTensor()
    sub.addOutputTensor(sub.aiOnnx.mul([a, c]))
    first = b.aiGraphcore.call([i0, i1], 1, sub)[0]
    second = b.aiGraphcore.call([first, i0], 1, sub)[0]
    x0, x1 = np.array([2, 3], np.float32), np.array([4, 5], np.float32)
    out = _run(b, [second], {i0: x0, i1: x1})
    np.testing.assert_allclose(out[second], x0 * x1 * x0)
    with pytest.raises(graft.Error, match=r"number of inputs \(1\) does not match that of the callee subgraph \(2\)"):
        b.aiGraphcore.call([i0], 1, sub)


def test_scan_and_if_from_subgraph_builders():
    d = np.array([[1, 2], [3, 4], [5, 6]], np.float32)
    b = graft.Builder()
    td = b.addInputTensor(graft.TensorInfo(d))
    state = b.addInputTensor(graft.TensorInfo("FLOAT", [1, 2]))
    body = b.createSubgraphBuilder()
    s_in = body.addUntypedInputTensor()
    x_in = body.addUntypedInputTensor()
    s_out = body.aiOnnx.add([s_in, x_in])
    body.addOutputTensor(s_out)
    body.addOutputTensor(s_out)
    final, running = b.aiOnnx.scan([state, td], 2, body, 1)
    cond = b.aiOnnx.constant(np.array(False))
    then_b = b.createSubgraphBuilder()
    then_b.addOutputTensor(then_b.aiOnnx.neg([final]))
    else_b = b.createSubgraphBuilder()
    else_b.addOutputTensor(else_b.aiOnnx.abs([final]))
    chosen = b.aiOnnx.logical_if([cond], 1, else_b, then_b)[0]
    s0 = np.zeros((1, 2), np.float32)
    out = _run(b, [final, running, chosen], {td: d, state: s0})
    np.testing.assert_allclose(out[running], np.cumsum(d, axis=0))
    np.testing.assert_allclose(out[final], d.sum(axis=0, keepdims=True))
    np.testing.assert_allclose(out[chosen], np.abs(d.sum(axis=0, keepdims=True)))


def test_multiconv_dynamicslice_groupnorm_match_torch():
    rng = np.random.default_rng(2)
    x = rng.standard_normal((2, 4, 5, 5)).astype(np.float32)
    w = rng.standard_normal((3, 4, 3, 3)).astype(np.float32)
    scale = rng.standard_normal(4).astype(np.float32)
    bias = rng.standard_normal(4).astype(np.float32)
    offset = np.array([1], np.uint32)
    b = graft.Builder()
    tx, tw, ts, tb, to = (b.addInputTensor(graft.TensorInfo(v)) for v in (x, w, scale, bias, offset))
    (conv,) = b.aiGraphcore.multiconv([[tx, tw]], pads=[[1, 1, 1, 1]], strides=[[2, 2]])
    piece = b.aiGraphcore.dynamicslice([tx, to], axes=[2], sizes=[3])
    y, mean, inv = b.aiGraphcore.groupnormalization([tx, ts, tb], 2, 1e-5)
    out = _run(b, [conv, piece, y, mean], {tx: x, tw: w, ts: scale, tb: bias, to: offset})
    tx_ = torch.tensor(x)
    ref_conv = torch.nn.functional.conv2d(tx_, torch.tensor(w), padding=1, stride=2)
    np.testing.assert_allclose(out[conv], ref_conv.numpy(), rtol=1e-4, atol=1e-5)
    np.testing.assert_array_equal(out[piece], x[:, :, 1:4, :])
    ref_y = torch.nn.functional.group_norm(tx_, 2, torch.tensor(scale), torch.tensor(bias), 1e-5)
    np.testing.assert_allclose(out[y], ref_y.numpy(), rtol=1e-4, atol=1e-5)
    np.testing.assert_allclose(out[mean], x.reshape(2, 2, -1).mean(axis=2).reshape(-1), rtol=1e-5, atol=1e-6)


def _dropout_session(seed):
    b = graft.Builder()
    t = b.addInputTensor(graft.TensorInfo("FLOAT", [64]))
    w = b.addInitializedInputTensor(np.ones(64, np.float32))
    y = b.aiOnnx.dropout([b.aiOnnx.mul([t, w])], 1, 0.5)[0]
    loss = b.aiGraphcore.identityloss([y], reduction=graft.ReductionType.Sum)
    flow = graft.DataFlow(1, {y: graft.AnchorReturnType("All")})
    s = graft.TrainingSession(fnModel=b.getModelProto(), dataFlow=flow, loss=loss, optimizer=graft.ConstSGD(0.0),
                              deviceInfo=graft.DeviceManager().createCpuDevice())
    s.prepareDevice()
    s.setRandomSeed(seed)
    out = s.initAnchorArrays()
    s.weightsFromHost()
    s.run(graft.PyStepIO({t: np.ones(64, np.float32)}, out))
    return out[y].copy(), s


def test_set_random_seed_makes_dropout_reproducible():
    a, s = _dropout_session(7)
    b, _ = _dropout_session(7)
    c, _ = _dropout_session(8)
    np.testing.assert_array_equal(a, b)
    assert not np.array_equal(a, c)
    assert set(np.unique(a)) <= {0.0, 2.0}  # kept values are scaled by 1 / (1 - ratio)
    assert s.getRandomSeed() == 8


def test_serialize_ir_lists_the_compiled_ops():
    import json

    b = graft.Builder()
    t = b.addInputTensor(graft.TensorInfo("FLOAT", [2, 3]))
    y = b.aiOnnx.sigmoid([b.aiGraphcore.scale([t], 2.0)])
    s = graft.InferenceSession(fnModel=b.getModelProto(), dataFlow=graft.DataFlow(1, {y: graft.AnchorReturnType("All")}),
                               deviceInfo=graft.DeviceManager().createCpuDevice())
    s.prepareDevice()
    ir = json.loads(s._serializeIr(graft.IrSerializationFormat.JSON))
    ops = ir["maingraph"]
    assert ops and all({"type", "domain", "inputs", "outputs", "attributes"} <= set(op) for op in ops)
    assert any(o["name"] == y for op in ops for o in op["outputs"])
    assert json.loads(s.getSerializedGraph()) == ir
