"""ONNX Runtime on the same conformance cases as tests/conformance (for comparison).

Usage: ort_conformance.py [DATA_DIR]  (default: $GRAFT_DEPS_DIR/onnx-<pin>-testdata, which
scripts/setup.sh writes). Prints the pass rate per folder, as the C++ runner does. A case passes when
ORT loads the model and every output matches the stored one (rtol 1e-3, atol 1e-7, as ONNX's
backend test runner; NaNs must match).
"""

import glob
import os
import re
import sys

import numpy as np
import onnx
import onnxruntime as ort
from onnx import numpy_helper

FOLDERS = ("node", "simple", "pytorch-converted", "pytorch-operator", "light")


def default_dir():
    here = os.path.dirname(os.path.abspath(__file__))
    req = open(os.path.join(here, "..", "..", "requirements.txt")).read()
    version = re.search(r"^onnx==([0-9.]+)", req, re.M).group(1)
    deps = os.environ.get("GRAFT_DEPS_DIR", os.path.expanduser("~/.cache/graft-deps"))
    return os.path.join(deps, f"onnx-{version}-testdata")


def load(path, type_proto):
    data = open(path, "rb").read()
    if type_proto.HasField("sequence_type"):
        s = onnx.SequenceProto()
        s.ParseFromString(data)
        return [numpy_helper.to_array(t) for t in s.tensor_values]
    if type_proto.HasField("optional_type"):
        o = onnx.OptionalProto()
        o.ParseFromString(data)
        return numpy_helper.to_array(o.tensor_value) if o.HasField("tensor_value") else None
    t = onnx.TensorProto()
    t.ParseFromString(data)
    return numpy_helper.to_array(t)


def close(a, b):
    if isinstance(b, list):
        return isinstance(a, list) and len(a) == len(b) and all(close(x, y) for x, y in zip(a, b))
    if b is None:
        return a is None
    a, b = np.asarray(a), np.asarray(b)
    if a.shape != b.shape:
        return False
    if b.dtype.kind in "fc":
        return np.allclose(a.astype(b.dtype), b, rtol=1e-3, atol=1e-7, equal_nan=True)
    return np.array_equal(a, b)


def run_case(case):
    model = onnx.load(os.path.join(case, "model.onnx"))
    opts = ort.SessionOptions()
    opts.log_severity_level = 3
    sess = ort.InferenceSession(model.SerializeToString(), opts, providers=["CPUExecutionProvider"])
    inits = {i.name for i in model.graph.initializer}
    inputs = [i for i in model.graph.input if i.name not in inits]
    for ds in sorted(glob.glob(os.path.join(case, "test_data_set_*"))):
        n_in = len(glob.glob(os.path.join(ds, "input_*.pb")))
        feeds = {inputs[j].name: load(os.path.join(ds, f"input_{j}.pb"), inputs[j].type) for j in range(n_in)}
        outs = sess.run(None, feeds)
        for j, o in enumerate(model.graph.output):
            p = os.path.join(ds, f"output_{j}.pb")
            if os.path.exists(p) and not close(outs[j], load(p, o.type)):
                return False
    return True


def main():
    ort.set_default_logger_severity(4)
    data = sys.argv[1] if len(sys.argv) > 1 else default_dir()
    total = [0, 0]
    print(f"ONNX Runtime {ort.__version__} on {data}")
    print("| folder | passed | total | rate |\n|---|---|---|---|")
    for folder in FOLDERS:
        cases = sorted(glob.glob(os.path.join(data, folder, "*", "model.onnx")))
        passed = 0
        for c in cases:
            try:
                passed += run_case(os.path.dirname(c))
            except Exception:  # noqa: BLE001  (load or run failure: the case fails)
                pass
        total[0] += passed
        total[1] += len(cases)
        if cases:
            print(f"| {folder} | {passed} | {len(cases)} | {100.0 * passed / len(cases):.1f}% |")
    print(f"| all | {total[0]} | {total[1]} | {100.0 * total[0] / max(total[1], 1):.1f}% |")


if __name__ == "__main__":
    main()
