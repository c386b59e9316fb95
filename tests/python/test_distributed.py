"""Replicas across processes over MPI (docs/replication.md): ``mpirun -np 2`` on this machine
trains as one process with two replicas; a peer that dies or hangs makes the other fail with a
clear error within the timeout; processes that disagree on the options fail at prepareDevice;
``graft launch`` builds the mpirun command."""
import os
import re
import shutil
import subprocess
import sys
import time

import numpy as np
import pytest

import graft
from distributed_train import B, data
from test_replication import IN, OUT, mlp, optimizer, read

HERE = os.path.dirname(os.path.abspath(__file__))
SCRIPT = os.path.join(HERE, "distributed_train.py")
MPIRUN = shutil.which("mpirun")
GRAFT = os.path.join(HERE, "..", "..", "build", "tools", "graft")



def clean_env(**extra):
    """This process's environment without the variables MPI set when a test initialised it here
    (a singleton MPI world): an mpirun started with them thinks it runs inside another job."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("OMPI_", "PMIX_", "OPAL_", "ORTE_"))}
    env.update(extra)
    return env


SHARED = "sum their gradients in shared memory"  # graft's info line when the ranks do


def mpirun(np_, args, timeout, replicas=None, **extra):
    assert MPIRUN, "these tests need OpenMPI's mpirun: scripts/setup.sh installs openmpi-bin"
    cmd = [MPIRUN, "-np", str(np_), "--oversubscribe", "--bind-to", "none"]
    if os.geteuid() == 0:
        cmd.append("--allow-run-as-root")
    env = clean_env(GRAFT_NUM_INSTANCES=str(np_), GRAFT_NUM_REPLICAS=str(replicas or np_),
                    OMPI_MCA_btl_vader_single_copy_mechanism="none", GRAFT_LOG_LEVEL="info", **extra)
    t0 = time.monotonic()
    p = subprocess.run(cmd + [sys.executable, SCRIPT] + args, capture_output=True, text=True, timeout=timeout, env=env)
    return p, time.monotonic() - t0


def in_process(steps, opt, accum, replicas=2, data_of=None):
    """The same training as one process with `replicas` replicas; `data_of` = (replicas, accum):
    the micro-batches of that run instead (the same samples, grouped differently)."""
    model, x, label, loss, weights = mlp(B, seed=0)  # rank 0's weights
    o = graft.SessionOptions(enableReplicatedGraphs=True, replicatedGraphCount=replicas,
                             enableGradientAccumulation=True, accumulationFactor=accum,
                             accumulationAndReplicationReductionType=graft.ReductionType.Mean)
    s = graft.TrainingSession(fnModel=model, loss=loss, dataFlow=graft.DataFlow(1, {loss: graft.AnchorReturnType("All")}),
                              optimizer=optimizer(opt), deviceInfo=graft.DeviceManager().createCpuDevice(replicas, 1),
                              userOptions=o)
    s.prepareDevice()
    s.weightsFromHost()
    xs, ys = data(steps, *(data_of or (replicas, accum)))
    for step in range(steps):
        lead = [d for d in (accum, replicas) if d > 1]
        s.run(graft.PyStepIO({x: xs[step].reshape(lead + [B, IN]), label: ys[step].reshape(lead + [B])},
                             s.initAnchorArrays()))
    return read(s, weights), weights


# The two ranks of one host sum their gradients in memory they share (runtime/local_reduce.cpp);
# GRAFT_LOCAL_REDUCE=0 sends them through MPI_Iallreduce, as between hosts.
@pytest.mark.parametrize("opt,accum,path", [("adam", 2, "shared"), ("sgd", 1, "shared"), ("sgd", 1, "mpi"),
                                            ("adam", 2, "mpi")])
def test_two_processes_train_as_one_process_with_two_replicas(tmp_path, opt, accum, path):
    out = str(tmp_path / "run")
    steps = 3
    p, _ = mpirun(2, ["train", out, str(steps), opt, str(accum)], timeout=240,
                  GRAFT_LOCAL_REDUCE="1" if path == "shared" else "0")
    assert p.returncode == 0, p.stdout + p.stderr
    assert (SHARED in p.stderr) == (path == "shared"), p.stderr
    want, weights = in_process(steps, opt, accum)
    ranks = [np.load(f"{out}.rank{r}.npz") for r in range(2)]
    for w in weights:
        # Both processes hold the same weights (rank 1 started from other ones: the broadcast).
        np.testing.assert_array_equal(ranks[0][w], ranks[1][w], err_msg=w)
        np.testing.assert_allclose(ranks[0][w], want[w], rtol=2e-5, atol=2e-6, err_msg=w)
    # The weights moved, and the one checkpoint (written by rank 0) holds the trained ones.
    assert not np.allclose(want[weights[0]], _initializer(mlp(B, seed=0)[0], weights[0]))
    with open(out + ".onnx", "rb") as f:
        ck = f.read()
    for w in weights:
        np.testing.assert_array_equal(_initializer(ck, w), ranks[0][w], err_msg=w)
    # The two processes share this host's cores: each pins its replica's worker to a core of its
    # own (MPI's shared-memory split), not both to the first one.
    if len(os.sched_getaffinity(0)) >= 2:
        pinned = [re.search(rf"rank {r}: pinned to CPUs \[([0-9, ]*)\]", p.stdout) for r in range(2)]
        assert all(pinned), p.stdout
        cpus = [set(int(c) for c in m.group(1).split(",") if c.strip()) for m in pinned]
        assert cpus[0] and cpus[1] and not cpus[0] & cpus[1], cpus


def test_two_processes_of_two_replicas_sum_in_shared_memory_as_one_process_of_four(tmp_path):
    # Each process first sums its two replicas' gradients, then the processes sum theirs in the
    # memory they share.
    out = str(tmp_path / "run")
    p, _ = mpirun(2, ["train", out, "2", "adam", "2"], timeout=240, replicas=4)
    assert p.returncode == 0, p.stdout + p.stderr
    assert SHARED in p.stderr, p.stderr
    # (One process of 2 replicas accumulating 4 micro-batches: the same 8 micro-batches a step.)
    want, weights = in_process(2, "adam", 4, replicas=2, data_of=(4, 2))
    ranks = [np.load(f"{out}.rank{r}.npz") for r in range(2)]
    for w in weights:
        np.testing.assert_array_equal(ranks[0][w], ranks[1][w], err_msg=w)
        np.testing.assert_allclose(ranks[0][w], want[w], rtol=2e-5, atol=2e-6, err_msg=w)


@pytest.mark.parametrize("options", ["bucket=1073741824", "bucket=1,shard"])
def test_two_processes_with_buckets_and_sharded_state_train_as_one_process(tmp_path, options):
    # One bucket for all gradients (packed, one MPI_Iallreduce), or one per tensor with the
    # optimizer state sharded over the 2 processes (each updates half, then the halves are
    # all-gathered): the weights of one process with 2 unbucketed, unsharded replicas.
    out = str(tmp_path / "run")
    p, _ = mpirun(2, ["train", out, "3", "adam", "2", options], timeout=240)
    assert p.returncode == 0, p.stdout + p.stderr
    want, weights = in_process(3, "adam", 2)
    ranks = [np.load(f"{out}.rank{r}.npz") for r in range(2)]
    for w in weights:
        np.testing.assert_array_equal(ranks[0][w], ranks[1][w], err_msg=w)
        np.testing.assert_allclose(ranks[0][w], want[w], rtol=2e-5, atol=2e-6, err_msg=w)


def test_collective_ops_across_two_processes_of_two_replicas(tmp_path):
    # 4 replicas (2 per process) in Consecutive and Orthogonal groups of 2, against numpy.
    import collective_reference as ref
    from distributed_train import COLLECTIVE_GROUPS, collective_inputs

    out = str(tmp_path / "run")
    p, _ = mpirun(2, ["collectives", out], timeout=240, replicas=4)
    assert p.returncode == 0, p.stdout + p.stderr
    ranks = [np.load(f"{out}.rank{r}.npz") for r in range(2)]
    got = {k: np.concatenate([ranks[0][k], ranks[1][k]]) for k in ranks[0].files if k not in ("w", "v", "u")}
    xs = collective_inputs(4)
    want = {"all": ref.allreduce(xs, ("All", 0)), "consecutive": ref.allreduce(xs, ("Consecutive", 2)),
            "orthogonal": ref.allreduce(xs, ("Orthogonal", 2)), "scatter": ref.reducescatter(xs, ("All", 0)),
            "scatter_consecutive": ref.reducescatter(xs, ("Consecutive", 2)),
            "gather": ref.allgather(xs, ("Orthogonal", 2)), "gather_consecutive": ref.allgather(xs, ("Consecutive", 2))}
    assert sorted(got) == sorted(want)
    for k in want:
        np.testing.assert_array_equal(got[k], want[k], err_msg=k)
    # By hand for two of them: Consecutive 2 is {0, 1}, {2, 3}; Orthogonal 2 is {0, 2}, {1, 3}.
    np.testing.assert_array_equal(got["consecutive"][3], xs[2] + xs[3])
    np.testing.assert_array_equal(got["orthogonal"][3], xs[1] + xs[3])
    # The training step through the three collectives' gradients, over groups of 2.
    _, _, _, _, init = ref.training_model(4, *COLLECTIVE_GROUPS)
    want = ref.trained_weights(init, *ref.training_data(4, COLLECTIVE_GROUPS[2]), *COLLECTIVE_GROUPS)
    for r in range(2):
        for name, expected in zip("wvu", want):
            np.testing.assert_allclose(ranks[r][name], expected, rtol=1e-5, atol=1e-5, err_msg=f"rank {r}, {name}")


def _initializer(model_bytes, name):
    import onnx
    import onnx.numpy_helper
    for t in onnx.load_from_string(model_bytes).graph.initializer:
        if t.name == name:
            return onnx.numpy_helper.to_array(t)
    raise KeyError(name)


@pytest.mark.parametrize("path", ["shared", "mpi"])
def test_a_peer_that_hangs_makes_the_other_fail_within_the_timeout(tmp_path, path):
    p, seconds = mpirun(2, ["hang", str(tmp_path / "run"), "3"], timeout=120,
                        GRAFT_LOCAL_REDUCE="1" if path == "shared" else "0")
    assert p.returncode != 0
    assert "did not complete within 3 s (SessionOptions.collectiveTimeoutSeconds)" in p.stdout, p.stdout + p.stderr
    assert "rank 0: graft.Error" in p.stdout
    assert seconds < 50  # the hanging peer sleeps 60 s: rank 0 did not wait for it


def test_a_peer_that_dies_makes_the_job_fail_without_a_hang(tmp_path):
    out = str(tmp_path / "run")
    p, seconds = mpirun(2, ["kill", out, "3"], timeout=120)
    assert p.returncode != 0
    assert seconds < 50, p.stdout + p.stderr
    # Rank 0 either saw the failure itself or was stopped by mpirun, which reports the dead peer.
    text = p.stdout + p.stderr
    assert "rank 0: graft.Error" in text or "signal 9" in text or "Killed" in text, text
    # The checkpoint of the step before is whole (written to a temporary file, then renamed).
    assert os.path.exists(out + ".onnx")
    graft.Builder(out + ".onnx")
    assert not [f for f in os.listdir(tmp_path) if f.startswith("run.onnx") and f != "run.onnx"]


def test_processes_that_disagree_on_the_options_fail_at_prepare_device(tmp_path):
    p, _ = mpirun(2, ["mismatch", str(tmp_path / "run"), "2"], timeout=120)
    assert p.returncode != 0
    assert "process 1 has another model or other session options than process 0" in p.stdout, p.stdout + p.stderr


def test_distributed_options_that_do_not_match_the_mpi_world_are_errors():
    # This process is MPI's world of one: 2 instances' options cannot fit it.
    model, x, label, loss, _ = mlp(2)
    o = graft.SessionOptions(enableDistributedReplicatedGraphs=True, globalReplicationFactor=2, globalReplicaOffset=0)
    with pytest.raises(graft.Error, match=r"globalReplicationFactor = 2 with 1 replica per process means 2 processes, "
                                          r"but MPI's world has 1"):
        graft.TrainingSession(model, graft.DataFlow(1, {loss: graft.AnchorReturnType("All")}), loss, optimizer("sgd"),
                              graft.DeviceManager().createCpuDevice(1, 1), userOptions=o)
    o.globalReplicaOffset = 2
    with pytest.raises(graft.Error, match=r"globalReplicaOffset \(2\) must be a multiple of replicatedGraphCount"):
        graft.TrainingSession(model, graft.DataFlow(1, {loss: graft.AnchorReturnType("All")}), loss, optimizer("sgd"),
                              graft.DeviceManager().createCpuDevice(1, 1), userOptions=o)


def test_graft_launch_builds_the_mpirun_command():
    p = subprocess.run([GRAFT, "launch", "--num-instances", "2", "--num-replicas", "4", "--host", "a,b", "--print", "--",
                        "python", "train.py"], capture_output=True, text=True, env=clean_env())
    assert p.returncode == 0, p.stderr
    cmd = p.stdout.split()
    assert cmd[:3] == ["mpirun", "-np", "2"]
    assert "a:1,b:1" in cmd and "GRAFT_NUM_REPLICAS=4" in cmd and "GRAFT_NUM_INSTANCES=2" in cmd
    assert cmd[-2:] == ["python", "train.py"]
    p = subprocess.run([GRAFT, "launch", "--num-instances", "2", "--num-replicas", "3", "--", "python", "x.py"],
                       capture_output=True, text=True)
    assert p.returncode == 1 and "--num-replicas (3) must be a multiple of --num-instances (2)" in p.stderr


def test_graft_launch_runs_a_popdist_style_script(tmp_path):
    out = str(tmp_path / "run")
    env = clean_env(OMPI_MCA_btl_vader_single_copy_mechanism="none")
    p = subprocess.run([GRAFT, "launch", "--num-instances", "2", "--", sys.executable, SCRIPT, "train", out, "2", "sgd",
                        "1"], capture_output=True, text=True, timeout=240, env=env)
    assert p.returncode == 0, p.stdout + p.stderr
    assert "rank 0: done" in p.stdout and "rank 1: done" in p.stdout
    want, weights = in_process(2, "sgd", 1)
    got = np.load(f"{out}.rank1.npz")
    for w in weights:
        np.testing.assert_allclose(got[w], want[w], rtol=2e-5, atol=2e-6, err_msg=w)


class _TwoHosts:
    """Two 'hosts' on this machine: network namespaces joined by a veth pair (10.231.N.1 and .2,
    nothing else reachable), and an rsh agent that mpirun uses instead of ssh to start its daemon
    inside the namespace of a host's address. Each host also gets a hostname of its own (a UTS
    namespace, `unshare --uts`), as real hosts have: OpenMPI 4.1 crashes in MPI_Comm_split_type
    when two of its daemons run several processes each under one hostname."""

    def __init__(self, tmp_path):
        tag = f"{os.getpid() % 10000}"
        self.ns = [f"graftA{tag}", f"graftB{tag}"]
        subnet = 200 + os.getpid() % 50  # parallel runs use other addresses
        self.addr = [f"10.231.{subnet}.1", f"10.231.{subnet}.2"]
        self.net = f"10.231.{subnet}.0/24"
        self.agent = str(tmp_path / "netns_agent.sh")
        with open(self.agent, "w") as f:
            f.write("#!/bin/sh\nhost=$1; shift\ncase \"$host\" in\n")
            for a, n in zip(self.addr, self.ns):
                f.write(f"  {a}) ns={n} ;;\n")
            f.write("  *) echo \"unknown host $host\" >&2; exit 1 ;;\nesac\n"
                    "exec ip netns exec \"$ns\" unshare --uts /bin/sh -c \"hostname $ns; $*\"\n")
        os.chmod(self.agent, 0o755)

    def ip(self, *args):
        subprocess.run(["ip", *args], check=True, capture_output=True, text=True)

    def __enter__(self):
        va, vb = f"v{self.ns[0]}", f"v{self.ns[1]}"
        for n in self.ns:
            self.ip("netns", "add", n)
        self.ip("link", "add", va, "type", "veth", "peer", "name", vb)
        for v, n, a in ((va, self.ns[0], self.addr[0]), (vb, self.ns[1], self.addr[1])):
            self.ip("link", "set", v, "netns", n)
            self.ip("-n", n, "addr", "add", f"{a}/24", "dev", v)
            self.ip("-n", n, "link", "set", v, "up")
            self.ip("-n", n, "link", "set", "lo", "up")
        return self

    def __exit__(self, *exc):
        for n in self.ns:  # deleting a namespace deletes its end of the veth pair, and the pair
            subprocess.run(["ip", "netns", "del", n], capture_output=True)


def _can_make_namespaces():
    if os.geteuid() != 0 or shutil.which("ip") is None:
        return False
    p = subprocess.run(["ip", "netns", "add", f"graftprobe{os.getpid()}"], capture_output=True)
    subprocess.run(["ip", "netns", "del", f"graftprobe{os.getpid()}"], capture_output=True)
    return p.returncode == 0


def _mpirun_on_two_hosts(h, per_host, args):
    n = 2 * per_host
    # Within a host the processes share memory (graft's gradient sums; MPI's own vader transport);
    # between the hosts only TCP over the veth pair.
    cmd = ["ip", "netns", "exec", h.ns[0], "unshare", "--uts", "/bin/sh", "-c", f'hostname {h.ns[0]}; exec "$0" "$@"',
           MPIRUN, "-np", str(n), "--host",
           f"{h.addr[0]}:{per_host},{h.addr[1]}:{per_host}", "--oversubscribe",
           "--mca", "plm_rsh_agent", h.agent, "--mca", "oob_tcp_if_include", h.net, "--mca", "btl",
           "tcp,self" if per_host == 1 else "tcp,vader,self", "--mca", "btl_vader_single_copy_mechanism", "none",
           "--mca", "btl_tcp_if_include", h.net, "--allow-run-as-root", "--bind-to", "none",
           "-x", f"GRAFT_NUM_INSTANCES={n}", "-x", f"GRAFT_NUM_REPLICAS={n}", "-x", "GRAFT_LOG_LEVEL=info",
           sys.executable, SCRIPT] + args
    return subprocess.run(cmd, capture_output=True, text=True, timeout=240, env=clean_env())


def test_two_hosts_over_tcp_between_network_namespaces(tmp_path):
    # CI runs as root with `ip netns`; elsewhere this fails and says why rather than skipping.
    assert _can_make_namespaces(), "this test needs root and `ip netns` (iproute2) to make two hosts on one machine"
    out = str(tmp_path / "run")
    steps = 3
    with _TwoHosts(tmp_path) as h:
        p = _mpirun_on_two_hosts(h, 1, ["train", out, str(steps), "adam", "2"])
    assert p.returncode == 0, p.stdout + p.stderr
    assert SHARED not in p.stderr  # one process per host: every gradient over MPI
    want, weights = in_process(steps, "adam", 2)
    ranks = [np.load(f"{out}.rank{r}.npz") for r in range(2)]
    for w in weights:
        np.testing.assert_array_equal(ranks[0][w], ranks[1][w], err_msg=w)
        np.testing.assert_allclose(ranks[1][w], want[w], rtol=2e-5, atol=2e-6, err_msg=w)


def test_two_hosts_of_two_processes_sum_in_shared_memory_then_across_the_hosts(tmp_path):
    # The hierarchical reduction (runtime/local_reduce.cpp): on each host the two processes sum
    # their gradients in shared memory, then local process j all-reduces slice j with local
    # process j of the other host over TCP, and copies the result to its host's other process.
    assert _can_make_namespaces(), "this test needs root and `ip netns` (iproute2) to make two hosts on one machine"
    out = str(tmp_path / "run")
    with _TwoHosts(tmp_path) as h:
        p = _mpirun_on_two_hosts(h, 2, ["train", out, "2", "adam", "2"])
    assert p.returncode == 0, p.stdout + p.stderr
    assert SHARED + " (" in p.stderr and "then each its slice with the other 1 host over MPI" in p.stderr, p.stderr
    # (One process of 2 replicas accumulating 4 micro-batches: the same 8 micro-batches a step.)
    want, weights = in_process(2, "adam", 4, replicas=2, data_of=(4, 2))
    ranks = [np.load(f"{out}.rank{r}.npz") for r in range(4)]
    for w in weights:
        for r in range(1, 4):
            np.testing.assert_array_equal(ranks[0][w], ranks[r][w], err_msg=f"{w}, rank {r}")
        np.testing.assert_allclose(ranks[3][w], want[w], rtol=2e-5, atol=2e-6, err_msg=w)
