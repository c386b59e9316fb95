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


def test_normalize_image_matches_numpy():
    img = np.random.default_rng(3).integers(0, 256, (2, 2, 2, 3)).astype(np.uint8)
    offsets = np.array([1, 2, 3], np.float16)
    scales = np.array([4, 5, 6], np.float16)
    b = graft.Builder()
    ti, to, ts = (b.addInputTensor(graft.TensorInfo(v)) for v in (img, offsets, scales))
    y = b.aiGraphcore.normalize_image([ti, to, ts], scale=1.0 / 255)
    assert b.getTensorShape(y) == [2, 2, 2, 4] and b.getTensorDtypeString(y) == "float16"
    out = _run(b, [y], {ti: img, to: offsets, ts: scales})
    ref = (img.astype(np.float64) / 255 - offsets) * scales
    np.testing.assert_allclose(out[y][..., :3], ref, rtol=1e-2, atol=1e-2)
    np.testing.assert_array_equal(out[y][..., 3], 0)
    with pytest.raises(graft.Error, match="inner dimension to be 3"):
        b.aiGraphcore.normalize_image([b.addInputTensor(graft.TensorInfo("FLOAT", [2, 4])), to, ts])


def test_shapeddropout_drops_whole_rows_and_trains_through_its_mask():
    b = graft.Builder()
    t = b.addInputTensor(graft.TensorInfo("FLOAT", [200, 3]))
    y = b.aiGraphcore.shapeddropout([t], shape=[200, 1], ratio=0.5)
    loss = b.aiGraphcore.identityloss([y], reduction=graft.ReductionType.Sum)
    gx = graft.reservedGradientPrefix() + t
    out = _run(b, [y, gx], {t: np.ones((200, 3), np.float32)}, train_loss=loss)
    rows = out[y]
    assert set(np.unique(rows)) <= {0.0, 2.0} and 0 < (rows[:, 0] == 0).sum() < 200
    assert (rows == rows[:, :1]).all()  # a row is dropped or kept as a whole
    np.testing.assert_array_equal(out[gx], rows)  # d sum(x * mask) / dx = mask
    inference = _run(b, [y], {t: np.full((200, 3), 3.0, np.float32)})
    np.testing.assert_array_equal(inference[y], 3.0)
    with pytest.raises(graft.Error, match=r"ratio value 1.5 is not valid"):
        b.aiGraphcore.shapeddropout([t], shape=[200, 1], ratio=1.5)
    with pytest.raises(graft.Error, match="incompatible input tensor and dropout shape"):
        b.aiGraphcore.shapeddropout([t], shape=[4, 4])


def _popart_lstm_weights(w, r, bias, hidden):
    """torch's LSTM parameters (gates i, f, g, o) in PopART's layout (gates f, i, g, o)."""
    order = [1, 0, 2, 3]
    wi = np.stack([w[g * hidden:(g + 1) * hidden].T for g in order])
    wr = np.stack([r[g * hidden:(g + 1) * hidden].T for g in order])
    return np.ascontiguousarray(np.concatenate([wi, wr], axis=1)), np.stack([bias[g * hidden:(g + 1) * hidden]
                                                                             for g in order])


