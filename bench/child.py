"""Times one (framework, model, batch, mode) in its own process and prints one JSON line.

A process per measurement keeps peak memory (the RSS high-water mark) per run and keeps the
frameworks' thread pools apart. Only the framework under test is imported: graft and ONNX
Runtime runs do not load PyTorch.

    child.py FRAMEWORK MODE ZOO_DIR MODEL BATCH THREADS BUDGET_S MAX_REPS
FRAMEWORK: graft | graft_bf16 | ort | torch | torch_bf16 | torch_compile; MODE: infer | train.
torch_bf16 (inference only) is PyTorch's own bf16 mixed precision, torch.autocast("cpu", bfloat16):
the peer that graft's enableBf16 is measured against for speed and for accuracy.
"""
import json
import os
import sys
import time
import traceback

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(HERE)


def rss_mb(field="VmRSS"):
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith(field + ":"):
                return int(line.split()[1]) / 1024.0
    return 0.0


def release_cpuid_mask():
    """Under bench/run.py --isa avx2 (bench/cpuid_mask.cpp preloaded): CPUID faulting off once the
    warm-up steps have made every library choose its kernels; left on, it costs each context switch
    a VM exit, the same for every framework but more for the ones that wake their threads more."""
    if "libgraft_cpuid_mask" not in os.environ.get("LD_PRELOAD", ""):
        return
    import ctypes

    if ctypes.CDLL(None).graft_cpuid_mask_release() < 0:
        raise RuntimeError("cpuid_mask: a thread did not turn CPUID faulting off")


def timed(fn, budget, max_reps, warmup=2, min_reps=3):
    for _ in range(warmup):
        fn()
    release_cpuid_mask()
    times = []
    start = time.perf_counter()
    while len(times) < max_reps and (len(times) < min_reps or time.perf_counter() - start < budget):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return times


def load_np(zoo, stem, what):
    import numpy as np

    return np.load(os.path.join(zoo, f"{stem}_{what}.npy"))


def compare(out, ref):
    import numpy as np

    out = np.asarray(out, dtype=np.float64).reshape(ref.shape)
    ref = ref.astype(np.float64)
    err = float(np.max(np.abs(out - ref)))
    scale = float(np.max(np.abs(ref))) or 1.0
    res = {"max_abs_err": err, "max_rel_err": err / scale}
    if ref.ndim >= 2 and ref.shape[-1] > 1:
        # Rows whose argmax over the last axis matches PyTorch's (the classifiers' top-1; for the
        # feature outputs of bert4 and lstm2, the largest feature of each token or time step).
        a, b = out.reshape(-1, ref.shape[-1]).argmax(-1), ref.reshape(-1, ref.shape[-1]).argmax(-1)
        res["argmax_agree"] = int((a == b).sum())
        res["argmax_rows"] = int(a.size)
    return res


def run_graft(mode, zoo, stem, threads, budget, max_reps, res, bf16=False):
    sys.path.insert(0, os.path.join(REPO, "python"))
    import graft

    res["graft_module"] = graft.__file__
    x = load_np(zoo, stem, "x")
    res["base_rss_mb"] = rss_mb()
    opts = graft.SessionOptions()
    opts.numThreads = threads
    opts.enableBf16 = bf16
    dev = graft.DeviceManager().createCpuDevice()
    if mode == "infer":
        path = os.path.join(zoo, f"{stem}.onnx")
        sess = graft.InferenceSession(fnModel=path, dataFlow=graft.DataFlow(1, {"out": graft.AnchorReturnType("All")}),
                                      deviceInfo=dev, userOptions=opts)
        inputs = {"x": x}
    else:
        path = os.path.join(zoo, f"{stem}_train.onnx")
        sess = graft.TrainingSession(fnModel=path, dataFlow=graft.DataFlow(1, {"loss": graft.AnchorReturnType("All")}),
                                     loss="loss", optimizer=graft.SGD({"defaultLearningRate": (0.01, True)}),
                                     deviceInfo=dev, userOptions=opts)
        inputs = {"x": x, "y": load_np(zoo, stem, "y")}
    t0 = time.perf_counter()
    sess.prepareDevice()
    sess.weightsFromHost()
    res["prepare_s"] = time.perf_counter() - t0
    anchors = sess.initAnchorArrays()
    step = graft.PyStepIO(inputs, anchors)
    t0 = time.perf_counter()
    sess.run(step)
    res["first_run_s"] = time.perf_counter() - t0
    key = "out" if mode == "infer" else "loss"
    if mode == "infer":
        res.update(compare(anchors[key], load_np(zoo, stem, "ref")))
    else:
        res["first_loss"] = float(anchors[key])
    res["times"] = timed(lambda: sess.run(step), budget, max_reps, warmup=1)


