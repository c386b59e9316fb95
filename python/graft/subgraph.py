"""Subgraph builders (``builder.createSubgraphBuilder()``) and ``aiGraphcore.call``.

A subgraph builder records the ops added to it; ``aiGraphcore.call(args, num_outputs, callee)``
adds them to the calling graph, with the subgraph's inputs bound to ``args`` and fresh names
for everything the subgraph computes. A call is therefore inlined: it runs, and trains, like the
same ops written in place (PopART's Call op has these semantics; its outlining is an IPU memory
optimisation). Tensors of the parent graph that the subgraph reads without declaring them as
inputs are read from the parent, as PopART does.
"""
import itertools

import numpy as np

from . import _graft
from .opsets import debug_name

_ids = itertools.count()


class SubgraphCore:
    """What a subgraph Builder records instead of building a graph."""

    def __init__(self, parent):
        self._parent = parent
        self._prefix = f"subgraph{next(_ids)}"
        self._count = itertools.count()
        self.inputs = []    # the formal inputs, in order
        self.fromParent = set()  # the inputs that are the parent's tensors (addInputTensorFromParentGraph)
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
        if not self._parent.hasTensor(tid):
            raise _graft.Error(f"addInputTensorFromParentGraph: the parent graph has no tensor '{tid}'")
        self.inputs.append(tid)
        self.fromParent.add(tid)
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

    def getTensorInfo(self, tid):
        """The type of a parent graph's tensor; the subgraph's own tensors are typed only where it is
        called, so they raise."""
        if tid not in self._known and self._parent.hasTensor(tid):
            return self._parent.getTensorInfo(tid)
        raise _graft.Error(f"Builder.getTensorInfo('{tid}'): the tensors of a subgraph builder are typed only where "
                           "the subgraph is called")

    def onnxOpsetVersion(self):
        return self._parent.onnxOpsetVersion()

    def pushAttributeScope(self, attribute, value):
        self._scopes.setdefault(attribute, []).append(value)

    def popAttributeScope(self, attribute):
        self._scopes[attribute].pop()

    def currentAttributeScope(self, attribute):
        stack = self._scopes.get(attribute)
        return stack[-1] if stack else None

    def setGraphName(self, name):
        self.graphName = name

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
    label = debug_name(debugContext, debugPrefix)
    if len(args) != len(core.inputs):
        raise _graft.Error(f"For CallOp '{label}', number of inputs ({len(args)}) does not match that of the callee "
                           f"subgraph ({len(core.inputs)})")
    if int(num_outputs) != len(core.outputs):
        raise _graft.Error(f"For CallOp '{label}', number of outputs ({num_outputs}) does not match that of the callee "
                           f"subgraph ({len(core.outputs)})")
    target = opset._builder._impl
    bound = dict(zip(core.inputs, args))
    for op_type, domain, version, inputs, attrs, n, name, outs in core.ops:
        ins = [bound.get(t, t) if t else t for t in inputs]
        got = target.addOp(op_type, domain, version, ins, attrs, n, name)
        bound.update(zip(outs, got))
    return [bound.get(t, t) for t in core.outputs[:int(num_outputs)]]


def _core_of(builder, what):
    core = getattr(builder, "_impl", None)
    if not isinstance(core, SubgraphCore):
        raise _graft.Error(f"{what}: the body must be a builder from createSubgraphBuilder()")
    return core


def _replay(target, core, args):
    """Adds the ops of `core` to `target` with its formal inputs bound to `args`; returns its outputs."""
    bound = dict(zip(core.inputs, args))
    for op_type, domain, version, inputs, attrs, n, name, outs in core.ops:
        got = target.addOp(op_type, domain, version, [bound.get(t, t) if t else t for t in inputs], attrs, n, name)
        bound.update(zip(outs, got))
    return [bound.get(t, t) for t in core.outputs]


def _const(target, version, value):
    return target.addOp("Constant", "", version, [], {"value": np.asarray(value)}, 1, "")[0]


def _unsqueeze(target, version, t, axis):
    if version >= 13:
        return target.addOp("Unsqueeze", "", version, [t, _const(target, version, np.array([axis], np.int64))], {}, 1,
                            "")[0]
    return target.addOp("Unsqueeze", "", version, [t], {"axes": [axis]}, 1, "")[0]


