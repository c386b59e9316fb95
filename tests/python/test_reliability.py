"""Hostile input (issue 16): every reproducer of the adversarial campaign as a test. Whatever can
crash runs in a child process (with a memory cap and a timeout) and must end with a clean
graft.Error or `graft: error:` naming the option, file or tensor; values must be right."""
import os
import resource
import stat
import subprocess
import sys
import tempfile
import textwrap
import threading

import numpy as np
import onnx
import onnx.helper as oh
import pytest

import graft

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "fuzz"))
from forked import l1_regression_model  # noqa: E402

ROOT = os.path.normpath(os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", ".."))
GRAFT = os.environ.get("GRAFT_CLI", os.path.join(ROOT, "build", "tools", "graft"))
MEMORY_CAP = 8 << 30  # bytes of address space a child may use


def _cap_memory():
    resource.setrlimit(resource.RLIMIT_AS, (MEMORY_CAP, MEMORY_CAP))


def _child(code, timeout=120):
    """Runs Python `code` in a child with the memory cap; returns (returncode, stdout + stderr)."""
    env = dict(os.environ, PYTHONPATH=os.path.join(ROOT, "python"), OMP_WAIT_POLICY="passive")
    r = subprocess.run([sys.executable, "-c", textwrap.dedent(code)], capture_output=True, text=True, timeout=timeout,
                       preexec_fn=_cap_memory, env=env)
    return r.returncode, r.stdout + r.stderr


def _cli(*args, timeout=60):
    if not os.path.exists(GRAFT):
        pytest.fail(f"the graft command is not built at {GRAFT} (make build)")
    env = dict(os.environ, OMP_WAIT_POLICY="passive")
    r = subprocess.run([GRAFT, *args], capture_output=True, text=True, timeout=timeout, preexec_fn=_cap_memory, env=env)
    return r.returncode, r.stdout + r.stderr


def _mlp_bytes():
    """y = relu(x @ w + b): a model that uses oneDNN's matmul on the cpu device."""
    b = graft.Builder()
    x = b.addInputTensor(graft.TensorInfo("FLOAT", [2, 4]), "x")
    w = b.addInitializedInputTensor(np.ones((4, 4), np.float32), "w")
    bias = b.addInitializedInputTensor(np.zeros(4, np.float32), "b")
    y = b.aiOnnx.relu([b.aiOnnx.add([b.aiOnnx.matmul([x, w]), bias])], "y")
    b.addOutputTensor(y)
    return b.getModelProto(), y


@pytest.fixture
def mlp_path(tmp_path):
    model, _ = _mlp_bytes()
    p = tmp_path / "m.onnx"
    p.write_bytes(model)
    return str(p)


# The linear regression with an L1 loss that the fuzz campaign drives too: (model bytes, loss id,
# weight id).
_train_model = l1_regression_model


# ---- 1, 2, 4: resource limits ----------------------------------------------------------------------


def test_absurd_num_threads_is_refused_before_openmp_starts():
    code, out = _child(f"""
        import graft, numpy as np
        b = graft.Builder()
        x = b.addInputTensor(graft.TensorInfo("FLOAT", [2, 4]), "x")
        w = b.addInitializedInputTensor(np.ones((4, 4), np.float32), "w")
        y = b.aiOnnx.matmul([x, w]); b.addOutputTensor(y)
        for n in (100000, 2000):
            o = graft.SessionOptions(); o.numThreads = n
            try:
                s = graft.InferenceSession(b.getModelProto(), graft.DataFlow(1, [y]),
                                           graft.DeviceManager().createCpuDevice(), userOptions=o)
                s.prepareDevice()
                print("accepted", n)
            except graft.Error as e:
                print("refused:", e)
        try:
            graft.DeviceManager().createCpuDevice(1, 10**6)
            print("accepted createCpuDevice")
        except graft.Error as e:
            print("refused:", e)
    """)
    assert code == 0, out
    assert out.count("refused:") == 3, out
    assert "SessionOptions.numThreads = 100000" in out and "limit" in out, out
    assert "coresPerVirtualDevice = 1000000" in out, out


def test_cli_threads_and_virtual_devices_are_bounded(mlp_path):
    code, out = _cli("run", mlp_path, "--threads", "100000", "--steps", "1")
    assert code == 1 and "--threads = 100000" in out and "limit" in out, out
    code, out = _cli("inspect", mlp_path, "--stages", "--virtual-devices", "40000")
    assert code == 1 and "--virtual-devices = 40000" in out and "limit" in out, out


def test_batches_per_step_times_input_size_is_checked_before_allocating(mlp_path):
    code, out = _cli("run", mlp_path, "--batches-per-step", "100000000", "--steps", "1", timeout=120)
    assert code == 1, out
    assert "--batches-per-step 100000000" in out and "available" in out, out


def _huge_output_model(path, input_shape=(1, 1)):
    """y = Expand(x, [2^31, 2^31]): a 16 EiB anchor from a tiny input (or a huge declared input)."""
    g = oh.make_graph([oh.make_node("Expand", ["x", "s"], ["y"])], "g",
                      [oh.make_tensor_value_info("x", onnx.TensorProto.FLOAT, list(input_shape))],
                      [oh.make_tensor_value_info("y", onnx.TensorProto.FLOAT, [2**31, 2**31])],
                      [oh.make_tensor("s", onnx.TensorProto.INT64, [2], [2**31, 2**31])])
    path.write_bytes(oh.make_model(g, opset_imports=[oh.make_opsetid("", 17)], ir_version=8).SerializeToString())
    return str(path)


def test_run_and_bench_check_the_anchors_against_memory(tmp_path):
    m = _huge_output_model(tmp_path / "huge.onnx")
    code, out = _cli("bench", m, "--steps", "1", "--warmup", "0", timeout=120)
    assert code == 1 and "the anchors" in out and "'y'" in out and "available" in out, out
    code, out = _cli("run", m, "--steps", "1", "--batches-per-step", "3", timeout=120)
    assert code == 1 and "--batches-per-step 3 × the anchors" in out and "'y'" in out and "available" in out, out


def test_bench_checks_its_random_inputs_against_memory(tmp_path):
    m = _huge_output_model(tmp_path / "huge_in.onnx", input_shape=(2**31, 2**31))
    code, out = _cli("bench", m, "--steps", "1", "--warmup", "0", timeout=120)
    assert code == 1 and "the random input 'x'" in out and "available" in out, out


def test_init_anchor_arrays_checks_memory_first():
    code, out = _child("""
        import graft, onnx, onnx.helper as oh
        g = oh.make_graph([oh.make_node("Expand", ["x", "s"], ["y"])], "g",
                          [oh.make_tensor_value_info("x", onnx.TensorProto.FLOAT, [1, 1])],
                          [oh.make_tensor_value_info("y", onnx.TensorProto.FLOAT, [2**31, 2**31])],
                          [onnx.helper.make_tensor("s", onnx.TensorProto.INT64, [2], [2**31, 2**31])])
        m = oh.make_model(g, opset_imports=[oh.make_opsetid("", 17)], ir_version=8)
        s = graft.InferenceSession(m.SerializeToString(), graft.DataFlow(1, ["y"]),
                                   graft.DeviceManager().createCpuDevice())
        s.prepareDevice()
        try:
            s.initAnchorArrays()
            print("allocated")
        except graft.Error as e:
            print("refused:", e)
        except MemoryError as e:
            print("MemoryError", e)
    """)
    assert code == 0, out
    assert "refused:" in out and "initAnchorArrays" in out and "'y'" in out, out


# ---- 5: checkpoint writers -------------------------------------------------------------------------


def _train_session(model=None, optimizer=None):
    m, loss, w = _train_model()
    s = graft.TrainingSession(fnModel=model or m, dataFlow=graft.DataFlow(1, [loss]), loss=loss,
                              optimizer=optimizer or graft.SGD({"defaultLearningRate": (0.1, True),
                                                                "defaultMomentum": (0.9, True)}),
                              deviceInfo=graft.DeviceManager().createCpuDevice())
    s.prepareDevice()
    return s, loss, w


def _step(s):
    out = s.initAnchorArrays()
    s.run(graft.PyStepIO({"x": np.ones((2, 4), np.float32)}, out))
    return out


def test_model_to_host_refuses_empty_path_and_gives_the_os_reason(tmp_path):
    s, _, _ = _train_session()
    _step(s)
    with pytest.raises(graft.Error, match="empty"):
        s.modelToHost("")
    with pytest.raises(graft.Error, match="No such file or directory"):
        s.modelToHost(str(tmp_path / "missing" / "ck.onnx"))
    # A failed rename (the target is a folder) leaves no temporary file behind.
    (tmp_path / "ck.onnx").mkdir()
    with pytest.raises(graft.Error, match="directory"):
        s.modelToHost(str(tmp_path / "ck.onnx"))
    assert sorted(os.listdir(tmp_path)) == ["ck.onnx"]


def test_model_to_host_never_follows_a_planted_symlink(tmp_path):
    victim = tmp_path / "victim"
    victim.write_bytes(b"precious")
    os.symlink(victim, tmp_path / "ck.onnx.tmp")
    s, _, _ = _train_session()
    s.modelToHost(str(tmp_path / "ck.onnx"))
    assert victim.read_bytes() == b"precious"
    onnx.load(str(tmp_path / "ck.onnx"))
    assert sorted(os.listdir(tmp_path)) == ["ck.onnx", "ck.onnx.tmp", "victim"]


def test_concurrent_checkpoint_writers_and_readers(tmp_path):
    """Two processes write one path 40 times each while this one reads it: every read is a whole
    model (the last rename wins; no reader ever sees a torn file), no rename fails."""
    target = str(tmp_path / "ck.onnx")
    writer = f"""
        import sys, numpy as np, graft
        b = graft.Builder()
        x = b.addInputTensor(graft.TensorInfo("FLOAT", [2, 4]), "x")
        w = b.addInitializedInputTensor(np.random.rand(512, 4).astype(np.float32), "w")
        y = b.aiOnnx.matmul([w, b.aiOnnx.transpose([x])]); b.addOutputTensor(y)
        s = graft.InferenceSession(b.getModelProto(), graft.DataFlow(1, [y]), graft.DeviceManager().createCpuDevice())
        for i in range(40):
            s.modelToHost({target!r})
        print("wrote 40")
    """
    env = dict(os.environ, PYTHONPATH=os.path.join(ROOT, "python"))
    procs = [subprocess.Popen([sys.executable, "-c", textwrap.dedent(writer)], stdout=subprocess.PIPE,
                              stderr=subprocess.STDOUT, text=True, env=env) for _ in range(2)]
    reads = 0
    while any(p.poll() is None for p in procs):
        if os.path.exists(target):
            with open(target, "rb") as f:
                onnx.load_from_string(f.read())  # raises on a torn file
            reads += 1
    for p in procs:
        out = p.stdout.read()
        assert p.returncode == 0 and "wrote 40" in out, out
    assert reads > 0
    assert sorted(os.listdir(tmp_path)) == ["ck.onnx"]


# ---- 6: names that are not UTF-8 ---------------------------------------------------------------------


def _raw_model_with_input_name(name: bytes):
    assert len(name) == 4
    g = oh.make_graph([oh.make_node("Relu", ["abcd"], ["y"], name="relu")], "g",
                      [oh.make_tensor_value_info("abcd", onnx.TensorProto.FLOAT, [2])],
                      [oh.make_tensor_value_info("y", onnx.TensorProto.FLOAT, [2])])
    m = oh.make_model(g, opset_imports=[oh.make_opsetid("", 17)], ir_version=8)
    # protobuf's Python API refuses invalid UTF-8 in strings: swap the bytes in the serialized form
    # (same length, so every enclosing length stays right).
    return m.SerializeToString().replace(b"abcd", name)


def test_non_utf8_names_raise_graft_error_naming_the_bytes():
    model = _raw_model_with_input_name(b"\x9e\x9e\x9e\x9e")
    with pytest.raises(graft.Error) as e:
        graft.InferenceSession(model, graft.DataFlow(1, ["y"]), graft.DeviceManager().createCpuDevice())
    assert "\\x9e\\x9e\\x9e\\x9e" in str(e.value) and "UTF-8" in str(e.value), str(e.value)
    assert "'relu'" in str(e.value), str(e.value)


def test_names_with_lone_surrogates_raise_graft_error():
    """A str key that does not encode to UTF-8 (bytes decoded with surrogateescape): graft.Error
    naming the dict, not pybind11's RuntimeError "Unable to cast" (found by the Python fuzzer)."""
    model, y = _mlp_bytes()
    s = graft.InferenceSession(model, graft.DataFlow(1, [y]), graft.DeviceManager().createCpuDevice())
    s.prepareDevice()
    anchors = s.initAnchorArrays()
    anchors["\udcff"] = np.zeros(3, np.float32)
    with pytest.raises(graft.Error, match="PyStepIO: anchor names.*not valid UTF-8"):
        graft.PyStepIO({"x": np.zeros((2, 4), np.float32)}, anchors)
    with pytest.raises(graft.Error, match="PyStepIO: input names.*not valid UTF-8"):
        graft.PyStepIO({"\udcff": np.zeros((2, 4), np.float32)}, s.initAnchorArrays())
    with pytest.raises(graft.Error, match="hyper-parameter names.*not valid UTF-8"):
        graft.SGD({"\udcff": (0.1, True)})


def test_byte_flipped_checkpoints_never_raise_unicode_errors(tmp_path):
    s, loss, w = _train_session()
    _step(s)
    ck = tmp_path / "ck.onnx"
    s.modelToHost(str(ck))
    data = ck.read_bytes()
    rng = np.random.default_rng(7)
    outcomes = {"ok": 0, "graft.Error": 0}
    for i in range(60):
        b = bytearray(data)
        for p in rng.integers(0, len(b), 3):
            b[p] ^= 0x80 | int(rng.integers(1, 128))
        try:
            t = graft.TrainingSession(fnModel=bytes(b), dataFlow=graft.DataFlow(1, [loss]), loss=loss,
                                      optimizer=graft.SGD({"defaultLearningRate": (0.1, True)}),
                                      deviceInfo=graft.DeviceManager().createCpuDevice())
            t.inputIds(), t.weightIds()
            outcomes["ok"] += 1
        except graft.Error:
            outcomes["graft.Error"] += 1
    assert sum(outcomes.values()) == 60 and outcomes["graft.Error"] > 0, outcomes


# ---- 7: run() from several threads ---------------------------------------------------------------------


def test_concurrent_run_on_one_session_is_serialised():
    model, y = _mlp_bytes()
    s = graft.InferenceSession(model, graft.DataFlow(1, [y]), graft.DeviceManager().createCpuDevice())
    s.prepareDevice()
    errors, wrong = [], []

    def work(k):
        x = np.full((2, 4), float(k), np.float32)
        for _ in range(50):
            out = s.initAnchorArrays()
            try:
                s.run(graft.PyStepIO({"x": x}, out))
            except Exception as e:  # noqa: BLE001 - every failure is the finding
                errors.append(repr(e))
                continue
            if not np.array_equal(out[y], np.full((2, 4), 4.0 * k, np.float32)):
                wrong.append(k)

    threads = [threading.Thread(target=work, args=(k,)) for k in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors, errors[:3]
    assert not wrong


# ---- 8: special files ------------------------------------------------------------------------------------


@pytest.mark.parametrize("kind", ["fifo", "dir", "devzero"])
def test_special_files_are_refused_by_name_without_blocking(tmp_path, mlp_path, kind):
    if kind == "fifo":
        path = str(tmp_path / "f")
        os.mkfifo(path)
        expect = "FIFO"
    elif kind == "dir":
        path = str(tmp_path)
        expect = "directory"
    else:
        path = "/dev/zero"
        expect = "character device"
    for args in (["run", path], ["inspect", path], ["run", mlp_path, "--input", f"x={path}"],
                 ["train", path, "--loss", "mse", "--input", f"x={path}", "--label", f"t={path}",
                  "--optimizer", "sgd:lr=0.1"]):
        code, out = _cli(*args, timeout=30)
        assert code == 1 and expect in out and "does not exist" not in out, (args, out)
    with pytest.raises(graft.Error, match=expect):
        graft.InferenceSession(path, graft.DataFlow(1, ["y"]), graft.DeviceManager().createCpuDevice())
    code, out = _cli("run", str(tmp_path / "nothing.onnx"))
    assert code == 1 and "does not exist" in out, out


# ---- 9: values the Python API took unchecked ------------------------------------------------------------


@pytest.mark.parametrize("make, what", [
    (lambda: graft.SGD({"defaultLearningRate": (float("nan"), False)}), "learningRate"),
    (lambda: graft.SGD({"defaultLearningRate": (-1.0, True)}), "learningRate"),
    (lambda: graft.SGD({"defaultLearningRate": (0.1, True), "defaultVelocityScaling": (0.0, True)}),
     "velocityScaling"),
    (lambda: graft.Adam({"defaultLearningRate": (0.1, True), "defaultBeta2": (1.0, True)}), "beta2"),
    (lambda: graft.Adam({"defaultLearningRate": (0.1, True), "defaultEps": (float("inf"), True)}), "eps"),
])
def test_optimizer_hyper_parameters_are_validated(make, what):
    with pytest.raises(graft.Error, match=what):
        make()


def test_anchor_array_of_the_wrong_size_is_refused():
    model, y = _mlp_bytes()
    s = graft.InferenceSession(model, graft.DataFlow(1, [y]), graft.DeviceManager().createCpuDevice())
    s.prepareDevice()
    with pytest.raises(graft.Error, match=r"\[200, 4\]"):
        s.run(graft.PyStepIO({"x": np.ones((2, 4), np.float32)}, {y: np.zeros((200, 4), np.float32)}))


def test_checkpoint_state_of_the_wrong_shape_is_an_error(tmp_path):
    s, loss, w = _train_session()
    _step(s)
    ck = tmp_path / "ck.onnx"
    s.modelToHost(str(ck))
    m = onnx.load(str(ck))
    names = [t.name for t in m.graph.initializer]
    accl = [n for n in names if n.startswith("Accl") and n.endswith(w)]
    assert accl, names
    for t in m.graph.initializer:
        if t.name == accl[0]:
            t.CopyFrom(onnx.numpy_helper.from_array(np.zeros((3,), np.float32), t.name))
    with pytest.raises(graft.Error, match=accl[0]):
        _train_session(model=m.SerializeToString())


@pytest.mark.parametrize("elem, shape", [(onnx.TensorProto.INT64, [2]), (onnx.TensorProto.FLOAT, [2, 2**63 - 1]),
                                         (onnx.TensorProto.FLOAT, [3])])
def test_declared_output_type_must_match_the_graph(elem, shape):
    g = oh.make_graph([oh.make_node("Relu", ["x"], ["y"])], "g",
                      [oh.make_tensor_value_info("x", onnx.TensorProto.FLOAT, [2])],
                      [oh.make_tensor_value_info("y", elem, shape)])
    m = oh.make_model(g, opset_imports=[oh.make_opsetid("", 17)], ir_version=8)
    with pytest.raises(graft.Error, match="graph output 'y' is declared"):
        s = graft.InferenceSession(m.SerializeToString(), graft.DataFlow(1, ["y"]),
                                   graft.DeviceManager().createCpuDevice())
        s.prepareDevice()


def test_symbolic_output_declarations_are_fine():
    g = oh.make_graph([oh.make_node("Relu", ["x"], ["y"])], "g",
                      [oh.make_tensor_value_info("x", onnx.TensorProto.FLOAT, [2])],
                      [oh.make_tensor_value_info("y", onnx.TensorProto.FLOAT, ["n"])])
    m = oh.make_model(g, opset_imports=[oh.make_opsetid("", 17)], ir_version=8)
    s = graft.InferenceSession(m.SerializeToString(), graft.DataFlow(1, ["y"]), graft.DeviceManager().createCpuDevice())
    s.prepareDevice()
    out = s.initAnchorArrays()
    s.run(graft.PyStepIO({"x": np.array([-1, 2], np.float32)}, out))
    assert out["y"].tolist() == [0, 2]


def test_big_python_ints_are_range_checked():
    with pytest.raises(graft.Error, match="batchesPerStep"):
        graft.DataFlow(2**31, ["y"])
    with pytest.raises(graft.Error, match="coresPerVirtualDevice"):
        graft.DeviceManager().createCpuDevice(1, 2**40)
    with pytest.raises(graft.Error, match="numThreads"):
        graft.SessionOptions().numThreads = 2**63
    assert graft.DataFlow(np.int64(3), ["y"]).batchesPerStep() == 3


# ---- 10: messages ------------------------------------------------------------------------------------------


@pytest.mark.parametrize("value", ["0", "abc", "-3", "99999999999999999999"])
def test_steps_messages_are_short_and_name_the_option(mlp_path, value):
    code, out = _cli("run", mlp_path, "--steps", value)
    assert code == 2 and "--steps" in out, out
    assert max(len(line) for line in out.splitlines()) < 200, out


# ---- training watches non-finite values ------------------------------------------------------------------


def test_graft_train_stops_on_nan_and_writes_no_model(tmp_path):
    model, loss, w = _train_model()
    b = graft.Builder()
    x = b.addInputTensor(graft.TensorInfo("FLOAT", [4, 3]), "x")
    wt = b.addInitializedInputTensor(np.full((3, 2), 0.1, np.float32), "w")
    y = b.aiOnnx.matmul([x, wt], "logits")
    b.addOutputTensor(y)
    (tmp_path / "c.onnx").write_bytes(b.getModelProto())
    data = np.random.default_rng(0).standard_normal((16, 3)).astype(np.float32)
    data[5, 1] = np.nan
    np.save(tmp_path / "x.npy", data)
    np.save(tmp_path / "t.npy", np.random.default_rng(1).integers(0, 2, 16).astype(np.int64))
    out_model = tmp_path / "trained.onnx"
    code, out = _cli("train", str(tmp_path / "c.onnx"), "--input", f"x={tmp_path / 'x.npy'}", "--label",
                     f"t={tmp_path / 't.npy'}", "--loss", "softmax-ce", "--optimizer", "sgd:lr=0.1",
                     "--batch-size", "4", "--no-shuffle", "--progress", "none", "--output", str(out_model),
                     timeout=120)
    assert code == 1, out
    assert "not finite" in out and "step 2" in out, out
    assert not out_model.exists()


def test_detect_non_finite_in_the_session_api():
    o = graft.SessionOptions()
    o.detectNonFinite = True
    m, loss, w = _train_model()
    s = graft.TrainingSession(fnModel=m, dataFlow=graft.DataFlow(1, [loss]), loss=loss,
                              optimizer=graft.SGD({"defaultLearningRate": (0.1, True)}),
                              deviceInfo=graft.DeviceManager().createCpuDevice(), userOptions=o)
    s.prepareDevice()
    out = s.initAnchorArrays()
    s.run(graft.PyStepIO({"x": np.ones((2, 4), np.float32)}, out))
    x = np.ones((2, 4), np.float32)
    x[0, 0] = np.inf
    with pytest.raises(graft.Error, match=f"anchor '{loss}' is not finite"):
        s.run(graft.PyStepIO({"x": x}, s.initAnchorArrays()))


# ---- NaN and inf propagate (IEEE 754, torch) -------------------------------------------------------------

NAN = float("nan")
INF = float("inf")
SPECIAL = np.array([NAN, -1.0, 2.0, INF, -INF, 0.0, 1e-40, -1e-40], np.float32)


def _unary_model(op, **attrs):
    b = graft.Builder()
    x = b.addInputTensor(graft.TensorInfo("FLOAT", [8]), "x")
    y = getattr(b.aiOnnx, op)([x], **attrs)
    b.addOutputTensor(y)
    return b.getModelProto(), y


def _run_on(devname, model, y, feeds):
    dm = graft.DeviceManager()
    dev = dm.createCpuDevice() if devname == "cpu" else dm.createReferenceDevice()
    s = graft.InferenceSession(model, graft.DataFlow(1, [y]), dev)
    s.prepareDevice()
    out = s.initAnchorArrays()
    s.run(graft.PyStepIO(feeds, out))
    return out[y]


def _hardsigmoid(x, a=0.2, b=0.5):
    with np.errstate(invalid="ignore"):
        return np.where(np.isnan(x), x, np.clip(a * x + b, 0, 1))


UNARY = {
    "relu": (dict(), lambda x: np.where(np.isnan(x), x, np.maximum(x, 0))),
    "hardsigmoid": (dict(), _hardsigmoid),
    "sign": (dict(), np.sign),
    "leakyrelu": (dict(alpha=0.1), lambda x: np.where(x >= 0, x, 0.1 * x)),
    "thresholdedrelu": (dict(alpha=1.0), lambda x: np.where(np.isnan(x) | (x > 1.0), x, 0)),
    "abs": (dict(), np.abs),
    "neg": (dict(), np.negative),
}


@pytest.mark.parametrize("devname", ["cpu", "reference"])
@pytest.mark.parametrize("op", sorted(UNARY))
def test_activations_propagate_nan(devname, op):
    attrs, ref = UNARY[op]
    model, y = _unary_model(op, **attrs)
    got = _run_on(devname, model, y, {"x": SPECIAL})
    with np.errstate(all="ignore"):
        want = ref(SPECIAL.astype(np.float64)).astype(np.float32)
    np.testing.assert_array_equal(np.isnan(got), np.isnan(want), err_msg=f"{op}: {got} vs {want}")
    ok = ~np.isnan(want)
    np.testing.assert_allclose(got[ok], want[ok], rtol=1e-6, atol=1e-30)


@pytest.mark.parametrize("devname", ["cpu", "reference"])
def test_clip_max_min_and_reductions_keep_nan(devname):
    b = graft.Builder()
    x = b.addInputTensor(graft.TensorInfo("FLOAT", [2, 8]), "x")
    outs = [b.aiOnnx.clip([x], min=-0.5, max=0.5), b.aiOnnx.max([x, b.aiOnnx.constant(np.zeros(8, np.float32))]),
            b.aiOnnx.reducemax([x], axes=[1], keepdims=0), b.aiOnnx.reducesum([x], axes=[1], keepdims=0)]
    for o in outs:
        b.addOutputTensor(o)
    dm = graft.DeviceManager()
    s = graft.InferenceSession(b.getModelProto(), graft.DataFlow(1, outs),
                               dm.createCpuDevice() if devname == "cpu" else dm.createReferenceDevice())
    s.prepareDevice()
    out = s.initAnchorArrays()
    data = np.stack([SPECIAL, np.arange(8, dtype=np.float32)])
    s.run(graft.PyStepIO({"x": data}, out))
    assert np.isnan(out[outs[0]][0, 0]) and np.isnan(out[outs[1]][0, 0])
    assert np.isnan(out[outs[2]][0]) and out[outs[2]][1] == 7
    assert np.isnan(out[outs[3]][0]) and out[outs[3]][1] == 28


@pytest.mark.parametrize("devname", ["cpu", "reference"])
def test_max_pooling_keeps_nan(devname):
    b = graft.Builder()
    x = b.addInputTensor(graft.TensorInfo("FLOAT", [1, 2, 4, 4]), "x")
    mp = b.aiOnnx.maxpool([x], num_outputs=1, kernel_shape=[2, 2], strides=[2, 2])[0]
    gmp = b.aiOnnx.globalmaxpool([x])
    b.addOutputTensor(mp)
    b.addOutputTensor(gmp)
    dm = graft.DeviceManager()
    s = graft.InferenceSession(b.getModelProto(), graft.DataFlow(1, [mp, gmp]),
                               dm.createCpuDevice() if devname == "cpu" else dm.createReferenceDevice())
    s.prepareDevice()
    out = s.initAnchorArrays()
    data = np.arange(32, dtype=np.float32).reshape(1, 2, 4, 4)
    data[0, 0, 1, 1] = np.nan
    s.run(graft.PyStepIO({"x": data}, out))
    m = out[mp]
    assert np.isnan(m[0, 0, 0, 0]) and np.isnan(out[gmp][0, 0, 0, 0]), (m, out[gmp])
    assert m[0, 0, 1, 1] == 15 and m[0, 1, 1, 1] == 31 and out[gmp][0, 1, 0, 0] == 31


@pytest.mark.parametrize("devname", ["cpu", "reference"])
def test_fused_matmul_relu_keeps_nan(devname):
    """oneDNN's Relu post-op is max(x, 0), which drops NaN: the cpu device applies the fused Relu
    itself after the primitive (docs/reliability.md). Gemm, MatMul and Conv, each + Relu and + Clip,
    with NaN, +inf and -inf in the input; the values as numpy computes them."""
    b = graft.Builder()
    x = b.addInputTensor(graft.TensorInfo("FLOAT", [4, 8]), "x")
    w = b.addInitializedInputTensor(np.eye(8, dtype=np.float32), "w")
    bias = b.addInitializedInputTensor(np.zeros(8, np.float32), "b")
    y = b.aiOnnx.relu([b.aiOnnx.gemm([x, w, bias])])
    z = b.aiOnnx.relu([b.aiOnnx.matmul([x, w])])
    c = b.aiOnnx.clip([b.aiOnnx.matmul([x, w])], min=-0.5, max=0.5)
    img = b.addInputTensor(graft.TensorInfo("FLOAT", [1, 2, 4, 4]), "img")
    k = b.addInitializedInputTensor(np.ones((2, 2, 1, 1), np.float32), "k")
    v = b.aiOnnx.relu([b.aiOnnx.conv([img, k])])
    outs = [y, z, c, v]
    for o in outs:
        b.addOutputTensor(o)
    dm = graft.DeviceManager()
    s = graft.InferenceSession(b.getModelProto(), graft.DataFlow(1, outs),
                               dm.createCpuDevice() if devname == "cpu" else dm.createReferenceDevice())
    s.prepareDevice()
    out = s.initAnchorArrays()
    data = np.ones((4, 8), np.float32)
    data[1, 2] = np.nan
    data[2, 3] = np.inf
    data[3, 4] = -np.inf
    pic = np.arange(32, dtype=np.float32).reshape(1, 2, 4, 4) - 16
    pic[0, 0, 1, 1] = np.nan
    pic[0, 1, 2, 2] = -np.inf
    s.run(graft.PyStepIO({"x": data, "img": pic}, out))
    with np.errstate(invalid="ignore"):
        p = data.astype(np.float64) @ np.eye(8)  # NaN * 0 is NaN, inf * 0 too: whole rows
        q = np.einsum("oc,nchw->nohw", np.ones((2, 2)), pic.astype(np.float64))
        want = {y: np.where(np.isnan(p), p, np.maximum(p, 0)), z: np.where(np.isnan(p), p, np.maximum(p, 0)),
                c: np.where(np.isnan(p), p, np.clip(p, -0.5, 0.5)), v: np.where(np.isnan(q), q, np.maximum(q, 0))}
    for o in outs:
        np.testing.assert_array_equal(out[o], want[o].astype(np.float32), err_msg=o)


def test_graft_train_on_data_with_one_nan_fails(tmp_path):
    """The issue's reproducer: one NaN in the data (Relu used to swallow it) no longer gives exit 0
    with a finite loss and weights full of NaN."""
    b = graft.Builder()
    x = b.addInputTensor(graft.TensorInfo("FLOAT", [4, 3]), "x")
    w = b.addInitializedInputTensor(np.full((3, 3), 0.1, np.float32), "w")
    y = b.aiOnnx.relu([b.aiOnnx.matmul([x, w])], "logits")
    b.addOutputTensor(y)
    (tmp_path / "c.onnx").write_bytes(b.getModelProto())
    data = np.random.default_rng(0).standard_normal((16, 3)).astype(np.float32)
    data[9, 0] = np.nan
    np.save(tmp_path / "x.npy", data)
    np.save(tmp_path / "t.npy", np.random.default_rng(1).integers(0, 3, 16).astype(np.int64))
    out_model = tmp_path / "trained.onnx"
    code, out = _cli("train", str(tmp_path / "c.onnx"), "--input", f"x={tmp_path / 'x.npy'}", "--label",
                     f"t={tmp_path / 't.npy'}", "--loss", "softmax-ce", "--optimizer", "sgd:lr=0.1",
                     "--batch-size", "4", "--no-shuffle", "--progress", "none", "--output", str(out_model),
                     timeout=120)
    assert code == 1 and "not finite" in out and "step 3" in out, out
    assert not out_model.exists()
