"""inferenceModel / trainingModel: a torch module captured, compiled by graft's sessions, and run
with PopTorch's batching and weight semantics."""
import copyreg
import os
import weakref

import numpy as np
import torch
from torch.utils import _pytree as pytree

import graft

from .. import _graft
from . import _capture, _log, _parallel, optim as _optim
from ._options import Options, OutputMode, ReductionType

_NP = {torch.float32: np.float32, torch.float64: np.float64, torch.float16: np.float16, torch.int64: np.int64,
       torch.int32: np.int32, torch.int16: np.int16, torch.int8: np.int8, torch.uint8: np.uint8, torch.bool: np.bool_}


def _np(t):
    """A C-contiguous numpy copy of a torch tensor. A copy, not a view: graft's step IO holds its
    arrays, and a numpy view would keep the torch tensor alive from outside torch's bookkeeping
    (torch asserts on such tensors when it tears them down)."""
    t = t.detach()
    if t.dtype == torch.bfloat16:
        raise _graft.Error("graft.torch: bfloat16 inputs are not supported; use float32 or float16")
    return np.array(t.cpu().numpy(), copy=True, order="C")


def _contig(a):
    """``a`` C-contiguous, keeping its rank (np.ascontiguousarray turns a 0-d array into [1])."""
    return a if a.flags.c_contiguous else np.copy(a, order="C")


# ---- lazy weights: reading a parameter on the host brings the trained values back first ---------

_LAZY_CLASSES = {}
# load_state_dict too: the trained values come back first, so that a later copy cannot overwrite
# what is loaded.
_SYNC_METHODS = ("state_dict", "load_state_dict", "named_parameters", "parameters", "named_buffers", "buffers",
                 "__getstate__")


def _sync_module(module):
    for ex in list(module.__dict__.get("_graft_executors", ())):
        ex._sync_host_if_stale()  # noqa: SLF001


def _lazy_class(cls):
    if cls in _LAZY_CLASSES or getattr(cls, "_graft_lazy_base", None) is not None:
        return _LAZY_CLASSES.get(cls, cls)

    def __getattr__(self, name):  # noqa: N807
        d = self.__dict__
        if "_graft_executors" in d and (name in d.get("_parameters", {}) or name in d.get("_buffers", {})):
            _sync_module(self)
        return cls.__getattr__(self, name)

    ns = {"__getattr__": __getattr__, "_graft_lazy_base": cls, "__module__": cls.__module__,
          "__qualname__": cls.__qualname__}
    for m in _SYNC_METHODS:
        base = getattr(cls, m, None)
        if base is None:
            continue

        def make(base):
            def method(self, *args, **kwargs):
                _sync_tree(self)
                return base(self, *args, **kwargs)

            return method

        ns[m] = make(base)
    ns["__reduce_ex__"] = _reduce_as(cls)
    new = type(cls.__name__, (cls,), ns)
    _LAZY_CLASSES[cls] = new
    return new


def _reduce_as(cls):
    """__reduce_ex__ that pickles (and deep-copies) the object as an instance of ``cls`` (the
    user's class), not of the lazy subclass, which pickle could not find by name, and without
    the wrapper's bookkeeping. The reconstructor is the standard library's, so loading the pickle
    does not need graft."""

    def __reduce_ex__(self, protocol):  # noqa: N807,ARG001
        if isinstance(self, torch.nn.Module):
            _sync_module(self)
        else:
            _sync_optimizer(self)
        state = self.__getstate__()
        state = {k: v for k, v in state.items() if k != "_graft_executors"} if isinstance(state, dict) else state
        return (copyreg._reconstructor, (cls, object, None), state)  # noqa: SLF001

    return __reduce_ex__


def _sync_optimizer(opt):
    for ex in list(opt.__dict__.get("_graft_executors", ())):
        ex._sync_host_if_stale()  # noqa: SLF001


