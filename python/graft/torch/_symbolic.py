"""ONNX conversions graft.torch adds to torch's TorchScript exporter for aten ops it cannot export
at opset 17 (PopTorch lowered these itself). Registered once, on first capture, through torch's
public register_custom_op_symbolic."""
import torch
from torch.onnx import symbolic_helper as sh

_REGISTERED = False


def _reduce(g, x, reduction):
    r = sh._maybe_get_const(reduction, "i")  # noqa: SLF001
    if r == 1:
        return g.op("ReduceMean", x, keepdims_i=0)
    if r == 2:
        return g.op("ReduceSum", x, keepdims_i=0)
    return x


def _l1_loss(g, input, target, reduction):  # noqa: A002
    return _reduce(g, g.op("Abs", g.op("Sub", input, target)), reduction)


def _scaled(g, x, scale):
    s = sh._maybe_get_const(scale, "f")  # noqa: SLF001
    if isinstance(s, (int, float)):
        if s == 1:
            return x
        return g.op("Mul", x, g.op("CastLike", g.op("Constant", value_t=torch.tensor(float(s))), x))
    return g.op("Mul", x, g.op("CastLike", scale, x))


def _addmv(g, input, mat, vec, beta, alpha):  # noqa: A002
    return g.op("Add", _scaled(g, input, beta), _scaled(g, g.op("MatMul", mat, vec), alpha))


_TABLE = {"aten::l1_loss": _l1_loss, "aten::addmv": _addmv}


def register():
    global _REGISTERED
    if _REGISTERED:
        return
    for name, fn in _TABLE.items():
        torch.onnx.register_custom_op_symbolic(name, fn, 9)
    _REGISTERED = True
