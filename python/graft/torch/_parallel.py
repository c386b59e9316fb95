"""Model parallelism: PopTorch's blocks and stages on graft's virtual graphs and pipeline stages."""
import enum
import itertools

import torch

from .. import _graft
from . import _capture

_auto_ids = itertools.count()


def _block_id(user_id):
    return str(user_id) if user_id is not None else f"__block{next(_auto_ids)}"


def BeginBlock(layer_to_call, user_id=None, ipu_id=None):  # noqa: N802  (PopTorch's name)
    """Starts a block at ``layer_to_call``: it and everything traced after it, until the next block,
    run on virtual device ``ipu_id`` (PopTorch's IPU) in the block's pipeline stage."""
    if not isinstance(layer_to_call, torch.nn.Module):
        raise _graft.Error(f"poptorch.BeginBlock: expected a torch.nn.Module, got {type(layer_to_call).__name__}")
    block = (_block_id(user_id), ipu_id)
    old = getattr(layer_to_call, "_graft_block_hook", None)
    if old is not None:
        old.remove()

    def hook(_module, args):
        return _capture.mark_block(args, block)

    layer_to_call._graft_block_hook = layer_to_call.register_forward_pre_hook(hook)  # noqa: SLF001
    return layer_to_call


class Block:
    """``with poptorch.Block("name", ipu_id=1): ...``: the modules called inside belong to the block
    (it starts at the first module call). ``Block.start(user_id, ipu_id)`` starts one at the next
    module call without a ``with``."""

    _pending = None
    _hook = None

    def __init__(self, user_id=None, ipu_id=None):
        self.block = (_block_id(user_id), ipu_id)

    @staticmethod
    def useAutoId():  # noqa: N802
        """PopTorch numbers blocks without ids automatically; so does graft.torch."""

    @classmethod
    def start(cls, user_id=None, ipu_id=None):
        cls._arm((_block_id(user_id), ipu_id))

    @classmethod
    def _arm(cls, block):
        cls._pending = block
        if cls._hook is None:
            cls._hook = torch.nn.modules.module.register_module_forward_pre_hook(cls._on_call)

    @classmethod
    def _on_call(cls, _module, args):
        if cls._pending is None or not _capture.capturing():
            return None
        block, cls._pending = cls._pending, None
        return _capture.mark_block(args, block)

    def __enter__(self):
        Block._arm(self.block)
        return self

    def __exit__(self, *exc):
        Block._pending = None
        return False


class Stage:
    """A pipeline stage made of blocks (by user id): ``Stage("a", "b").ipu(1)``."""

    def __init__(self, *block_ids):
        self.block_ids = [str(b) for b in block_ids]
        self.ipu_id = None

    def ipu(self, ipu_id):
        self.ipu_id = ipu_id
        return self


class AutoStage(enum.IntEnum):
    SameAsIpu = 0
    AutoIncrement = 1


class _Strategy:
    pipelined = True

    def __init__(self, *args):
        self.stages = []
        self.auto = AutoStage.SameAsIpu
        for a in args:
            if isinstance(a, AutoStage):
                self.auto = a
            elif isinstance(a, Stage):
                self.stages.append(a)
            elif isinstance(a, (str, int)):
                self.stages.append(Stage(a))
            elif isinstance(a, (list, tuple)):
                self.stages.append(Stage(*a))
            else:
                raise _graft.Error(f"{type(self).__name__}: expected Stage, block ids or AutoStage, got {a!r}")

    def placement(self, blocks):
        """{block user id: (virtual graph, pipeline stage)} for the blocks met in the trace."""
        out = {}
        listed = {}
        for s_index, st in enumerate(self.stages):
            for b in st.block_ids:
                listed[b] = (s_index, st.ipu_id)
        for order, (user_id, ipu_id) in enumerate(blocks):
            if user_id in listed:
                stage, st_ipu = listed[user_id]
                ipu = st_ipu if st_ipu is not None else (ipu_id if ipu_id is not None else stage)
            else:
                ipu = ipu_id if ipu_id is not None else order
                stage = ipu if self.auto == AutoStage.SameAsIpu else order
            out[user_id] = (int(ipu), int(stage))
        return out


class PipelinedExecution(_Strategy):
    """Blocks become pipeline stages: micro-batches stream through them (graft's pipelined
    sessions; in training ``gradientAccumulation`` must be at least the number of stages)."""


class ShardedExecution(_Strategy):
    """Blocks run on their virtual devices one micro-batch at a time (no pipelining)."""

    pipelined = False


class ParallelPhasedExecution(_Strategy):
    def __init__(self, *args):
        raise _graft.Error("poptorch.ParallelPhasedExecution: graft has no phased execution; use "
                           "PipelinedExecution or ShardedExecution")


SerialPhasedExecution = ParallelPhasedExecution


def annotate(cap, strategy):
    """Writes __ipu_number (and, when pipelined, __pipeline_stage) on every node of the capture;
    returns (number of virtual devices, pipelined)."""
    from onnx import helper  # noqa: PLC0415

    strategy = strategy or PipelinedExecution(AutoStage.SameAsIpu)
    place = strategy.placement(cap.blocks)
    first = place[cap.blocks[0][0]] if cap.blocks else (0, 0)
    before = (0, 0) if first[0] != 0 else first
    for node, b in zip(cap.onnx.graph.node, cap.block_of_node):
        ipu, stage = before if b is None else place[cap.blocks[b][0]]
        node.attribute.append(helper.make_attribute("__ipu_number", ipu))
        if strategy.pipelined:
            node.attribute.append(helper.make_attribute("__pipeline_stage", stage))
    n_ipus = max(p[0] for p in list(place.values()) + [before]) + 1
    return n_ipus, strategy.pipelined
