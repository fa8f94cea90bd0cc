"""No signals from generated code (issue 11, item 2): integer division and modulo by zero,
INT_MIN // -1, float -> int casts of NaN/inf and symbolic dims of 0 give numpy's results in
both runtimes, and an allocation too large for memory raises OutOfMemoryError naming the
tensor and the bytes. Compiled code that could trap runs in a subprocess, so a SIGFPE
fails the test instead of killing pytest."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap

import numpy as np

import luminal as lm
from luminal.shape.expr import var

INT_MIN = np.iinfo(np.int32).min
INT_MAX = np.iinfo(np.int32).max


def _isolated(script: str) -> dict:
    """Run `script` (which prints one JSON line last) in a fresh interpreter; a signal
    shows as a negative return code."""
    result = subprocess.run(
        [sys.executable, "-c", textwrap.dedent(script)],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert result.returncode == 0, (result.returncode, result.stderr[-3000:])
    return json.loads(result.stdout.strip().splitlines()[-1])


# ------------------------------------------------------------------ integer semantics
NUMERATORS = [7, -7, 0, INT_MIN, INT_MIN, INT_MAX, 7, -7, 9, -9, 5, INT_MIN, INT_MAX]
DIVISORS = [0, 0, 0, -1, 0, 0, 2, 2, -4, -4, 1, 3, -1]
# int32 // is exact over the whole range (tests/reliability/test_integer_arithmetic.py)
NUMPY_EXACT = slice(None)


def _numpy_floor_div_mod(a: np.ndarray, b: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    with np.errstate(all="ignore"):
        return np.floor_divide(a, b), np.mod(a, b)


def _integer_graph() -> tuple[lm.Graph, lm.GraphTensor, lm.GraphTensor, list[lm.GraphTensor]]:
    cx = lm.Graph()
    a = cx.tensor((len(NUMERATORS),), dtype=lm.int32)
    b = cx.tensor((len(DIVISORS),), dtype=lm.int32)
    outputs = [(a // b).retrieve(), (a % b).retrieve(), (a // 0).retrieve(), (a % 0).retrieve()]
    return cx, a, b, outputs


INTEGER_SCRIPT = """
    import json, numpy as np, luminal as lm
    from tests.reliability.test_signals_memory import _integer_graph, NUMERATORS, DIVISORS
    cx, a, b, outputs = _integer_graph()
    a.set(np.array(NUMERATORS, np.int32)); b.set(np.array(DIVISORS, np.int32))
    cx.compile(lm.CPUCompiler())  # verified against the reference on these very values
    cx.execute()
    first = [o.numpy().tolist() for o in outputs]
    a.set(np.array(NUMERATORS[::-1], np.int32)); b.set(np.array(DIVISORS[::-1], np.int32))
    cx.execute()
    print(json.dumps({"first": first, "second": [o.numpy().tolist() for o in outputs]}))
"""


def test_integer_division_by_zero_and_int_min_by_minus_one_follow_numpy():
    """x // 0 == x % 0 == 0, INT_MIN // -1 == INT_MIN, INT_MIN % -1 == 0: compiled (in a
    subprocess: C's / and % raise SIGFPE there) == reference == numpy."""
    a, b = np.array(NUMERATORS, np.int32), np.array(DIVISORS, np.int32)
    quotient, remainder = _numpy_floor_div_mod(a, b)
    assert quotient[3] == INT_MIN and remainder[3] == 0 and quotient[0] == 0  # the cases
    zeros = np.zeros_like(a)

    cx, ta, tb, outputs = _integer_graph()
    ta.set(a)
    tb.set(b)
    cx.execute()
    reference = [o.numpy() for o in outputs]
    np.testing.assert_array_equal(reference[0][NUMPY_EXACT], quotient[NUMPY_EXACT])
    for got, want in zip(reference[1:], [remainder, zeros, zeros], strict=True):
        np.testing.assert_array_equal(got, want)

    compiled = _isolated(INTEGER_SCRIPT)
    for got, want in zip(compiled["first"], reference, strict=True):
        np.testing.assert_array_equal(np.array(got, np.int32), want)
    # the next run, other values, is still right
    quotient, remainder = _numpy_floor_div_mod(a[::-1].copy(), b[::-1].copy())
    second = [np.array(values, np.int32) for values in compiled["second"]]
    np.testing.assert_array_equal(second[0][::-1][NUMPY_EXACT], quotient[::-1][NUMPY_EXACT])
    for got, want in zip(second[1:], [remainder, zeros, zeros], strict=True):
        np.testing.assert_array_equal(got, want)


