"""Training an MLP exported from PyTorch: graft's TrainingSession against torch.optim, step by step.

The model (Gemm, Tanh, Gemm, Relu, Gemm with fixed random weights; training_util.make_torch_mlp) is exported with
torch.onnx.export(opset_version=17, dynamo=False); graft's Builder loads it and adds the loss:
log-softmax + aiGraphcore.nllloss(inputIsLogProbability=True, Mean), which is
torch.nn.functional.cross_entropy. Both sides train the same batches in float32; the loss of every
step and the final weights must agree within the stated tolerance (the largest deviations are
printed at the end of the run).
"""
import numpy as np
import pytest

import torch  # required (requirements.txt): a missing torch fails these tests, never skips them

import graft  # noqa: E402
from training_util import (STEPS, compare, feeds_for, graft_model, make_torch_mlp, read_weights,  # noqa: E402
                           state_dict_numpy, train_graft, train_torch)

def run_case(name, graft_opt, torch_opt, atol, rtol=0.0, steps=STEPS, options=None, micro_batches=1,
             mean_accumulation=False, clip=None, batches_per_step=1, on_step=None, before_step=None,
             torch_opt_takes_model=False):
    tm = make_torch_mlp()
    model, loss = graft_model(tm)
    init = state_dict_numpy(tm)
    graft_steps = steps // batches_per_step
    session, g_losses, _ = train_graft(model, loss, graft_opt, feeds_for(micro_batches, batches_per_step),
                                       graft_steps, options=options, batches_per_step=batches_per_step,
                                       on_step=on_step)
    t_opt = torch_opt(tm if torch_opt_takes_model else tm.parameters())
    t_losses = train_torch(tm, t_opt, steps, micro_batches, mean_accumulation, clip, before_step)
    g_weights = read_weights(session, init)
    t_weights = state_dict_numpy(tm)
    assert max(np.max(np.abs(t_weights[k] - init[k])) for k in init) > 1e-2, "the weights hardly moved"
    compare(name, g_losses, t_losses, g_weights, t_weights, atol, rtol)
    return session


