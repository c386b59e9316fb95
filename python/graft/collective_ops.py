"""``builder.aiGraphcore`` collectives with PopART's signatures: replicatedallreduce,
replicatedreducescatter and replicatedallgather (src/ops/collectives.cpp; docs/replication.md).

The group is PopART's ``CommGroup(type, replicaGroupSize)`` (All, Consecutive, Orthogonal,
Ungrouped), the operator a ``CollectiveOperator`` (Add by default); both are written as PopART's
builder writes them (``__collectiveCommGroup``, ``__collectiveOperator``)."""
from . import _graft
from .opsets import _as_int, _tensor_id, debug_name
from .popart_names import CollectiveOperator, CommGroup


def _group(value, what):
    if value is None:
        return None
    if isinstance(value, CommGroup):
        kind = value.type.value if hasattr(value.type, "value") else _as_int(value.type, what)
        return [kind, _as_int(value.replicaGroupSize, what)]
    # PopART's deprecated form: [type, replicaGroupSize]
    values = list(value)
    if len(values) != 2:
        raise _graft.Error(f"{what}: commGroup must be a CommGroup or [type, replicaGroupSize], got {value!r}")
    return [_as_int(v, what) for v in values]


def _operator(value, what):
    if value is None:
        return None
    if isinstance(value, CollectiveOperator):
        return value.value
    return _as_int(value, what)


def _collective(self, op_type, args, collectiveOperator, commGroup, debugContext, debugPrefix):
    inputs = [args] if isinstance(args, str) else list(args)
    if len(inputs) != 1:
        raise _graft.Error(f"{op_type.lower()} takes one input, got {len(inputs)}")
    attrs = {}
    op = _operator(collectiveOperator, f"{op_type.lower()}: collectiveOperator")
    if op is not None:
        attrs["__collectiveOperator"] = op
    group = _group(commGroup, f"{op_type.lower()}: commGroup")
    if group is not None:
        attrs["__collectiveCommGroup"] = group
    return self._builder._impl.addOp(op_type, "ai.graphcore", 1, [_tensor_id(inputs[0], op_type)], attrs, 1,
                                     debug_name(debugContext, debugPrefix))[0]


def replicatedallreduce(self, args, collectiveOperator=None, commGroup=None, debugContext="", debugPrefix=None):
    """``args[0]`` reduced over the replicas of ``commGroup`` (all by default) with ``collectiveOperator``
    (Add by default); the same shape. PopART's deprecated form ``replicatedallreduce(args, [type, size])``
    is accepted too."""
    if isinstance(collectiveOperator, (list, tuple)):  # replicatedallreduce(args, commGroup)
        collectiveOperator, commGroup = None, collectiveOperator
    return _collective(self, "ReplicatedAllReduce", args, collectiveOperator, commGroup, debugContext, debugPrefix)


def replicatedreducescatter(self, args, collectiveOperator=None, commGroup=None, debugContext="", debugPrefix=None):
    """``args[0]`` flattened, reduced over the group and zero-padded to a multiple of the group size k: this
    replica's shard, ``[ceil(n / k)]``."""
    return _collective(self, "ReplicatedReduceScatter", args, collectiveOperator, commGroup, debugContext,
                       debugPrefix)


def replicatedallgather(self, args, commGroup=None, debugContext="", debugPrefix=None):
    """The flattened ``args[0]`` of every replica of the group, in the group's order: ``[k * n]``."""
    return _collective(self, "ReplicatedAllGather", args, None, commGroup, debugContext, debugPrefix)


def methods():
    """The methods this module adds to ``builder.aiGraphcore``."""
    return {"replicatedallreduce": replicatedallreduce, "replicatedreducescatter": replicatedreducescatter,
            "replicatedallgather": replicatedallgather}
