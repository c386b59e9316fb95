"""The benchmark's model zoo: PyTorch definitions with seeded random weights (no downloads).

Each entry builds the same model (and the same weights) in every process that asks for it, so the
exporter and the PyTorch timing processes agree without passing weights around.
"""
import math

import torch
import torch.nn as nn
import torch.nn.functional as F


class MLP(nn.Module):
    def __init__(self, sizes=(784, 2048, 2048, 10)):
        super().__init__()
        self.layers = nn.ModuleList(nn.Linear(a, b) for a, b in zip(sizes[:-1], sizes[1:]))

    def forward(self, x):
        for i, layer in enumerate(self.layers):
            x = layer(x)
            if i + 1 < len(self.layers):
                x = F.relu(x)
        return x


class EncoderLayer(nn.Module):
    """BERT's post-norm encoder layer, written out so that it exports as plain ONNX ops."""

    def __init__(self, hidden=768, heads=12, ffn=3072):
        super().__init__()
        self.heads = heads
        self.qkv = nn.Linear(hidden, 3 * hidden)
        self.proj = nn.Linear(hidden, hidden)
        self.norm1 = nn.LayerNorm(hidden)
        self.ff1 = nn.Linear(hidden, ffn)
        self.ff2 = nn.Linear(ffn, hidden)
        self.norm2 = nn.LayerNorm(hidden)

    def forward(self, x):
        b, s, h = x.shape
        d = h // self.heads
        q, k, v = self.qkv(x).split(h, dim=-1)
        q = q.reshape(b, s, self.heads, d).transpose(1, 2)
        k = k.reshape(b, s, self.heads, d).transpose(1, 2)
        v = v.reshape(b, s, self.heads, d).transpose(1, 2)
        att = torch.softmax(q @ k.transpose(-1, -2) * (1.0 / math.sqrt(d)), dim=-1)
        ctx = (att @ v).transpose(1, 2).reshape(b, s, h)
        x = self.norm1(x + self.proj(ctx))
        return self.norm2(x + self.ff2(F.gelu(self.ff1(x))))


class Encoder(nn.Module):
    def __init__(self, layers=4, hidden=768, heads=12, ffn=3072):
        super().__init__()
        self.layers = nn.ModuleList(EncoderLayer(hidden, heads, ffn) for _ in range(layers))

    def forward(self, x):
        for layer in self.layers:
            x = layer(x)
        return x


class LSTMModel(nn.Module):
    def __init__(self, size=512, layers=2):
        super().__init__()
        self.lstm = nn.LSTM(size, size, num_layers=layers)

    def forward(self, x):
        return self.lstm(x)[0]


def _tv(name):
    import torchvision

    return getattr(torchvision.models, name)(weights=None)


# name -> (builder, input shape with B for the batch, small batch, large batch, loss, classes)
# loss: "ce" (cross entropy over the last axis of logits) or "mse" (against a random target).
MODELS = {
    "mlp": (MLP, ("B", 784), 1, 256, "ce", 10),
    "resnet18": (lambda: _tv("resnet18"), ("B", 3, 224, 224), 1, 8, "ce", 1000),
    "resnet50": (lambda: _tv("resnet50"), ("B", 3, 224, 224), 1, 8, "ce", 1000),
    "mobilenet_v2": (lambda: _tv("mobilenet_v2"), ("B", 3, 224, 224), 1, 8, "ce", 1000),
    "squeezenet1_1": (lambda: _tv("squeezenet1_1"), ("B", 3, 224, 224), 1, 8, "ce", 1000),
    "bert4": (Encoder, ("B", 128, 768), 1, 8, "mse", None),
    # LSTM input is [seq, batch, features] (ONNX's layout 0).
    "lstm2": (LSTMModel, (64, "B", 512), 1, 32, "mse", None),
}

# Models with dropout: their training step's loss is random, so it is not compared.
HAS_DROPOUT = {"mobilenet_v2", "squeezenet1_1"}


def build(name):
    torch.manual_seed(1234)
    return MODELS[name][0]()


def input_shape(name, batch):
    return [batch if d == "B" else d for d in MODELS[name][1]]


def batches(name):
    return MODELS[name][2], MODELS[name][3]


def make_inputs(name, batch, seed=7):
    """The input, and the training target (class ids or a tensor shaped like the output)."""
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(*input_shape(name, batch), generator=g)
    _, _, _, _, loss, classes = MODELS[name]
    if loss == "ce":
        y = torch.randint(0, classes, (batch,), generator=g)
    else:
        with torch.no_grad():
            out_shape = build_cached(name)(x).shape
        y = torch.randn(*out_shape, generator=g)
    return x, y


_cache = {}


def build_cached(name):
    if name not in _cache:
        _cache[name] = build(name).eval()
    return _cache[name]


class WithLoss(nn.Module):
    """The model followed by its training loss (mean reduction), as exported for training."""

    def __init__(self, model, loss):
        super().__init__()
        self.model = model
        self.loss = loss

    def forward(self, x, y):
        out = self.model(x)
        if self.loss == "ce":
            return F.cross_entropy(out, y)
        return F.mse_loss(out, y)


def loss_kind(name):
    return MODELS[name][4]


def lstm_flops(batch, train):
    """FLOPs of the LSTM zoo model (the FLOP counter does not see the fused rnn kernel)."""
    seq, size, layers = 64, 512, 2
    fwd = layers * seq * batch * 2 * 4 * size * (size + size)
    return fwd * (3 if train else 1)