# (graft optimizer, torch optimizer, tolerance) per case. Tolerances are absolute, on losses ~1.4
# and weights ~0.5, float32 on both sides (the deviations seen are a few float32 ulps, <= 3e-7).
OPTIMIZER_CASES = {
    "sgd_momentum_weight_decay": (
        lambda: graft.SGD({"defaultLearningRate": (0.05, False), "defaultMomentum": (0.9, True),
                           "defaultWeightDecay": (0.01, True)}),
        lambda p: torch.optim.SGD(p, lr=0.05, momentum=0.9, weight_decay=0.01), 1e-6),
    "sgd_nesterov": (
        lambda: graft.SGD({"defaultLearningRate": (0.05, True), "defaultMomentum": (0.9, True),
                           "defaultWeightDecay": (0.01, True), "nesterov": (True, True)}),
        lambda p: torch.optim.SGD(p, lr=0.05, momentum=0.9, weight_decay=0.01, nesterov=True), 1e-6),
    "sgd_velocity_scaling": (
        lambda: graft.SGD({"defaultLearningRate": (0.05, True), "defaultMomentum": (0.8, True),
                           "defaultVelocityScaling": (8.0, True)}),
        lambda p: torch.optim.SGD(p, lr=0.05, momentum=0.8), 1e-6),
    "const_sgd": (
        lambda: graft.ConstSGD(0.1, weight_decay=0.02),
        lambda p: torch.optim.SGD(p, lr=0.1, weight_decay=0.02), 1e-6),
    "adam_l2": (
        lambda: graft.Adam({"defaultLearningRate": (0.01, False), "defaultBeta1": (0.8, True),
                            "defaultBeta2": (0.99, True), "defaultEps": (1e-8, True),
                            "defaultWeightDecay": (0.01, True)},
                           mode=graft.AdamMode.Adam, weight_decay_mode=graft.WeightDecayMode.L2Regularization),
        lambda p: torch.optim.Adam(p, lr=0.01, betas=(0.8, 0.99), eps=1e-8, weight_decay=0.01), 1e-6),
    "adamw": (
        lambda: graft.Adam({"defaultLearningRate": (0.01, True), "defaultEps": (1e-8, True),
                            "defaultWeightDecay": (0.05, True)},
                           mode=graft.AdamMode.Adam, weight_decay_mode=graft.WeightDecayMode.Decay),
        lambda p: torch.optim.AdamW(p, lr=0.01, eps=1e-8, weight_decay=0.05), 1e-6),
    "rmsprop_l2": (
        lambda: graft.Adaptive({"defaultLearningRate": (0.005, True), "defaultAlpha": (0.9, True),
                                "defaultEps": (1e-8, True), "defaultWeightDecay": (0.01, True)},
                               mode=graft.AdaptiveMode.RMSProp,
                               weight_decay_mode=graft.WeightDecayMode.L2Regularization),
        lambda p: torch.optim.RMSprop(p, lr=0.005, alpha=0.9, eps=1e-8, weight_decay=0.01), 1e-6),
    "rmsprop_momentum": (
        lambda: graft.Adaptive({"defaultLearningRate": (0.002, True), "defaultAlpha": (0.95, True),
                                "defaultEps": (1e-8, True), "defaultMomentum": (0.5, True)},
                               mode=graft.AdaptiveMode.RMSProp,
                               weight_decay_mode=graft.WeightDecayMode.L2Regularization),
        lambda p: torch.optim.RMSprop(p, lr=0.002, alpha=0.95, eps=1e-8, momentum=0.5), 1e-6),
    "centered_rmsprop_l2": (
        lambda: graft.Adaptive({"defaultLearningRate": (0.002, True), "defaultAlpha": (0.9, True),
                                "defaultEps": (1e-8, True), "defaultWeightDecay": (0.01, True)},
                               mode=graft.AdaptiveMode.CenteredRMSProp,
                               weight_decay_mode=graft.WeightDecayMode.L2Regularization),
        lambda p: torch.optim.RMSprop(p, lr=0.002, alpha=0.9, eps=1e-8, weight_decay=0.01, centered=True), 1e-6),
    "adagrad_l2": (
        lambda: graft.Adaptive({"defaultLearningRate": (0.05, True), "defaultEps": (1e-10, True),
                                "defaultWeightDecay": (0.01, True)},
                               mode=graft.AdaptiveMode.AdaGrad,
                               weight_decay_mode=graft.WeightDecayMode.L2Regularization),
        lambda p: torch.optim.Adagrad(p, lr=0.05, eps=1e-10, weight_decay=0.01), 1e-6),
    "adadelta_l2": (
        lambda: graft.Adaptive({"defaultLearningRate": (1.0, True), "defaultAlpha": (0.9, True),
                                "defaultEps": (1e-6, True), "defaultWeightDecay": (0.01, True)},
                               mode=graft.AdaptiveMode.AdaDelta,
                               weight_decay_mode=graft.WeightDecayMode.L2Regularization),
        lambda p: torch.optim.Adadelta(p, lr=1.0, rho=0.9, eps=1e-6, weight_decay=0.01), 1e-6),
}


@pytest.mark.parametrize("case", sorted(OPTIMIZER_CASES))
def test_optimizer_matches_torch(case):
    graft_opt, torch_opt, atol = OPTIMIZER_CASES[case]
    run_case(case, graft_opt(), torch_opt, atol)


def _clip_all(max_norm):
    return lambda m: (list(m.parameters()), max_norm)


def test_gradient_clipping_all_weights_sgd():
    clipped = []

    def clip(m):
        norm = torch.sqrt(sum((p.grad ** 2).sum() for p in m.parameters()))
        clipped.append(norm.item() > 0.3)
        return list(m.parameters()), 0.3

    run_case("clip_all_weights_sgd",
             graft.SGD({"defaultLearningRate": (0.1, True), "defaultMomentum": (0.9, True)},
                       clip_norm_settings=[graft.ClipNormSettings.clipAllWeights(0.3)]),
             lambda p: torch.optim.SGD(p, lr=0.1, momentum=0.9), 1e-6, clip=clip)
    assert all(clipped), "the gradient norm never exceeded maxNorm: the test would not test clipping"


