"""bf16 against float32 on the model zoo (SessionOptions.enableBf16; docs/cpu-backend.md#bf16).

For each zoo model, runs graft's inference on the zoo's sample input (bench/zoo.py make_inputs) once
in float32 and once with bf16 matmuls and convolutions, and reports:
  top-1 agreement  the fraction of rows whose argmax over the last axis is the same (for the
                   classifiers: the predicted class of each sample; for bert4 and lstm2, whose
                   outputs are features, the largest feature of each token / time step);
  max rel error    max |bf16 - fp32| / max |fp32| over the whole output;
  rms rel error    rms(bf16 - fp32) / rms(fp32);
  kernels          how many distinct matmul/convolution kernels (kernel and oneDNN implementation)
                   ran in bf16, and which fell back to float32 (oneDNN has no fast bf16
                   implementation for them);
and, for each row whose argmax moved, float32's gap between the two entries against the largest
bf16 error in that row (a gap below that error is a near tie that bf16 cannot resolve).
The same top-1 agreement and errors are given for the peer, PyTorch's own bf16 mixed precision
(torch.autocast on the CPU with bfloat16, the same model and input against PyTorch's float32), so
that graft's bf16 is judged against what bf16 arithmetic gives elsewhere (--no-torch: graft only).
It times nothing (run it on any machine). Run it with the bench venv's Python:

    .venv-bench/bin/python bench/bf16_accuracy.py [--zoo build/bench-zoo] [--models mlp,resnet50]
        [--batch large|small] [--threads 2] [--json out.json]

It reads ZOO/NAME_bB.onnx and ZOO/NAME_bB_x.npy where `make bench` exported them, and exports just
those two files (with bench/export.py's exporter) where they are missing.
"""
import argparse
import json
import os
import sys

os.environ.setdefault("OMP_WAIT_POLICY", "passive")

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(HERE)
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.join(REPO, "python"))

import numpy as np  # noqa: E402

import zoo as Z  # noqa: E402


def ensure_exported(zoo_dir, name, batch):
    stem = f"{name}_b{batch}"
    model, xfile = os.path.join(zoo_dir, f"{stem}.onnx"), os.path.join(zoo_dir, f"{stem}_x.npy")
    if not (os.path.exists(model) and os.path.exists(xfile)):
        import torch

        import export as E

        torch.set_num_threads(2)
        os.makedirs(zoo_dir, exist_ok=True)
        x, _ = Z.make_inputs(name, batch)
        np.save(xfile, x.numpy())
        E.export(Z.build(name).eval(), (x,), model, ["x"], ["out"], False)
        print(f"exported {stem}", flush=True)
    return model, np.load(xfile)


def run(graft, model, x, bf16, threads):
    opts = graft.SessionOptions()
    opts.numThreads = threads
    opts.enableBf16 = bf16
    opts.enableProfiling = True
    sess = graft.InferenceSession(fnModel=model, dataFlow=graft.DataFlow(1, {"out": graft.AnchorReturnType("All")}),
                                  deviceInfo=graft.DeviceManager().createCpuDevice(), userOptions=opts)
    sess.prepareDevice()
    sess.weightsFromHost()
    anchors = sess.initAnchorArrays()
    sess.run(graft.PyStepIO({"x": x}, anchors))
    kernels = sorted({k for p in sess.profile() for k in p.kernels})
    return np.asarray(anchors["out"], dtype=np.float64), kernels


def agreement(fp32, bf16):
    """(top-1 agreement, max rel error, rms rel error) of bf16 against fp32."""
    f2, b2 = fp32.reshape(-1, fp32.shape[-1]), bf16.reshape(-1, bf16.shape[-1])
    diff = bf16 - fp32
    return (float(np.mean(f2.argmax(axis=1) == b2.argmax(axis=1))),
            float(np.max(np.abs(diff)) / (np.max(np.abs(fp32)) or 1.0)),
            float(np.sqrt(np.mean(diff ** 2)) / (np.sqrt(np.mean(fp32 ** 2)) or 1.0)))


