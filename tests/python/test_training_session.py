"""graft.TrainingSession's API from Python: anchors (losses, activations, gradients), weights and
optimizer state in and out, checkpoint and resume, optimizer updates, and the errors a user meets."""
import os

import numpy as np
import onnx
import onnx.numpy_helper
import pytest

import torch  # required (requirements.txt): a missing torch fails these tests, never skips them

import graft  # noqa: E402
from training_util import (C, IN, N, STEPS, batch, compare, feeds_for, graft_model, make_torch_mlp,  # noqa: E402
                           read_weights, state_dict_numpy, train_graft, train_torch)

F = torch.nn.functional
WEIGHTS = ["0.weight", "0.bias", "2.weight", "2.bias", "4.weight", "4.bias"]


def _device():
    return graft.DeviceManager().createCpuDevice()


def _session(model, loss, optimizer, anchors=None, options=None, bps=1):
    anchors = anchors or {loss: graft.AnchorReturnType("All")}
    s = graft.TrainingSession(fnModel=model, dataFlow=graft.DataFlow(bps, anchors), loss=loss, optimizer=optimizer,
                              deviceInfo=_device(), userOptions=options)
    s.prepareDevice()
    s.weightsFromHost()
    return s


def _run(session, step, out=None, **feed_kw):
    out = session.initAnchorArrays() if out is None else out
    session.run(graft.PyStepIO(feeds_for(**feed_kw)(step), out))
    return out


def test_constructor_arguments_and_introspection():
    model, loss = graft_model(make_torch_mlp())
    opt = graft.SGD({"defaultLearningRate": (0.1, True)})
    # Positional arguments in PopART's order.
    s = graft.TrainingSession(model, graft.DataFlow(1, [loss]), loss, opt, _device(), graft.InputShapeInfo(),
                              graft.Patterns(), graft.SessionOptions(), "trainer")
    s.prepareDevice()
    assert s.name == "trainer"
    assert s.lossId() == loss
    assert s.trainedWeightIds() == sorted(WEIGHTS)
    assert s.getInfo("0.weight").shape() == [16, IN]
    assert s.getInfo(loss).shape() == []
    assert s.accumulationFactor == 1 and s.replicationFactor == 1
    assert sorted(s.inputIds()) == ["label", "x"]
    # An onnx.ModelProto and a path work as fnModel too.
    proto = onnx.load_from_string(model)
    graft.TrainingSession(fnModel=proto, dataFlow=graft.DataFlow(1, [loss]), loss=loss, optimizer=opt,
                          deviceInfo=_device())


def test_anchors_of_activations_and_gradients_match_torch():
    tm = make_torch_mlp()
    model, loss = graft_model(tm)
    art = graft.AnchorReturnType("All")
    anchors = {loss: art, "logits": art, "Gradient___0.weight": art, "Gradient___4.bias": art}
    s = _session(model, loss, graft.ConstSGD(0.0), anchors)
    out = _run(s, 0)
    assert out["Gradient___0.weight"].shape == (16, IN)
    x, y = batch(0)
    logits = tm(torch.from_numpy(x))
    t_loss = F.cross_entropy(logits, torch.from_numpy(y))
    t_loss.backward()
    np.testing.assert_allclose(out["logits"], logits.detach().numpy(), atol=1e-6)
    np.testing.assert_allclose(out[loss], t_loss.item(), atol=1e-6)
    np.testing.assert_allclose(out["Gradient___0.weight"], tm[0].weight.grad.numpy(), atol=1e-6)
    np.testing.assert_allclose(out["Gradient___4.bias"], tm[4].bias.grad.numpy(), atol=1e-6)


def test_gradient_anchors_include_loss_scaling():
    """As in PopART, the backward pass starts from lossScaling, so anchored gradients are scaled;
    the optimizer divides it out."""
    model, loss = graft_model(make_torch_mlp())
    art = graft.AnchorReturnType("All")
    grads = {}
    for ls in (1.0, 8.0):
        s = _session(model, loss, graft.SGD({"defaultLearningRate": (0.0, True), "lossScaling": (ls, True)}),
                     {loss: art, "Gradient___2.weight": art})
        grads[ls] = _run(s, 0)["Gradient___2.weight"]
    np.testing.assert_allclose(grads[8.0], 8.0 * grads[1.0], rtol=1e-6)