CAST_VALUES = [np.nan, np.inf, -np.inf, 3e9, -3e9, 2147483520.0, -2147483648.0, -2.7, 2.7, 0.0]


def _cast_graph() -> tuple[lm.Graph, lm.GraphTensor, lm.GraphTensor, list[lm.GraphTensor]]:
    cx = lm.Graph()
    x = cx.tensor((len(CAST_VALUES),))
    h = cx.tensor((4,), dtype=lm.float16)
    constant = cx.constant(float("nan")).cast(lm.int32).expand_dim(0, 2)
    outputs = [x.cast(lm.int32).retrieve(), h.cast(lm.int32).retrieve(), constant.retrieve()]
    return cx, x, h, outputs


def test_float_to_int_cast_of_nan_inf_and_out_of_range_is_int_min_in_both_runtimes():
    """A C cast of NaN, inf or an out-of-range float is undefined behaviour; both runtimes
    define it as INT_MIN (what numpy and PyTorch give on x86), truncating the rest."""
    x = np.array(CAST_VALUES, np.float32)
    h = np.array([np.nan, np.inf, -65504, 2.5], np.float16)
    expected = [
        np.array([INT_MIN] * 5 + [2147483520, INT_MIN, -2, 2, 0], np.int32),
        np.array([INT_MIN, INT_MIN, -65504, 2], np.int32),
        np.array([INT_MIN, INT_MIN], np.int32),
    ]
    results = []
    for compiled in (False, True):
        cx, tx, th, outputs = _cast_graph()
        tx.set(np.ones_like(x))
        th.set(np.ones_like(h))
        if compiled:
            cx.compile(lm.CPUCompiler())
        tx.set(x)
        th.set(h)
        cx.execute()
        results.append([o.numpy() for o in outputs])
        tx.set(np.full_like(x, -5.5))  # the next run is right
        cx.execute()
        np.testing.assert_array_equal(outputs[0].numpy(), np.full(x.shape, -5, np.int32))
    for reference, compiled in zip(*results, strict=True):
        np.testing.assert_array_equal(compiled, reference)
    for got, want in zip(results[0], expected, strict=True):
        np.testing.assert_array_equal(got, want)


