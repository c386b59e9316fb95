"""poptorch.Options for graft: the fields that mean something on a CPU, and the IPU-only ones
accepted with one warning that names them."""
import enum
import os
import warnings

from .. import _graft


class OutputMode(enum.IntEnum):
    """What a call returns of each output (PopTorch's OutputMode; anchorMode is its old name)."""

    Final = 0  #: the last batch's value
    EveryN = 1  #: every N-th batch (outputMode(EveryN, output_return_period=N))
    All = 2  #: every batch, concatenated along the batch dimension
    Sum = 3  #: the sum over the batches
    Default = 4  #: All for inference, Final for training


AnchorMode = OutputMode


class ReductionType(enum.IntEnum):
    """How gradients of the micro-batches of one step are combined."""

    Sum = 0
    Mean = 1
    NoReduction = 2


class MeanReductionStrategy(enum.IntEnum):
    Running = 0
    Post = 1
    PostAndLoss = 2


_warned = set()


def _ipu_only(name):
    """Records an IPU-only setting; warns once per name."""
    if name not in _warned:
        _warned.add(name)
        warnings.warn(f"poptorch option '{name}' only selects IPU behaviour: graft.torch accepts it and "
                      "ignores it", UserWarning, stacklevel=3)


class _Accepting:
    """A settings group whose every method is IPU-only: any call is accepted (one warning per name)
    and returns the group, so chained calls keep working."""

    def __init__(self, prefix, owner):
        self._prefix = prefix
        self._owner = owner

    def __getattr__(self, name):
        if name.startswith("__"):
            raise AttributeError(name)

        def accept(*args, **kwargs):
            _ipu_only(f"{self._prefix}.{name}" if self._prefix else name)
            return self._owner if self._prefix == "" else self

        return accept


class _Training:
    """Options.Training: gradientAccumulation, accumulationAndReplicationReductionType."""

    def __init__(self, owner):
        self._owner = owner
        self.gradient_accumulation = 1
        self.reduction = ReductionType.Mean  # PopTorch's default

    def gradientAccumulation(self, gradient_accumulation):  # noqa: N802
        n = gradient_accumulation
        if not isinstance(n, int) or n < 1:
            raise _graft.Error(f"Options.Training.gradientAccumulation: expected an integer >= 1, got {n!r}")
        self.gradient_accumulation = n
        return self._owner

    def accumulationAndReplicationReductionType(self, reduction):
        if isinstance(reduction, str):
            reduction = {"sum": ReductionType.Sum, "mean": ReductionType.Mean}.get(reduction.lower(), reduction)
        if int(reduction) not in (ReductionType.Sum, ReductionType.Mean):
            raise _graft.Error("Options.Training.accumulationAndReplicationReductionType: expected "
                               f"ReductionType.Sum or ReductionType.Mean, got {reduction!r}")
        self.reduction = ReductionType(int(reduction))
        return self._owner

    def setMeanAccumulationAndReplicationReductionStrategy(self, strategy):
        _ipu_only("Training.setMeanAccumulationAndReplicationReductionStrategy")
        return self._owner

    def __getattr__(self, name):
        if name.startswith("_"):
            raise AttributeError(name)
        return _Accepting("Training", self._owner).__getattr__(name)


class _Precision(_Accepting):
    """Options.Precision: graft computes in the model's own types; the IPU's half-precision and
    partials settings are accepted (one warning each)."""

    def __init__(self, owner):
        super().__init__("Precision", owner)


class _Popart:
    """Options._Popart.set(name, value): PopART session options, passed to graft's SessionOptions
    where graft has them, otherwise accepted with a warning."""

    def __init__(self, owner):
        self._owner = owner
        self.options = {}

    def set(self, key, value):
        self.options[key] = value
        return self._owner

    def setPatterns(self, *args, **kwargs):
        _ipu_only("_Popart.setPatterns")
        return self._owner

    def __getattr__(self, name):
        if name.startswith("_"):
            raise AttributeError(name)
        return _Accepting("_Popart", self._owner).__getattr__(name)


class _Distributed:
    """Options.Distributed: ``configureProcessId(process_id, num_processes)`` makes the
    DataLoader give this process its share of the dataset. graft.torch runs replicas in one
    process (replicationFactor) and does not join processes into one training: their models are
    not synchronised, which the first call says in a warning. Other settings are accepted with
    one warning each."""

    def __init__(self, owner):
        self._owner = owner
        self.processId = 0  # noqa: N815
        self.numProcesses = 1  # noqa: N815

    def configureProcessId(self, process_id, num_processes):  # noqa: N802
        if not isinstance(num_processes, int) or num_processes < 1 or not 0 <= process_id < num_processes:
            raise _graft.Error(f"Options.Distributed.configureProcessId({process_id!r}, {num_processes!r}): expected "
                               "0 <= process_id < num_processes")
        self.processId = int(process_id)  # noqa: N815
        self.numProcesses = int(num_processes)  # noqa: N815
        if num_processes > 1 and "Distributed.configureProcessId" not in _warned:
            _warned.add("Distributed.configureProcessId")
            warnings.warn("poptorch option 'Distributed.configureProcessId': graft.torch gives this process its share "
                          "of the DataLoader's samples, but does not synchronise the models of several processes "
                          "(use replicationFactor for replicas in one process)", UserWarning, stacklevel=2)
        return self._owner

    def __getattr__(self, name):
        if name.startswith("_"):
            raise AttributeError(name)
        return _Accepting("Distributed", self._owner).__getattr__(name)