def test_batches_per_step_returns_every_loss():
    tm = make_torch_mlp()
    model, loss = graft_model(tm)
    opt = graft.SGD({"defaultLearningRate": (0.05, True), "defaultMomentum": (0.9, True)})
    s = _session(model, loss, opt, bps=4)
    out = s.initAnchorArrays()
    assert out[loss].shape == (4,)
    g_losses = []
    for step in range(2):
        _run(s, step, out, batches_per_step=4)
        g_losses += out[loss].tolist()
    t_losses = train_torch(tm, torch.optim.SGD(tm.parameters(), lr=0.05, momentum=0.9), 8)
    compare("batches_per_step4_sgd", g_losses, t_losses, read_weights(s, state_dict_numpy(tm)), state_dict_numpy(tm),
            1e-6)


def test_optimizer_state_matches_torch_state():
    """readWeights returns the optimizer state: SGD's velocity is torch's momentum_buffer, Adam's
    first and second moments are exp_avg and exp_avg_sq, its step counter torch's step."""
    for kind in ("sgd", "adam"):
        tm = make_torch_mlp()
        model, loss = graft_model(tm)
        if kind == "sgd":
            opt = graft.SGD({"defaultLearningRate": (0.05, True), "defaultMomentum": (0.9, True)})
            t_opt = torch.optim.SGD(tm.parameters(), lr=0.05, momentum=0.9)
        else:
            opt = graft.Adam({"defaultLearningRate": (0.01, True), "defaultEps": (1e-8, True)},
                             weight_decay_mode=graft.WeightDecayMode.L2Regularization)
            t_opt = torch.optim.Adam(tm.parameters(), lr=0.01, eps=1e-8)
        s, _, _ = train_graft(model, loss, opt, feeds_for(), 4)
        train_torch(tm, t_opt, 4)
        params = dict(tm.named_parameters())
        for w in WEIGHTS:
            state = t_opt.state[params[w]]
            shape = params[w].shape
            if kind == "sgd":
                ids = {f"Accl___{w}": state["momentum_buffer"]}
            else:
                ids = {f"Accl1___{w}": state["exp_avg"], f"Accl2___{w}": state["exp_avg_sq"]}
            arrays = {i: np.zeros(shape, np.float32) for i in ids}
            if kind == "adam":
                arrays[f"Step___{w}"] = np.zeros((), np.float32)
            s.readWeights(graft.PyWeightsIO(arrays))
            for i, expected in ids.items():
                np.testing.assert_allclose(arrays[i], expected.numpy(), atol=1e-6, err_msg=i)
            if kind == "adam":
                assert arrays[f"Step___{w}"] == float(state["step"])


def _checkpoint_run(tmp_path, optimizer, steps, split, options=None, micro_batches=1):
    """Losses and final weights and state of an uninterrupted run and of one resumed from a
    checkpoint written after ``split`` steps."""
    model, loss = graft_model(make_torch_mlp())
    feeds = feeds_for(micro_batches)
    full, full_losses, _ = train_graft(model, loss, optimizer(), feeds, steps, options=options)
    first, first_losses, _ = train_graft(model, loss, optimizer(), feeds, split, options=options)
    path = os.fspath(tmp_path / "checkpoint.onnx")
    first.modelToHost(path)
    resumed = _session(path, loss, optimizer(), options=options)
    resumed_losses = []
    for step in range(split, steps):
        out = _run(resumed, step, micro_batches=micro_batches)
        resumed_losses += np.atleast_1d(out[loss]).tolist()
    state = [i.name for i in onnx.load(path).graph.initializer
             if i.name.split("___")[0] in ("Accl", "Accl1", "Accl2", "Accl3", "Step")]
    like = {i.name: onnx.numpy_helper.to_array(i) for i in onnx.load(path).graph.initializer
            if i.name in WEIGHTS or i.name in state}
    return (full_losses, read_weights(full, like)), (first_losses + resumed_losses, read_weights(resumed, like)), state


