"""graft.SessionOptions: graft's options, plus PopART's option names.

Every field of graft's C++ SessionOptions (include/graft/options.hpp) is a real option. PopART's
options that have no meaning on graft's devices (IPU engine options, tile placement, streaming,
caching, ...) are accepted with a one-time warning per name and have no effect; their values can
be read back. Any other name raises graft.Error with the closest known names.
"""
import difflib
import warnings

from . import _graft

#: PopART SessionOptions names that graft accepts and ignores (they configure IPU hardware,
#: Poplar compilation or PopART's own transformations).
POPART_IGNORED_OPTIONS = frozenset("""
    accumulateOuterFragmentSettings accumulatorTensorLocationSettings
    activationTensorLocationSettings aliasZeroCopy automaticLossScalingSettings autodiffSettings
    batchSerializationSettings bufferingDepthMap cachePath clipNormSettings compileEngine convolutionOptions
    createImplicitPipeliningFwdOnlyProgram customCodeletCompileFlags customCodelets decomposeGradSum
    defaultBufferingDepth defaultPrefetchBufferingDepth delayVarUpdates disableGradAccumulationTensorStreams
    dotChecks dotOpNames enableEngineCaching enableExplicitIR
    enableExplicitMainLoops enableFloatingPointChecks enableFullyConnectedPass enableInplaceAmbiguityChecking
    enableLoadAndOffloadRNGState enableMergeExchange enableNonStableSoftmax enableOutlining
    enableOutliningCopyCostPruning enablePrefetchDatastreams enableRngStateManagement
    enableSerializedMatmuls enableStableNorm enableStochasticRounding enableVariablesCaching engineOptions
    ensureFp32LossScaleTensor executionPhaseSettings experimentalSettings explicitRecomputation
    exportPoplarComputationGraph exportPoplarVertexGraph finalDotOp firstDotOp gclOptions
    groupHostSync groupNormStridedChannelGrouping
    hardwareInstrumentations instrumentWithHardwareCycleCounter kahnTieBreaker lstmOptions matmulOptions
    mergeVarUpdate mergeVarUpdateMemThreshold numIOTiles
    opxAliasChecking opxModifyChecking optimizerStateTensorLocationSettings outlineSequenceBreakCost
    outlineThreshold partialsTypeMatMuls rearrangeAnchorsOnHost rearrangeStreamsOnHost replicatedCollectivesSettings
    reportOptions scheduleNonWeightUpdateGradientConsumersEarly separateCallOpPdfs serializedPoprithmsShiftGraphsDir
    strictOpVersions subgraphCopyingStrategy swapLimitScheduler syntheticDataMode tensorLocationSettingsOverride
    timeLimitScheduler updatableNamedBuffers useHostCopyOps useLoopCandidateCreator virtualGraphSplitRatios
    weightTensorLocationSettings
""".split())

# Ignored options whose value PopART programs update in place (opts.engineOptions["x"] = "y").
_DICT_OPTIONS = frozenset("""
    engineOptions convolutionOptions lstmOptions matmulOptions reportOptions gclOptions
    tensorLocationSettingsOverride bufferingDepthMap
""".split())
_LIST_OPTIONS = frozenset("customCodelets dotChecks hardwareInstrumentations updatableNamedBuffers".split())

_warned = set()


def _warn_ignored(name):
    if name in _warned:
        return
    _warned.add(name)
    if name == "optimizerStateTensorLocationSettings":
        warnings.warn("SessionOptions.optimizerStateTensorLocationSettings: graft honours only "
                      "location.replicatedTensorSharding (as SessionOptions.shardOptimizerState); its other settings "
                      "place tensors in IPU memory and are ignored", stacklevel=3)
        return
    warnings.warn(f"SessionOptions.{name} is a PopART option that does not apply to graft's devices; it is "
                  "accepted and ignored", stacklevel=3)


