"""Random graphs for differential tests of compilers.

A hypothesis strategy draws a `Recipe`: plain data (input shapes, a list of steps, which
values to retrieve, sizes for the symbolic dim "n", a data seed). `build(recipe)` turns it
into a `GraphCase` deterministically, using only the public GraphTensor API, so the same
recipe can be built twice: `assert_compiler_preserves` compiles one copy, keeps the other
on the reference runtime, and compares them for every size of "n" and fresh input data.

Each step names an op family and three small ints: `operand` picks a value from the pool
of values built so far (0 is the most recent, so shrinking gives a chain), `other` picks a
second operand, and `param` seeds the family's own choices (axes, sizes, which pattern).
A step that does not fit its operand (a permute of a vector) falls back to `sin`.

Values stay finite and moderate: each value carries an upper bound on its magnitude,
`exp2` only sees bounded arguments, divisors and logarithms are kept away from zero, and
a value whose bound grows past `BOUND_LIMIT` is scaled down by a power of two. Shapes stay
small (at most `MAX_NDIM` dims and `MAX_ELEMENTS` elements) and never empty.
"""

from __future__ import annotations

import itertools
import math
import random
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
from hypothesis import strategies as st

import luminal as lm
from luminal.errors import ShapeError
from luminal.hl.binary import broadcast_shapes
from luminal.shape.expr import Expr, sym

SYMBOLIC_DIM = "n"
MAX_NDIM = 4
MAX_ELEMENTS = 2048
BOUND_LIMIT = 1e3
INPUT_LOW, INPUT_HIGH = -2.0, 2.0
SQRT_OFFSET = 1 / 64  # sqrt(|x| + c): a rounding difference near 0 is not blown up
EXP2_ARG_LIMIT = 8.0
SCALARS = (0.5, -1.25, 2.0, 3.0, -0.75, 1.5)
MOD_DIVISORS = (0.75, 1.5, 2.0, 3.0)
PAD_VALUES = (1.0, -0.5)

OPS = (
    "unary",
    "binary",
    "reduce",
    "permute",
    "slice",
    "pad",
    "expand",
    "reshape",
    "pool",
    "squeeze",
    "matmul",
    "fold",
    "cse",
    "half",
    "graph_break",
)


# ---------------------------------------------------------------- recipes (plain data)
@dataclass(frozen=True)
class Step:
    """One op of a recipe: the family, the operand (0 = most recent value), a second
    operand, and a seed for the family's choices."""

    op: str
    operand: int = 0
    other: int = 0
    param: int = 0


@dataclass(frozen=True)
class Recipe:
    """Everything `build` needs. `dim_sizes` are the sizes of "n" (the first is used at
    build time; empty when no input is symbolic). `output_picks` choose extra outputs
    among the computed values, besides the last one."""

    input_shapes: tuple[tuple[int | str, ...], ...]
    steps: tuple[Step, ...]
    output_picks: tuple[int, ...] = ()
    dim_sizes: tuple[int, ...] = ()
    data_seed: int = 0

    @property
    def symbolic(self) -> bool:
        return bool(self.dim_sizes)


@dataclass(eq=False)
class GraphCase:
    """A built recipe: the graph, its inputs (data set for the first size of "n") and its
    retrieved outputs. `dim_sizes` maps each symbolic dim to all of its sizes."""

    recipe: Recipe
    graph: lm.Graph = field(repr=False)
    inputs: list[lm.GraphTensor] = field(repr=False)
    outputs: list[lm.GraphTensor] = field(repr=False)
    dim_sizes: dict[str, tuple[int, ...]] = field(default_factory=dict)

    def set_inputs(self, sizes: Mapping[str, int] | None = None, variant: int = 0) -> None:
        """Give every input fresh data for `sizes` (default: the first size of each dim);
        the data depends only on the recipe's seed, the sizes and `variant`."""
        sizes = dict(sizes or {name: options[0] for name, options in self.dim_sizes.items()})
        for name, size in sizes.items():
            self.graph.set_dim(name, size)
        for tensor, data in zip(self.inputs, input_data(self.recipe, sizes, variant), strict=True):
            tensor.set(data)

    def run(self) -> list[np.ndarray]:
        """Execute and return every output as a numpy array."""
        self.graph.execute()
        return [out.numpy() for out in self.outputs]

    def rounds(self) -> list[tuple[dict[str, int], int]]:
        """(sizes, data variant) to check: the first sizes, every other size, then the
        first sizes again with new data (a compiled graph must not bake data in)."""
        first = {name: options[0] for name, options in self.dim_sizes.items()}
        rounds = [(first, 0)]
        for name, options in self.dim_sizes.items():
            for size in options[1:]:
                rounds.append(({**first, name: size}, len(rounds)))
        rounds.append((first, len(rounds)))
        return rounds