def test_popart_lstm_matches_torch_with_gradients():
    rng = np.random.default_rng(4)
    seq, batch, size, hidden = 4, 2, 3, 5
    lstm = torch.nn.LSTM(size, hidden)
    x = rng.standard_normal((seq, batch, size)).astype(np.float32)
    h0, c0 = (rng.standard_normal((1, batch, hidden)).astype(np.float32) for _ in range(2))
    weights, biases = _popart_lstm_weights(lstm.weight_ih_l0.detach().numpy(), lstm.weight_hh_l0.detach().numpy(),
                                           (lstm.bias_ih_l0 + lstm.bias_hh_l0).detach().numpy(), hidden)
    b = graft.Builder()
    tx, tw, tb, ts = (b.addInputTensor(graft.TensorInfo(v)) for v in (x, weights, biases, np.concatenate([h0, c0])))
    out, cell = b.aiGraphcore.lstm([tx, tw, tb, ts])
    assert b.getTensorShape(out) == [seq, batch, hidden] and b.getTensorShape(cell) == [batch, hidden]
    loss = b.aiGraphcore.identityloss([out], reduction=graft.ReductionType.Sum)
    gx = graft.reservedGradientPrefix() + tx
    got = _run(b, [out, cell, gx], {tx: x, tw: weights, tb: biases, ts: np.concatenate([h0, c0])}, train_loss=loss)
    xt = torch.tensor(x, requires_grad=True)
    y, (_, c) = lstm(xt, (torch.tensor(h0), torch.tensor(c0)))
    y.sum().backward()
    np.testing.assert_allclose(got[out], y.detach().numpy(), rtol=1e-4, atol=1e-5)
    np.testing.assert_allclose(got[cell], c[0].detach().numpy(), rtol=1e-4, atol=1e-5)
    np.testing.assert_allclose(got[gx], xt.grad.numpy(), rtol=1e-4, atol=1e-5)
    last, _ = b.aiGraphcore.lstm([tx, tw, tb, ts], outputFullSequence=0)
    assert b.getTensorShape(last) == [batch, hidden]


def test_packed_data_block_runs_the_callback_per_sequence():
    lengths = np.array([2, 3, 1], np.uint32)
    offsets = np.array([0, 2, 5], np.uint32)
    data = np.arange(12, dtype=np.float32).reshape(6, 2)
    b = graft.Builder()
    td, to, tl = (b.addInputTensor(graft.TensorInfo(v)) for v in (data, offsets, lengths))
    sub = b.createSubgraphBuilder()
    s = sub.addUntypedInputTensor()
    sub.addOutputTensor(sub.aiOnnx.add([s, s]))  # [1, maxLen, 2]
    y = b.aiGraphcore.packedDataBlock([td, to, tl, to, tl], [4], 6, 1, sub)
    out = _run(b, [y], {td: data, to: offsets, tl: lengths})
    np.testing.assert_array_equal(out[y], 2 * data)  # unpacked, doubled, packed back where it was
    # A callback that sees three sequences at once, into a result with a spare row.
    mixed = b.aiGraphcore.packedDataBlock([td, to, tl, to, tl], [4], 7, 3, _batch_sum_callback(b))
    out = _run(b, [mixed], {td: data, to: offsets, tl: lengths})
    unpacked = np.zeros((3, 4, 2), np.float32)
    for k, (o, n) in enumerate(zip(offsets, lengths)):
        unpacked[k, :n] = data[o:o + n]
    ref = np.zeros((7, 2), np.float32)
    for k, (o, n) in enumerate(zip(offsets, lengths)):
        ref[o:o + n] = (unpacked[k] * unpacked[k])[:n]
    np.testing.assert_array_equal(out[mixed], ref)


def _batch_sum_callback(b):
    sub = b.createSubgraphBuilder()
    s = sub.addUntypedInputTensor()  # [3, maxLen, 2]
    sub.addOutputTensor(sub.aiOnnx.mul([s, s]))
    return sub


def test_removed_onnx_ops_build_at_their_opsets():
    # Scatter (opset 9-10) and Upsample (7-9) run as the ScatterElements and Resize they convert to.
    data = np.zeros((3, 3), np.float32)
    indices = np.array([[1, 0, 2], [0, 2, 1]], np.int32)
    updates = np.array([[1, 2, 3], [4, 5, 6]], np.float32)
    b = graft.Builder(opsets={"ai.onnx": 10, "ai.graphcore": 1})
    td, ti, tu = (b.addInputTensor(graft.TensorInfo(v)) for v in (data, indices, updates))
    y = b.aiOnnx.scatter([td, ti, tu], axis=0)
    b.addOutputTensor(y)  # the converter renames the tensors it rewrites, but not the model's outputs
    out = _run(b, [y], {td: data, ti: indices, tu: updates})
    ref = torch.zeros(3, 3).scatter_(0, torch.tensor(indices, dtype=torch.int64), torch.tensor(updates))
    np.testing.assert_array_equal(out[y], ref.numpy())
    b9 = graft.Builder(opsets={"ai.onnx": 9, "ai.graphcore": 1})
    x = np.arange(4, dtype=np.float32).reshape(1, 1, 2, 2)
    tx = b9.addInputTensor(graft.TensorInfo(x))
    up = b9.aiOnnx.upsample([tx, b9.aiOnnx.constant(np.array([1, 1, 2, 2], np.float32))])
    b9.addOutputTensor(up)
    out = _run(b9, [up], {tx: x})
    np.testing.assert_array_equal(out[up], x.repeat(2, axis=2).repeat(2, axis=3))


