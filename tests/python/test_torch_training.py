"""graft.torch (PopTorch's API): models trained with trainingModel match plain PyTorch training
with the same optimizer, step by step, and an inferenceModel of the trained module matches torch.

Dropout: graft draws its masks from its own generator (randomSeed___), not torch's, so masks cannot
match torch's. The CNN therefore trains with its Dropout at p=0 for the comparison (the exported
graph still holds the Dropout op), and test_dropout_drops checks separately that p=0.5 drops about
half the activations in training, none in inference, and repeats with the same randomSeed.
"""
import copy

import numpy as np
import pytest

torch = pytest.importorskip("torch")
F = torch.nn.functional

import graft  # noqa: E402
import graft.torch as poptorch  # noqa: E402

ATOL = 1e-5
RTOL = 1e-4
STEPS = 4


class WithLoss(torch.nn.Module):
    """A network and its cross-entropy loss, returned as PopTorch models do: (output, loss)."""

    def __init__(self, net):
        super().__init__()
        self.net = net

    def forward(self, x, y):
        out = self.net(x)
        return out, F.cross_entropy(out, y)


def mlp():
    torch.manual_seed(0)
    return torch.nn.Sequential(torch.nn.Linear(10, 16), torch.nn.Tanh(), torch.nn.Linear(16, 16), torch.nn.ReLU(),
                               torch.nn.Linear(16, 4))


def cnn(p=0.0):
    torch.manual_seed(1)
    return torch.nn.Sequential(
        # No conv bias before a BatchNorm: its true gradient is zero (the batch mean removes it), and
        # Adam or RMSprop turn the rounding noise both frameworks compute for it into full steps.
        torch.nn.Conv2d(1, 4, 3, padding=1, bias=False), torch.nn.BatchNorm2d(4), torch.nn.ReLU(),
        torch.nn.MaxPool2d(2), torch.nn.Dropout(p), torch.nn.Conv2d(4, 6, 3, padding=1, bias=False),
        torch.nn.BatchNorm2d(6), torch.nn.ReLU(),
        torch.nn.AdaptiveAvgPool2d(1), torch.nn.Flatten(), torch.nn.Linear(6, 4))


class Encoder(torch.nn.Module):
    def __init__(self):
        super().__init__()
        torch.manual_seed(2)
        self.enc = torch.nn.TransformerEncoderLayer(d_model=8, nhead=2, dim_feedforward=16, dropout=0.0,
                                                    batch_first=True)
        self.fc = torch.nn.Linear(8, 4)

    def forward(self, x):
        return self.fc(self.enc(x, src_mask=None, is_causal=False).mean(dim=1))


class Lstm(torch.nn.Module):
    def __init__(self):
        super().__init__()
        torch.manual_seed(3)
        self.rnn = torch.nn.LSTM(5, 7, batch_first=True)
        self.fc = torch.nn.Linear(7, 4)

    def forward(self, x):
        out, _ = self.rnn(x)
        return self.fc(out[:, -1])


# mlp_b1: batch 1, where the cpu backend forms each weight gradient (an outer product) inside its
# SGD update (fuse-sgd-outer, SGDOuterUpdate).
MODELS = {"mlp": (mlp, (6, 10)), "mlp_b1": (mlp, (1, 10)), "cnn_batchnorm_dropout": (cnn, (4, 1, 8, 8)),
          "transformer_encoder": (Encoder, (3, 5, 8)), "lstm": (Lstm, (3, 4, 5))}

OPTIMIZERS = {
    "sgd": lambda p: torch.optim.SGD(p, lr=0.05, momentum=0.9, weight_decay=0.01),
    "adam": lambda p: poptorch.optim.Adam(p, lr=0.01, weight_decay=0.01),
    "adamw": lambda p: poptorch.optim.AdamW(p, lr=0.01, weight_decay=0.01),
    "rmsprop": lambda p: poptorch.optim.RMSprop(p, lr=0.01, momentum=0.5),
}