# ------------------------------------------------------------------ a symbolic dim of 0
def _dim_zero_graph() -> tuple[lm.Graph, lm.GraphTensor, list[lm.GraphTensor]]:
    """Index arithmetic dividing by symbolic dims: a permuted reshape (`i / n`, `i % n`),
    a concat along a symbolic axis, and an iota whose divisor `m` is not in its shape."""
    cx = lm.Graph()
    x = cx.tensor(("n", "m"))
    n, m = x.shape
    flat = (x.T + 1.0).reshape((n * m,)) * 3.0 + x.reshape((n * m,))
    joined = lm.concat([x, x * 2.0], 1) + 1.0
    z = var("z")
    iota = cx.iota(z // var("m") + z % var("m") * 10, (3,))
    outputs = [flat.retrieve(), joined.retrieve(), iota.retrieve(), x.sum(1).retrieve()]
    return cx, x, outputs


def _dim_zero_expected(data: np.ndarray) -> list[np.ndarray]:
    n, m = data.shape
    z = np.arange(3)
    with np.errstate(divide="ignore"):
        iota = np.floor_divide(z, m) + np.mod(z, m) * 10
    return [
        (data.T + 1.0).reshape(-1) * 3.0 + data.reshape(-1),
        np.concatenate([data, data * 2.0], 1) + 1.0,
        iota.astype(np.int32),
        data.sum(1),
    ]


DIM_ZERO_SHAPES = [(2, 3), (0, 3), (3, 0), (0, 0), (2, 3)]

DIM_ZERO_SCRIPT = """
    import json, numpy as np, luminal as lm
    from tests.reliability.test_signals_memory import _dim_zero_graph, DIM_ZERO_SHAPES
    cx, x, outputs = _dim_zero_graph()
    x.set(np.ones((2, 3), np.float32))
    cx.compile(lm.CPUCompiler())
    runs = []
    for shape in DIM_ZERO_SHAPES:
        x.set(np.arange(np.prod(shape), dtype=np.float32).reshape(shape))
        cx.execute()
        runs.append([[list(o.numpy().shape), o.numpy().ravel().tolist()] for o in outputs])
    print(json.dumps(runs))
"""


def test_symbolic_dim_of_zero_through_division_index_math():
    """`/ dim` and `% dim` in generated index arithmetic with the dim 0: an empty tensor
    does nothing, and a divisor of 0 outside the loop's shape gives 0 (numpy's result)."""
    compiled = _isolated(DIM_ZERO_SCRIPT)
    cx, x, outputs = _dim_zero_graph()
    for shape, run in zip(DIM_ZERO_SHAPES, compiled, strict=True):
        data = np.arange(np.prod(shape), dtype=np.float32).reshape(shape)
        x.set(data)
        cx.execute()
        for output, want, (got_shape, got) in zip(
            outputs, _dim_zero_expected(data), run, strict=True
        ):
            np.testing.assert_array_equal(output.numpy(), want)  # reference
            assert tuple(got_shape) == want.shape
            np.testing.assert_array_equal(np.array(got).reshape(want.shape), want)


# ------------------------------------------------------------------ memory
HUGE = 2**40  # elements along the symbolic dim "k": terabytes of float32


def _broadcast_product_graph() -> tuple[lm.Graph, lm.GraphTensor, list[lm.GraphTensor]]:
    """(3, k) @ (k, 3) of broadcast operands: BLAS packs both into malloc'd scratch of
    4 * (3k + 1) bytes each; the arena holds nothing of size k."""
    cx = lm.Graph()
    u, v = cx.tensor((3, 1)), cx.tensor((1, 3))
    cx.set_dim("k", 6)
    product = (u.expand((3, "k")) @ v.expand(("k", 3))).retrieve()
    u.set(np.array([[1.0], [2.0], [3.0]], np.float32))
    v.set(np.array([[1.0, 2.0, 3.0]], np.float32))
    return cx, product, [u, v]


def _big_output_graph() -> tuple[lm.Graph, lm.GraphTensor]:
    cx = lm.Graph()
    cx.set_dim("k", 6)
    return cx, (cx.iota(var("z") % 7, ("k",)) * 2).retrieve()


MEMORY_SCRIPT = """
    import json, resource, sys, numpy as np, luminal as lm
    from tests.reliability import test_signals_memory as t
    from luminal.schedule import memory
    failing_malloc = sys.argv[1] == "malloc"
    cx, product, _ = t._broadcast_product_graph()
    cx.compile(lm.CPUCompiler())
    other, big = t._big_output_graph()
    other.compile(lm.CPUCompiler())
    if failing_malloc:  # let the run start; the kernel's malloc is what fails
        memory.physical_memory = lambda: 1 << 62
        resource.setrlimit(resource.RLIMIT_AS, (1 << 35, 1 << 35))
    report = {}
    for name, graph, output, expected in (
        ("product", cx, product, lambda k: np.outer([1, 2, 3], [1, 2, 3]) * k),
        ("output", other, big, lambda k: (np.arange(k) % 7) * 2),
    ):
        if failing_malloc and name == "output":
            continue
        graph.set_dim("k", t.HUGE)
        try:
            graph.execute()
            report[name] = {"raised": None}
        except Exception as error:
            report[name] = {
                "raised": [c.__name__ for c in type(error).__mro__],
                "message": str(error),
                "plans": len(graph.compiled.plans),
            }
        graph.set_dim("k", 5)  # the next run, with normal dims, is right
        graph.execute()
        report[name]["next_ok"] = bool(np.array_equal(output.numpy(), expected(5)))
    print(json.dumps(report))
"""


def _memory_run(mode: str) -> dict:
    return _isolated(MEMORY_SCRIPT.replace("sys.argv[1]", repr(mode)))


def test_enormous_dim_raises_out_of_memory_error_before_anything_runs():
    """A dim of 2**40 elements: the arena, output and kernel scratch sizes are known from
    the dims, so OutOfMemoryError (an ExecutionError and a MemoryError) names the tensor and
    the bytes before any buffer is allocated or kernel runs."""
    report = _memory_run("plan")
    pack = 4 * (3 * HUGE + 1)  # one packed operand
    product = report["product"]
    assert product["raised"][:3] == ["OutOfMemoryError", "ExecutionError", "LuminalError"]
    assert "MemoryError" in product["raised"]
    assert f"{2 * pack} bytes" in product["message"]  # both packs are held at once
    assert "scratch of the kernel computing node" in product["message"]
    assert "Contract" in product["message"] and f"'k': {HUGE}" in product["message"]
    output = report["output"]
    assert output["raised"][0] == "OutOfMemoryError"
    assert "the largest is the output node" in output["message"]
    assert f"{4 * HUGE} bytes" in output["message"]
    for case in (product, output):
        assert case["plans"] == 1  # only the first run's plan: nothing of the huge one kept
        assert case["next_ok"]


def test_failed_malloc_in_generated_c_raises_execution_error_naming_bytes():
    """Past the plan check (here disabled and the address space capped), a malloc that
    fails inside a kernel is reported through the run's fault record, not dereferenced."""
    product = _memory_run("malloc")["product"]
    assert product["raised"][0] == "ExecutionError"
    assert f"could not allocate {4 * (3 * HUGE + 1)} bytes" in product["message"]
    assert "Contract (node" in product["message"]
    assert product["next_ok"]


MATMUL_SCRIPT = """
    import ctypes, json, numpy as np
    from luminal.backends.cpu import matmul_codegen as mm
    from luminal.backends.cpu.matmul_measure import build_matmuls
    m = n = k = 37  # not a multiple of the register tile: both operands are packed
    source = mm.render_matmul("mm_fails", m, n, k, False, False, k, n, n, mm.MatmulSchedule())
    head, rest = source.split("#include <omp.h>\\n", 1)
    no_memory = "#define aligned_alloc(alignment, size) ((void)(size), (void*)0)\\n"
    working = source.replace("mm_fails", "mm_works")
    library = build_matmuls([("mm_fails", head + "#include <omp.h>\\n" + no_memory + rest),
                             ("mm_works", working)])
    a = np.random.default_rng(0).standard_normal((m, k)).astype(np.float32)
    b = np.random.default_rng(1).standard_normal((k, n)).astype(np.float32)
    results = {}
    for name in ("mm_fails", "mm_works"):
        function = getattr(library, name)
        function.restype = ctypes.c_longlong
        c = np.full((m, n), 7.0, np.float32)
        returned = function(c.ctypes.data, a.ctypes.data, b.ctypes.data, None, None)
        results[name] = [returned, bool((c == 7.0).all()), bool(np.allclose(c, a @ b, atol=1e-4))]
    print(json.dumps(results))
"""


def test_generated_matmul_returns_the_packing_bytes_it_could_not_allocate():
    """aligned_alloc made to fail: the generated matmul returns the bytes it asked for and
    leaves C unwritten (the caller records them in the run's fault record)."""
    results = _isolated(MATMUL_SCRIPT)
    returned, untouched, _ = results["mm_fails"]
    assert returned > 0 and returned % 64 == 0 and untouched
    assert results["mm_works"] == [0, False, True]