def logical_if(opset, args, num_outputs, else_branch, then_branch, debugContext="", debugPrefix=None):
    """ONNX If built from two subgraph builders. graft adds both branches to the graph and selects
    with Where(cond, then, else): the value (and the gradient, which reaches only the taken branch)
    is If's, provided both branches give outputs of one shape and raise no error."""
    then_core = _core_of(then_branch, "logical_if")
    else_core = _core_of(else_branch, "logical_if")
    for core, which in ((then_core, "then_branch"), (else_core, "else_branch")):
        own = [t for t in core.inputs if t not in core.fromParent]
        if own:
            raise _graft.Error(f"logical_if: {which} has inputs {own} of its own; If branches take none (they read "
                               "the tensors of the enclosing graph, or name them with addInputTensorFromParentGraph)")
        if len(core.outputs) < num_outputs:
            raise _graft.Error(f"logical_if: {which} has {len(core.outputs)} outputs, num_outputs is {num_outputs}")
    args = [args] if isinstance(args, str) else list(args)
    if len(args) != 1:
        raise _graft.Error(f"logical_if takes one input (the condition), got {len(args)}")
    target = opset._builder._impl
    then_outs = _replay(target, then_core, list(then_core.inputs))
    else_outs = _replay(target, else_core, list(else_core.inputs))
    outs = []
    for t, e in zip(then_outs[:num_outputs], else_outs[:num_outputs]):
        # Inside a subgraph builder the types are known only where it is called; the check then
        # happens when Where's type is inferred there.
        if not isinstance(target, SubgraphCore) and target.hasTensor(t) and target.hasTensor(e):
            ti, ei = target.getTensorInfo(t), target.getTensorInfo(e)
            if ti.hasShape() and ei.hasShape() and ti.dims() != ei.dims():
                raise _graft.Error(f"logical_if: the branches' outputs '{t}' {ti.dims()} and '{e}' {ei.dims()} differ "
                                   "in shape; graft's If needs branches of one shape")
        outs.append(target.addOp("Where", "", opset.version, [args[0], t, e], {}, 1,
                                 debug_name(debugContext, debugPrefix))[0])
    return outs


def scan(opset, args, num_outputs, body, num_scan_inputs, scan_input_axes=(), scan_input_directions=(),
         scan_output_axes=(), scan_output_directions=(), debugContext="", debugPrefix=None):
    """PopART's Scan built from a subgraph builder, unrolled over the scanned axis (its length must
    be known when the op is added): each iteration's body is added to the graph, so it trains like
    the unrolled loop. As in PopART, the body sees each scan input's slice with the scanned axis
    kept (size 1), and the scan outputs are the iterations' outputs concatenated along their axis."""
    core = _core_of(body, "scan")
    target = opset._builder._impl
    v = opset.version
    args = [args] if isinstance(args, str) else list(args)
    k = int(num_scan_inputs)
    n = len(args) - k
    if k < 1 or n < 0:
        raise _graft.Error(f"scan: num_scan_inputs is {k} with {len(args)} inputs")
    if len(core.inputs) != len(args):
        raise _graft.Error(f"scan: the body has {len(core.inputs)} inputs, the op {len(args)}")
    m = len(core.outputs) - n
    if m < 0:
        raise _graft.Error(f"scan: the body has {len(core.outputs)} outputs, fewer than its {n} states")
    in_axes = list(scan_input_axes) or [0] * k
    in_dirs = list(scan_input_directions) or [0] * k
    out_axes = list(scan_output_axes) or [0] * m
    out_dirs = list(scan_output_directions) or [0] * m
    xs = args[n:]
    lengths = set()
    for x, axis in zip(xs, in_axes):
        shape = target.getTensorShape(x)
        lengths.add(shape[axis % len(shape)])
    if len(lengths) != 1:
        raise _graft.Error(f"scan: the scan inputs have different lengths along their scan axes: {sorted(lengths)}")
    length = lengths.pop()
    states = args[:n]
    ys = [[] for _ in range(m)]
    for t in range(length):
        slices = []
        for x, axis, d in zip(xs, in_axes, in_dirs):
            # PopART's Scan keeps the scanned axis (size 1) in each slice and concatenates the
            # iterations' outputs along the output axis.
            index = _const(target, v, np.array([length - 1 - t if d else t], np.int64))
            slices.append(target.addOp("Gather", "", v, [x, index], {"axis": int(axis)}, 1, "")[0])
        outs = _replay(target, core, states + slices)
        states = outs[:n]
        for j in range(m):
            ys[j].append(outs[n + j])
    results = list(states)
    for j in range(m):
        items = ys[j][::-1] if out_dirs[j] else ys[j]
        rank = len(target.getTensorShape(items[0]))
        axis = out_axes[j] % max(rank, 1)
        parts = items if rank else [_unsqueeze(target, v, y, 0) for y in items]
        results.append(target.addOp("Concat", "", v, parts, {"axis": axis}, 1, debug_name(debugContext, debugPrefix))[0])
    return results[:int(num_outputs)]


