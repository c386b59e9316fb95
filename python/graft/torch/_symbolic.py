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


def _addmv(g, input, mat, vec, beta, alpha, out=None):  # noqa: A002,ARG001  (out=: the result is the value)
    """beta * input + alpha * (mat @ vec); a term whose factor is the constant 0 is left out, as in
    torch (a NaN or inf there does not reach the result)."""
    mv = g.op("MatMul", mat, vec)
    use_input, use_mv = _const(beta) != 0, _const(alpha) != 0
    if use_input and use_mv:
        return g.op("Add", _scaled(g, input, beta), _scaled(g, mv, alpha))
    # One term (or none): broadcast to the shape both would give, without touching the other's values.
    term = _scaled(g, input, beta) if use_input else _scaled(g, mv, alpha) if use_mv else \
        g.op("Mul", _c(g, 0.0, input), g.op("CastLike", g.op("Constant", value_t=torch.tensor(1.0)), input))
    return g.op("Expand", g.op("Expand", term, g.op("Shape", input)), g.op("Shape", mv))


def _matmul(g, self, other, out=None):  # noqa: ARG001  (matmul / bmm, also their out= forms)
    return g.op("MatMul", self, other)


def _onnx_type(scalar_type):
    from torch.onnx._internal.torchscript_exporter import _type_utils  # noqa: PLC0415

    return _type_utils.JitScalarType(scalar_type).onnx_type()


def _cumsum(g, input, dim, dtype=None, out=None):  # noqa: A002
    """torch.cumsum, also with dtype= and out= (the sum is taken in the out tensor's type)."""
    x = input
    if out is not None and not _none(out):
        x = g.op("CastLike", input, out)
    elif dtype is not None and not _none(dtype):
        x = g.op("Cast", input, to_i=_onnx_type(_const(dtype, "i")))
    return g.op("CumSum", x, g.op("Constant", value_t=torch.tensor(_const(dim, "i"), dtype=torch.int64)))


def _cumprod(g, input, dim, dtype=None, out=None):  # noqa: A002
    """torch.cumprod along a static dimension: running products of its slices (ONNX has no
    CumProd); every step is a Mul, so gradients flow as torch's do, zeros and negatives included."""
    sizes = sh._get_tensor_sizes(input)  # noqa: SLF001
    d = _const(dim, "i")
    if sizes is None or sizes[d] is None:
        raise RuntimeError("aten::cumprod: graft.torch converts cumprod along a static dimension only")
    x = input
    if out is not None and not _none(out):
        x = g.op("CastLike", input, out)
    elif dtype is not None and not _none(dtype):
        x = g.op("Cast", input, to_i=_onnx_type(_const(dtype, "i")))
    d = d % len(sizes)
    pieces, run = [], None
    for k in range(sizes[d]):
        piece = _slice(g, x, d, k, k + 1)
        run = piece if run is None else g.op("Mul", run, piece)
        pieces.append(run)
    return pieces[0] if len(pieces) == 1 else g.op("Concat", *pieces, axis_i=d)


def _c(g, value, like):
    """A scalar constant of ``like``'s type."""
    return g.op("CastLike", g.op("Constant", value_t=torch.tensor(float(value))), like)


def _const(v, kind="f"):
    return sh._maybe_get_const(v, kind)  # noqa: SLF001


def _none(v):
    return sh._is_none(v)  # noqa: SLF001


def _bce(g, input, target, weight, reduction):  # noqa: A002
    # torch clamps the logs at -100.
    lo = _c(g, -100.0, input)
    log_x = g.op("Max", g.op("Log", input), lo)
    log_1mx = g.op("Max", g.op("Log", g.op("Sub", _c(g, 1.0, input), input)), lo)
    pos = g.op("Mul", target, log_x)
    neg = g.op("Mul", g.op("Sub", _c(g, 1.0, target), target), log_1mx)
    loss = g.op("Neg", g.op("Add", pos, neg))
    if not _none(weight):
        loss = g.op("Mul", loss, weight)
    return _reduce(g, loss, reduction)


