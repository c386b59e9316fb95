"""SessionOptions.enableBf16 from Python: refused with graft.Error naming the option where the CPU has
no avx512_bf16 (GRAFT_CPU_ISA=avx2 in a fresh process shows that on any host); where it has, a
matmul and a convolution run in bf16 within a bf16 tolerance of float32."""
import os
import subprocess
import sys

import numpy as np
import pytest

import graft
from conftest import run_model

_PYTHON_DIR = os.path.normpath(os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "python"))


def _host_has_bf16():
    if os.environ.get("GRAFT_CPU_ISA", "native") not in ("", "native", "avx512"):
        return False
    try:
        with open("/proc/cpuinfo") as f:
            return any(line.startswith("flags") and "avx512_bf16" in line.split() for line in f)
    except OSError:
        return False


def _model(rng):
    b = graft.Builder()
    x = b.addInputTensor("FLOAT", [2, 8, 10, 10], "x")
    w = b.addInitializedInputTensor(rng.uniform(-0.3, 0.3, (16, 8, 3, 3)).astype(np.float32), "w")
    h = b.aiOnnx.conv([x, w], pads=[1, 1, 1, 1])
    h = b.aiOnnx.relu([h])
    h = b.aiOnnx.reshape([h, b.aiOnnx.constant(np.array([2, 1600], np.int64))])
    m = b.addInitializedInputTensor(rng.uniform(-0.05, 0.05, (1600, 10)).astype(np.float32), "m")
    y = b.aiOnnx.matmul([h, m])
    b.addOutputTensor(y)
    return b.getModelProto(), x, y


def test_bf16_is_refused_without_avx512_bf16():
    # A fresh process: GRAFT_CPU_ISA is read once, at start-up.
    code = ("import graft\n"
            "b = graft.Builder()\n"
            "x = b.addInputTensor('FLOAT', [2], 'x')\n"
            "y = b.aiOnnx.relu([x])\n"
            "b.addOutputTensor(y)\n"
            "o = graft.SessionOptions()\n"
            "o.enableBf16 = True\n"
            "try:\n"
            "    graft.InferenceSession(b.getModelProto(), graft.DataFlow(1, [y]), "
            "graft.DeviceManager().createCpuDevice(), userOptions=o)\n"
            "except graft.Error as e:\n"
            "    print('graft.Error:', e)\n")
    env = dict(os.environ, GRAFT_CPU_ISA="avx2", PYTHONPATH=os.pathsep.join(p for p in [_PYTHON_DIR] + sys.path if p))
    r = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    assert "graft.Error: SessionOptions.enableBf16: this CPU has no avx512_bf16" in r.stdout, r.stdout + r.stderr
    assert "limited by GRAFT_CPU_ISA" in r.stdout


@pytest.mark.skipif(not _host_has_bf16(), reason="SessionOptions.enableBf16 needs avx512_bf16, which this host "
                    "(or GRAFT_CPU_ISA) does not offer; test_bf16_is_refused_without_avx512_bf16 checks the refusal")
def test_bf16_tracks_float32(rng):
    model, x, y = _model(rng)
    data = rng.standard_normal((2, 8, 10, 10)).astype(np.float32)
    want = run_model(model, {x: data}, [y])[y]
    o = graft.SessionOptions()
    o.enableBf16 = True
    assert o.enableBf16 is True
    got = run_model(model, {x: data}, [y], options=o)[y]
    rel = np.sqrt(np.mean((got - want) ** 2)) / np.sqrt(np.mean(want ** 2))
    assert 1e-5 < rel < 2e-2, rel  # bf16 rounding: visible, and small
