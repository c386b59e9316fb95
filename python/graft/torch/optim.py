"""poptorch.optim: torch's optimizers with PopTorch's extra arguments, and their mapping onto
graft's optimizers (graft.SGD, graft.Adam, graft.Adaptive). Any torch.optim.SGD / Adam / AdamW /
RMSprop works too; the per-parameter groups become graft's per-weight hyper-parameters."""
import warnings

import torch

from .. import _graft
from ._log import logger

# Accepted and without effect: graft keeps optimizer state in the weight's type and computes the
# update in one precision.
_IGNORED = ("accum_type", "velocity_accum_type", "first_order_momentum_accum_type",
            "second_order_momentum_accum_type", "use_combined_accum", "foreach", "differentiable", "fused",
            "capturable")


def _types(accum, first, second):
    return {"accum_type": accum, "first_order_momentum_accum_type": first, "second_order_momentum_accum_type": second}


class _Extras:
    def _graft_init(self, loss_scaling, max_grad_norm, types=None, **extra):
        _warn_accum_types(self, types or {})
        self.loss_scaling = 1.0 if loss_scaling is None else float(loss_scaling)
        self.max_grad_norm = max_grad_norm
        self.graft_extra = extra
        self._variable = set()

    # torch pickles an optimizer as its defaults, state and groups: keep PopTorch's extras too.
    def __getstate__(self):
        state = super().__getstate__()
        state["graft_extras"] = {k: self.__dict__[k] for k in ("loss_scaling", "max_grad_norm", "graft_extra",
                                                               "_variable") if k in self.__dict__}
        return state

    def __setstate__(self, state):
        state = dict(state)
        extras = state.pop("graft_extras", {})
        super().__setstate__(state)
        self.__dict__.update(extras)

    def variableAttributes(self):  # noqa: N802  (PopTorch marks attributes constant / variable)
        return self

    def markAsConstant(self, attr):  # noqa: N802
        """graft compiles every hyper-parameter as a variable: setOptimizer changes any of them."""

    def markAsVariable(self, attr):  # noqa: N802
        self._variable.add(attr)


def _torch_kwargs(names, values):
    return {k: v for k, v in zip(names, values) if v is not None}


Optimizer = _Extras  # PopTorch's base of its optimizers (isinstance(o, poptorch.optim.Optimizer))


class SGD(_Extras, torch.optim.SGD):
    """torch.optim.SGD plus PopTorch's loss_scaling, velocity_scaling, use_combined_accum,
    accum_type, velocity_accum_type and max_grad_norm."""

    def __init__(self, params, lr, momentum=None, dampening=None, weight_decay=None, nesterov=None, maximize=None,
                 foreach=None, differentiable=None, loss_scaling=None, velocity_scaling=None, use_combined_accum=None,
                 accum_type=None, velocity_accum_type=None, max_grad_norm=None):
        kw = _torch_kwargs(("momentum", "dampening", "weight_decay", "nesterov", "maximize"),
                           (momentum, dampening, weight_decay, nesterov, maximize))
        torch.optim.SGD.__init__(self, params, lr=lr, **kw)
        for g in self.param_groups:
            g.setdefault("velocity_scaling", 1.0 if velocity_scaling is None else float(velocity_scaling))
        self._graft_init(loss_scaling, max_grad_norm,
                         types={"accum_type": accum_type, "velocity_accum_type": velocity_accum_type})


class Adam(_Extras, torch.optim.Adam):
    def __init__(self, params, lr=None, betas=None, eps=None, weight_decay=None, amsgrad=None, foreach=None,
                 maximize=None, capturable=None, differentiable=None, fused=None, loss_scaling=None, accum_type=None,
                 first_order_momentum_accum_type=None, second_order_momentum_accum_type=None, max_grad_norm=None):
        kw = _torch_kwargs(("lr", "betas", "eps", "weight_decay", "amsgrad", "maximize"),
                           (lr, betas, eps, weight_decay, amsgrad, maximize))
        torch.optim.Adam.__init__(self, params, **kw)
        self._graft_init(
            loss_scaling, max_grad_norm,
            types=_types(accum_type, first_order_momentum_accum_type, second_order_momentum_accum_type))


class AdamW(_Extras, torch.optim.AdamW):
    def __init__(self, params, lr=None, betas=None, eps=None, weight_decay=None, amsgrad=None, maximize=None,
                 foreach=None, capturable=None, differentiable=None, fused=None, loss_scaling=None,
                 bias_correction=None, accum_type=None, first_order_momentum_accum_type=None,
                 second_order_momentum_accum_type=None, max_grad_norm=None):
        kw = _torch_kwargs(("lr", "betas", "eps", "weight_decay", "amsgrad", "maximize"),
                           (lr, betas, eps, weight_decay, amsgrad, maximize))
        torch.optim.AdamW.__init__(self, params, **kw)
        for g in self.param_groups:
            g.setdefault("bias_correction", True if bias_correction is None else bool(bias_correction))
        self._graft_init(
            loss_scaling, max_grad_norm,
            types=_types(accum_type, first_order_momentum_accum_type, second_order_momentum_accum_type))