def batches(shape, n, seed=0):
    g = torch.Generator().manual_seed(seed)
    return [(torch.randn(shape, generator=g), torch.randint(0, 4, (shape[0],), generator=g)) for _ in range(n)]


def train_torch(model, opt, data):
    losses = []
    for x, y in data:
        opt.zero_grad()
        _, loss = model(x, y)
        loss.backward()
        opt.step()
        losses.append(loss.item())
    return losses


# The attention's key bias adds the same q.b_k to every score of a query's row, which softmax
# ignores: its true gradient is zero, both frameworks compute rounding noise for it, and Adam's
# m / sqrt(v) turns noise of either sign into full-size steps. Those entries are left out of the
# weight comparison (every other weight, and every loss, is compared).
ZERO_GRADIENT = {"net.enc.self_attn.in_proj_bias": slice(8, 16)}


def assert_state_close(got, expected, what):
    for k, v in expected.state_dict().items():
        g = got.state_dict()[k]
        if k.endswith("num_batches_tracked"):
            assert int(g) == int(v), f"{what}: {k}"
            continue
        g, v = g.numpy(), v.numpy()
        if k in ZERO_GRADIENT:
            keep = np.ones(v.shape, bool)
            keep[ZERO_GRADIENT[k]] = False
            g, v = g[keep], v[keep]
        np.testing.assert_allclose(g, v, atol=ATOL, rtol=RTOL, err_msg=f"{what}: {k}")


@pytest.mark.parametrize("opt_name", sorted(OPTIMIZERS))
@pytest.mark.parametrize("model_name", sorted(MODELS))
def test_training_matches_torch(model_name, opt_name):
    factory, shape = MODELS[model_name]
    ours = WithLoss(factory())
    ref = copy.deepcopy(ours)
    init = copy.deepcopy(ours.state_dict())
    data = batches(shape, STEPS)
    model = poptorch.trainingModel(ours, optimizer=OPTIMIZERS[opt_name](ours.parameters()))
    losses = [float(model(x, y)[1]) for x, y in data]
    expected = train_torch(ref, OPTIMIZERS[opt_name](ref.parameters()), data)
    np.testing.assert_allclose(losses, expected, atol=ATOL, rtol=RTOL)
    moved = max(float((ours.state_dict()[k] - v).abs().max()) for k, v in init.items() if v.is_floating_point())
    assert moved > 1e-3, "the weights hardly moved"
    assert_state_close(ours, ref, f"{model_name}/{opt_name}")

    # An inferenceModel of the trained module sees the trained weights.
    ours.eval()
    ref.eval()
    x, y = batches(shape, 1, seed=9)[0]
    out, loss = poptorch.inferenceModel(ours)(x, y)
    with torch.no_grad():
        t_out, t_loss = ref(x, y)
    np.testing.assert_allclose(out.numpy(), t_out.numpy(), atol=ATOL, rtol=RTOL)
    np.testing.assert_allclose(float(loss), float(t_loss), atol=ATOL, rtol=RTOL)