def _smooth_l1(g, input, target, reduction, beta):  # noqa: A002
    b = _const(beta)
    d = g.op("Abs", g.op("Sub", input, target))
    if not b:
        return _reduce(g, d, reduction)
    quad = g.op("Div", g.op("Mul", _c(g, 0.5, d), g.op("Mul", d, d)), _c(g, b, d))
    lin = g.op("Sub", d, _c(g, 0.5 * b, d))
    return _reduce(g, g.op("Where", g.op("Less", d, _c(g, b, d)), quad, lin), reduction)


def _soft_margin(g, input, target, reduction):  # noqa: A002
    z = g.op("Neg", g.op("Mul", target, input))
    return _reduce(g, g.op("Softplus", z), reduction)


def _hinge_embedding(g, input, target, margin, reduction):  # noqa: A002
    zero = _c(g, 0.0, input)
    m = _const(margin)
    marg = g.op("Max", g.op("Sub", _c(g, m, input), input), zero)
    t = g.op("CastLike", target, input)
    out_margin = g.op("Where", g.op("Equal", t, _c(g, 1.0, input)), zero, marg)
    out_self = g.op("Where", g.op("Equal", t, _c(g, -1.0, input)), zero, input)
    return _reduce(g, g.op("Add", out_margin, out_self), reduction)


def _margin_ranking(g, x1, x2, target, margin, reduction):
    z = g.op("Add", g.op("Neg", g.op("Mul", target, g.op("Sub", x1, x2))), _c(g, _const(margin), x1))
    return _reduce(g, g.op("Relu", z), reduction)


def _poisson_nll(g, input, target, log_input, full, eps, reduction):  # noqa: A002
    if _const(log_input, "i"):
        loss = g.op("Sub", g.op("Exp", input), g.op("Mul", target, input))
    else:
        loss = g.op("Sub", input, g.op("Mul", target, g.op("Log", g.op("Add", input, _c(g, _const(eps), input)))))
    if _const(full, "i"):
        t = target
        stirling = g.op("Add", g.op("Sub", g.op("Mul", t, g.op("Log", t)), t),
                        g.op("Mul", _c(g, 0.5, t), g.op("Log", g.op("Mul", _c(g, 2 * 3.141592653589793, t), t))))
        loss = g.op("Add", loss, g.op("Where", g.op("Greater", t, _c(g, 1.0, t)), stirling, _c(g, 0.0, t)))
    return _reduce(g, loss, reduction)


def _pdist(g, a, b, p, eps):
    d = g.op("Add", g.op("Sub", a, b), _c(g, eps, a))
    axes = g.op("Constant", value_t=torch.tensor([-1]))
    if p == 2:
        return g.op("Sqrt", g.op("ReduceSum", g.op("Mul", d, d), axes, keepdims_i=0))
    if p == 1:
        return g.op("ReduceSum", g.op("Abs", d), axes, keepdims_i=0)
    pw = _c(g, p, a)
    return g.op("Pow", g.op("ReduceSum", g.op("Pow", g.op("Abs", d), pw), axes, keepdims_i=0),
                g.op("Div", _c(g, 1.0, a), pw))


def _triplet_margin(g, anchor, positive, negative, margin, p, eps, swap, reduction):
    pv, ev = _const(p), _const(eps)
    d_ap = _pdist(g, anchor, positive, pv, ev)
    d_an = _pdist(g, anchor, negative, pv, ev)
    if _const(swap, "i"):
        d_an = g.op("Min", d_an, _pdist(g, positive, negative, pv, ev))
    z = g.op("Add", g.op("Sub", d_ap, d_an), _c(g, _const(margin), anchor))
    return _reduce(g, g.op("Relu", z), reduction)


def _dims(dim):
    if _none(dim):
        return None
    try:
        d = sh._maybe_get_const(dim, "is")  # noqa: SLF001
    except TypeError:  # a single int
        d = sh._maybe_get_const(dim, "i")  # noqa: SLF001
    if isinstance(d, torch.Tensor):
        d = d.tolist()
    if isinstance(d, int):
        d = [d]
    return list(d) if d is not None else None


def _reduce_sum(g, x, dims, keepdim):
    if dims is None:
        return g.op("ReduceSum", x, keepdims_i=int(keepdim))
    if not dims:
        return x
    return g.op("ReduceSum", x, g.op("Constant", value_t=torch.tensor(dims, dtype=torch.int64)),
                keepdims_i=int(keepdim))


