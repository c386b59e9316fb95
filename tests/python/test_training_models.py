"""Models exported from PyTorch with fixed random weights, trained in graft and in PyTorch (in
float64, the answer float32 approaches) on the same batches: a small CNN with BatchNormalization
(trained in training mode, with running statistics), a SqueezeNet fire module, an MLP at batch 1,
LSTM and GRU sequence classifiers (one layer,
and two bidirectional layers), and a transformer encoder layer. For each: SGD with momentum and weight decay, Adam, AdamW, and SGD with
gradient accumulation. The loss of every step, the final weights (and the BatchNorm running
statistics) must match within the stated tolerance; the largest deviations are printed at the end
of the run.
"""
import numpy as np
import onnx
import pytest

import torch  # required (requirements.txt): a missing torch fails these tests, never skips them
F = torch.nn.functional

import graft  # noqa: E402
from training_util import compare, export, log_softmax, read_weights, state_dict_numpy, train_graft  # noqa: E402

STEPS = 5
CLASSES = 3
ATOL = 2e-6
RTOL = 1e-5


# ---- models --------------------------------------------------------------------------------------


def make_cnn():
    torch.manual_seed(11)
    return torch.nn.Sequential(
        torch.nn.Conv2d(1, 4, 3, padding=1), torch.nn.BatchNorm2d(4), torch.nn.ReLU(), torch.nn.MaxPool2d(2),
        torch.nn.Conv2d(4, 6, 3, stride=2, padding=1, bias=False), torch.nn.BatchNorm2d(6), torch.nn.ReLU(),
        torch.nn.AvgPool2d(2), torch.nn.Flatten(), torch.nn.Linear(6, CLASSES))


def make_mlp():
    torch.manual_seed(13)
    return torch.nn.Sequential(torch.nn.Linear(10, 16), torch.nn.ReLU(), torch.nn.Linear(16, CLASSES))


def make_mlp_gelu():
    """GELU (erf form) and a LayerNorm between two Linears, as in a transformer's feed-forward block."""
    torch.manual_seed(14)
    net = torch.nn.Sequential(torch.nn.Linear(10, 16), torch.nn.GELU(), torch.nn.LayerNorm(16),
                              torch.nn.Linear(16, CLASSES))
    with torch.no_grad():  # LayerNorm's ones and zeros would be merged with other constants on export
        for p in net[2].parameters():
            p.add_(0.05 * torch.randn_like(p))
    return net


class FireNet(torch.nn.Module):
    """SqueezeNet's shape in small: a fire module (squeeze, two expand convolutions concatenated
    along channels), a 1x1 convolution as classifier, a global average pool, flattened."""

    def __init__(self):
        super().__init__()
        torch.manual_seed(12)
        self.stem = torch.nn.Conv2d(1, 8, 3, padding=1)
        self.squeeze = torch.nn.Conv2d(8, 4, 1)
        self.expand1 = torch.nn.Conv2d(4, 6, 1)
        self.expand3 = torch.nn.Conv2d(4, 6, 3, padding=1)
        self.head = torch.nn.Conv2d(12, CLASSES, 1)

    def forward(self, x):
        s = F.relu(self.squeeze(F.relu(self.stem(x))))
        h = torch.cat([F.relu(self.expand1(s)), F.relu(self.expand3(s))], 1)
        return torch.flatten(F.adaptive_avg_pool2d(F.relu(self.head(h)), 1), 1)


class SequenceClassifier(torch.nn.Module):
    """An LSTM or GRU over [batch, time, features]; the last step's output goes through a Linear."""

    def __init__(self, cell, **kwargs):
        super().__init__()
        torch.manual_seed(12)
        self.rnn = cell(5, 7, batch_first=True, **kwargs)
        self.fc = torch.nn.Linear(7 * (2 if kwargs.get("bidirectional") else 1), CLASSES)

    def forward(self, x):
        out, _ = self.rnn(x)
        return self.fc(out[:, -1])


class Encoder(torch.nn.Module):
    """torch.nn.TransformerEncoderLayer (2 heads, post-norm, ReLU feed-forward, no dropout) and a
    Linear head on the mean over time."""

    def __init__(self):
        super().__init__()
        torch.manual_seed(13)
        self.enc = torch.nn.TransformerEncoderLayer(d_model=8, nhead=2, dim_feedforward=16, dropout=0.0,
                                                    batch_first=True)
        self.fc = torch.nn.Linear(8, CLASSES)
        # The exporter merges initializers with equal values (LayerNorm's ones and zeros, the
        # attention's zero biases) into one: perturb them so that every parameter stays its own.
        with torch.no_grad():
            for p in self.parameters():
                p.add_(0.05 * torch.randn_like(p))

    def forward(self, x):
        # is_causal passed explicitly: the TorchScript exporter cannot trace its default.
        return self.fc(self.enc(x, src_mask=None, is_causal=False).mean(dim=1))


