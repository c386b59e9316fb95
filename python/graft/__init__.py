"""graft: train and run ONNX models on CPUs, with PopART's Python API.

A PopART program runs after replacing ``import popart`` with ``import graft as popart``::

    import graft as popart
    builder = popart.Builder()
    x = builder.addInputTensor(popart.TensorInfo("FLOAT", [2, 3]), "x")
    y = builder.aiOnnx.relu([x])
    builder.addOutputTensor(y)
    session = popart.InferenceSession(
        fnModel=builder.getModelProto(),
        dataFlow=popart.DataFlow(1, {y: popart.AnchorReturnType("All")}),
        deviceInfo=popart.DeviceManager().createCpuDevice())
    session.prepareDevice()
    anchors = session.initAnchorArrays()
    session.run(popart.PyStepIO({x: data}, anchors))

See docs/python-api.md for what is supported and what of PopART is accepted and ignored.
"""
import numpy as _np

from . import _graft
from ._graft import (  # noqa: F401  (re-exported)
    AnchorReturnType,
    AnchorReturnTypeId,
    Adam,
    AdamMode,
    Adaptive,
    AdaptiveMode,
    AttributeKind,
    ClipNormSettings,
    ConstSGD,
    DataFlow,
    DataType,
    DeviceInfo,
    DeviceManager,
    DeviceType,
    Error,
    InputShapeInfo,
    InternalError,
    IStepIO,
    OpSignature,
    Optimizer,
    OptimizerValue,
    OptimizerValueMap,
    MeanReductionStrategy,
    PatternsLevel,
    PyStepIO,
    PyStepIOCallback,
    PyWeightsIO,
    RecomputationType,
    ReductionType,
    SGD,
    SGDAccumulatorAndMomentum,
    VirtualGraphMode,
    WeightDecayMode,
    builderOpSignatures,
    findOpSignature,
)
from .builder import AI_ONNX_OPSETS, Builder, defaultAiGraphcoreOpset, defaultAiOnnxOpset  # noqa: F401
from .op_catalog import OpDefinition, OperatorIdentifier, getSupportedOperations, getSupportedOperationsDefinition  # noqa: F401
from .options import POPART_IGNORED_OPTIONS, SessionOptions  # noqa: F401
from .patterns import Patterns  # noqa: F401
from .popart_names import *  # noqa: F401,F403  (PopART's enums and settings classes)
from .session import InferenceSession, TrainingSession  # noqa: F401

__version__ = "0.1.0"
Error.__module__ = "graft"
InternalError.__module__ = "graft"  # a bug in graft; not a graft.Error

#: PopART's exception class names; all are graft.Error.
popart_exception = Error
poplar_exception = Error
OutOfMemoryException = Error


def versionString():
    return __version__


class TensorInfo(_graft._TensorInfoCore):
    """Type and shape of a tensor: ``TensorInfo("FLOAT", [2, 3])``, ``TensorInfo(numpy.float32, [2, 3])``
    or ``TensorInfo(array)``. Dimensions may be names (``"batch"``) or None when not known."""

    def __init__(self, *args):
        if len(args) == 1 and isinstance(args[0], _np.ndarray):
            args = (args[0].dtype, list(args[0].shape))
        if len(args) != 2:
            raise TypeError(f"TensorInfo(dataType, shape) or TensorInfo(numpy array), got {len(args)} arguments")
        dtype, shape = args
        if isinstance(shape, (int, _np.integer)):
            raise TypeError("TensorInfo: the shape must be a list of dimensions, got an integer")
        super().__init__(dtype, list(shape))


class DebugContext:
    """PopART's DebugContext: here just a name for the op or tensor."""

    def __init__(self, name="", parent=None):
        self.name = f"{parent.name}/{name}" if isinstance(parent, DebugContext) and parent.name else name

    def __str__(self):
        return self.name


class InputSettings:
    """PopART's per-input streaming settings: accepted and ignored."""

    def __init__(self, *args, **kwargs):
        pass


class VariableSettings:
    """PopART's per-weight replica settings: accepted and ignored."""

    def __init__(self, *args, **kwargs):
        pass


class _Logger:
    def __init__(self, name):
        self.name = name

    def setLevel(self, level):
        """TRACE, DEBUG, INFO, WARN, ERR, CRITICAL or OFF (one level for all of graft)."""
        _graft._setLogLevel(str(level))


def getLogger(name="all"):
    """PopART's logger: ``graft.getLogger().setLevel("INFO")`` sets graft's log level."""
    return _Logger(name)


def supportedOps(domain="ai.onnx", opsetVersion=_graft.newestAiOnnxOpset):
    """The op types graft's Builder offers in a domain (every op of graft's registry)."""
    return [s.type for s in builderOpSignatures(domain, opsetVersion)]


# PopART's reserved tensor-name prefixes, for programs that build tensor names from them.
def reservedGradientPrefix():
    return "Gradient___"


def reservedUpdatedVarPrefix():
    return "UpdatedVar___"


def reservedAccumPrefix():
    return "Accum___"


def reservedStepPrefix():
    return "Step___"


def reservedLossScalingPrefix():
    return "lossScaling_"


def __getattr__(name):
    raise AttributeError(f"module 'graft' has no attribute '{name}': graft implements PopART's inference and "
                         "training API (see docs/python-api.md for what is supported)")
