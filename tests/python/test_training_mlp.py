"""MLPs built with graft's Builder (MatMul, Add, Relu) and mirrored in PyTorch, trained with every
loss head graft offers: aiGraphcore.nllloss on Softmax / LogSoftmax outputs (with ignoreIndex and
each reduction), ai.onnx SoftmaxCrossEntropyLoss and NegativeLogLikelihoodLoss,
aiGraphcore.l1loss, aiGraphcore.identityloss and aiGraft.mseloss. Also an MLP exported from
PyTorch with its LogSoftmax head. Losses of every step and final weights are compared with
PyTorch's (float32 on both sides)."""
import numpy as np
import pytest

import torch  # required (requirements.txt): a missing torch fails these tests, never skips them
F = torch.nn.functional

import graft  # noqa: E402
from training_util import compare, export, log_softmax, read_weights, state_dict_numpy, train_graft  # noqa: E402

N, IN, HID, OUT = 6, 5, 12, 4
STEPS = 6
# Tolerance: |graft - torch| <= ATOL + RTOL * |torch| (Sum losses are ~50, where one float32 ulp is 4e-6).
ATOL = 1e-6
RTOL = 1e-6


class TorchMLP(torch.nn.Module):
    """x @ W1 + b1 -> relu -> @ W2 + b2, with weights stored as the Builder stores them ([in, out])."""

    def __init__(self):
        super().__init__()
        rng = np.random.default_rng(7)
        self.W1 = torch.nn.Parameter(torch.from_numpy((rng.standard_normal((IN, HID)) * 0.5).astype(np.float32)))
        self.b1 = torch.nn.Parameter(torch.from_numpy((rng.standard_normal(HID) * 0.1).astype(np.float32)))
        self.W2 = torch.nn.Parameter(torch.from_numpy((rng.standard_normal((HID, OUT)) * 0.5).astype(np.float32)))
        self.b2 = torch.nn.Parameter(torch.from_numpy((rng.standard_normal(OUT) * 0.1).astype(np.float32)))

    def forward(self, x):
        return torch.relu(x @ self.W1 + self.b1) @ self.W2 + self.b2


def build_mlp(tm, target_dtype="INT32", target_shape=(N,), opset=10):
    """The same MLP in graft's Builder; returns (builder, logits id, target input id)."""
    b = graft.Builder(opsets={"ai.onnx": opset})
    x = b.addInputTensor(graft.TensorInfo("FLOAT", [N, IN]), "x")
    target = b.addInputTensor(graft.TensorInfo(target_dtype, list(target_shape)), "target")
    params = {k: b.addInitializedInputTensor(v.detach().numpy().copy(), k) for k, v in tm.named_parameters()}
    assert list(params) == list(params.values())  # ids are the debug names
    h = b.aiOnnx.relu([b.aiOnnx.add([b.aiOnnx.matmul([x, params["W1"]]), params["b1"]])])
    logits = b.aiOnnx.add([b.aiOnnx.matmul([h, params["W2"]]), params["b2"]], "logits")
    return b, logits, target


def data(step, kind, label_dtype=np.int32):
    rng = np.random.default_rng(500 + step)
    x = rng.standard_normal((N, IN)).astype(np.float32)
    if kind == "class":
        return x, rng.integers(0, OUT, N).astype(label_dtype)
    return x, rng.standard_normal((N, OUT)).astype(np.float32)


def train_both(name, model, loss, torch_loss, kind, graft_opt=None, torch_opt=None, label_dtype=np.int32):
    tm = TorchMLP()
    init = state_dict_numpy(tm)
    graft_opt = graft_opt or graft.SGD({"defaultLearningRate": (0.1, True), "defaultMomentum": (0.9, True)})
    torch_opt = (torch_opt or (lambda p: torch.optim.SGD(p, lr=0.1, momentum=0.9)))(tm.parameters())

    def feeds(step):
        x, t = data(step, kind, label_dtype)
        return {"x": x, "target": t}

    session, g_losses, _ = train_graft(model, loss, graft_opt, feeds, STEPS)
    t_losses = []
    for step in range(STEPS):
        x, t = data(step, kind)
        torch_opt.zero_grad()
        t_tensor = torch.from_numpy(t.astype(np.int64) if kind == "class" else t)
        lt = torch_loss(tm(torch.from_numpy(x)), t_tensor)
        lt.backward()
        torch_opt.step()
        t_losses.append(lt.item())
    t_weights = state_dict_numpy(tm)
    assert max(np.max(np.abs(t_weights[k] - init[k])) for k in init) > 1e-2, "the weights hardly moved"
    compare(name, g_losses, t_losses, read_weights(session, init), t_weights, ATOL, RTOL)


