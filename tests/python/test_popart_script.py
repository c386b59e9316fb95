"""Runs the PopART-style inference and training scripts (import graft as popart) as a user would run
them."""
import os
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))


def _run_script(name):
    env = dict(os.environ)
    python_dir = os.path.normpath(os.path.join(HERE, "..", "..", "python"))
    env["PYTHONPATH"] = python_dir + os.pathsep + env.get("PYTHONPATH", "")
    r = subprocess.run([sys.executable, "-W", "ignore", os.path.join(HERE, name)],
                       capture_output=True, text=True, env=env, timeout=300)
    assert r.returncode == 0, r.stdout + r.stderr
    return r


def test_popart_style_inference_script():
    r = _run_script("popart_style_inference.py")
    assert "popart-style inference: OK" in r.stdout
    assert "Probabilities shape: (5, 4, 3)" in r.stdout


def test_popart_style_training_script():
    r = _run_script("popart_style_training.py")
    assert "popart-style training: OK" in r.stdout
    assert "Loss anchor shape: (4,)" in r.stdout
    assert "Trainable weights: ['fc1/weights', 'fc1/bias', 'fc2/weights', 'fc2/bias']" in r.stdout


def test_poptorch_style_training_script():
    r = _run_script("poptorch_style_training.py")
    assert "poptorch-style training: OK" in r.stdout
    assert "epoch 2: loss" in r.stdout
