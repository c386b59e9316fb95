"""PopART's enums and settings classes that graft's API takes, as real objects.

The values select IPU behaviour in PopART (device selection, subgraph copying, tensor placement
in streaming memory, ...). graft accepts them where PopART does; SessionOptions warns once, by
name, about every option that only steers IPU hardware (see options.py). The settings classes
hold their fields so that programs can set and read them back.
"""
import enum as _enum


def popart_enum(name, members, doc=None):
    """A PopART enum class ``name`` whose ``members`` (names separated by spaces) are numbered 0, 1, ...
    in order, as PopART numbers them."""
    cls = _enum.Enum(name, [(m, i) for i, m in enumerate(members.split())], module="graft")
    if doc:
        cls.__doc__ = doc
    return cls


# PopART's enums that graft's API takes (most only select IPU behaviour; their values are accepted
# where PopART takes them). MeanReductionStrategy is graft's own (bound from C++: an option graft honours).
DeviceSelectionCriterion = popart_enum("DeviceSelectionCriterion", "First Random")
IrSerializationFormat = popart_enum("IrSerializationFormat", "JSON")
InitType = popart_enum("InitType", "NoInit Zero", "What aiGraphcore.init fills its output with.")
SubgraphCopyingStrategy = popart_enum("SubgraphCopyingStrategy", "OnEnterAndExit JustInTime")
AccumulateOuterFragmentSchedule = popart_enum("AccumulateOuterFragmentSchedule",
                                              "Scheduler Serial OverlapCycleOptimized OverlapMemoryOptimized")
TensorStorage = popart_enum("TensorStorage", "OnChip OffChip")
ReplicatedTensorSharding = popart_enum("ReplicatedTensorSharding", "Off On")
ExecutionPhaseSchedule = popart_enum("ExecutionPhaseSchedule", "Interleaving Batch BatchClusteredIO")
ExecutionPhaseIOSchedule = popart_enum("ExecutionPhaseIOSchedule", "Preload OnDemand")
BatchSerializationTransformContext = popart_enum("BatchSerializationTransformContext", "Fwd Bwd")
BatchSerializationMethod = popart_enum("BatchSerializationMethod", "UnrollDynamic UnrollStatic Loop")
BatchSerializationBatchSchedule = popart_enum("BatchSerializationBatchSchedule",
                                              "Scheduler Isomorphic OverlapOnIo OverlapOnCompute")
CommGroupType = popart_enum("CommGroupType", "All Consecutive Orthogonal Ungrouped")
CollectiveOperator = popart_enum("CollectiveOperator",
                                 "Add Mean Mul Min Max LogicalAnd LogicalOr SquareAdd Local")
ScatterReduction = popart_enum("ScatterReduction", "Sum Max Min Mul NoReduction")
GradientTensorTrackingMethod = popart_enum(
    "GradientTensorTrackingMethod", "AllNonViewChangingGradientTensors ConvAndMatmulGradients GradientsOfUserSpecifiedTensors")
RecomputeType = popart_enum("RecomputeType", "Undefined Checkpoint Recompute Recomputed",
                            "PopART's per-op recomputation setting (Builder.recomputeOutputInBackwardPass).")
SyntheticDataMode = popart_enum("SyntheticDataMode", "Off Zeros RandomNormal RandomUniform")
MergeVarUpdateType = popart_enum("MergeVarUpdateType", "Off All AutoLoose AutoTight")
TileSet = popart_enum("TileSet", "Compute IO")
ExchangeStrategy = popart_enum("ExchangeStrategy", "JustInTime OverlapInnerLoop OverlapLoops OverlapStep")
SyncPattern = popart_enum("SyncPattern", "Full SinglePipeline ReplicaAndLadder")
DeviceConnectionType = popart_enum("DeviceConnectionType", "Always OnDemand Never")
Instrumentation = popart_enum("Instrumentation", "Outer Inner")


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
