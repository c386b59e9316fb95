"""Models exported from PyTorch (opset 17, random weights) run through graft's PopART API and match
PyTorch's outputs.

Only ops graft has kernels for today are used (MatMul, Gemm, elementwise math and activations,
shape ops). Models to add once the ops land:
  * Conv / pooling / BatchNormalization: LeNet-5 (Conv, MaxPool, Gemm), a ResNet basic block
    (Conv, BatchNormalization, Relu, Add, GlobalAveragePool), a MobileNet depthwise-separable block.
  * Softmax / reductions: an MLP classifier with Softmax and LogSoftmax heads, a single-head
    attention block (MatMul, Softmax, Transpose), LayerNorm (ReduceMean / LayerNormalization).
"""
import io
import warnings

import numpy as np
import pytest

import torch  # required (requirements.txt): a missing torch fails these tests, never skips them

import graft  # noqa: E402
from conftest import run_model  # noqa: E402


def export(model, example, dynamic_batch=False):
    model.eval()
    f = io.BytesIO()
    names = [f"in{i}" for i in range(len(example))]
    kwargs = {}
    if dynamic_batch:
        kwargs["dynamic_axes"] = {n: {0: "batch"} for n in names + ["out"]}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        torch.onnx.export(model, tuple(example), f, opset_version=17, dynamo=False, input_names=names,
                          output_names=["out"], **kwargs)
    return f.getvalue(), names


def torch_out(model, example):
    with torch.no_grad():
        return model(*example).numpy()


class MLP(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.net = torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.ReLU(), torch.nn.Linear(32, 32),
                                       torch.nn.Tanh(), torch.nn.Linear(32, 10), torch.nn.Sigmoid())

    def forward(self, x):
        return self.net(x)


class GatedResidual(torch.nn.Module):
    """Sequence model over [batch, time, features]: batched MatMul, GELU (Erf), gating, residuals,
    reshapes, transposes, concatenation and a handful of activations."""

    def __init__(self):
        super().__init__()
        self.proj = torch.nn.Linear(8, 16)
        self.gate = torch.nn.Linear(8, 16)
        self.out = torch.nn.Linear(32, 8)

    def forward(self, x):
        h = torch.nn.functional.gelu(self.proj(x)) * torch.sigmoid(self.gate(x))
        t = torch.transpose(h, 1, 2)  # [B, 16, T]
        mixed = torch.matmul(h, t) / 4.0  # [B, T, T]
        h2 = torch.matmul(mixed, h)  # [B, T, 16]
        cat = torch.cat([torch.nn.functional.leaky_relu(h2, 0.1), torch.nn.functional.elu(h)], dim=-1)
        y = self.out(torch.nn.functional.hardtanh(cat, -2.0, 2.0)) + x
        y = torch.nn.functional.softplus(y) - torch.abs(x) * 0.5
        return y.reshape(y.shape[0], -1)


class TwoInputs(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.a = torch.nn.Linear(6, 4)
        self.b = torch.nn.Linear(3, 4, bias=False)

    def forward(self, x, y):
        z = self.a(x) * self.b(y) + torch.exp(-torch.abs(self.a(x)))
        return torch.flatten(torch.unsqueeze(z, 1), start_dim=1).clamp(min=-1.0)


@pytest.mark.parametrize("model_cls,shapes", [
    (MLP, [(5, 16)]),
    (GatedResidual, [(3, 7, 8)]),
    (TwoInputs, [(4, 6), (4, 3)]),
])
def test_matches_pytorch(model_cls, shapes):
    torch.manual_seed(0)
    model = model_cls()
    example = [torch.randn(*s) for s in shapes]
    proto, names = export(model, example)
    out = run_model(proto, {n: e.numpy() for n, e in zip(names, example)}, ["out"])
    np.testing.assert_allclose(out["out"], torch_out(model, example), rtol=1e-4, atol=1e-5)


def test_batches_per_step_and_reference_device():
    torch.manual_seed(1)
    model = MLP()
    steps = [torch.randn(5, 16) for _ in range(3)]
    proto, names = export(model, steps[:1])
    data = np.stack([s.numpy() for s in steps])
    expect = np.stack([torch_out(model, [s]) for s in steps])
    for dev in (graft.DeviceManager().createCpuDevice(), graft.DeviceManager().createReferenceDevice()):
        out = run_model(proto, {names[0]: data}, ["out"], batches_per_step=3, device=dev)
        assert out["out"].shape == (3, 5, 10)
        np.testing.assert_allclose(out["out"], expect, rtol=1e-4, atol=1e-5)


def test_dynamic_batch_recompiles_per_shape():
    torch.manual_seed(2)
    model = MLP()
    proto, names = export(model, [torch.randn(2, 16)], dynamic_batch=True)
    session = graft.InferenceSession(proto, graft.DataFlow(1, ["out"]), graft.DeviceManager().createCpuDevice())
    session.prepareDevice()
    assert session.inputInfo(names[0]).dims() == ["batch", 16]
    for batch in (1, 4, 9):
        x = torch.randn(batch, 16)
        result = np.zeros((batch, 10), np.float32)
        session.run(graft.PyStepIO({names[0]: x.numpy()}, {"out": result}))
        np.testing.assert_allclose(result, torch_out(model, [x]), rtol=1e-4, atol=1e-5)
