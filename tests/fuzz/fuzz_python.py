#!/usr/bin/env python3
"""A fuzz target over graft's Python API (issue 16): the bytes of one input choose a category and
its values, all drawn through one Provider so that an input means the same thing with or without
atheris:

- model:    a seed model, mutated (bit flips, edge bytes, cuts, splices), into InferenceSession or
            TrainingSession, then prepareDevice, initAnchorArrays and a run with inputs shaped as
            the session says;
- options:  hostile SessionOptions values (ints far out of range, NaN, negative, wrong types),
            DataFlow / AnchorReturnType / device arguments;
- anchors:  anchor arrays of drawn shape and dtype, missing or extra ones;
- stepio:   PyStepIO input arrays of drawn shape, dtype and contiguity, missing or extra keys;
- optimizer: SGD / Adam / Adamax / Lamb values, and updateOptimizerFromHost.

An input passes when it ends normally or with graft.Error (and a TypeError that is pybind11's
own "incompatible function arguments"); any other exception is a finding (raised, so that
atheris records it), and so is a crash, a hang or a memory blow-up, which atheris (libFuzzer) or
the driver below sees from outside.

    .venv/bin/python tests/fuzz/fuzz_python.py atheris [libFuzzer flags] [CORPUS_DIR...]
    .venv/bin/python tests/fuzz/fuzz_python.py random --count N [--seed S] [--findings DIR] [--seconds T]
    .venv/bin/python tests/fuzz/fuzz_python.py replay DIR_OR_FILE...

`random` is the seeded random-mutation driver (no atheris needed): N random inputs, each in a
forked child with a memory cap and a timeout, counted by outcome; findings are written to
--findings. `replay` runs files the same way (tests/fuzz/regressions/python: make test replays
them through tests/python/test_fuzz_python.py). `regressions [DIR]` writes the inputs of issue
16's Python reproducers (REGRESSIONS below) into that folder. Exit status 1 on any finding.
"""
import os
import random
import struct
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "..", "python"))

import numpy as np  # noqa: E402
import onnx  # noqa: E402
import onnx.helper as oh  # noqa: E402
import onnx.numpy_helper  # noqa: E402,F401

if len(sys.argv) > 1 and sys.argv[1] == "atheris":
    import atheris  # noqa: E402 (installed by make fuzz-python)

    # Coverage of graft's Python package (instrumenting every loaded module takes minutes).
    with atheris.instrument_imports(include=["graft"]):
        import graft  # noqa: E402
else:
    import graft  # noqa: E402

from forked import l1_regression_model, run_forked  # noqa: E402

MEMORY_CAP = 4 << 30
TIMEOUT = 60
INTS = [0, -1, 1, 2, 3, 7, 64, 2000, 40000, 100000, 10**6, 2**31 - 1, 2**31, 2**32, 2**63 - 1, 2**63, -2**31, 10**30]
FLOATS = [float("nan"), float("inf"), -float("inf"), -1.0, 0.0, 1.0, 1e30, -1e-30, 0.5, 2.0, 1e-45]
DTYPES = [np.float32, np.float64, np.float16, np.int64, np.int32, np.int8, np.uint8, np.bool_, object]


class Provider:
    """Draws values from the input bytes (zeros once they run out): deterministic per input."""

    def __init__(self, data):
        self.data = bytes(data)
        self.pos = 0

    def byte(self):
        if self.pos >= len(self.data):
            return 0
        self.pos += 1
        return self.data[self.pos - 1]

    def int(self, n):
        """An int in [0, n)."""
        if n <= 1:
            return 0
        v = 0
        for _ in range(4 if n > 65536 else 2 if n > 256 else 1):
            v = (v << 8) | self.byte()
        return v % n

    def choice(self, seq):
        return seq[self.int(len(seq))]

    def chance(self, num, den=8):
        return self.int(den) < num

    def bytes(self, n):
        out = self.data[self.pos:self.pos + n]
        self.pos += len(out)
        return out

    def rest(self):
        return self.bytes(len(self.data))


