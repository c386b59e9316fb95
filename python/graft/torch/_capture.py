"""Capture: a torch module called with example inputs becomes an ONNX model graft can compile.

The exporter choice and its settings live here and nowhere else (EXPORTER below).
"""
import contextlib
import io
import re
import threading
import warnings

import numpy as np
import torch
from torch.utils import _pytree as pytree

from .. import _graft

# ONE place for how graft.torch captures a module. graft loads ONNX IR <= 8 / opset <= 17 today
# (Debian's libonnx 1.12), so the TorchScript exporter (dynamo=False) at opset 17 it is: it keeps
# parameters as initializers named by their state_dict keys. Once graft reads modern ONNX (IR 10,
# opset 2x), the torch.export-based exporter (dynamo=True, which needs onnxscript) can be switched
# in here; docs/torch.md records the decision.
EXPORTER = {"dynamo": False, "opset_version": 17}

_state = threading.local()


def capturing():
    """True while graft.torch traces a module (ops record what they mark, e.g. identity_loss)."""
    return getattr(_state, "ctx", None) is not None


def context():
    return getattr(_state, "ctx", None)


class _CaptureContext:
    def __init__(self):
        self.losses = []
        self.recompute = False
        self.blocks = []  # (user_id, ipu_id) of each block met, in trace order
        self.active_block = None  # the poptorch.Block being traced


class Capture:
    """One captured graph: the ONNX bytes and how torch's inputs, outputs and weights map onto it."""

    def __init__(self):
        self.onnx = None  # onnx.ModelProto (edited before compiling)
        self.input_ids = []  # ONNX input names, one per flat tensor input (None: unused by the graph)
        self.output_ids = []  # ONNX names of the tensor outputs, in flat order
        self.out_spec = None
        self.out_leaves = []  # per flat output leaf: index into output_ids, or ("const", value)
        self.loss_id = None
        self.weights = {}  # ONNX initializer name -> state_dict key (trained or running stats)
        self.fed = {}  # ONNX input name -> state_dict key (frozen parameters and buffers)
        self.recompute = False
        self.blocks = []  # (user_id, ipu_id) per block, in trace order
        self.block_of_node = []  # per node of onnx: index into blocks, or None


class _Flat(torch.nn.Module):
    """Calls the user's module with unflattened inputs and returns its tensor outputs flat, then the
    terms marked with identity_loss."""

    def __init__(self, model, in_spec, in_consts, record):
        super().__init__()
        self.model = model
        self._in_spec = in_spec
        self._in_consts = in_consts
        self._record = record

    def forward(self, *tensors):
        it = iter(tensors)
        # Each input is cloned first: the exporter mishandles in-place ops on graph inputs (x += y,
        # y.copy_(x)), which it converts correctly on any other tensor.
        leaves = [next(it).clone() if c is _TENSOR else c for c in self._in_consts]
        args, kwargs = pytree.tree_unflatten(leaves, self._in_spec)
        try:
            with _SetItemMode():
                out = self.model(*args, **kwargs)
        except Exception as e:
            # The module's own error (torch refusing an argument, an assertion in forward): the
            # capture re-raises it unchanged, as running the module in torch would.
            self._record["forward_error"] = e
            raise
        flat, spec = pytree.tree_flatten(out)
        self._record["out_spec"] = spec
        self._record["out_leaves"] = [_TENSOR if isinstance(v, torch.Tensor) else v for v in flat]
        ctx = context()
        self._record["n_losses"] = len(ctx.losses)
        return tuple(v for v in flat if isinstance(v, torch.Tensor)) + tuple(ctx.losses)


_TENSOR = object()


class _SetItemMode(torch.overrides.TorchFunctionMode):
    """While a module is traced, ``t[key] = v`` with tensor indices becomes ops the exporter
    converts for any index layout: the exporter takes only consecutive 1-d index tensors, and
    mishandles assignments through a slice (``t[:, idx] = v``).

    - Integer tensor indices (with slices and ints in any order): the flat positions the key
      selects are ``arange(t.numel()).reshape(t.shape)[key]``, so torch itself works out the
      indexing; ``v`` broadcast to that shape is scattered there (ScatterND) and copied into t.
    - One boolean mask over t's leading dimensions, with ``v`` broadcastable to the remaining
      ones: ``where(mask, v, t)``. (A ``v`` with one row per selected element has a data-dependent
      shape and is left to the exporter.)"""

    def __torch_function__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        if func is torch.Tensor.__setitem__ and len(args) == 3 and not kwargs:
            t, key, v = args
            if isinstance(t, torch.Tensor) and _assign(t, key, v):
                return None
        return func(*args, **kwargs)


