"""Runs the PopART-style inference script (import graft as popart) as a user would run it."""
import os
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))


def test_popart_style_inference_script():
    env = dict(os.environ)
    python_dir = os.path.normpath(os.path.join(HERE, "..", "..", "python"))
    env["PYTHONPATH"] = python_dir + os.pathsep + env.get("PYTHONPATH", "")
    r = subprocess.run([sys.executable, "-W", "ignore", os.path.join(HERE, "popart_style_inference.py")],
                       capture_output=True, text=True, env=env, timeout=300)
    assert r.returncode == 0, r.stdout + r.stderr
    assert "popart-style inference: OK" in r.stdout
    assert "Probabilities shape: (5, 4, 3)" in r.stdout
