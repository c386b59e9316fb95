"""Sessions: PopART's InferenceSession and TrainingSession (both on _SessionBase)."""
import os

import numpy as np

from . import _graft
from .options import SessionOptions
from .patterns import Patterns


def _model_argument(fnModel):
    """ONNX bytes, or a path, from what PopART programs pass as fnModel."""
    if hasattr(fnModel, "SerializeToString"):  # an onnx.ModelProto
        return fnModel.SerializeToString()
    if isinstance(fnModel, os.PathLike):
        return os.fspath(fnModel)
    if isinstance(fnModel, (bytes, bytearray, memoryview)):
        return bytes(fnModel)
    if isinstance(fnModel, str):
        return fnModel
    raise _graft.Error(f"fnModel must be ONNX model bytes or a path to an ONNX file, got {type(fnModel).__name__}")


def _check_type(value, cls, name):
    if not isinstance(value, cls):
        raise _graft.Error(f"{name} must be a graft.{cls.__name__.lstrip('_')}, got {type(value).__name__}")


def _patterns_core(patterns):
    if patterns is None:
        return _graft._PatternsCore(_graft.PatternsLevel.Default)
    if isinstance(patterns, Patterns):
        return patterns._core()
    if isinstance(patterns, _graft.PatternsLevel):
        return _graft._PatternsCore(patterns)
    if isinstance(patterns, (list, tuple)):
        return _graft._PatternsCore(list(patterns))
    raise _graft.Error(f"patterns must be a graft.Patterns, got {type(patterns).__name__}")


class _SessionBase:
    """What every session kind adds in Python to its C++ core (PopART's session.py methods)."""

    @property
    def dataFlow(self):
        """The DataFlow the session was created with."""
        return self._getDataFlow()

    @property
    def replicationFactor(self):
        opts = self._options
        return opts.replicatedGraphCount if opts.enableReplicatedGraphs else 1

    @property
    def accumulationFactor(self):
        opts = self._options
        return opts.accumulationFactor if opts.enableGradientAccumulation else 1

    def _serializeIr(self, format=None):
        """The compiled graph as JSON in PopART's layout ({"maingraph": [ops]}); graft's op types
        are graft's (its passes, not PopART's patterns, shaped the graph)."""
        from .popart_names import IrSerializationFormat

        if format not in (None, IrSerializationFormat.JSON):
            raise _graft.Error(f"_serializeIr: only IrSerializationFormat.JSON is supported, got {format!r}")
        return self._serializedIr()

    def getSerializedGraph(self):
        """The compiled graph as PopART-layout JSON bytes (see _serializeIr)."""
        return self._serializedIr().encode()

    def setRandomSeed(self, seedValue):
        """Seeds the random ops (dropout, RandomUniform, ...) that have no seed attribute: the same
        seed gives the same values. graft's seed is process-wide: it applies to every session."""
        if int(seedValue) < 0:
            raise _graft.Error(f"setRandomSeed: the seed must be non-negative, got {seedValue}")
        _graft._setRandomSeed(int(seedValue))
        # Training dropout draws from the session's seed state [seed, step] (passes/training_mode).
        seed_state = "randomSeed___"
        try:
            self.getInfo(seed_state)
        except _graft.Error:
            return
        self.writeWeights(_graft.PyWeightsIO({seed_state: np.array([int(seedValue), 0], np.int64)}))

    def getRandomSeed(self):
        """The seed last given to setRandomSeed."""
        return _graft._randomSeed()

    def prepareDevice(self, loadEngine=True, err=None):
        """Compiles the model for its device (PopART's loadEngine and err arguments are accepted)."""
        super().prepareDevice()

    def loadEngineAndConnectStreams(self):
        """PopART loads the compiled engine separately; graft's prepareDevice already did."""

    def initAnchorArrays(self):
        """One zeroed numpy array per anchor, shaped as PopART shapes them: ``[batchesPerStep, ...]``
        for All, ``[batchesPerStep // N, ...]`` for EveryN(N), the tensor's shape for Final and Sum
        (the leading dimension only when it is > 1). String anchors get object arrays.

        Anchors whose shape is not known before the run (a shape that depends on the data, as
        NonZero's and Unique's; symbolic dimensions no input shape fixes yet; sequences and
        optionals) get ``None``: the run replaces it with the result (an array, a list of arrays
        for a sequence, None for an absent optional; several results of one step stacked, or a
        list when their shapes differ)."""
        self.checkAnchorArraysFit()  # graft.Error naming the anchor, before numpy tries to allocate
        return {a: (np.zeros(self.anchorArrayShape(a), dtype=self.anchorDtype(a)) if self.anchorIsFixed(a) else None)
                for a in self.dataFlow.anchors()}

    def getSummaryReport(self, resetProfile=True):
        """Kernel times of the runs so far, per op type or, with SessionOptions.profileByNode, per
        node (needs SessionOptions.enableProfiling)."""
        rows = self.profile()
        if not rows:
            return "no profile: set SessionOptions.enableProfiling = True and run the session"
        lines = [f"{'op type':<24}{'calls':>10}{'seconds':>14}" + ("  node" if rows[0].node else "")]
        lines += [f"{p.opType:<24}{p.calls:>10}{p.seconds:>14.6f}" + (f"  {p.node}" if p.node else "") for p in rows]
        return "\n".join(lines)