# ---- classification heads that need the Softmax / LogSoftmax gradients ---------------------------


@pytest.mark.parametrize("reduction", ["Mean", "Sum"])
def test_softmax_and_nllloss(reduction):
    tm = TorchMLP()
    b, logits, target = build_mlp(tm)
    probs = b.aiOnnx.softmax([logits], axis=-1)
    loss = b.aiGraphcore.nllloss([probs, target], getattr(graft.ReductionType, reduction))
    train_both(f"builder_mlp_softmax_nll_{reduction.lower()}", b.getModelProto(), loss,
               lambda y, t: F.cross_entropy(y, t, reduction=reduction.lower()), "class")


def test_logsoftmax_and_nllloss_with_ignore_index():
    tm = TorchMLP()
    b, logits, target = build_mlp(tm)
    lp = b.aiOnnx.logsoftmax([logits], axis=-1)
    loss = b.aiGraphcore.nllloss([lp, target], graft.ReductionType.Mean, ignoreIndex=2, inputIsLogProbability=True)
    train_both("builder_mlp_logsoftmax_nll_ignore", b.getModelProto(), loss,
               lambda y, t: F.cross_entropy(y, t, ignore_index=2), "class")


@pytest.mark.parametrize("reduction", ["mean", "sum"])
def test_onnx_softmax_cross_entropy_loss(reduction):
    tm = TorchMLP()
    b, logits, target = build_mlp(tm, "INT64", opset=13)
    loss = b.aiOnnx.softmaxcrossentropyloss([logits, target], 1, reduction=reduction)[0]
    train_both(f"builder_mlp_onnx_sce_{reduction}", b.getModelProto(), loss,
               lambda y, t: F.cross_entropy(y, t, reduction=reduction), "class", label_dtype=np.int64)


def test_onnx_negative_log_likelihood_loss():
    tm = TorchMLP()
    b, logits, target = build_mlp(tm, "INT64", opset=13)
    lp = b.aiOnnx.logsoftmax([logits], axis=1)
    loss = b.aiOnnx.negativeloglikelihoodloss([lp, target], ignore_index=1)
    train_both("builder_mlp_onnx_nll", b.getModelProto(), loss, lambda y, t: F.cross_entropy(y, t, ignore_index=1),
               "class", label_dtype=np.int64)


def test_exported_mlp_with_logsoftmax_head():
    """An MLP exported from PyTorch with its LogSoftmax (ONNX LogSoftmax op) inside the model."""
    torch.manual_seed(3)
    net = torch.nn.Sequential(torch.nn.Linear(IN, HID), torch.nn.ReLU(), torch.nn.Linear(HID, OUT),
                              torch.nn.LogSoftmax(dim=-1))
    init = state_dict_numpy(net)
    b = graft.Builder(export(net, [torch.zeros(N, IN)], ["x"], ["logprobs"]))
    target = b.addInputTensor("INT32", [N], "target")
    loss = b.aiGraphcore.nllloss(["logprobs", target], graft.ReductionType.Mean, inputIsLogProbability=True)
    # PopART's Adam has no weight decay by default, torch.optim.AdamW 0.01: both get 0.01.
    opt = graft.Adam({"defaultLearningRate": (0.01, True), "defaultEps": (1e-8, True),
                      "defaultWeightDecay": (0.01, True)}, weight_decay_mode=graft.WeightDecayMode.Decay)
    session, g_losses, _ = train_graft(b.getModelProto(), loss, opt,
                                       lambda s: dict(zip(("x", "target"), data(s, "class"))), STEPS)
    t_opt = torch.optim.AdamW(net.parameters(), lr=0.01, eps=1e-8, weight_decay=0.01)
    t_losses = []
    for step in range(STEPS):
        x, t = data(step, "class")
        t_opt.zero_grad()
        lt = F.nll_loss(net(torch.from_numpy(x)), torch.from_numpy(t.astype(np.int64)))
        lt.backward()
        t_opt.step()
        t_losses.append(lt.item())
    compare("exported_mlp_logsoftmax_adamw", g_losses, t_losses, read_weights(session, init), state_dict_numpy(net),
            ATOL, RTOL)


