"""The op-builder objects of a Builder: ``builder.aiOnnx``, ``builder.aiOnnxOpset6`` ...
``aiOnnxOpset28`` and ``builder.aiGraphcore``.

Their methods are generated from the op signatures graft knows (ONNX's schemas for ai.onnx, graft's
own table for ai.graphcore), one method per op of graft's registry, named and ordered as PopART
names and orders them:

* the method is the op type in lower case (``matmul``, ``averagepool``, ``batchnormalization``);
  ``and``, ``or``, ``not``, ``xor`` and ``if`` become ``logical_and`` ...;
* the first parameter is ``args``, the list of input tensor ids (absent for ops without inputs);
* then ``num_outputs`` for ops whose number of outputs varies (Dropout, Split, MaxPool, ...);
* then the attributes: the required ones, then the optional ones, each group by name;
  ``auto_pad`` (deprecated in PopART) is keyword-only;
* then ``debugContext`` (a str or a DebugContext; ``debugPrefix`` is accepted as a keyword).

Ops with more than one output return a list of ids, the others one id. Attributes that are not
passed are left out of the node, so ONNX's defaults apply.
"""
import inspect
import keyword
import numbers

import numpy as np

from . import _graft

_KEYWORDS = {"and": "logical_and", "or": "logical_or", "not": "logical_not", "xor": "logical_xor", "if": "logical_if"}

# Attributes that hold an ONNX element type: PopART takes a type name ("FLOAT") for them.
_DTYPE_ATTRIBUTES = {"to", "dtype"}

Kind = _graft.AttributeKind


# ai.graphcore op types whose PopART method name is not the lower-cased type.
_GRAPHCORE_NAMES = {"Nll": "nllloss", "L1": "l1loss"}


def method_name(op_type):
    """PopART's builder method name for an op type."""
    if op_type in _GRAPHCORE_NAMES:
        return _GRAPHCORE_NAMES[op_type]
    name = op_type.lower()
    return _KEYWORDS.get(name, name)


def debug_name(debugContext=None, debugPrefix=None, debugName=None):
    """The debug name from PopART's debugContext / debugPrefix / debugName arguments."""
    for value in (debugContext, debugPrefix, debugName):
        if value is None:
            continue
        name = getattr(value, "name", value)
        if name is None:
            continue
        if not isinstance(name, str):
            raise _graft.Error(f"debugContext must be a str or a DebugContext, got {type(value).__name__}")
        if name:
            return name
    return ""


def _as_int(value, what):
    if isinstance(value, (bool, np.bool_)):
        return int(value)
    if isinstance(value, numbers.Integral):
        return int(value)
    if isinstance(value, numbers.Real) and float(value).is_integer():
        return int(value)
    raise _graft.Error(f"{what} must be an integer, got {value!r}")


def convert_attribute(op_type, attr_name, kind, value):
    """A Python value as the kind an attribute declares (lists from tuples and numpy arrays, ints
    from bools, element types from names)."""
    what = f"{op_type} op: attribute '{attr_name}'"
    if kind == Kind.Int:
        if attr_name in _DTYPE_ATTRIBUTES and not isinstance(value, (numbers.Integral, np.integer)):
            return int(_graft._dtypeCode(value))
        return _as_int(value, what)
    if kind == Kind.Float:
        if not isinstance(value, (numbers.Real, np.floating, np.integer)) or isinstance(value, str):
            raise _graft.Error(f"{what} must be a number, got {value!r}")
        return float(value)
    if kind == Kind.String:
        if not isinstance(value, str):
            raise _graft.Error(f"{what} must be a string, got {value!r}")
        return value
    if kind in (Kind.Ints, Kind.Floats, Kind.Strings):
        if isinstance(value, np.ndarray):
            value = value.tolist()
        if isinstance(value, (str, bytes)) or not hasattr(value, "__iter__"):
            raise _graft.Error(f"{what} must be a list, got {value!r}")
        items = list(value)
        if kind == Kind.Ints:
            return [_as_int(v, what) for v in items]
        if kind == Kind.Floats:
            return [float(v) for v in items]
        if not all(isinstance(v, str) for v in items):
            raise _graft.Error(f"{what} must be a list of strings, got {value!r}")
        return items
    if kind == Kind.Tensor:
        if getattr(value, "is_sparse", False):
            raise _graft.Error(f"{what}: sparse tensors are not supported")
        return np.asarray(value)
    if kind == Kind.Graph:
        raise _graft.Error(
            f"{what}: ops with subgraph attributes (If, Loop, Scan) cannot be built with graft's Builder yet; "
            "build them in ONNX (for example with onnx.helper) and load the model")
    return value


