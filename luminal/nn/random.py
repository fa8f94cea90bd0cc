"""An in-graph random source: a counter-based generator built from int32 primitives.

There is no random primitive. Random bits are Widynski's "Squares" counter-based
generator (arXiv:2004.06278) in 32-bit form: three rounds of `x = rot16(x * x + y)`
over the element index times a key, with int32 Iota/Add/Mul/Mod/Cast, which wrap
identically in the reference runtime and in generated code, so a graph draws the same
numbers in both. The key mixes (seed, stream, step) with an integer hash. Each graph has
one `RandomState`: a `seed` input and a `step` input that every successful `execute()`
advances by one (`Graph.carry`), so every run draws fresh numbers and the same seed
replays the same sequence. Each call site (each dropout layer call) gets its own stream
number, so two layers never share a mask.

int32 has no xor or shifts: `h >> k` is `(h - h % 2**k) / 2**k` through float32, exact
because `h - h % 2**k` is a multiple of 2**k with at most 32 - k significant bits.
"""

from __future__ import annotations

import weakref
from collections.abc import Sequence

import numpy as np

from luminal.dtype import float32, int32
from luminal.graph import Graph
from luminal.shape.expr import ExprLike
from luminal.tensor import GraphTensor

_MIX1 = 0x7FEB352D
_MIX2 = -2073254261  # 0x846CA68B as a signed int32
_STREAM = 0x27D4EB2F
_HALF = 1 << 16
UNIFORM_BITS = 24  # float32 holds 24-bit integers exactly


def _shift_right(h: GraphTensor, bits: int) -> GraphTensor:
    """floor(h / 2**bits) for int32 h (an arithmetic shift), exact through float32."""
    high = h - h % (1 << bits)
    return (high.cast(float32) * (1.0 / (1 << bits))).cast(int32)


def _rotate16(h: GraphTensor) -> GraphTensor:
    """Swap the 16-bit halves of h."""
    return h % _HALF * _HALF + _shift_right(h, 16) % _HALF


def mix(h: GraphTensor) -> GraphTensor:
    """A bijective int32 hash for the key (Wellons' lowbias32 with + for ^): good enough
    to spread (seed, stream, step) over the key space, not as a generator itself."""
    h = h + _shift_right(h, 16)
    h = h * _MIX1
    h = h + _shift_right(h, 15)
    h = h * _MIX2
    return h + _shift_right(h, 16)


def squares(counter: GraphTensor, key: GraphTensor) -> GraphTensor:
    """Squares32: three square-add-rotate rounds and a final square; `key` is odd."""
    x = y = counter * key
    z = y + key
    x = _rotate16(x * x + y)
    x = _rotate16(x * x + z)
    x = _rotate16(x * x + y)
    return x * x + z


class RandomState:
    """The random inputs of one graph: `seed` (int32) and `step` (int32, +1 per run)."""

    def __init__(self, graph: Graph, seed: int) -> None:
        self.graph = graph
        self.seed = graph.tensor((), dtype=int32, name="random.seed")
        self.step = graph.tensor((), dtype=int32, name="random.step")
        self.streams = 0
        self.manual_seed(seed)
        graph.carry(self.step, self.step + 1)

    def manual_seed(self, seed: int) -> None:
        """Restart the sequence: the next run draws what the first run after seeding
        with `seed` drew."""
        self.seed.set(np.asarray(np.int64(seed) % (1 << 31), np.int32))
        self.step.set(np.zeros((), np.int32))

    @property
    def steps(self) -> int:
        """Runs drawn so far since the last seeding."""
        return int(self.graph.input_data[self.step.node_id])

    def uniform_bits(self, shape: Sequence[ExprLike]) -> GraphTensor:
        """int32 values uniform on [0, 2**24), a fresh stream for this call site."""
        self.streams += 1
        key = mix(mix(self.seed + self.streams * _STREAM) + self.step) * 2 + 1
        index = self.graph.iota("z", tuple(shape), int32)
        bits = squares(index, key.expand(tuple(shape)))
        return _shift_right(bits, 32 - UNIFORM_BITS) % (1 << UNIFORM_BITS)

    def uniform(self, shape: Sequence[ExprLike]) -> GraphTensor:
        """float32 values uniform on [0, 1) in steps of 2**-24."""
        return self.uniform_bits(shape).cast(float32) * (1.0 / (1 << UNIFORM_BITS))


_STATES: weakref.WeakKeyDictionary[Graph, RandomState] = weakref.WeakKeyDictionary()


def random_state(graph: Graph) -> RandomState:
    """The graph's random state, created on first use with a seed drawn from the
    generator `lm.nn.manual_seed` seeds (so that seed also fixes the dropout masks)."""
    state = _STATES.get(graph)
    if state is None or state.seed._node_id not in graph.nodes:
        from luminal.nn.layers import default_generator

        state = RandomState(graph, int(default_generator().integers(0, 1 << 31)))
        _STATES[graph] = state
    return state
