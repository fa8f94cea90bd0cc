"""Learning-rate schedules: plain Python objects that compute the next learning rate and
set it into the optimizer's lr input (a graph input, so nothing recompiles).

They reproduce torch.optim.lr_scheduler value for value: the same recursive ("chainable")
formulas on the optimizer's current lr, the same initial step at construction, the
same closed forms where SequentialLR restarts a schedule. Call `step()` after each
optimizer step (after `opt.apply()`), as in torch. One parameter group per optimizer.
"""

from __future__ import annotations

import math
from bisect import bisect_right
from collections import Counter
from collections.abc import Iterable, Sequence
from typing import TYPE_CHECKING

from luminal.errors import LuminalError

if TYPE_CHECKING:
    from luminal.training.optim import Optimizer


class LRSchedule:
    """Base class (torch's LRScheduler for one group): `last_epoch` counts steps, the
    constructor performs the initial step, `step()` moves to the next learning rate."""

    def __init__(self, optimizer: Optimizer) -> None:
        if not hasattr(optimizer, "lr"):
            raise LuminalError(f"{type(self).__name__}: {optimizer!r} is not an optimizer")
        self.optimizer = optimizer
        if optimizer.initial_lr is None:  # torch: group.setdefault("initial_lr", lr)
            optimizer.initial_lr = optimizer.lr
        self.base_lr: float = optimizer.initial_lr
        self.last_epoch = -1
        self.last_lr = optimizer.lr
        self._initial_step()

    def _initial_step(self) -> None:
        self._step_count = 0
        self._is_initial = True
        try:
            self.step()
        finally:
            self._is_initial = False

    def step(self) -> None:
        """Advance one step (epoch) and set the optimizer's learning rate."""
        self._step_count += 1
        self._update_lr(None)

    def _update_lr(self, epoch: int | None) -> None:
        if epoch is None:
            self.last_epoch += 1
            lr = self.get_lr()
        else:  # a restart (SequentialLR): the closed form where there is one
            self.last_epoch = epoch
            lr = self.closed_form_lr()
        self.optimizer.lr = lr
        self.last_lr = lr

    def get_lr(self) -> float:
        """The learning rate for `last_epoch`, from the optimizer's current one."""
        raise NotImplementedError

    def closed_form_lr(self) -> float:
        return self.get_lr()

    def get_last_lr(self) -> float:
        return self.last_lr

    @property
    def _lr(self) -> float:
        return self.optimizer.lr

    def __repr__(self) -> str:
        return f"{type(self).__name__}(last_epoch={self.last_epoch}, lr={self.last_lr:g})"


