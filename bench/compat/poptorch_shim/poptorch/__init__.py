"""`import poptorch` answered by graft.torch, for running PopTorch's own test-suite
(bench/compat/poptorch_tests.sh). Only re-exports, plus the few internals tests/helpers.py reaches."""
import sys as _sys

import graft.torch as _gt
from graft.torch import *  # noqa: F401,F403
from graft.torch import Error, optim  # noqa: F401

from . import _impl, _logging, poptorch_core  # noqa: F401

for _name in dir(_gt):
    if not _name.startswith("__"):
        globals().setdefault(_name, getattr(_gt, _name))


_sys.modules.setdefault("poptorch.optim", optim)
