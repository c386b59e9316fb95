"""What tests/fuzz/campaign_api.py and fuzz_python.py share: running one case in a forked child
with an address-space cap and a timeout, and the small training model both drive.

A child exits 0 when the case ends normally, 3 on an unexpected exception (printed), 4 on
MemoryError; the parent names the outcome: "ok", the name given for 3, "blow-up" (4, or killed
by the kernel's OOM killer), "crash" (another signal) or "hang" (past the timeout: the child is
killed).
"""
import os
import resource
import signal
import sys
import time
import traceback


def run_forked(fn, memory_cap, timeout, cwd, exception_outcome="exception", poll_s=0.002):
    """fn() in a child working in `cwd` (a scratch folder: files a hostile case names with a
    relative path, a timeline or a log, land there and not in the caller's folder)."""
    pid = os.fork()
    if pid == 0:
        code = 0
        try:
            os.chdir(cwd)
            resource.setrlimit(resource.RLIMIT_AS, (memory_cap, memory_cap))
            code = fn() or 0
        except MemoryError:
            code = 4
        except BaseException:  # noqa: BLE001
            traceback.print_exc()
            code = 3
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(code)
    t0 = time.time()
    while True:
        done, status = os.waitpid(pid, os.WNOHANG)
        if done:
            break
        if time.time() - t0 > timeout:
            os.kill(pid, signal.SIGKILL)
            os.waitpid(pid, 0)
            return "hang"
        time.sleep(poll_s)
    if os.WIFSIGNALED(status):
        return "blow-up" if os.WTERMSIG(status) == signal.SIGKILL else "crash"
    return {0: "ok", 3: exception_outcome, 4: "blow-up"}.get(os.WEXITSTATUS(status), exception_outcome)


def l1_regression_model():
    """x [2, 4] -> y = x w0 (w0 [4, 1], 0.5) with an L1 loss: (model bytes, loss id, weight id).
    (tests/python/test_reliability.py trains it too.)"""
    import numpy as np

    import graft

    b = graft.Builder()
    x = b.addInputTensor(graft.TensorInfo("FLOAT", [2, 4]), "x")
    w = b.addInitializedInputTensor(np.full((4, 1), 0.5, np.float32), "w0")
    y = b.aiOnnx.matmul([x, w], "y")
    loss = b.aiGraphcore.l1loss([y], 0.1, graft.ReductionType.Sum)
    b.addOutputTensor(y)
    return b.getModelProto(), loss, w