def popart_sharding(opts):
    """True when PopART's optimizerStateTensorLocationSettings.location.replicatedTensorSharding is On
    (SessionOptions.shardOptimizerState is then set at session creation)."""
    settings = getattr(opts, "_ignored", {}).get("optimizerStateTensorLocationSettings")
    if settings is None:
        return False

    def field(obj, name):
        if isinstance(obj, _IgnoredSettings):
            return obj._values.get(name)
        return getattr(obj, name, None)

    value = field(field(settings, "location"), "replicatedTensorSharding")
    return getattr(value, "name", value) in ("On", 1, True)


class _IgnoredSettings:
    """Stands for a PopART settings object (executionPhaseSettings, ...): takes any attribute."""

    def __init__(self, name):
        object.__setattr__(self, "_name", name)
        object.__setattr__(self, "_values", {})

    def __getattr__(self, key):
        if key.startswith("__"):
            raise AttributeError(key)
        values = object.__getattribute__(self, "_values")
        if key not in values:
            values[key] = _IgnoredSettings(f"{self._name}.{key}")
        return values[key]

    def __setattr__(self, key, value):
        self._values[key] = value

    def __repr__(self):
        return f"<ignored PopART settings {self._name}: {self._values}>"


def graft_option_names():
    """The names of graft's own options."""
    return sorted(k for k in dir(_graft._SessionOptionsCore) if not k.startswith("_"))


class SessionOptions(_graft._SessionOptionsCore):
    """Session options. graft's own fields: enableGradientAccumulation, accumulationFactor,
    accumulationAndReplicationReductionType, virtualGraphMode, enablePipelining, autoRecomputation, enableReplicatedGraphs,
    replicatedGraphCount, meanAccumulationAndReplicationReductionStrategy, enableDistributedReplicatedGraphs,
    globalReplicationFactor, globalReplicaOffset, collectiveTimeoutSeconds, gradientBucketBytes, shardOptimizerState, constantWeights, numThreads, autoThreads, enableProfiling, profileByNode, enableBf16, verifyPasses,
    dumpGraphAfterPass, logDir, timelinePath, pipelineDepth. PopART's other option names are accepted with a warning and
    ignored; unknown names raise graft.Error."""

    def __init__(self, **options):
        super().__init__()
        object.__setattr__(self, "_ignored", {})
        for k, v in options.items():
            setattr(self, k, v)

    def __setattr__(self, name, value):
        if name.startswith("_") or name in _GRAFT_OPTIONS:
            if name in _GRAFT_OPTIONS:
                try:
                    super().__setattr__(name, value)
                except TypeError:
                    current = getattr(self, name)
                    raise _graft.Error(f"SessionOptions.{name} must be of type {type(current).__name__}, got "
                                       f"{type(value).__name__} ({value!r})") from None
            else:
                object.__setattr__(self, name, value)
            return
        if name in POPART_IGNORED_OPTIONS:
            _warn_ignored(name)
            self._ignored[name] = value
            return
        raise _graft.Error(_unknown_message(name))

    def __getattr__(self, name):
        # Only called when normal lookup fails: graft's fields never come here.
        if name.startswith("_"):
            raise AttributeError(name)
        if name in POPART_IGNORED_OPTIONS:
            ignored = self._ignored
            if name not in ignored:
                _warn_ignored(name)
                if name in _DICT_OPTIONS:
                    ignored[name] = {}
                elif name in _LIST_OPTIONS:
                    ignored[name] = []
                else:
                    ignored[name] = _IgnoredSettings(name)
            return ignored[name]
        raise _graft.Error(_unknown_message(name))

    def ignoredOptions(self):
        """The PopART options set on this object that graft ignores, with their values."""
        return dict(self._ignored)

    def __repr__(self):
        fields = ", ".join(f"{k}={getattr(self, k)!r}" for k in graft_option_names())
        return f"SessionOptions({fields})"


_GRAFT_OPTIONS = frozenset(graft_option_names())


def _unknown_message(name):
    known = sorted(_GRAFT_OPTIONS | POPART_IGNORED_OPTIONS)
    close = difflib.get_close_matches(name, known, n=3, cutoff=0.6)
    hint = f"; did you mean {' or '.join(close)}?" if close else ""
    return f"SessionOptions has no option '{name}'{hint} (graft's options: {', '.join(sorted(_GRAFT_OPTIONS))})"