MODELS = {
    # name: (factory, input shape, export in training mode)
    "cnn_batchnorm": (make_cnn, (4, 1, 8, 8), True),
    "fire": (FireNet, (4, 1, 8, 8), False),
    # Batch 1: each weight gradient is an outer product, formed inside its SGD update on the cpu
    # backend (fuse-sgd-outer).
    "mlp_b1": (make_mlp, (1, 10), False),
    # GELU fused before the backward pass (fuse-gelu), LayerNorm's gradient as one op.
    "mlp_gelu": (make_mlp_gelu, (6, 10), False),
    "lstm": (lambda: SequenceClassifier(torch.nn.LSTM), (3, 4, 5), False),
    "gru": (lambda: SequenceClassifier(torch.nn.GRU), (3, 4, 5), False),
    # Two bidirectional layers: forward and reverse directions, the second layer's input is the
    # first one's output.
    "lstm_bidirectional_2layers": (lambda: SequenceClassifier(torch.nn.LSTM, num_layers=2, bidirectional=True),
                                   (3, 4, 5), False),
    # Batch 8: the cpu training pipeline's lstm-save-gates keeps the gates in the forward pass
    # (LSTMTrain) and the gradient reads them.
    "lstm_bidirectional_2layers_b8": (lambda: SequenceClassifier(torch.nn.LSTM, num_layers=2, bidirectional=True),
                                      (8, 4, 5), False),
    "gru_bidirectional_2layers": (lambda: SequenceClassifier(torch.nn.GRU, num_layers=2, bidirectional=True),
                                  (3, 4, 5), False),
    "transformer_encoder": (Encoder, (2, 5, 8), False),
}

OPTIMIZERS = {
    # name: (graft optimizer, torch optimizer, accumulation factor)
    "sgd": (lambda: graft.SGD({"defaultLearningRate": (0.05, True), "defaultMomentum": (0.9, True),
                               "defaultWeightDecay": (0.01, True)}),
            lambda p: torch.optim.SGD(p, lr=0.05, momentum=0.9, weight_decay=0.01), 1),
    "adam": (lambda: graft.Adam({"defaultLearningRate": (0.01, True), "defaultEps": (1e-8, True),
                                 "defaultWeightDecay": (0.01, True)},
                                weight_decay_mode=graft.WeightDecayMode.L2Regularization),
             lambda p: torch.optim.Adam(p, lr=0.01, eps=1e-8, weight_decay=0.01), 1),
    "adamw": (lambda: graft.Adam({"defaultLearningRate": (0.01, True), "defaultEps": (1e-8, True),
                                  "defaultWeightDecay": (0.01, True)}, weight_decay_mode=graft.WeightDecayMode.Decay),
              lambda p: torch.optim.AdamW(p, lr=0.01, eps=1e-8, weight_decay=0.01), 1),
    "sgd_accumulation2": (lambda: graft.SGD({"defaultLearningRate": (0.05, True), "defaultMomentum": (0.9, True)}),
                          lambda p: torch.optim.SGD(p, lr=0.05, momentum=0.9), 2),
}


# Parameters whose true gradient is zero: the attention's key bias adds the same q.b_k to every
# score of a query's row, which softmax ignores; the bias of a Conv followed by a training-mode
# BatchNorm is removed again with the batch mean (that BatchNorm's running mean tracks the bias, so it
# is left out with it). Both frameworks compute rounding noise (~1e-9) for
# it, and Adam's m / sqrt(v) turns noise of either sign into full-size steps, so these entries are
# left out of the comparison (every other weight is compared). The BatchNorm's running mean
# averages the conv output, bias included, so it inherits those steps (about lr x 0.1 per step
# with AdamW): it is left out too.
ZERO_GRADIENT_ENTRIES = {"transformer_encoder": {"enc.self_attn.in_proj_bias": slice(8, 16)},
                         "cnn_batchnorm": {"0.bias": slice(None), "1.running_mean": slice(None)}}


def drop_zero_gradient_entries(model_name, weights):
    out = dict(weights)
    for name, where in ZERO_GRADIENT_ENTRIES.get(model_name, {}).items():
        kept = np.delete(out[name], np.arange(out[name].size)[where])
        if kept.size:
            out[name] = kept
        else:
            del out[name]
    return out


def batch(step, shape):
    rng = np.random.default_rng(3000 + step)
    return rng.standard_normal(shape).astype(np.float32), rng.integers(0, CLASSES, shape[0]).astype(np.int64)


def graft_model(net, shape, training):
    onnx_model = export(net, [torch.zeros(shape)], ["x"], ["logits"], training=training)
    b = graft.Builder(onnx_model)
    label = b.addInputTensor("INT64", [shape[0]], "label")
    lp = log_softmax(b, "logits", CLASSES, "onnx")
    loss = b.aiGraphcore.nllloss([lp, label], graft.ReductionType.Mean, inputIsLogProbability=True)
    return b.getModelProto(), loss