class ScriptedProvider(Provider):
    """Draws the given values in order (then zeros) and records each draw's range, so that
    encode() can write the bytes a Provider turns into the same draws: how the regression inputs
    of issue 16's reproducers are made (`fuzz_python.py regressions DIR`)."""

    def __init__(self, values):
        super().__init__(b"")
        self.values = list(values)
        self.draws = []

    def int(self, n):
        v = self.values.pop(0) if self.values else 0
        assert n <= 1 or 0 <= v < n, (v, n)
        self.draws.append(n)
        return v if n > 1 else 0

    def bytes(self, n):
        self.draws.append(-n)  # raw bytes: zeros
        return bytes(n)

    def encode(self, values):
        out = bytearray()
        for n, v in zip(self.draws, list(values) + [0] * len(self.draws)):
            if n < 0:
                out += bytes(-n)
            elif n > 1:
                width = 4 if n > 65536 else 2 if n > 256 else 1
                out += v.to_bytes(width, "big")
        return bytes(out)


# ---- seeds: small models the categories start from ----------------------------------------------


def _onnx_model(nodes, inputs, outputs, inits):
    g = oh.make_graph(nodes, "seed", inputs, outputs, inits)
    return oh.make_model(g, opset_imports=[oh.make_opsetid("", 17)], ir_version=8).SerializeToString()


def _mlp():
    """y = relu(gemm(x, w, b)): oneDNN's matmul with a fused Relu on the cpu device."""
    f = onnx.TensorProto.FLOAT
    return _onnx_model([oh.make_node("Gemm", ["x", "w", "b"], ["g"]), oh.make_node("Relu", ["g"], ["y"])],
                       [oh.make_tensor_value_info("x", f, [2, 4])], [oh.make_tensor_value_info("y", f, [2, 4])],
                       [onnx.numpy_helper.from_array(np.ones((4, 4), np.float32), "w"),
                        onnx.numpy_helper.from_array(np.zeros(4, np.float32), "b")]), "y"


def _conv():
    """y = maxpool(relu(conv(x, w))): oneDNN's convolution and pooling."""
    f = onnx.TensorProto.FLOAT
    return _onnx_model([oh.make_node("Conv", ["x", "w"], ["c"], pads=[1, 1, 1, 1]), oh.make_node("Relu", ["c"], ["r"]),
                        oh.make_node("MaxPool", ["r"], ["y"], kernel_shape=[2, 2], strides=[2, 2])],
                       [oh.make_tensor_value_info("x", f, [1, 2, 5, 5])],
                       [oh.make_tensor_value_info("y", f, [1, 3, 2, 2])],
                       [onnx.numpy_helper.from_array(np.full((3, 2, 3, 3), 0.1, np.float32), "w")]), "y"


def _train():
    model, loss, _ = l1_regression_model()
    return model, loss


def _symbolic():
    g = oh.make_graph([oh.make_node("Softmax", ["x"], ["y"], axis=-1)], "g",
                      [oh.make_tensor_value_info("x", onnx.TensorProto.FLOAT, ["n", 3])],
                      [oh.make_tensor_value_info("y", onnx.TensorProto.FLOAT, ["n", 3])])
    return oh.make_model(g, opset_imports=[oh.make_opsetid("", 17)], ir_version=8).SerializeToString(), "y"


_SEEDS = {}


def seed(name):
    if name not in _SEEDS:
        _SEEDS[name] = {"mlp": _mlp, "conv": _conv, "train": _train, "symbolic": _symbolic}[name]()
    return _SEEDS[name]


def device(p):
    dm = graft.DeviceManager()
    return dm.createReferenceDevice() if p.chance(1) else dm.createCpuDevice()