def input_data(recipe: Recipe, sizes: Mapping[str, int], variant: int = 0) -> list[np.ndarray]:
    """Uniform float32 data in [INPUT_LOW, INPUT_HIGH] for each input at `sizes`."""
    key = [recipe.data_seed, variant, *(sizes[name] for name in sorted(sizes))]
    rng = np.random.default_rng(key)
    arrays = []
    for shape in recipe.input_shapes:
        concrete = tuple(sizes[d] if isinstance(d, str) else d for d in shape)
        arrays.append(rng.uniform(INPUT_LOW, INPUT_HIGH, size=concrete).astype(np.float32))
    return arrays


# ---------------------------------------------------------------- building
@dataclass
class _Value:
    """A tensor in the pool and an upper bound on its magnitude."""

    tensor: lm.GraphTensor
    bound: float


class _Builder:
    def __init__(self, recipe: Recipe) -> None:
        self.recipe = recipe
        self.sizes = [{SYMBOLIC_DIM: s} for s in recipe.dim_sizes] or [{}]
        self.graph = lm.Graph()
        self.inputs = [
            self.graph.tensor(shape, name=f"x{i}") for i, shape in enumerate(recipe.input_shapes)
        ]
        self.values = [_Value(t, max(abs(INPUT_LOW), abs(INPUT_HIGH))) for t in self.inputs]

    # ------------------------------------------------------------ shape helpers
    def size_range(self, dim: Expr) -> tuple[int, int]:
        """The smallest and largest value of `dim` over the recipe's sizes of "n"."""
        values = [dim.evaluate(env) for env in self.sizes]
        return min(values), max(values)

    def elements(self, shape: Sequence[Expr]) -> int:
        return max(math.prod(d.evaluate(env) for d in shape) for env in self.sizes)

    def fits(self, shape: Sequence[Expr]) -> bool:
        return len(shape) <= MAX_NDIM and self.elements(shape) <= MAX_ELEMENTS

    def pick(self, index: int) -> _Value:
        return self.values[-1 - index % len(self.values)]

    # ------------------------------------------------------------ value helpers
    def scaled(self, value: _Value) -> _Value:
        """Scale by a power of two (exact) when the bound has grown too large."""
        if value.bound <= BOUND_LIMIT:
            return value
        scale = 2.0 ** -math.ceil(math.log2(value.bound))
        return _Value(value.tensor * scale, value.bound * scale)

    def small(self, value: _Value) -> _Value:
        """A value that exp2 may take: itself, or 2 sin(x) when its bound is large."""
        if value.bound <= EXP2_ARG_LIMIT:
            return value
        return _Value(value.tensor.sin() * 2.0, 2.0)

    def fit(self, value: _Value, shape: Sequence[Expr]) -> _Value:
        """Reduce `value` until it broadcasts against `shape`: extra leading dims and
        dims that differ from the target (and are not 1) are summed (kept as 1)."""
        t, bound = value.tensor, value.bound
        while t.ndim > len(shape):
            bound *= self.size_range(t.view.shape[0])[1]
            t = t.sum(0)
        offset = len(shape) - t.ndim
        for axis in range(t.ndim):
            dim = t.view.shape[axis]
            if dim != 1 and dim != shape[offset + axis]:
                bound *= self.size_range(dim)[1]
                t = t.sum(axis, keepdim=True)
        return _Value(t, bound)

    def other_operand(self, value: _Value, index: int) -> _Value:
        """A pool value to combine with `value`: as is when the two broadcast to a
        small shape, else reduced to `value`'s shape."""
        other = self.pick(index)
        try:
            shape = broadcast_shapes(value.tensor.view.shape, other.tensor.view.shape, "fit")
        except ShapeError:
            shape = None
        if shape is not None and self.fits(shape):
            return other
        return self.fit(other, value.tensor.view.shape)

    # ------------------------------------------------------------ op families
    def unary(self, value: _Value, step: Step, rnd: random.Random) -> _Value:
        x, b = value.tensor, value.bound
        kind = rnd.randrange(5)
        if kind == 0:
            small = self.small(value)
            return _Value(small.tensor.exp2(), 2.0**small.bound)
        if kind == 1:
            return _Value((x.abs() + 0.5).log2(), max(1.0, math.log2(b + 0.5)))
        if kind == 2:
            return _Value(x.sin(), 1.0)
        if kind == 3:
            return _Value((x.abs() + SQRT_OFFSET).sqrt(), math.sqrt(b + SQRT_OFFSET))
        return _Value((x.abs() + 0.5).reciprocal(), 2.0)

    def binary(self, value: _Value, step: Step, rnd: random.Random) -> _Value:
        x, b = value.tensor, value.bound
        kind = rnd.randrange(5)
        use_scalar = rnd.random() < 0.35
        if kind == 3:  # mod by a positive divisor
            if use_scalar:
                divisor = rnd.choice(MOD_DIVISORS)
                if rnd.random() < 0.3:  # integer modulo
                    modulus = int(divisor + 1)
                    return _Value((x.cast(lm.int32) % modulus).cast(lm.float32), modulus)
                return _Value(x % divisor, divisor)
            other = self.other_operand(value, step.other)
            return _Value(x % (other.tensor.abs() + 0.5), other.bound + 0.5)
        if use_scalar:
            scalar = rnd.choice(SCALARS)
            reverse = rnd.random() < 0.5
            if kind == 0:
                return _Value(scalar + x if reverse else x + scalar, b + abs(scalar))
            if kind == 1:
                return _Value(scalar * x if reverse else x * scalar, b * abs(scalar))
            if kind == 2:
                return _Value(scalar - x if reverse else x - scalar, b + abs(scalar))
            return _Value(x.gt(scalar) if reverse else x.lt(scalar), 1.0)
        other = self.other_operand(value, step.other)
        y, c = other.tensor, other.bound
        if kind == 0:
            return _Value(x + y, b + c)
        if kind == 1:
            return _Value(x * y, b * c)
        if kind == 2:
            return _Value(x - y, b + c)
        return _Value(x.lt(y), 1.0)

    def reduce(self, value: _Value, step: Step, rnd: random.Random) -> _Value | None:
        x = value.tensor
        if x.ndim == 0:
            return None
        axes = tuple(a for a in range(x.ndim) if rnd.random() < 0.5) or (rnd.randrange(x.ndim),)
        if rnd.random() < 0.3:  # negative axes count from the end
            axes = tuple(a - x.ndim for a in axes)
        keepdim = rnd.random() < 0.4
        if rnd.random() < 0.5:
            return _Value(x.max(axes if len(axes) > 1 else axes[0], keepdim), value.bound)
        count = math.prod(self.size_range(x.view.shape[a])[1] for a in axes)
        return _Value(x.sum(axes, keepdim), value.bound * count)

    def permute(self, value: _Value, step: Step, rnd: random.Random) -> _Value | None:
        x = value.tensor
        if x.ndim < 2:
            return None
        orders = list(itertools.permutations(range(x.ndim)))
        return _Value(x.permute(orders[1 + rnd.randrange(len(orders) - 1)]), value.bound)

    def slice(self, value: _Value, step: Step, rnd: random.Random) -> _Value | None:
        x = value.tensor
        if x.ndim == 0:
            return None
        ranges: list[Any] = []
        for dim in x.view.shape:
            if rnd.random() < 0.4:
                ranges.append(None)
                continue
            known = dim.as_int()
            if known is None:  # symbolic: start below the smallest size, open end
                smallest = self.size_range(dim)[0]
                ranges.append(slice(rnd.randrange(smallest), None, rnd.randint(1, 2)))
                continue
            start = rnd.randrange(known)
            stop = rnd.randint(start + 1, known)
            if rnd.random() < 0.3:  # python-style negative bounds
                start, stop = start - known, (stop - known) or None
            ranges.append(slice(start, stop, rnd.randint(1, 3)))
        if rnd.random() < 0.5:
            return _Value(x.slice(ranges), value.bound)
        return _Value(x[tuple(r if r is not None else slice(None) for r in ranges)], value.bound)

    def pad(self, value: _Value, step: Step, rnd: random.Random) -> _Value | None:
        x = value.tensor
        if x.ndim == 0:
            return None
        padding = [(rnd.randint(0, 2), rnd.randint(0, 2)) for _ in range(x.ndim)]
        shape = [d + lo + hi for d, (lo, hi) in zip(x.view.shape, padding, strict=True)]
        if not self.fits(shape):
            return None
        fill = rnd.choice(PAD_VALUES) if rnd.random() < 0.3 else 0.0
        return _Value(x.pad(padding, fill), max(value.bound, abs(fill)))

    def expand(self, value: _Value, step: Step, rnd: random.Random) -> _Value | None:
        x = value.tensor
        shape = list(x.view.shape)
        ones = [i for i, d in enumerate(shape) if d == 1]
        if ones and rnd.random() < 0.5:  # stretch size-1 dims
            target: list[Any] = list(shape)
            for i in ones:
                target[i] = rnd.randint(2, 4)
            if not self.fits([sym(d) for d in target]):
                return None
            return _Value(x.expand(target), value.bound)
        if x.ndim >= MAX_NDIM:
            return None
        sizes: list[Any] = [1, 2, 3] + ([SYMBOLIC_DIM] if self.recipe.symbolic else [])
        size = rnd.choice(sizes)
        axis = rnd.randint(0, x.ndim)
        if not self.fits([*shape, sym(size)]):
            return None
        if rnd.random() < 0.5 and axis == 0:  # numpy-style new leading dim
            return _Value(x.expand([size, *shape]), value.bound)
        return _Value(x.expand_dim(axis, size), value.bound)

    def reshape(self, value: _Value, step: Step, rnd: random.Random) -> _Value | None:
        x = value.tensor
        shape = list(x.view.shape)
        kind = rnd.choice((0, 1, 1, 2, 3))
        if kind == 0 and x.ndim >= 2:  # merge two neighbours (a copy if they do not merge)
            axis = rnd.randrange(x.ndim - 1)
            return _Value(x.merge_dims(axis, axis + 1), value.bound)
        if kind == 1 and x.ndim >= 2:  # a permuted view flattened: needs a Contiguous
            return _Value(x.transpose(-1, -2).reshape(-1), value.bound)
        if kind == 2 and x.ndim >= 1:
            return _Value(x.reshape(-1), value.bound)
        if x.ndim == 0 or x.ndim >= MAX_NDIM:
            return None
        axis = rnd.randrange(x.ndim)  # split a dim
        known = shape[axis].as_int()
        factors = [f for f in range(2, known or 0) if known % f == 0]
        if factors:
            return _Value(x.split_dims(axis, rnd.choice(factors)), value.bound)
        ones = [shape[axis], 1] if rnd.random() < 0.5 else [1, shape[axis]]
        return _Value(x.reshape(shape[:axis] + ones + shape[axis + 1 :]), value.bound)

    def pool(self, value: _Value, step: Step, rnd: random.Random) -> _Value | None:
        x = value.tensor
        if x.ndim == 0 or x.ndim >= MAX_NDIM:
            return None
        last = x.view.shape[-1]
        smallest = self.size_range(last)[0]
        symbolic = last.as_int() is None
        kernel = rnd.randint(1, min(smallest, 2 if symbolic else 4))
        dilation = 1 if symbolic or kernel == 1 else rnd.randint(1, (smallest - 1) // (kernel - 1))
        stride = rnd.randint(1, 3)
        if self.elements(x.view.shape) * kernel > MAX_ELEMENTS:
            return None
        return _Value(x.pool_last_dim(kernel, stride, dilation), value.bound)

    def squeeze(self, value: _Value, step: Step, rnd: random.Random) -> _Value | None:
        x = value.tensor
        ones = [i for i, d in enumerate(x.view.shape) if d == 1]
        if ones and rnd.random() < 0.6:
            if rnd.random() < 0.5:
                return _Value(x.squeeze(), value.bound)
            return _Value(x.squeeze(rnd.choice(ones)), value.bound)
        if x.ndim >= MAX_NDIM:
            return None
        return _Value(x.unsqueeze(rnd.randint(-x.ndim - 1, x.ndim)), value.bound)

    def matmul(self, value: _Value, step: Step, rnd: random.Random) -> _Value | None:
        a = value.tensor
        if a.ndim == 0:
            return None
        k = a.view.shape[-1]
        partners = [v for v in reversed(self.values) if _matmul_shape(a, v.tensor) is not None]
        partners = [v for v in partners if self.fits(_matmul_shape(a, v.tensor))]
        if partners and rnd.random() < 0.8:
            other = partners[step.other % len(partners)]
            b = other.tensor
            bound = other.bound
        else:  # a @ a^T (or a dot a) always fits
            b = a.transpose(-1, -2) if a.ndim >= 2 else a
            bound = value.bound
            if not self.fits(_matmul_shape(a, b)):
                return None
        return _Value(a @ b, value.bound * bound * self.size_range(k)[1])

    def fold(self, value: _Value, step: Step, rnd: random.Random) -> _Value | None:
        """Patterns a constant folder or arithmetic simplifier should remove."""
        x, b = value.tensor, value.bound
        kind = rnd.randrange(8)
        if kind == 0:
            return _Value(x + 0.0 if rnd.random() < 0.5 else 0.0 + x, b)
        if kind == 1:
            return _Value(x * 1.0 if rnd.random() < 0.5 else 1.0 * x, b)
        if kind == 2:  # x * 0 is 0 only for ints (a float x may be inf or NaN)
            zero = (x.cast(lm.int32) * 0).cast(lm.float32)
            return _Value(x + zero, b)
        if kind == 3:
            return _Value(x.reciprocal().reciprocal(), b)
        if kind == 4:
            small = self.small(value)
            return _Value(small.tensor.exp2().log2(), small.bound)
        if kind == 5:
            positive = x.abs() + 0.5
            return _Value(positive.log2().exp2(), b + 0.5)
        if kind == 6:  # a size-1 axis reduced away
            axis = rnd.randint(0, x.ndim)
            widened = x.unsqueeze(axis)
            return _Value(widened.sum(axis) if rnd.random() < 0.5 else widened.max(axis), b)
        ones = [i for i, d in enumerate(x.view.shape) if d == 1]
        if ones:
            return _Value(x.sum(rnd.choice(ones), keepdim=rnd.random() < 0.5), b)
        return _Value((x * -1.0) * -1.0, b)

    def cse(self, value: _Value, step: Step, rnd: random.Random) -> _Value | None:
        """The same subexpression built twice and added: CSE should keep one copy."""
        family = rnd.choice([op for op in OPS if op not in ("cse", "graph_break")])
        sub = Step(family, step.operand, step.other, rnd.randrange(1 << 16))
        first, second = self.apply(sub), self.apply(sub)
        if first is None or second is None:
            return None
        return _Value(first.tensor + second.tensor, first.bound + second.bound)

    def half(self, value: _Value, step: Step, rnd: random.Random) -> _Value | None:
        """A round trip through float16, sometimes with an op computed in float16."""
        y = value.tensor.cast(lm.float16)
        bound = value.bound
        kind = rnd.randrange(3)
        if kind == 1:
            y, bound = y * 0.5, bound * 0.5
        elif kind == 2:
            y, bound = y.sin(), 1.0
        return _Value(y.cast(lm.float32), bound)

    def graph_break(self, value: _Value, step: Step, rnd: random.Random) -> _Value | None:
        return _Value(value.tensor.graph_break(), value.bound)

    # ------------------------------------------------------------ driver
    def apply(self, step: Step) -> _Value | None:
        value = self.pick(step.operand)
        family: Callable[..., _Value | None] = getattr(self, step.op)
        return family(value, step, random.Random(step.param))

    def run(self, step: Step) -> None:
        result = self.apply(step)
        if result is None:
            value = self.pick(step.operand)
            result = _Value(value.tensor.sin(), 1.0)
        self.values.append(self.scaled(result))

    def finish(self) -> list[lm.GraphTensor]:
        """The outputs: the last value plus picks among the computed values, then every
        unused input folded into the last output so no input is dead."""
        computed = self.values[len(self.inputs) :]
        chosen = [computed[-1]]
        for pick in self.recipe.output_picks:
            value = computed[pick % len(computed)]
            if all(value is not c for c in chosen):
                chosen.append(value)
        roots = sorted({v.tensor.node_id for v in chosen})
        needed = set(self.graph.topological_order(roots))
        last = chosen[0]
        for value in self.values[: len(self.inputs)]:
            if value.tensor.node_id not in needed:
                extra = self.fit(value, last.tensor.view.shape)
                last = self.scaled(_Value(last.tensor + extra.tensor, last.bound + extra.bound))
        chosen[0] = last
        return [v.tensor.retrieve() for v in chosen]


def _matmul_shape(a: lm.GraphTensor, b: lm.GraphTensor) -> tuple[Expr, ...] | None:
    """The shape of a @ b when the two are compatible (batch dims broadcast), else None."""
    if a.ndim == 0 or b.ndim == 0 or max(a.ndim, b.ndim) > MAX_NDIM:
        return None
    k = a.view.shape[-1]
    if b.ndim == 1:
        return tuple(a.view.shape[:-1]) if b.view.shape[0] == k else None
    if b.view.shape[-2] != k:
        return None
    a_batch = a.view.shape[:-2] if a.ndim >= 2 else ()
    try:
        batch = broadcast_shapes(tuple(a_batch), tuple(b.view.shape[:-2]), "matmul")
    except ShapeError:
        return None
    rows = a.view.shape[-2:-1] if a.ndim >= 2 else ()
    return (*batch, *rows, b.view.shape[-1])


def build(recipe: Recipe) -> GraphCase:
    """Turn a recipe into a graph (deterministically) with input data for the first size
    of each symbolic dim and the outputs retrieved."""
    builder = _Builder(recipe)
    for step in recipe.steps:
        builder.run(step)
    outputs = builder.finish()
    dims = {SYMBOLIC_DIM: recipe.dim_sizes} if recipe.symbolic else {}
    case = GraphCase(recipe, builder.graph, builder.inputs, outputs, dims)
    case.set_inputs()
    return case


# ---------------------------------------------------------------- strategies
_sizes = st.integers(1, 5)
_shapes = st.lists(_sizes, min_size=1, max_size=MAX_NDIM).map(tuple)


@st.composite
def _derived_shape(draw: st.DrawFn, base: tuple[int, ...]) -> tuple[int, ...]:
    """A shape that broadcasts against `base`: a suffix of it with some dims set to 1."""
    length = draw(st.integers(1, len(base)))
    suffix = base[len(base) - length :]
    return tuple(1 if draw(st.booleans()) and draw(st.booleans()) else d for d in suffix)


@st.composite
def recipes(draw: st.DrawFn, max_steps: int = 12) -> Recipe:
    """A random recipe: 1-3 float32 inputs, 1-`max_steps` steps, 1-3 outputs."""
    count = draw(st.integers(1, 3))
    first = draw(_shapes)
    shapes: list[tuple[int | str, ...]] = [first]
    for _ in range(count - 1):
        shapes.append(draw(st.one_of(_derived_shape(first), _shapes)))
    dim_sizes: tuple[int, ...] = ()
    if draw(st.booleans()):
        # dim k from the end of the first input becomes "n", in every input where that
        # dim lines up with the same size (so derived inputs still broadcast)
        k = draw(st.integers(1, len(first)))
        size = first[-k]
        shapes = [
            tuple(SYMBOLIC_DIM if i == len(s) - k and d == size else d for i, d in enumerate(s))
            if len(s) >= k
            else s
            for s in shapes
        ]
        dim_sizes = tuple(draw(st.lists(st.integers(1, 5), min_size=2, max_size=3, unique=True)))
    length = draw(st.integers(1, max_steps))  # uniform, where lists favour short ones
    steps = draw(
        st.lists(
            st.builds(
                Step,
                op=st.sampled_from(OPS),
                operand=st.integers(0, 255),
                other=st.integers(0, 255),
                param=st.integers(0, (1 << 16) - 1),
            ),
            min_size=length,
            max_size=length,
        )
    )
    picks = draw(st.lists(st.integers(0, 255), max_size=2))
    seed = draw(st.integers(0, (1 << 32) - 1))
    return Recipe(tuple(shapes), tuple(steps), tuple(picks), dim_sizes, seed)


def random_graphs(max_steps: int = 12) -> st.SearchStrategy[GraphCase]:
    """Random graphs built from primitives and views (see the module docstring)."""
    return recipes(max_steps).map(build)


# ---------------------------------------------------------------- differential check
def assert_outputs_match(
    actual: Sequence[np.ndarray],
    expected: Sequence[np.ndarray],
    atol: float,
    rtol: float,
    context: str,
) -> None:
    """Same count, shapes and dtypes; values within tolerance; NaN exactly where expected."""
    assert len(actual) == len(expected), f"{context}: {len(actual)} outputs, {len(expected)}"
    for i, (got, want) in enumerate(zip(actual, expected, strict=True)):
        assert got.shape == want.shape, f"{context}, output {i}: shape {got.shape}, {want.shape}"
        assert got.dtype == want.dtype, f"{context}, output {i}: dtype {got.dtype}, {want.dtype}"
        np.testing.assert_allclose(
            got.astype(np.float64),
            want.astype(np.float64),
            atol=atol,
            rtol=rtol,
            equal_nan=True,
            err_msg=f"{context}, output {i}",
        )


def assert_compiler_preserves(
    graph_case: GraphCase,
    compile_fn: Callable[[lm.Graph], Any],
    atol: float = 1e-5,
    rtol: float = 1e-4,
) -> None:
    """Compile `graph_case.graph` with `compile_fn` (which mutates it in place) and check
    that it computes what an uncompiled twin built from the same recipe computes: first
    on the same inputs before and after compiling, then for every size of each symbolic
    dim and with fresh data, ending on the first size again."""
    recipe = graph_case.recipe
    twin = build(recipe)
    rounds = graph_case.rounds()
    sizes, variant = rounds[0]
    graph_case.set_inputs(sizes, variant)
    before = graph_case.run()
    assert_outputs_match(before, twin.run(), 0.0, 0.0, f"{recipe}: uncompiled twins differ")
    compile_fn(graph_case.graph)
    assert_outputs_match(
        graph_case.run(), before, atol, rtol, f"{recipe}: after compiling, sizes {sizes}"
    )
    for sizes, variant in rounds[1:]:
        twin.set_inputs(sizes, variant)
        graph_case.set_inputs(sizes, variant)
        assert_outputs_match(
            graph_case.run(),
            twin.run(),
            atol,
            rtol,
            f"{recipe}: compiled vs reference, sizes {sizes}, data variant {variant}",
        )