def _assign(t, key, v):
    """Performs ``t[key] = v`` as described in _SetItemMode; False where it does not apply."""
    items = key if isinstance(key, tuple) else (key,)
    tensors = [k for k in items if isinstance(k, torch.Tensor) and k.dim() > 0]
    if not tensors or any(k is None or k is Ellipsis for k in items):
        return False
    value = torch.as_tensor(v, dtype=t.dtype)
    if any(k.dtype == torch.bool for k in tensors):
        if len(items) != 1 or items[0].dim() > t.dim():
            return False
        mask = items[0]
        rest = list(t.shape[mask.dim():])
        try:
            torch.broadcast_shapes(tuple(value.shape), tuple(rest))
        except RuntimeError:
            return False
        if value.numel() == 1:
            value = value.reshape(())
        elif value.dim() > len(rest):
            return False
        m = mask.reshape(list(mask.shape) + [1] * (t.dim() - mask.dim()))
        t.copy_(torch.where(m, value, t))
        return True
    if any(k.is_floating_point() or k.is_complex() for k in tensors):
        return False  # torch's own error
    positions = torch.arange(t.numel()).reshape(t.shape)[key]
    updates = value.expand(positions.shape).reshape(-1)
    t.copy_(t.reshape(-1).index_put((positions.reshape(-1),), updates).reshape(t.shape))
    return True


def flatten_inputs(args, kwargs):
    """(flat tensors, spec, per-leaf constants with _TENSOR for tensors)."""
    leaves, spec = pytree.tree_flatten((tuple(args), dict(kwargs)))
    consts = [_TENSOR if isinstance(v, torch.Tensor) else v for v in leaves]
    return [v for v in leaves if isinstance(v, torch.Tensor)], spec, consts


def _named_state(model):
    """state_dict key -> tensor, for parameters and buffers (shared tensors under their first name)."""
    out, seen = {}, set()
    # torch.nn.Module's own methods: the lazy-weights wrapper class would synchronise first.
    for name, t in list(torch.nn.Module.named_parameters(model, remove_duplicate=False)) + list(
            torch.nn.Module.named_buffers(model, remove_duplicate=False)):
        if t is None or id(t) in seen:
            continue
        seen.add(id(t))
        out[name] = t
    return out


@contextlib.contextmanager
def _markers(state):
    """Fills every floating-point parameter and buffer with distinct random values while the module
    is traced, and puts the real values back afterwards. Two reasons: the exporter merges
    initializers of equal value (a fresh LayerNorm's ones with a BatchNorm's running_var, zero
    biases with each other), which would train them as one weight; and distinct values let
    initializers be matched to state_dict entries by content whatever the exporter calls them.
    Tracing also runs the module, so BatchNorm's running statistics and torch's random state are
    restored too."""
    saved = {k: t.detach().clone() for k, t in state.items()}
    rng_state = torch.get_rng_state()
    gen = torch.Generator().manual_seed(0x5EED)
    markers = {}
    with torch.no_grad():
        for k, t in state.items():
            if t.is_floating_point() and t.numel() > 0:
                m = (torch.rand(t.shape, generator=gen, dtype=torch.float64) + 1.0 + len(markers)).to(t.dtype)
                t.copy_(m)
                markers[k] = m.numpy().tobytes()
    try:
        yield markers
    finally:
        with torch.no_grad():
            for k, t in state.items():
                t.copy_(saved[k])
        torch.set_rng_state(rng_state)


_OP_RE = re.compile(r"(aten::[A-Za-z0-9_]+|prim::[A-Za-z0-9_]+|'[a-z_]+')")