def mutate(p, data):
    data = bytearray(data)
    for _ in range(1 + p.int(6)):
        if not data:
            break
        k, at = p.int(6), p.int(len(data))
        if k == 0:
            data[at] ^= 1 << p.int(8)
        elif k == 1:
            data[at] = p.choice([0, 1, 0x7F, 0x80, 0xFF])
        elif k == 2:
            del data[at:at + 1 + p.int(16)]
        elif k == 3:
            data[at:at] = p.bytes(1 + p.int(8))
        elif k == 4:
            data = data[:at]
        else:
            src = p.int(len(data))
            data[at:at] = data[src:src + 1 + p.int(32)]
    return bytes(data)


def inputs_for(p, s, bps=1):
    """Arrays for every input of session s, shaped as it says (drawn dims for symbolic ones)."""
    feeds = {}
    for i in s.getInputTensorIds() if hasattr(s, "getInputTensorIds") else s.inputIds():
        info = s.getInfo(i)
        shape = [d if isinstance(d, int) and d >= 0 else 1 + p.int(3) for d in info.shape()]
        if bps > 1:
            shape = [bps] + shape
        if int(np.prod(shape, dtype=np.float64)) > 1 << 20:
            return None  # the session took a huge declared input: fine, but not ours to feed
        dt = info.data_type_lcase() if hasattr(info, "data_type_lcase") else None
        feeds[i] = np.ones(shape, np.float32) if dt in (None, "float") else np.ones(shape, dtype=dt)
    return feeds


def run_once(s, p, bps=1):
    s.prepareDevice()
    out = s.initAnchorArrays()
    feeds = inputs_for(p, s, bps)
    if feeds is not None:
        s.run(graft.PyStepIO(feeds, out))
    return out


# ---- the categories ----------------------------------------------------------------------------


def cat_model(p):
    name = p.choice(["mlp", "conv", "train", "symbolic"])
    model, out = seed(name)
    data = mutate(p, model)
    if name == "train":
        opt = graft.SGD({"defaultLearningRate": (0.1, True)})
        s = graft.TrainingSession(data, graft.DataFlow(1, [out]), out, opt, device(p))
    else:
        s = graft.InferenceSession(data, graft.DataFlow(1, [out]), device(p))
    s.inputIds()
    run_once(s, p)
    if p.chance(2):
        s.modelToHost(os.path.join(TMP, "m.onnx"))


OPTION_FIELDS = ["numThreads", "accumulationFactor", "replicatedGraphCount", "batchSerializationFactor",
                 "enableGradientAccumulation", "enableReplicatedGraphs", "detectNonFinite", "enableProfiling",
                 "virtualGraphMode", "timelinePath", "enablePipelining", "autoRecomputation"]


def _hostile_value(p):
    k = p.int(5)
    if k == 0:
        return p.choice(INTS)
    if k == 1:
        return p.choice(FLOATS)
    if k == 2:
        return p.choice([True, False, None, "", "x" * 300, b"\xff\xfe", "\udcff", [], {}])
    if k == 3:
        return p.choice([graft.VirtualGraphMode.Auto, graft.VirtualGraphMode.Manual, graft.VirtualGraphMode.Off])
    return np.int64(p.choice(INTS[:14]))


def cat_options(p):
    o = graft.SessionOptions()
    for _ in range(1 + p.int(3)):
        field = p.choice(OPTION_FIELDS)
        if not hasattr(o, field):
            continue
        try:
            setattr(o, field, _hostile_value(p))
        except TypeError as e:
            _pybind_type_error(e)
    which = p.int(4)
    if which == 0:
        df = graft.DataFlow(p.choice(INTS), ["y"])
    elif which == 1:
        df = graft.DataFlow(1, {"y": graft.AnchorReturnType(p.choice(["All", "Final", "Sum", "EveryN", "Bogus"]),
                                                            p.choice(INTS))})
    else:
        df = graft.DataFlow(1 + p.int(4), ["y"])
    dm = graft.DeviceManager()
    dev = dm.createCpuDevice(p.choice(INTS[:12]), p.choice(INTS[:12])) if p.chance(3) else device(p)
    model, _ = seed(p.choice(["mlp", "conv"]))
    s = graft.InferenceSession(model, df, dev, userOptions=o)
    run_once(s, p, df.batchesPerStep() if hasattr(df, "batchesPerStep") else 1)