class _Unset:
    def __repr__(self):
        return "<unset>"


_UNSET = _Unset()


def _default_of(attr):
    if attr.hasDefault:
        return attr.defaultValue
    return None


def _make_method(sig, domain, version):
    """A builder method for one op signature."""
    op_type = sig.type
    has_args = sig.numFormalInputs > 0
    variadic_outputs = sig.minOutputs != sig.maxOutputs
    multi_output = sig.maxOutputs != 1
    attrs = {a.name: a for a in sig.attributes}
    # Split (opset 18) has a num_outputs attribute: the num_outputs parameter sets it (below).
    count_attr = variadic_outputs and "num_outputs" in attrs
    skip = {"auto_pad"} | ({"num_outputs"} if count_attr else set())
    positional = [a for a in sig.attributes if a.required and a.name not in skip]
    positional += [a for a in sig.attributes if not a.required and a.name not in skip]
    keyword_only = [a for a in sig.attributes if a.name == "auto_pad"]

    # An attribute named like a Python keyword gets a trailing underscore as parameter name.
    param_of = {a.name: a.name + "_" if keyword.iskeyword(a.name) else a.name for a in sig.attributes}
    attr_of = {v: k for k, v in param_of.items()}
    P = inspect.Parameter
    params = [P("self", P.POSITIONAL_OR_KEYWORD)]
    if has_args:
        params.append(P("args", P.POSITIONAL_OR_KEYWORD))
    if variadic_outputs:
        params.append(P("num_outputs", P.POSITIONAL_OR_KEYWORD))
    for a in positional:
        if a.required:
            params.append(P(param_of[a.name], P.POSITIONAL_OR_KEYWORD))
        else:
            params.append(P(param_of[a.name], P.POSITIONAL_OR_KEYWORD, default=_default_of(a)))
    params.append(P("debugContext", P.POSITIONAL_OR_KEYWORD, default=""))
    params.append(P("debugPrefix", P.KEYWORD_ONLY, default=None))
    for a in keyword_only:
        params.append(P(param_of[a.name], P.KEYWORD_ONLY, default=_default_of(a)))
    signature = inspect.Signature(params)
    generic = domain != "" and not sig.attributes  # ai.graphcore ops without a declared signature
    if generic:
        params.append(P("attributes", P.VAR_KEYWORD))
        signature = inspect.Signature(params)

    def method(self, *args, **kwargs):
        try:
            bound = signature.bind(self, *args, **kwargs)
        except TypeError as e:
            raise TypeError(f"{method_name(op_type)}{signature}: {e}") from None
        given = dict(bound.arguments)
        given.pop("self")
        inputs = given.pop("args", [])
        inputs = [inputs] if isinstance(inputs, str) else list(inputs or [])
        num_outputs = given.pop("num_outputs", -1)
        name = debug_name(given.pop("debugContext", None), given.pop("debugPrefix", None))
        extra = given.pop("attributes", {}) if generic else {}
        attributes = {}
        empty_axes = False
        for key, value in given.items():
            if value is None or value is _UNSET:
                continue
            key = attr_of[key]
            attr = attrs[key]
            value = convert_attribute(op_type, key, attr.kind, value)
            if attr.kind in (Kind.Ints, Kind.Floats, Kind.Strings) and not attr.required and len(value) == 0:
                if op_type.startswith("Reduce") and key == "axes":
                    empty_axes = True  # PopART: an explicit empty list reduces over no axis
                continue  # PopART leaves empty optional lists out
            attributes[key] = value
        attributes.update(extra)
        if count_attr and len([t for t in inputs if t]) < 2 and num_outputs != -1:
            # No split sizes: opset 18 wants the count as the num_outputs attribute.
            attributes["num_outputs"] = _as_int(num_outputs, "num_outputs")
        inputs = [_tensor_id(t, op_type) for t in inputs]
        if domain == "":
            inputs = _popart_operands(self, op_type, inputs, attributes)
        if op_type.startswith("Reduce") and inputs:
            check_axes(self._builder._impl, inputs[0], attributes.get("axes", []))
            if empty_axes:
                # A reduction over no axis is its elementwise part: |x| for L1 and L2, log(x) for
                # LogSum, x * x for SumSquare, x for the others.
                impl = self._builder._impl
                unary = {"ReduceL1": "Abs", "ReduceL2": "Abs", "ReduceLogSum": "Log"}.get(op_type, "Identity")
                if op_type == "ReduceSumSquare":
                    return impl.addOp("Mul", "", version, [inputs[0], inputs[0]], {}, 1, name)[0]
                return impl.addOp(unary, "", version, inputs[:1], {}, 1, name)[0]
        outs = self._builder._impl.addOp(op_type, domain, version, inputs, attributes,
                                         _as_int(num_outputs, "num_outputs"), name)
        return outs if multi_output else outs[0]

    method.__name__ = method_name(op_type)
    method.__qualname__ = method.__name__
    method.__signature__ = signature
    method.__doc__ = f"{domain or 'ai.onnx'} {op_type} (version {sig.sinceVersion}).\n\n{sig.doc.strip()}"
    return method