class Options:
    """PopTorch's Options: ``opts.deviceIterations(4).Training.gradientAccumulation(2)``.

    Meaningful here: deviceIterations, replicationFactor (graft's in-process replicas),
    Training.gradientAccumulation, Training.accumulationAndReplicationReductionType,
    outputMode / anchorMode, randomSeed, enableExecutableCaching, logDir and the execution strategy
    (setExecutionStrategy: PipelinedExecution / ShardedExecution). Every other PopTorch setting
    (Precision, TensorLocations, Jit, Distributed, IPU selection, memory proportions, ...) is
    accepted with one warning per name."""

    def __init__(self):
        self.device_iterations = 1
        self.replication_factor = 1
        self.output_mode = OutputMode.Default
        self.output_return_period = 1
        self.random_seed = None
        self.cache_path = None
        self.log_dir = None
        self.execution_strategy = None
        self.relax_optimizer_checks = False
        self.Training = _Training(self)
        self.Precision = _Precision(self)
        self._Popart = _Popart(self)
        self.TensorLocations = _Accepting("TensorLocations", self)
        self.Jit = _Accepting("Jit", self)
        self.Distributed = _Distributed(self)

    # -- what graft honours -----------------------------------------------------------------------
    def deviceIterations(self, device_iterations):  # noqa: N802
        n = device_iterations
        if not isinstance(n, int) or n < 1:
            raise _graft.Error(f"Options.deviceIterations: expected an integer >= 1, got {n!r}")
        self.device_iterations = n
        return self

    def replicationFactor(self, replication_factor):  # noqa: N802
        n = replication_factor
        if not isinstance(n, int) or n < 1:
            raise _graft.Error(f"Options.replicationFactor: expected an integer >= 1, got {n!r}")
        self.replication_factor = n
        return self

    def outputMode(self, output_mode, output_return_period=None):  # noqa: N802
        mode = output_mode
        if isinstance(mode, str):
            mode = OutputMode[mode]
        self.output_mode = OutputMode(int(mode))
        if self.output_mode == OutputMode.EveryN:
            if not output_return_period or output_return_period < 1:
                raise _graft.Error("Options.outputMode(EveryN) needs output_return_period >= 1")
            self.output_return_period = int(output_return_period)
        # Other modes ignore output_return_period, as in PopTorch.
        return self

    def anchorMode(self, anchor_mode, anchor_return_period=None):  # noqa: N802
        return self.outputMode(anchor_mode, anchor_return_period)

    def randomSeed(self, random_seed):  # noqa: N802
        self.random_seed = int(random_seed)
        return self

    def enableExecutableCaching(self, path):
        # graft compiles in seconds and keeps compiled sessions per input signature in memory;
        # the path is recorded (and created) so scripts that read it back keep working.
        self.cache_path = path
        if path:
            os.makedirs(path, exist_ok=True)
        return self

    def logDir(self, path):
        self.log_dir = path
        return self

    def setExecutionStrategy(self, strategy):
        from ._parallel import PipelinedExecution, ShardedExecution  # noqa: PLC0415

        if not isinstance(strategy, (PipelinedExecution, ShardedExecution)):
            raise _graft.Error("Options.setExecutionStrategy: expected PipelinedExecution or ShardedExecution, "
                               f"got {type(strategy).__name__}")
        self.execution_strategy = strategy
        return self

    def relaxOptimizerAttributesChecks(self, relax=True):  # noqa: N802
        """No warning about attributes added to the optimizer after the model was compiled."""
        self.relax_optimizer_checks = bool(relax)
        return self

    def useIpuModel(self, use):
        # graft runs on the CPU whatever this says.
        return self

    def loadFromFile(self, filepath):
        """PopTorch's option file: one ``name(value)``-free line per option, e.g. ``deviceIterations(2)``
        is written ``deviceIterations 2``; names with dots reach the sub-groups."""
        with open(filepath, encoding="utf-8") as f:
            for line in f:
                line = line.strip()
                if not line or line.startswith("#"):
                    continue
                name, _, value = line.partition(" ")
                target = self
                for part in name.split(".")[:-1]:
                    target = getattr(target, part)
                getattr(target, name.split(".")[-1])(eval(value, {}, {}) if value else None)  # noqa: S307
        return self

    def clone(self):
        import copy  # noqa: PLC0415

        return copy.deepcopy(self)

    def toDict(self):
        return {"device_iterations": self.device_iterations, "replication_factor": self.replication_factor,
                "gradient_accumulation": self.Training.gradient_accumulation,
                "output_mode": self.output_mode.name, "random_seed": self.random_seed}

    @property
    def _execution_strategy(self):
        """The strategy in effect: PopTorch's default is PipelinedExecution(AutoStage.SameAsIpu)."""
        from ._parallel import AutoStage, PipelinedExecution  # noqa: PLC0415

        return self.execution_strategy or PipelinedExecution(AutoStage.SameAsIpu)

    @property
    def defaultOutputMode(self):
        return self.output_mode == OutputMode.Default

    def __getattr__(self, name):
        # Any other PopTorch option (setAvailableMemoryProportion, autoRoundNumIPUs, useIpuId,
        # enableSyntheticData, connectionType, syncPattern, ...): accepted, one warning.
        if name.startswith("_"):
            raise AttributeError(name)
        return _Accepting("", self).__getattr__(name)

    # -- derived ----------------------------------------------------------------------------------
    def _combined(self, training):
        acc = self.Training.gradient_accumulation if training else 1
        return self.device_iterations * acc * self.replication_factor

    def __repr__(self):
        return f"poptorch.Options({self.toDict()})"