def _nansum(g, input, dim, keepdim, dtype):  # noqa: A002
    if not _none(dtype):  # the sum is taken in dtype, as torch does
        input = g.op("Cast", input, to_i=_onnx_type(_const(dtype, "i")))  # noqa: A001
    clean = g.op("Where", g.op("IsNaN", input), _c(g, 0.0, input), input)
    return _reduce_sum(g, clean, _dims(dim), bool(_const(keepdim, "i")))


def _count_nonzero(g, input, dim):  # noqa: A002
    nz = g.op("Cast", g.op("Not", g.op("Equal", input, _c(g, 0.0, input))), to_i=7)  # INT64
    d = _dims(dim)
    return _reduce_sum(g, nz, d, False)


def _unary(op):
    def fn(g, x):
        return g.op(op, x)

    return fn


def _trunc(g, x):
    return g.op("Where", g.op("Less", x, _c(g, 0.0, x)), g.op("Ceil", x), g.op("Floor", x))


def _frac(g, x):
    return g.op("Sub", x, _trunc(g, x))


def _erfc(g, x):
    return g.op("Sub", _c(g, 1.0, x), g.op("Erf", x))


def _expm1(g, x):
    return g.op("Sub", g.op("Exp", x), _c(g, 1.0, x))


def _slice(g, x, axis, start, end):
    def c(v):
        return g.op("Constant", value_t=torch.tensor([v], dtype=torch.int64))

    return g.op("Slice", x, c(start), c(end), c(axis))


def _roll(g, input, shifts, dims):  # noqa: A002
    """torch.roll with shifts of any size (taken modulo the dimension) and without dims (the
    flattened tensor rolls, as in torch); the exporter's own conversion handles neither."""
    shifts = _dims(shifts) or []
    dims = _dims(dims) or []
    sizes = sh._get_tensor_sizes(input)  # noqa: SLF001
    if sizes is None or any(d is None for d in sizes):
        raise RuntimeError("aten::roll: graft.torch converts roll for static shapes only")
    x = input
    if not dims:
        if len(shifts) != 1:
            raise RuntimeError(f"aten::roll: {len(shifts)} shifts without dims")
        n = 1
        for d in sizes:
            n *= d
        x = g.op("Reshape", x, g.op("Constant", value_t=torch.tensor([n], dtype=torch.int64)))
        dims, flat_sizes = [0], [n]
    else:
        flat_sizes = sizes
    if len(shifts) != len(dims):
        raise RuntimeError(f"aten::roll: {len(shifts)} shifts for {len(dims)} dims")
    for shift, dim in zip(shifts, dims):
        dim = dim % len(flat_sizes)
        n = flat_sizes[dim]
        k = shift % n if n else 0
        if k == 0:
            continue
        x = g.op("Concat", _slice(g, x, dim, n - k, n), _slice(g, x, dim, 0, n - k), axis_i=dim)
    if len(flat_sizes) != len(sizes):
        x = g.op("Reshape", x, g.op("Constant", value_t=torch.tensor(sizes, dtype=torch.int64)))
    return x


def _copy(g, self, src, non_blocking):  # noqa: ARG001
    """aten::copy (what y.copy_(x) becomes): x cast to y's type and broadcast to y's shape."""
    return g.op("Expand", g.op("CastLike", src, self), g.op("Shape", self))


def _i64(values):
    return torch.tensor(list(values), dtype=torch.int64)


