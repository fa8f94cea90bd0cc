"""RNN, GRU and LSTM, unrolled over the sequence length (known at load).

The input projection of every time step is one matmul before the loop; each step adds
its recurrent matmul and applies the gates. A reverse direction runs forward over the
input with each batch entry's first `sequence_lens[b]` steps reversed (a gather, as
ReverseSequence), and its outputs are reversed back the same way. Past a batch entry's
length the state is carried unchanged and Y is 0, as the spec says.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from luminal.onnx.context import NodeContext
from luminal.onnx.ops.indexing import gather_along
from luminal.tensor import GraphTensor

Rule = Callable[[NodeContext], object]
Activation = Callable[[GraphTensor], GraphTensor]

_GATES = {"RNN": 1, "GRU": 3, "LSTM": 4}
_DEFAULTS = {"RNN": ["Tanh"], "GRU": ["Sigmoid", "Tanh"], "LSTM": ["Sigmoid", "Tanh", "Tanh"]}
_PARAMETERS = {  # activation -> (default alpha, default beta); None: takes none
    "Affine": (1.0, 0.0),
    "LeakyRelu": (0.01, None),
    "ThresholdedRelu": (1.0, None),
    "ScaledTanh": (1.0, 1.0),
    "HardSigmoid": (0.2, 0.5),
    "Elu": (1.0, None),
}


def _activation(name: str, alpha: float | None, beta: float | None) -> Activation:
    simple: dict[str, Activation] = {
        "Tanh": lambda x: x.tanh(),
        "Sigmoid": lambda x: x.sigmoid(),
        "Relu": lambda x: x.relu(),
        "Softsign": lambda x: x / (x.abs() + 1.0),
        "Softplus": lambda x: (x.exp() + 1.0).log(),
    }
    if name in simple:
        return simple[name]
    if name == "Affine":
        return lambda x: x * alpha + beta
    if name == "LeakyRelu":
        return lambda x: x.leaky_relu(alpha)
    if name == "ThresholdedRelu":
        return lambda x: x * x.gt(alpha)
    if name == "ScaledTanh":
        return lambda x: (x * beta).tanh() * alpha
    if name == "HardSigmoid":
        return lambda x: (x * alpha + beta).clip(0.0, 1.0)
    if name == "Elu":
        return lambda x: x.relu() + ((x.minimum(0.0)).exp() - 1.0) * alpha
    raise ValueError(f"activation {name!r}")


def _activations(ctx: NodeContext, directions: int) -> list[list[Activation]]:
    """Per direction, the activation functions (f, g, h order) with their alpha/beta."""
    op = ctx.node.op_type
    count = len(_DEFAULTS[op])
    names = list(ctx.attr("activations") or _DEFAULTS[op] * directions)
    alphas = list(ctx.attr("activation_alpha") or [])
    betas = list(ctx.attr("activation_beta") or [])
    functions = []
    for name in names:
        alpha, beta = _PARAMETERS.get(name, (None, None))
        if name in _PARAMETERS:
            alpha = alphas.pop(0) if alphas else alpha
            if beta is not None:
                beta = betas.pop(0) if betas else beta
        try:
            functions.append(_activation(name, alpha, beta))
        except ValueError:
            raise ctx.unsupported(f"activation {name!r}") from None
    if len(functions) < count * directions:
        functions = functions * directions
    return [functions[d * count : (d + 1) * count] for d in range(directions)]


def _reverse_steps(x: GraphTensor, lens: GraphTensor | None) -> GraphTensor:
    """x (seq, batch, ...) with each batch entry's first lens[b] steps reversed (all
    steps when lens is None)."""
    graph = x.graph
    seq, batch = x.view.shape[0], x.view.shape[1]
    shape = (seq, batch, *([1] * (x.ndim - 2)))
    t = graph.arange(seq).reshape((seq,) + (1,) * (x.ndim - 1)).expand(shape)
    if lens is None:
        source = t * -1 + (int(seq.as_int()) - 1)
    else:
        n = lens.reshape((1, batch) + (1,) * (x.ndim - 2)).expand(shape)
        source = t + t.lt(n) * (n - 1 - t * 2)
    return gather_along(x, source.expand(x.view.shape), 0)


class _Cell:
    """One direction's weights and gate functions; `step` maps (x projection, state)
    to the new state, whose first entry is H."""

    def __init__(self, ctx: NodeContext, direction: int, functions: list[Activation]):
        self.op = ctx.node.op_type
        self.hidden = ctx.attr("hidden_size")
        gates = _GATES[self.op]
        self.recurrent = ctx.tensor(2)[direction].transpose(0, 1)  # (hidden, gates*hidden)
        self.functions = functions
        self.clip = ctx.attr("clip")
        self.linear_before_reset = bool(ctx.attr("linear_before_reset", 0))
        self.recurrent_bias = None
        if ctx.has(3):
            bias = ctx.tensor(3)[direction]
            self.input_bias = bias.slice([(0, gates * self.hidden)])
            self.recurrent_bias = bias.slice([(gates * self.hidden, 2 * gates * self.hidden)])
        self.peepholes = ctx.tensor(7)[direction] if self.op == "LSTM" and ctx.has(7) else None

    def _part(self, t: GraphTensor, index: int) -> GraphTensor:
        ranges: list[Any] = [None] * (t.ndim - 1) + [
            (index * self.hidden, (index + 1) * self.hidden)
        ]
        return t.slice(ranges)

    def _clipped(self, t: GraphTensor) -> GraphTensor:
        return t if self.clip is None else t.clip(-self.clip, self.clip)

    def step(self, projected: GraphTensor, state: list[GraphTensor]) -> list[GraphTensor]:
        h = state[0]
        recurrent = h.matmul(self.recurrent)
        if self.recurrent_bias is not None and self.op != "GRU":
            recurrent = recurrent + self.recurrent_bias
        if self.op == "RNN":
            return [self.functions[0](self._clipped(projected + recurrent))]
        if self.op == "GRU":
            return [self._gru(projected, recurrent, h)]
        return self._lstm(projected, recurrent, state)

    def _gru(self, projected: GraphTensor, recurrent: GraphTensor, h: GraphTensor):
        f, g = self.functions
        rb = self.recurrent_bias
        rz = recurrent if rb is None else recurrent + rb
        z = f(self._clipped(self._part(projected, 0) + self._part(rz, 0)))
        r = f(self._clipped(self._part(projected, 1) + self._part(rz, 1)))
        rh_bias = None if rb is None else self._part(rb, 2)
        if self.linear_before_reset:
            candidate = self._part(recurrent, 2)
            candidate = candidate if rh_bias is None else candidate + rh_bias
            inner = self._part(projected, 2) + r * candidate
        else:
            weight = self._part(self.recurrent, 2)
            inner = self._part(projected, 2) + (r * h).matmul(weight)
            inner = inner if rh_bias is None else inner + rh_bias
        candidate = g(self._clipped(inner))
        return (1.0 - z) * candidate + z * h

    def _lstm(self, projected: GraphTensor, recurrent: GraphTensor, state: list[GraphTensor]):
        f, g, h_fn = self.functions
        c = state[1]
        total = projected + recurrent
        i_pre, o_pre = self._part(total, 0), self._part(total, 1)
        f_pre, c_pre = self._part(total, 2), self._part(total, 3)
        if self.peepholes is not None:
            i_pre = i_pre + c * self._part(self.peepholes, 0)
            f_pre = f_pre + c * self._part(self.peepholes, 2)
        i, forget = f(self._clipped(i_pre)), f(self._clipped(f_pre))
        new_c = forget * c + i * g(self._clipped(c_pre))
        if self.peepholes is not None:
            o_pre = o_pre + new_c * self._part(self.peepholes, 1)
        o = f(self._clipped(o_pre))
        return [o * h_fn(new_c), new_c]


def _initial(ctx: NodeContext, index: int, direction: int, batch: Any, hidden: int):
    if ctx.has(index):
        return ctx.tensor(index)[direction]
    x = ctx.tensor(0)
    return x.graph.constant(0.0, x.dtype).expand((batch, hidden))


def _direction(
    ctx: NodeContext, x: GraphTensor, direction: int, reverse: bool, functions, lens
) -> tuple[GraphTensor, list[GraphTensor]]:
    """Run one direction over x (seq, batch, input): Y (seq, batch, hidden) and the
    final state."""
    cell = _Cell(ctx, direction, functions)
    seq, batch = int(x.view.shape[0].as_int()), x.view.shape[1]
    source = _reverse_steps(x, lens) if reverse else x
    projected = source.matmul(ctx.tensor(1)[direction].transpose(0, 1))
    if ctx.has(3):
        projected = projected + cell.input_bias
    state = [_initial(ctx, 5, direction, batch, cell.hidden)]
    if cell.op == "LSTM":
        state.append(_initial(ctx, 6, direction, batch, cell.hidden))
    outputs = []
    for t in range(seq):
        new = cell.step(projected[t], state)
        if lens is not None:
            live = lens.gt(t).cast(x.dtype).reshape((batch, 1))
            new = [n * live + s * (1.0 - live) for n, s in zip(new, state, strict=True)]
            outputs.append(new[0] * live)
        else:
            outputs.append(new[0])
        state = new
    y = _stack(outputs)
    return (_reverse_steps(y, lens) if reverse else y), state


def _stack(steps: list[GraphTensor]) -> GraphTensor:
    from luminal.hl.combine import concat

    return concat([s.unsqueeze(0) for s in steps], 0)


def _recurrent(ctx: NodeContext) -> list[GraphTensor]:
    x = ctx.tensor(0)
    layout = ctx.attr("layout", 0)
    if layout:
        x = x.transpose(0, 1)
    if ctx.attr("input_forget", 0):
        raise ctx.unsupported("input_forget=1")
    mode = ctx.attr("direction", "forward")
    reverse = {"forward": [False], "reverse": [True], "bidirectional": [False, True]}[mode]
    functions = _activations(ctx, len(reverse))
    lens = ctx.tensor(4).cast("int32") if ctx.has(4) else None
    results = [
        _direction(ctx, x, d, backward, functions[d], lens) for d, backward in enumerate(reverse)
    ]
    y = _stack_directions([r[0] for r in results], 1)  # (seq, dirs, batch, hidden)
    finals = [_stack_directions([r[1][k] for r in results], 0) for k in range(len(results[0][1]))]
    if layout:
        y = y.permute((2, 0, 1, 3))
        finals = [f.transpose(0, 1) for f in finals]
    return [y, *finals]


def _stack_directions(values: list[GraphTensor], axis: int) -> GraphTensor:
    from luminal.hl.combine import concat

    return concat([v.unsqueeze(axis) for v in values], axis)


RULES: dict[str, Rule] = {"RNN": _recurrent, "GRU": _recurrent, "LSTM": _recurrent}
