"""``builder.aiGraphcore`` methods with PopART's signatures for graft's ai.graphcore ops.

Each method adds one ai.graphcore node; the op's semantics, type inference, kernel and gradient
are graft's (src/ops/graphcore_*.cpp). The argument names and defaults are PopART's.
"""
import numpy as np

from . import _graft
from .opsets import _as_int, _tensor_id, check_axes, debug_name


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
    """Median of ``args[0]`` over ``axes`` (all when None, none when []): returns [values, INT32 indices]. Of an
    even count the lower median; the index is the position within the reduced axes, flattened."""
    attrs = {"keepdims": _as_int(keepdims, "reducemedian: keepdims")}
    if axes is not None:
        attrs["axes"] = _ints(axes, "reducemedian: axes")
        inputs = [args] if isinstance(args, str) else list(args)
        if inputs:
            check_axes(self._builder._impl, inputs[0], attrs["axes"])
    return _add(self, "ReduceMedian", args, attrs, 2, debugContext, debugPrefix)


def scale(self, args, scale, debugContext="", debugPrefix=None):
    """``args[0] * scale``."""
    return _add(self, "Scale", args, {"scale": float(scale)}, 1, debugContext, debugPrefix)


def scaledadd(self, args, scale0=1.0, scale1=1.0, debugContext="", debugPrefix=None):
    """``scale0 * args[0] + scale1 * args[1]`` (numpy broadcasting). As in PopART, ``args[2]`` and
    ``args[3]``, when given, are tensors that replace ``scale0`` and ``scale1``: the op is then
    built from ai.onnx Mul and Add, so it trains through the scales too."""
    inputs = [args] if isinstance(args, str) else list(args)
    if len(inputs) not in (2, 3, 4):
        raise _graft.Error(f"scaledadd takes 2 inputs, and optionally the scale0 and scale1 tensors, got {len(inputs)}")
    if len(inputs) == 2:
        return _add(self, "ScaledAdd", inputs, {"scale0": float(scale0), "scale1": float(scale1)}, 1, debugContext,
                    debugPrefix)
    onnx = _onnx(self)
    impl = self._builder._impl
    dtype = impl.getTensorDtypeString(inputs[0])

    def scaled(x, s, value):
        if s:
            s = onnx.cast([s], dtype) if impl.getTensorDtypeString(s) != dtype else s
            return onnx.mul([x, s])
        return x if value == 1.0 else self.scale([x], value)

    return onnx.add([scaled(inputs[0], inputs[2], float(scale0)),
                     scaled(inputs[1], inputs[3] if len(inputs) > 3 else "", float(scale1))],
                    debug_name(debugContext, debugPrefix))


def call(self, args, num_outputs, callee, debugContext="", debugPrefix=None):
    """Runs subgraph builder ``callee`` on ``args``; returns the list of its outputs."""
    from .subgraph import call as _call

    return _call(self, args, num_outputs, callee, debugContext, debugPrefix)


def _per_conv(name, values, count, spatial_of):
    """PopART's per-convolution parameter lists: one list per conv, or none at all."""
    if not values:
        return [None] * count
    values = [list(v) for v in values]
    if len(values) != count:
        raise _graft.Error(f"MultiConvOp number of {name} parameter sets ({len(values)}) does not match the number "
                           f"of input sets ({count})")
    for i, v in enumerate(values):
        want = spatial_of(i) * (2 if name == "pads" else 1)
        if len(v) != want:
            label = "pads" if name == "pads" else name
            raise _graft.Error(f"Length of {label} vector {len(v)} != number of spatial dimensions {want}")
    return values


def multiconv(self, args, dilations=(), inDilations=(), pads=(), outPads=(), strides=(),
              availableMemoryProportions=(), partialsTypes=(), planType=None, perConvReservedTiles=None,
              cycleBackOff=None, enableConvDithering=(), debugContext="", debugPrefix=None):
    """Several independent convolutions, ``args = [[data, weights(, bias)], ...]``: returns one output
    per convolution. graft adds one ai.onnx Conv per entry (PopART's MultiConv is their IPU
    co-scheduling); the IPU planning options (memory proportions, partials types, plan type,
    reserved tiles, cycle back-off, dithering) are accepted and ignored."""
    impl = self._builder._impl
    convs = [list(c) for c in args]
    for c in convs:
        if len(c) < 2:
            raise _graft.Error("MultiConvOp: each convolution must have at least two inputs - data and weights")
        if len(c) > 3:
            raise _graft.Error("MultiConvOp: each convolution can have at most three inputs - data, weights, and bias")

    def spatial_of(i):
        return len(impl.getTensorShape(convs[i][0])) - 2

    n = len(convs)
    dil = _per_conv("dilations", dilations, n, spatial_of)
    ind = _per_conv("inDilations", inDilations, n, spatial_of)
    pad = _per_conv("pads", pads, n, spatial_of)
    opad = _per_conv("outPads", outPads, n, spatial_of)
    strd = _per_conv("strides", strides, n, spatial_of)
    onnx = self._builder.aiOnnx
    name = debug_name(debugContext, debugPrefix)
    outs = []
    for i, c in enumerate(convs):
        for what, v in (("inDilations", ind[i]), ("outPads", opad[i])):
            if v is not None and any(x != (1 if what == "inDilations" else 0) for x in v):
                raise _graft.Error(f"multiconv: {what} {v} (input dilation / output padding) is not supported by "
                                   "graft's Conv")
        data_shape = impl.getTensorShape(c[0])
        weight_shape = impl.getTensorShape(c[1])
        group = data_shape[1] // weight_shape[1] if weight_shape[1] else 1
        attrs = {"group": group}
        if dil[i] is not None:
            attrs["dilations"] = dil[i]
        if pad[i] is not None:
            attrs["pads"] = pad[i]
        if strd[i] is not None:
            attrs["strides"] = strd[i]
        outs.append(onnx.conv(c, debugContext=f"{name}_{i}" if name else "", **attrs))
    return outs