def _popart_operands(opset, op_type, inputs, attributes):
    """What PopART's Builder accepts beyond the ONNX schema, made ONNX: an INT32 shape for Expand
    (cast to INT64), a negative Flatten axis before opset 11 (counted from the rank), and RNN /
    GRU / LSTM without hidden_size (taken from R's shape, which ONNX requires to match it)."""
    impl = opset._builder._impl
    if op_type == "Reshape" and len(inputs) == 2:
        target = opset._builder.__dict__.get("_constants", {}).get(inputs[1])
        if target is not None and int(np.sum(np.asarray(target) == -1)) > 1:
            raise _graft.Error(f"Reshape: the shape {np.asarray(target).tolist()} has more than one -1, but the shape "
                               "input to ReshapeOp can only use -1 to specify one unknown dimension")
    if op_type == "Squeeze" and isinstance(attributes.get("axes"), list):
        # A set of axes: in order, since ONNX's Squeeze-1 shape inference misreads unsorted ones.
        attributes["axes"] = sorted(attributes["axes"])
    if op_type == "Mul" and len(inputs) == 2 and all(t and impl.hasTensor(t) for t in inputs):
        inputs = _mixed_precision_mul(opset, impl, inputs)
    if op_type == "Expand" and len(inputs) == 2 and impl.hasTensor(inputs[1]):
        if impl.getTensorInfo(inputs[1]).data_type() == "INT32":
            cast = impl.addOp("Cast", "", opset.version, [inputs[1]], {"to": int(_graft._dtypeCode("INT64"))}, 1, "")
            inputs = [inputs[0], cast[0]]
    if op_type == "Flatten" and attributes.get("axis", 1) < 0 and opset.version < 11 and impl.hasTensor(inputs[0]):
        info = impl.getTensorInfo(inputs[0])  # PopART takes a negative axis before ONNX opset 11 did
        if info.hasShape():
            attributes["axis"] = attributes["axis"] + len(info.dims())
    if op_type in ("RNN", "GRU", "LSTM") and "hidden_size" not in attributes and len(inputs) >= 3:
        if impl.hasTensor(inputs[2]):
            info = impl.getTensorInfo(inputs[2])
            if info.hasShape() and len(info.dims()) == 3 and isinstance(info.dims()[2], int) and info.dims()[2] > 0:
                attributes["hidden_size"] = int(info.dims()[2])
    return inputs


def _info_or_none(impl, t):
    try:
        return impl.getTensorInfo(t)
    except _graft.Error:
        return None


def _mixed_precision_mul(opset, impl, inputs):
    """PopART's Mul of a FLOAT16 tensor and a one-element FLOAT tensor is FLOAT16 (its mixed-precision
    multiply): the FLOAT operand is cast to FLOAT16. Other operands of two types raise PopART's error."""
    infos = [_info_or_none(impl, t) for t in inputs]
    if any(i is None for i in infos):
        return inputs  # a subgraph's tensors are typed only where it is called
    types = [i.data_type() for i in infos]
    if types[0] == types[1] or "UNDEFINED" in types:
        return inputs

    def one_element(info):
        return info.hasShape() and all(isinstance(d, int) for d in info.dims()) and int(np.prod(info.dims())) == 1

    if sorted(types) == ["FLOAT", "FLOAT16"]:
        k = types.index("FLOAT")
        if one_element(infos[k]):
            cast = impl.addOp("Cast", "", opset.version, [inputs[k]], {"to": int(_graft._dtypeCode("FLOAT16"))}, 1, "")
            inputs = list(inputs)
            inputs[k] = cast[0]
            return inputs

    def shape(info):
        return "[" + " ".join(str(d) for d in info.dims()) + "]" if info.hasShape() else "[?]"

    raise _graft.Error(f"Mul: np broadcasting failed, incompatible types {types[0]} and {types[1]} (shapes "
                       f"{shape(infos[0])} and {shape(infos[1])})")