def test_gradient_clipping_some_weights_adam():
    run_case("clip_some_weights_adam",
             graft.Adam({"defaultLearningRate": (0.01, True), "defaultEps": (1e-8, True)},
                        weight_decay_mode=graft.WeightDecayMode.L2Regularization,
                        clip_norm_settings=[graft.ClipNormSettings.clipWeights(["0.weight", "0.bias"], 0.05)]),
             lambda p: torch.optim.Adam(p, lr=0.01, eps=1e-8), 1e-6,
             clip=lambda m: ([m[0].weight, m[0].bias], 0.05))


def test_gradient_clipping_two_groups_sgd():
    def clip(m):
        torch.nn.utils.clip_grad_norm_([m[0].weight, m[0].bias], 0.05)
        return [m[4].weight], 0.2

    run_case("clip_two_groups_sgd",
             graft.SGD({"defaultLearningRate": (0.1, True)},
                       clip_norm_settings=[graft.ClipNormSettings.clipWeights(["0.weight", "0.bias"], 0.05),
                                           graft.ClipNormSettings(["4.weight"], 0.2)]),
             lambda p: torch.optim.SGD(p, lr=0.1), 1e-6, clip=clip)


@pytest.mark.parametrize("is_const", [True, False])
def test_loss_scaling_sgd(is_const):
    run_case(f"loss_scaling_sgd_{'const' if is_const else 'variable'}",
             graft.SGD({"defaultLearningRate": (0.05, True), "defaultMomentum": (0.9, True),
                        "lossScaling": (1024.0, is_const)}),
             lambda p: torch.optim.SGD(p, lr=0.05, momentum=0.9), 1e-6)


def test_loss_scaling_adam_with_clipping():
    run_case("loss_scaling_adam_clip",
             graft.Adam({"defaultLearningRate": (0.01, True), "defaultEps": (1e-8, True), "lossScaling": (64.0, False)},
                        weight_decay_mode=graft.WeightDecayMode.L2Regularization,
                        clip_norm_settings=[graft.ClipNormSettings.clipAllWeights(0.3)]),
             lambda p: torch.optim.Adam(p, lr=0.01, eps=1e-8), 1e-6, clip=_clip_all(0.3))


def _accumulation_options(factor, mean):
    opts = graft.SessionOptions()
    opts.enableGradientAccumulation = True
    opts.accumulationFactor = factor
    opts.accumulationAndReplicationReductionType = graft.ReductionType.Mean if mean else graft.ReductionType.Sum
    return opts


@pytest.mark.parametrize("factor", [2, 4])
@pytest.mark.parametrize("reduction", ["Sum", "Mean"])
def test_gradient_accumulation_sgd(factor, reduction):
    mean = reduction == "Mean"
    run_case(f"accumulation{factor}_{reduction.lower()}_sgd",
             graft.SGD({"defaultLearningRate": (0.05, True), "defaultMomentum": (0.9, True),
                        "defaultWeightDecay": (0.01, True)}),
             lambda p: torch.optim.SGD(p, lr=0.05, momentum=0.9, weight_decay=0.01), 1e-6,
             steps=6, options=_accumulation_options(factor, mean), micro_batches=factor, mean_accumulation=mean)


@pytest.mark.parametrize("factor", [2, 4])
def test_gradient_accumulation_adamw(factor):
    run_case(f"accumulation{factor}_mean_adamw",
             graft.Adam({"defaultLearningRate": (0.01, True), "defaultEps": (1e-8, True),
                         "defaultWeightDecay": (0.01, True)}, weight_decay_mode=graft.WeightDecayMode.Decay),
             lambda p: torch.optim.AdamW(p, lr=0.01, eps=1e-8, weight_decay=0.01), 1e-6,
             steps=6, options=_accumulation_options(factor, True), micro_batches=factor, mean_accumulation=True)


