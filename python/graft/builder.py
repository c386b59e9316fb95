"""graft.Builder: PopART's Builder, building an ONNX model op by op."""
import contextlib
import os

import numpy as np

from . import _graft
from .opsets import AiGraftOpset1, debug_name, opset_class

#: The ai.onnx opset ``builder.aiOnnx`` uses when nothing chose one (PopART's default).
defaultAiOnnxOpset = 10
#: The only ai.graphcore opset.
defaultAiGraphcoreOpset = 1
#: The ai.onnx opsets the Builder offers (aiOnnxOpset6 ... aiOnnxOpset28): up to the newest of the
#: ONNX library graft links.
AI_ONNX_OPSETS = tuple(range(6, _graft.newestAiOnnxOpset + 1))

_VGRAPH = "__ipu_number"
_STAGE = "__pipeline_stage"


def _ids(nodeOutputNames):
    if isinstance(nodeOutputNames, str):
        return [nodeOutputNames]
    return list(nodeOutputNames)


class Builder:
    """Builds an ONNX model op by op, as PopART's ``popart.Builder`` does.

    Arguments:
        modelProtoOrFilename: start from an existing model (ONNX bytes or a path). It is converted
            to the newest ai.onnx opset (28) on loading, so new ai.onnx ops use that opset.
        opsets: ``{"ai.onnx": N}`` fixes the ai.onnx opset of ``aiOnnx``; otherwise the first
            ``aiOnnx``/``aiOnnxOpsetN`` used chooses it (``aiOnnx`` alone: opset 10, PopART's
            default). One model uses one ai.onnx opset.
    """

    def __init__(self, modelProtoOrFilename=None, opsets=None, builderCore=None):
        if builderCore is not None:
            self._impl = builderCore
        elif modelProtoOrFilename is None:
            self._impl = _graft._BuilderCore()
        else:
            model = modelProtoOrFilename
            if hasattr(model, "SerializeToString"):
                model = model.SerializeToString()
            elif isinstance(model, os.PathLike):
                model = os.fspath(model)
            self._impl = _graft._BuilderCore(model)
        self._onnx_opsets = {}
        self._chosenOnnxVersion = None
        loaded = self._impl.onnxOpsetVersion()
        if opsets and "ai.onnx" in opsets:
            self._selectOnnxVersion(int(opsets["ai.onnx"]))
        elif loaded:
            self._selectOnnxVersion(loaded)
        if opsets and opsets.get("ai.graphcore", 1) != 1:
            raise _graft.Error(f"ai.graphcore has only opset 1, got {opsets['ai.graphcore']}")
        self.aiGraphcore = opset_class("ai.graphcore", 1)(self, 1)
        self.aiGraphcoreOpset1 = self.aiGraphcore
        #: graft's own ops (domain ai.graft): ``mseloss``.
        self.aiGraft = AiGraftOpset1(self, 1)

    # ---- opsets -------------------------------------------------------------------------------

    def _selectOnnxVersion(self, version):
        if version not in AI_ONNX_OPSETS:
            raise _graft.Error(f"ai.onnx opset {version} is not supported (supported: {AI_ONNX_OPSETS[0]} to "
                               f"{AI_ONNX_OPSETS[-1]})")
        self._chosenOnnxVersion = version

    def _onnxOpset(self, version):
        if self._chosenOnnxVersion is None:
            self._selectOnnxVersion(version)
        elif version != self._chosenOnnxVersion:
            raise _graft.Error(f"Invalid opset 'aiOnnxOpset{version}' selected. Opset for domain ai.onnx already "
                               f"defined as {self._chosenOnnxVersion}")
        if version not in self._onnx_opsets:
            self._onnx_opsets[version] = opset_class("", version)(self, version)
        return self._onnx_opsets[version]

    @property
    def aiOnnx(self):
        """The ai.onnx ops at the model's opset (10 unless chosen otherwise)."""
        return self._onnxOpset(self._chosenOnnxVersion or defaultAiOnnxOpset)

    def __getattr__(self, name):
        if name.startswith("aiOnnxOpset"):
            try:
                version = int(name[len("aiOnnxOpset"):])
            except ValueError:
                raise AttributeError(name) from None
            if version not in AI_ONNX_OPSETS:
                raise AttributeError(f"graft's Builder offers aiOnnxOpset{AI_ONNX_OPSETS[0]} to "
                                     f"aiOnnxOpset{AI_ONNX_OPSETS[-1]}, not {name}")
            return self._onnxOpset(version)
        if name.startswith("__") or name == "_impl":
            raise AttributeError(name)
        return getattr(self._impl, name)

    # ---- tensors ------------------------------------------------------------------------------

    def addInputTensor(self, *args, **kwargs):
        """A model input: ``addInputTensor(TensorInfo, debugContext="")`` or
        ``addInputTensor(dataType, shape, debugContext="")``. PopART's InputSettings argument is
        accepted and ignored."""
        from . import TensorInfo  # noqa: the package imports this module

        args = list(args)
        info = kwargs.pop("tensorInfo", None)
        if info is None and args and isinstance(args[0], _graft._TensorInfoCore):
            info = args.pop(0)
        if info is None:
            dtype = kwargs.pop("dataType", None)
            if dtype is None:
                if not args:
                    raise TypeError("addInputTensor needs a TensorInfo, or a data type and a shape")
                dtype = args.pop(0)
            shape = kwargs.pop("shape", None)
            if shape is None:
                if not args:
                    raise TypeError("addInputTensor(dataType, shape, debugContext=''): the shape is missing")
                shape = args.pop(0)
            info = TensorInfo(dtype, shape)
        kwargs.pop("settings", None)
        if args and not isinstance(args[0], str) and not hasattr(args[0], "name"):
            args.pop(0)  # an InputSettings
        name = debug_name(*(args[:1] or [kwargs.pop("debugContext", None)]), kwargs.pop("debugPrefix", None))
        if kwargs:
            raise TypeError(f"addInputTensor got unexpected keyword arguments {sorted(kwargs)}")
        return self._impl.addInputTensor(info, name)

    def addInitializedInputTensor(self, initVal, *args, debugContext=None, debugPrefix=None, **kwargs):
        """A weight initialised to ``initVal`` (copied). PopART's VariableSettings argument is
        accepted and ignored."""
        kwargs.pop("variableSettings", None)
        if kwargs:
            raise TypeError(f"addInitializedInputTensor got unexpected keyword arguments {sorted(kwargs)}")
        args = [a for a in args if isinstance(a, str) or hasattr(a, "name")]
        name = debug_name(args[0] if args else debugContext, debugPrefix)
        # asarray(order="C") keeps a 0-d value a scalar (ascontiguousarray would make it 1-d).
        return self._impl.addInitializedInputTensor(np.asarray(initVal, order="C"), name)

    def reshape_const(self, aiOnnx, args, shape, debugContext=""):
        """Reshape ``args[0]`` to a constant ``shape``."""
        new_shape = aiOnnx.constant(np.array(shape).astype(np.int64), debug_name(debugContext) + "_const")
        return aiOnnx.reshape([args[0], new_shape], debugContext)

    def customOp(self, opName, opVersion, domain, inputs, attributes, numOutputs=1, name=""):
        """An op of any domain; returns the list of its output ids."""
        domain = "" if domain == "ai.onnx" else domain
        version = self._chosenOnnxVersion or defaultAiOnnxOpset if domain == "" else opVersion
        if domain == "":
            self._onnxOpset(version)
        return self._impl.addOp(opName, domain, version, list(inputs), dict(attributes), numOutputs, name)

    def createSubgraphBuilder(self):
        """A builder for a subgraph that ``aiGraphcore.call`` runs (see graft/subgraph.py)."""
        from .subgraph import SubgraphCore

        sub = Builder(builderCore=SubgraphCore(self._impl))
        sub._chosenOnnxVersion = self._chosenOnnxVersion or defaultAiOnnxOpset
        sub._parentBuilder = self  # constants of the enclosing builders (loop trip counts)
        return sub

    def addUntypedInputTensor(self, debugContext=""):
        """A subgraph input whose type comes from the caller's argument."""
        return self._impl.addInputTensor(None, debug_name(debugContext))

    def addInputTensorFromParentGraph(self, tensorId):
        """Makes the parent graph's tensor ``tensorId`` an input of this subgraph, under its own name."""
        from .subgraph import SubgraphCore

        if not isinstance(self._impl, SubgraphCore):
            raise _graft.Error("addInputTensorFromParentGraph: only a subgraph builder has a parent graph")
        self._impl.addInputFromParent(tensorId)

    # ---- annotations --------------------------------------------------------------------------

    @contextlib.contextmanager
    def _scope(self, attribute, value):
        self._impl.pushAttributeScope(attribute, int(value))
        try:
            yield
        finally:
            self._impl.popAttributeScope(attribute)

    def virtualGraph(self, nodeOutputNames, value=None):
        """``with builder.virtualGraph(1):`` places the ops added inside on virtual device 1;
        ``virtualGraph(ids, 1)`` places the ops producing ``ids``."""
        if value is None and isinstance(nodeOutputNames, (int, np.integer)):
            return self._scope(_VGRAPH, nodeOutputNames)
        for i in _ids(nodeOutputNames):
            self._impl._virtualGraph(i, int(value or 0))
        return None

    def pipelineStage(self, nodeOutputNames, value=None):
        """``with builder.pipelineStage(1):`` or ``pipelineStage(ids, 1)``, like virtualGraph."""
        if value is None and isinstance(nodeOutputNames, (int, np.integer)):
            return self._scope(_STAGE, nodeOutputNames)
        for i in _ids(nodeOutputNames):
            self._impl._pipelineStage(i, int(value or 0))
        return None

    def getVirtualGraph(self, nodeOutputNames=None):
        """The current scoped virtual graph, or the one of the op producing ``nodeOutputNames``."""
        if nodeOutputNames is None:
            v = self._impl.currentAttributeScope(_VGRAPH)
            if v is None:
                raise _graft.Error("getVirtualGraph: no virtualGraph scope is open")
            return v
        return self._impl._getVirtualGraph(_ids(nodeOutputNames)[0])

    def hasVirtualGraph(self):
        return self._impl.currentAttributeScope(_VGRAPH) is not None

    def getPipelineStage(self, nodeOutputNames=None):
        if nodeOutputNames is None:
            v = self._impl.currentAttributeScope(_STAGE)
            if v is None:
                raise _graft.Error("getPipelineStage: no pipelineStage scope is open")
            return v
        return self._impl._getPipelineStage(_ids(nodeOutputNames)[0])

    def hasPipelineStage(self):
        return self._impl.currentAttributeScope(_STAGE) is not None

    @contextlib.contextmanager
    def nameScope(self, name):
        """Ops and tensors added inside get ``name/`` in front of their names."""
        self._impl.pushNameScope(name)
        try:
            yield
        finally:
            self._impl.popNameScope()

    def recomputeOutputInBackwardPass(self, nodeOutputNames, value=None):
        """Recompute these ops' outputs in the backward pass (training)."""
        from . import RecomputeType

        recompute = value is None or value == RecomputeType.Recompute or value is True
        for i in _ids(nodeOutputNames):
            self._impl._recomputeOutputInBackwardPass(i, recompute)

    def getRecomputeOutputInBackwardPass(self, nodeOutputNames):
        return all(self._impl._getRecomputeOutputInBackwardPass(i) for i in _ids(nodeOutputNames))

    def _check_ids(self, nodeOutputNames, what):
        for i in _ids(nodeOutputNames):
            if not self._impl.hasTensor(i):
                raise _graft.Error(f"{what}: unknown tensor '{i}'")

    # IPU placement and code-generation hints: accepted (the tensors must exist) and ignored,
    # since they have no meaning on graft's devices.
    def setAvailableMemoryProportion(self, nodeOutputNames, availableMemoryProportion):
        if not 0.0 < float(availableMemoryProportion) <= 1.0:
            raise _graft.Error(f"setAvailableMemoryProportion: the proportion must be in (0, 1], got "
                               f"{availableMemoryProportion}")
        self._check_ids(nodeOutputNames, "setAvailableMemoryProportion")

    def setPartialsType(self, nodeOutputName, partialsType):
        self._check_ids(nodeOutputName, "setPartialsType")

    def setSerializeMatMul(self, nodeOutputName, mode, factor=0, keep_precision=False):
        self._check_ids(nodeOutputName, "setSerializeMatMul")

    def setEnableConvDithering(self, nodeOutputName, enableConvDithering):
        self._check_ids(nodeOutputName, "setEnableConvDithering")

    def setInplacePreferences(self, nodeOutputName, prefs):
        self._check_ids(nodeOutputName, "setInplacePreferences")

    def excludePatterns(self, nodeOutputName, patternNames):
        self._check_ids(nodeOutputName, "excludePatterns")

    @contextlib.contextmanager
    def _no_scope(self):
        yield

    def outlineAttributes(self, attributes):
        return self._no_scope()

    def schedulePriority(self, value):
        return self._no_scope()

    def executionPhase(self, nodeOutputNames=0, value=None):
        if value is None and isinstance(nodeOutputNames, (int, np.integer)):
            return self._no_scope()
        self._check_ids(nodeOutputNames, "executionPhase")
        return None

    def __repr__(self):
        return (f"<graft.Builder: {len(self._impl.getInputTensorIds())} inputs, "
                f"{len(self._impl.getValueTensorIds())} op outputs>")