def _take_along_dim(g, input, indices, dim):  # noqa: A002
    """torch.take_along_dim: GatherElements after broadcasting input and indices in every
    dimension but ``dim`` (flattened both when dim is None), for static shapes."""
    si, sx = sh._get_tensor_sizes(input), sh._get_tensor_sizes(indices)  # noqa: SLF001
    if si is None or sx is None or None in si or None in sx:
        raise RuntimeError("aten::take_along_dim: graft.torch converts it for static shapes only")
    if _none(dim):
        flat = g.op("Reshape", input, g.op("Constant", value_t=_i64([-1])))
        idx = g.op("Reshape", indices, g.op("Constant", value_t=_i64([-1])))
        return g.op("GatherElements", flat, idx, axis_i=0)
    d = _const(dim, "i")
    if len(si) != len(sx):
        raise RuntimeError("aten::take_along_dim: input and indices must have the same number of dimensions")
    d = d % len(si)
    common = [max(a, b) for a, b in zip(si, sx)]
    want_in = [si[k] if k == d else common[k] for k in range(len(si))]
    want_ix = [sx[k] if k == d else common[k] for k in range(len(sx))]
    if want_in != list(si):
        input = g.op("Expand", input, g.op("Constant", value_t=_i64(want_in)))  # noqa: A001
    if want_ix != list(sx):
        indices = g.op("Expand", indices, g.op("Constant", value_t=_i64(want_ix)))
    return g.op("GatherElements", input, indices, axis_i=d)