def test_training_session_refuses_gradients_of_integer_tensors():
    b = graft.Builder()
    t = b.addInputTensor(graft.TensorInfo("FLOAT", [2, 3]))
    i = b.addInputTensor(graft.TensorInfo("INT32", [3]))
    w = b.addInitializedInputTensor(np.ones((2, 3), np.float32))

    def session(loss, anchors):
        return graft.TrainingSession(fnModel=b.getModelProto(), dataFlow=graft.DataFlow(1, anchors), loss=loss,
                                     optimizer=graft.ConstSGD(0.1), deviceInfo=graft.DeviceManager().createCpuDevice())

    loss = b.aiGraphcore.identityloss([b.aiOnnx.add([b.aiOnnx.mul([t, w]), b.aiOnnx.cast([i], "FLOAT")])])
    with pytest.raises(graft.Error, match="^Anchor tensor `Gradient___.*' not in Ir Tensors: .* INT32"):
        session(loss, [graft.reservedGradientPrefix() + i])


def test_scaledadd_with_scale_tensors_and_dynamiczero_with_sizes_only():
    rng = np.random.default_rng(5)
    a, c = rng.standard_normal((2, 3)).astype(np.float32), rng.standard_normal((2, 3)).astype(np.float32)
    s0, s1 = np.array([0.5], np.float32), np.array([-2.0], np.float32)
    b = graft.Builder()
    ta, tc, t0, t1 = (b.addInputTensor(graft.TensorInfo(v)) for v in (a, c, s0, s1))
    y = b.aiGraphcore.scaledadd([ta, tc, t0, t1])
    # Without a third input, DynamicZero's region is `sizes` along `axes`: rows 1..1, columns 1..2.
    offsets = b.addInputTensor(graft.TensorInfo("UINT32", [2]))
    z = b.aiGraphcore.dynamiczero([ta, offsets], axes=[0, 1], sizes=[1, 2])
    assert b.getTensorShape(z) == [2, 3]
    out = _run(b, [y, z], {ta: a, tc: c, t0: s0, t1: s1, offsets: np.array([1, 1], np.uint32)})
    np.testing.assert_allclose(out[y], 0.5 * a - 2.0 * c, rtol=1e-6)
    want = a.copy()
    want[1, 1:3] = 0
    np.testing.assert_array_equal(out[z], want)
    with pytest.raises(graft.Error, match="scaledadd takes 2 inputs"):
        b.aiGraphcore.scaledadd([ta])


def test_loop_that_stops_early_inside_a_called_subgraph():
    # a *= 4 while a < 128, at most 10 times, in a Loop that a Call runs; the trip count is a
    # constant of the main builder.
    b = graft.Builder()
    a = b.addInputTensor(graft.TensorInfo("FLOAT", [1]))
    four = b.aiOnnx.constant(np.array([4], np.float32))
    trips = b.aiOnnx.constant(np.array(10, np.int64))
    cond = b.aiOnnx.constant(np.array(True))
    call = b.createSubgraphBuilder()
    body = call.createSubgraphBuilder()
    body.addInputTensor(graft.TensorInfo("INT64", []))
    body.addUntypedInputTensor(cond)
    a_in = body.addUntypedInputTensor(a)
    a_out = body.aiOnnx.mul([a_in, four])
    body.addOutputTensor(body.aiOnnx.less([a_out, body.aiOnnx.constant(np.array([128], np.float32))]))
    body.addOutputTensor(a_out)
    call.addOutputTensor(call.aiOnnx.loop([trips, cond, a], 1, body)[0])
    y = b.aiGraphcore.call([], 1, call)[0]
    for start, want in ((1.0, 256.0), (3.0, 192.0), (200.0, 800.0)):
        out = _run(b, [y], {a: np.array([start], np.float32)})
        np.testing.assert_array_equal(out[y], [want])