class RMSprop(_Extras, torch.optim.RMSprop):
    def __init__(self, params, lr=None, alpha=None, eps=None, weight_decay=None, momentum=None, centered=None,
                 foreach=None, maximize=None, differentiable=None, loss_scaling=None, accum_type=None,
                 first_order_momentum_accum_type=None, second_order_momentum_accum_type=None, use_tf_variant=None):
        kw = _torch_kwargs(("lr", "alpha", "eps", "weight_decay", "momentum", "centered", "maximize"),
                           (lr, alpha, eps, weight_decay, momentum, centered, maximize))
        torch.optim.RMSprop.__init__(self, params, **kw)
        self._graft_init(
            loss_scaling, None, use_tf_variant=bool(use_tf_variant),
            types=_types(accum_type, first_order_momentum_accum_type, second_order_momentum_accum_type))


class LAMB(_Extras, torch.optim.Optimizer):
    """LAMB (You et al.): graft's Adam in Lamb mode (LambNoBias without bias correction). Has no
    torch counterpart, so ``step()`` in plain torch is not provided."""

    def __init__(self, params, lr=None, betas=None, eps=None, weight_decay=None, bias_correction=None,
                 loss_scaling=None, max_weight_norm=None, accum_type=None, first_order_momentum_accum_type=None,
                 second_order_momentum_accum_type=None):
        defaults = {"lr": 1e-3 if lr is None else lr, "betas": betas or (0.9, 0.999),
                    "eps": 1e-8 if eps is None else eps, "weight_decay": 1e-2 if weight_decay is None else weight_decay,
                    "bias_correction": True if bias_correction is None else bias_correction,
                    "max_weight_norm": 65500.0 if max_weight_norm is None else max_weight_norm}
        torch.optim.Optimizer.__init__(self, params, defaults)
        self._graft_init(
            loss_scaling, None,
            types=_types(accum_type, first_order_momentum_accum_type, second_order_momentum_accum_type))

    def step(self, closure=None):
        raise _graft.Error("poptorch.optim.LAMB: graft.torch trains with LAMB inside a trainingModel only")


# ---- the mapping onto graft's optimizers ----------------------------------------------------------


def _v(x):
    return (float(x), False)  # variable: setOptimizer can change it without recompiling


def _kind(opt):
    if isinstance(opt, LAMB):
        return "lamb"
    if isinstance(opt, torch.optim.AdamW):
        return "adamw"
    if isinstance(opt, torch.optim.Adam):
        return "adam"
    if isinstance(opt, torch.optim.RMSprop):
        return "rmsprop"
    if isinstance(opt, torch.optim.SGD):
        return "sgd"
    raise _graft.Error(f"graft.torch: optimizer {type(opt).__name__} is not supported; use SGD, Adam, AdamW, "
                       "RMSprop (torch.optim or poptorch.optim) or poptorch.optim.LAMB")


def _group_values(kind, g, loss_scaling):
    if g.get("maximize"):
        raise _graft.Error(f"graft.torch: {kind} with maximize=True is not supported")
    if g.get("amsgrad"):
        raise _graft.Error(f"graft.torch: {kind} with amsgrad=True is not supported")
    if kind == "sgd":
        if g.get("dampening", 0) and g.get("momentum", 0):
            # PopART starts the velocity at 0 where torch starts it at the first gradient.
            pass
        return {"learningRate": _v(g["lr"]), "weightDecay": _v(g.get("weight_decay", 0)),
                "momentum": _v(g.get("momentum", 0)), "dampening": _v(g.get("dampening", 0)),
                "velocityScaling": _v(g.get("velocity_scaling", 1.0))}
    if kind in ("adam", "adamw", "lamb"):
        b1, b2 = g["betas"]
        out = {"learningRate": _v(g["lr"]), "weightDecay": _v(g.get("weight_decay", 0)), "beta1": _v(b1),
               "beta2": _v(b2), "eps": _v(g["eps"])}
        if kind == "lamb":
            out["maxWeightNorm"] = _v(g["max_weight_norm"])
        return out
    return {"learningRate": _v(g["lr"]), "weightDecay": _v(g.get("weight_decay", 0)), "alpha": _v(g["alpha"]),
            "momentum": _v(g.get("momentum", 0)), "eps": _v(g["eps"])}


_NAMES = {"sgd": "SGD", "adam": "Adam", "adamw": "AdamW", "rmsprop": "RMSprop", "lamb": "LAMB"}
# Group entries graft.torch reads besides the optimizer's defaults.
_GROUP_EXTRAS = {"params", "velocity_scaling", "bias_correction", "max_weight_norm", "name"}
_OPT_ATTRS = {"defaults", "state", "param_groups", "loss_scaling", "max_grad_norm", "graft_extra"}