def _export_error(model, exc):
    """graft.Error naming the torch op the exporter could not convert, with the usual fix."""
    msg = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
    ops = _OP_RE.findall(str(exc))
    what = f"torch op {ops[0]}" if ops else "an op"
    return _graft.Error(f"graft.torch could not capture {type(model).__name__}: torch.onnx.export (TorchScript, "
                        f"opset {EXPORTER['opset_version']}) failed on {what}: {msg}. Fix: write that part of "
                        "forward with ops the exporter supports at this opset (or as poptorch.custom_op), or move "
                        "data-dependent Python control flow out of forward")


def capture(model, example, in_spec, in_consts, training):
    """Traces ``model`` on the flat example tensors (one micro-batch) and returns a Capture."""
    import onnx  # noqa: PLC0415  (torch's exporter needs it as well)

    from . import _symbolic  # noqa: PLC0415

    _symbolic.register()

    record = {}
    flat = _Flat(model, in_spec, in_consts, record)
    state = _named_state(model)
    names = [f"input_{i}" for i in range(len(example))]
    ctx = _CaptureContext()
    f = io.BytesIO()
    # A trainingModel keeps each submodule's own mode (PRESERVE): train() modules export their
    # training behaviour (BatchNorm batch statistics, Dropout), eval() ones their inference one.
    mode = torch.onnx.TrainingMode.PRESERVE if training else torch.onnx.TrainingMode.EVAL
    modes = [(m, m.training) for m in model.modules()]  # the exporter may switch them
    _state.ctx = ctx
    try:
        with _markers(state) as markers, warnings.catch_warnings():
            warnings.simplefilter("ignore")
            torch.onnx.export(flat, tuple(example), f, input_names=names, do_constant_folding=False,
                              training=mode, export_params=True, keep_initializers_as_inputs=False, **EXPORTER)
    except Exception as exc:  # noqa: BLE001  (the exporter raises many kinds)
        err = record.get("forward_error")
        if err is not None:
            raise err  # noqa: B904  (the module's own exception, as torch raises it)
        if isinstance(exc, _graft.Error):
            raise
        raise _export_error(model, exc) from exc
    finally:
        _state.ctx = None
        for m, was in modes:
            m.training = was
    proto = onnx.load_from_string(f.getvalue())
    cap = Capture()
    n_tensor_out = sum(1 for v in record["out_leaves"] if v is _TENSOR)
    outs = [o.name for o in proto.graph.output]
    if len(outs) != n_tensor_out + record["n_losses"]:
        raise _graft.Error(f"graft.torch: {type(model).__name__} returned {n_tensor_out} tensors and marked "
                           f"{record['n_losses']} losses, but the captured graph has {len(outs)} outputs (an output "
                           "that is also an input, or a repeated output, cannot be captured; return a copy)")
    cap.output_ids = outs[:n_tensor_out]
    loss_ids = outs[n_tensor_out:]
    cap.out_spec = record["out_spec"]
    k = 0
    for v in record["out_leaves"]:
        if v is _TENSOR:
            cap.out_leaves.append(k)
            k += 1
        else:
            cap.out_leaves.append(("const", v))
    graph_inputs = {i.name for i in proto.graph.input}
    cap.input_ids = [n if n in graph_inputs else None for n in names]
    cap.loss_id = loss_ids[-1] if loss_ids else None
    cap.recompute = ctx.recompute
    _bool_arithmetic(proto)
    if training:
        _inference_batchnorms(proto)
    cap.weights, cap.fed = _map_weights(proto, state, markers, training)
    if ctx.blocks:
        cap.blocks = list(ctx.blocks)
        cap.block_of_node = _annotate_blocks(proto, ctx.blocks)
    cap.onnx = proto
    return cap


