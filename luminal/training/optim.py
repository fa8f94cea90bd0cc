"""Optimizers as graph constructions: `opt.step_graph(grads)` adds the update to the graph.

Parameters, optimizer state (momentum, moments, the step count) and hyperparameters that
a schedule may change (lr, momentum, betas) are graph inputs. One run of the graph
computes the new parameters and the new state; `opt.apply()` hands those output arrays
to the inputs for the next run (the array objects move, nothing is copied and no
update math runs in Python), so state carries across `execute()` calls and changing the
learning rate never recompiles. The formulas follow `torch.optim` (single-tensor path)
operation by operation. See docs/training.md.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Sequence
from typing import TYPE_CHECKING, Any

import numpy as np

from luminal import ops
from luminal.dtype import float32, int32
from luminal.errors import GraphError, LuminalError, ShapeError, format_shape

if TYPE_CHECKING:
    from luminal.graph import Graph
    from luminal.tensor import GraphTensor

# |x| below this: 1 - e^x from the Taylor series of expm1 (no cancellation near 1)
_EXPM1_SERIES_LIMIT = 0.5
_EXPM1_TERMS = 9


class Optimizer:
    """Base class: parameter checks, scalar hyperparameter inputs, state inputs and the
    carry of new values into inputs. Subclasses implement `_update`. `elementwise`: each
    element's update reads only that element of the parameter, gradient and state, so
    any range of elements can be updated alone (`step_graph_range`)."""

    elementwise = True

    def __init__(self, params: Iterable[GraphTensor], lr: float) -> None:
        self.params: list[GraphTensor] = list(params)
        if not self.params:
            raise LuminalError(f"{type(self).__name__}: got an empty parameter list")
        self.graph: Graph = self.params[0].graph
        for index, param in enumerate(self.params):
            _check_parameter(self, index, param)
        if lr < 0:
            raise LuminalError(f"{type(self).__name__}: invalid learning rate {lr}")
        self.name = type(self).__name__.lower()
        self._scalars: dict[str, GraphTensor] = {}
        self._values: dict[str, float] = {}
        self._states: dict[str, list[GraphTensor]] = {}
        self._carry: list[tuple[GraphTensor, GraphTensor]] = []
        self._state_shapes: dict[int, tuple[int, ...]] = {}  # by index, when not the param's
        self._built = False
        self.initial_lr: float | None = None  # recorded by the first schedule (torch habit)
        self._step = self.graph.tensor((), dtype=int32, name=f"{self.name}.step")
        self._step.set(np.zeros((), np.int32))
        self._scalar("lr", lr)

    # ---------------------------------------------------------------- hyperparameters
    def _scalar(self, name: str, value: float) -> GraphTensor:
        """A float32 scalar input holding a hyperparameter (changing it never recompiles)."""
        tensor = self._scalars.get(name)
        if tensor is None:
            tensor = self.graph.tensor((), dtype=float32, name=f"{self.name}.{name}")
            self._scalars[name] = tensor
        tensor.set(np.asarray(value, dtype=np.float32))
        self._values[name] = float(value)
        return tensor

    @property
    def lr(self) -> float:
        """The learning rate; setting it sets the graph input (no recompilation)."""
        return self._values["lr"]

    @lr.setter
    def lr(self, value: float) -> None:
        self._scalar("lr", float(value))

    def _set_beta(self, name: str, value: float) -> None:
        """beta, 1 - beta and ln(beta), each computed in double precision as torch does
        (1 - beta in float32 would lose digits for beta = 0.999)."""
        if not 0.0 <= value < 1.0:
            raise LuminalError(f"{type(self).__name__}: invalid {name} {value}, need [0, 1)")
        self._scalar(name, value)
        self._scalar(f"one_minus_{name}", 1.0 - value)
        self._scalar(f"log_{name}", math.log(value) if value > 0 else -math.inf)

    @property
    def step_count(self) -> int:
        """Steps applied so far (the value of the step input)."""
        return int(self.graph.input_data[self._step.node_id])

    # ---------------------------------------------------------------- state
    def _state(self, kind: str, index: int) -> GraphTensor:
        """A zero-initialised float32 input shaped like parameter `index` (flat, of the
        updated range's length, under `step_graph_range`)."""
        param = self.params[index]
        label = param.node.op.label
        shape = self._state_shapes.get(index) or tuple(int(d) for d in param.shape)
        tensor = self.graph.tensor(shape, dtype=float32, name=f"{label}.{kind}")
        tensor.set(np.zeros(shape, np.float32))
        self._states.setdefault(kind, [None] * len(self.params))[index] = tensor  # type: ignore[list-item]
        return tensor

    def _carried(self, kind: str, index: int, new: GraphTensor) -> GraphTensor:
        """Register `new` as the next value of state `kind` of parameter `index`."""
        self._carry.append((self._states[kind][index], new))
        return new

    @property
    def state(self) -> dict[str, list[GraphTensor]]:
        """State inputs by kind ("exp_avg", "momentum_buffer", ...), aligned with params;
        read them with `.numpy()`."""
        return {kind: list(tensors) for kind, tensors in self._states.items()}

    # ---------------------------------------------------------------- graph
    def step_graph(self, grads: Sequence[GraphTensor]) -> list[GraphTensor]:
        """Add one optimizer step to the graph: returns the new parameter values (kept),
        aligned with `params`. New state is kept too; call `apply()` after each run."""

        def updates(grads: list[GraphTensor], t: GraphTensor) -> list[GraphTensor]:
            out = []
            for index, (param, grad) in enumerate(zip(self.params, grads, strict=True)):
                p = param.cast(float32)
                new = self._update(index, p, grad.cast(float32), t).cast(param.dtype)
                self._carry.append((param, new))
                out.append(new)
            return out

        return self._add_step(grads, "step_graph", updates)

    def step_graph_range(
        self, grads: Sequence[GraphTensor], start: int, stop: int
    ) -> list[GraphTensor]:
        """Add the update of elements [start, stop) of the parameters laid end to end
        (each flattened, in order), as data-parallel ranks that split the optimizer's
        work do (ZeRO-1): returns the new values of that range, one flat piece per
        parameter it overlaps, in order. The state inputs hold only those elements (flat;
        `state` has None for parameters outside the range). The new parameter values are
        not carried into the inputs (the caller writes them where the parameters live);
        the state and the step are, by `apply()`."""
        if not self.elementwise:
            raise LuminalError(
                f"{type(self).__name__}.step_graph_range: the update is not elementwise"
            )
        total = sum(_numel(p) for p in self.params)
        if not 0 <= start <= stop <= total:
            raise LuminalError(
                f"{type(self).__name__}.step_graph_range: the range [{start}, {stop}) must "
                f"satisfy 0 <= start <= stop <= {total} (the parameters' elements laid end to end)"
            )

        def updates(grads: list[GraphTensor], t: GraphTensor) -> list[GraphTensor]:
            pieces, offset = [], 0
            for index, (param, grad) in enumerate(zip(self.params, grads, strict=True)):
                size = _numel(param)
                lo, hi = max(start, offset) - offset, min(stop, offset + size) - offset
                offset += size
                if lo >= hi:
                    continue
                self._state_shapes[index] = (hi - lo,)
                p = param.reshape((size,))[lo:hi].cast(float32)
                g = grad.reshape((size,))[lo:hi].cast(float32)
                pieces.append(self._update(index, p, g, t).cast(param.dtype))
            return pieces

        return self._add_step(grads, "step_graph_range", updates)

    def _add_step(
        self,
        grads: Sequence[GraphTensor],
        method: str,
        updates: Callable[[list[GraphTensor], GraphTensor], list[GraphTensor]],
    ) -> list[GraphTensor]:
        """The frame both step methods share: checks, the step counter and its carry, the
        float32 step `t` that `updates(grads, t)` builds with, every carried value kept."""
        if self._built:
            raise GraphError(f"{type(self).__name__}.{method}: already called for this graph")
        grads = self._checked(grads, method)
        with self.graph.atomic():
            step = self._step + 1
            self._carry.append((self._step, step))
            out = updates(grads, step.cast(float32))
            for _, new in self._carry:
                new.keep()
        self._built = True
        return out

    def _checked(self, grads: Sequence[GraphTensor], method: str) -> list[GraphTensor]:
        """`grads` as a list, one per parameter, each in this graph and of its parameter's
        shape; checked before anything is added, so a refused call leaves nothing."""
        grads = list(grads)
        if len(grads) != len(self.params):
            raise ShapeError(
                f"{type(self).__name__}.{method}: got {len(grads)} gradients for "
                f"{len(self.params)} parameters"
            )
        for index, (param, grad) in enumerate(zip(self.params, grads, strict=True)):
            if grad.graph is not self.graph:
                raise GraphError(f"{type(self).__name__}: gradient {index} is in another graph")
            if tuple(grad.view.shape) != tuple(param.view.shape):
                raise ShapeError(
                    f"{type(self).__name__}.{method}: gradient {index} has shape "
                    f"{format_shape(grad.view.shape)}, its parameter "
                    f"{format_shape(param.view.shape)}"
                )
        return grads

    def _update(self, index: int, p: GraphTensor, g: GraphTensor, t: GraphTensor) -> GraphTensor:
        raise NotImplementedError

    def _l2_gradient(self, p: GraphTensor, g: GraphTensor) -> GraphTensor:
        """The gradient torch's SGD/Adam/RMSprop step with: negated under `maximize`,
        plus L2 weight decay `weight_decay * p`."""
        if self.maximize:
            g = -g
        return g + p * self.weight_decay if self.weight_decay != 0 else g

    def apply(self) -> None:
        """After `execute()`: make the new parameters and state the inputs of the next
        run by handing over the output arrays (no copy, no math in Python)."""
        if not self._built:
            raise GraphError(f"{type(self).__name__}.apply: call step_graph(grads) first")
        graph = self.graph
        moves = [(target.node_id, output_array(graph, new)) for target, new in self._carry]
        for node_id, array in moves:
            graph.input_data[node_id] = array

    def __repr__(self) -> str:
        values = ", ".join(f"{k}={v:g}" for k, v in self._values.items() if "_" not in k)
        return f"{type(self).__name__}({len(self.params)} params, {values})"


class _Momentum:
    """A momentum hyperparameter held as a graph input (a schedule may change it); a
    graph built without momentum has no buffer, so it cannot be turned on later."""

    def _init_momentum(self, momentum: float) -> None:
        self.has_momentum = momentum != 0
        if self.has_momentum:
            self._scalar("momentum", momentum)

    @property
    def momentum(self) -> float:
        return self._values.get("momentum", 0.0)

    @momentum.setter
    def momentum(self, value: float) -> None:
        if not self.has_momentum:
            raise LuminalError(
                f"{type(self).__name__}: built without momentum; its graph has no momentum buffer"
            )
        self._scalar("momentum", value)


class SGD(_Momentum, Optimizer):
    """torch.optim.SGD: momentum (with dampening, Nesterov), L2 weight decay, maximize.
    The first step's momentum buffer is the gradient itself, as in torch."""

    def __init__(
        self,
        params: Iterable[GraphTensor],
        lr: float = 1e-3,
        momentum: float = 0.0,
        dampening: float = 0.0,
        weight_decay: float = 0.0,
        nesterov: bool = False,
        maximize: bool = False,
    ) -> None:
        super().__init__(params, lr)
        if momentum < 0 or weight_decay < 0:
            raise LuminalError(f"SGD: invalid momentum {momentum} or weight_decay {weight_decay}")
        if nesterov and (momentum <= 0 or dampening != 0):
            raise LuminalError("SGD: Nesterov momentum requires a momentum and zero dampening")
        self.dampening = dampening
        self.weight_decay = weight_decay
        self.nesterov = nesterov
        self.maximize = maximize
        self._init_momentum(momentum)

    def _update(self, index: int, p: GraphTensor, g: GraphTensor, t: GraphTensor) -> GraphTensor:
        g = self._l2_gradient(p, g)
        if self.has_momentum:
            momentum = self._scalars["momentum"]
            buf = self._state("momentum_buffer", index)
            grad_scale: Any = 1.0
            if self.dampening != 0:  # torch: no dampening on the first step (buf = grad)
                grad_scale = 1.0 - self.dampening * self._step.gt(0).cast(float32)
            buf = self._carried("momentum_buffer", index, buf * momentum + g * grad_scale)
            g = g + buf * momentum if self.nesterov else buf
        return p + g * -self._scalars["lr"]


class Adam(Optimizer):
    """torch.optim.Adam (L2 weight decay added to the gradient), amsgrad, maximize.
    Bias corrections 1 - beta^t are computed in the graph from the step input."""

    decoupled = False

    def __init__(
        self,
        params: Iterable[GraphTensor],
        lr: float = 1e-3,
        betas: tuple[float, float] = (0.9, 0.999),
        eps: float = 1e-8,
        weight_decay: float = 0.0,
        amsgrad: bool = False,
        maximize: bool = False,
    ) -> None:
        super().__init__(params, lr)
        if eps < 0 or weight_decay < 0:
            raise LuminalError(f"{type(self).__name__}: invalid eps {eps} or weight_decay")
        self.eps = eps
        self.weight_decay = weight_decay
        self.amsgrad = amsgrad
        self.maximize = maximize
        self.betas = betas

    @property
    def betas(self) -> tuple[float, float]:
        return self._values["beta1"], self._values["beta2"]

    @betas.setter
    def betas(self, value: tuple[float, float]) -> None:
        self._set_beta("beta1", float(value[0]))
        self._set_beta("beta2", float(value[1]))

    def _update(self, index: int, p: GraphTensor, g: GraphTensor, t: GraphTensor) -> GraphTensor:
        s = self._scalars
        lr = s["lr"]
        if self.decoupled:  # AdamW: decay the weights, not the gradient
            g = -g if self.maximize else g
            if self.weight_decay != 0:
                p = p * (1.0 - lr * self.weight_decay)
        else:
            g = self._l2_gradient(p, g)
        m, v = self._state("exp_avg", index), self._state("exp_avg_sq", index)
        m = self._carried("exp_avg", index, m + (g - m) * s["one_minus_beta1"])  # lerp
        v = self._carried("exp_avg_sq", index, v * s["beta2"] + g * g * s["one_minus_beta2"])
        step_size = lr / one_minus_pow(s["log_beta1"], t)
        correction2_sqrt = one_minus_pow(s["log_beta2"], t).sqrt()
        if self.amsgrad:
            v_max = self._state("max_exp_avg_sq", index)
            v = self._carried("max_exp_avg_sq", index, v_max.maximum(v))
        denom = v.sqrt() / correction2_sqrt + self.eps
        return p + m / denom * -step_size


class AdamW(Adam):
    """torch.optim.AdamW: weight decay decoupled from the gradient (p *= 1 - lr * wd)."""

    decoupled = True

    def __init__(
        self,
        params: Iterable[GraphTensor],
        lr: float = 1e-3,
        betas: tuple[float, float] = (0.9, 0.999),
        eps: float = 1e-8,
        weight_decay: float = 1e-2,
        amsgrad: bool = False,
        maximize: bool = False,
    ) -> None:
        super().__init__(params, lr, betas, eps, weight_decay, amsgrad, maximize)


class RMSprop(_Momentum, Optimizer):
    """torch.optim.RMSprop: smoothing `alpha`, `eps` added after the square root,
    optional momentum buffer and centered variance, L2 weight decay."""

    def __init__(
        self,
        params: Iterable[GraphTensor],
        lr: float = 1e-2,
        alpha: float = 0.99,
        eps: float = 1e-8,
        weight_decay: float = 0.0,
        momentum: float = 0.0,
        centered: bool = False,
        maximize: bool = False,
    ) -> None:
        super().__init__(params, lr)
        if not 0 <= alpha <= 1 or eps < 0 or momentum < 0 or weight_decay < 0:
            raise LuminalError(
                f"RMSprop: invalid alpha {alpha}, eps {eps}, momentum {momentum} or "
                f"weight_decay {weight_decay}"
            )
        self.alpha = alpha
        self.eps = eps
        self.weight_decay = weight_decay
        self.centered = centered
        self.maximize = maximize
        self._init_momentum(momentum)

    def _update(self, index: int, p: GraphTensor, g: GraphTensor, t: GraphTensor) -> GraphTensor:
        lr = self._scalars["lr"]
        g = self._l2_gradient(p, g)
        square = self._state("square_avg", index)
        square = square * self.alpha + g * g * (1.0 - self.alpha)
        square = self._carried("square_avg", index, square)
        if self.centered:
            mean = self._state("grad_avg", index)
            mean = self._carried("grad_avg", index, mean + (g - mean) * (1.0 - self.alpha))
            avg = (square - mean * mean).sqrt()
        else:
            avg = square.sqrt()
        avg = avg + self.eps
        if self.has_momentum:
            buf = self._state("momentum_buffer", index)
            buf = buf * self._scalars["momentum"] + g / avg
            buf = self._carried("momentum_buffer", index, buf)
            return p + buf * -lr
        return p + g / avg * -lr


class LAMB(Optimizer):
    """LAMB (You et al. 2019): Adam's bias-corrected direction plus decoupled weight
    decay, scaled per parameter by the trust ratio ||p|| / ||update|| (1 where either
    norm is zero). No gradient clipping inside; use `clip_grad_norm` before."""

    elementwise = False  # the trust ratio reads the norms of whole parameters

    def __init__(
        self,
        params: Iterable[GraphTensor],
        lr: float = 1e-3,
        betas: tuple[float, float] = (0.9, 0.999),
        eps: float = 1e-6,
        weight_decay: float = 0.0,
        bias_correction: bool = True,
    ) -> None:
        super().__init__(params, lr)
        if eps < 0 or weight_decay < 0:
            raise LuminalError(f"LAMB: invalid eps {eps} or weight_decay {weight_decay}")
        self.eps = eps
        self.weight_decay = weight_decay
        self.bias_correction = bias_correction
        self.betas = betas

    betas = Adam.betas

    def _update(self, index: int, p: GraphTensor, g: GraphTensor, t: GraphTensor) -> GraphTensor:
        s = self._scalars
        m, v = self._state("exp_avg", index), self._state("exp_avg_sq", index)
        m = self._carried("exp_avg", index, m * s["beta1"] + g * s["one_minus_beta1"])
        v = self._carried("exp_avg_sq", index, v * s["beta2"] + g * g * s["one_minus_beta2"])
        if self.bias_correction:
            m = m / one_minus_pow(s["log_beta1"], t)
            v = v / one_minus_pow(s["log_beta2"], t)
        update = m / (v.sqrt() + self.eps)
        if self.weight_decay != 0:
            update = update + p * self.weight_decay
        weight_norm = (p * p).sum().sqrt()
        update_norm = (update * update).sum().sqrt()
        both = weight_norm.gt(0) * update_norm.gt(0)
        # a safe denominator where update_norm is 0, so the unused ratio stays finite
        ratio = weight_norm / (update_norm + update_norm.eq(0))
        trust = ratio * both + (1 - both)
        return p + update * (trust * -s["lr"])


# ---------------------------------------------------------------- gradient clipping
def clip_grad_norm(
    grads: Sequence[GraphTensor],
    max_norm: float | GraphTensor,
    norm_type: float = 2.0,
    return_norm: bool = False,
) -> Any:
    """torch.nn.utils.clip_grad_norm_ as graph ops: scale every gradient by
    min(1, max_norm / (total_norm + 1e-6)), the total norm taken over all gradients.
    Returns the clipped gradients (and the total norm with `return_norm=True`)."""
    grads = list(grads)
    if not grads:
        raise LuminalError("clip_grad_norm: got no gradients")
    if norm_type == math.inf:
        norms = [largest_or_zero(g.cast(float32).abs()) for g in grads]
        total = _stack_scalars(norms).max()
    elif norm_type == 2.0:
        norms = [(g.cast(float32) * g.cast(float32)).sum().sqrt() for g in grads]
        stacked = _stack_scalars(norms)
        total = (stacked * stacked).sum().sqrt()
    else:
        p = float(norm_type)
        norms = [g.cast(float32).abs().pow(p).sum().pow(1.0 / p) for g in grads]
        total = _stack_scalars(norms).pow(p).sum().pow(1.0 / p)
    coefficient = (max_norm * (total + 1e-6).reciprocal()).minimum(1.0)
    clipped = [(g * coefficient).cast(g.dtype) for g in grads]
    return (clipped, total) if return_norm else clipped


def clip_grad_value(grads: Sequence[GraphTensor], clip_value: float) -> list[GraphTensor]:
    """torch.nn.utils.clip_grad_value_: clamp every gradient to [-v, v]."""
    return [g.clip(-float(clip_value), float(clip_value)) for g in grads]


# ---------------------------------------------------------------- helpers
def one_minus_pow(log_beta: GraphTensor, t: GraphTensor) -> GraphTensor:
    """1 - beta^t = -expm1(t ln beta), from `ln beta` (an input) and the step `t`. Near
    beta^t = 1 (beta2 = 0.999, small t) the Taylor series of expm1 avoids the cancellation
    of 1 - exp(x) in float32; beta = 0 (ln beta = -inf) gives exactly 1."""
    x = t * log_beta
    small = x.gt(-_EXPM1_SERIES_LIMIT)
    xs = x.maximum(-_EXPM1_SERIES_LIMIT)  # finite where the series is not used
    inner = xs * (1.0 / _EXPM1_TERMS) + 1.0  # x (1 + x/2 (1 + x/3 (... (1 + x/N))))
    for k in range(_EXPM1_TERMS - 1, 1, -1):
        inner = xs * (1.0 / k) * inner + 1.0
    expm1 = xs * inner
    return -expm1 * small + (1.0 - x.exp()) * (1 - small)


def largest_or_zero(x: GraphTensor) -> GraphTensor:
    """The largest element of a tensor of non-negative values (NaN propagates), 0 when it
    has no elements: the inf-norm of an empty gradient. `max` raises over nothing, which
    would stop a whole training graph for one zero-size parameter (PyTorch raises too; the
    norm of an empty vector is 0 for every other p, in PyTorch as here)."""
    if x.ndim == 0:
        return x
    largest = x._reduce(ops.MaxReduce, None, False, "max")  # -inf over nothing
    return largest.maximum(0.0)


def _numel(tensor: GraphTensor) -> int:
    return int(np.prod([int(d) for d in tensor.shape], dtype=np.int64))


def _stack_scalars(values: Sequence[GraphTensor]) -> GraphTensor:
    from luminal.hl.combine import stack

    return stack(list(values), 0)


def _check_parameter(opt: Optimizer, index: int, param: Any) -> None:
    from luminal.tensor import GraphTensor

    name = type(opt).__name__
    if not isinstance(param, GraphTensor):
        raise LuminalError(f"{name}: parameter {index} is {type(param).__name__}, not a tensor")
    if param.graph is not opt.graph:
        raise GraphError(f"{name}: parameter {index} belongs to another Graph")
    if not isinstance(param.node.op, ops.Input) or not param.view.is_identity():
        raise GraphError(
            f"{name}: parameter {index} of shape {param._shape_text()} is a "
            f"{param.node.op.name}; parameters must be graph inputs (cx.tensor)"
        )
    if param.node_id in opt.graph.constant_inputs:  # folded into kernels, never updated
        raise GraphError(
            f"{name}: parameter {index} ('{param.node.op.label}') is a constant matrix; "
            "its data is fixed for the graph's life"
        )
    if not param.dtype.is_float:
        raise LuminalError(f"{name}: parameter {index} has dtype {param.dtype.value}, not float")
    if any(d.as_int() is None for d in param.view.shape):
        raise ShapeError(
            f"{name}: parameter {index} has symbolic shape {param._shape_text()}; "
            "optimizer state needs concrete shapes"
        )


def output_array(graph: Graph, tensor: GraphTensor) -> np.ndarray:
    """The array a run left for `tensor` (the array itself when the view is the
    identity, which it is for the kept elementwise results an optimizer builds)."""
    node_id = tensor.node_id
    array = graph.buffers.get(node_id)
    if array is None:
        array = graph.input_data.get(node_id)
    if array is None:
        raise GraphError(
            "Optimizer.apply: the new values have not been computed; call cx.execute() "
            "after step_graph() and before apply()"
        )
    if tensor.view.is_identity():
        return array
    from luminal.reference.views import read_view

    return np.ascontiguousarray(read_view(array, tensor.view, graph.dims))


__all__ = [
    "LAMB",
    "SGD",
    "Adam",
    "AdamW",
    "Optimizer",
    "RMSprop",
    "clip_grad_norm",
    "clip_grad_value",
    "one_minus_pow",
    "output_array",
]
