"""Subgraph builders (``builder.createSubgraphBuilder()``) and ``aiGraphcore.call``.

A subgraph builder records the ops added to it; ``aiGraphcore.call(args, num_outputs, callee)``
adds them to the calling graph, with the subgraph's inputs bound to ``args`` and fresh names
for everything the subgraph computes. A call is therefore inlined: it runs, and trains, like the
same ops written in place (PopART's Call op has these semantics; its outlining is an IPU memory
optimisation). Tensors of the parent graph that the subgraph reads without declaring them as
inputs are read from the parent, as PopART does.
"""
import itertools

from . import _graft

_ids = itertools.count()


class SubgraphCore:
    """What a subgraph Builder records instead of building a graph."""

    def __init__(self, parent):
        self._parent = parent
        self._prefix = f"subgraph{next(_ids)}"
        self._count = itertools.count()
        self.inputs = []    # the formal inputs, in order
        self.outputs = []   # the formal outputs, in order
        self.ops = []       # (type, domain, version, inputs, attrs, numOutputs, name, outputIds)
        self._known = set()
        self._scopes = {}

    def _fresh(self, base):
        return f"{self._prefix}/{base or 'tensor'}:{next(self._count)}"

    # The part of _BuilderCore that the Builder and its opsets use.
    def addInputTensor(self, info, name=""):
        tid = self._fresh(name or "input")
        self.inputs.append(tid)
        self._known.add(tid)
        return tid

    def addInputFromParent(self, tid):
        self.inputs.append(tid)
        self._known.add(tid)

    def addInitializedInputTensor(self, value, name=""):
        raise _graft.Error("a subgraph builder cannot hold weights: add them to the main graph's builder and read "
                           "them from the subgraph")

    def addOp(self, op_type, domain, version, inputs, attributes, numOutputs, name):
        for t in inputs:
            if t and not self.hasTensor(t):
                raise _graft.Error(f"{op_type} op in a subgraph: unknown tensor '{t}'")
        n = max(1, numOutputs)
        outs = [self._fresh(f"{op_type}") for _ in range(n)]
        attrs = dict(attributes)
        for scope, stack in self._scopes.items():
            if stack:
                attrs.setdefault(scope, stack[-1])
        self.ops.append((op_type, domain, version, list(inputs), attrs, numOutputs, name, outs))
        self._known.update(outs)
        return outs

    def addOutputTensor(self, tid):
        if not self.hasTensor(tid):
            raise _graft.Error(f"addOutputTensor: unknown tensor '{tid}' in the subgraph")
        self.outputs.append(tid)

    def hasTensor(self, tid):
        return tid in self._known or self._parent.hasTensor(tid)

    def onnxOpsetVersion(self):
        return self._parent.onnxOpsetVersion()

    def pushAttributeScope(self, attribute, value):
        self._scopes.setdefault(attribute, []).append(value)

    def popAttributeScope(self, attribute):
        self._scopes[attribute].pop()

    def currentAttributeScope(self, attribute):
        stack = self._scopes.get(attribute)
        return stack[-1] if stack else None

    def pushNameScope(self, name):
        pass

    def popNameScope(self):
        pass

    def getInputTensorIds(self):
        return list(self.inputs)

    def getOutputTensorIds(self):
        return list(self.outputs)

    def getValueTensorIds(self):
        return [o for op in self.ops for o in op[7]]

    def __getattr__(self, name):
        if name.startswith("_"):
            raise AttributeError(name)
        raise _graft.Error(f"Builder.{name} is not available on a subgraph builder in graft: its tensors are typed "
                           "only where the subgraph is called")


def call(opset, args, num_outputs, callee, debugContext="", debugPrefix=None):
    """Adds the ops of subgraph builder ``callee`` to ``opset``'s graph with its inputs bound to
    ``args``; returns its first ``num_outputs`` outputs."""
    core = getattr(callee, "_impl", None)
    if not isinstance(core, SubgraphCore):
        raise _graft.Error("aiGraphcore.call: callee must be a builder from createSubgraphBuilder()")
    args = [args] if isinstance(args, str) else list(args)
    if len(args) != len(core.inputs):
        raise _graft.Error(f"aiGraphcore.call: the subgraph has {len(core.inputs)} inputs, got {len(args)} arguments")
    if not 1 <= int(num_outputs) <= len(core.outputs):
        raise _graft.Error(f"aiGraphcore.call: the subgraph has {len(core.outputs)} outputs, num_outputs is "
                           f"{num_outputs}")
    target = opset._builder._impl
    bound = dict(zip(core.inputs, args))
    for op_type, domain, version, inputs, attrs, n, name, outs in core.ops:
        ins = [bound.get(t, t) if t else t for t in inputs]
        got = target.addOp(op_type, domain, version, ins, attrs, n, name)
        bound.update(zip(outs, got))
    return [bound.get(t, t) for t in core.outputs[:int(num_outputs)]]