def _unknown_attributes(opt):
    """(public optimizer attributes, per group the entries) graft.torch does not read."""
    known = set(opt.defaults) | _GROUP_EXTRAS
    groups = {(i, k) for i, g in enumerate(opt.param_groups) for k in g if k not in known}
    attrs = {k for k in vars(opt) if not k.startswith("_") and k not in _OPT_ATTRS}
    return attrs, groups


def _warn_unexpected(opt, relaxed=False):
    """PopTorch's rule for attributes it cannot apply: the ones an optimizer has when it is first
    compiled are taken as they are; one added later (a public attribute set on the optimizer, or
    a group entry that is not a hyper-parameter of it) is warned about by name, once, since
    setOptimizer cannot honour it. Options.relaxOptimizerAttributesChecks() silences this."""
    attrs, groups = _unknown_attributes(opt)
    seen = opt.__dict__.get("_graft_seen_attributes")
    if seen is None:
        opt.__dict__["_graft_seen_attributes"] = (set(attrs), set(groups))
        return
    seen_attrs, seen_groups = seen
    for i, k in sorted(groups - seen_groups):
        if not relaxed:
            logger.warning("Ignoring unexpected group %d attribute '%s': graft.torch does not read it", i, k)
        seen_groups.add((i, k))
    for k in sorted(attrs - seen_attrs):
        if not relaxed:
            logger.warning("Ignoring unexpected optimizer attribute '%s': graft.torch does not read it", k)
        seen_attrs.add(k)


def _known_classes():
    return (torch.optim.SGD, torch.optim.Adam, torch.optim.AdamW, torch.optim.RMSprop, SGD, Adam, AdamW, RMSprop,
            LAMB)


def warn_if_subclassed(opt):
    """A user's subclass of an optimizer: its Python methods (an overridden ``step``) never run,
    because graft.torch trains with graft's optimizer of the base class; said once per object."""
    cls = getattr(type(opt), "_graft_lazy_base", type(opt))
    if cls in _known_classes() or opt.__dict__.get("_graft_subclass_warned"):
        return
    opt.__dict__["_graft_subclass_warned"] = True
    base = next((b for b in cls.__mro__ if b in _known_classes()), torch.optim.Optimizer)
    logger.warning("%s is a subclass of %s.%s: Poptorch does not run Python optimizer code directly; graft.torch "
                   "trains with graft's %s on the optimizer's hyper-parameters, and the subclass's methods are not "
                   "called", cls.__name__, base.__module__, base.__name__, _NAMES.get(_kind(opt), base.__name__))


def _fmt(values):
    out = []
    for k, (v, const) in values.items():
        out.append(f"{k}={v:g}{' (const)' if const else ''}")
    return ", ".join(out)


def _describe(opt, kind, default, group_values, updating):
    """The optimizer graft runs, at DEBUG: its defaults and each group's values, and the type graft
    keeps the state in (the weight's: accum_type and the *_accum_type are not honoured)."""
    if not logger.isEnabledFor(10):
        return
    params = [p for g in opt.param_groups for p in g["params"]]
    dtype = str(params[0].dtype).split(".")[1] if params else "float32"
    types = f", accumType={dtype}, firstOrderMomentumAccumType={dtype}"
    if kind != "sgd":
        types += f", secondOrderMomentumAccumType={dtype}"
    what = "Updating graph" if updating else "graph"
    logger.debug("%s optimizer with %s {%s%s}", what, _NAMES[kind], _fmt(default), types)
    for i, values in enumerate(group_values):
        logger.debug("%s optimizer with %s {%s}", f"Updating group {i}" if updating else f"group {i}", _NAMES[kind],
                     _fmt(values))


_TYPE_ARGS = ("accum_type", "velocity_accum_type", "first_order_momentum_accum_type",
              "second_order_momentum_accum_type")


def _warn_accum_types(opt, args):
    """accum_type and friends: graft keeps optimizer state in the weight's type."""
    params = [p for g in opt.param_groups for p in g["params"]]
    dtype = params[0].dtype if params else torch.float32
    for name, value in args.items():
        if value is not None and value != dtype:
            warnings.warn(f"poptorch.optim.{type(opt).__name__}: {name}={value} is not honoured; graft keeps the "
                          f"optimizer state in the weight's type ({dtype})", UserWarning, stacklevel=3)


