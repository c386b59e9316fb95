"""The parts of PopTorch's C++ extension module that tests/helpers.py uses."""
from graft import Error  # noqa: F401


def isCompilingWithDispatcher():  # noqa: N802
    return False


def propagateInputShapes(graph):  # noqa: N802
    raise Error("graft.torch: propagateInputShapes works on PopTorch's JIT graphs, which graft does not build")