def run_ort(mode, zoo, stem, threads, budget, max_reps, res):
    import onnxruntime as ort

    res["version"] = ort.__version__
    x = load_np(zoo, stem, "x")
    res["base_rss_mb"] = rss_mb()
    so = ort.SessionOptions()
    so.intra_op_num_threads = threads
    so.inter_op_num_threads = 1
    so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
    if os.environ.get("BENCH_ORT_NO_SPIN"):
        so.add_session_config_entry("session.intra_op.allow_spinning", "0")
    t0 = time.perf_counter()
    sess = ort.InferenceSession(os.path.join(zoo, f"{stem}.onnx"), so, providers=["CPUExecutionProvider"])
    res["prepare_s"] = time.perf_counter() - t0
    out = sess.run(None, {"x": x})[0]
    res.update(compare(out, load_np(zoo, stem, "ref")))
    res["times"] = timed(lambda: sess.run(None, {"x": x}), budget, max_reps)


def run_torch(mode, zoo, stem, threads, budget, max_reps, res, name, compiled, bf16=False):
    import contextlib

    import torch

    import zoo as Z

    torch.set_num_threads(threads)
    res["version"] = torch.__version__
    x = torch.from_numpy(load_np(zoo, stem, "x"))
    res["base_rss_mb"] = rss_mb()
    model = Z.build(name)
    t0 = time.perf_counter()
    if mode == "infer":
        model.eval()
        fwd = torch.compile(model) if compiled else model

        if bf16 and not torch.cpu._is_avx512_bf16_supported():
            raise RuntimeError("torch_bf16: this CPU has no avx512_bf16")
        cast = (lambda: torch.autocast("cpu", dtype=torch.bfloat16)) if bf16 else contextlib.nullcontext

        def step():
            with torch.inference_mode(), cast():
                return fwd(x)

        out = step()
        res["prepare_s"] = time.perf_counter() - t0
        res.update(compare(out.float().numpy(), load_np(zoo, stem, "ref")))
    else:
        if bf16:
            raise ValueError("torch_bf16 times inference only")
        model.train()
        y = torch.from_numpy(load_np(zoo, stem, "y"))
        opt = torch.optim.SGD(model.parameters(), lr=0.01)
        crit = Z.WithLoss(model, Z.loss_kind(name))
        fwd = torch.compile(crit) if compiled else crit

        def step():
            opt.zero_grad(set_to_none=True)
            loss = fwd(x, y)
            loss.backward()
            opt.step()
            return loss

        res["first_loss"] = float(step())
        res["prepare_s"] = time.perf_counter() - t0
    res["times"] = timed(step, budget, max_reps, warmup=1)


def main():
    fw, mode, zoo, name, batch, threads, budget, max_reps = sys.argv[1:9]
    batch, threads, budget, max_reps = int(batch), int(threads), float(budget), int(max_reps)
    stem = f"{name}_b{batch}"
    res = {"framework": fw, "mode": mode, "model": name, "batch": batch, "threads": threads}
    sys.path.insert(0, HERE)
    try:
        if fw in ("graft", "graft_bf16"):
            run_graft(mode, zoo, stem, threads, budget, max_reps, res, bf16=fw == "graft_bf16")
        elif fw == "ort":
            run_ort(mode, zoo, stem, threads, budget, max_reps, res)
        elif fw in ("torch", "torch_compile", "torch_bf16"):
            run_torch(mode, zoo, stem, threads, budget, max_reps, res, name, fw == "torch_compile",
                      bf16=fw == "torch_bf16")
        else:
            raise ValueError(f"unknown framework {fw}")
    except Exception as e:  # reported, not raised: the parent records why
        msg = str(e).strip().splitlines()
        res["error"] = f"{type(e).__name__}: {msg[0] if msg else ''}"[:400]
        res["traceback"] = traceback.format_exc()[-2000:]
    # VmHWM, not ru_maxrss: Linux keeps ru_maxrss across exec, so it would report the parent's.
    res["peak_rss_mb"] = rss_mb("VmHWM")
    print("RESULT " + json.dumps(res), flush=True)


if __name__ == "__main__":
    main()
