"""``builder.aiGraphcore`` methods with PopART's signatures for graft's ai.graphcore ops.

Each method adds one ai.graphcore node; the op's semantics, type inference, kernel and gradient
are graft's (src/ops/graphcore_*.cpp). The argument names and defaults are PopART's.
"""
import numpy as np

from . import _graft
from .opsets import _as_int, _tensor_id, debug_name


def _add(self, op_type, args, attrs, num_outputs=1, debugContext="", debugPrefix=None):
    inputs = [args] if isinstance(args, str) else list(args or [])
    inputs = [_tensor_id(t, op_type) for t in inputs]
    outs = self._builder._impl.addOp(op_type, "ai.graphcore", 1, inputs, attrs, num_outputs,
                                     debug_name(debugContext, debugPrefix))
    return outs if num_outputs != 1 else outs[0]


def _ints(value, what):
    if isinstance(value, np.ndarray):
        value = value.tolist()
    return [_as_int(v, what) for v in value]


def _unary(op_type, doc):
    def method(self, args, debugContext="", debugPrefix=None):
        return _add(self, op_type, args, {}, 1, debugContext, debugPrefix)

    method.__doc__ = doc
    return method


def reducemedian(self, args, axes=None, keepdims=1, debugContext="", debugPrefix=None):
    """Median of ``args[0]`` over ``axes`` (all when None): returns [values, INT32 indices]. Of an
    even count the lower median; the index is the position within the reduced axes, flattened."""
    attrs = {"keepdims": _as_int(keepdims, "reducemedian: keepdims")}
    if axes is not None:
        attrs["axes"] = _ints(axes, "reducemedian: axes")
    return _add(self, "ReduceMedian", args, attrs, 2, debugContext, debugPrefix)


def scale(self, args, scale, debugContext="", debugPrefix=None):
    """``args[0] * scale``."""
    return _add(self, "Scale", args, {"scale": float(scale)}, 1, debugContext, debugPrefix)


def scaledadd(self, args, scale0=1.0, scale1=1.0, debugContext="", debugPrefix=None):
    """``scale0 * args[0] + scale1 * args[1]`` (numpy broadcasting)."""
    if len(args) != 2:
        raise _graft.Error(f"scaledadd takes 2 inputs (graft has no tensor scales), got {len(args)}")
    return _add(self, "ScaledAdd", args, {"scale0": float(scale0), "scale1": float(scale1)}, 1, debugContext,
                debugPrefix)


def call(self, args, num_outputs, callee, debugContext="", debugPrefix=None):
    """Runs subgraph builder ``callee`` on ``args``; returns the list of its outputs."""
    from .subgraph import call as _call

    return _call(self, args, num_outputs, callee, debugContext, debugPrefix)


def methods():
    """The methods this module adds to ``builder.aiGraphcore``."""
    m = {
        "call": call,
        "reducemedian": reducemedian,
        "scale": scale,
        "scaledadd": scaledadd,
    }
    for name, op_type, doc in [
        ("log1p", "Log1p", "log(1 + x)."),
        ("expm1", "Expm1", "exp(x) - 1."),
        ("geluerf", "GeluErf", "GELU in its exact form x/2 (1 + erf(x / sqrt 2))."),
        ("swish", "Swish", "x * sigmoid(x)."),
        ("detach", "Detach", "x, through which no gradient flows back."),
        ("nop", "Nop", "x (an identity PopART's passes keep)."),
        ("round", "Round", "x rounded to the nearest integer, halves away from zero."),
        ("nearbyint", "NearbyInt", "x rounded to the nearest integer, halves to even."),
        ("bitwisenot", "BitwiseNot", "~x of an integer tensor."),
        ("atan2", "Atan2", "atan2(args[0], args[1]) with numpy broadcasting."),
        ("fmod", "Fmod", "C's fmod(args[0], args[1]): the remainder has the sign of args[0]."),
        ("remainder", "Remainder", "Python's args[0] % args[1]: the remainder has the sign of args[1]."),
    ]:
        m[name] = _unary(op_type, doc)
    return m