def check_axes(impl, tensor, axes):
    """Raises PopART's error for a reduction axis outside the input's rank (when it is known)."""
    if not axes or not impl.hasTensor(tensor):
        return
    info = impl.getTensorInfo(tensor)
    if not info.hasShape():
        return
    rank = len(info.dims())
    for axis in axes:
        if not -rank <= axis < rank:
            raise _graft.Error(f"Axis {axis} is out of acceptable range [{-rank}, {rank - 1}]")


def _tensor_id(t, op_type):
    if isinstance(t, str):
        return t
    raise _graft.Error(f"{op_type} op: inputs must be tensor ids (str), got {t!r}")


def _constant11(self, value, is_value_sparse=False, debugContext="", debugPrefix=None):
    """A Constant op holding ``value`` (a numpy array; Python scalars and lists become arrays)."""
    if isinstance(is_value_sparse, str) or hasattr(is_value_sparse, "name"):
        # constant(value, "name"): the opset < 11 form, which PopART programs also use at 11.
        is_value_sparse, debugContext = False, is_value_sparse
    if is_value_sparse:
        raise _graft.Error("constant: sparse constant values are not supported")
    name = debug_name(debugContext, debugPrefix)
    out = self._builder._impl.addOp("Constant", "", self.version, [], {"value": np.asarray(value)}, 1, name)[0]
    # Remembered for the ops the Builder unrolls (aiOnnx.loop's trip count).
    self._builder.__dict__.setdefault("_constants", {})[out] = np.array(value)
    return out


def _constant(self, value, debugContext="", debugPrefix=None):
    """A Constant op holding ``value`` (a numpy array; Python scalars and lists become arrays)."""
    return _constant11(self, value, False, debugContext, debugPrefix)


_opset_classes = {}


def opset_class(domain, version):
    """The class of the op-builder object for (domain, version), created once."""
    key = (domain, version)
    if key in _opset_classes:
        return _opset_classes[key]
    if domain == "ai.graphcore":
        special = _graphcore_methods()
    else:
        from .subgraph import onnx_methods  # noqa: imports this module

        special = {"constant": _constant11 if version >= 11 else _constant, **onnx_methods()}
    methods = {}
    for sig in _graft.builderOpSignatures(domain, version):
        name = method_name(sig.type)
        methods[name] = special[name] if name in special else _make_method(sig, domain, version)
    if domain == "ai.graphcore":
        methods.update(special)  # PopART's loss ops, whose kernels come with training
    prefix = "AiOnnxOpset" if domain == "" else "AiGraphcoreOpset"
    cls = type(f"{prefix}{version}", (_Opset,), methods)
    cls.__doc__ = f"Builder methods of the {domain or 'ai.onnx'} ops graft knows at opset {version}."
    _opset_classes[key] = cls
    return cls


class _Opset:
    """Base of the op-builder objects: ``self._builder`` is the Builder, ``self.version`` the opset."""

    def __init__(self, builder, version):
        self._builder = builder
        self.version = version

    def __getattr__(self, name):
        if name.startswith("_"):
            raise AttributeError(name)
        cls = type(self).__name__
        domain = "ai.onnx" if cls.startswith("AiOnnx") else "ai.graft" if cls.startswith("AiGraft") else "ai.graphcore"
        raise AttributeError(
            f"graft's Builder has no {domain} op '{name}' at opset {self.version}: graft has no kernel for it, or ONNX "
            f"defines it only in other opsets (ops available: {', '.join(self.ops())})")

    @classmethod
    def ops(cls):
        """The names of the op methods of this opset."""
        return sorted(k for k, v in vars(cls).items() if callable(v) and not k.startswith("_") and k != "ops")

    def __repr__(self):
        return f"<{type(self).__name__}>"


# ---- ai.graphcore: PopART's loss ops take a ReductionType ---------------------------------------


def _reduction(value):
    from . import ReductionType  # noqa: circular at import time only

    if value is None:
        return "Mean"
    if isinstance(value, str):
        value = {"mean": ReductionType.Mean, "sum": ReductionType.Sum, "none": ReductionType.NoReduction,
                 "noreduction": ReductionType.NoReduction}.get(value.lower(), value)
    if value == ReductionType.Mean:
        return "Mean"
    if value == ReductionType.Sum:
        return "Sum"
    if value == ReductionType.NoReduction:
        return "None"
    raise _graft.Error(f"reduction must be a ReductionType (Mean, Sum or NoReduction), got {value!r}")


