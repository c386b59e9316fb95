"""Helpers of the training tests: export a PyTorch model, add a loss with graft's Builder, train the
same steps in graft and in PyTorch, and compare the loss of every step and the final weights.

Every comparison records its largest deviation in DEVIATIONS; conftest.py prints them at the end of
the run (``pytest -rA`` is not needed), so a run shows how close graft is to PyTorch, not just that
it is within tolerance.
"""
import io
import warnings

import numpy as np
import torch

import graft

F = torch.nn.functional

#: test name -> (largest absolute deviation of the losses, of the weights, tolerance used)
DEVIATIONS = {}


def export(model, example, input_names, output_names, training=False, **kwargs):
    """ONNX bytes of a PyTorch model (opset 17, the TorchScript exporter, weights as initializers)."""
    f = io.BytesIO()
    mode = torch.onnx.TrainingMode.TRAINING if training else torch.onnx.TrainingMode.EVAL
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        torch.onnx.export(model, tuple(example), f, opset_version=17, dynamo=False, input_names=input_names,
                      output_names=output_names, do_constant_folding=False, training=mode, **kwargs)
    return f.getvalue()


def log_softmax(builder, logits, num_classes, how):
    """Log-probabilities over the last axis of ``logits`` ([N, C]).

    how="onnx": the ai.onnx LogSoftmax op. how="composed": x - log(exp(x) @ ones[C, 1]), which
    needs only Exp, Log, MatMul and Sub."""
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


# ---- the MLP classifier the optimizer and session tests train --------------------------------------

N, IN, HID, C = 8, 10, 16, 4
STEPS = 8
# How the MLP's graft model computes log-probabilities (log_softmax above): ONNX's LogSoftmax
# ("composed" builds it from Exp, MatMul, Log and Sub); test_training_mlp.py also trains the
# Softmax / SoftmaxCrossEntropyLoss heads.
LOG_SOFTMAX = "onnx"


def make_torch_mlp(dtype=torch.float32):
    torch.manual_seed(0)
    m = torch.nn.Sequential(torch.nn.Linear(IN, HID), torch.nn.Tanh(), torch.nn.Linear(HID, HID), torch.nn.ReLU(),
                            torch.nn.Linear(HID, C))
    return m.to(dtype)


def graft_model(torch_model, rows=N, dtype=torch.float32, how=None):
    """ONNX of the exported MLP plus a label input and the loss; returns (model bytes, loss id)."""
    onnx_model = export(torch_model, [torch.zeros(rows, IN, dtype=dtype)], ["x"], ["logits"])
    b = graft.Builder(onnx_model)
    label = b.addInputTensor("INT64", [rows], "label")
    lp = log_softmax(b, "logits", C, how or LOG_SOFTMAX)
    loss = b.aiGraphcore.nllloss([lp, label], graft.ReductionType.Mean, inputIsLogProbability=True)
    return b.getModelProto(), loss


def batch(step, rows=N, np_dtype=np.float32):
    rng = np.random.default_rng(1000 + step)
    return rng.standard_normal((rows, IN)).astype(np_dtype), rng.integers(0, C, rows).astype(np.int64)


def train_torch(model, opt, steps, micro_batches=1, mean_accumulation=False, clip=None, before_step=None,
                rows=N, np_dtype=np.float32):
    """``steps`` optimizer steps, each over ``micro_batches`` consecutive batches whose gradients add
    up (divided by their number when mean_accumulation); returns the loss of every micro-batch."""
    losses, k = [], 0
    for step in range(steps):
        if before_step is not None:
            before_step(opt, step)
        opt.zero_grad()
        for _ in range(micro_batches):
            x, y = batch(k, rows, np_dtype)
            k += 1
            loss = F.cross_entropy(model(torch.from_numpy(x)), torch.from_numpy(y))
            (loss / micro_batches if mean_accumulation else loss).backward()
            losses.append(loss.item())
        if clip is not None:
            params, max_norm = clip(model)
            torch.nn.utils.clip_grad_norm_(params, max_norm)
        opt.step()
    return losses


def feeds_for(micro_batches=1, batches_per_step=1, rows=N, np_dtype=np.float32):
    """Inputs of a graft step: [batchesPerStep, accumulationFactor, rows, ...], the leading
    dimensions only when > 1, filled with the same consecutive batches torch sees."""
    per_step = micro_batches * batches_per_step

    def feeds(step):
        xs, ys = zip(*(batch(step * per_step + i, rows, np_dtype) for i in range(per_step)))
        lead = [d for d in (batches_per_step, micro_batches) if d > 1]
        return {"x": np.stack(xs).reshape(lead + [rows, IN]), "label": np.stack(ys).reshape(lead + [rows])}

    return feeds