def _bool_arithmetic(proto):
    """torch adds and multiplies bool tensors (logical or / and); the exporter writes ONNX Add and
    Mul, which ONNX defines for numbers only: those become Or and And. A Not of numbers (how the
    exporter writes torch.all of them) gets a Cast to bool first."""
    from onnx import TensorProto, helper, shape_inference  # noqa: PLC0415

    candidates = [n for n in proto.graph.node if n.op_type in ("Add", "Mul", "Not") and not n.domain]
    if not candidates:
        return
    try:
        inferred = shape_inference.infer_shapes(proto)
    except Exception:  # noqa: BLE001  (leave the graph to graft's own checks)
        return
    types = {v.name: v.type.tensor_type.elem_type for v in list(inferred.graph.value_info) +
             list(inferred.graph.input) + list(inferred.graph.output)}
    for n in proto.graph.node:
        for a in n.attribute:
            if n.op_type == "Constant" and a.name == "value":
                types[n.output[0]] = a.t.data_type
    for init in proto.graph.initializer:
        types[init.name] = init.data_type
    casts = {}
    for node in candidates:
        if node.op_type == "Not":
            # torch.all of a number tensor: the exporter negates the numbers themselves.
            t = types.get(node.input[0])
            if t is not None and t != TensorProto.BOOL:
                cast = helper.make_node("Cast", [node.input[0]], [node.output[0] + "/graft_bool"], to=TensorProto.BOOL,
                                        name=(node.name or node.output[0]) + "/graft_bool")
                casts[id(node)] = cast
                node.input[0] = cast.output[0]
        elif all(types.get(i) == TensorProto.BOOL for i in node.input):
            node.op_type = "Or" if node.op_type == "Add" else "And"
    if casts:
        nodes = []
        for node in proto.graph.node:
            if id(node) in casts:
                nodes.append(casts[id(node)])
            nodes.append(node)
        del proto.graph.node[:]
        proto.graph.node.extend(nodes)


def _inference_batchnorms(proto):
    """A BatchNorm in eval() inside a trainingModel normalizes with its running statistics. The
    exporter writes it as a BatchNormalization without training outputs, which graft's training
    sessions train with batch statistics (PopART's rule): it is written out as the arithmetic
    (x - mean) / sqrt(var + eps) * scale + bias instead, the statistics reshaped to [C, 1, ...]."""
    from onnx import helper, shape_inference  # noqa: PLC0415

    targets = [n for n in proto.graph.node if n.op_type == "BatchNormalization" and len(n.output) == 1]
    if not targets:
        return
    inferred = shape_inference.infer_shapes(proto)
    ranks = {v.name: len(v.type.tensor_type.shape.dim) for v in list(inferred.graph.value_info) +
             list(inferred.graph.input) + list(inferred.graph.output) if v.type.tensor_type.HasField("shape")}
    nodes = []
    for node in proto.graph.node:
        if node not in targets:
            nodes.append(node)
            continue
        x, scale, bias, mean, var = node.input
        rank = ranks.get(x)
        if rank is None:
            raise _graft.Error(f"graft.torch: {node.name}: the rank of the input of an eval() BatchNorm in a "
                               "trainingModel is unknown")
        eps = next((a.f for a in node.attribute if a.name == "epsilon"), 1e-5)
        base = node.name or node.output[0]

        def make(op, inputs, suffix, **attrs):
            out = f"{base}/graft_{suffix}"
            nodes.append(helper.make_node(op, inputs, [out], name=out, **attrs))
            return out

        shape = make("Constant", [], "shape", value=helper.make_tensor(
            "shape", 7, [rank - 1], [-1] + [1] * (rank - 2)))
        per = [make("Reshape", [t, shape], f"reshape{i}") for i, t in enumerate((scale, bias, mean, var))]
        eps_t = make("CastLike", [make("Constant", [], "eps", value=helper.make_tensor("eps", 1, [], [eps])), x],
                     "eps_cast")
        std = make("Sqrt", [make("Add", [per[3], eps_t], "var_eps")], "std")
        normed = make("Div", [make("Sub", [x, per[2]], "centered"), std], "normed")
        scaled = make("Mul", [normed, per[0]], "scaled")
        nodes.append(helper.make_node("Add", [scaled, per[1]], [node.output[0]], name=f"{base}/graft_out"))
    del proto.graph.node[:]
    proto.graph.node.extend(nodes)