def test_logical_if_branches_may_name_parent_tensors_as_inputs():
    d1, d2 = np.array([0, 20, 5], np.int32), np.array([7, 2, -1], np.int32)
    for taken in (True, False):
        b = graft.Builder()
        i1, i2 = b.addInputTensor(graft.TensorInfo(d1)), b.addInputTensor(graft.TensorInfo(d2))
        cond = b.addInputTensor(graft.TensorInfo("BOOL", []))
        then_b, else_b = b.createSubgraphBuilder(), b.createSubgraphBuilder()
        for sub, op in ((then_b, "add"), (else_b, "sub")):
            sub.addInputTensorFromParentGraph(i1)
            sub.addInputTensorFromParentGraph(i2)
            sub.addOutputTensor(getattr(sub.aiOnnx, op)([i1, i2]))
        y = b.aiOnnx.logical_if([cond], 1, else_b, then_b)[0]
        out = _run(b, [y], {i1: d1, i2: d2, cond: np.array(taken)})
        np.testing.assert_array_equal(out[y], d1 + d2 if taken else d1 - d2)
        with pytest.raises(graft.Error, match="the parent graph has no tensor 'nope'"):
            then_b.addInputTensorFromParentGraph("nope")


def test_supported_operations_lists_public_and_private_ops():
    public = graft.getSupportedOperations(False)
    everything = graft.getSupportedOperations(True)
    keys = {(o.domain, o.type, o.version) for o in public}
    assert ("ai.onnx", "Add", 7) in keys and ("ai.onnx", "Add", 14) in keys
    assert ("ai.graphcore", "Nll", 1) in keys
    assert set(public) < set(everything) and all(o.domain == "ai.graft" for o in set(everything) - set(public))
    definitions = graft.getSupportedOperationsDefinition(False)
    add = definitions[graft.OperatorIdentifier("ai.onnx", "Add", 7)]
    assert [i.name for i in add.inputs] == ["A", "B"] and "tensor(float)" in add.inputs[0].supportedTensors
    assert len(graft.getSupportedOperationsDefinition(True)) == len(everything)


def test_nll_labels_are_checked_when_the_loss_is_added():
    b = graft.Builder()
    probs = b.addInitializedInputTensor(np.full((2, 4, 3), 1 / 3, np.float32))
    labels = b.addInputTensor(graft.TensorInfo("INT32", [2, 5]))
    with pytest.raises(graft.Error, match=r"^The label tensor \(INT32   \[2 5\]\) must have shape \[2 4\] to match all "
                                          r"but the final dimension of the probabilities tensor \(FLOAT   \[2 4 3\]\)"):
        b.aiGraphcore.nllloss([probs, labels], graft.ReductionType.Sum)
    with pytest.raises(graft.Error, match="the label tensor must hold integers, got FLOAT"):
        b.aiGraphcore.nllloss([probs, probs])
    b2 = graft.Builder()
    probs2 = b2.addInitializedInputTensor(np.full((2, 3), 1 / 3, np.float32))
    labels2 = b2.addInputTensor(graft.TensorInfo("INT32", [2]))
    loss2 = b2.aiGraphcore.nllloss([probs2, labels2], graft.ReductionType.NoReduction)
    with pytest.raises(graft.Error, match="must be a scalar tensor$"):
        graft.TrainingSession(fnModel=b2.getModelProto(), dataFlow=graft.DataFlow(1, [loss2]), loss=loss2,
                              optimizer=graft.ConstSGD(0.1), deviceInfo=graft.DeviceManager().createCpuDevice())


