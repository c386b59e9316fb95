"""Helpers of the training tests: export a PyTorch model, add a loss with graft's Builder, train the
same steps in graft and in PyTorch, and compare the loss of every step and the final weights.

Every comparison records its largest deviation in DEVIATIONS; conftest.py prints them at the end of
the run (``pytest -rA`` is not needed), so a run shows how close graft is to PyTorch, not just that
it is within tolerance.
"""
import io
import warnings

import numpy as np

import graft

torch = None  # imported lazily so that collecting the module needs no torch


def _torch():
    global torch
    if torch is None:
        import torch as t

        torch = t
    return torch


#: test name -> (largest absolute deviation of the losses, of the weights, tolerance used)
DEVIATIONS = {}


def export(model, example, input_names, output_names, training=False, **kwargs):
    """ONNX bytes of a PyTorch model (opset 17, the TorchScript exporter, weights as initializers)."""
    t = _torch()
    f = io.BytesIO()
    mode = t.onnx.TrainingMode.TRAINING if training else t.onnx.TrainingMode.EVAL
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        t.onnx.export(model, tuple(example), f, opset_version=17, dynamo=False, input_names=input_names,
                      output_names=output_names, do_constant_folding=False, training=mode, **kwargs)
    return f.getvalue()


def log_softmax(builder, logits, num_classes, how):
    """Log-probabilities over the last axis of ``logits`` ([N, C]).

    how="onnx": the ai.onnx LogSoftmax op. how="composed": x - log(exp(x) @ ones[C, 1]), which
    needs only Exp, Log, MatMul and Sub (for use while LogSoftmax has no gradient)."""
    if how == "onnx":
        return builder.aiOnnx.logsoftmax([logits], axis=-1)
    dtype = np.float64 if builder.getTensorDtypeString(logits) == "float64" else np.float32
    ones = builder.aiOnnx.constant(np.ones((num_classes, 1), dtype))
    total = builder.aiOnnx.matmul([builder.aiOnnx.exp([logits]), ones])
    return builder.aiOnnx.sub([logits, builder.aiOnnx.log([total])])


def state_dict_numpy(model):
    return {k: v.detach().numpy().copy() for k, v in model.state_dict().items()}


def read_weights(session, like):
    """The session's values of the weights named in ``like`` ({id: array})."""
    out = {k: np.zeros_like(v) for k, v in like.items()}
    session.weightsToHost()
    session.readWeights(graft.PyWeightsIO(out))
    return out


def max_deviation(a, b):
    a = np.asarray(a, np.float64)
    b = np.asarray(b, np.float64)
    return float(np.max(np.abs(a - b))) if a.size else 0.0


def compare(name, graft_losses, torch_losses, graft_weights, torch_weights, atol, rtol=0.0):
    """Asserts losses and weights agree within atol + rtol * |torch|; records the deviations."""
    dl = max_deviation(graft_losses, torch_losses)
    dw = max(max_deviation(graft_weights[k], torch_weights[k]) for k in torch_weights)
    DEVIATIONS[name] = (dl, dw, atol, rtol)
    np.testing.assert_allclose(np.asarray(graft_losses, np.float64), np.asarray(torch_losses, np.float64),
                               atol=atol, rtol=rtol, err_msg=f"{name}: losses")
    for k in torch_weights:
        np.testing.assert_allclose(graft_weights[k], torch_weights[k], atol=atol, rtol=rtol,
                                   err_msg=f"{name}: weight {k}")


def train_graft(model, loss, optimizer, feeds, steps, options=None, batches_per_step=1, extra_anchors=(),
                on_step=None, device=None):
    """Runs ``steps`` steps of a TrainingSession. ``feeds(step)`` returns the inputs of one step;
    returns (session, losses as a flat list in step order, {anchor: [per step]})."""
    anchors = {loss: graft.AnchorReturnType("All")}
    for a in extra_anchors:
        anchors[a] = graft.AnchorReturnType("All")
    session = graft.TrainingSession(fnModel=model, dataFlow=graft.DataFlow(batches_per_step, anchors), loss=loss,
                                    optimizer=optimizer,
                                    deviceInfo=device or graft.DeviceManager().createCpuDevice(),
                                    userOptions=options)
    session.prepareDevice()
    session.weightsFromHost()
    out = session.initAnchorArrays()
    losses, extras = [], {a: [] for a in extra_anchors}
    for step in range(steps):
        if on_step is not None:
            on_step(session, step)
        session.run(graft.PyStepIO(feeds(step), out))
        losses.extend(np.atleast_1d(out[loss]).ravel().tolist())
        for a in extra_anchors:
            extras[a].append(out[a].copy())
    return session, losses, extras