DRAWN_ELEMENTS = 1 << 20  # a drawn array's size at most (200^4 objects alone would take 12 GB)


def _drawn_array(p):
    rank = p.int(5)
    shape = [p.choice([0, 1, 2, 3, 4, 8, 200]) for _ in range(rank)]
    while np.prod(shape, dtype=np.int64) > DRAWN_ELEMENTS:  # the harness's memory, not graft's
        shape[shape.index(max(shape))] = 2
    dt = p.choice(DTYPES)
    if dt is object:
        a = np.empty(shape, dtype=object)
        a.fill("s")
        return a
    a = np.zeros(shape, dtype=dt)
    if p.chance(1) and a.ndim >= 2:
        a = a.T  # not C-contiguous
    if p.chance(1) and a.dtype.kind == "f" and a.size:
        a.flat[p.int(a.size)] = p.choice(FLOATS)
    return a


def cat_anchors(p):
    model, y = seed(p.choice(["mlp", "conv"]))
    bps = p.choice([1, 2, 3])
    art = p.choice(["All", "Final", "Sum"])
    s = graft.InferenceSession(model, graft.DataFlow(bps, {y: graft.AnchorReturnType(art)}), device(p))
    s.prepareDevice()
    anchors = {} if p.chance(1) else {y: _drawn_array(p)}
    if p.chance(1):
        anchors[p.choice(["nope", "x", "w", "\udcff"])] = _drawn_array(p)
    feeds = inputs_for(p, s, bps)
    if feeds is not None:
        s.run(graft.PyStepIO(feeds, anchors))


def cat_stepio(p):
    model, y = seed(p.choice(["mlp", "conv", "symbolic"]))
    s = graft.InferenceSession(model, graft.DataFlow(1, [y]), device(p))
    s.prepareDevice()
    feeds = {} if p.chance(1) else {"x": _drawn_array(p)}
    if p.chance(2):
        feeds[p.choice(["x", "y", "extra", ""])] = _drawn_array(p)
    out = s.initAnchorArrays() if p.chance(6) else {y: _drawn_array(p)}
    s.run(graft.PyStepIO(feeds, out))


def cat_optimizer(p):
    model, loss = seed("train")
    kind = p.int(4)
    if kind == 0:
        keys = ["defaultLearningRate", "defaultMomentum", "defaultDampening", "defaultVelocityScaling",
                "defaultWeightDecay", "lossScaling", "bogus"]
        make = graft.SGD
    else:
        keys = ["defaultLearningRate", "defaultBeta1", "defaultBeta2", "defaultEps", "defaultWeightDecay",
                "lossScaling", "maxWeightNorm"]
        make = graft.Adam
    params = {p.choice(keys): (_hostile_value(p), p.chance(4)) for _ in range(1 + p.int(3))}
    opt = make(params)
    s = graft.TrainingSession(model, graft.DataFlow(1, [loss]), loss, opt, device(p))
    run_once(s, p)
    if p.chance(3):
        s.updateOptimizerFromHost(make({p.choice(keys): (_hostile_value(p), False)}))
        run_once(s, p)


CATEGORIES = [cat_model, cat_options, cat_anchors, cat_stepio, cat_optimizer]
TMP = tempfile.mkdtemp(prefix="graft-fuzz-py-")


def _pybind_type_error(e):
    msg = str(e)
    if "incompatible function arguments" in msg or "incompatible constructor arguments" in msg:
        return
    raise e


def test_one_input(data):
    p = Provider(data)
    fn = CATEGORIES[p.int(len(CATEGORIES))]
    try:
        fn(p)
    except graft.Error:
        pass
    except TypeError as e:
        _pybind_type_error(e)