def _graphcore_methods():
    def nllloss(self, args, reduction=None, ignoreIndex=None, inputIsLogProbability=False, debugContext="",
                debugPrefix=None):
        """Negative log likelihood loss of probabilities ``args[0]`` at integer labels ``args[1]``."""
        attrs = {"reduction": _reduction(reduction), "inputIsLogProbability": int(bool(inputIsLogProbability))}
        if ignoreIndex is not None:
            attrs["ignoreIndex"] = _as_int(ignoreIndex, "nllloss: ignoreIndex")
        return self._builder._impl.addOp("Nll", "ai.graphcore", 1, list(args), attrs, 1,
                                         debug_name(debugContext, debugPrefix))[0]

    def l1loss(self, args, *rest, **kwargs):
        """``lambda * |args[0]|`` reduced by ``reduction``: l1loss(args, lambda, reduction=Mean)."""
        names = ["lambda", "reduction", "debugContext"]
        if len(rest) > len(names):
            raise TypeError("l1loss(args, lambda, reduction=ReductionType.Mean, debugContext='') takes at most 4 "
                            "arguments")
        values = dict(zip(names, rest))
        for k, v in kwargs.items():
            if k not in names + ["debugPrefix"]:
                raise TypeError(f"l1loss got an unexpected keyword argument '{k}'")
            values[k] = v
        if "lambda" not in values:
            raise TypeError("l1loss missing required argument 'lambda'")
        attrs = {"lambda": float(values["lambda"]), "reduction": _reduction(values.get("reduction"))}
        name = debug_name(values.get("debugContext"), values.get("debugPrefix"))
        return self._builder._impl.addOp("L1", "ai.graphcore", 1, list(args), attrs, 1, name)[0]

    def identityloss(self, args, reduction=None, debugContext="", debugPrefix=None):
        """A loss that is ``args[0]`` reduced by ``reduction``."""
        return self._builder._impl.addOp("IdentityLoss", "ai.graphcore", 1, list(args),
                                         {"reduction": _reduction(reduction)}, 1,
                                         debug_name(debugContext, debugPrefix))[0]

    from . import graphcore_ops  # noqa: imports this module

    from . import collective_ops  # noqa: imports this module

    return {"nllloss": nllloss, "l1loss": l1loss, "identityloss": identityloss, **graphcore_ops.methods(),
            **collective_ops.methods()}


# ---- ai.graft: graft's own ops for Builder programs ----------------------------------------------


class AiGraftOpset1(_Opset):
    """``builder.aiGraft``: graft's own ops (domain ai.graft, opset 1) that PopART's opsets lack.

    PopART has no mean-squared-error loss op (its programs build one from ai.onnx ops and
    ``aiGraphcore.identityloss``); graft has one, ``mseloss``.
    """

    def mseloss(self, args, reduction=None, debugContext="", debugPrefix=None):
        """Mean squared error ``(args[0] - args[1])^2`` reduced by ``reduction`` (a ReductionType
        or "Mean"/"Sum"/"None"; Mean by default, as torch.nn.MSELoss). Prediction and target must
        have the same type and shape."""
        inputs = [_tensor_id(t, "MseLoss") for t in ([args] if isinstance(args, str) else list(args))]
        if len(inputs) != 2:
            raise _graft.Error(f"mseloss takes 2 inputs (prediction, target), got {len(inputs)}")
        impl = self._builder._impl
        for i in inputs:
            if not impl.hasTensor(i):
                raise _graft.Error(f"MseLoss op: unknown tensor '{i}'")
        infos = [impl.getTensorInfo(i) for i in inputs]
        if infos[0].data_type() != infos[1].data_type():
            raise _graft.Error(f"MseLoss op: prediction '{inputs[0]}' is {infos[0].data_type()} but target "
                               f"'{inputs[1]}' is {infos[1].data_type()}; they must have the same type")
        if infos[0].hasShape() and infos[1].hasShape() and infos[0].dims() != infos[1].dims():
            raise _graft.Error(f"MseLoss op: prediction '{inputs[0]}' has shape {infos[0].dims()} but target "
                               f"'{inputs[1]}' has shape {infos[1].dims()}; they must be equal")
        return impl.addOp("MseLoss", "ai.graft", 1, inputs, {"reduction": _reduction(reduction)}, 1,
                          debug_name(debugContext, debugPrefix))[0]
