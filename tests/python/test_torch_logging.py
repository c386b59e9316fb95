"""graft.torch's log: what poptorch.setLogLevel governs, and the warnings the wrapper gives."""
import logging

import pytest

torch = pytest.importorskip("torch")

import graft  # noqa: E402
import graft.torch as poptorch  # noqa: E402


class _WithLoss(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.lin = torch.nn.Linear(3, 2)

    def forward(self, x):
        return self.lin(x).sum()


def test_set_log_level_is_the_wrappers_own(capfd):
    """poptorch.setLogLevel sets graft.torch's level (PopTorch's), not graft's engine log (PopART's
    in PopTorch): at DEBUG the wrapper's optimizer lines appear, the engine's pass lines do not."""
    engine = graft.getLogger()
    before = engine.level() if callable(getattr(engine, "level", None)) else None
    poptorch.setLogLevel("DEBUG")
    try:
        model = _WithLoss()
        poptorch.trainingModel(model, optimizer=torch.optim.SGD(model.parameters(), lr=0.1))(torch.ones(2, 3))
    finally:
        poptorch.setLogLevel("WARN")
    out, err = capfd.readouterr()
    assert "graph optimizer with SGD" in out + err
    assert "graft debug: pass" not in out + err
    assert logging.getLogger("graft.torch").level == logging.WARNING
    del before


def test_subclassed_optimizer_is_warned_about(capfd):
    class MySGD(torch.optim.SGD):
        def step(self, closure=None):  # never called by graft.torch
            raise AssertionError("graft.torch ran the subclass's step")

    model = _WithLoss()
    training = poptorch.trainingModel(model, optimizer=MySGD(model.parameters(), lr=0.1))
    training(torch.ones(2, 3))
    out, err = capfd.readouterr()
    assert "MySGD is a subclass of torch.optim.sgd.SGD" in err
    assert "does not run Python optimizer code directly" in err

    model = _WithLoss()
    poptorch.trainingModel(model, optimizer=torch.optim.SGD(model.parameters(), lr=0.1))(torch.ones(2, 3))
    out, err = capfd.readouterr()
    assert "subclass" not in err


def test_attributes_added_after_compiling_are_warned_about_once(capfd):
    """PopTorch's rule: what the optimizer has when first compiled is taken as it is; an attribute
    or group entry added later cannot be honoured by setOptimizer and is named, once."""
    model = _WithLoss()
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    opt.note = "present before compiling"
    training = poptorch.trainingModel(model, optimizer=opt)
    training(torch.ones(2, 3))
    assert "unexpected" not in capfd.readouterr().err
    opt.later = 1
    opt.param_groups[0]["later_key"] = 2
    opt.param_groups[0]["lr"] = 0.05  # an update, so the optimizer is mapped again
    training(torch.ones(2, 3))
    err = capfd.readouterr().err
    assert "Ignoring unexpected optimizer attribute 'later'" in err
    assert "Ignoring unexpected group 0 attribute 'later_key'" in err
    opt.param_groups[0]["lr"] = 0.02
    training(torch.ones(2, 3))
    assert "unexpected" not in capfd.readouterr().err

    model = _WithLoss()
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    training = poptorch.trainingModel(model, poptorch.Options().relaxOptimizerAttributesChecks(), opt)
    training(torch.ones(2, 3))
    opt.later = 1
    opt.param_groups[0]["lr"] = 0.05
    training(torch.ones(2, 3))
    assert "unexpected" not in capfd.readouterr().err


def test_input_requiring_grad_is_said_to_be_detached(capfd):
    model = poptorch.inferenceModel(torch.nn.Linear(1, 1))
    model(torch.tensor([0.0], requires_grad=True))
    assert "Input tensor has requires_grad=True set. This tensor will be detached" in capfd.readouterr().err