# Issue 16's reproducers of the Python API as inputs of this target: (file name, the values of
# successive draws). Category indices: 0 model, 1 options, 2 anchors, 3 stepio, 4 optimizer.
REGRESSIONS = [
    # SessionOptions.numThreads = 100000, then prepareDevice: SIGSEGV in libgomp through oneDNN.
    ("options_num_threads_100000", [1, 0, OPTION_FIELDS.index("numThreads"), 0, INTS.index(100000), 2, 0, 7, 7, 0]),
    # numThreads = 2000 under the memory cap: "libgomp: Thread creation failed".
    ("options_num_threads_2000", [1, 0, OPTION_FIELDS.index("numThreads"), 0, INTS.index(2000), 2, 0, 7, 7, 0]),
    # createCpuDevice(40000, 2): a thread per virtual device.
    ("options_40000_virtual_devices", [1, 0, OPTION_FIELDS.index("detectNonFinite"), 2, 0, 2, 0, 0, INTS.index(40000),
                                       INTS.index(2), 0]),
    # DataFlow(2**31): pybind11's TypeError.
    ("options_dataflow_2_31", [1, 0, OPTION_FIELDS.index("detectNonFinite"), 2, 0, 0, INTS.index(2**31)]),
    # DataFlow(2**31 - 1) on a small MLP: batches per step × anchors beyond memory.
    ("options_dataflow_2_31_minus_1", [1, 0, OPTION_FIELDS.index("detectNonFinite"), 2, 0, 0, INTS.index(2**31 - 1),
                                       7, 7, 0]),
    # An anchor array of shape [200, 4] for a [2, 4] output: silently accepted.
    ("anchors_200x4_for_2x4", [2, 0, 0, 0, 7, 7, 2, 6, 4, DTYPES.index(np.float32), 7, 7, 7]),
    # SGD({"defaultLearningRate": (nan, False)}): accepted, weights NaN.
    ("optimizer_sgd_nan_lr", [4, 0, 0, 0, 1, 0, 7, 7]),
    # SGD lr -1.0.
    ("optimizer_sgd_negative_lr", [4, 0, 0, 0, 1, FLOATS.index(-1.0), 7, 7]),
    # Adam beta2 = 1.0.
    ("optimizer_adam_beta2_1", [4, 1, 0, 2, 1, FLOATS.index(1.0), 7, 7]),
    # SGD velocityScaling = 0.
    ("optimizer_sgd_velocity_scaling_0", [4, 0, 0, 3, 1, FLOATS.index(0.0), 7, 7]),
    # A StepIO input of the wrong dtype and rank, and a non-contiguous one of the wrong dtype.
    ("stepio_int8_rank4_input", [3, 0, 7, 7, 4, 1, 1, 1, 1, DTYPES.index(np.int8), 7, 7, 7, 0]),
    ("stepio_transposed_float64", [3, 0, 7, 7, 2, 4, 2, DTYPES.index(np.float64), 0, 7, 7, 0]),
    # Bit flips in a model: one byte of the first tensor name region changed.
    ("model_bit_flip", [0, 0, 0, 0, 12, 7, 7, 7]),
]


def write_regressions(folder):
    os.makedirs(folder, exist_ok=True)
    for name, values in REGRESSIONS:
        sp = ScriptedProvider(values)
        fn = CATEGORIES[sp.int(len(CATEGORIES))]
        try:
            fn(sp)
            outcome = "ok"
        except graft.Error as e:
            outcome = f"graft.Error: {str(e).splitlines()[0][:100]}"
        except TypeError as e:
            _pybind_type_error(e)
            outcome = "pybind11 TypeError"
        data = sp.encode(values)
        with open(os.path.join(folder, name), "wb") as f:
            f.write(data)
        print(f"{name:<36} {len(data):>4} bytes  {outcome}")


# ---- drivers -----------------------------------------------------------------------------------


def run_child(data):
    """test_one_input(data) in a forked child with the memory cap and the timeout: an outcome."""
    return run_forked(lambda: test_one_input(data), MEMORY_CAP, TIMEOUT, TMP)


def seed_inputs():
    """One short input per category (the starting corpus)."""
    return [bytes([c]) + struct.pack("<I", i * 2654435761 & 0xFFFFFFFF) * 8
            for c in range(len(CATEGORIES)) for i in range(4)]