def _chunk(g, input, chunks, dim):  # noqa: A002
    """torch.chunk: pieces of ceil(n / chunks), the last one smaller, and fewer than ``chunks``
    pieces when they run out (13 into 6 gives 3, 3, 3, 3, 1). The exporter's conversion assumes
    exactly ``chunks`` pieces and asks for a negative last length."""
    d = _const(dim, "i")
    c = _const(chunks, "i")
    sizes = sh._get_tensor_sizes(input)  # noqa: SLF001
    if sizes is None or sizes[d] is None or not isinstance(c, int):
        raise RuntimeError("aten::chunk: graft.torch converts chunk for a static dimension only")
    n = sizes[d]
    step = -(-n // c) if n else 0
    lengths = [step] * (n // step) + ([n % step] if n % step else []) if step else [0]
    return g.op("SplitToSequence", input, g.op("Constant", value_t=_i64(lengths)), axis_i=d)


def _addcdiv(g, input, t1, t2, value):  # noqa: A002
    """input + value * t1 / t2."""
    return g.op("Add", input, _scaled(g, g.op("Div", t1, t2), value))


def _median(g, input, dim=None, keepdim=None):  # noqa: A002
    """torch.median: the lower of the two middle values for an even count (torch's choice), from
    TopK of the smallest half; with dim also the index of that value."""
    sizes = sh._get_tensor_sizes(input)  # noqa: SLF001
    if sizes is None or None in sizes:
        raise RuntimeError("aten::median: graft.torch converts median for static shapes only")
    whole = dim is None or _none(dim)
    if whole:
        n = 1
        for d in sizes:
            n *= d
        x, d = g.op("Reshape", input, g.op("Constant", value_t=_i64([n]))), 0
    else:
        d = _const(dim, "i") % len(sizes)
        n, x = sizes[d], input
    k = (n - 1) // 2 + 1
    values, indices = g.op("TopK", x, g.op("Constant", value_t=_i64([k])), axis_i=d, largest_i=0, sorted_i=1,
                           outputs=2)
    values, indices = _slice(g, values, d, k - 1, k), _slice(g, indices, d, k - 1, k)
    if whole:
        return g.op("Reshape", values, g.op("Constant", value_t=_i64([])))
    if not _const(keepdim, "i"):
        axes = g.op("Constant", value_t=_i64([d]))
        values, indices = g.op("Squeeze", values, axes), g.op("Squeeze", indices, axes)
    return values, indices


def _lengths(g, v):
    """A lengths argument of ctc_loss: an int list (a constant) or a tensor, as INT64 [N]."""
    if sh._is_value(v) and sh._is_tensor(v) and not sh._is_packed_list(v):  # noqa: SLF001
        try:
            const = sh._maybe_get_const(v, "is")  # noqa: SLF001
        except Exception:  # noqa: BLE001  (a computed tensor)
            const = v
        if not sh._is_value(const):  # noqa: SLF001
            return g.op("Constant", value_t=_i64(const))
        return g.op("Cast", v, to_i=7)
    return g.op("Constant", value_t=_i64(_dims(v)))


def _ctc_loss(g, log_probs, targets, input_lengths, target_lengths, blank, reduction, zero_infinity):
    """torch's ctc_loss onto graft's ai.graphcore CtcLoss (targets [N, S] padded, as graft takes
    them; torch's reductions: mean divides by the target lengths, then averages)."""
    if len(sh._get_tensor_sizes(targets) or []) != 2:  # noqa: SLF001
        raise RuntimeError("aten::ctc_loss: graft's CtcLoss takes padded targets [N, S], not concatenated ones")
    red = {0: "None", 1: "Mean", 2: "Sum"}[_const(reduction, "i")]
    return g.op("ai.graphcore::CtcLoss", log_probs, g.op("Cast", targets, to_i=7), _lengths(g, input_lengths),
                _lengths(g, target_lengths), reduction_s=red, blank_i=_const(blank, "i"),
                zeroInfinity_i=int(bool(_const(zero_infinity, "i"))))


def _threshold(g, input, threshold, value):  # noqa: A002
    """torch.nn.Threshold: x where x > threshold, else value (the exporter takes threshold 0 only)."""
    return g.op("Where", g.op("Greater", input, _c(g, _const(threshold), input)), input, _c(g, _const(value), input))


def _bitwise(logical, name):
    """torch's &, |, ^ (and bitwise_and, ...) on bools: ONNX's logical op. On integers ONNX has
    them from opset 18 only (BitwiseAnd, ...), which a capture at opset 17 cannot use."""

    def fn(g, self, other):
        other_bool = sh._is_value(other) and sh._is_tensor(other) and sh._is_bool(other)  # noqa: SLF001
        if sh._is_bool(self) and other_bool:  # noqa: SLF001
            return g.op(logical, self, other)
        raise RuntimeError(f"aten::bitwise_{name} of integer tensors: ONNX has it from opset 18 (Bitwise"
                           f"{name.capitalize()}); graft.torch captures at opset 17, where only bool tensors have it")

    return fn


def _bitwise_not(g, self):
    """~x: Not on bools, graft's ai.graphcore BitwiseNot on integers."""
    if sh._is_bool(self):  # noqa: SLF001
        return g.op("Not", self)
    return g.op("ai.graphcore::BitwiseNot", self)


def _index_fill(g, self, dim, index, value):
    """index_fill with a tensor value of another dtype (index_fill_(d, i, torch.tensor(-1)) on a
    float tensor): the value is cast to self's type first, which the exporter leaves out."""
    from torch.onnx._internal.torchscript_exporter import symbolic_opset11  # noqa: PLC0415

    if sh._is_value(value) and sh._is_tensor(value):  # noqa: SLF001
        value = g.op("CastLike", value, self)
    return symbolic_opset11.index_fill(g, self, dim, index, value)


def _scatter(g, self, dim, index, src, reduce=None):
    """scatter / scatter_ with a tensor or scalar source and reduce="add" / "multiply" (the
    exporter takes reduce only with a tensor source): ScatterElements with the reduction."""
    if reduce is None or _none(reduce):
        return g.op("ScatterElements", self, index, _source(g, self, index, src), axis_i=_const(dim, "i"))
    r = sh._maybe_get_const(reduce, "s")  # noqa: SLF001
    red = {"add": "add", "multiply": "mul"}.get(r)
    if red is None:
        raise RuntimeError(f"aten::scatter: reduce={r!r} is not one of 'add', 'multiply'")
    return g.op("ScatterElements", self, index, _source(g, self, index, src), axis_i=_const(dim, "i"),
                reduction_s=red)


def _source(g, self, index, src):
    """src as a tensor of self's type shaped like index (a scalar is expanded; a larger tensor is
    cut to index's shape, as torch reads only that part of it)."""
    if not sh._is_value(src) or not sh._is_tensor(src) or sh._get_tensor_rank(src) == 0:  # noqa: SLF001
        v = src if sh._is_value(src) else g.op("Constant", value_t=torch.tensor(src))  # noqa: SLF001
        return g.op("Expand", g.op("CastLike", v, self), g.op("Shape", index))
    si, ss = sh._get_tensor_sizes(index), sh._get_tensor_sizes(src)  # noqa: SLF001
    src = g.op("CastLike", src, self)
    if si and ss and None not in si and None not in ss and si != ss:
        for axis, n in enumerate(si):
            if ss[axis] != n:
                src = _slice(g, src, axis, 0, n)
    return src


def _col2im(g, input, output_size, kernel_size, dilation, padding, stride):  # noqa: A002
    """torch.nn.Fold (col2im) for static shapes: each column entry is added at its place in the
    output, written as a MatMul with a constant 0/1 matrix [C*kh*kw... per channel: kh*kw*L, H*W]."""
    import numpy as np  # noqa: PLC0415

    sizes = sh._get_tensor_sizes(input)  # noqa: SLF001
    if sizes is None or None in sizes:
        raise RuntimeError("aten::col2im: graft.torch converts Fold for static shapes only")
    (h, w), (kh, kw) = _dims(output_size), _dims(kernel_size)
    (dh, dw), (ph, pw), (sh_, sw) = _dims(dilation), _dims(padding), _dims(stride)
    batched = len(sizes) == 3
    ckk, cols = sizes[-2], sizes[-1]
    c = ckk // (kh * kw)
    nh = (h + 2 * ph - dh * (kh - 1) - 1) // sh_ + 1
    nw = (w + 2 * pw - dw * (kw - 1) - 1) // sw + 1
    if nh * nw != cols:
        raise RuntimeError(f"aten::col2im: {cols} columns, but the sizes give {nh} x {nw}")
    m = np.zeros((kh * kw * cols, h * w), np.float32)
    for i in range(kh):
        for j in range(kw):
            for bh in range(nh):
                for bw in range(nw):
                    y, x = bh * sh_ - ph + i * dh, bw * sw - pw + j * dw
                    if 0 <= y < h and 0 <= x < w:
                        m[(i * kw + j) * cols + bh * nw + bw, y * w + x] = 1.0
    lead = [sizes[0]] if batched else []
    x = g.op("Reshape", input, g.op("Constant", value_t=_i64(lead + [c, kh * kw * cols])))
    out = g.op("MatMul", x, g.op("CastLike", g.op("Constant", value_t=torch.from_numpy(m)), input))
    return g.op("Reshape", out, g.op("Constant", value_t=_i64(lead + [c, h, w])))


_TABLE = {"aten::col2im": _col2im, "aten::index_fill": _index_fill, "aten::scatter": _scatter, "aten::threshold": _threshold,
          "aten::bitwise_and": _bitwise("And", "and"), "aten::__and__": _bitwise("And", "and"),
          "aten::bitwise_or": _bitwise("Or", "or"), "aten::__or__": _bitwise("Or", "or"),
          "aten::bitwise_xor": _bitwise("Xor", "xor"), "aten::__xor__": _bitwise("Xor", "xor"),
          "aten::bitwise_not": _bitwise_not, "aten::matmul": _matmul, "aten::bmm": _matmul, "aten::cumsum": _cumsum, "aten::cumprod": _cumprod,
          "aten::ctc_loss": _ctc_loss, "aten::addcdiv": _addcdiv, "aten::median": _median, "aten::chunk": _chunk, "aten::roll": _roll, "aten::copy": _copy, "aten::take_along_dim": _take_along_dim, "aten::acosh": _unary("Acosh"), "aten::asinh": _unary("Asinh"), "aten::atanh": _unary("Atanh"),
          "aten::cosh": _unary("Cosh"), "aten::sinh": _unary("Sinh"), "aten::trunc": _trunc, "aten::frac": _frac,
          "aten::erfc": _erfc, "aten::expm1": _expm1,
          "aten::nansum": _nansum, "aten::count_nonzero": _count_nonzero, "aten::l1_loss": _l1_loss, "aten::addmv": _addmv, "aten::binary_cross_entropy": _bce,
          "aten::smooth_l1_loss": _smooth_l1, "aten::soft_margin_loss": _soft_margin,
          "aten::hinge_embedding_loss": _hinge_embedding, "aten::margin_ranking_loss": _margin_ranking,
          "aten::poisson_nll_loss": _poisson_nll, "aten::triplet_margin_loss": _triplet_margin}


def register():
    global _REGISTERED
    if _REGISTERED:
        return
    for name, fn in _TABLE.items():
        torch.onnx.register_custom_op_symbolic(name, fn, 13)
    _REGISTERED = True
