"""Deep and wide graphs compile and run (issue 11, item 4), and compiled code needs no
asymptotically more memory than the reference runtime (item 2): deep graphs used to
stop with a bare RecursionError in the e-graph encoder, a long sum became one huge C
expression, and a broadcast product feeding a sum packed an n x n matrix for BLAS."""

from __future__ import annotations

import re
from collections.abc import Callable

import numpy as np

import luminal as lm
from luminal.schedule.fusion import MAX_FUSED_DEPTH

# the largest generated kernel allowed for the long sum: the whole sum used to be one
# 600 KB expression; each kernel now holds at most MAX_FUSED_DEPTH of its terms
KERNEL_SOURCE_CAP = 16 * 1024


def _compiled_matches_reference(
    cx: lm.Graph, outputs: list[lm.GraphTensor], refill: Callable[[int], None]
) -> None:
    """Reference runs for two input sets, then the compiled graph on both: equal."""
    expected = []
    for seed in (0, 1):
        refill(seed)
        cx.execute()
        expected.append([out.numpy().copy() for out in outputs])
    cx.compile(lm.CPUCompiler())
    for seed in (0, 1):
        refill(seed)
        cx.execute()
        for out, want in zip(outputs, expected[seed], strict=True):
            np.testing.assert_allclose(out.numpy(), want, rtol=1e-4, atol=1e-5)


def _seeded(seed: int, shape: tuple[int, ...], scale: float = 1.0) -> np.ndarray:
    rng = np.random.default_rng(seed)
    return (rng.standard_normal(shape) * scale).astype(np.float32)


def test_80_layer_mlp_compiles_and_runs_like_the_reference():
    cx = lm.Graph()
    layers = []
    for _ in range(80):
        layers += [lm.nn.Linear(cx, 32, 32), lm.nn.ReLU(cx)]
    model = lm.nn.Sequential(cx, *layers)
    x = cx.tensor((4, 32))
    out = model(x).retrieve()
    _compiled_matches_reference(cx, [out], lambda seed: x.set(_seeded(seed, (4, 32))))


def test_300_op_elementwise_chain_compiles_and_matches_numpy():
    cx = lm.Graph()
    x = cx.tensor((8, 64))
    h = x
    for i in range(300):
        h = h.sin() if i % 3 == 0 else h * 1.01 + 0.01 if i % 3 == 1 else h.relu()
    out = h.retrieve()

    def numpy_chain(a: np.ndarray) -> np.ndarray:
        for i in range(300):
            if i % 3 == 0:
                a = np.sin(a)
            elif i % 3 == 1:
                a = a * np.float32(1.01) + np.float32(0.01)
            else:
                a = np.maximum(a, 0)
        return a

    _compiled_matches_reference(cx, [out], lambda seed: x.set(_seeded(seed, (8, 64))))
    np.testing.assert_allclose(out.numpy(), numpy_chain(x.numpy()), rtol=1e-4, atol=1e-5)


def test_100_stacked_matmuls_compile_and_match_numpy():
    cx = lm.Graph()
    x = cx.tensor((8, 16))
    weights = [cx.tensor((16, 16)) for _ in range(100)]
    h = x
    for w in weights:
        h = h @ w
    out = h.retrieve()

    def refill(seed: int) -> None:
        x.set(_seeded(seed, (8, 16)))
        for i, w in enumerate(weights):  # orthogonal-ish scale: values stay near 1
            w.set(_seeded(1000 * seed + i, (16, 16), scale=0.25))

    _compiled_matches_reference(cx, [out], refill)
    expected = x.numpy().astype(np.float64)
    for w in weights:
        expected = expected @ w.numpy()
    np.testing.assert_allclose(out.numpy(), expected, rtol=1e-3, atol=1e-5)


def test_25000_term_sum_is_split_into_bounded_kernels():
    terms = 25_000
    cx = lm.Graph()
    x = cx.tensor((16,))
    total = x
    for _ in range(terms - 1):
        total = total + x
    out = total.retrieve()
    _compiled_matches_reference(cx, [out], lambda seed: x.set(_seeded(seed, (16,))))
    np.testing.assert_allclose(out.numpy(), x.numpy().astype(np.float64) * terms, rtol=1e-3)
    sources = [k.source for s in cx.compiled.segments for k in s.kernels]
    assert len(sources) >= terms // MAX_FUSED_DEPTH  # split, not one expression
    assert max(len(s) for s in sources) < KERNEL_SOURCE_CAP


def _peak_rss_growth(run: Callable[[], None]) -> int:
    """Bytes the process's resident set peaked above its size before `run` (Linux)."""
    with open("/proc/self/clear_refs", "w") as f:  # resets the peak (VmHWM) to now
        f.write("5")
    before = _status_kib("VmRSS")
    run()
    return (_status_kib("VmHWM") - before) * 1024


def _status_kib(field: str) -> int:
    with open("/proc/self/status") as f:
        return int(re.search(rf"^{field}:\s+(\d+) kB", f.read(), re.M).group(1))


def test_broadcast_product_sum_needs_no_n_by_n_memory():
    n = 4000
    square = n * n * 4  # the (u * v) product in float32: 64 MB
    cx = lm.Graph()
    u, v = cx.tensor((n, 1)), cx.tensor((1, n))
    out = (u * v).sum().retrieve()
    rng = np.random.default_rng(0)
    u.set(rng.random((n, 1), dtype=np.float32))
    v.set(rng.random((1, n), dtype=np.float32))
    cx.compile(lm.CPUCompiler())
    assert cx.memory_report()["peak_bytes"] < square // 100
    for seed in (1, 2):  # the next run is right, and as small
        rng = np.random.default_rng(seed)
        u.set(rng.random((n, 1), dtype=np.float32))
        v.set(rng.random((1, n), dtype=np.float32))
        growth = _peak_rss_growth(cx.execute)
        assert growth < square // 4
        expected = (u.numpy().astype(np.float64) * v.numpy()).sum()
        np.testing.assert_allclose(out.numpy(), expected, rtol=1e-4)
