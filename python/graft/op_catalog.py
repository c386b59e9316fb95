"""PopART's op catalogue: ``getSupportedOperations`` and ``getSupportedOperationsDefinition``.

The public ops are the ones the Builder offers: every ai.onnx op of graft's registry at each
version of it from opset 6 up to graft's newest, and the ai.graphcore ops. With
``includePrivate`` graft's internal ops (domain ai.graft: gradient kernels, optimizer steps,
fused programs) are listed too, as PopART lists its gradient and in-place variants.
"""
from . import _graft

_PRIVATE_DOMAIN = "ai.graft"


class OperatorIdentifier:
    """An op's domain, type and version (PopART's OperatorIdentifier)."""

    def __init__(self, domain, type, version):
        self.domain = domain
        self.type = type
        self.version = int(version)

    def _key(self):
        return (self.domain, self.type, self.version)

    def __eq__(self, other):
        return isinstance(other, OperatorIdentifier) and self._key() == other._key()

    def __lt__(self, other):
        return self._key() < other._key()

    def __hash__(self):
        return hash(self._key())

    def __repr__(self):
        return f"OperatorIdentifier({self.domain!r}, {self.type!r}, {self.version})"


class OpDefinition:
    """What an op takes: ``inputs`` and ``outputs`` (each with ``name`` and ``supportedTensors``)
    and ``attributes`` (name -> an object with ``supportedValuesRegex``)."""

    class Input:
        def __init__(self, name, supportedTensors, constant=False):
            self.name, self.supportedTensors, self.constant = name, list(supportedTensors), constant

    class Output:
        def __init__(self, name, supportedTensors):
            self.name, self.supportedTensors = name, list(supportedTensors)

    class Attribute:
        def __init__(self, supportedValuesRegex):
            self.supportedValuesRegex = supportedValuesRegex

    def __init__(self, inputs=(), outputs=(), attributes=None):
        self.inputs, self.outputs, self.attributes = list(inputs), list(outputs), dict(attributes or {})


def _public():
    seen = {}
    for version in range(6, _graft.newestAiOnnxOpset + 1):
        for s in _graft.builderOpSignatures("ai.onnx", version):
            seen.setdefault(("ai.onnx", s.type, s.sinceVersion), s)
    for s in _graft.builderOpSignatures("ai.graphcore", 1):
        seen.setdefault(("ai.graphcore", s.type, 1), s)
    return seen


def getSupportedOperations(includePrivate=False):
    """The ops graft runs, as OperatorIdentifiers (see the module's doc for what is public)."""
    ops = {OperatorIdentifier(*k) for k in _public()}
    if includePrivate:
        ops |= {OperatorIdentifier(d, t, 1) for d, t in _graft._registeredOps() if d == _PRIVATE_DOMAIN}
    return sorted(ops)


def _onnx_definition(op):
    """Inputs, outputs and attributes from ONNX's schema (the onnx package, when installed): the
    supported tensors are the schema's type constraint."""
    try:
        import onnx.defs  # noqa: PLC0415  (optional: graft itself does not need onnx)

        schema = onnx.defs.get_schema(op.type, op.version, "")
    except Exception:  # no onnx package, or no schema of that version
        return None
    types = {c.type_param_str: list(c.allowed_type_strs) for c in schema.type_constraints}

    def allowed(formal):
        return types.get(formal.type_str, [formal.type_str])

    return OpDefinition([OpDefinition.Input(i.name, allowed(i)) for i in schema.inputs],
                        [OpDefinition.Output(o.name, allowed(o)) for o in schema.outputs],
                        {a: OpDefinition.Attribute("*") for a in schema.attributes})


def _generic_definition(signature):
    if signature is None:
        return OpDefinition()
    count = signature.maxInputs if signature.maxInputs >= 0 else signature.minInputs
    outs = signature.maxOutputs if signature.maxOutputs >= 0 else signature.minOutputs
    return OpDefinition([OpDefinition.Input(f"input{i}", []) for i in range(count)],
                        [OpDefinition.Output(f"output{i}", []) for i in range(outs)],
                        {a.name: OpDefinition.Attribute("*") for a in signature.attributes})


def getSupportedOperationsDefinition(includePrivate=False):
    """``{OperatorIdentifier: OpDefinition}`` for getSupportedOperations(includePrivate). ai.onnx
    ops are described by ONNX's schemas (when the onnx package is installed); ai.graphcore ops by
    their input and output counts and attribute names; graft's private ops by nothing more than
    their name (their inputs and outputs are graft's internals)."""
    public = _public()
    out = {}
    for op in getSupportedOperations(includePrivate):
        signature = public.get((op.domain, op.type, op.version))
        definition = _onnx_definition(op) if op.domain == "ai.onnx" else None
        out[op] = definition or _generic_definition(signature)
    return out