def test_identity_loss_and_lazy_weights():
    class Net(torch.nn.Module):
        def __init__(self):
            super().__init__()
            torch.manual_seed(4)
            self.lin = torch.nn.Linear(3, 2)

        def forward(self, x):
            y = self.lin(x)
            return y, poptorch.identity_loss((y ** 2), reduction="sum")

    ours = Net()
    ref = copy.deepcopy(ours)
    model = poptorch.trainingModel(ours, optimizer=poptorch.optim.SGD(ours.parameters(), lr=0.1))
    topt = torch.optim.SGD(ref.parameters(), lr=0.1)
    x = torch.randn(4, 3)
    before = ours.lin.weight.detach().clone()
    for _ in range(3):
        _, loss = model(x)
        topt.zero_grad()
        t_loss = (ref.lin(x) ** 2).sum()
        t_loss.backward()
        topt.step()
        np.testing.assert_allclose(float(loss), float(t_loss), rtol=RTOL, atol=ATOL)
    # Weights are copied to the host when read, not before.
    assert model._stale  # noqa: SLF001
    np.testing.assert_allclose(ours.lin.weight.detach().numpy(), ref.lin.weight.detach().numpy(), atol=ATOL)
    assert not model._stale  # noqa: SLF001
    assert not torch.allclose(before, ours.lin.weight)
    # A weight written on the host reaches the device at the next call.
    with torch.no_grad():
        ours.lin.weight.fill_(0.5)
        ref.lin.weight.fill_(0.5)
    _, loss = model(x)
    np.testing.assert_allclose(float(loss), float((ref.lin(x) ** 2).sum()), rtol=RTOL, atol=ATOL)
    model.destroy()
    assert type(ours) is Net  # the lazy wrapper class is gone


def test_device_iterations_and_accumulation_match_plain_run():
    data = batches((6, 10), 8, seed=5)
    ref = WithLoss(mlp())
    ours_di, ours_acc = copy.deepcopy(ref), copy.deepcopy(ref)
    expected = train_torch(ref, torch.optim.SGD(ref.parameters(), lr=0.05, momentum=0.9), data)

    opts = poptorch.Options().deviceIterations(2).outputMode(poptorch.OutputMode.All)
    model = poptorch.trainingModel(ours_di, opts, torch.optim.SGD(ours_di.parameters(), lr=0.05, momentum=0.9))
    losses = []
    for i in range(0, 8, 2):
        x = torch.cat([data[i][0], data[i + 1][0]])
        y = torch.cat([data[i][1], data[i + 1][1]])
        out, loss = model(x, y)
        assert out.shape == (12, 4) and loss.shape == (2,)
        losses.extend(loss.tolist())
    np.testing.assert_allclose(losses, expected, atol=ATOL, rtol=RTOL)
    assert_state_close(ours_di, ref, "deviceIterations")

    # Gradient accumulation over 2 micro-batches (Mean, PopTorch's default) equals plain training
    # on the 12-row batch the two make up.
    ref2 = copy.deepcopy(ours_acc)
    opts = poptorch.Options().Training.gradientAccumulation(2)
    model = poptorch.trainingModel(ours_acc, opts, torch.optim.SGD(ours_acc.parameters(), lr=0.05))
    topt = torch.optim.SGD(ref2.parameters(), lr=0.05)
    for i in range(0, 8, 2):
        x = torch.cat([data[i][0], data[i + 1][0]])
        y = torch.cat([data[i][1], data[i + 1][1]])
        _, loss = model(x, y)
        with torch.no_grad():
            last = float(ref2(data[i + 1][0], data[i + 1][1])[1])
        topt.zero_grad()
        ref2(x, y)[1].backward()
        topt.step()
        # OutputMode.Final (training's default): the loss of the last micro-batch.
        np.testing.assert_allclose(float(loss), last, atol=ATOL, rtol=RTOL)
    assert_state_close(ours_acc, ref2, "gradientAccumulation")


def test_two_stage_pipeline_matches_plain_run():
    data = batches((6, 10), 6, seed=6)
    plain = WithLoss(mlp())
    piped = copy.deepcopy(plain)
    piped.net[2] = poptorch.BeginBlock(piped.net[2], "second", ipu_id=1)

    results = []
    for net in (plain, piped):
        # Two stages train as three (two forward, one backward): PopTorch asks for an accumulation
        # of at least 3.
        opts = poptorch.Options().Training.gradientAccumulation(3)
        opts.setExecutionStrategy(poptorch.PipelinedExecution(poptorch.AutoStage.SameAsIpu))
        model = poptorch.trainingModel(net, opts, torch.optim.SGD(net.parameters(), lr=0.05, momentum=0.9))
        losses = [float(model(torch.cat([d[0] for d in data[i:i + 3]]), torch.cat([d[1] for d in data[i:i + 3]]))[1])
                  for i in range(0, 6, 3)]
        results.append(losses)
        if net is piped:
            compiled = model._current  # noqa: SLF001
            assert compiled.n_ipus == 2
            assert compiled.session.stagesText()  # the session was split into programs
    np.testing.assert_allclose(results[1], results[0], atol=ATOL, rtol=RTOL)
    assert_state_close(piped, plain, "pipelined")


