"""PopTorch's ops for graft.torch: they run as ordinary torch code, and while graft.torch traces a
module they mark what they mean (the loss, recomputation) for the capture."""
import torch

from .. import _graft
from . import _capture

_REDUCTIONS = ("sum", "mean", "none")


def identity_loss(x, reduction="none"):
    """Marks ``x`` (reduced with ``reduction``: "sum", "mean" or "none") as the loss a trainingModel
    minimises; returns the reduced tensor. The loss must end up a scalar."""
    if not isinstance(x, torch.Tensor):
        raise _graft.Error(f"poptorch.identity_loss: expected a tensor, got {type(x).__name__}")
    r = reduction.lower() if isinstance(reduction, str) else reduction
    if r not in _REDUCTIONS:
        raise _graft.Error(f"poptorch.identity_loss: reduction must be one of {_REDUCTIONS}, got {reduction!r}")
    out = x.sum() if r == "sum" else x.mean() if r == "mean" else x
    ctx = _capture.context()
    if ctx is not None:
        if out.dim() != 0:
            raise _graft.Error(f"poptorch.identity_loss(reduction={reduction!r}): the loss must be a scalar, got "
                               f"shape {list(out.shape)}; use reduction='sum' or 'mean'")
        # A copy: the capture returns it as its own graph output.
        out = out * 1.0
        ctx.losses.append(out)
    return out


def ipu_print_tensor(tensor, title="", print_gradient=True, summarise_threshold=1000, edge_items=3,
                     max_line_width=75, digits=8, float_format="auto", separator=", ", open_bracket="(",
                     close_bracket=")"):
    """PopTorch prints the tensor on the device; graft.torch returns it unchanged (print it from
    the host: the wrapper returns outputs, and weights are synchronised on read)."""
    return tensor


def nop(tensor):
    """An identity op PopTorch keeps from being optimised away; here a plain identity."""
    return tensor


def set_available_memory(tensor, available_memory_proportion):
    """An IPU memory-planning hint: accepted, the tensor is returned unchanged."""
    if not 0.0 < float(available_memory_proportion) <= 1.0:
        raise _graft.Error("poptorch.set_available_memory: the proportion must be in (0, 1], got "
                           f"{available_memory_proportion}")
    return tensor


def set_overlap_for_input(input_tensors, mode):
    """IPU input/compute overlap: accepted, returns the inputs unchanged."""
    return input_tensors


def set_overlap_for_output(output_tensors, mode):
    """IPU output/compute overlap: accepted, returns the outputs unchanged."""
    return output_tensors


def recomputationCheckpoint(*tensors):  # noqa: N802
    """Marks a recomputation checkpoint: the captured model trains with graft's recomputation
    (SessionOptions.autoRecomputation), which recomputes forward activations in the backward pass
    of each pipeline stage. Returns the tensors unchanged."""
    ctx = _capture.context()
    if ctx is not None:
        ctx.recompute = True
    if len(tensors) == 1:
        return tensors[0]
    return tensors


def for_loop(count, body, inputs):
    """Runs ``body`` ``count`` times, each iteration's outputs being the next one's inputs; the
    capture unrolls the loop (graft's Loop op is not produced by the exporter at opset 17)."""
    if not isinstance(count, int) or count < 0:
        raise _graft.Error(f"poptorch.for_loop: count must be a non-negative integer, got {count!r}")
    if not isinstance(inputs, (list, tuple)):
        inputs = [inputs]
    values = list(inputs)
    for _ in range(count):
        out = body(*values)
        values = list(out) if isinstance(out, (list, tuple)) else [out]
        if len(values) != len(inputs):
            raise _graft.Error(f"poptorch.for_loop: the body returned {len(values)} tensors for {len(inputs)} inputs")
    return values


def cond(condition, then_body, then_inputs, else_body, else_inputs):
    """PopTorch's If: ``condition`` decides which body runs. The capture traces the body the
    condition selects for the example inputs (the exporter cannot trace both branches), so the
    condition must not change between calls with the same shapes."""
    if isinstance(condition, torch.Tensor):
        condition = bool(condition.reshape(-1)[0].item())
    body, inputs = (then_body, then_inputs) if condition else (else_body, else_inputs)
    out = body(*inputs)
    return list(out) if isinstance(out, (list, tuple)) else [out]


class _CustomOp(torch.autograd.Function):
    @staticmethod
    def forward(ctx, spec, *inputs):  # noqa: ARG004
        return tuple(torch.zeros_like(e) for e in spec["example_outputs"])

    @staticmethod
    def symbolic(g, spec, *inputs):
        attrs = {}
        for k, v in (spec["attributes"] or {}).items():
            suffix = "f" if isinstance(v, float) else "s" if isinstance(v, str) else "i"
            if isinstance(v, (list, tuple)):
                suffix = "f" if v and isinstance(v[0], float) else "i"
            attrs[f"{k}_{suffix}"] = v
        return g.op(f"{spec['domain']}::{spec['name']}", *inputs, outputs=len(spec["example_outputs"]), **attrs)


def custom_op(inputs, name, domain, domain_version, example_outputs, attributes=None):
    """An op of another domain: captured as the ONNX node ``domain::name`` with the attributes;
    graft must have the op registered to compile it (an unknown op is reported naming it). In torch
    (outside a capture) it returns zeros shaped like ``example_outputs``."""
    spec = {"name": name, "domain": domain, "version": domain_version, "attributes": attributes,
            "example_outputs": list(example_outputs)}
    out = _CustomOp.apply(spec, *inputs)
    return list(out) if isinstance(out, tuple) else [out]


def ipuHardwareIsAvailable(num_ipus=1):  # noqa: N802
    """graft runs on CPUs: there is never IPU hardware."""
    return False


def ipuHardwareVersion():  # noqa: N802
    """0: no IPU (PopTorch's value when none is present)."""
    return 0


def isRunningOnIpu():  # noqa: N802
    """PopTorch: True inside a model running on the IPU. graft.torch's capture traces in torch."""
    return False
