"""Writes the ONNX backend conformance data of the installed onnx package into one folder.

The onnx wheel ships the folders simple, pytorch-converted, pytorch-operator and light, but not
node (the per-op cases): those exist only as the package's Python generators. This script runs the
generators of the node and simple cases through the package's own writer
(onnx.backend.test.cmd_tools.generate_data), copies the shipped pytorch folders next to them, and
turns light (real models with small weights and stored outputs) into case folders, so that
tests/conformance reads one tree that matches the onnx version graft links (requirements.txt pins
the Python package to the C++ library's version; docs/dependencies.md).

Usage: generate_data.py OUTPUT_DIR. Writes into OUTPUT_DIR.tmp and renames it when complete, so a
half-written tree is never taken for a finished one.
"""

import argparse
import os
import shutil
import sys

import onnx
import onnx.backend.test.case.model as model_cases
import onnx.backend.test.case.node as node_cases
from onnx.backend.test import cmd_tools
from onnx.backend.test.runner import Runner

SHIPPED = ("pytorch-converted", "pytorch-operator")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("output")
    args = parser.parse_args()
    out = os.path.abspath(args.output)
    tmp = out + ".tmp"
    shutil.rmtree(tmp, ignore_errors=True)
    os.makedirs(tmp)

    cases = node_cases.collect_testcases() + model_cases.collect_testcases()
    # The package's writer takes its cases from model_cases.collect_testcases(); hand it both kinds.
    # Real (downloaded) models are left out: nothing is downloaded.
    cases = [c for c in cases if c.kind != "real"]
    saved = cmd_tools.model_test.collect_testcases
    cmd_tools.model_test.collect_testcases = lambda: cases
    try:
        cmd_tools.generate_data(argparse.Namespace(output=tmp))
    finally:
        cmd_tools.model_test.collect_testcases = saved

    data = os.path.join(os.path.dirname(cmd_tools.__file__), "data")
    for folder in SHIPPED:
        src = os.path.join(data, folder)
        if not os.path.isdir(src):
            print(f"generate_data: the onnx package has no {src}", file=sys.stderr)
            return 1
        shutil.copytree(src, os.path.join(tmp, folder))
    # light: real models with small weights, each light_NAME.onnx with its light_NAME_output_0.pb.
    # ONNX's runner feeds them Runner.generate_dummy_data (arange / size, random=False); written
    # here as case folders like the others.
    light = os.path.join(data, "light")
    for f in sorted(os.listdir(light)):
        if not f.endswith(".onnx"):
            continue
        stem = f[: -len(".onnx")]
        case = os.path.join(tmp, "light", "test_" + stem[len("light_"):], "test_data_set_0")
        os.makedirs(case)
        shutil.copy(os.path.join(light, f), os.path.join(case, "..", "model.onnx"))
        model = onnx.load(os.path.join(light, f))
        inits = {i.name for i in model.graph.initializer}
        inputs = [x for x in model.graph.input if x.name not in inits]
        for j, x in enumerate(inputs):
            value = Runner.generate_dummy_data(x, seed=0, name=stem, random=False)
            with open(os.path.join(case, f"input_{j}.pb"), "wb") as out_f:
                out_f.write(onnx.numpy_helper.from_array(value, x.name).SerializeToString())
        for j in range(len(model.graph.output)):
            stored = os.path.join(light, f"{stem}_output_{j}.pb")
            if not os.path.exists(stored):
                print(f"generate_data: {stored} is missing", file=sys.stderr)
                return 1
            shutil.copy(stored, os.path.join(case, f"output_{j}.pb"))
    with open(os.path.join(tmp, "ONNX_VERSION"), "w") as f:
        f.write(onnx.__version__ + "\n")
    shutil.rmtree(out, ignore_errors=True)
    os.rename(tmp, out)
    counts = {k: len(os.listdir(os.path.join(out, k))) for k in ("node", "simple", "light") + SHIPPED}
    print(f"generate_data: onnx {onnx.__version__} conformance data in {out}: {counts}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
