"""Mixed precision: float16/bfloat16 compute on float32 master weights, with a dynamic
loss scaler (torch.amp.GradScaler's rules).

`autocast(model, "fp16")` makes the model's forward read each float32 parameter through
one graph `Cast` to the compute dtype, so the parameters the optimizer updates stay the
float32 inputs (the master weights) and Autograd's Cast rule brings every gradient back
to float32. `GradScaler` multiplies the loss by a scale held in a graph input, divides
the gradients by it, and builds one `found_inf` scalar (any gradient element inf or NaN,
from comparisons, no select primitive needed). `TrainStep` reads that scalar after each
run: on an overflow it does not apply the optimizer's outputs (parameters and state stay
bit-identical) and the scaler backs off; otherwise the step applies and the scaler may
grow. See docs/training.md ("Mixed precision").
"""

from __future__ import annotations

import contextlib
import math
from collections.abc import Iterator, Sequence
from typing import TYPE_CHECKING, Any

import numpy as np

from luminal.dtype import DType, as_dtype, bfloat16, float16, float32
from luminal.errors import DTypeError, GraphError, LuminalError

if TYPE_CHECKING:
    from luminal.graph import Graph
    from luminal.nn.module import Module
    from luminal.tensor import GraphTensor

_NAMES = {"fp16": float16, "half": float16, "bf16": bfloat16}


def compute_dtype(value: Any) -> DType:
    """ "fp16" / "bf16" (or "float16", lm.float16, ...) as a low-precision float dtype."""
    dtype = _NAMES.get(value) if isinstance(value, str) else None
    if dtype is None:
        try:
            dtype = as_dtype(value)
        except DTypeError:
            dtype = None
    if dtype not in (float16, bfloat16):
        raise DTypeError(
            f"mixed precision: expected 'fp16' or 'bf16' (lm.float16, lm.bfloat16), got {value!r}"
        )
    return dtype


@contextlib.contextmanager
def autocast(model: Module, dtype: Any = "fp16") -> Iterator[DType]:
    """Inside the block, `model`'s float32 parameters read as `param.cast(dtype)` (one
    Cast node per parameter, tied parameters share it); outside, they are restored.
    Build the forward inside the block; cast the inputs yourself (`x.cast(dtype)`), and
    the prediction back to float32 before the loss, as torch.autocast does for losses."""
    dtype = compute_dtype(dtype)
    casts: dict[int, GraphTensor] = {}
    swapped: list[tuple[Module, str, GraphTensor]] = []
    try:
        for _, module in model.named_modules():
            for name, param in module._params.items():
                if getattr(module, name, None) is not param or param.dtype != float32:
                    continue
                cast = casts.get(param.node_id)
                if cast is None:
                    cast = casts[param.node_id] = param.cast(dtype)
                object.__setattr__(module, name, cast)
                swapped.append((module, name, param))
        yield dtype
    finally:
        for module, name, param in reversed(swapped):
            object.__setattr__(module, name, param)