def test_gradient_accumulation_with_batches_per_step_and_clipping():
    # 2 batches per step, each of 2 micro-batches: 4 steps of torch per 2 graft runs.
    run_case("accumulation2_bps2_sum_sgd_clip",
             graft.SGD({"defaultLearningRate": (0.05, True), "defaultMomentum": (0.5, True)},
                       clip_norm_settings=[graft.ClipNormSettings.clipAllWeights(0.5)]),
             lambda p: torch.optim.SGD(p, lr=0.05, momentum=0.5), 1e-6,
             steps=4, options=_accumulation_options(2, False), micro_batches=2, batches_per_step=2,
             clip=_clip_all(0.5))


def test_learning_rate_schedule_with_update_optimizer_from_host():
    rates = [0.1 * 0.7 ** s for s in range(STEPS)]

    def graft_step(session, step):
        session.updateOptimizerFromHost(graft.SGD({"defaultLearningRate": (rates[step], False),
                                                   "defaultMomentum": (0.9, True)}))

    def torch_step(opt, step):
        for g in opt.param_groups:
            g["lr"] = rates[step]

    run_case("lr_schedule_sgd", graft.SGD({"defaultLearningRate": (rates[0], False), "defaultMomentum": (0.9, True)}),
             lambda p: torch.optim.SGD(p, lr=rates[0], momentum=0.9), 1e-6, on_step=graft_step,
             before_step=torch_step)


def test_per_weight_hyper_parameters_with_insert_specific():
    opt = graft.SGD({"defaultLearningRate": (0.05, True), "defaultMomentum": (0.9, True)})
    opt.insertSpecific("4.weight", {"learningRate": (0.2, True), "momentum": (0.0, True)})
    opt.insertSpecific("0.bias", {"weightDecay": (0.1, True)})
    assert opt.learningRates().get("4.weight").val() == pytest.approx(0.2)
    assert opt.learningRates().getDefault().val() == pytest.approx(0.05)
    assert opt.hasSpecific("0.bias") and not opt.hasSpecific("2.bias")

    def torch_opt(m):
        special = {id(m[4].weight), id(m[0].bias)}
        rest = [p for p in m.parameters() if id(p) not in special]
        return torch.optim.SGD([{"params": rest},
                                {"params": [m[4].weight], "lr": 0.2, "momentum": 0.0},
                                {"params": [m[0].bias], "weight_decay": 0.1}], lr=0.05, momentum=0.9)

    run_case("insert_specific_sgd", opt, torch_opt, 1e-6, torch_opt_takes_model=True)


def test_float64_training_matches_torch_to_rounding():
    """In float64 the only differences left are rounding: a much tighter tolerance."""
    tm = make_torch_mlp(torch.float64)
    model, loss = graft_model(tm, dtype=torch.float64)
    init = state_dict_numpy(tm)
    # graft keeps hyper-parameters in float32 tensors (as PopART does): torch gets the same
    # float32-rounded values.
    lr, eps, wd = (float(np.float32(v)) for v in (0.01, 1e-8, 0.01))
    opt = graft.Adam({"defaultLearningRate": (lr, True), "defaultEps": (eps, True), "defaultWeightDecay": (wd, True)},
                     weight_decay_mode=graft.WeightDecayMode.L2Regularization)
    session, g_losses, _ = train_graft(model, loss, opt, feeds_for(np_dtype=np.float64), STEPS)
    betas = (float(np.float32(0.9)), float(np.float32(0.999)))  # graft's defaults, as float32
    t_opt = torch.optim.Adam(tm.parameters(), lr=lr, betas=betas, eps=eps, weight_decay=wd)
    t_losses = train_torch(tm, t_opt, STEPS, np_dtype=np.float64)
    compare("float64_adam_l2", g_losses, t_losses, read_weights(session, init), state_dict_numpy(tm), 1e-12)
