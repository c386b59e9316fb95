"""graft.distributed: what an instance started by ``graft launch`` (or mpirun) needs to know, with
popdist's names, so that a PopART/popdist training script runs unchanged after changing its imports.

``graft launch --num-instances N --num-replicas R -- python train.py`` starts N processes over MPI
and sets GRAFT_NUM_INSTANCES and GRAFT_NUM_REPLICAS; the instance index is MPI's rank (OpenMPI's
OMPI_COMM_WORLD_RANK). Without a launcher a script is one instance with one replica.

    import graft.distributed as popdist
    opts = graft.SessionOptions()
    popdist.popart.configureSessionOptions(opts)    # or popdist.configureSessionOptions(opts)
    device = popdist.popart.getDevice()
"""
import os
import types

from . import _graft


def _int_env(names, default):
    for n in names:
        v = os.environ.get(n)
        if v is not None:
            try:
                return int(v)
            except ValueError:
                raise _graft.Error(f"environment variable {n} must be an integer, got {v!r}") from None
    return default


def isPopdistEnvSet():
    """True when this process was started by ``graft launch`` (or under mpirun)."""
    return "GRAFT_NUM_INSTANCES" in os.environ or "OMPI_COMM_WORLD_SIZE" in os.environ


def isUsingDistributed():
    """popdist's name: true when there is more than one instance."""
    return getNumInstances() > 1


def getNumInstances():
    """Processes in the job."""
    return _int_env(["GRAFT_NUM_INSTANCES", "OMPI_COMM_WORLD_SIZE", "PMI_SIZE"], 1)


def getInstanceIndex():
    """This process's index, 0 .. getNumInstances() - 1 (MPI's rank)."""
    return _int_env(["OMPI_COMM_WORLD_RANK", "PMI_RANK"], 0)


def getNumTotalReplicas():
    """Replicas over all instances."""
    return _int_env(["GRAFT_NUM_REPLICAS"], getNumInstances())


def getNumLocalReplicas():
    """Replicas in this process."""
    n, total = getNumInstances(), getNumTotalReplicas()
    if total % n:
        raise _graft.Error(f"GRAFT_NUM_REPLICAS ({total}) is not a multiple of the number of instances ({n})")
    return total // n


def getReplicaIndexOffset():
    """The global index of this process's first replica."""
    return getInstanceIndex() * getNumLocalReplicas()


def getCollectiveTimeout():
    """Seconds a collective waits for a peer (``graft launch --timeout``)."""
    return float(os.environ.get("GRAFT_COLLECTIVE_TIMEOUT", "60"))


def configureSessionOptions(opts):
    """Sets the replication options of ``opts`` (a graft.SessionOptions) for this instance, as
    popdist.popart.configureSessionOptions does."""
    local = getNumLocalReplicas()
    opts.enableReplicatedGraphs = local > 1
    opts.replicatedGraphCount = local
    if isUsingDistributed():
        opts.enableDistributedReplicatedGraphs = True
        opts.globalReplicationFactor = getNumTotalReplicas()
        opts.globalReplicaOffset = getReplicaIndexOffset()
        opts.collectiveTimeoutSeconds = getCollectiveTimeout()
    return opts


def getDevice(coresPerReplica=1, ipus_per_replica=1):
    """A cpu device with a virtual device per local replica (times ``ipus_per_replica`` for
    pipelined replicas), ``coresPerReplica`` cores each."""
    return _graft.DeviceManager().createCpuDevice(getNumLocalReplicas() * ipus_per_replica, coresPerReplica)


#: popdist.popart's functions, for scripts written as ``popdist.popart.configureSessionOptions``.
popart = types.SimpleNamespace(configureSessionOptions=configureSessionOptions, getDevice=getDevice)