class GradScaler:
    """Dynamic loss scaling with torch.amp.GradScaler's rules: the scale starts at
    `init_scale`; a step whose gradients hold an inf or NaN is skipped and multiplies the
    scale by `backoff_factor`; after `growth_interval` consecutive good steps the scale
    is multiplied by `growth_factor` (kept only if finite). The scale is a float32 graph
    input, so changing it never recompiles. Build with `scale`, `unscale`, `check`
    (TrainStep does it); after each run call `update()`."""

    def __init__(
        self,
        init_scale: float = 2.0**16,
        growth_factor: float = 2.0,
        backoff_factor: float = 0.5,
        growth_interval: int = 2000,
        enabled: bool = True,
    ) -> None:
        problems = [
            f"growth_factor {growth_factor} (need > 1)" * (growth_factor <= 1.0),
            f"backoff_factor {backoff_factor} (need 0 < b < 1)" * (not 0 < backoff_factor < 1),
            f"growth_interval {growth_interval} (need >= 1)" * (growth_interval < 1),
            f"init_scale {init_scale} (need > 0, finite)"
            * (not (init_scale > 0 and math.isfinite(init_scale))),
        ]
        if any(problems):
            raise LuminalError(f"GradScaler: invalid {', '.join(p for p in problems if p)}")
        self.growth_factor = float(growth_factor)
        self.backoff_factor = float(backoff_factor)
        self.growth_interval = int(growth_interval)
        self.enabled = bool(enabled)
        self._scale_value = float(np.float32(init_scale))
        self._growth_tracker = 0
        self.graph: Graph | None = None
        self._scale: GraphTensor | None = None
        self._inv_scale: GraphTensor | None = None
        self.found_inf: GraphTensor | None = None

    # ---------------------------------------------------------------- graph
    def _inputs(self, graph: Graph) -> tuple[GraphTensor, GraphTensor]:
        if self.graph is None:
            self.graph = graph
            self._scale = graph.tensor((), dtype=float32, name="grad_scaler.scale")
            self._inv_scale = graph.tensor((), dtype=float32, name="grad_scaler.inv_scale")
            self._set_scale(self._scale_value)
        elif graph is not self.graph:
            raise GraphError("GradScaler: already used with another graph")
        return self._scale, self._inv_scale  # type: ignore[return-value]

    def scale(self, loss: GraphTensor) -> GraphTensor:
        """The loss in float32 times the scale (the loss itself when disabled)."""
        if not self.enabled:
            return loss
        scale, _ = self._inputs(loss.graph)
        return loss.cast(float32) * scale

    def unscale(self, grads: Sequence[GraphTensor]) -> list[GraphTensor]:
        """Gradients of the scaled loss, in float32, divided by the scale (times the
        float32 reciprocal, which is exact for the powers of two scales usually are)."""
        grads = list(grads)
        if not self.enabled or not grads:
            return [g.cast(float32) for g in grads]
        _, inv_scale = self._inputs(grads[0].graph)
        return [g.cast(float32) * inv_scale for g in grads]

    def check(self, grads: Sequence[GraphTensor]) -> GraphTensor | None:
        """Build (and retrieve) `found_inf`: 1.0 when any element of `grads` is inf or NaN,
        else 0.0. Each element is tested as (-inf < g) * (g < inf), false for NaN."""
        grads = list(grads)
        if not self.enabled or not grads:
            return None
        self._inputs(grads[0].graph)
        from luminal.hl.combine import stack
        from luminal.training.optim import largest_or_zero

        flags = []
        for grad in grads:  # a zero-size gradient has no inf: its flag is 0
            g = grad.cast(float32)
            flags.append(largest_or_zero(1.0 - g.gt(-math.inf) * g.lt(math.inf)))
        found = flags[0] if len(flags) == 1 else stack(flags, 0).max()
        self.found_inf = found.retrieve()
        return self.found_inf

    # ---------------------------------------------------------------- after a run
    def overflowed(self) -> bool:
        """Whether the last run found an inf or NaN gradient (False when disabled)."""
        if not self.enabled or self.found_inf is None:
            return False
        return bool(self.found_inf.numpy() != 0)

    def update(self, found_inf: bool | None = None, new_scale: float | None = None) -> None:
        """torch's `_amp_update_scale_`: back off on an overflow (growth tracker reset),
        else count a good step and grow every `growth_interval` of them. `found_inf`
        defaults to the last run's; `new_scale` sets the scale directly instead."""
        if not self.enabled:
            return
        if new_scale is not None:
            self._set_scale(float(new_scale))
            return
        if found_inf is None:
            found_inf = self.overflowed()
        scale = self._scale_value
        if found_inf:
            self._set_scale(scale * self.backoff_factor)
            self._growth_tracker = 0
            return
        self._growth_tracker += 1
        if self._growth_tracker == self.growth_interval:
            grown = float(np.float32(scale * self.growth_factor))
            if math.isfinite(grown):
                self._set_scale(grown)
            self._growth_tracker = 0

    def _set_scale(self, value: float) -> None:
        """Store the scale as float32, and its reciprocal computed in double (torch)."""
        with np.errstate(over="ignore"):
            scale = np.float32(value)
            self._scale_value = float(scale)
            if self._scale is not None:
                self._scale.set(np.asarray(scale, np.float32))
                self._inv_scale.set(np.asarray(1.0 / float(scale), np.float32))  # type: ignore[union-attr]

    # ---------------------------------------------------------------- torch's accessors
    def get_scale(self) -> float:
        return self._scale_value if self.enabled else 1.0

    def get_growth_tracker(self) -> int:
        return self._growth_tracker

    def is_enabled(self) -> bool:
        return self.enabled

    def state_dict(self) -> dict[str, Any]:
        if not self.enabled:
            return {}
        return {
            "scale": self._scale_value,
            "growth_factor": self.growth_factor,
            "backoff_factor": self.backoff_factor,
            "growth_interval": self.growth_interval,
            "_growth_tracker": self._growth_tracker,
        }

    def load_state_dict(self, state: dict[str, Any]) -> None:
        if not self.enabled:
            return
        self.growth_factor = float(state["growth_factor"])
        self.backoff_factor = float(state["backoff_factor"])
        self.growth_interval = int(state["growth_interval"])
        self._growth_tracker = int(state["_growth_tracker"])
        self._set_scale(float(state["scale"]))

    def __repr__(self) -> str:
        return (
            f"GradScaler(scale={self.get_scale():g}, growth_factor={self.growth_factor:g}, "
            f"backoff_factor={self.backoff_factor:g}, growth_interval={self.growth_interval}, "
            f"enabled={self.enabled})"
        )


__all__ = ["GradScaler", "autocast", "compute_dtype"]