def _lazy_optimizer_class(cls):
    """A subclass of the optimizer's class whose ``state`` and ``state_dict()`` first bring the
    optimizer state back from the session (as the module's weights are)."""
    if getattr(cls, "_graft_lazy_base", None) is not None:
        return cls
    if cls in _LAZY_CLASSES:
        return _LAZY_CLASSES[cls]

    def get_state(self):
        _sync_optimizer(self)
        return self.__dict__["state"]

    def set_state(self, value):
        self.__dict__["state"] = value

    def state_dict(self, *args, **kwargs):
        _sync_optimizer(self)
        return cls.state_dict(self, *args, **kwargs)

    def load_state_dict(self, *args, **kwargs):
        _sync_optimizer(self)  # the session's state first: a later copy must not overwrite what is loaded
        return cls.load_state_dict(self, *args, **kwargs)

    ns = {"state": property(get_state, set_state), "state_dict": state_dict, "load_state_dict": load_state_dict,
          "_graft_lazy_base": cls,
          "__module__": cls.__module__, "__qualname__": cls.__qualname__, "__reduce_ex__": _reduce_as(cls)}
    new = type(cls.__name__, (cls,), ns)
    _LAZY_CLASSES[cls] = new
    return new


def _attach_lazy_optimizer(opt, executor):
    execs = opt.__dict__.setdefault("_graft_executors", weakref.WeakSet())
    execs.add(executor)
    opt.__class__ = _lazy_optimizer_class(opt.__class__)


def _detach_lazy_optimizer(opt, executor):
    execs = opt.__dict__.get("_graft_executors")
    if execs is None:
        return
    execs.discard(executor)
    if not execs:
        del opt.__dict__["_graft_executors"]
        base = getattr(opt.__class__, "_graft_lazy_base", None)
        if base is not None:
            opt.__class__ = base


def _sync_tree(module):
    for m in torch.nn.Module.modules(module):
        _sync_module(m)


def _attach_lazy(model, executor):
    for m in torch.nn.Module.modules(model):
        execs = m.__dict__.setdefault("_graft_executors", weakref.WeakSet())
        execs.add(executor)
        m.__class__ = _lazy_class(m.__class__)


def _detach_lazy(model, executor):
    for m in torch.nn.Module.modules(model):
        execs = m.__dict__.get("_graft_executors")
        if execs is not None:
            execs.discard(executor)
            if not execs:
                del m.__dict__["_graft_executors"]
                base = getattr(m.__class__, "_graft_lazy_base", None)
                if base is not None:
                    m.__class__ = base


# ---- the executor ---------------------------------------------------------------------------------


class _Compiled:
    """A session for one capture (one input signature and train/eval mode)."""

    def __init__(self, cap, session, anchors, n_ipus):
        self.cap = cap
        self.session = session
        self.anchors = anchors
        self.n_ipus = n_ipus
        self.versions = {}  # state key -> (id, _version) last written to or read from the session
        # ONNX input name -> static dims as the graph declares them (None: symbolic)
        self.input_shapes = {}
        for i in cap.onnx.graph.input:
            dims = i.type.tensor_type.shape.dim
            if all(d.HasField("dim_value") for d in dims):
                self.input_shapes[i.name] = [d.dim_value for d in dims]


