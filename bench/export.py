"""Exports the zoo to ONNX (opset 17) with PyTorch's exporter, with inputs and PyTorch's outputs.

For each model and batch B, ZOO_DIR gets:
  NAME_bB.onnx         inference model (eval mode), input "x", output "out"
  NAME_bB_train.onnx   training model (train mode) with its loss: inputs "x", "y", output "loss"
  NAME_bB_{x,y,ref}.npy  the input, the training target, PyTorch's eval-mode output
and meta.json the FLOPs (forward; forward + backward) and PyTorch's first training loss.
"""
import json
import os
import sys
import time
import warnings

import numpy as np
import torch

import zoo as Z

warnings.filterwarnings("ignore")


def count_flops(fn):
    from torch.utils.flop_counter import FlopCounterMode

    with FlopCounterMode(display=False) as fc:
        fn()
    return int(fc.get_total_flops())


def export(model, args, path, inputs, outputs, training):
    kwargs = dict(input_names=inputs, output_names=outputs, opset_version=17, do_constant_folding=not training,
                  dynamo=False)
    if training:
        kwargs["training"] = torch.onnx.TrainingMode.TRAINING
    torch.onnx.export(model, args, path, **kwargs)


def export_one(name, batch, zoo_dir, meta):
    stem = f"{name}_b{batch}"
    key = stem
    x, y = Z.make_inputs(name, batch)
    model = Z.build(name).eval()
    with torch.no_grad():
        ref = model(x)
    np.save(os.path.join(zoo_dir, f"{stem}_x.npy"), x.numpy())
    np.save(os.path.join(zoo_dir, f"{stem}_y.npy"), y.numpy())
    np.save(os.path.join(zoo_dir, f"{stem}_ref.npy"), ref.numpy())
    export(model, (x,), os.path.join(zoo_dir, f"{stem}.onnx"), ["x"], ["out"], False)

    # Training: a fresh copy (same seed, same weights) in train mode, loss included.
    tmodel = Z.build(name).train()
    wl = Z.WithLoss(tmodel, Z.loss_kind(name))
    export(wl, (x, y), os.path.join(zoo_dir, f"{stem}_train.onnx"), ["x", "y"], ["loss"], True)
    tmodel = Z.build(name).train()
    wl = Z.WithLoss(tmodel, Z.loss_kind(name))
    torch.manual_seed(0)
    first_loss = float(wl(x, y))

    if name == "lstm2":
        fwd, train = Z.lstm_flops(batch, False), Z.lstm_flops(batch, True)
    else:
        with torch.no_grad():
            fwd = count_flops(lambda: model(x))
        tm = Z.build(name).train()
        twl = Z.WithLoss(tm, Z.loss_kind(name))
        train = count_flops(lambda: twl(x, y).backward())
    params = sum(p.numel() for p in model.parameters())
    meta[key] = {"model": name, "batch": batch, "flops_infer": fwd, "flops_train": train, "params": params,
                 "torch_first_loss": first_loss, "loss": Z.loss_kind(name)}


def main():
    zoo_dir = sys.argv[1]
    names = sys.argv[2].split(",")
    quick = len(sys.argv) > 3 and sys.argv[3] == "quick"
    os.makedirs(zoo_dir, exist_ok=True)
    meta_path = os.path.join(zoo_dir, "meta.json")
    meta = json.load(open(meta_path)) if os.path.exists(meta_path) else {}
    torch.set_num_threads(2)
    for name in names:
        small, large = Z.batches(name)
        for batch in ([small] if quick else [small, large]):
            stem = f"{name}_b{batch}"
            if stem in meta and os.path.exists(os.path.join(zoo_dir, f"{stem}_train.onnx")):
                continue
            t0 = time.perf_counter()
            export_one(name, batch, zoo_dir, meta)
            print(f"exported {stem} in {time.perf_counter() - t0:.1f} s", flush=True)
            with open(meta_path, "w") as f:
                json.dump(meta, f, indent=1)


if __name__ == "__main__":
    main()