def _constant_of(builder, tid):
    """The value of ``tid`` when it is an aiOnnx.constant of ``builder`` or of a builder it is a
    subgraph of; None otherwise."""
    while builder is not None:
        constants = builder.__dict__.get("_constants", {})
        if tid in constants:
            return np.asarray(constants[tid])
        builder = builder.__dict__.get("_parentBuilder")
    return None


def loop(opset, args, num_outputs, body, debugContext="", debugPrefix=None):
    """ONNX Loop built from a subgraph builder, unrolled: the trip count ``args[0]`` must be a
    constant (aiOnnx.constant of this builder or of one it is a subgraph of). Each iteration's body
    is added to the graph. When the body computes its condition (a loop that may stop early), the
    iterations after the condition turned false keep the loop-carried values unchanged (Where), so
    the results are Loop's; scan outputs then have a length that depends on the data, which an
    unrolled loop cannot give, and are refused."""
    core = _core_of(body, "loop")
    target = opset._builder._impl
    v = opset.version
    args = [args] if isinstance(args, str) else list(args)
    if len(args) < 2:
        raise _graft.Error(f"loop takes the trip count, the condition and the loop-carried values, got {len(args)} inputs")
    trips = _constant_of(opset._builder, args[0]) if args[0] else None
    if trips is None:
        raise _graft.Error("loop: graft unrolls Loop, so the trip count must be a constant of the builder "
                           "(aiOnnx.constant); a computed trip count is not supported")
    trips = int(trips.reshape(-1)[0])
    if len(core.inputs) != len(args):
        raise _graft.Error(f"loop: the body takes {len(core.inputs)} inputs (iteration, condition, values...), the "
                           f"loop has {len(args)}")
    if len(core.outputs) < len(args) - 1:
        raise _graft.Error(f"loop: the body gives {len(core.outputs)} outputs; it must give its condition and the "
                           f"{len(args) - 2} loop-carried values")
    n = len(args) - 2
    states = args[2:]
    num_scans = len(core.outputs) - 1 - n
    cond_value = _constant_of(opset._builder, args[1]) if args[1] else np.array(True)
    # running: the tensor saying whether the loop still runs (None while it surely does).
    running = None if cond_value is not None and bool(cond_value.reshape(-1)[0]) else args[1]
    if cond_value is not None and not bool(cond_value.reshape(-1)[0]):
        trips = 0  # the condition is false before the first iteration
    computes_condition = core.outputs[0] != core.inputs[1]
    if (computes_condition or running is not None) and num_scans:
        raise _graft.Error("loop: a loop that may stop early has scan outputs whose length depends on the data; "
                           "graft unrolls Loop and cannot give them")
    scans = [[] for _ in range(num_scans)]
    for i in range(trips):
        cond_in = running if running is not None else (args[1] or _const(target, v, np.array(True)))
        outs = _replay(target, core, [_const(target, v, np.array(i, np.int64)), cond_in] + states)
        new_states = outs[1:1 + n]
        if running is not None:
            new_states = [target.addOp("Where", "", v, [running, new, old], {}, 1, "")[0]
                          for new, old in zip(new_states, states)]
        states = new_states
        if computes_condition:
            running = outs[0] if running is None else target.addOp("And", "", v, [running, outs[0]], {}, 1, "")[0]
        for j, t in enumerate(outs[1 + n:]):
            scans[j].append(t)
    results = list(states)
    for items in scans:
        if not items:
            raise _graft.Error("loop: a loop with scan outputs needs at least one iteration")
        parts = [_unsqueeze(target, v, y, 0) for y in items]
        results.append(target.addOp("Concat", "", v, parts, {"axis": 0}, 1, debug_name(debugContext, debugPrefix))[0])
    return results[:int(num_outputs)]


def onnx_methods():
    """Methods of builder.aiOnnx that take subgraph builders."""
    return {"logical_if": logical_if, "scan": scan, "loop": loop}