def test_integer_loss_trains_with_integer_gradients():
    # PopART trains a loss of integers: the sum of row medians; its gradient is 1 (an INT32) at
    # each median, 0 elsewhere.
    x = np.array([[24, 55, 88, 60, 27], [77, 73, 3, 49, 44]], np.int32)
    b = graft.Builder()
    t = b.addInputTensor(graft.TensorInfo(x))
    values, _ = b.aiGraphcore.reducemedian([t], axes=[1], keepdims=0)
    total = b.aiOnnx.reducesum([values], keepdims=False)
    loss = b.aiGraphcore.identityloss([total])
    gx = graft.reservedGradientPrefix() + t
    out = _run(b, [total, gx], {t: x}, train_loss=loss)
    assert out[total] == 55 + 49 and out[gx].dtype == np.int32
    np.testing.assert_array_equal(out[gx], [[0, 1, 0, 0, 0], [0, 0, 0, 1, 0]])


def test_int64_data_for_an_int32_input_is_converted():
    b = graft.Builder()
    t = b.addInputTensor(graft.TensorInfo("INT32", [3]))
    y = b.aiOnnx.add([t, t])
    out = _run(b, [y], {t: np.array([1, -2, 3], np.int64)})
    assert out[y].dtype == np.int32
    np.testing.assert_array_equal(out[y], [2, -4, 6])


def test_detached_batchnorm_in_a_training_graph_normalizes_with_its_running_statistics():
    # PopART: a one-output BatchNormalization whose output is detached runs in inference mode.
    rng = np.random.default_rng(6)
    x = rng.random((2, 2, 2, 2)).astype(np.float32)
    scale, bias = rng.random(2).astype(np.float32), rng.random(2).astype(np.float32)
    mean, var = np.array([0.5, -0.5], np.float32), np.array([2.0, 0.5], np.float32)
    b = graft.Builder()
    ins = [b.addInputTensor(graft.TensorInfo(v)) for v in (x, scale, bias, mean, var)]
    w = b.addInitializedInputTensor(np.ones((1,), np.float32))
    (y,) = b.aiOnnx.batchnormalization(ins, 1, 1e-5, 0.1)
    d = b.aiGraphcore.detach([y])
    loss = b.aiGraphcore.identityloss([b.aiOnnx.mul([d, w])])
    out = _run(b, [d], dict(zip(ins, (x, scale, bias, mean, var))), train_loss=loss)
    per = (slice(None), None, None)
    want = (x - mean[per]) / np.sqrt(var[per] + 1e-5) * scale[per] + bias[per]
    np.testing.assert_allclose(out[d], want, rtol=1e-5, atol=1e-6)


def test_input_types_of_the_ops_newest_version_are_accepted_at_older_opsets():
    # graft runs every model at opset 28, so PopART programs may give Equal FLOAT inputs at opset 10
    # (Equal-7 takes only integers and BOOL) and TopK INT32 (TopK-10 takes only floats).
    b = graft.Builder(opsets={"ai.onnx": 10, "ai.graphcore": 1})
    x = b.addInputTensor(graft.TensorInfo("FLOAT", [3]))
    i = b.addInputTensor(graft.TensorInfo("INT32", [3]))
    eq = b.aiOnnx.equal([x, b.aiOnnx.constant(np.array([1, 2, 3], np.float32))])
    top = b.aiOnnx.topk([i, b.aiOnnx.constant(np.array([1], np.int64))], axis=0)[0]
    out = _run(b, [eq, top], {x: np.array([1, 0, 3], np.float32), i: np.array([4, 9, -1], np.int32)})
    np.testing.assert_array_equal(out[eq], [True, False, True])
    np.testing.assert_array_equal(out[top], [9])
    with pytest.raises(graft.Error, match="Relu"):
        b.aiOnnx.relu([b.addInputTensor(graft.TensorInfo("BOOL", [2]))])