@pytest.mark.parametrize("kind", ["sgd_momentum", "adam", "rmsprop_momentum", "sgd_accumulation"])
def test_checkpoint_resume_is_bit_identical(tmp_path, kind):
    options = None
    micro = 1
    if kind == "sgd_momentum":
        def optimizer():
            return graft.SGD({"defaultLearningRate": (0.05, False), "defaultMomentum": (0.9, True),
                              "defaultWeightDecay": (0.01, True)})
        expected_state = {"Accl"}
    elif kind == "adam":
        def optimizer():
            return graft.Adam({"defaultLearningRate": (0.01, False), "defaultEps": (1e-8, True),
                               "lossScaling": (16.0, False)})
        expected_state = {"Accl1", "Accl2", "Step"}
    elif kind == "rmsprop_momentum":
        def optimizer():
            return graft.Adaptive({"defaultLearningRate": (0.01, True), "defaultMomentum": (0.5, True)},
                                  mode=graft.AdaptiveMode.CenteredRMSProp)
        expected_state = {"Accl1", "Accl2", "Accl3"}
    else:
        options = graft.SessionOptions()
        options.enableGradientAccumulation = True
        options.accumulationFactor = 2
        micro = 2

        def optimizer():
            return graft.SGD({"defaultLearningRate": (0.05, True), "defaultMomentum": (0.9, True)})
        expected_state = {"Accl"}
    (full_losses, full_w), (res_losses, res_w), state = _checkpoint_run(tmp_path, optimizer, 6, 3, options, micro)
    assert {s.split("___")[0] for s in state} == expected_state
    assert len(full_losses) == len(res_losses) == 6 * micro
    assert np.array_equal(np.asarray(full_losses), np.asarray(res_losses)), "losses differ after resuming"
    for k in full_w:
        assert np.array_equal(full_w[k], res_w[k]), f"{k} differs after resuming"


def test_checkpoint_holds_trained_weights_and_state(tmp_path):
    model, loss = graft_model(make_torch_mlp())
    s, _, _ = train_graft(model, loss, graft.Adam({"defaultLearningRate": (0.01, True)}), feeds_for(), 2)
    path = tmp_path / "trained.onnx"
    s.modelToHost(os.fspath(path))
    inits = {i.name: onnx.numpy_helper.to_array(i) for i in onnx.load(os.fspath(path)).graph.initializer}
    weights = read_weights(s, {w: inits[w] for w in WEIGHTS})
    for w in WEIGHTS:
        assert np.array_equal(inits[w], weights[w])
        assert inits[f"Step___{w}"] == 2.0
    assert not [p for p in os.listdir(tmp_path) if p != "trained.onnx"], "modelToHost left a temporary file"
    # The checkpoint is an ordinary model: an inference session runs it with the trained weights.
    inf = graft.InferenceSession(fnModel=os.fspath(path), dataFlow=graft.DataFlow(1, ["logits"]),
                                 deviceInfo=_device())
    inf.prepareDevice()
    out = inf.initAnchorArrays()
    x, y = batch(0)
    inf.run(graft.PyStepIO({"x": x, "label": y}, out))
    assert out["logits"].shape == (N, C)


def test_write_weights_and_reset_host_weights():
    tm = make_torch_mlp()
    model, loss = graft_model(tm)
    init = state_dict_numpy(tm)
    s, _, _ = train_graft(model, loss, graft.ConstSGD(0.1), feeds_for(), 3)
    assert not np.array_equal(read_weights(s, init)["0.weight"], init["0.weight"])
    s.resetHostWeights(model)
    s.weightsFromHost()
    for k, v in read_weights(s, init).items():
        assert np.array_equal(v, init[k]), k
    new = {k: (v * 0.5).astype(np.float32) for k, v in init.items()}
    s.writeWeights(graft.PyWeightsIO(new))
    s.weightsFromHost()
    for k, v in read_weights(s, init).items():
        assert np.array_equal(v, new[k]), k
    # Training goes on from the written weights: one step equals torch's from the same weights.
    with torch.no_grad():
        for name, p in tm.named_parameters():
            p.copy_(torch.from_numpy(new[name]))
    out = _run(s, 0)
    t_losses = train_torch(tm, torch.optim.SGD(tm.parameters(), lr=0.1), 1)
    compare("write_weights_then_sgd", [out[loss]], t_losses, read_weights(s, init), state_dict_numpy(tm), 1e-6)


