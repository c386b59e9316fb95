"""The Python API fuzz target (tests/fuzz/fuzz_python.py, issue 16): its regression corpus
(tests/fuzz/regressions/python: every input that once crashed, hung, blew up or raised something
other than graft.Error) replayed, each in a forked child with a memory cap and a timeout, and a
short seeded random-mutation run. `make fuzz` runs the same target under atheris."""
import os
import subprocess
import sys

ROOT = os.path.normpath(os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", ".."))
TARGET = os.path.join(ROOT, "tests", "fuzz", "fuzz_python.py")
CORPUS = os.path.join(ROOT, "tests", "fuzz", "regressions", "python")


def _driver(*args, timeout=900):
    env = dict(os.environ, OMP_WAIT_POLICY="passive")
    r = subprocess.run([sys.executable, TARGET, *args], capture_output=True, text=True, timeout=timeout, env=env)
    return r.returncode, r.stdout + r.stderr


def test_python_regression_corpus_replays_clean():
    files = [f for f in os.listdir(CORPUS) if not f.endswith(".md")]
    assert files, f"no regression inputs in {CORPUS}"
    code, out = _driver("replay", CORPUS)
    assert code == 0, out
    assert f"replayed {len(files)}: {len(files)} ok, 0 findings" in out, out


def test_seeded_random_mutations_find_nothing():
    code, out = _driver("random", "--count", "25", "--seed", "7")
    assert code == 0, out
    assert "total 25: ok 25" in out, out