def _map_weights(proto, state, markers, training):
    """Sorts the graph's initializers: trained weights and training-mode BatchNorm running
    statistics stay initializers (graft trains / updates them); frozen parameters and other buffers
    become graph inputs fed from torch at each call (graft trains every float initializer the loss
    depends on, torch does not train these); exporter constants become Constant nodes."""
    from onnx import helper, numpy_helper  # noqa: PLC0415

    by_bytes = {b: k for k, b in markers.items()}
    trainable = {k for k, t in state.items() if isinstance(t, torch.nn.Parameter) and t.requires_grad}
    running = set()
    for node in proto.graph.node:
        # A BatchNormalization in training mode (it outputs the updated running statistics).
        if node.op_type == "BatchNormalization" and training and len(node.output) > 1:
            running.update(node.input[3:5])
    weights, fed, consts = {}, {}, []
    keep = []
    for init in proto.graph.initializer:
        arr = numpy_helper.to_array(init)
        key = by_bytes.get(np.ascontiguousarray(arr).tobytes()) if arr.dtype.kind == "f" else None
        if key is None and arr.dtype.kind == "f":
            # By name: tracing a training-mode BatchNorm updates its running statistics, so their
            # exported values are no longer the markers (the exporter names them by state_dict key).
            name = init.name[len("model."):] if init.name.startswith("model.") else init.name
            key = name if name in state and tuple(state[name].shape) == tuple(arr.shape) else None
        if key is None:
            consts.append(init)
        elif key in trainable or init.name in running:
            weights[init.name] = key
            keep.append(init)
        else:
            fed[init.name] = key
            proto.graph.input.append(helper.make_tensor_value_info(init.name, init.data_type, list(init.dims)))
    del proto.graph.initializer[:]
    proto.graph.initializer.extend(keep)
    const_nodes = [helper.make_node("Constant", [], [c.name], value=c, name=f"graft_const/{c.name}") for c in consts]
    nodes = const_nodes + list(proto.graph.node)
    del proto.graph.node[:]
    proto.graph.node.extend(nodes)
    return weights, fed


MARKER_DOMAIN = "graft_torch"


class _BlockMarker(torch.autograd.Function):
    """Identity on the first tensor a block's first module receives, exported as a marker node:
    after export the markers, in trace order, split the nodes into blocks and are removed."""

    @staticmethod
    def forward(ctx, x, index):  # noqa: ARG004
        return x.clone()

    @staticmethod
    def backward(ctx, dy):  # noqa: ARG004
        return dy, None

    @staticmethod
    def symbolic(g, x, index):
        return g.op(f"{MARKER_DOMAIN}::BlockMarker", x, index_i=index)


def mark_block(args, block):
    """Applies the marker for ``block`` (an index into the capture's block list) to the first
    tensor of ``args``; returns the new args."""
    ctx = context()
    if ctx is None:
        return args
    if block not in ctx.blocks:
        ctx.blocks.append(block)
    index = ctx.blocks.index(block)
    args = list(args)
    for i, a in enumerate(args):
        if isinstance(a, torch.Tensor):
            args[i] = _BlockMarker.apply(a, index)
            return tuple(args)
    raise _graft.Error(f"poptorch block {block[0]!r}: its first module must take a tensor argument (graft.torch "
                       "marks where a block starts on that tensor)")


def _annotate_blocks(proto, blocks):
    """Removes the block markers and returns, per remaining node, the index of its block: a block
    starts at its marker and runs until the next one, as in PopTorch; nodes before the first
    marker belong to block None (PopTorch's block 0 on IPU 0)."""
    nodes = list(proto.graph.node)
    rename = {}
    kept, assignment, current = [], [], None
    for node in nodes:
        if node.domain == MARKER_DOMAIN:
            current = next(a.i for a in node.attribute if a.name == "index")
            rename[node.output[0]] = node.input[0]
            continue
        kept.append(node)
        assignment.append(current)
    for node in kept:
        for i, name in enumerate(node.input):
            while name in rename:
                name = rename[name]
            node.input[i] = name
    for out in proto.graph.output:
        name = out.name
        if name in rename:
            raise _graft.Error("graft.torch: a block's marker tensor is returned unchanged; return a computed tensor")
    del proto.graph.node[:]
    proto.graph.node.extend(kept)
    keep_opsets = [o for o in proto.opset_import if o.domain != MARKER_DOMAIN]
    del proto.opset_import[:]
    proto.opset_import.extend(keep_opsets)
    return assignment