def test_update_optimizer_from_host_rules():
    model, loss = graft_model(make_torch_mlp())
    s = _session(model, loss, graft.SGD({"defaultLearningRate": (0.1, False), "defaultMomentum": (0.9, True)}))
    s.updateOptimizerFromHost(graft.SGD({"defaultLearningRate": (0.01, False), "defaultMomentum": (0.9, True)}))
    with pytest.raises(graft.Error, match="constant"):
        s.updateOptimizerFromHost(graft.SGD({"defaultLearningRate": (0.01, False), "defaultMomentum": (0.5, True)}))
    with pytest.raises(graft.Error, match="compiled for SGD"):
        s.updateOptimizerFromHost(graft.Adam({"defaultLearningRate": (0.01, False)}))
    with pytest.raises(graft.Error, match="optimizer must be a graft.Optimizer"):
        s.updateOptimizerFromHost({"defaultLearningRate": (0.01, False)})


def test_optimizer_objects():
    v = graft.OptimizerValue(0.5, False)
    assert v.val() == 0.5 and not v.isConst()
    assert graft.OptimizerValue(0.25).isConst()
    assert graft.OptimizerValue((0.1, False)) == graft.OptimizerValue(0.1, False)
    sgd = graft.SGD({"defaultLearningRate": (0.01, False), "defaultMomentum": graft.OptimizerValue(0.9, True),
                     "lossScaling": (4.0, True), "nesterov": (True, True)})
    assert sgd.getLossScalingVal() == 4.0
    assert sgd.momentums().getDefault().val() == pytest.approx(0.9)
    assert sgd.nesterov().getDefault().val() == 1.0
    assert sgd.dampenings().getDefault().val() == 0.0 and sgd.velocityScalings().getDefault().val() == 1.0
    assert sgd.weightDecays().getDefault().isConst()
    assert isinstance(graft.ConstSGD(0.1), graft.SGD)
    c = graft.ConstSGD(0.1, weight_decay=0.01, loss_scaling=2.0,
                       clip_norm_settings=[graft.ClipNormSettings.clipAllWeights(1.0)])
    assert c.learningRates().getDefault().isConst() and c.getLossScalingVal() == 2.0
    assert c.clipNormSettings[0].maxNorm == 1.0 and c.clipNormSettings[0].weightIds == []
    adam = graft.Adam({"defaultBeta1": (0.8, True)}, mode=graft.AdamMode.Lamb,
                      weight_decay_mode=graft.WeightDecayMode.L2Regularization, accl1_type=graft.DataType.FLOAT,
                      scaled_optimizer_state=False)
    assert adam.mode() == graft.AdamMode.Lamb and adam.beta1s().getDefault().val() == pytest.approx(0.8)
    assert adam.learningRates().getDefault().val() == pytest.approx(0.1)  # PopART's default
    ada = graft.Adaptive({"defaultAlpha": (0.9, True)}, mode=graft.AdaptiveMode.AdaGrad, rmsprop_tf_variant=False)
    assert ada.mode() == graft.AdaptiveMode.AdaGrad and ada.alphas().getDefault().val() == pytest.approx(0.9)
    assert set(graft.AdaptiveMode.__members__) == {"AdaGrad", "RMSProp", "CenteredRMSProp", "AdaDelta"}
    assert set(graft.AdamMode.__members__) == {"Adam", "AdamNoBias", "AdaMax", "Lamb", "LambNoBias"}
    cns = graft.ClipNormSettings.clipWeights(["a", "b"], 2.0)
    assert cns.weightIds == ["a", "b"] and cns.maxNorm == 2.0
    cns.maxNorm = 3.0
    assert cns.maxNorm == 3.0


