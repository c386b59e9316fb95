"""Shared helpers of the Python API tests (run with `make test` or `pytest tests/python`)."""
import os
import sys

import numpy as np
import pytest

# The in-tree package (python/graft) when the venv's .pth does not point at this checkout.
_HERE = os.path.dirname(os.path.abspath(__file__))
_PYTHON_DIR = os.path.normpath(os.path.join(_HERE, "..", "..", "python"))
if _PYTHON_DIR not in sys.path:
    sys.path.insert(0, _PYTHON_DIR)

import graft  # noqa: E402


@pytest.fixture
def device():
    return graft.DeviceManager().createCpuDevice()


def run_model(model, inputs, anchors, batches_per_step=1, art="All", device=None, options=None, shapes=None):
    """Runs `model` (bytes or path) once; returns the anchor arrays."""
    if isinstance(art, str):
        art = graft.AnchorReturnType(art)
    flow = graft.DataFlow(batches_per_step, {a: art for a in anchors})
    session = graft.InferenceSession(fnModel=model, dataFlow=flow,
                                     deviceInfo=device or graft.DeviceManager().createCpuDevice(),
                                     inputShapeInfo=shapes, userOptions=options)
    session.prepareDevice()
    out = session.initAnchorArrays()
    session.run(graft.PyStepIO(inputs, out))
    return out


@pytest.fixture
def rng():
    return np.random.default_rng(1234)


def pytest_terminal_summary(terminalreporter):
    """The largest deviations from PyTorch seen by the training tests (tests/python/training_util.py)."""
    mod = sys.modules.get("training_util")
    if mod is None or not mod.DEVIATIONS:
        return
    tr = terminalreporter
    tr.section("largest deviation from PyTorch per training test")
    tr.write_line(f"{'test':<44}{'loss':>10}{'weights':>10}  tolerance")
    for name, (dl, dw, atol, rtol) in sorted(mod.DEVIATIONS.items()):
        tol = f"{atol:.0e}" + (f" + {rtol:.0e} * |torch|" if rtol else "")
        tr.write_line(f"{name:<44}{dl:>10.2e}{dw:>10.2e}  {tol}")