def to_graft(opt, weight_of_param, updating=False, relaxed=False):
    """graft's optimizer equal to ``opt``: every weight gets its group's hyper-parameters.
    ``weight_of_param``: id(parameter) -> graft weight id (the parameters the graph trains)."""
    kind = _kind(opt)
    _warn_unexpected(opt, relaxed)
    loss_scaling = getattr(opt, "loss_scaling", 1.0)
    groups = opt.param_groups
    default = {("default" + k[0].upper() + k[1:]): v for k, v in _group_values(kind, groups[0], loss_scaling).items()}
    default["lossScaling"] = _v(loss_scaling)
    clip = []
    max_norm = getattr(opt, "max_grad_norm", None)
    if max_norm is not None:
        clip = [_graft.ClipNormSettings.clipAllWeights(float(max_norm))]
    if kind == "sgd":
        default["nesterov"] = (1.0 if groups[0].get("nesterov") else 0.0, True)
        if any(bool(g.get("nesterov")) != bool(groups[0].get("nesterov")) for g in groups):
            raise _graft.Error("graft.torch: SGD parameter groups with different nesterov settings are not supported")
        gopt = _graft.SGD(default, clip_norm_settings=clip)
    elif kind in ("adam", "adamw", "lamb"):
        if kind == "lamb":
            mode = _graft.AdamMode.Lamb if groups[0].get("bias_correction", True) else _graft.AdamMode.LambNoBias
        else:
            bias = groups[0].get("bias_correction", True)
            mode = _graft.AdamMode.Adam if bias else _graft.AdamMode.AdamNoBias
        wd_mode = _graft.WeightDecayMode.L2Regularization if kind == "adam" else _graft.WeightDecayMode.Decay
        gopt = _graft.Adam(default, mode=mode, weight_decay_mode=wd_mode, clip_norm_settings=clip)
    else:
        mode = _graft.AdaptiveMode.CenteredRMSProp if groups[0].get("centered") else _graft.AdaptiveMode.RMSProp
        if any(bool(g.get("centered")) != bool(groups[0].get("centered")) for g in groups):
            raise _graft.Error("graft.torch: RMSprop parameter groups with different centered settings are not "
                               "supported")
        gopt = _graft.Adaptive(default, mode=mode, weight_decay_mode=_graft.WeightDecayMode.L2Regularization,
                               rmsprop_tf_variant=bool(getattr(opt, "graft_extra", {}).get("use_tf_variant")),
                               clip_norm_settings=clip)
    group_values = []
    for g in groups:
        values = _group_values(kind, g, loss_scaling)
        group_values.append(values)
        for p in g["params"]:
            wid = weight_of_param.get(id(p))
            if wid is not None:
                gopt.insertSpecific(wid, values)
    _describe(opt, kind, default, group_values, updating)
    return gopt


def signature(opt):
    """A value that changes when any hyper-parameter of ``opt`` changes (lr schedulers included)."""
    return (type(opt), getattr(opt, "loss_scaling", 1.0), getattr(opt, "max_grad_norm", None),
            tuple((tuple(id(p) for p in g["params"]),
                   tuple(sorted((k, repr(v)) for k, v in g.items() if k != "params"))) for g in opt.param_groups))


# ---- optimizer state: graft's state tensors <-> torch's optimizer.state ---------------------------

HOST_STEP = "host_step"  # a state entry graft does not keep: graft.torch counts the steps itself


def state_layout(opt, group):
    """The optimizer state graft keeps for a weight of ``group`` and its torch counterpart:
    [(graft prefix, torch state key, scale)], torch value = graft value x scale. graft's tensor is
    ``prefix + "___" + weight`` (docs/python-api.md); HOST_STEP entries are counted on the host.
    - SGD: the velocity ``Accl`` is torch's ``momentum_buffer`` times ``velocity_scaling``.
    - Adam, AdamW, LAMB: ``Step``, ``Accl1`` (exp_avg), ``Accl2`` (exp_avg_sq).
    - RMSprop: ``Accl1`` (square_avg), ``Accl2`` (grad_avg, centered), ``Accl3`` (momentum_buffer);
      torch's ``step`` is counted on the host (graft's RMSProp keeps no step)."""
    kind = _kind(opt)
    if kind == "sgd":
        if not group.get("momentum", 0):
            return []
        return [("Accl", "momentum_buffer", 1.0 / float(group.get("velocity_scaling", 1.0)))]
    if kind in ("adam", "adamw", "lamb"):
        return [("Step", "step", 1.0), ("Accl1", "exp_avg", 1.0), ("Accl2", "exp_avg_sq", 1.0)]
    out = [(HOST_STEP, "step", 1.0), ("Accl1", "square_avg", 1.0)]
    tf = bool(getattr(opt, "graft_extra", {}).get("use_tf_variant"))
    if group.get("momentum", 0) and not tf:
        # (the TensorFlow variant folds the learning rate into its momentum: no torch counterpart)
        out.append(("Accl3", "momentum_buffer", 1.0))
    if group.get("centered"):
        out.append(("Accl2", "grad_avg", 1.0))
    return out
