"""Which activation a kernel applies to one value, found by evaluating it.

An activation reaches the scheduler as dozens of primitive ops (GELU's erf is a clamp,
two polynomials, a reciprocal and a select), in whatever form the model wrote it
(PyTorch's x (erf(x / sqrt 2) / 2 + 1 / 2), an ONNX export's x / 2 (1 + erf(x / sqrt
2))) and the e-graph rewrote it. Rather than match each form, `probe_activation`
evaluates the kernel's expression with the reference runtime (numpy, the oracle of every
compiled runtime) on values spanning every branch of the candidate (both sides of erf's
saturation, huge, infinite, NaN) and names the candidate it equals to float32 rounding.
"""

from __future__ import annotations

from collections.abc import Collection

import numpy as np

from luminal import ops
from luminal.graph import Graph
from luminal.hl.unary import ERF_DENOMINATOR, ERF_NUMERATOR, ERF_SATURATION, SQRT_HALF
from luminal.reference.kernels import KERNELS, KernelContext
from luminal.reference.views import read_view
from luminal.shape.expr import Expr

MAX_PROBE = 1 << 16  # elements evaluated at most (symbolic dims probed at 1)
MIN_PROBE = 256  # a smaller value would take too many batches to cover the samples
PER_SIGN = 3000  # geometric samples per sign over 1e-30 .. 1e38 (ratio ~1.054 apart)


def gelu_erf(x: np.ndarray, scale: float = 1.0) -> np.ndarray:
    """GELU-erf as luminal builds it (`UnaryOps._gelu_erf`), times `scale`, in float32:
    what gemm.c's LM_ACT_GELU computes (x (erf h + h), h = scale / 2)."""
    x = x.astype(np.float32)
    with np.errstate(all="ignore"):
        t = x * np.float32(SQRT_HALF)
        c = np.where(t < -ERF_SATURATION, np.float32(-ERF_SATURATION), t)
        c = np.where(c > ERF_SATURATION, np.float32(ERF_SATURATION), c).astype(np.float32)
        c2 = c * c
        num = c2 * np.float32(ERF_NUMERATOR[-1]) + np.float32(ERF_NUMERATOR[-2])
        for coefficient in reversed(ERF_NUMERATOR[:-2]):
            num = num * c2 + np.float32(coefficient)
        den = c2 * np.float32(ERF_DENOMINATOR[-1]) + np.float32(ERF_DENOMINATOR[-2])
        for coefficient in reversed(ERF_DENOMINATOR[:-2]):
            den = den * c2 + np.float32(coefficient)
        erf = c * num * (np.float32(1) / den)
        erf = np.where(np.abs(t) > ERF_SATURATION, np.sign(c), erf).astype(np.float32)
        half = np.float32(scale / 2)
        return x * (erf * half + half)


CANDIDATES = {"gelu": gelu_erf}


def probe_activation(
    graph: Graph, head: int, computed: Collection[int], value: int
) -> tuple[str, float] | None:
    """(name, scale): the candidate activation (`CANDIDATES`) times a constant `scale`
    (an ONNX export's GELU may leave its 1/2 to a later op) that node `head` applies to
    node `value`, elementwise, when the kernel computing `computed` (all of them inside
    it, `value` among them) reads nothing else but constants; else None."""
    dims = {name: 1 for d in graph.nodes[head].shape for name in d.variables()}
    dims |= {name: 1 for d in graph.nodes[value].shape for name in d.variables()}
    try:
        shape = tuple(d.evaluate(dims) for d in graph.nodes[value].shape)
    except (KeyError, ValueError):
        return None
    size = int(np.prod(shape))
    if not MIN_PROBE <= size <= MAX_PROBE:
        return None
    points = _samples()
    points = np.concatenate([points, np.zeros(-len(points) % size, np.float32)])
    outputs = []
    for batch in points.reshape(-1, *shape):  # the value's shape, as many times as needed
        got = _evaluate(graph, head, set(computed), value, batch, dims)
        if got is None or got.shape != batch.shape:
            return None
        outputs.append(got.reshape(-1))
    got, samples = np.concatenate(outputs), points
    for name, function in CANDIDATES.items():
        scale = _scale(got, function(samples))
        if scale is not None and _close(got, function(samples, scale)):
            return name, scale
    return None


def _scale(got: np.ndarray, want: np.ndarray) -> float | None:
    """got / want where both are finite and want is not small, if one finite number."""
    with np.errstate(all="ignore"):
        usable = np.isfinite(got) & np.isfinite(want) & (np.abs(want) > 1e-3)
        ratios = got[usable].astype(np.float64) / want[usable]
    if ratios.size == 0 or not np.isfinite(ratios).all() or np.median(ratios) == 0:
        return None
    return float(np.float32(np.median(ratios)))


def _samples() -> np.ndarray:
    """Values over every branch: a dense range, the saturation bounds and beyond,
    infinite and NaN, and magnitudes from 1e-30 to 1e38 about 5% apart, so that a
    function equal to the candidate on [-12, 12] but not elsewhere (a bump on (13, 39))
    is not taken for it. Sampling proves nothing: a difference narrower than the
    spacing goes unseen (the compile's verifying run is the backstop)."""
    special = [0.0, -0.0, np.nan, np.inf, -np.inf, 1e30, -1e30, 1e-30, -1e-30]
    special += [5.5437, -5.5437, 5.5438, -5.5438, 40.0, -40.0]
    dense = np.linspace(-12.0, 12.0, 2048)
    spread = np.geomspace(1e-30, 1e38, PER_SIGN)
    return np.concatenate([np.array(special), dense, spread, -spread]).astype(np.float32)


def _close(got: np.ndarray, want: np.ndarray) -> bool:
    if not np.array_equal(np.isnan(got), np.isnan(want)):
        return False
    finite = ~np.isnan(want)
    with np.errstate(all="ignore"):
        error = np.abs(got[finite].astype(np.float64) - want[finite])
    same = got[finite] == want[finite]  # infinities
    return bool(np.all(same | (error <= 1e-6 + 1e-5 * np.abs(want[finite]))))


def _evaluate(
    graph: Graph,
    head: int,
    computed: set[int],
    value: int,
    samples: np.ndarray,
    dims: dict[str, int],
) -> np.ndarray | None:
    """head's value with `value` set to `samples`, every other node of `computed`
    evaluated by the reference kernels; None if it reads another buffer."""
    values: dict[int, np.ndarray] = {value: samples}

    def visit(node_id: int) -> np.ndarray | None:
        if node_id in values:
            return values[node_id]
        node = graph.nodes[node_id]
        if node_id not in computed and not isinstance(node.op, ops.Constant):
            return None  # a buffer: not a function of `value` alone
        if isinstance(node.op, ops.Input | ops.Contract | ops.Gather | ops.Scatter | ops.Iota):
            return None  # not elementwise in `value`, or varying with the position
        if isinstance(node.op, ops.Constant) and isinstance(node.op.value, Expr):
            return None  # a function of the dims, which are probed at 1 only
        kernel = KERNELS.get(type(node.op))
        if kernel is None:
            return None
        inputs = []
        for edge in node.inputs:
            source = visit(edge.source)
            if source is None:
                return None
            inputs.append(read_view(source, edge.view, dims))
        dtypes = [graph.nodes[e.source].dtype for e in node.inputs]
        with np.errstate(all="ignore"):
            result = kernel(node.op, inputs, KernelContext(node, dims, dtypes))
        values[node_id] = np.ascontiguousarray(result)
        return values[node_id]

    return visit(head)
