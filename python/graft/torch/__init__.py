"""graft.torch: PopTorch's wrapper for PyTorch models, trained and run through graft.

A PopTorch script runs after changing only its import::

    import graft.torch as poptorch

    opts = poptorch.Options().deviceIterations(4)
    model = poptorch.trainingModel(net, opts, poptorch.optim.SGD(net.parameters(), lr=0.01))
    for x, y in poptorch.DataLoader(opts, dataset, batch_size=16):
        out, loss = model(x, y)

The module is captured with torch's ONNX exporter at the first call (again for new input shapes,
dtypes or train/eval mode), compiled by graft's InferenceSession / TrainingSession, and its
weights flow back into the torch module when the host reads them. See docs/torch.md.
"""
import enum as _enum

import torch as _torch

from .. import _graft
from . import _log, optim  # noqa: F401
from ._capture import EXPORTER  # noqa: F401
from ._data import AsynchronousDataAccessor, DataLoader, DataLoaderMode  # noqa: F401
from ._model import PoplarExecutor, inferenceModel, load, trainingModel  # noqa: F401
from ._ops import (  # noqa: F401
    cond,
    custom_op,
    for_loop,
    identity_loss,
    ipu_print_tensor,
    ipuHardwareIsAvailable,
    ipuHardwareVersion,
    isRunningOnIpu,
    nop,
    recomputationCheckpoint,
    set_available_memory,
    set_overlap_for_input,
    set_overlap_for_output,
)
from ._options import AnchorMode, MeanReductionStrategy, Options, OutputMode, ReductionType  # noqa: F401
from ._parallel import (  # noqa: F401
    AutoStage,
    BeginBlock,
    Block,
    ParallelPhasedExecution,
    PipelinedExecution,
    SerialPhasedExecution,
    ShardedExecution,
    Stage,
)

__version__ = "3.3.0+graft"
Error = _graft.Error


class OverlapMode:
    NoOverlap = "no_overlap"
    OverlapAccumulationLoop = "overlap_accumulation_loop"
    OverlapDeviceIterationLoop = "overlap_device_iteration_loop"


class ConnectionType:
    Always = 0
    OnDemand = 1
    Never = 2


class SyncPattern:
    Full = 0
    SinglePipeline = 1
    ReplicaAndLadder = 2


class CommGroupType:
    All = 0
    Consecutive = 1
    Orthogonal = 2
    NoGrouping = 3


class VariableRetrievalMode:
    OnePerGroup = 0
    AllReplicas = 1


class MatMulSerializationMode(_enum.Enum):
    InputChannels = "input_channels"
    ReducingDim = "reducing_dim"
    OutputChannels = "output_channels"
    Disabled = "none"


class ICustomArgParser:
    """How a custom input type splits into tensors (yieldTensors) and is rebuilt (reconstruct)."""

    def yieldTensors(self, struct):  # noqa: N802
        raise NotImplementedError

    def reconstruct(self, original_structure, tensor_iterator):
        raise NotImplementedError


def registerCustomArgParser(tensor_type, parser):  # noqa: N802
    """Lets models take ``tensor_type`` arguments: graft.torch flattens inputs with torch's pytree,
    so the parser is registered as the type's pytree node."""
    from torch.utils import _pytree  # noqa: PLC0415

    def flatten(struct):
        return list(parser.yieldTensors(struct)), struct

    def unflatten(children, struct):
        return parser.reconstruct(struct, iter(children))

    _pytree.register_pytree_node(tensor_type, flatten, unflatten)


def serializedMatMul(lhs, rhs, mode, factor=0, keep_precision=False):  # noqa: N802
    """An IPU memory hint for a matmul: here a plain matmul."""
    return _torch.matmul(lhs, rhs)


def setLogLevel(level):  # noqa: N802
    """Sets the level of graft.torch's own log, the wrapper's (TRACE, DEBUG, INFO, WARN, ERR, OFF;
    PopTorch's integers 0..6 too). As in PopTorch, where this is PopTorch's level and PopART has
    its own, graft's engine log keeps its level: ``graft.getLogger().setLevel(...)`` (or
    GRAFT_LOG_LEVEL) sets that one."""
    names = ["TRACE", "DEBUG", "INFO", "WARN", "ERR", "CRITICAL", "OFF"]
    if isinstance(level, int):
        level = names[max(0, min(level, 6))]
    _log.set_level(level)


def __getattr__(name):
    raise AttributeError(f"module 'graft.torch' has no attribute '{name}': graft.torch implements PopTorch's "
                         "inferenceModel / trainingModel API (see docs/torch.md for what is supported)")