def torch_autocast(name, x, threads):
    """PyTorch's float32 and torch.autocast bf16 outputs of the zoo model on x."""
    import torch

    torch.set_num_threads(threads)
    model = Z.build(name).eval()
    with torch.inference_mode():
        fp32 = model(torch.from_numpy(x)).float().numpy()
        with torch.autocast("cpu", dtype=torch.bfloat16):
            bf16 = model(torch.from_numpy(x)).float().numpy()
    return fp32.astype(np.float64), bf16.astype(np.float64)


def compare(name, model, x, threads, with_torch):
    import graft

    fp32, _ = run(graft, model, x, False, threads)
    bf16, kernels = run(graft, model, x, True, threads)
    f2, b2 = fp32.reshape(-1, fp32.shape[-1]), bf16.reshape(-1, bf16.shape[-1])
    rows_f, rows_b = f2.argmax(axis=1), b2.argmax(axis=1)
    top1, max_rel, rms_rel = agreement(fp32, bf16)
    # Each row where the argmax moved: how far apart float32 had the two entries, against the
    # largest bf16 error in that row (a gap below the error is a near tie bf16 cannot resolve).
    moved = []
    for r in np.nonzero(rows_f != rows_b)[0]:
        gap = float(f2[r, rows_f[r]] - f2[r, rows_b[r]])
        err = float(np.max(np.abs(b2[r] - f2[r])))
        moved.append({"row": int(r), "fp32_gap": gap, "row_max_abs_err": err})
    res = {
        "model": name,
        "shape": list(fp32.shape),
        "classifier": Z.MODELS[name][4] == "ce",
        "top1_agree": top1,
        "rows": int(rows_f.size),
        "max_rel_err": max_rel,
        "rms_rel_err": rms_rel,
        "moved": moved,
        "bf16_kernels": [k for k in kernels if k.endswith(", bf16)")],
        "f32_fallbacks": [k for k in kernels if "f32: oneDNN has no fast bf16" in k],
    }
    if with_torch:
        t32, t16 = torch_autocast(name, x, threads)
        res["torch_top1_agree"], res["torch_max_rel_err"], res["torch_rms_rel_err"] = agreement(t32, t16)
    return res


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--zoo", default=os.path.join(REPO, "build", "bench-zoo"))
    ap.add_argument("--models", default=",".join(Z.MODELS))
    ap.add_argument("--batch", choices=["small", "large"], default="large",
                    help="the zoo's small or large batch (large: more samples for the top-1 agreement)")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--json", help="also write the results here")
    ap.add_argument("--no-torch", action="store_true", help="skip PyTorch autocast's bf16 (the peer's columns)")
    a = ap.parse_args()
    results = []
    print(f"{'model':<17}{'output':<17}{'top-1 agree':>14}{'max rel err':>13}{'rms rel err':>13}"
          + ("" if a.no_torch else f"{'PyTorch bf16: top-1':>21}{'max rel':>10}{'rms rel':>10}") + "  matmul/conv kernels")
    for name in a.models.split(","):
        small, large = Z.batches(name)
        batch = large if a.batch == "large" else small
        model, x = ensure_exported(a.zoo, name, batch)
        r = compare(name, model, x, a.threads, not a.no_torch)
        results.append(r)
        agree = f"{r['top1_agree'] * r['rows']:.0f}/{r['rows']}" + ("" if r["classifier"] else "*")
        fb = f"; f32 fallback: {', '.join(r['f32_fallbacks'])}" if r["f32_fallbacks"] else ""
        peer = "" if a.no_torch else (f"{r['torch_top1_agree'] * r['rows']:>21.0f}{r['torch_max_rel_err']:>10.2e}"
                                      f"{r['torch_rms_rel_err']:>10.2e}")
        print(f"{name + '_b' + str(batch):<17}{str(r['shape']):<17}{agree:>14}{r['max_rel_err']:>13.2e}"
              f"{r['rms_rel_err']:>13.2e}{peer}  {len(r['bf16_kernels'])} distinct in bf16{fb}", flush=True)
        for m in r["moved"]:
            print(f"{'':<17}row {m['row']}: argmax moved; float32's gap between the two {m['fp32_gap']:.2e}, "
                  f"largest bf16 error in the row {m['row_max_abs_err']:.2e}", flush=True)
    print("* not a classifier: argmax over the last axis of the output (features), per row")
    if a.json:
        with open(a.json, "w") as f:
            json.dump(results, f, indent=1)


if __name__ == "__main__":
    main()