class PoplarExecutor:
    """What inferenceModel and trainingModel return (PopTorch's class name): call it like the
    module. Each call runs deviceIterations x gradientAccumulation x replicationFactor batches."""

    def __init__(self, model, options, training, optimizer=None):
        if not isinstance(model, torch.nn.Module):
            raise _graft.Error(f"poptorch: expected a torch.nn.Module, got {type(model).__name__}")
        options = options if options is not None else Options()
        if not isinstance(options, Options):
            raise _graft.Error(f"poptorch: options must be a poptorch.Options, got {type(options).__name__}")
        if not training and options.Training.gradient_accumulation != 1:
            hint = ""
            if options.execution_strategy is None or options.execution_strategy.pipelined:
                hint = (" Use poptorch.Options().deviceIterations to process a sufficient number of batches each run "
                        "for pipelined execution instead.")
            raise _graft.Error("You must set poptorch.Options().Training.gradientAccumulation to 1 or leave it as its "
                               "default value (1) when running a poptorch.inferenceModel()." + hint)
        self._model = model
        self._user_model = model
        self._options = options
        self._training = training
        self._compiled = {}
        self._current = None
        self._stale = False
        self._attached = True
        self._destroyed = False
        self._optimizer = None
        self._opt_sig = None
        self._opt_state_sig = None  # the torch optimizer state last written to or read from a session
        self._host_steps = {}  # id(parameter) -> optimizer steps, for state graft does not count
        self._calls = 0
        self._example = None  # (args, kwargs) of the last capture, tensors zeroed (for save)
        if training:
            if optimizer is None:
                optimizer = torch.optim.SGD(model.parameters(), lr=0.01)  # PopTorch's default
            self._check_optimizer(optimizer)
            self._optimizer = optimizer
            _attach_lazy_optimizer(optimizer, self)
            # The module's modes are left as they are (PopTorch does not call train() either): a
            # submodule in eval() inside a trainingModel, a frozen BatchNorm say, stays in eval.
        _attach_lazy(model, self)

    # -- PopTorch's API -------------------------------------------------------------------------
    @property
    def model(self):
        return self._model

    @property
    def options(self):
        return self._options

    def isTrainingModel(self):  # noqa: N802
        return self._training

    def __call__(self, *args, **kwargs):
        if self._destroyed:
            raise _graft.Error("poptorch: this model was destroyed")
        if not self._attached:
            self.attachToDevice()
        compiled, feeds, n = self._prepare(args, kwargs)
        self._upload_changed(compiled)
        if self._training:
            self._update_optimizer(compiled)
            self._state_to_device(compiled)
        anchors = compiled.session.initAnchorArrays()
        compiled.session.run(graft.PyStepIO(feeds, anchors))
        if self._training:
            self._stale = True
            self._count_batches(n)
            for p, _, _ in self._trained_params(compiled):
                self._host_steps[id(p)] = self._host_steps.get(id(p), 0) + self._options.device_iterations
        self._calls += 1
        return self._outputs(compiled, anchors, n)

    def compile(self, *args, **kwargs):
        """Captures and compiles for these inputs without running."""
        self._prepare(args, kwargs)

    def copyWeightsToHost(self):  # noqa: N802
        """Copies the session's weights (and BatchNorm running statistics) into the torch module,
        and a trainingModel's optimizer state into the torch optimizer's ``state``."""
        if self._current is None:
            return
        self._stale = False  # before touching the module: its accessors call back here
        c = self._current
        if self._training:
            self._state_to_host(c)
        keys = dict(c.cap.weights)
        if not keys:
            return
        state = _capture._named_state(self._model)  # noqa: SLF001
        arrays = {wid: np.zeros(tuple(state[k].shape), _NP[state[k].dtype]) for wid, k in keys.items()}
        c.session.weightsToHost()
        c.session.readWeights(graft.PyWeightsIO(arrays))
        with torch.no_grad():
            for wid, k in keys.items():
                t = state[k]
                t.copy_(torch.from_numpy(arrays[wid]).reshape(t.shape))
                c.versions[k] = (id(t), t._version)  # noqa: SLF001

    def save(self, filename, export_model=True, save_rng_state=True):  # noqa: ARG002
        """Writes a checkpoint ``poptorch.load`` turns back into a wrapper: the module with its
        current weights, the options, the optimizer with its state, and example inputs of the
        last compiled signature (graft keeps no compiled executable: load compiles again)."""
        if not export_model:
            raise _graft.Error("poptorch: save(export_model=False) would write a compiled executable alone, which "
                               "graft does not have; save with export_model=True")
        self._sync_host_if_stale()
        torch.save({"graft.torch": 1, "training": self._training, "model": self._user_model,
                    "options": self._options, "optimizer": self._optimizer, "example": self._example}, filename)

    def compileAndExport(self, filename, *args, export_model=True, **kwargs):  # noqa: N802
        """Compiles for these inputs, then ``save(filename)``."""
        if args or kwargs:
            self.compile(*args, **kwargs)
        self.save(filename, export_model=export_model)

    def copyWeightsToDevice(self):  # noqa: N802
        """Writes the torch module's weights into the session."""
        if self._current is not None:
            self._write_weights(self._current, force=True)

    def setOptimizer(self, optimizer):  # noqa: N802
        """New hyper-parameters from the next call on, without recompiling (graft's
        updateOptimizerFromHost): the same kind of optimizer over the same parameters."""
        if not self._training:
            raise _graft.Error("poptorch: setOptimizer is for trainingModel")
        self._check_optimizer(optimizer)
        if optimizer is not self._optimizer:
            self._sync_host_if_stale()  # the old optimizer gets the state it had
            _detach_lazy_optimizer(self._optimizer, self)
            _attach_lazy_optimizer(optimizer, self)
        self._optimizer = optimizer
        if self._current is not None:
            self._update_optimizer(self._current)  # only where a hyper-parameter changed

    def detachFromDevice(self):  # noqa: N802
        if not self._attached:
            raise _graft.Error("poptorch: the model is not attached to a device")
        self._sync_host_if_stale()
        self._attached = False

    def attachToDevice(self):  # noqa: N802
        if self._attached and self._current is not None:
            raise _graft.Error("poptorch: the model is already attached to a device")
        self._attached = True
        if self._current is not None:
            self._write_weights(self._current, force=True)

    def isAttached(self):  # noqa: N802
        return self._attached

    def isCompiled(self):  # noqa: N802
        return self._current is not None

    def destroy(self):
        """Copies the weights back and frees the sessions."""
        if self._destroyed:
            return
        self._sync_host_if_stale()
        self._compiled.clear()
        self._current = None
        self._destroyed = True
        _detach_lazy(self._model, self)
        if self._optimizer is not None:
            _detach_lazy_optimizer(self._optimizer, self)

    def __del__(self):
        try:
            self.destroy()
        except Exception:  # noqa: BLE001,S110  (interpreter shutdown)
            pass

    def __getattr__(self, name):
        # PopTorch's wrapper forwards attribute reads to the module.
        if name.startswith("_"):
            raise AttributeError(name)
        return getattr(self.__dict__["_model"], name)

    def __repr__(self):
        return f"graft.torch.PoplarExecutor({'training' if self._training else 'inference'}, {self._model!r})"

    def train(self, mode=True):
        self._model.train(mode)
        return self

    def eval(self):
        return self.train(False)

    # -- internals ----------------------------------------------------------------------------------
    def _check_optimizer(self, optimizer):
        if not isinstance(optimizer, torch.optim.Optimizer):
            raise _graft.Error(f"poptorch.trainingModel: optimizer must be a torch.optim.Optimizer, got "
                               f"{type(optimizer).__name__}")
        _optim._kind(optimizer)  # noqa: SLF001
        _optim.warn_if_subclassed(optimizer)
        own = {id(p) for p in self._model.parameters()}
        names = {id(p): n for n, p in self._model.named_parameters()}
        for gi, g in enumerate(optimizer.param_groups):
            for p in g["params"]:
                if id(p) not in own:
                    raise _graft.Error(f"poptorch.trainingModel: parameter {tuple(p.shape)} in group {gi} of the "
                                       f"{type(optimizer).__name__} is not a parameter of {type(self._model).__name__} "
                                       "(build the optimizer from model.parameters())")
        del names

    def _sync_host_if_stale(self):
        if self._stale:
            _log.logger.debug("Implicit copyWeightsToHost(): the host reads weights or optimizer state that "
                              "training changed")
            self.copyWeightsToHost()

    def _split(self, args, kwargs):
        flat, spec, consts = _capture.flatten_inputs(args, kwargs)
        n = self._options._combined(self._training)  # noqa: SLF001
        micro = []
        for i, t in enumerate(flat):
            if n == 1:
                micro.append(t)
                continue
            if t.dim() == 0 or t.shape[0] % n != 0:
                raise _graft.Error(f"poptorch: input {i} has shape {list(t.shape)}, but a call takes "
                                   f"{n} batches (deviceIterations x gradientAccumulation x replicationFactor): "
                                   f"its first dimension must be a multiple of {n}")
            micro.append(t[: t.shape[0] // n])
        return flat, spec, consts, micro, n

    def _prepare(self, args, kwargs):
        flat, spec, consts, micro, n = self._split(args, kwargs)
        # Every submodule's train/eval mode is part of the signature (a frozen BatchNorm in eval()).
        train_mode = tuple(m.training for m in self._model.modules()) if self._training else False
        key = (train_mode, repr(spec), tuple(repr(c) for c in consts if c is not _capture._TENSOR),  # noqa: SLF001
               tuple((tuple(t.shape), t.dtype) for t in micro))
        compiled = self._compiled.get(key)
        if compiled is None:
            if self._compiled and self._current is not None and self._options.__dict__.get("_strict_shapes"):
                raise _graft.Error("poptorch: new input shapes after compilation")
            for ex in list(self._model.__dict__.get("_graft_executors", ())):
                ex._sync_host_if_stale()  # noqa: SLF001
            if any(t.requires_grad for t in flat):
                # (as PopTorch says it): graft computes no gradient for the inputs.
                _log.logger.warning("Input tensor has requires_grad=True set. This tensor will be detached because "
                                    "backward pass via inputs is not supported.")
            compiled = self._compile(micro, spec, consts, train_mode)
            self._compiled[key] = compiled
            self._example = pytree.tree_map(lambda v: torch.zeros_like(v) if isinstance(v, torch.Tensor) else v,
                                            (tuple(args), dict(kwargs)))
        if self._current is not None and self._current is not compiled and self._training:
            # Another capture of the same module (new shapes or train/eval): carry the weights over.
            self._sync_host_if_stale()
            self._write_weights(compiled, force=True)
            _carry_optimizer_state(self._current, compiled, self._model)
        self._current = compiled
        feeds = self._feeds(compiled, flat, n)
        return compiled, feeds, n

    def _lead(self):
        """The leading dimensions of graft's input arrays: [batchesPerStep, accumulationFactor,
        replicatedGraphCount], each only when > 1 (PopART's layout)."""
        o = self._options
        acc = o.Training.gradient_accumulation if self._training else 1
        return [d for d in (o.device_iterations, acc, o.replication_factor) if d > 1]

    def _feeds(self, compiled, flat, n):
        lead = self._lead()
        feeds = {}
        for name, t in zip(compiled.cap.input_ids, flat):
            if name is None:
                continue
            a = _np(t)
            if n > 1:
                a = a.reshape(lead + [a.shape[0] // n] + list(a.shape[1:]))
            declared = compiled.input_shapes.get(name)
            if declared is not None and list(a.shape[len(lead):]) != declared and \
                    int(np.prod(declared)) * (a.size // max(1, int(np.prod(a.shape[len(lead):])))) == a.size:
                # The exporter sometimes types an input with another shape of the same size (a
                # [1] value of index_fill as a scalar): feed it as the graph declares it.
                a = a.reshape(list(a.shape[:len(lead)]) + declared)
            feeds[name] = _contig(a)
        state = _capture._named_state(self._model)  # noqa: SLF001
        for name, key in compiled.cap.fed.items():
            a = _np(state[key])
            if lead:
                a = _contig(np.broadcast_to(a, lead + list(a.shape)))
            feeds[name] = a
        return feeds

    def _mode(self):
        m = self._options.output_mode
        if m == OutputMode.Default:
            m = OutputMode.Final if self._training else OutputMode.All
        return m

    def _compile(self, micro, spec, consts, train_mode):
        cap = _capture.capture(self._model, micro, spec, consts, train_mode)
        opts = graft.SessionOptions()
        if self._options.log_dir:
            opts.logDir = self._options.log_dir
        n_ipus = 1
        if cap.blocks:
            n_ipus, pipelined = _parallel.annotate(cap, self._options.execution_strategy)
            if n_ipus > 1 or pipelined:
                opts.virtualGraphMode = graft.VirtualGraphMode.Manual
                opts.enablePipelining = bool(pipelined) and len({b for b in cap.block_of_node}) > 1
            if opts.enablePipelining:
                self._check_pipeline_depth(cap)
        if cap.recompute and opts.enablePipelining:
            opts.autoRecomputation = graft.RecomputationType.Standard
        mode = self._mode()
        art = {OutputMode.All: graft.AnchorReturnType("All"), OutputMode.Final: graft.AnchorReturnType("Final"),
               OutputMode.Sum: graft.AnchorReturnType("Sum"),
               OutputMode.EveryN: graft.AnchorReturnType("EveryN", self._options.output_return_period)}[mode]
        anchors = {o: art for o in cap.output_ids}
        replicas = self._options.replication_factor
        if replicas > 1:
            # graft's in-process replicas (docs/replication.md): each on its own virtual devices,
            # gradients all-reduced before every weight update.
            opts.enableReplicatedGraphs = True
            opts.replicatedGraphCount = replicas
            cores = max(1, (os.cpu_count() or 1) // (replicas * n_ipus))
            device = graft.DeviceManager().createCpuDevice(numVirtualDevices=replicas * n_ipus,
                                                           coresPerVirtualDevice=cores)
        else:
            device = graft.DeviceManager().createCpuDevice(numVirtualDevices=n_ipus)
        model_bytes = cap.onnx.SerializeToString()
        bps = self._options.device_iterations
        if self._training:
            acc = self._options.Training.gradient_accumulation
            if acc > 1:
                opts.enableGradientAccumulation = True
                opts.accumulationFactor = acc
            opts.accumulationAndReplicationReductionType = (
                graft.ReductionType.Mean if self._options.Training.reduction == ReductionType.Mean
                else graft.ReductionType.Sum)
            loss = self._loss_id(cap)
            anchors.setdefault(loss, art)
            weight_of_param = self._weight_of_param(cap)
            gopt = _optim.to_graft(self._optimizer, weight_of_param, relaxed=self._options.relax_optimizer_checks)
            session = graft.TrainingSession(fnModel=model_bytes, dataFlow=graft.DataFlow(bps, anchors), loss=loss,
                                            optimizer=gopt, deviceInfo=device, userOptions=opts)
            self._opt_sig = _optim.signature(self._optimizer)
        else:
            opts.constantWeights = False  # weights change whenever the torch module's do
            session = graft.InferenceSession(fnModel=model_bytes, dataFlow=graft.DataFlow(bps, anchors),
                                             deviceInfo=device, userOptions=opts)
        session.prepareDevice()
        compiled = _Compiled(cap, session, anchors, n_ipus)
        self._write_weights(compiled, force=True)
        if self._training:
            self._state_to_device(compiled, force=True)
        if self._options.random_seed is not None and self._training:
            try:
                session.writeWeights(graft.PyWeightsIO({"randomSeed___": np.array([self._options.random_seed, 0],
                                                                                   np.int64)}))
            except _graft.Error:
                pass  # no random ops in this model
        return compiled

    def _check_pipeline_depth(self, cap):
        """PopTorch's rule for PipelinedExecution: N stages train as 2N - 1 (each but the last gets
        a backward stage), and one call must fill them: gradientAccumulation >= 2N - 1 in training,
        deviceIterations >= N in inference."""
        stages = {a.i for node in cap.onnx.graph.node for a in node.attribute if a.name == "__pipeline_stage"}
        n = len(stages)
        if self._training:
            total = 2 * n - 1
            if self._options.Training.gradient_accumulation < total:
                raise _graft.Error(
                    "poptorch.Options().Training.gradientAccumulation must be greater than or equal to the number of "
                    f"pipeline stages ({total}) when using poptorch.PipelinedExecution. Please note that a model "
                    f"with {n} pipeline stages in PopTorch will have an additional {n - 1} stages when training.")
        elif self._options.device_iterations < n:
            raise _graft.Error(f"poptorch.Options().deviceIterations must be greater than or equal to the number of "
                               f"pipeline stages ({n}) when using PopTorch.PipelinedExecution.")

    def _loss_id(self, cap):
        if cap.loss_id is not None:
            return cap.loss_id
        proto = cap.onnx
        shapes = {}
        for o in proto.graph.output:
            dims = o.type.tensor_type.shape.dim
            shapes[o.name] = (o.type.tensor_type.elem_type, len(dims))
        # The loss is the module's output: the last floating-point scalar it returns.
        for oid in reversed(cap.output_ids):
            elem, rank = shapes.get(oid, (0, -1))
            if rank == 0 and elem in (1, 10, 11):
                return oid
        got = ", ".join(f"{oid} (rank {shapes.get(oid, (0, '?'))[1]})" for oid in cap.output_ids)
        raise _graft.Error(f"poptorch.trainingModel: {type(self._model).__name__} must return a scalar loss, or mark "
                           f"it with poptorch.identity_loss(x, reduction); its outputs are: {got or 'none'}")

    def _weight_of_param(self, cap):
        key_of_id = {id(t): k for k, t in _capture._named_state(self._model).items()}  # noqa: SLF001
        wid_of_key = {k: wid for wid, k in cap.weights.items()}
        out = {}
        for g in self._optimizer.param_groups:
            for p in g["params"]:
                k = key_of_id.get(id(p))
                if k in wid_of_key:
                    out[id(p)] = wid_of_key[k]
        return out

    def _trained_params(self, compiled):
        """(parameter, graft weight id, its param group) for every parameter the graph trains."""
        wop = self._weight_of_param(compiled.cap)
        return [(p, wop[id(p)], g) for g in self._optimizer.param_groups for p in g["params"] if id(p) in wop]

    def _state_signature(self):
        state = self._optimizer.__dict__["state"]
        sig = [id(state)]
        for p, entries in state.items():
            for k, v in entries.items():
                sig.append((id(p), k, (id(v), v._version) if isinstance(v, torch.Tensor) else repr(v)))  # noqa: SLF001
        return tuple(sig)

    def _state_to_host(self, compiled):
        """The session's optimizer state into the torch optimizer's ``state`` (torch's keys:
        momentum_buffer, exp_avg, exp_avg_sq, step, square_avg, grad_avg), so the optimizer can be
        saved, inspected, or go on training in plain torch."""
        state = self._optimizer.__dict__["state"]
        for p, wid, g in self._trained_params(compiled):
            entries = {}
            for prefix, key, scale in _optim.state_layout(self._optimizer, g):
                if prefix == _optim.HOST_STEP:
                    entries[key] = torch.tensor(float(self._host_steps.get(id(p), 0)))
                    continue
                a = np.zeros((), np.float32) if prefix == "Step" else np.zeros(tuple(p.shape), _NP[p.dtype])
                try:
                    compiled.session.readWeights(graft.PyWeightsIO({f"{prefix}___{wid}": a}))
                except _graft.Error:
                    continue  # graft keeps no such state for this weight
                entries[key] = torch.tensor(float(a)) if key == "step" else torch.from_numpy(a * scale if scale != 1.0
                                                                                           else a).to(p.dtype)
            if entries:
                state[p].update(entries)
        self._opt_state_sig = self._state_signature()

    def _state_to_device(self, compiled, force=False):
        """The torch optimizer's state into the session, where it changed on the host since the
        last copy (load_state_dict, a value written in place, or an optimizer that trained in torch
        before)."""
        sig = self._state_signature()
        if not force and sig == self._opt_state_sig:
            return
        state = self._optimizer.__dict__["state"]
        arrays = {}
        for p, wid, g in self._trained_params(compiled):
            entries = dict.get(state, p)
            if not entries:
                continue
            for prefix, key, scale in _optim.state_layout(self._optimizer, g):
                v = entries.get(key)
                if v is None:
                    continue
                v = torch.as_tensor(v).detach()
                if prefix == _optim.HOST_STEP:
                    self._host_steps[id(p)] = float(v)
                    continue
                if prefix == "Step":
                    arrays[f"{prefix}___{wid}"] = np.array(float(v), np.float32)
                    continue
                if tuple(v.shape) != tuple(p.shape):
                    raise _graft.Error(f"poptorch: optimizer state '{key}' of parameter {tuple(p.shape)} has shape "
                                       f"{tuple(v.shape)}")
                arrays[f"{prefix}___{wid}"] = _contig((_np(v.to(p.dtype)) / scale).astype(_NP[p.dtype]))
        for name, a in arrays.items():
            try:
                compiled.session.writeWeights(graft.PyWeightsIO({name: a}))
            except _graft.Error:
                pass  # graft keeps no such state for this weight (e.g. momentum 0)
        self._opt_state_sig = sig

    def _write_weights(self, compiled, force=False):
        state = _capture._named_state(self._model)  # noqa: SLF001
        arrays = {}
        for wid, k in compiled.cap.weights.items():
            t = state[k]
            v = (id(t), t._version)  # noqa: SLF001
            if force or compiled.versions.get(k) != v:
                arrays[wid] = _np(t)
                compiled.versions[k] = v
        if arrays:
            compiled.session.writeWeights(graft.PyWeightsIO(arrays))
            compiled.session.weightsFromHost()

    def _upload_changed(self, compiled):
        # Another wrapper of the same module (a trainingModel) may hold newer weights.
        for ex in list(self._model.__dict__.get("_graft_executors", ())):
            if ex is not self:
                ex._sync_host_if_stale()  # noqa: SLF001
        if self._stale:
            return  # the session holds the newest weights
        self._write_weights(compiled)

    def _update_optimizer(self, compiled):
        sig = _optim.signature(self._optimizer)
        if sig == self._opt_sig:
            return
        gopt = _optim.to_graft(self._optimizer, self._weight_of_param(compiled.cap), updating=True,
                               relaxed=self._options.relax_optimizer_checks)
        try:
            compiled.session.updateOptimizerFromHost(gopt)
        except _graft.Error as e:
            raise _graft.Error(f"poptorch.setOptimizer: {e}") from e
        self._opt_sig = sig

    def _count_batches(self, n):
        # torch counts BatchNorm's batches; the exported graph does not. Only BatchNorms in train().
        for m in self._model.modules():
            if isinstance(m, torch.nn.modules.batchnorm._BatchNorm) and m.training and \
                    m.num_batches_tracked is not None:  # noqa: SLF001
                with torch.no_grad():
                    m.num_batches_tracked.add_(n // self._options.replication_factor)

    def _outputs(self, compiled, anchors, n):
        cap = compiled.cap
        lead = self._anchor_lead()
        k = int(np.prod(lead)) if lead else 1
        leaves = []
        for leaf in cap.out_leaves:
            if isinstance(leaf, tuple):
                leaves.append(leaf[1])
                continue
            a = anchors[cap.output_ids[leaf]]
            t = torch.from_numpy(np.array(a))
            if lead:
                # graft's leading dimensions (batches, replicas) become PopTorch's: concatenated
                # along the batch dimension, or one value per batch / replica for a scalar.
                inner = list(t.shape[len(lead):])
                t = t.reshape([k * inner[0]] + inner[1:]) if inner else t.reshape(k)
            leaves.append(t)
        return pytree.tree_unflatten(leaves, cap.out_spec)

    def _anchor_lead(self):
        """The leading dimensions of graft's anchor arrays for the output mode (docs/replication.md):
        All [batchesPerStep, accumulationFactor, replicas], EveryN [batchesPerStep / N, replicas]
        (accumulation folded in per step), Final and Sum [replicas]; each only when > 1."""
        mode = self._mode()
        o = self._options
        replicas = [o.replication_factor] if o.replication_factor > 1 else []
        if mode == OutputMode.All:
            return self._lead()
        if mode == OutputMode.EveryN:
            every = o.device_iterations // o.output_return_period
            return ([every] if every > 1 else []) + replicas
        return replicas


_STATE_PREFIXES = ("Accl___", "Accl1___", "Accl2___", "Accl3___")


def _carry_optimizer_state(old, new, model):
    """Copies the optimizer state (velocities, moments, step counts) of the weights two captures
    share, so that a new capture (a smaller last batch, a train/eval switch) continues training
    where the old one stopped."""
    state = _capture._named_state(model)  # noqa: SLF001
    new_wid = {k: wid for wid, k in new.cap.weights.items()}
    arrays = {}
    for wid, k in old.cap.weights.items():
        nwid = new_wid.get(k)
        if nwid is None:
            continue
        t = state[k]
        wanted = [(p + wid, p + nwid, np.zeros(tuple(t.shape), _NP[t.dtype])) for p in _STATE_PREFIXES]
        wanted.append(("Step___" + wid, "Step___" + nwid, np.zeros((), np.float32)))
        for src, dst, a in wanted:
            try:
                old.session.readWeights(graft.PyWeightsIO({src: a}))
            except _graft.Error:
                continue  # this optimizer keeps no such state
            arrays[dst] = a
    for dst, a in arrays.items():
        try:
            new.session.writeWeights(graft.PyWeightsIO({dst: a}))
        except _graft.Error:
            pass  # the weight is not trained in the new capture (e.g. frozen in eval mode)


def inferenceModel(model, options=None):  # noqa: N802
    """Wraps ``model`` for inference through graft (PopTorch's inferenceModel). It shares the
    module (and so its weights) with ``model``, or with the module of a PoplarExecutor passed in."""
    if isinstance(model, PoplarExecutor):
        model = model._user_model  # noqa: SLF001
    return PoplarExecutor(model, options, training=False)


def trainingModel(model, options=None, optimizer=None):  # noqa: N802
    """Wraps ``model`` for training through graft (PopTorch's trainingModel): each call runs the
    forward pass, the backward pass from the loss and the optimizer update."""
    if isinstance(model, PoplarExecutor):
        model = model._user_model  # noqa: SLF001
    return PoplarExecutor(model, options, training=True, optimizer=optimizer)


def load(filename, edit_opts_fn=None):
    """The wrapper a ``save`` / ``compileAndExport`` checkpoint holds, compiled for its example
    inputs. ``edit_opts_fn(options)`` may change the options first."""
    data = torch.load(filename, weights_only=False)
    if not isinstance(data, dict) or "graft.torch" not in data:
        raise _graft.Error(f"poptorch.load: {filename} is not a checkpoint written by graft.torch's save / "
                           "compileAndExport (PopTorch's precompiled IPU executables cannot be loaded)")
    options = data["options"]
    if edit_opts_fn is not None:
        edit_opts_fn(options)
    if data["training"]:
        ex = trainingModel(data["model"], options, data["optimizer"])
    else:
        ex = inferenceModel(data["model"], options)
    if data["example"] is not None:
        args, kwargs = data["example"]
        ex.compile(*args, **kwargs)
    return ex
