"""inferenceModel / trainingModel: a torch module captured, compiled by graft's sessions, and run
with PopTorch's batching and weight semantics."""
import weakref

import numpy as np
import torch
from torch.utils import _pytree as pytree

import graft

from .. import _graft
from . import _capture, _parallel, optim as _optim
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


# ---- lazy weights: reading a parameter on the host brings the trained values back first ---------

_LAZY_CLASSES = {}
_SYNC_METHODS = ("state_dict", "named_parameters", "parameters", "named_buffers", "buffers", "__getstate__")


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
    new = type(cls.__name__, (cls,), ns)
    _LAZY_CLASSES[cls] = new
    return new


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
        options._check_replication()  # noqa: SLF001
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
        self._calls = 0
        if training:
            if optimizer is None:
                optimizer = torch.optim.SGD(model.parameters(), lr=0.01)  # PopTorch's default
            self._check_optimizer(optimizer)
            self._optimizer = optimizer
            model.train()
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
        anchors = compiled.session.initAnchorArrays()
        compiled.session.run(graft.PyStepIO(feeds, anchors))
        if self._training:
            self._stale = True
            self._count_batches(n)
        self._calls += 1
        return self._outputs(compiled, anchors, n)

    def compile(self, *args, **kwargs):
        """Captures and compiles for these inputs without running."""
        self._prepare(args, kwargs)

    def copyWeightsToHost(self):  # noqa: N802
        """Copies the session's weights (and BatchNorm running statistics) into the torch module."""
        if self._current is None:
            return
        self._stale = False  # before touching the module: its accessors call back here
        c = self._current
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
        self._optimizer = optimizer
        self._opt_sig = None
        if self._current is not None:
            self._update_optimizer(self._current)

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
        train_mode = self._model.training if self._training else False
        key = (train_mode, repr(spec), tuple(repr(c) for c in consts if c is not _capture._TENSOR),  # noqa: SLF001
               tuple((tuple(t.shape), t.dtype) for t in micro))
        compiled = self._compiled.get(key)
        if compiled is None:
            if self._compiled and self._current is not None and self._options.__dict__.get("_strict_shapes"):
                raise _graft.Error("poptorch: new input shapes after compilation")
            for ex in list(self._model.__dict__.get("_graft_executors", ())):
                ex._sync_host_if_stale()  # noqa: SLF001
            compiled = self._compile(micro, spec, consts, train_mode)
            self._compiled[key] = compiled
        if self._current is not None and self._current is not compiled and self._training:
            # Another capture of the same module (new shapes or train/eval): carry the weights over.
            self._sync_host_if_stale()
            self._write_weights(compiled, force=True)
            _carry_optimizer_state(self._current, compiled, self._model)
        self._current = compiled
        feeds = self._feeds(compiled, flat, n)
        return compiled, feeds, n

    def _lead(self):
        o = self._options
        acc = o.Training.gradient_accumulation if self._training else 1
        return [d for d in (o.device_iterations, acc) if d > 1]

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
            feeds[name] = np.ascontiguousarray(a)
        state = _capture._named_state(self._model)  # noqa: SLF001
        for name, key in compiled.cap.fed.items():
            a = _np(state[key])
            if lead:
                a = np.ascontiguousarray(np.broadcast_to(a, lead + list(a.shape)))
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
        if cap.recompute and opts.enablePipelining:
            opts.autoRecomputation = graft.RecomputationType.Standard
        mode = self._mode()
        art = {OutputMode.All: graft.AnchorReturnType("All"), OutputMode.Final: graft.AnchorReturnType("Final"),
               OutputMode.Sum: graft.AnchorReturnType("Sum"),
               OutputMode.EveryN: graft.AnchorReturnType("EveryN", self._options.output_return_period)}[mode]
        anchors = {o: art for o in cap.output_ids}
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
            gopt = _optim.to_graft(self._optimizer, weight_of_param)
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
        if self._options.random_seed is not None and self._training:
            try:
                session.writeWeights(graft.PyWeightsIO({"randomSeed___": np.array([self._options.random_seed, 0],
                                                                                   np.int64)}))
            except _graft.Error:
                pass  # no random ops in this model
        return compiled

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
        gopt = _optim.to_graft(self._optimizer, self._weight_of_param(compiled.cap))
        try:
            compiled.session.updateOptimizerFromHost(gopt)
        except _graft.Error as e:
            raise _graft.Error(f"poptorch.setOptimizer: {e}") from e
        self._opt_sig = sig

    def _count_batches(self, n):
        # torch counts BatchNorm's batches; the exported graph does not.
        if not self._model.training:
            return
        for m in self._model.modules():
            if isinstance(m, torch.nn.modules.batchnorm._BatchNorm) and m.num_batches_tracked is not None:  # noqa: SLF001
                with torch.no_grad():
                    m.num_batches_tracked.add_(n // self._options.replication_factor)

    def _outputs(self, compiled, anchors, n):
        cap = compiled.cap
        mode = self._mode()
        o = self._options
        count = o.device_iterations * (o.Training.gradient_accumulation if self._training else 1)
        if mode == OutputMode.EveryN:
            count = o.device_iterations // o.output_return_period
        leaves = []
        for leaf in cap.out_leaves:
            if isinstance(leaf, tuple):
                leaves.append(leaf[1])
                continue
            a = anchors[cap.output_ids[leaf]]
            t = torch.from_numpy(np.array(a))
            if mode in (OutputMode.All, OutputMode.EveryN) and count > 1:
                inner = list(t.shape[len(self._lead_for(count)):])
                t = t.reshape([count * inner[0]] + inner[1:]) if inner else t.reshape(count)
            leaves.append(t)
        return pytree.tree_unflatten(leaves, cap.out_spec)

    def _lead_for(self, count):
        lead = self._lead()
        if self._mode() == OutputMode.EveryN:
            # graft returns [batchesPerStep // N, ...] (accumulation folded in per step).
            return [count] if count > 1 else []
        return lead


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
