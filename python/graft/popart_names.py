"""PopART's enums and settings classes that graft's API takes, as real objects.

The values select IPU behaviour in PopART (device selection, subgraph copying, tensor placement
in streaming memory, ...). graft accepts them where PopART does; SessionOptions warns once, by
name, about every option that only steers IPU hardware (see options.py). The settings classes
hold their fields so that programs can set and read them back.
"""
import enum as _enum


class DeviceSelectionCriterion(_enum.Enum):
    First = 0
    Random = 1


class IrSerializationFormat(_enum.Enum):
    JSON = 0


class InitType(_enum.Enum):
    """What aiGraphcore.init fills its output with."""

    NoInit = 0
    Zero = 1


class SubgraphCopyingStrategy(_enum.Enum):
    OnEnterAndExit = 0
    JustInTime = 1


class AccumulateOuterFragmentSchedule(_enum.Enum):
    Scheduler = 0
    Serial = 1
    OverlapCycleOptimized = 2
    OverlapMemoryOptimized = 3


class MeanReductionStrategy(_enum.Enum):
    Running = 0
    Post = 1
    PostAndLoss = 2


class TensorStorage(_enum.Enum):
    OnChip = 0
    OffChip = 1


class ReplicatedTensorSharding(_enum.Enum):
    Off = 0
    On = 1


class ExecutionPhaseSchedule(_enum.Enum):
    Interleaving = 0
    Batch = 1
    BatchClusteredIO = 2


class ExecutionPhaseIOSchedule(_enum.Enum):
    Preload = 0
    OnDemand = 1


class BatchSerializationTransformContext(_enum.Enum):
    Fwd = 0
    Bwd = 1


class BatchSerializationMethod(_enum.Enum):
    UnrollDynamic = 0
    UnrollStatic = 1
    Loop = 2


class BatchSerializationBatchSchedule(_enum.Enum):
    Scheduler = 0
    Isomorphic = 1
    OverlapOnIo = 2
    OverlapOnCompute = 3


class CommGroupType(_enum.Enum):
    All = 0
    Consecutive = 1
    Orthogonal = 2
    Ungrouped = 3


class CollectiveOperator(_enum.Enum):
    Add = 0
    Mean = 1
    Mul = 2
    Min = 3
    Max = 4
    LogicalAnd = 5
    LogicalOr = 6
    SquareAdd = 7
    Local = 8


class ScatterReduction(_enum.Enum):
    Sum = 0
    Max = 1
    Min = 2
    Mul = 3
    NoReduction = 4


class GradientTensorTrackingMethod(_enum.Enum):
    AllNonViewChangingGradientTensors = 0
    ConvAndMatmulGradients = 1
    GradientsOfUserSpecifiedTensors = 2


class _Settings:
    """A PopART settings object: keyword or positional fields, readable and writable."""

    _fields = ()

    def __init__(self, *args, **kwargs):
        if len(args) > len(self._fields):
            raise TypeError(f"{type(self).__name__} takes at most {len(self._fields)} positional arguments")
        for (name, default), value in zip(self._fields, list(args) + [None] * len(self._fields)):
            object.__setattr__(self, name, default)
        for (name, _), value in zip(self._fields, args):
            object.__setattr__(self, name, value)
        names = [n for n, _ in self._fields]
        for k, v in kwargs.items():
            if k not in names:
                raise TypeError(f"{type(self).__name__} has no field '{k}' (fields: {', '.join(names)})")
            object.__setattr__(self, k, v)

    def __repr__(self):
        body = ", ".join(f"{n}={getattr(self, n)!r}" for n, _ in self._fields)
        return f"{type(self).__name__}({body})"


class CommGroup(_Settings):
    """Which replicas a collective or a variable spans."""

    _fields = (("type", CommGroupType.All), ("replicaGroupSize", 0))


class TensorLocation(_Settings):
    _fields = (("storage", TensorStorage.OnChip), ("loadTileSet", None),
               ("storageTileSet", None), ("replicatedTensorSharding", ReplicatedTensorSharding.Off),
               ("shardingDomain", None))


class TensorLocationSettings(_Settings):
    _fields = (("location", None), ("minElementsForOffChip", 2), ("minElementsForReplicatedTensorSharding", 8192))


class BatchSerializationSettings(_Settings):
    _fields = (("factor", 0), ("concatOnVirtualGraphChange", True), ("concatOnExecutionPhaseChange", True),
               ("concatOnPipelineStageChange", True), ("transformContext", BatchSerializationTransformContext.Fwd),
               ("method", BatchSerializationMethod.UnrollDynamic),
               ("batchSchedule", BatchSerializationBatchSchedule.Isomorphic))


class ExecutionPhaseSettings(_Settings):
    _fields = (("phases", 0), ("stages", 2), ("weightIOSchedule", ExecutionPhaseIOSchedule.Preload),
               ("activationIOSchedule", ExecutionPhaseIOSchedule.Preload),
               ("optimizerStateIOSchedule", ExecutionPhaseIOSchedule.OnDemand),
               ("accumulatorIOSchedule", ExecutionPhaseIOSchedule.Preload),
               ("schedule", ExecutionPhaseSchedule.Interleaving))


class AccumulateOuterFragmentSettings(_Settings):
    _fields = (("schedule", AccumulateOuterFragmentSchedule.Serial), ("excludedVirtualGraphs", ()))


class AutomaticLossScalingSettings(_Settings):
    _fields = (("enabled", False), ("toTrackTensors", None), ("binEdgeLocation", 0.0625),
               ("thresholdUpperCountProportion", 1e-7), ("updatePeriod", 1),
               ("gradientTensorTrackingMethod", GradientTensorTrackingMethod.AllNonViewChangingGradientTensors))


class ReplicatedCollectivesSettings(_Settings):
    _fields = (("prepareScheduleForMergingCollectives", False), ("mergeAllReduceCollectives", False),
               ("mergeReduceScatterCollectives", False), ("mergeAllGatherCollectives", False))


__all__ = [n for n, v in list(globals().items()) if isinstance(v, type) and not n.startswith("_")]
