"""Schedules against torch.optim.lr_scheduler: the same lr (and momentum) sequences."""

from __future__ import annotations

import numpy as np
import pytest
import torch
import torch.optim.lr_scheduler as T

import luminal as lm
from luminal.training import optim
from luminal.training import schedules as S

STEPS = 30


def ours(make, opt_cls=optim.SGD, steps=STEPS, **opt_kwargs):
    cx = lm.Graph()
    param = cx.tensor((2,)).set(np.zeros(2, np.float32))
    opt = opt_cls([param], lr=0.1, **opt_kwargs)
    schedule = make(opt, S)
    lrs, momenta = [opt.lr], [_momentum(opt)]
    for _ in range(steps):
        schedule.step()
        lrs.append(opt.lr)
        momenta.append(_momentum(opt))
        # the graph input holds the value (float32), so a run uses it
        assert cx.input_data[opt._scalars["lr"].node_id] == np.float32(opt.lr)
    assert schedule.get_last_lr() == opt.lr
    return lrs, momenta


def _momentum(opt):
    return opt.betas[0] if hasattr(opt, "betas") else getattr(opt, "momentum", 0.0)


def theirs(make, opt_cls=torch.optim.SGD, steps=STEPS, **opt_kwargs):
    param = torch.zeros(2, requires_grad=True)
    opt = opt_cls([param], lr=0.1, **opt_kwargs)
    schedule = make(opt, T)
    group = opt.param_groups[0]
    lrs, momenta = [group["lr"]], [_torch_momentum(group)]
    for _ in range(steps):
        opt.step()  # no gradient: a no-op, but torch expects it before schedule.step()
        schedule.step()
        lrs.append(group["lr"])
        momenta.append(_torch_momentum(group))
    return lrs, momenta


def _torch_momentum(group):
    return group["betas"][0] if "betas" in group else group.get("momentum", 0.0)


SCHEDULES = {
    "step": lambda o, M: M.StepLR(o, step_size=7, gamma=0.5),
    "multistep": lambda o, M: M.MultiStepLR(o, [3, 10, 10, 20], gamma=0.3),
    "exponential": lambda o, M: M.ExponentialLR(o, gamma=0.9),
    "cosine": lambda o, M: M.CosineAnnealingLR(o, T_max=10, eta_min=0.01),
    "cosine_long": lambda o, M: M.CosineAnnealingLR(o, T_max=40),
    "linear": lambda o, M: M.LinearLR(o, start_factor=0.2, end_factor=0.9, total_iters=8),
    "linear_default": lambda o, M: M.LinearLR(o),
    "onecycle": lambda o, M: M.OneCycleLR(o, max_lr=1.0, total_steps=STEPS),
    "onecycle_epochs": lambda o, M: M.OneCycleLR(o, max_lr=0.5, epochs=3, steps_per_epoch=10),
    "onecycle_three_phase_linear": lambda o, M: M.OneCycleLR(
        o, max_lr=1.0, total_steps=STEPS, three_phase=True, anneal_strategy="linear"
    ),
    "onecycle_no_momentum": lambda o, M: M.OneCycleLR(
        o, max_lr=2.0, total_steps=STEPS + 5, pct_start=0.4, cycle_momentum=False
    ),
}


@pytest.mark.parametrize("name", sorted(SCHEDULES))
def test_matches_torch_exactly(name):
    make = SCHEDULES[name]
    assert ours(make, momentum=0.9) == theirs(make, momentum=0.9)


@pytest.mark.parametrize("name", ["onecycle", "onecycle_three_phase_linear"])
def test_onecycle_cycles_adam_beta1(name):
    make = SCHEDULES[name]
    assert ours(make, optim.Adam) == theirs(make, torch.optim.Adam)


def _warmup_torch(after):
    def make(o, M):
        rest = after(o, M)
        warmup = M.LinearLR(o, start_factor=0.1, end_factor=1.0, total_iters=5)
        return M.SequentialLR(o, [warmup, rest], milestones=[5])

    return make


def _warmup_ours(after):
    return lambda o, M: M.LinearWarmup(o, 5, after=after(o, M), start_factor=0.1)


@pytest.mark.parametrize("after", ["cosine", "step", "exponential", "multistep"])
def test_linear_warmup_then_schedule_matches_sequential_lr(after):
    make = SCHEDULES[after]
    assert ours(_warmup_ours(make)) == theirs(_warmup_torch(make))


def test_linear_warmup_alone_is_linear_lr():
    warm = ours(lambda o, M: M.LinearWarmup(o, 6, start_factor=0.25))
    linear = theirs(lambda o, M: M.LinearLR(o, start_factor=0.25, total_iters=6))
    assert warm == linear


def test_sequential_lr_of_three():
    def make(o, M):
        a = M.ExponentialLR(o, gamma=0.8)
        b = M.StepLR(o, step_size=3, gamma=0.5)
        c = M.CosineAnnealingLR(o, T_max=8, eta_min=0.001)
        return M.SequentialLR(o, [a, b, c], milestones=[4, 12])

    assert ours(make) == theirs(make)


def test_schedule_drives_training_like_torch():
    """SGD with momentum under OneCycleLR (lr and momentum cycle): parameters match."""
    rng = np.random.default_rng(0)
    init = rng.standard_normal((3, 4)).astype(np.float32)
    grads = [rng.standard_normal((3, 4)).astype(np.float32) for _ in range(12)]
    cx = lm.Graph()
    param = cx.tensor((3, 4)).set(init)
    grad = cx.tensor((3, 4))
    opt = optim.SGD([param], lr=0.1, momentum=0.9, nesterov=True)
    opt.step_graph([grad])
    schedule = S.OneCycleLR(opt, max_lr=0.5, total_steps=12)
    torch_param = torch.tensor(init, requires_grad=True)
    torch_opt = torch.optim.SGD([torch_param], lr=0.1, momentum=0.9, nesterov=True)
    torch_schedule = T.OneCycleLR(torch_opt, max_lr=0.5, total_steps=12)
    for array in grads:
        grad.set(array)
        cx.execute()
        opt.apply()
        schedule.step()
        torch_param.grad = torch.tensor(array)
        torch_opt.step()
        torch_schedule.step()
    np.testing.assert_allclose(param.numpy(), torch_param.detach().numpy(), atol=1e-5, rtol=1e-5)


def test_errors():
    cx = lm.Graph()
    param = cx.tensor((2,)).set(np.zeros(2, np.float32))
    with pytest.raises(lm.LuminalError, match="momentum buffer"):
        S.OneCycleLR(optim.SGD([param], lr=0.1), max_lr=1.0, total_steps=10)
    with pytest.raises(lm.LuminalError, match="total_steps"):
        S.OneCycleLR(optim.Adam([param]), max_lr=1.0)
    schedule = S.OneCycleLR(optim.Adam([param]), max_lr=1.0, total_steps=2)
    schedule.step()
    schedule.step()
    with pytest.raises(lm.LuminalError, match="tried to step 3 times"):
        schedule.step()
    opt = optim.SGD([param], lr=0.1)
    with pytest.raises(lm.LuminalError, match="milestones"):
        S.SequentialLR(opt, [S.StepLR(opt, 2), S.StepLR(opt, 3)], milestones=[])
    with pytest.raises(lm.LuminalError, match="step_size"):
        S.StepLR(opt, 0)