def bucketize(self, args, right=0, debugContext="", debugPrefix=None):
    """The INT32 bucket index of each element of ``args[0]`` among the sorted 1-D ``args[1]``
    (torch.bucketize)."""
    return _add(self, "Bucketize", args, {"right": _as_int(right, "bucketize: right")}, 1, debugContext, debugPrefix)


def sort(self, args, axis=-1, descending=0, stable=0, debugContext="", debugPrefix=None):
    """[values, INT32 indices] of ``args[0]`` sorted along ``axis`` (always stable)."""
    attrs = {"axis": _as_int(axis, "sort: axis"), "descending": _as_int(descending, "sort: descending"),
             "stable": _as_int(stable, "sort: stable")}
    return _add(self, "Sort", args, attrs, 2, debugContext, debugPrefix)


# ---- ops that are one ai.onnx op with constant operands ---------------------------------------


def _onnx(self):
    return self._builder.aiOnnx


def _const64(self, values, name=""):
    return _onnx(self).constant(np.asarray(values, dtype=np.int64), name)


def _slice(self, x, starts, ends, axes, steps=None, name=""):
    onnx = _onnx(self)
    if onnx.version < 10:
        if steps is not None and any(s != 1 for s in steps):
            raise _graft.Error(f"slice with steps {steps} needs ai.onnx opset 10 or later, the model uses {onnx.version}")
        return onnx.slice([x], axes=axes, starts=starts, ends=ends, debugContext=name)
    ins = [x, _const64(self, starts), _const64(self, ends), _const64(self, axes)]
    if steps is not None:
        ins.append(_const64(self, steps))
    return onnx.slice(ins, debugContext=name)


def slice_(self, args, ends, starts, axes, debugContext="", debugPrefix=None):
    """PopART's Slice with constant ``starts``, ``ends`` and ``axes`` (an ai.onnx Slice)."""
    inputs = [args] if isinstance(args, str) else list(args)
    return _slice(self, inputs[0], _ints(starts, "slice: starts"), _ints(ends, "slice: ends"), _ints(axes, "slice: axes"),
                  None, debug_name(debugContext, debugPrefix))


def subsample(self, args, strides, debugContext="", debugPrefix=None):
    """Every ``strides[d]``-th element along each axis d, from the first (an ai.onnx Slice with steps)."""
    inputs = [args] if isinstance(args, str) else list(args)
    strides = _ints(strides, "subsample: strides")
    shape = self._builder._impl.getTensorShape(inputs[0])
    if len(strides) != len(shape):
        raise _graft.Error(f"subsample: {len(strides)} strides for a rank-{len(shape)} input")
    for i, st in enumerate(strides):
        if st < 1:
            raise _graft.Error(f"Strides invalid. {st} stride at index {i}")
    n = len(shape)
    return _slice(self, inputs[0], [0] * n, list(shape), list(range(n)), strides, debug_name(debugContext, debugPrefix))


def reverse(self, args, dimensions, debugContext="", debugPrefix=None):
    """``args[0]`` reversed along each axis in ``dimensions`` (an ai.onnx Slice with step -1)."""
    inputs = [args] if isinstance(args, str) else list(args)
    dims = _ints(dimensions, "reverse: dimensions")
    shape = self._builder._impl.getTensorShape(inputs[0])
    for d in dims:
        if d < 0:
            raise _graft.Error(f"ReverseOp: invalid dimension '{d}'. Only positive dimensions are supported")
        if d >= len(shape):
            raise _graft.Error(f"ReverseOp: invalid dimension '{d}' for input tensor of rank {len(shape)}")
        if dims.count(d) > 1:
            raise _graft.Error(f"ReverseOp: Dimension {d} appears multiple times in the list of dimensions")
    big = np.iinfo(np.int64).max
    return _slice(self, inputs[0], [-1] * len(dims), [-big] * len(dims), dims, [-1] * len(dims),
                  debug_name(debugContext, debugPrefix))