def test_pipelined_cnn_channels_last_matches_plain_layout(monkeypatch):
    """A batch-norm CNN split into two pipeline stages with channels-last training graphs
    (cpu-layout-training, forced) trains as the unsplit CNN with plain layouts."""
    data = batches((6, 1, 8, 8), 6, seed=7)
    plain = WithLoss(cnn())
    piped = copy.deepcopy(plain)
    piped.net[5] = poptorch.BeginBlock(piped.net[5], "second", ipu_id=1)
    results = []
    for net, layout in ((plain, "plain"), (piped, "nhwc")):
        monkeypatch.setenv("GRAFT_CPU_LAYOUT", layout)
        opts = poptorch.Options().Training.gradientAccumulation(3)
        if net is piped:
            opts.setExecutionStrategy(poptorch.PipelinedExecution(poptorch.AutoStage.SameAsIpu))
        model = poptorch.trainingModel(net, opts, torch.optim.SGD(net.parameters(), lr=0.05, momentum=0.9))
        losses = [float(model(torch.cat([d[0] for d in data[i:i + 3]]), torch.cat([d[1] for d in data[i:i + 3]]))[1])
                  for i in range(0, 6, 3)]
        results.append(losses)
    np.testing.assert_allclose(results[1], results[0], atol=ATOL, rtol=RTOL)
    assert_state_close(piped, plain, "pipelined, channels last")


def test_pipeline_needs_popTorchs_accumulation_and_iterations():
    """PopTorch's rule for PipelinedExecution: training with N stages runs 2N - 1 (the backward
    stages added), and needs gradientAccumulation >= 2N - 1; inference needs deviceIterations >= N."""
    net = WithLoss(mlp())
    net.net[2] = poptorch.BeginBlock(net.net[2], "second", ipu_id=1)
    x, y = batches((6, 10), 1, seed=2)[0]
    opts = poptorch.Options().Training.gradientAccumulation(2)
    model = poptorch.trainingModel(net, opts, torch.optim.SGD(net.parameters(), lr=0.05))
    with pytest.raises(poptorch.Error, match=r"gradientAccumulation must be greater than or equal to the number of "
                       r"pipeline stages \(3\).*a model with 2 pipeline stages in PopTorch will have an additional 1"):
        model(torch.cat([x, x]), torch.cat([y, y]))
    model.destroy()
    inference = poptorch.inferenceModel(net.net, poptorch.Options().deviceIterations(1))
    with pytest.raises(poptorch.Error, match=r"deviceIterations must be greater than or equal to the number of "
                       r"pipeline stages \(2\)"):
        inference(x)
    sharded = poptorch.Options().deviceIterations(1)
    sharded.setExecutionStrategy(poptorch.ShardedExecution())
    torch.testing.assert_close(poptorch.inferenceModel(net.net, sharded)(x), net.net(x))