def test_scalar_constants_and_weights_stay_scalars():
    b = graft.Builder()
    c = b.aiOnnx.constant(np.asarray(2, np.int32))
    w = b.addInitializedInputTensor(np.asarray(1.5, np.float32))
    assert b.getTensorShape(c) == [] and b.getTensorShape(w) == []
    y = b.aiOnnx.mul([w, b.aiOnnx.cast([c], "FLOAT")])
    out = _run(b, [y], {})
    assert out[y].shape == () and out[y] == 3.0


def test_opset9_batchnorm_with_five_outputs_uses_batch_statistics():
    # Before opset 14 a BatchNormalization with its training outputs is in training mode: Y uses
    # the batch's statistics and the running ones move by ONNX's rule (biased variance).
    rng = np.random.default_rng(7)
    x = rng.random((2, 3, 2, 2)).astype(np.float32)
    scale, bias = rng.random(3).astype(np.float32), rng.random(3).astype(np.float32)
    mean, var = np.zeros(3, np.float32), np.ones(3, np.float32)
    b = graft.Builder(opsets={"ai.onnx": 9, "ai.graphcore": 1})
    ins = [b.addInputTensor(graft.TensorInfo(v)) for v in (x, scale, bias, mean, var)]
    y, run_mean, run_var, _, _ = b.aiOnnx.batchnormalization(ins, 5, 1e-5, 0.9)
    assert b.getTensorShape(run_mean) == [3] and b.getTensorShape(run_var) == [3]
    for t in (y, run_mean, run_var):
        b.addOutputTensor(t)
    out = _run(b, [y, run_mean, run_var], dict(zip(ins, (x, scale, bias, mean, var))))
    m, v = x.mean(axis=(0, 2, 3)), x.var(axis=(0, 2, 3))
    per = (slice(None), None, None)
    np.testing.assert_allclose(out[y], (x - m[per]) / np.sqrt(v[per] + 1e-5) * scale[per] + bias[per], rtol=1e-4,
                               atol=1e-5)
    np.testing.assert_allclose(out[run_mean], 0.9 * mean + 0.1 * m, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(out[run_var], 0.9 * var + 0.1 * v, rtol=1e-5, atol=1e-6)


def test_graphcore_batchnorm_tracks_the_unbiased_running_variance():
    # aiGraphcore.batchnormalization: training mode with PyTorch's running variance (N - 1).
    rng = np.random.default_rng(8)
    x = (rng.random((2, 3, 4)) * 10).astype(np.float32)
    scale, bias = rng.random(3).astype(np.float32), rng.random(3).astype(np.float32)
    mean, var = np.zeros(3, np.float32), np.ones(3, np.float32)
    b = graft.Builder()
    ins = [b.addInputTensor(graft.TensorInfo(v)) for v in (x, scale, bias, mean, var)]
    y, run_mean, run_var, _, _ = b.aiGraphcore.batchnormalization(ins, 5, 1e-5, 0.25)
    out = _run(b, [y, run_mean, run_var], dict(zip(ins, (x, scale, bias, mean, var))))
    bn = torch.nn.BatchNorm1d(3, eps=1e-5, momentum=0.75)  # PyTorch's momentum is 1 - ONNX's
    bn.weight, bn.bias = torch.nn.Parameter(torch.tensor(scale)), torch.nn.Parameter(torch.tensor(bias))
    want = bn(torch.tensor(x)).detach().numpy()
    np.testing.assert_allclose(out[y], want, rtol=1e-4, atol=1e-5)
    np.testing.assert_allclose(out[run_mean], bn.running_mean.numpy(), rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(out[run_var], bn.running_var.numpy(), rtol=1e-5, atol=1e-5)


def test_reshape_with_two_unknown_dimensions_is_refused_with_popart_words():
    b = graft.Builder()
    x = b.addInputTensor(graft.TensorInfo("FLOAT", [2, 4, 3]))
    shape = b.aiOnnx.constant(np.array([-1, -1, 0], np.int64))
    with pytest.raises(graft.Error, match="can only use -1 to specify one unknown dimension"):
        b.aiOnnx.reshape([x, shape])