# ---- heads whose gradients need only elementwise ops and the loss ops ----------------------------


@pytest.mark.parametrize("reduction", ["Mean", "Sum"])
def test_mseloss(reduction):
    tm = TorchMLP()
    b, logits, target = build_mlp(tm, "FLOAT", (N, OUT))
    loss = b.aiGraft.mseloss([logits, target], reduction)
    train_both(f"builder_mlp_mse_{reduction.lower()}", b.getModelProto(), loss,
               lambda y, t: F.mse_loss(y, t, reduction=reduction.lower()), "regression",
               graft_opt=graft.SGD({"defaultLearningRate": (0.01, True), "defaultMomentum": (0.9, True)}),
               torch_opt=lambda p: torch.optim.SGD(p, lr=0.01, momentum=0.9))


def test_l1loss_on_the_residual():
    tm = TorchMLP()
    b, logits, target = build_mlp(tm, "FLOAT", (N, OUT))
    loss = b.aiGraphcore.l1loss([b.aiOnnx.sub([logits, target])], 0.5, graft.ReductionType.Mean)
    train_both("builder_mlp_l1", b.getModelProto(), loss, lambda y, t: 0.5 * F.l1_loss(y, t), "regression",
               graft_opt=graft.Adam({"defaultLearningRate": (0.01, True), "defaultEps": (1e-8, True)},
                                    weight_decay_mode=graft.WeightDecayMode.L2Regularization),
               torch_opt=lambda p: torch.optim.Adam(p, lr=0.01, eps=1e-8))


@pytest.mark.parametrize("reduction", ["Sum", "Mean"])
def test_identityloss_of_a_hand_built_loss(reduction):
    """Any tensor the user builds can be the loss: here a Huber-like smooth loss from ai.onnx ops."""
    tm = TorchMLP()
    b, logits, target = build_mlp(tm, "FLOAT", (N, OUT))
    d = b.aiOnnx.sub([logits, target])
    per_element = b.aiOnnx.sub([b.aiOnnx.sqrt([b.aiOnnx.add([b.aiOnnx.mul([d, d]),
                                                             b.aiOnnx.constant(np.array(1, np.float32))])]),
                                b.aiOnnx.constant(np.array(1, np.float32))])
    loss = b.aiGraphcore.identityloss([per_element], getattr(graft.ReductionType, reduction))

    def torch_loss(y, t):
        v = torch.sqrt((y - t) ** 2 + 1) - 1
        return v.sum() if reduction == "Sum" else v.mean()

    train_both(f"builder_mlp_identityloss_{reduction.lower()}", b.getModelProto(), loss, torch_loss, "regression",
               graft_opt=graft.SGD({"defaultLearningRate": (0.05, True)}),
               torch_opt=lambda p: torch.optim.SGD(p, lr=0.05))


@pytest.mark.parametrize("reduction", ["Mean", "Sum"])
def test_composed_log_softmax_nllloss_with_ignore_index(reduction):
    tm = TorchMLP()
    b, logits, target = build_mlp(tm)
    lp = log_softmax(b, logits, OUT, "composed")
    loss = b.aiGraphcore.nllloss([lp, target], getattr(graft.ReductionType, reduction), ignoreIndex=0,
                                 inputIsLogProbability=True)
    train_both(f"builder_mlp_composed_nll_ignore_{reduction.lower()}", b.getModelProto(), loss,
               lambda y, t: F.cross_entropy(y, t, ignore_index=0, reduction=reduction.lower()), "class")