def _session_arguments(dataFlow, deviceInfo, inputShapeInfo, userOptions):
    """Checks the arguments every session kind takes; fills PopART's defaults."""
    _check_type(dataFlow, _graft.DataFlow, "dataFlow")
    _check_type(deviceInfo, _graft.DeviceInfo, "deviceInfo")
    if inputShapeInfo is None:
        inputShapeInfo = _graft.InputShapeInfo()
    _check_type(inputShapeInfo, _graft.InputShapeInfo, "inputShapeInfo")
    if userOptions is None:
        userOptions = SessionOptions()
    _check_type(userOptions, _graft._SessionOptionsCore, "userOptions")
    from .options import popart_sharding

    if popart_sharding(userOptions):
        userOptions.shardOptimizerState = True
    return inputShapeInfo, userOptions


class InferenceSession(_SessionBase, _graft._InferenceSessionCore):
    """Runs an ONNX model for inference (PopART's InferenceSession).

    Arguments:
        fnModel: the model: ONNX bytes (``builder.getModelProto()``), a path, or an onnx.ModelProto.
        dataFlow: batches per step and the anchors (tensors to return).
        deviceInfo: from ``graft.DeviceManager()``.
        inputShapeInfo: shapes for inputs whose dimensions the model leaves symbolic.
        patterns: accepted for PopART compatibility (graft's passes replace PopART's patterns).
        userOptions: a SessionOptions.
        name: the session's name.
    """

    def __init__(self, fnModel, dataFlow, deviceInfo, inputShapeInfo=None, patterns=None, userOptions=None,
                 name="inference"):
        inputShapeInfo, userOptions = _session_arguments(dataFlow, deviceInfo, inputShapeInfo, userOptions)
        super().__init__(_model_argument(fnModel), dataFlow, deviceInfo, inputShapeInfo, userOptions,
                         _patterns_core(patterns))
        self._options = userOptions
        self.name = name


class TrainingSession(_SessionBase, _graft._TrainingSessionCore):
    """Trains an ONNX model (PopART's TrainingSession): each ``run`` does the forward pass, the
    backward pass and the optimizer update, compiled together into one step.

    Arguments:
        fnModel: the model: ONNX bytes (``builder.getModelProto()``), a path, or an onnx.ModelProto.
            A checkpoint written by ``modelToHost`` resumes with its optimizer state.
        dataFlow: batches per step and the anchors (any tensor, or ``"Gradient___<weight>"``).
        loss: the id of the scalar loss tensor (e.g. from ``builder.aiGraphcore.nllloss``).
        optimizer: a ``graft.SGD``, ``ConstSGD``, ``Adam`` or ``Adaptive``.
        deviceInfo: from ``graft.DeviceManager()``.
        inputShapeInfo: shapes for inputs whose dimensions the model leaves symbolic.
        patterns: accepted for PopART compatibility (graft's passes replace PopART's patterns).
        userOptions: a SessionOptions (``enableGradientAccumulation``, ``accumulationFactor``, ...).
        name: the session's name.

    Every floating-point initializer the loss depends on is trained (``trainedWeightIds()``).
    """

    def __init__(self, fnModel, dataFlow, loss, optimizer, deviceInfo, inputShapeInfo=None, patterns=None,
                 userOptions=None, name="training"):
        inputShapeInfo, userOptions = _session_arguments(dataFlow, deviceInfo, inputShapeInfo, userOptions)
        if not isinstance(loss, str):
            raise _graft.Error(f"loss must be the id (str) of the loss tensor, got {type(loss).__name__}")
        _check_type(optimizer, _graft.Optimizer, "optimizer")
        super().__init__(_model_argument(fnModel), dataFlow, loss, optimizer, deviceInfo, inputShapeInfo, userOptions,
                         _patterns_core(patterns))
        self._options = userOptions
        self.name = name

    def updateOptimizerFromHost(self, optimizer):
        """Uses ``optimizer``'s values of the non-constant hyper-parameters from the next run on,
        without recompiling. It must be the same kind of optimizer (and mode) as the session's, with
        the same constant values."""
        _check_type(optimizer, _graft.Optimizer, "optimizer")
        super().updateOptimizerFromHost(optimizer)