def main(argv):
    if len(argv) < 2 or argv[1] not in ("atheris", "random", "replay", "regressions"):
        print(__doc__)
        return 2
    mode = argv[1]
    if mode == "regressions":
        write_regressions(argv[2] if len(argv) > 2 else os.path.join(HERE, "regressions", "python"))
        return 0
    if mode == "atheris":
        corpus = [a for a in argv[2:] if not a.startswith("-")]
        for d in corpus:
            os.makedirs(d, exist_ok=True)
            if not os.listdir(d):
                for k, s in enumerate(seed_inputs()):
                    with open(os.path.join(d, f"seed{k}"), "wb") as f:
                        f.write(s)
        # The inputs run in this process: work in the scratch folder, as the forked modes' children
        # do, so that a file a hostile case names with a relative path (a timeline called
        # b"\xff\xfe", seen 2026-12-05) lands there. Paths given here are made absolute first.
        def absolute(a):
            for flag in ("-artifact_prefix=", "-exact_artifact_path=", "-dict="):
                if a.startswith(flag):
                    v = a[len(flag):]
                    return flag + os.path.abspath(v) + ("/" if v.endswith("/") else "")
            return a if a.startswith("-") else os.path.abspath(a)

        args = [absolute(a) for a in argv[2:]]
        os.chdir(TMP)
        atheris.Setup([argv[0]] + args, test_one_input)
        atheris.Fuzz()
        return 0
    if mode == "replay":
        files = []
        for a in argv[2:]:
            if os.path.isdir(a):
                files += sorted(os.path.join(a, f) for f in os.listdir(a) if not f.endswith(".md"))
            else:
                files.append(a)
        bad = 0
        for f in files:
            with open(f, "rb") as h:
                o = run_child(h.read())
            print(f"{os.path.basename(f):<40} {o}", flush=True)
            bad += o != "ok"
        print(f"replayed {len(files)}: {len(files) - bad} ok, {bad} findings")
        return 1 if bad else 0
    count, rng_seed, findings, seconds = 200, 1, None, None
    rest = argv[2:]
    while rest:
        flag, val, rest = rest[0], rest[1], rest[2:]
        if flag == "--count":
            count = int(val)
        elif flag == "--seed":
            rng_seed = int(val)
        elif flag == "--findings":
            findings = val
        elif flag == "--seconds":  # stop after this long, even before --count cases
            seconds = float(val)
        else:
            print(f"fuzz_python.py random: unknown option {flag}", file=sys.stderr)
            return 2
    rng = random.Random(rng_seed)
    deadline = time.monotonic() + seconds if seconds is not None else None
    pool = seed_inputs()
    counts = {}
    per_cat = {}
    for i in range(count):
        if deadline is not None and time.monotonic() > deadline:
            break
        base = bytearray(rng.choice(pool))
        base[0] = i % len(CATEGORIES)  # every category in turn
        for _ in range(rng.randint(1, 8)):
            at = rng.randrange(1, len(base) + 1)
            base[at:at] = bytes(rng.randrange(256) for _ in range(rng.randint(1, 8)))
        data = bytes(base)
        o = run_child(data)
        counts[o] = counts.get(o, 0) + 1
        name = CATEGORIES[Provider(data).int(len(CATEGORIES))].__name__
        per_cat.setdefault(name, {}).setdefault(o, 0)
        per_cat[name][o] += 1
        if o != "ok":
            print(f"FINDING case {i}: {o} ({name})", flush=True)
            if findings:
                os.makedirs(findings, exist_ok=True)
                with open(os.path.join(findings, f"py-{o}-{i}"), "wb") as f:
                    f.write(data)
    for name, c in per_cat.items():
        print(f"{name:<14} " + ", ".join(f"{k} {v}" for k, v in sorted(c.items())))
    print(f"total {sum(counts.values())}: " + ", ".join(f"{k} {v}" for k, v in sorted(counts.items())))
    return 0 if set(counts) <= {"ok"} else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv))