def reshape(self, args, shape, debugContext="", debugPrefix=None):
    """``args[0]`` reshaped to the constant ``shape`` (an ai.onnx Reshape)."""
    inputs = [args] if isinstance(args, str) else list(args)
    shape = _ints(shape, "reshape: shape")
    if sum(1 for d in shape if d == -1) > 1:
        raise _graft.Error("shape input to ReshapeOp can only use -1 to specify one unknown dimension")
    return _onnx(self).reshape([inputs[0], _const64(self, shape)], debug_name(debugContext, debugPrefix))


def depthtospace(self, args, blocksize, mode, debugContext="", debugPrefix=None):
    """ai.onnx DepthToSpace with ``mode`` "DCR" or "CRD"."""
    onnx = _onnx(self)
    name = debug_name(debugContext, debugPrefix)
    if onnx.version < 11:
        if mode == "CRD":
            return _depthtospace_crd(self, args, int(blocksize), name)
        if mode != "DCR":
            raise _graft.Error(f"depthtospace: mode must be DCR or CRD, got '{mode}'")
        return onnx.depthtospace(args, blocksize, debugContext=name)
    return onnx.depthtospace(args, blocksize, mode=mode, debugContext=name)


def _depthtospace_crd(self, args, b, name):
    """CRD DepthToSpace before ai.onnx opset 11 (whose DepthToSpace is DCR only), from Reshape and
    Transpose: [N, C, H, W] -> [N, C/b^2, b, b, H, W] -> [N, C/b^2, H, b, W, b] -> [N, C/b^2, Hb, Wb]."""
    x = ([args] if isinstance(args, str) else list(args))[0]
    shape = self._builder._impl.getTensorShape(x)
    if len(shape) != 4 or shape[1] % (b * b):
        raise _graft.Error(f"depthtospace: the input must be [N, C, H, W] with C divisible by blocksize^2 = {b * b}, "
                           f"got {shape}")
    n, c, h, w = shape
    onnx = _onnx(self)
    split = onnx.reshape([x, _const64(self, [n, c // (b * b), b, b, h, w])])
    moved = onnx.transpose([split], perm=[0, 1, 4, 2, 5, 3])
    return onnx.reshape([moved, _const64(self, [n, c // (b * b), h * b, w * b])], debugContext=name)


def incrementmod(self, args, increment, modulus, debugContext="", debugPrefix=None):
    """``(args[0] + increment) mod modulus`` (C's fmod)."""
    return _add(self, "IncrementMod", args, {"increment": float(increment), "modulus": float(modulus)}, 1,
                debugContext, debugPrefix)


_NUMPY_OF = {"FLOAT": np.float32, "FLOAT16": np.float16, "DOUBLE": np.float64, "INT8": np.int8, "INT16": np.int16,
             "INT32": np.int32, "INT64": np.int64, "UINT8": np.uint8, "UINT16": np.uint16, "UINT32": np.uint32,
             "UINT64": np.uint64, "BOOL": np.bool_}


def init(self, shape, data_type, init_type, batch_axis=-1, debugContext="", debugPrefix=None):
    """A tensor of ``shape`` and ``data_type`` (a DataType or its name), zero-filled. PopART's
    InitType.NoInit leaves the values unspecified; graft fills zeros then too."""
    if isinstance(batch_axis, str) or hasattr(batch_axis, "name") and not isinstance(batch_axis, int):
        batch_axis, debugContext = -1, batch_axis  # init(shape, dtype, initType, debugContext)
    name = getattr(data_type, "name", data_type)
    if str(name).upper() not in _NUMPY_OF:
        raise _graft.Error(f"init: unsupported data type {data_type!r}")
    value = np.zeros(_ints(shape, "init: shape"), dtype=_NUMPY_OF[str(name).upper()])
    return _onnx(self).constant(value, debug_name(debugContext, debugPrefix))


def dynamicslice(self, args, axes, sizes, noOverlap=0, debugContext="", debugPrefix=None):
    """The slice of ``args[0]`` of ``sizes`` along ``axes``, starting at the run-time offsets
    ``args[1]`` (one per axis). An optional ``args[2]`` (PopART's slice buffer) only gives the
    output's shape. Built as one ai.onnx Gather per axis at indices offset + [0, size), so the
    shape is known when the op is added and it trains."""
    inputs = [args] if isinstance(args, str) else list(args)
    if len(inputs) not in (2, 3):
        raise _graft.Error(f"dynamicslice takes 2 or 3 inputs (tensor, offsets[, slice]), got {len(inputs)}")
    axes = _ints(axes, "dynamicslice: axes")
    sizes = _ints(sizes, "dynamicslice: sizes")
    if len(axes) != len(sizes):
        raise _graft.Error(f"dynamicslice: {len(axes)} axes but {len(sizes)} sizes")
    onnx = _onnx(self)
    offsets = onnx.cast([inputs[1]], "INT64")
    out = inputs[0]
    name = debug_name(debugContext, debugPrefix)
    for i, (axis, size) in enumerate(zip(axes, sizes)):
        start = onnx.gather([offsets, _const64(self, [i])], axis=0)
        index = onnx.add([start, _const64(self, np.arange(size))])
        out = onnx.gather([out, index], axis=axis, debugContext=name if i == len(axes) - 1 else "")
    if len(inputs) == 3:
        # The slice buffer gives the output's shape: PopART lets it leave out the size-1 axes.
        want, have = _shape_or_none(self, inputs[2]), _shape_or_none(self, out)
        if want is not None and have is not None and want != have and int(np.prod(want)) == int(np.prod(have)):
            out = onnx.reshape([out, _const64(self, want)], debugContext=name)
    return out


def _shape_or_none(self, t):
    """t's static shape, or None (not known yet, or a subgraph's tensor)."""
    try:
        shape = self._builder._impl.getTensorShape(t)
    except _graft.Error:
        return None
    return list(shape) if all(isinstance(d, int) and d >= 0 for d in shape) else None


def _region_shape(self, t, axes, sizes):
    shape = _shape_or_none(self, t)
    if shape is None:
        return None
    for axis, size in zip(axes, sizes):
        if not -len(shape) <= axis < len(shape):
            return None
        shape[axis] = size
    return shape


def _dynamic(op_type):
    def method(self, args, axes, sizes, noOverlap=0, debugContext="", debugPrefix=None):
        inputs = [args] if isinstance(args, str) else list(args)
        if len(inputs) != 3 and not (op_type == "DynamicZero" and len(inputs) == 2):
            raise _graft.Error(f"{op_type.lower()} takes 3 inputs (tensor, offsets, slice), got {len(inputs)}")
        attrs = {"axes": _ints(axes, f"{op_type}: axes"), "sizes": _ints(sizes, f"{op_type}: sizes")}
        if len(inputs) == 3 and op_type != "DynamicZero":
            # PopART takes an update without the region's leading size-1 axes ([4, 7] into a
            # [1, 4, 7] region): it is reshaped to the region.
            region = _region_shape(self, inputs[0], attrs["axes"], attrs["sizes"])
            update = _shape_or_none(self, inputs[2])
            if region is not None and update is not None and len(update) < len(region) and \
                    int(np.prod(update)) == int(np.prod(region)):
                inputs[2] = _onnx(self).reshape([inputs[2], _const64(self, region)])
        return _add(self, op_type, inputs, attrs, 1, debugContext, debugPrefix)

    method.__doc__ = {"DynamicUpdate": "args[0] with the region at run-time offsets args[1] replaced by args[2].",
                      "DynamicAdd": "args[0] with args[2] added to the region at run-time offsets args[1].",
                      "DynamicZero": "args[0] with the region at offsets args[1] set to zero: args[2]'s shape, or without "
                                   "args[2] ``sizes`` along ``axes``."}[op_type]
    return method


def sequenceslice(self, args, zeroUnused=0, debugContext="", debugPrefix=None):
    """``args = [source, destination, N, sourceOffset, destOffset]``: the destination with N[i] rows
    of the source from sourceOffset[i] copied to destOffset[i]; zeroUnused zeroes the other rows."""
    return _add(self, "SequenceSlice", args, {"zeroUnused": _as_int(zeroUnused, "sequenceslice: zeroUnused")}, 1,
                debugContext, debugPrefix)


def ctcloss(self, args, reduction=None, blank=0, outDataType="UNDEFINED", zeroInfinity=False, debugContext="",
            debugPrefix=None):
    """torch.nn.CTCLoss of ``args = [log_probs [T, N, C], targets [N, S], input_lengths [N],
    target_lengths [N]]``; ``reduction`` is a ReductionType (Mean by default). ``outDataType``
    other than "UNDEFINED" casts the loss."""
    from .opsets import _reduction

    attrs = {"reduction": _reduction(reduction), "blank": _as_int(blank, "ctcloss: blank"),
             "zeroInfinity": int(bool(zeroInfinity))}
    out = _add(self, "CtcLoss", args, attrs, 1, debugContext, debugPrefix)
    name = getattr(outDataType, "name", outDataType)
    if str(name).upper() not in ("UNDEFINED", ""):
        out = _onnx(self).cast([out], str(name).upper())
    return out


def groupedgather(self, args, axis=0, group_size=1, debugContext="", debugPrefix=None):
    """Per group g (axis 0 of both inputs): ai.onnx Gather of ``args[0][g]`` at ``args[1][g]`` along
    ``axis - 1``; the groups' results stacked."""
    from .subgraph import _unsqueeze

    data, indices = ([args] if isinstance(args, str) else list(args))
    impl = self._builder._impl
    groups = impl.getTensorShape(data)[0]
    if group_size != groups or impl.getTensorShape(indices)[0] != groups:
        raise _graft.Error(f"groupedgather: group_size {group_size}, but the data has {groups} groups and the "
                           f"indices {impl.getTensorShape(indices)[0]}")
    if axis < 1:
        raise _graft.Error(f"groupedgather: axis must be at least 1 (axis 0 holds the groups), got {axis}")
    onnx = _onnx(self)

    def group(t, g):
        part = _slice(self, t, [g], [g + 1], [0])
        if onnx.version >= 13:
            return onnx.squeeze([part, _const64(self, [0])])
        return onnx.squeeze([part], axes=[0])

    parts = []
    for g in range(groups):
        gathered = onnx.gather([group(data, g), group(indices, g)], axis=axis - 1)
        parts.append(_unsqueeze(impl, onnx.version, gathered, 0))
    return onnx.concat(parts, 0, debug_name(debugContext, debugPrefix))


def batchnormalization(self, args, num_outputs, epsilon=1e-5, momentum=0.9, debugContext="", debugPrefix=None):
    """PopART's ai.graphcore BatchNormalization: ai.onnx's opset-9 BatchNormalization ``[y, mean, var,
    saved_mean, saved_var]`` (with more than one output: batch statistics, training mode), except
    that the running variance moves with the unbiased batch variance, as PyTorch's does. Built from
    ai.onnx ops (so the builder's ai.onnx opset must be before 14, whose BatchNormalization has no
    saved outputs): var * momentum + (running var - var * momentum) * M / (M - 1), M values per
    channel."""
    inputs = [args] if isinstance(args, str) else list(args)
    if len(inputs) != 5:
        raise _graft.Error(f"batchnormalization takes 5 inputs (X, scale, B, mean, var), got {len(inputs)}")
    onnx = _onnx(self)
    name = debug_name(debugContext, debugPrefix)
    n = int(num_outputs)
    if n == 1:
        return onnx.batchnormalization(inputs, 1, epsilon, momentum, debugContext=name)
    if onnx.version >= 14:
        raise _graft.Error(f"aiGraphcore.batchnormalization with {n} outputs needs an ai.onnx opset before 14 (its "
                           f"BatchNormalization has the saved outputs), the builder uses {onnx.version}")
    outs = onnx.batchnormalization(inputs, n, epsilon, momentum, debugContext=name)
    if n < 3:
        return outs
    x_shape = _shape_or_none(self, inputs[0])
    if x_shape is None or len(x_shape) < 2:
        raise _graft.Error("aiGraphcore.batchnormalization: the unbiased running variance needs X's static shape "
                           "[N, C, ...]")
    count = int(np.prod(x_shape)) // x_shape[1]
    if count < 2:
        raise _graft.Error(f"aiGraphcore.batchnormalization: the unbiased variance needs more than one value per "
                           f"channel, X is {x_shape}")
    dtype = np.dtype(self._builder._impl.getTensorDtypeString(inputs[4]))
    var = inputs[4]
    kept = onnx.mul([var, onnx.constant(np.array(momentum, dtype))])
    moved = onnx.sub([outs[2], kept])
    unbiased = onnx.mul([moved, onnx.constant(np.array(count / (count - 1), dtype))])
    outs = list(outs)
    outs[2] = onnx.add([kept, unbiased])
    return outs


def groupnormalization(self, args, num_groups, epsilon=1e-5, debugContext="", debugPrefix=None):
    """Group normalization of ``args[0]`` [N, C, ...] with ``args[1]`` scale and ``args[2]`` bias [C]:
    returns [y, mean, inverse standard deviation], the statistics of shape [N * num_groups] (the
    variance is the biased one, as PopART's). Built from ai.onnx ops, so it trains."""
    x, scale, bias = ([args] if isinstance(args, str) else list(args))
    shape = list(self._builder._impl.getTensorShape(x))
    n, c = shape[0], shape[1]
    g = int(num_groups)
    if g < 1 or c % g:
        raise _graft.Error(f"groupnormalization: {c} channels do not split into {num_groups} groups")
    onnx = _onnx(self)
    xr = onnx.reshape([x, _const64(self, [n, g, -1])])
    mean = _reduce(self, "reducemean", xr, [2], 1)
    d = onnx.sub([xr, mean])
    var = _reduce(self, "reducemean", onnx.mul([d, d]), [2], 1)
    eps = onnx.constant(np.array([epsilon], dtype=np.dtype(self._builder._impl.getTensorDtypeString(x))))
    inv = onnx.reciprocal([onnx.sqrt([onnx.add([var, eps])])])
    normed = onnx.reshape([onnx.mul([d, inv]), _const64(self, shape)])
    bshape = [1, c] + [1] * (len(shape) - 2)
    y = onnx.add([onnx.mul([normed, onnx.reshape([scale, _const64(self, bshape)])]),
                  onnx.reshape([bias, _const64(self, bshape)])], debug_name(debugContext, debugPrefix))
    return [y, onnx.reshape([mean, _const64(self, [n * g])]), onnx.reshape([inv, _const64(self, [n * g])])]


def _squeeze(self, t, axes, name=""):
    onnx = _onnx(self)
    if onnx.version >= 13:
        return onnx.squeeze([t, _const64(self, axes)], debugContext=name)
    return onnx.squeeze([t], axes=axes, debugContext=name)


def _reduce(self, method, t, axes, keepdims, name=""):
    """ai.onnx Reduce<method> over ``axes``: an attribute before the opset that made it an input."""
    onnx = _onnx(self)
    since = 13 if method == "reducesum" else 18
    if onnx.version >= since:
        return getattr(onnx, method)([t, _const64(self, axes)], keepdims=keepdims, debugContext=name)
    return getattr(onnx, method)([t], axes=axes, keepdims=keepdims, debugContext=name)


def _inputs_of(args):
    return [args] if isinstance(args, str) else list(args)


def normalize_image(self, args, scale=1.0, debugContext="", debugPrefix=None):
    """PopART's NormalizeImage of ``args = [image [..., 3], offsets [3], scales [3]]``:
    ``(image * scale - offsets) * scales`` with a fourth channel of zeros appended. A UINT8 image
    gives FLOAT16, a float image its own type. Built from ai.onnx ops (PopART has no gradient)."""
    img, offsets, scales = _inputs_of(args)
    impl = self._builder._impl
    shape = list(impl.getTensorShape(img))
    if len(shape) < 2 or shape[-1] != 3:
        raise _graft.Error(f"normalize_image: image '{img}' has shape {shape}; it requires the inner dimension to "
                           "be 3")
    if abs(float(scale)) < np.finfo(np.float32).eps:
        raise _graft.Error(f"normalize_image: scale {scale} should be greater than 0")
    onnx = _onnx(self)
    dtype = impl.getTensorDtypeString(img)
    out_dtype = np.float16 if dtype == "uint8" else np.dtype(dtype).type
    if out_dtype not in (np.float16, np.float32):
        raise _graft.Error(f"normalize_image: image '{img}' is {dtype}; it must be UINT8, FLOAT16 or FLOAT")
    x = onnx.cast([img], "FLOAT16") if dtype == "uint8" else img
    x = onnx.mul([x, onnx.constant(np.array([scale], dtype=out_dtype))])
    x = onnx.mul([onnx.sub([x, offsets]), scales])
    pad = onnx.constant(np.zeros(shape[:-1] + [1], dtype=out_dtype))
    return onnx.concat([x, pad], len(shape) - 1, debug_name(debugContext, debugPrefix))


def shapeddropout(self, args, shape, ratio=0.5, debugContext="", debugPrefix=None):
    """PopART's ShapedDropout: dropout of ``args[0]`` with one mask of ``shape`` (numpy-broadcast
    to the input), so whole rows or features drop together. Built as ai.onnx Dropout of a tensor
    of ones of ``shape`` times the input: the identity in inference, a fresh mask each training
    step (seeded by ``setRandomSeed``), and the gradient through the same mask."""
    (x,) = _inputs_of(args)
    ratio = float(ratio)
    if not 0.0 <= ratio < 1.0:
        raise _graft.Error(f"shapeddropout: ratio value {ratio} is not valid. Please use a value in the interval [0,1)")
    shape = _ints(shape, "shapeddropout: shape")
    impl = self._builder._impl
    xshape = list(impl.getTensorShape(x))
    try:
        ok = list(np.broadcast_shapes(tuple(xshape), tuple(shape))) == xshape
    except ValueError:
        ok = False
    if not ok:
        raise _graft.Error(f"ShapedDropout: incompatible input tensor and dropout shape. The op is configured with "
                           f"shape {shape} which is not broadcastable to the input tensor with shape {xshape}.")
    onnx = _onnx(self)
    ones = onnx.constant(np.ones(shape, dtype=np.dtype(impl.getTensorDtypeString(x))))
    if onnx.version >= 12:
        mask = onnx.dropout([ones, onnx.constant(np.array(ratio, dtype=np.float32))], 1)[0]
    else:
        mask = onnx.dropout([ones], 1, ratio=ratio)[0]
    return onnx.mul([x, mask], debug_name(debugContext, debugPrefix))


# PopART's LSTM keeps its gates in the order forget, input, cell, output; ONNX's are input,
# output, forget, cell: ONNX gate g is PopART gate _ONNX_GATES[g].
_ONNX_GATES = [1, 3, 0, 2]


def lstm(self, args, outputFullSequence=1, debugContext="", debugPrefix=None):
    """PopART's LSTM of ``args = [input [seq, batch, in], weights [4, in + hidden, hidden],
    biases [4, hidden]?, initialState [2, batch, hidden]?, seqLens [batch]?]`` (gates forget,
    input, cell, output): returns [output, cellState], output [seq, batch, hidden] (the last step
    [batch, hidden] when ``outputFullSequence`` is 0). Built as one ai.onnx LSTM with the weights
    rearranged into ONNX's layout, so it runs and trains as that op."""
    inputs = _inputs_of(args)
    if not 2 <= len(inputs) <= 5:
        raise _graft.Error(f"lstm takes 2 to 5 inputs (input, weights, biases, initialState, seqLens), got "
                           f"{len(inputs)}")
    inputs += [""] * (5 - len(inputs))
    x, w, b, state, seq_lens = inputs
    impl = self._builder._impl
    xs, ws = list(impl.getTensorShape(x)), list(impl.getTensorShape(w))
    if len(xs) != 3:
        raise _graft.Error(f"lstm: input '{x}' has shape {xs}; it must be [seq, batch, inputSize]")
    hidden = ws[2] if len(ws) == 3 else -1
    if ws != [4, xs[2] + hidden, hidden]:
        raise _graft.Error(f"lstm: bad weights shape {ws}, should be [4, inputSize + hiddenSize, hiddenSize] "
                           f"with inputSize {xs[2]}")
    if b and list(impl.getTensorShape(b)) != [4, hidden]:
        raise _graft.Error(f"lstm: bad biases shape {list(impl.getTensorShape(b))}, should be [4, {hidden}]")
    if state and list(impl.getTensorShape(state)) != [2, xs[1], hidden]:
        raise _graft.Error(f"lstm: bad initialState shape {list(impl.getTensorShape(state))}, should be "
                           f"[2, {xs[1]}, {hidden}]")
    onnx = _onnx(self)
    gates = _const64(self, _ONNX_GATES)

    def onnx_weights(start, end, size):  # rows [start, end) of each gate, as ONNX's [1, 4 * hidden, size]
        part = _slice(self, w, [start], [end], [1])
        part = onnx.gather([onnx.transpose([part], [0, 2, 1]), gates], axis=0)
        return onnx.reshape([part, _const64(self, [1, 4 * hidden, size])])

    lstm_inputs = [x, onnx_weights(0, xs[2], xs[2]), onnx_weights(xs[2], xs[2] + hidden, hidden)]
    if b:
        wb = onnx.reshape([onnx.gather([b, gates], axis=0), _const64(self, [1, 4 * hidden])])
        zeros = onnx.constant(np.zeros([1, 4 * hidden], dtype=np.dtype(impl.getTensorDtypeString(b))))
        lstm_inputs.append(onnx.concat([wb, zeros], 1))
    else:
        lstm_inputs.append("")
    if seq_lens:
        lens_type = impl.getTensorDtypeString(seq_lens)
        lstm_inputs.append(seq_lens if lens_type == "int32" else onnx.cast([seq_lens], "INT32"))
    else:
        lstm_inputs.append("")
    if state:
        lstm_inputs += [_slice(self, state, [0], [1], [0]), _slice(self, state, [1], [2], [0])]
    while lstm_inputs[-1] == "":
        lstm_inputs.pop()
    y, y_h, y_c = onnx.lstm(lstm_inputs, 3, hidden_size=hidden)
    name = debug_name(debugContext, debugPrefix)
    out = _squeeze(self, y, [1], name) if outputFullSequence else _squeeze(self, y_h, [0], name)
    return [out, _squeeze(self, y_c, [0])]


def packedDataBlock(self, args, maxSequenceLengths, resultSize, callbackBatchSize, callback, debugContext="",
                    debugPrefix=None):
    """PopART's PackedDataBlock. ``args = [data_1, offsets_1, lengths_1, ..., data_n, offsets_n,
    lengths_n, resultOffsets, resultLengths]``: each data input holds sequences packed one after
    another along axis 0 (sequence s at rows offsets[s] .. offsets[s] + lengths[s]). They are
    unpacked into [sequences, maxSequenceLengths[i], ...] (zero-padded), the subgraph builder
    ``callback`` runs on ``callbackBatchSize`` sequences at a time, and its results are packed
    into a tensor of ``resultSize`` rows at resultOffsets / resultLengths. Built from ai.onnx
    ops (Gather, Where, ...) with the callback inlined per batch of sequences."""
    from .subgraph import _core_of, _replay

    inputs = _inputs_of(args)
    if len(inputs) < 5 or (len(inputs) - 2) % 3:
        raise _graft.Error(f"packedDataBlock takes 3 inputs per data input plus resultOffsets and resultLengths, "
                           f"got {len(inputs)}")
    count = (len(inputs) - 2) // 3
    max_lens = _ints(maxSequenceLengths, "packedDataBlock: maxSequenceLengths")
    if len(max_lens) != count:
        raise _graft.Error(f"packedDataBlock: {len(max_lens)} maxSequenceLengths for {count} data inputs")
    core = _core_of(callback, "packedDataBlock")
    if len(core.inputs) != count or len(core.outputs) != 1:
        raise _graft.Error(f"packedDataBlock: the callback takes {len(core.inputs)} inputs and gives "
                           f"{len(core.outputs)} outputs; it must take {count} and give 1")
    impl = self._builder._impl
    onnx = _onnx(self)
    batch = _as_int(callbackBatchSize, "packedDataBlock: callbackBatchSize")
    result_size = _as_int(resultSize, "packedDataBlock: resultSize")

    def as_int64(t):
        return t if impl.getTensorDtypeString(t) == "int64" else onnx.cast([t], "INT64")

    def column(t):  # [n] -> [n, 1]
        return onnx.reshape([t, _const64(self, [-1, 1])])

    def expand_mask(mask, rank):  # [n, m] -> [n, m, 1, ...] of `rank` dims
        return onnx.reshape([mask, _const64(self, [0, 0] + [1] * (rank - 2))]) if rank > 2 else mask

    unpacked, sequences = [], None
    for i in range(count):
        data, offsets, lengths = inputs[3 * i: 3 * i + 3]
        n = impl.getTensorShape(offsets)[0]
        if sequences is None:
            sequences = n
        elif n != sequences:
            raise _graft.Error(f"packedDataBlock: data input {i} has {n} sequences, the first {sequences}")
        steps = _const64(self, np.arange(max_lens[i])[None, :])
        mask = onnx.less([steps, column(as_int64(lengths))])  # [n, maxLen]
        rows = onnx.where([mask, onnx.add([column(as_int64(offsets)), steps]), _const64(self, [0])])
        gathered = onnx.gather([data, rows], axis=0)  # [n, maxLen, ...]
        rank = len(impl.getTensorShape(data)) + 1
        zero = onnx.constant(np.zeros([1], dtype=np.dtype(impl.getTensorDtypeString(data))))
        unpacked.append(onnx.where([expand_mask(mask, rank), gathered, zero]))
    if sequences % batch:
        raise _graft.Error(f"packedDataBlock: {sequences} sequences do not split into batches of {batch}")
    results = []
    for start in range(0, sequences, batch):
        chunk = [_slice(self, u, [start], [start + batch], [0]) for u in unpacked]
        results.append(_replay(impl, core, chunk)[0])
    result = results[0] if len(results) == 1 else onnx.concat(results, 0)  # [sequences, resultLen, ...]
    rshape = list(impl.getTensorShape(result))
    # Row r of the packed result is row r - resultOffsets[s] of sequence s, for the s whose range
    # [resultOffsets[s], resultOffsets[s] + resultLengths[s]) holds r; zero where none does.
    r_off, r_len = as_int64(inputs[-2]), as_int64(inputs[-1])
    r = _const64(self, np.arange(result_size)[None, :])  # [1, resultSize]
    starts = column(r_off)
    inside = onnx.logical_and([onnx.logical_not([onnx.less([r, starts])]),
                               onnx.less([r, onnx.add([starts, column(r_len)])])])  # [sequences, resultSize]
    hits = onnx.cast([inside], "INT64")
    seq_of = _reduce(self, "reducesum", onnx.mul([hits, _const64(self, np.arange(sequences)[:, None])]), [0], 0)
    row_in = _reduce(self, "reducesum", onnx.mul([hits, onnx.sub([r, starts])]), [0], 0)
    found = onnx.cast([_reduce(self, "reducesum", hits, [0], 0)], "BOOL")  # [resultSize]
    flat = onnx.reshape([result, _const64(self, [sequences * rshape[1]] + rshape[2:])])
    index = onnx.add([onnx.mul([seq_of, _const64(self, [rshape[1]])]), row_in])
    packed = onnx.gather([flat, index], axis=0)  # [resultSize, ...]
    zero = onnx.constant(np.zeros([1], dtype=np.dtype(impl.getTensorDtypeString(result))))
    found = onnx.reshape([found, _const64(self, [result_size] + [1] * (len(rshape) - 2))]) if len(rshape) > 2 else found
    return onnx.where([found, packed, zero], debug_name(debugContext, debugPrefix))


def methods():
    """The methods this module adds to ``builder.aiGraphcore``."""
    m = {
        "call": call,
        "multiconv": multiconv,
        "slice": slice_,
        "subsample": subsample,
        "reverse": reverse,
        "reshape": reshape,
        "depthtospace": depthtospace,
        "bucketize": bucketize,
        "sort": sort,
        "init": init,
        "dynamicslice": dynamicslice,
        "groupedgather": groupedgather,
        "sequenceslice": sequenceslice,
        "ctcloss": ctcloss,
        "dynamicupdate": _dynamic("DynamicUpdate"),
        "dynamicadd": _dynamic("DynamicAdd"),
        "dynamiczero": _dynamic("DynamicZero"),
        "groupnormalization": groupnormalization,
        "batchnormalization": batchnormalization,
        "incrementmod": incrementmod,
        "reducemedian": reducemedian,
        "scale": scale,
        "scaledadd": scaledadd,
        "normalize_image": normalize_image,
        "shapeddropout": shapeddropout,
        "lstm": lstm,
        "packedDataBlock": packedDataBlock,
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