def test_dropout_drops():
    class Net(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.lin = torch.nn.Linear(200, 200)
            self.drop = torch.nn.Dropout(0.5)

        def forward(self, x):
            y = self.drop(self.lin(x))
            return y, poptorch.identity_loss(y.sum() * 0.0, "sum")

    base = Net()
    x = torch.randn(4, 200)
    outs = []
    for _ in range(2):
        m = copy.deepcopy(base)
        model = poptorch.trainingModel(m, poptorch.Options().randomSeed(42),
                                       torch.optim.SGD(m.parameters(), lr=0.0))
        outs.append(model(x)[0])
    zeros = float((outs[0] == 0).float().mean())
    assert 0.4 < zeros < 0.6
    np.testing.assert_array_equal(outs[0].numpy(), outs[1].numpy())  # same seed, same mask
    base.eval()
    inf = poptorch.inferenceModel(base)(x)[0]
    with torch.no_grad():
        np.testing.assert_allclose(inf.numpy(), base.lin(x).numpy(), atol=ATOL)


def test_recapture_on_new_shape_and_eval():
    net = mlp()
    model = poptorch.inferenceModel(net)
    a = model(torch.randn(3, 10))
    b = model(torch.randn(5, 10))
    assert a.shape == (3, 4) and b.shape == (5, 4)
    assert len(model._compiled) == 2  # noqa: SLF001
    x = torch.randn(5, 10)
    with torch.no_grad():
        np.testing.assert_allclose(model(x).numpy(), net(x).numpy(), atol=ATOL)
    assert len(model._compiled) == 2  # noqa: SLF001  (cached)


def test_set_optimizer_changes_learning_rate():
    data = batches((6, 10), 4, seed=7)
    ours = WithLoss(mlp())
    ref = copy.deepcopy(ours)
    opt = poptorch.optim.SGD(ours.parameters(), lr=0.05, momentum=0.9)
    model = poptorch.trainingModel(ours, optimizer=opt)
    topt = torch.optim.SGD(ref.parameters(), lr=0.05, momentum=0.9)
    for i, (x, y) in enumerate(data):
        if i == 2:
            model.setOptimizer(poptorch.optim.SGD(ours.parameters(), lr=0.01, momentum=0.9))
            for g in topt.param_groups:
                g["lr"] = 0.01
        model(x, y)
        topt.zero_grad()
        ref(x, y)[1].backward()
        topt.step()
    assert_state_close(ours, ref, "setOptimizer")


def test_parameter_groups():
    data = batches((6, 10), 3, seed=8)
    ours = WithLoss(mlp())
    ref = copy.deepcopy(ours)

    def groups(m):
        return [{"params": m.net[0].parameters(), "lr": 0.1}, {"params": m.net[2].parameters()},
                {"params": m.net[4].parameters(), "lr": 0.0}]

    model = poptorch.trainingModel(ours, optimizer=torch.optim.SGD(groups(ours), lr=0.02))
    topt = torch.optim.SGD(groups(ref), lr=0.02)
    for x, y in data:
        model(x, y)
        topt.zero_grad()
        ref(x, y)[1].backward()
        topt.step()
    assert_state_close(ours, ref, "groups")


def test_frozen_parameters_stay():
    ours = WithLoss(mlp())
    ours.net[0].weight.requires_grad_(False)
    ref = copy.deepcopy(ours)
    frozen = ours.net[0].weight.detach().clone()
    model = poptorch.trainingModel(ours, optimizer=torch.optim.SGD([p for p in ours.parameters() if p.requires_grad],
                                                                   lr=0.05))
    topt = torch.optim.SGD([p for p in ref.parameters() if p.requires_grad], lr=0.05)
    for x, y in batches((6, 10), 3, seed=10):
        model(x, y)
        topt.zero_grad()
        ref(x, y)[1].backward()
        topt.step()
    assert torch.equal(ours.net[0].weight, frozen)
    assert_state_close(ours, ref, "frozen")


def test_dataloader_combined_batch():
    ds = torch.utils.data.TensorDataset(torch.arange(96, dtype=torch.float32).reshape(48, 2),
                                        torch.arange(48))
    opts = poptorch.Options().deviceIterations(3).Training.gradientAccumulation(2)
    loader = poptorch.DataLoader(opts, ds, batch_size=4, shuffle=False, num_workers=2)
    got = [y for _, y in loader]
    assert len(got) == 2 and all(len(y) == 24 for y in got)
    np.testing.assert_array_equal(torch.cat(got).numpy(), np.arange(48))
    seen = [y for _, y in poptorch.AsynchronousDataAccessor(loader)]
    np.testing.assert_array_equal(torch.cat(seen).numpy(), np.arange(48))
    # Inference with deviceIterations over the loader's batches: one call per combined batch.
    inf_opts = poptorch.Options().deviceIterations(3)
    net = torch.nn.Linear(2, 1)
    model = poptorch.inferenceModel(net, inf_opts)
    for x, _ in poptorch.DataLoader(inf_opts, ds, batch_size=4, mode=poptorch.DataLoaderMode.Async):
        assert x.shape == (12, 2)
        with torch.no_grad():
            np.testing.assert_allclose(model(x).numpy(), net(x).numpy(), atol=ATOL)


# ---- bad input ------------------------------------------------------------------------------------


def test_bad_inputs_are_named():
    net = WithLoss(mlp())
    with pytest.raises(graft.Error, match="not a parameter of WithLoss"):
        poptorch.trainingModel(net, optimizer=torch.optim.SGD(torch.nn.Linear(2, 2).parameters(), lr=0.1))

    class NotScalar(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.lin = torch.nn.Linear(3, 2)

        def forward(self, x):
            return self.lin(x)

    with pytest.raises(graft.Error, match="must return a scalar loss"):
        poptorch.trainingModel(NotScalar())(torch.randn(4, 3))

    class NoneLoss(NotScalar):
        def forward(self, x):
            return poptorch.identity_loss(self.lin(x), reduction="none")

    with pytest.raises(graft.Error, match="must be a scalar"):
        poptorch.trainingModel(NoneLoss())(torch.randn(4, 3))

    opts = poptorch.Options().deviceIterations(4)
    with pytest.raises(graft.Error, match="multiple of 4"):
        poptorch.inferenceModel(torch.nn.Linear(3, 2), opts)(torch.randn(6, 3))

    class Unexportable(torch.nn.Module):
        def forward(self, x):
            return torch.linalg.eigh(x)[0]

    with pytest.raises(graft.Error, match="torch op aten::linalg_eigh"):
        poptorch.inferenceModel(Unexportable())(torch.eye(3))


def test_ipu_only_options_warn_once_by_name():
    opts = poptorch.Options()
    with pytest.warns(UserWarning, match="'Precision.setPartialsType'"):
        opts.Precision.setPartialsType(torch.half)
    with pytest.warns(UserWarning, match="'autoRoundNumIPUs'"):
        opts.autoRoundNumIPUs(True)
    assert not poptorch.ipuHardwareIsAvailable()


def test_smaller_last_batch_keeps_optimizer_state():
    # A new input shape captures again; momentum carries over, so training equals torch's.
    data = batches((6, 10), 3, seed=11) + batches((4, 10), 1, seed=12)
    ours = WithLoss(mlp())
    ref = copy.deepcopy(ours)
    model = poptorch.trainingModel(ours, optimizer=poptorch.optim.Adam(ours.parameters(), lr=0.01))
    losses = [float(model(x, y)[1]) for x, y in data]
    expected = train_torch(ref, torch.optim.Adam(ref.parameters(), lr=0.01), data)
    np.testing.assert_allclose(losses, expected, atol=ATOL, rtol=RTOL)
    assert_state_close(ours, ref, "recapture")
    assert len(model._compiled) == 2  # noqa: SLF001


def test_block_scopes_shard_inference():
    class Net(torch.nn.Module):
        def __init__(self):
            super().__init__()
            torch.manual_seed(13)
            self.a = torch.nn.Linear(4, 8)
            self.b = torch.nn.Linear(8, 2)

        def forward(self, x):
            with poptorch.Block("A", ipu_id=0):
                h = torch.relu(self.a(x))
            with poptorch.Block("B", ipu_id=1):
                return self.b(h)

    net, x = Net(), torch.randn(6, 4)
    opts = poptorch.Options().setExecutionStrategy(poptorch.ShardedExecution())
    model = poptorch.inferenceModel(net, opts)
    with torch.no_grad():
        np.testing.assert_allclose(model(x).numpy(), net(x).numpy(), atol=ATOL)
    nodes = model._current.cap.onnx.graph.node  # noqa: SLF001
    ipus = [next(a.i for a in n.attribute if a.name == "__ipu_number") for n in nodes if n.op_type == "Gemm"]
    assert ipus == [0, 1]


def _cat(data):
    return torch.cat([d[0] for d in data]), torch.cat([d[1] for d in data])


def test_replication_matches_plain_run():
    # replicationFactor(2) x deviceIterations(2): each weight update takes one micro-batch per
    # replica and averages their gradients (Mean, PopTorch's default), which is plain training on
    # the 12-row batch the two make up. The combined batch is laid out [iteration, replica, batch].
    data = batches((6, 10), 8, seed=14)
    ref = WithLoss(mlp())
    ours = copy.deepcopy(ref)
    opts = poptorch.Options().deviceIterations(2).replicationFactor(2).outputMode(poptorch.OutputMode.All)
    model = poptorch.trainingModel(ours, opts, torch.optim.SGD(ours.parameters(), lr=0.05, momentum=0.9))
    topt = torch.optim.SGD(ref.parameters(), lr=0.05, momentum=0.9)
    for i in range(0, 8, 4):
        out, loss = model(*_cat(data[i:i + 4]))
        assert out.shape == (24, 4) and loss.shape == (4,)
        expected = []
        for j in range(i, i + 4, 2):
            with torch.no_grad():
                expected += [float(ref(*data[j])[1]), float(ref(*data[j + 1])[1])]
            topt.zero_grad()
            ref(*_cat(data[j:j + 2]))[1].backward()
            topt.step()
        np.testing.assert_allclose(loss.numpy(), expected, atol=ATOL, rtol=RTOL)
    assert_state_close(ours, ref, "replicated")

    # With gradient accumulation too: one call, one weight update over accumulation x replicas
    # micro-batches; OutputMode.Final returns each replica's last loss.
    ref2 = copy.deepcopy(ours)
    opts = poptorch.Options().replicationFactor(2).Training.gradientAccumulation(2)
    model = poptorch.trainingModel(ours, opts, torch.optim.SGD(ours.parameters(), lr=0.05))
    topt = torch.optim.SGD(ref2.parameters(), lr=0.05)
    for i in range(0, 8, 4):
        _, loss = model(*_cat(data[i:i + 4]))
        with torch.no_grad():
            last = [float(ref2(*data[i + 2])[1]), float(ref2(*data[i + 3])[1])]
        topt.zero_grad()
        ref2(*_cat(data[i:i + 4]))[1].backward()
        topt.step()
        assert loss.shape == (2,)
        np.testing.assert_allclose(loss.numpy(), last, atol=ATOL, rtol=RTOL)
    assert_state_close(ours, ref2, "replicated with accumulation")
    model.destroy()

    # An inferenceModel with replicas: every replica's outputs, concatenated.
    ours.eval()
    ref2.eval()
    x, y = _cat(data[:2])
    out, _ = poptorch.inferenceModel(ours, poptorch.Options().replicationFactor(2))(x, y)
    with torch.no_grad():
        np.testing.assert_allclose(out.numpy(), ref2(x, y)[0].numpy(), atol=ATOL, rtol=RTOL)


STATEFUL = {
    "sgd": lambda p: torch.optim.SGD(p, lr=0.05, momentum=0.9),
    "sgd_velocity_scaling": lambda p: poptorch.optim.SGD(p, lr=0.05, momentum=0.9, velocity_scaling=4.0),
    "adam": lambda p: torch.optim.Adam(p, lr=0.01, weight_decay=0.01),
    "adamw": lambda p: poptorch.optim.AdamW(p, lr=0.01),
    "rmsprop_centered": lambda p: torch.optim.RMSprop(p, lr=0.01, momentum=0.5, centered=True),
}


@pytest.mark.parametrize("opt_name", sorted(STATEFUL))
def test_optimizer_state_comes_back_to_torch(opt_name):
    # Two steps through graft, then two in plain torch with the same optimizer object: its state
    # (momentum buffers, Adam's moments and step, RMSprop's averages) came back from graft, so the
    # run equals four torch steps. Then the other way round: state made by torch goes to graft.
    data = batches((6, 10), 4, seed=15)
    ref = WithLoss(mlp())
    ours = copy.deepcopy(ref)
    expected = train_torch(ref, STATEFUL[opt_name](ref.parameters()), data)
    opt = STATEFUL[opt_name](ours.parameters())
    model = poptorch.trainingModel(ours, optimizer=opt)
    losses = [float(model(x, y)[1]) for x, y in data[:2]]
    state = opt.state_dict()["state"]
    assert len(state) == len(list(ours.parameters())) and all(state.values())
    losses += train_torch(ours, opt, data[2:])
    np.testing.assert_allclose(losses, expected, atol=ATOL, rtol=RTOL)
    assert_state_close(ours, ref, opt_name)
    model.destroy()

    ours = copy.deepcopy(ref)
    ref2 = copy.deepcopy(ref)
    opt2 = STATEFUL[opt_name](ref2.parameters())
    expected = train_torch(ref2, opt2, data)
    opt = STATEFUL[opt_name](ours.parameters())
    losses = train_torch(ours, opt, data[:2])
    model = poptorch.trainingModel(ours, optimizer=opt)
    losses += [float(model(x, y)[1]) for x, y in data[2:]]
    np.testing.assert_allclose(losses, expected, atol=ATOL, rtol=RTOL)
    assert_state_close(ours, ref2, opt_name + " from torch")
    # A state loaded into the optimizer (with the weights it belongs to) reaches the session at
    # the next call: the same two steps again give the same losses.
    saved, weights = copy.deepcopy(opt.state_dict()), copy.deepcopy(ours.state_dict())
    first = [float(model(x, y)[1]) for x, y in data[:2]]
    opt.load_state_dict(saved)
    ours.load_state_dict(weights)
    again = [float(model(x, y)[1]) for x, y in data[:2]]
    np.testing.assert_allclose(again, first, atol=ATOL, rtol=RTOL)
    ours.load_state_dict(weights)  # the weights alone: the optimizer state of four steps on differs
    other = [float(model(x, y)[1]) for x, y in data[:2]]
    assert abs(other[1] - first[1]) > 1e-6


def test_save_and_load_continue_training(tmp_path):
    # save() writes the module, options, optimizer and its state; poptorch.load compiles it again
    # and training goes on as in the original wrapper.
    data = batches((6, 10), 4, seed=16)
    ours = WithLoss(mlp())
    opts = poptorch.Options().deviceIterations(1)
    model = poptorch.trainingModel(ours, opts, poptorch.optim.Adam(ours.parameters(), lr=0.01))
    for x, y in data[:2]:
        model(x, y)
    path = tmp_path / "checkpoint.pt"
    model.save(str(path))
    loaded = poptorch.load(str(path))
    assert loaded.isTrainingModel() and loaded.isCompiled()
    assert loaded.model is not ours
    for x, y in data[2:]:
        np.testing.assert_allclose(float(loaded(x, y)[1]), float(model(x, y)[1]), atol=ATOL, rtol=RTOL)
    assert_state_close(loaded.model, ours, "loaded")
    with pytest.raises(graft.Error, match="not a checkpoint written by graft.torch"):
        torch.save({"something": 1}, str(tmp_path / "other.pt"))
        poptorch.load(str(tmp_path / "other.pt"))