@pytest.mark.parametrize("opt_name", sorted(OPTIMIZERS))
@pytest.mark.parametrize("model_name", sorted(MODELS))
def test_model_training_matches_torch(model_name, opt_name):
    factory, shape, training = MODELS[model_name]
    graft_opt, torch_opt, accumulation = OPTIMIZERS[opt_name]
    net = factory()
    net.train(training)
    model, loss = graft_model(net, shape, training)
    net.train()  # dropout is 0 and BatchNorm trains: torch trains as the exported graph does
    init = state_dict_numpy(net)

    options = None
    if accumulation > 1:
        options = graft.SessionOptions()
        options.enableGradientAccumulation = True
        options.accumulationFactor = accumulation

    def feeds(step):
        xs, ys = zip(*(batch(step * accumulation + i, shape) for i in range(accumulation)))
        if accumulation == 1:
            return {"x": xs[0], "label": ys[0]}
        return {"x": np.stack(xs), "label": np.stack(ys)}

    session, g_losses, _ = train_graft(model, loss, graft_opt(), feeds, STEPS, options=options)

    # PyTorch in float64: the answer graft's float32 must approach. Against PyTorch's own float32
    # run, an entry whose gradient is small next to its rounding noise can differ by more than the
    # tolerance while both are equally close to the exact value (lstm_bidirectional_2layers with
    # AdamW: rnn.weight_hh_l0_reverse, graft 1.5e-6 from float64, PyTorch float32 3.9e-6).
    net = net.double()
    t_opt = torch_opt(net.parameters())
    t_losses, k = [], 0
    for _ in range(STEPS):
        t_opt.zero_grad()
        for _ in range(accumulation):
            x, y = batch(k, shape)
            k += 1
            lt = F.cross_entropy(net(torch.from_numpy(x).double()), torch.from_numpy(y))
            lt.backward()  # Sum accumulation (PopART's default)
            t_losses.append(lt.item())
        t_opt.step()

    # Weights and BatchNorm running statistics (num_batches_tracked has no ONNX counterpart).
    expected = {k: v.astype(np.float32) for k, v in state_dict_numpy(net).items()
                if not k.endswith("num_batches_tracked")}
    assert max(np.max(np.abs(expected[k] - init[k])) for k in expected) > 1e-3, "the weights hardly moved"
    got = drop_zero_gradient_entries(model_name, read_weights(session, expected))
    compare(f"{model_name}_{opt_name}", g_losses, t_losses, got, drop_zero_gradient_entries(model_name, expected),
            ATOL, RTOL)


@pytest.mark.parametrize("model_name,forward_kernel", [("lstm_bidirectional_2layers", "vec_lstm_small_batch"),
                                                       ("lstm_bidirectional_2layers_b8", "vec_lstm_train")])
def test_lstm_gradient_runs_graft_kernel(model_name, forward_kernel):
    """The LSTM's gradient op gets the forward's Y and runs vec_lstm_grad (not oneDNN's backward); from
    batch 8 the forward is LSTMTrain, which keeps the gates for it."""
    factory, shape, training = MODELS[model_name]
    net = factory()
    model, loss = graft_model(net, shape, training)
    options = graft.SessionOptions()
    options.enableProfiling = True
    graft_opt = OPTIMIZERS["sgd"][0]
    session, _, _ = train_graft(model, loss, graft_opt(), lambda step: dict(zip(("x", "label"), batch(step, shape))),
                                1, options=options)
    kernels = {(p.opType, k) for p in session.profile() for k in p.kernels}
    forward_op = "LSTMTrain" if forward_kernel == "vec_lstm_train" else "LSTM"
    assert {k for op, k in kernels if op == "LSTMGrad"} == {"vec_lstm_grad"}, kernels
    assert {k for op, k in kernels if op in ("LSTM", "LSTMTrain")} == {forward_kernel}, kernels
    assert {op for op, _ in kernels if op in ("LSTM", "LSTMTrain")} == {forward_op}, kernels


def profiled_step(model_name, opt_name="sgd"):
    """One training step of MODELS[model_name] with profiling on: {op type: (calls, kernels)}."""
    factory, shape, training = MODELS[model_name]
    model, loss = graft_model(factory(), shape, training)
    options = graft.SessionOptions()
    options.enableProfiling = True
    session, _, _ = train_graft(model, loss, OPTIMIZERS[opt_name][0](),
                                lambda step: dict(zip(("x", "label"), batch(step, shape))), 1, options=options)
    return {p.opType: (p.calls, list(p.kernels)) for p in session.profile()}