def test_optimizer_errors():
    with pytest.raises(graft.Error, match=r"'defaultLearningRate' must be a \(value, isConst\) tuple"):
        graft.SGD({"defaultLearningRate": 0.1})
    with pytest.raises(graft.Error, match="unknown hyper-parameter 'defaultLearningRat'"):
        graft.SGD({"defaultLearningRat": (0.1, True)})
    with pytest.raises(graft.Error, match="unknown hyper-parameter"):
        graft.Adam({"defaultMomentum": (0.9, True)})
    with pytest.raises(graft.Error, match="insertSpecific"):
        graft.SGD({}).insertSpecific("w", {"beta1": (0.9, True)})
    with pytest.raises(graft.Error, match="maxNorm must be positive"):
        graft.ClipNormSettings.clipAllWeights(0.0)
    with pytest.raises(graft.Error, match="lossScaling must be positive"):
        graft.SGD({"lossScaling": (0.0, True)})


def test_session_errors(tmp_path):
    model, loss = graft_model(make_torch_mlp())
    opt = graft.ConstSGD(0.1)

    def make(**kw):
        args = dict(fnModel=model, dataFlow=graft.DataFlow(1, [loss]), loss=loss, optimizer=opt,
                    deviceInfo=_device())
        args.update(kw)
        s = graft.TrainingSession(**args)
        s.prepareDevice()
        return s

    with pytest.raises(graft.Error, match="the loss 'nope' is not a tensor"):
        make(loss="nope")
    with pytest.raises(graft.Error, match="optimizer must be a graft.Optimizer"):
        make(optimizer="sgd")
    # The gradient of any tensor the loss depends on can be anchored (the input x's too), but not
    # of a name that is no tensor.
    with pytest.raises(graft.Error, match="Gradient___nope.*not a tensor of the model"):
        make(dataFlow=graft.DataFlow(1, [loss, "Gradient___nope"]))
    with pytest.raises(graft.Error, match="ClipNormSettings names 'nope'"):
        make(optimizer=graft.SGD({}, clip_norm_settings=[graft.ClipNormSettings.clipWeights(["nope"], 1.0)]))
    typo = graft.SGD({})
    typo.insertSpecific("0.weigth", {"learningRate": (0.2, True)})
    with pytest.raises(graft.Error, match="insertSpecific names '0.weigth', which is not a trained weight"):
        make(optimizer=typo)
    opts = graft.SessionOptions()
    opts.accumulationFactor = 2
    with pytest.raises(graft.Error, match="enableGradientAccumulation is off"):
        make(userOptions=opts)
    # A loss that is not a scalar.
    b = graft.Builder(model)
    per_sample = b.aiGraphcore.nllloss(["logits", "label"], graft.ReductionType.NoReduction)
    with pytest.raises(graft.Error, match="scalar"):
        make(fnModel=b.getModelProto(), loss=per_sample)
    # Inputs of an accumulating session carry the micro-batch dimension.
    opts.enableGradientAccumulation = True
    s = make(userOptions=opts)
    x, y = batch(0)
    with pytest.raises(graft.Error, match="'x'"):
        s.run(graft.PyStepIO({"x": x, "label": y}, s.initAnchorArrays()))
    # A loss no weight influences trains nothing, as in PopART, and gives its inputs' gradients:
    # d sum|i| / di = sign(i).
    b = graft.Builder()
    i = b.addInputTensor("FLOAT", [3], "i")
    l1 = b.aiGraphcore.l1loss([i], 1.0, graft.ReductionType.Sum)
    s = make(fnModel=b.getModelProto(), loss=l1, dataFlow=graft.DataFlow(1, [l1, "Gradient___i"]))
    out = s.initAnchorArrays()
    s.run(graft.PyStepIO({"i": np.array([-2.0, 0.5, 3.0], np.float32)}, out))
    np.testing.assert_array_equal(out["Gradient___i"], [-1.0, 1.0, 1.0])
