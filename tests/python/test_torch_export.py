"""Today's PyTorch export path, end to end: models written by ``torch.onnx.export(model, args, f)``
with its default settings (the torch.export-based exporter, through onnxscript: IR version 10,
opset 20, weights as external data, constant-folded and optimised) load, run and train in graft.

Inference is compared with the torch model. Training: three SGD steps of an MSE loss in graft's
TrainingSession and in torch on the same batches; the losses of every step, and the trained
weights, must agree. The exporter does not write torch's parameters one to one (it folds
BatchNorm into the Conv before it, transposes Linear weights, reorders and concatenates the LSTM
and GRU gates), so the weights are compared as the exporter writes them: the torch model after
its three steps is exported again, and its initializers are compared by name with graft's
trained ones (SGD commutes with those re-layouts). Initializers the torch steps leave unchanged
(shape constants, masks, the zero initial states of the LSTM/GRU) are not parameters of the torch
model: graft, like PopART, trains every floating-point initializer, so the test makes them
Constant nodes first.
"""
import contextlib
import io
import os
import subprocess
import warnings

import numpy as np
import onnx
import pytest
import torch  # required (requirements.txt): a missing torch fails these tests, never skips them
from onnx import helper, numpy_helper

import graft

F = torch.nn.functional
ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
GRAFT = os.environ.get("GRAFT_CLI", os.path.join(ROOT, "build", "tools", "graft"))
STEPS = 3
LR = 0.05


def export(model, args, path, **kwargs):
    """torch.onnx.export with its defaults (``dynamo=True``); the exporter's progress lines and
    warnings are kept out of the test output."""
    model.eval()
    with warnings.catch_warnings(), contextlib.redirect_stdout(io.StringIO()):
        warnings.simplefilter("ignore")
        torch.onnx.export(model, tuple(args), str(path), **kwargs)
    return str(path)


def initializers(model_proto):
    return {t.name: numpy_helper.to_array(t) for t in model_proto.graph.initializer}


# ---- models ----------------------------------------------------------------------------------------


class CNN(torch.nn.Module):
    """Conv, BatchNorm, ReLU, MaxPool, adaptive average pooling, Linear."""

    def __init__(self, batchnorm=True):
        super().__init__()
        torch.manual_seed(21)
        self.conv = torch.nn.Conv2d(3, 6, 3, padding=1)
        self.bn = torch.nn.BatchNorm2d(6) if batchnorm else torch.nn.Identity()
        self.pool = torch.nn.MaxPool2d(2)
        self.fc = torch.nn.Linear(6 * 2 * 2, 4)
        if batchnorm:
            with torch.no_grad():  # statistics of a trained model, so that the fold is not trivial
                self.bn.running_mean.uniform_(-0.5, 0.5)
                self.bn.running_var.uniform_(0.5, 2.0)
                self.bn.weight.uniform_(0.5, 1.5)
                self.bn.bias.uniform_(-0.5, 0.5)

    def forward(self, x):
        x = self.pool(F.relu(self.bn(self.conv(x))))
        return self.fc(F.adaptive_avg_pool2d(x, (2, 2)).flatten(1))


def folded_cnn(cnn):
    """The CNN as the default (eval-mode) export writes it: BatchNorm folded into the Conv."""
    out = CNN(batchnorm=False)
    cnn.eval()
    out.conv = torch.nn.utils.fusion.fuse_conv_bn_eval(cnn.conv, cnn.bn)
    out.fc.load_state_dict(cnn.fc.state_dict())
    return out