@pytest.mark.parametrize("opt_name", ["sgd", "adam"])
def test_cnn_training_channels_last_matches_torch(monkeypatch, opt_name):
    """Channels last forced (the layout AVX-512 hosts pick; cpu-layout-training): the convolutions,
    batch norms, pools and their gradients run on NHWC arrays, and training still matches PyTorch."""
    monkeypatch.setenv("GRAFT_CPU_LAYOUT", "nhwc")
    test_model_training_matches_torch("cnn_batchnorm", opt_name)
    kernels = {(op, k) for op, (_, ks) in profiled_step("cnn_batchnorm", opt_name).items() for k in ks}
    ops = {op for op, _ in kernels}
    assert "ChannelBlocked(BatchNormalization)" in ops, kernels
    assert "ChannelBlocked(BatchNormalizationGrad)" in ops, kernels
    assert ("ChannelBlocked(BatchNormalizationGrad)", "vec_batchnorm_grad_nhwc") in kernels, kernels
    assert "BatchNormalizationGrad" not in ops, kernels


def test_fire_module_training_stays_channels_last(monkeypatch):
    """Channels last forced: the gradient of the fire module's Concat (a Split along channels) and
    of the global pool (an Expand) stay channels last, so a step converts only its input, and
    training still matches PyTorch."""
    monkeypatch.setenv("GRAFT_CPU_LAYOUT", "nhwc")
    test_model_training_matches_torch("fire", "sgd")
    calls = {op: n for op, (n, _) in profiled_step("fire").items()}
    assert calls.get("ToBlocked") == 1, calls
    assert calls.get("Split") == 1 and calls.get("Expand") == 1, calls


def test_gelu_is_fused_before_the_backward_pass():
    """The exported x/2 (1 + erf(x / sqrt 2)) becomes one GeluErf before autodiff, so the backward
    pass reads x alone (no saved erf terms); training matches PyTorch
    (test_model_training_matches_torch[mlp_gelu-*]). The reference device shows the ops as they are."""
    factory, shape, _ = MODELS["mlp_gelu"]
    model, loss = graft_model(factory(), shape, False)
    options = graft.SessionOptions()
    options.enableProfiling = True
    session, _, _ = train_graft(model, loss, OPTIMIZERS["sgd"][0](),
                                lambda step: dict(zip(("x", "label"), batch(step, shape))), 1, options=options,
                                device=graft.DeviceManager().createReferenceDevice())
    calls = {p.opType: p.calls for p in session.profile()}
    assert calls.get("GeluErf") == 1, calls
    assert calls.get("GeluErfGrad") == 1, calls  # Phi(x) + x phi(x) from x and GeluErf(x)
    assert "Erf" not in calls and "Div" not in calls, calls
    # An anchored intermediate (the Erf's output) keeps the spelled-out pattern, with the same losses.
    erf = next(n.output[0] for n in onnx.load_from_string(model).graph.node if n.op_type == "Erf")
    feeds = lambda step: dict(zip(("x", "label"), batch(step, shape)))  # noqa: E731
    fused, fused_losses, _ = train_graft(model, loss, OPTIMIZERS["sgd"][0](), feeds, 2, options=options)
    kept, kept_losses, extras = train_graft(model, loss, OPTIMIZERS["sgd"][0](), feeds, 2, options=options,
                                           extra_anchors=(erf,), device=graft.DeviceManager().createReferenceDevice())
    calls = {p.opType: p.calls for p in kept.profile()}
    assert "GeluErf" not in calls and "Div" in calls, calls  # x / sqrt 2 and its gradient
    np.testing.assert_allclose(kept_losses, fused_losses, rtol=1e-6)
    assert extras[erf][0].shape == (shape[0], 16) and np.all(np.abs(extras[erf][0]) < 1)


def test_layernorm_gradient_is_one_kernel():
    """The encoder's two LayerNorms (Scale and B of the normalised shape) get their gradient from
    one ai.graft LayerNormalizationGrad each, on the cpu's vectorised kernel, instead of a chain
    of elementwise ops and reductions; training still matches PyTorch
    (test_model_training_matches_torch[transformer_encoder-*])."""
    calls = profiled_step("transformer_encoder")
    assert calls.get("LayerNormalizationGrad") == (2, ["vec_layernorm_grad"]), calls


def test_batch1_weight_gradients_are_formed_by_the_sgd_update():
    """At batch 1 a Linear's weight gradient dY^T x is an outer product: the cpu backend's
    SGDOuterUpdate forms it as it updates the weight (never stored); SGD with momentum and weight
    decay still matches PyTorch (test_model_training_matches_torch[mlp_b1-sgd]); the bias
    gradients keep SGDUpdate."""
    calls = profiled_step("mlp_b1")
    assert calls.get("SGDOuterUpdate") == (2, ["vec_sgd_outer"]), calls
    assert calls.get("SGDUpdate", (0, None))[0] == 2, calls