class StepLR(LRSchedule):
    """lr * gamma every `step_size` steps."""

    def __init__(self, optimizer: Optimizer, step_size: int, gamma: float = 0.1) -> None:
        if step_size <= 0:
            raise LuminalError(f"StepLR: step_size must be positive, got {step_size}")
        self.step_size = step_size
        self.gamma = gamma
        super().__init__(optimizer)

    def get_lr(self) -> float:
        if self.last_epoch == 0 or self.last_epoch % self.step_size != 0:
            return self._lr
        return self._lr * self.gamma

    def closed_form_lr(self) -> float:
        return self.base_lr * self.gamma ** (self.last_epoch // self.step_size)


class MultiStepLR(LRSchedule):
    """lr * gamma at each milestone (a milestone listed twice decays twice)."""

    def __init__(self, optimizer: Optimizer, milestones: Iterable[int], gamma: float = 0.1) -> None:
        self.milestones = Counter(milestones)
        self.gamma = gamma
        super().__init__(optimizer)

    def get_lr(self) -> float:
        if self.last_epoch not in self.milestones:
            return self._lr
        return self._lr * self.gamma ** self.milestones[self.last_epoch]

    def closed_form_lr(self) -> float:
        milestones = sorted(self.milestones.elements())
        return self.base_lr * self.gamma ** bisect_right(milestones, self.last_epoch)


class ExponentialLR(LRSchedule):
    """lr * gamma every step."""

    def __init__(self, optimizer: Optimizer, gamma: float) -> None:
        self.gamma = gamma
        super().__init__(optimizer)

    def get_lr(self) -> float:
        return self._lr if self._is_initial else self._lr * self.gamma

    def closed_form_lr(self) -> float:
        return self.base_lr * self.gamma**self.last_epoch


class CosineAnnealingLR(LRSchedule):
    """Cosine from the base lr down to `eta_min` over `T_max` steps (and back up after,
    as torch's recursive form does)."""

    def __init__(self, optimizer: Optimizer, T_max: int, eta_min: float = 0.0) -> None:  # noqa: N803
        if T_max <= 0:
            raise LuminalError(f"CosineAnnealingLR: T_max must be positive, got {T_max}")
        self.T_max = T_max
        self.eta_min = eta_min
        super().__init__(optimizer)

    def get_lr(self) -> float:
        t, period, low = self.last_epoch, self.T_max, self.eta_min
        if self._is_initial:
            return self._lr
        if self._step_count == 1 and t > 0:
            return low + (self.base_lr - low) * (1 + math.cos(t * math.pi / period)) / 2
        if (t - 1 - period) % (2 * period) == 0:
            return self._lr + (self.base_lr - low) * (1 - math.cos(math.pi / period)) / 2
        return (1 + math.cos(math.pi * t / period)) / (1 + math.cos(math.pi * (t - 1) / period)) * (
            self._lr - low
        ) + low

    def closed_form_lr(self) -> float:
        low = self.eta_min
        return (
            low + (self.base_lr - low) * (1 + math.cos(math.pi * self.last_epoch / self.T_max)) / 2
        )


class LinearLR(LRSchedule):
    """lr scaled linearly from start_factor to end_factor over total_iters steps."""

    def __init__(
        self,
        optimizer: Optimizer,
        start_factor: float = 1.0 / 3,
        end_factor: float = 1.0,
        total_iters: int = 5,
    ) -> None:
        if not 0 < start_factor <= 1 or not 0 <= end_factor <= 1:
            raise LuminalError(
                f"LinearLR: need 0 < start_factor <= 1 and 0 <= end_factor <= 1, got "
                f"{start_factor} and {end_factor}"
            )
        self.start_factor = start_factor
        self.end_factor = end_factor
        self.total_iters = total_iters
        super().__init__(optimizer)

    def get_lr(self) -> float:
        if self.last_epoch == 0:
            return self._lr * self.start_factor
        if self._is_initial or self.last_epoch > self.total_iters:
            return self._lr
        change = self.end_factor - self.start_factor
        return self._lr * (
            1.0 + change / (self.total_iters * self.start_factor + (self.last_epoch - 1) * change)
        )

    def closed_form_lr(self) -> float:
        change = self.end_factor - self.start_factor
        done = min(self.total_iters, self.last_epoch)
        return self.base_lr * (self.start_factor + change * done / self.total_iters)


class SequentialLR(LRSchedule):
    """Schedules one after another, switching at `milestones` (torch.optim.lr_scheduler.
    SequentialLR): each later schedule restarts from its closed form at step 0."""

    def __init__(
        self, optimizer: Optimizer, schedules: Sequence[LRSchedule], milestones: Sequence[int]
    ) -> None:
        if not schedules:
            raise LuminalError("SequentialLR: expects at least one schedule")
        if len(milestones) != len(schedules) - 1:
            raise LuminalError(
                f"SequentialLR: {len(schedules)} schedules need {len(schedules) - 1} "
                f"milestones, got {len(milestones)}"
            )
        for index, schedule in enumerate(schedules):
            if schedule.optimizer is not optimizer:
                raise LuminalError(f"SequentialLR: schedule {index} drives another optimizer")
        self.optimizer = optimizer
        self.schedules = list(schedules)
        self.milestones = list(milestones)
        self.last_epoch = 0
        self.base_lr = optimizer.initial_lr if optimizer.initial_lr is not None else optimizer.lr
        optimizer.lr = self.base_lr
        _undo_step(self)
        first = self.schedules[bisect_right(self.milestones, 0)]
        first._initial_step()
        self.last_lr = first.last_lr

    def step(self) -> None:
        self.last_epoch += 1
        index = bisect_right(self.milestones, self.last_epoch)
        schedule = self.schedules[index]
        if index > 0 and self.milestones[index - 1] == self.last_epoch:
            schedule._update_lr(0)
        else:
            schedule.step()
        self.last_lr = schedule.last_lr


def _undo_step(schedule: LRSchedule) -> None:
    """Undo the initial step each inner schedule took when it was built (torch's
    SequentialLR.recursive_undo)."""
    for inner in getattr(schedule, "schedules", []):
        if hasattr(inner, "schedules"):
            _undo_step(inner)
        else:
            inner.last_epoch -= 1


class LinearWarmup(SequentialLR):
    """Linear warm-up from start_factor * lr to lr over `warmup_steps`, then `after`
    (any schedule built on the same optimizer) if given: SequentialLR([LinearLR(...),
    after], [warmup_steps]), so it matches torch built the same way."""

    def __init__(
        self,
        optimizer: Optimizer,
        warmup_steps: int,
        after: LRSchedule | None = None,
        start_factor: float = 1.0 / 3,
    ) -> None:
        if warmup_steps <= 0:
            raise LuminalError(f"LinearWarmup: warmup_steps must be positive, got {warmup_steps}")
        warmup = LinearLR(optimizer, start_factor, 1.0, warmup_steps)
        schedules = [warmup] if after is None else [warmup, after]
        super().__init__(optimizer, schedules, [] if after is None else [warmup_steps])


class OneCycleLR(LRSchedule):
    """torch's OneCycleLR: warm up from max_lr / div_factor to max_lr over pct_start of
    the steps, then anneal to initial_lr / final_div_factor (cosine by default). With
    cycle_momentum (default) the optimizer's momentum (SGD, RMSprop) or beta1 (Adam,
    AdamW, LAMB) cycles inversely between max_momentum and base_momentum."""

    def __init__(
        self,
        optimizer: Optimizer,
        max_lr: float,
        total_steps: int | None = None,
        epochs: int | None = None,
        steps_per_epoch: int | None = None,
        pct_start: float = 0.3,
        anneal_strategy: str = "cos",
        cycle_momentum: bool = True,
        base_momentum: float = 0.85,
        max_momentum: float = 0.95,
        div_factor: float = 25.0,
        final_div_factor: float = 1e4,
        three_phase: bool = False,
    ) -> None:
        if total_steps is None:
            if epochs is None or steps_per_epoch is None:
                raise LuminalError("OneCycleLR: give total_steps, or epochs and steps_per_epoch")
            total_steps = epochs * steps_per_epoch
        if total_steps <= 0:
            raise LuminalError(f"OneCycleLR: total_steps must be positive, got {total_steps}")
        if not 0 <= pct_start <= 1:
            raise LuminalError(f"OneCycleLR: pct_start must be in [0, 1], got {pct_start}")
        if anneal_strategy not in ("cos", "linear"):
            raise LuminalError(
                f"OneCycleLR: anneal_strategy 'cos' or 'linear', got {anneal_strategy!r}"
            )
        self.total_steps = total_steps
        self.anneal = _anneal_cos if anneal_strategy == "cos" else _anneal_linear
        initial = max_lr / div_factor
        self.lrs = {"initial": initial, "max": max_lr, "min": initial / final_div_factor}
        self.momenta = {"max": max_momentum, "base": base_momentum}
        warm_end = float(pct_start * total_steps) - 1
        if three_phase:
            self.phases = [
                (warm_end, "initial", "max", "max", "base"),
                (float(2 * pct_start * total_steps) - 2, "max", "initial", "base", "max"),
                (total_steps - 1, "initial", "min", "max", "max"),
            ]
        else:
            self.phases = [
                (warm_end, "initial", "max", "max", "base"),
                (total_steps - 1, "max", "min", "base", "max"),
            ]
        self.optimizer = optimizer
        self.cycle_momentum = cycle_momentum
        if cycle_momentum:
            self._set_momentum(max_momentum, check=True)
        optimizer.initial_lr = initial
        super().__init__(optimizer)

    def _set_momentum(self, value: float, check: bool = False) -> None:
        opt = self.optimizer
        if hasattr(opt, "betas"):
            opt.betas = (value, opt.betas[1])
        elif getattr(opt, "has_momentum", False):
            opt.momentum = value
        elif check:
            raise LuminalError(
                f"OneCycleLR: cycle_momentum needs an optimizer with betas or built with "
                f"momentum > 0 (its graph has a momentum buffer); got {type(opt).__name__}. "
                "Pass cycle_momentum=False"
            )

    def get_lr(self) -> float:
        step = self.last_epoch
        if step > self.total_steps:
            raise LuminalError(
                f"OneCycleLR: tried to step {step} times; total_steps is {self.total_steps}"
            )
        start = 0.0
        for index, (end, lr_from, lr_to, m_from, m_to) in enumerate(self.phases):
            if step <= end or index == len(self.phases) - 1:
                pct = (step - start) / (end - start)
                lr = self.anneal(self.lrs[lr_from], self.lrs[lr_to], pct)
                if self.cycle_momentum:
                    self._set_momentum(self.anneal(self.momenta[m_from], self.momenta[m_to], pct))
                return lr
            start = end
        raise AssertionError("unreachable")


def _anneal_cos(start: float, end: float, pct: float) -> float:
    return end + (start - end) / 2.0 * (math.cos(math.pi * pct) + 1)


def _anneal_linear(start: float, end: float, pct: float) -> float:
    return (end - start) * pct + start


__all__ = [
    "CosineAnnealingLR",
    "ExponentialLR",
    "LRSchedule",
    "LinearLR",
    "LinearWarmup",
    "MultiStepLR",
    "OneCycleLR",
    "SequentialLR",
    "StepLR",
]