class Attention(torch.nn.Module):
    """A pre-norm causal self-attention block through F.scaled_dot_product_attention, and a GELU
    feed-forward."""

    def __init__(self, dim=16, heads=2):
        super().__init__()
        torch.manual_seed(22)
        self.heads = heads
        self.norm1 = torch.nn.LayerNorm(dim)
        self.qkv = torch.nn.Linear(dim, 3 * dim)
        self.proj = torch.nn.Linear(dim, dim)
        self.norm2 = torch.nn.LayerNorm(dim)
        self.ff1 = torch.nn.Linear(dim, 2 * dim)
        self.ff2 = torch.nn.Linear(2 * dim, dim)
        perturb(self)

    def forward(self, x):
        b, t, c = x.shape
        q, k, v = self.qkv(self.norm1(x)).split(c, dim=-1)
        q, k, v = (z.reshape(b, t, self.heads, c // self.heads).transpose(1, 2) for z in (q, k, v))
        y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        x = x + self.proj(y.transpose(1, 2).reshape(b, t, c))
        return x + self.ff2(F.gelu(self.ff1(self.norm2(x))))


def perturb(module):
    # The exporter merges initializers of equal values (LayerNorm's ones and zeros, zero biases)
    # into one; perturbed, every parameter stays its own.
    with torch.no_grad():
        for p in module.parameters():
            p.add_(0.05 * torch.randn_like(p))


class Encoder(torch.nn.Module):
    """torch.nn.TransformerEncoderLayer (2 heads, post-norm, no dropout) and a Linear head."""

    def __init__(self):
        super().__init__()
        torch.manual_seed(23)
        self.enc = torch.nn.TransformerEncoderLayer(16, 2, 32, dropout=0.0, batch_first=True)
        self.fc = torch.nn.Linear(16, 3)
        perturb(self)

    def forward(self, x):
        return self.fc(self.enc(x))


class Recurrent(torch.nn.Module):
    """An LSTM or GRU over [batch, time, features]; every step's output goes through a Linear."""

    def __init__(self, cell):
        super().__init__()
        torch.manual_seed(24)
        self.rnn = cell(4, 6, batch_first=True)
        self.fc = torch.nn.Linear(6, 3)

    def forward(self, x):
        out, _ = self.rnn(x)
        return self.fc(out)


MODELS = {
    # name: (factory, input shape)
    "cnn": (CNN, (2, 3, 8, 8)),
    "sdpa_block": (Attention, (2, 5, 16)),
    "transformer_encoder_layer": (Encoder, (2, 5, 16)),
    "lstm": (lambda: Recurrent(torch.nn.LSTM), (2, 5, 4)),
    "gru": (lambda: Recurrent(torch.nn.GRU), (2, 5, 4)),
}


def data(shape, seed):
    return np.random.default_rng(seed).standard_normal(shape).astype(np.float32)


def run_inference(path, inputs, outputs, shapes=None):
    session = graft.InferenceSession(path, graft.DataFlow(1, outputs), graft.DeviceManager().createCpuDevice(),
                                     inputShapeInfo=shapes)
    session.prepareDevice()
    anchors = session.initAnchorArrays()
    session.run(graft.PyStepIO(inputs, anchors))
    return anchors


# ---- inference -------------------------------------------------------------------------------------


@pytest.mark.parametrize("name", list(MODELS))
def test_default_export_runs_and_matches_torch(name, tmp_path):
    factory, shape = MODELS[name]
    model = factory()
    x = data(shape, 1)
    path = export(model, [torch.from_numpy(x)], tmp_path / f"{name}.onnx")
    proto = onnx.load(path, load_external_data=False)
    # What the default exporter writes today, which graft's import has to take.
    assert proto.ir_version >= 10
    assert max(o.version for o in proto.opset_import if o.domain in ("", "ai.onnx")) >= 18
    assert os.path.exists(path + ".data"), "the default export writes the weights as external data"
    inp = proto.graph.input[0].name
    outs = [o.name for o in proto.graph.output]
    got = run_inference(path, {inp: x}, outs)
    with torch.no_grad():
        want = model(torch.from_numpy(x))
    want = want if isinstance(want, tuple) else (want,)
    for o, w in zip(outs, want):
        np.testing.assert_allclose(got[o], w.numpy(), rtol=1e-4, atol=2e-5, err_msg=f"{name}: output {o}")


def test_lstm_and_gru_return_their_states(tmp_path):
    for cell in (torch.nn.LSTM, torch.nn.GRU):
        torch.manual_seed(5)
        rnn = cell(4, 6, num_layers=2, batch_first=True)
        x = data((3, 7, 4), 2)
        path = export(rnn, [torch.from_numpy(x)], tmp_path / f"{cell.__name__}.onnx")
        proto = onnx.load(path, load_external_data=False)
        outs = [o.name for o in proto.graph.output]
        got = run_inference(path, {proto.graph.input[0].name: x}, outs)
        with torch.no_grad():
            out, state = rnn(torch.from_numpy(x))
        want = [out] + (list(state) if isinstance(state, tuple) else [state])
        assert len(outs) == len(want)
        for o, w in zip(outs, want):
            np.testing.assert_allclose(got[o], w.numpy(), rtol=1e-4, atol=2e-5, err_msg=f"{cell.__name__}: {o}")


def test_symbolic_batch_dimension(tmp_path):
    model = CNN()
    batch = torch.export.Dim("batch", min=1, max=64)
    path = export(model, [torch.zeros(2, 3, 8, 8)], tmp_path / "dynamic.onnx", dynamic_shapes=({0: batch},))
    proto = onnx.load(path, load_external_data=False)
    dim0 = proto.graph.input[0].type.tensor_type.shape.dim[0]
    assert dim0.dim_param and not dim0.HasField("dim_value"), dim0
    inp, out = proto.graph.input[0].name, proto.graph.output[0].name
    session = graft.InferenceSession(path, graft.DataFlow(1, [out]), graft.DeviceManager().createCpuDevice())
    session.prepareDevice()
    assert not session.anchorIsFixed(out)
    for n in (1, 2, 5):
        anchors = session.initAnchorArrays()
        assert anchors[out] is None, "the output's batch size is only known once a run has one"
        x = data((n, 3, 8, 8), 10 + n)
        session.run(graft.PyStepIO({inp: x}, anchors))
        with torch.no_grad():
            want = model(torch.from_numpy(x)).numpy()
        assert anchors[out].shape == want.shape
        np.testing.assert_allclose(anchors[out], want, rtol=1e-4, atol=2e-5)
    # With InputShapeInfo the anchors are PopART's fixed arrays again.
    shapes = graft.InputShapeInfo()
    shapes.add(inp, graft.TensorInfo("FLOAT", [3, 3, 8, 8]))
    x = data((3, 3, 8, 8), 3)
    got = run_inference(path, {inp: x}, [out], shapes=shapes)
    with torch.no_grad():
        np.testing.assert_allclose(got[out], model(torch.from_numpy(x)).numpy(), rtol=1e-4, atol=2e-5)


def test_inspect_shows_ir_version_and_opsets(tmp_path):
    path = export(CNN(), [torch.zeros(2, 3, 8, 8)], tmp_path / "cnn.onnx")
    proto = onnx.load(path, load_external_data=False)
    opset = max(o.version for o in proto.opset_import if o.domain in ("", "ai.onnx"))
    out = subprocess.run([GRAFT, "inspect", path], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    assert f"ONNX IR version {proto.ir_version}" in out.stdout, out.stdout
    assert f"ai.onnx 28 (converted from {opset})" in out.stdout, out.stdout
    assert "unsupported none" in out.stdout, out.stdout


# ---- training --------------------------------------------------------------------------------------


def freeze(proto, names):
    """The initializers `names` as Constant nodes (graft trains every float initializer)."""
    keep, consts = [], []
    for t in proto.graph.initializer:
        if t.name in names:
            consts.append(helper.make_node("Constant", [], [t.name], value=t, name=f"frozen_{t.name}"))
        else:
            keep.append(t)
    del proto.graph.initializer[:]
    proto.graph.initializer.extend(keep)
    nodes = consts + list(proto.graph.node)
    del proto.graph.node[:]
    proto.graph.node.extend(nodes)
    return proto


def train_and_compare(name, model, shape, tmp_path, batch_dim=None):
    xs = [data(shape, 100 + s) for s in range(STEPS)]
    kwargs = {"dynamic_shapes": ({0: batch_dim},)} if batch_dim is not None else {}
    before = onnx.load(export(model, [torch.from_numpy(xs[0])], tmp_path / f"{name}.onnx", **kwargs))
    with torch.no_grad():
        out_shape = model(torch.from_numpy(xs[0])).shape
    targets = [data(tuple(out_shape), 200 + s) for s in range(STEPS)]

    # torch: plain SGD on the MSE loss.
    model.train()
    opt = torch.optim.SGD(model.parameters(), lr=LR)
    torch_losses = []
    for x, t in zip(xs, targets):
        opt.zero_grad()
        loss = F.mse_loss(model(torch.from_numpy(x)), torch.from_numpy(t))
        loss.backward()
        opt.step()
        torch_losses.append(loss.item())
    after = initializers(onnx.load(export(model, [torch.from_numpy(xs[0])], tmp_path / f"{name}_trained.onnx",
                                          **kwargs)))
    init0 = initializers(before)
    assert set(init0) == set(after), f"{name}: the re-export names its initializers differently"
    trained = {k for k, v in init0.items() if v.dtype.kind == "f" and not np.array_equal(v, after[k])}
    assert trained, f"{name}: torch trained nothing"
    frozen = {k for k, v in init0.items() if v.dtype.kind == "f"} - trained

    # graft: the exported model with an MSE loss against a target input.
    b = graft.Builder(freeze(before, frozen).SerializeToString())
    inp, out = before.graph.input[0].name, before.graph.output[0].name
    # The target has the output's declared dimensions (symbolic ones by name).
    dims = [d.dim_param or d.dim_value for d in before.graph.output[0].type.tensor_type.shape.dim]
    target = b.addInputTensor(graft.TensorInfo("FLOAT", dims), "target")
    loss = b.aiGraft.mseloss([out, target])
    session = graft.TrainingSession(b.getModelProto(), graft.DataFlow(1, [loss]), loss, graft.SGD({
        "defaultLearningRate": (LR, True)}), graft.DeviceManager().createCpuDevice())
    assert set(session.trainedWeightIds()) == trained, f"{name}: graft trains {sorted(session.trainedWeightIds())}"
    session.prepareDevice()
    graft_losses = []
    for x, t in zip(xs, targets):
        anchors = session.initAnchorArrays()
        session.run(graft.PyStepIO({inp: x, target: t}, anchors))
        graft_losses.append(float(np.asarray(anchors[loss])))
    weights = {k: np.zeros_like(init0[k]) for k in trained}
    session.weightsToHost()
    session.readWeights(graft.PyWeightsIO(weights))
    np.testing.assert_allclose(graft_losses, torch_losses, rtol=1e-4, atol=1e-6, err_msg=f"{name}: losses")
    for k in trained:
        np.testing.assert_allclose(weights[k], after[k], rtol=1e-4, atol=1e-5, err_msg=f"{name}: weight {k}")


@pytest.mark.parametrize("name", list(MODELS))
def test_default_export_trains_like_torch(name, tmp_path):
    factory, shape = MODELS[name]
    model = factory()
    if name == "cnn":
        # The default export is of the eval-mode model, BatchNorm folded into the Conv: graft
        # trains that model, so torch trains the folded one too.
        model = folded_cnn(model)
    train_and_compare(name, model, shape, tmp_path)


def test_symbolic_batch_trains_like_torch(tmp_path):
    train_and_compare("dynamic_cnn", folded_cnn(CNN()), (4, 3, 8, 8), tmp_path,
                      batch_dim=torch.export.Dim("batch", min=1, max=64))
