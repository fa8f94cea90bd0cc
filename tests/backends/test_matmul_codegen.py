"""Generated matmul kernels: every schedule knob, layout and fused epilogue against float64
numpy, on odd sizes that leave partial register tiles and partial cache blocks."""

from __future__ import annotations

import ctypes
import itertools

import numpy as np
import pytest

from luminal.backends.cpu import matmul_codegen as mm
from luminal.backends.cpu import matmul_measure as measure
from luminal.backends.cpu.matmul_codegen import Epilogue, MatmulSchedule
from luminal.errors import LuminalError

EPILOGUES = [
    Epilogue(),
    Epilogue("row", "relu"),
    Epilogue("col"),
    Epilogue(residual=True),
    Epilogue("row", "relu", residual=True),
]

# one of each knob value; the 4x16 tiles with mc=8, nc=32, kc=16 make every loop (jc, pc,
# ic, ir, jr) run several blocks with a partial last one on the small sizes below
SUBSET = [
    MatmulSchedule(),
    MatmulSchedule(8, 32, 64, 512, 256, parallel="m", pack_a=True),
    MatmulSchedule(8, 32, 64, 512, 256, parallel="m", pack_a=False),
    MatmulSchedule(12, 32, 24, 512, 256, parallel="m", pack_a=False, pack_b=False),
    MatmulSchedule(14, 32, 112, 512, 256, unroll=1, parallel="m", pack_a=True),
    MatmulSchedule(6, 64, 60, 512, 256, unroll=4, parallel="n", pack_a=True),
    MatmulSchedule(6, 32, 48, 512, 256, vector_bits=256, parallel="none", pack_a=True),
    MatmulSchedule(4, 16, 8, 32, 16, unroll=1, parallel="m", pack_a=True),
    MatmulSchedule(4, 16, 8, 32, 16, parallel="n", pack_a=False, pack_b=False),
    MatmulSchedule(2, 16, 4, 16, 8, 256, 4, "none", pack_a=True, pack_b=False),
]

# (m, n, k, a_trans, b_trans, extra leading-dimension padding of a, b, c)
LAYOUTS = [
    (37, 53, 29, False, False, 0, 0, 0),
    (37, 53, 29, True, False, 3, 0, 0),
    (37, 53, 29, False, True, 0, 5, 0),
    (37, 53, 29, True, True, 2, 1, 7),
    (33, 70, 45, False, False, 4, 3, 2),
]


def _case(index: int, m: int, n: int, k: int, at: bool, bt: bool, pads: tuple, s, e) -> dict:
    lda = (m if at else k) + pads[0]
    ldb = (k if bt else n) + pads[1]
    ldc = n + pads[2]
    name = f"mm_test_{index}"
    source = mm.render_matmul(name, m, n, k, at, bt, lda, ldb, ldc, s, e)
    return dict(name=name, source=source, m=m, n=n, k=k, at=at, bt=bt, lds=(lda, ldb, ldc), e=e)


def _cases() -> list[dict]:
    cases = []
    for (s_index, s), (l_index, layout) in itertools.product(enumerate(SUBSET), enumerate(LAYOUTS)):
        m, n, k, at, bt, *pads = layout  # every schedule meets every epilogue once
        cases.append((m, n, k, at, bt, tuple(pads), s, EPILOGUES[(s_index + l_index) % 5]))
    for s in mm.schedule_space():  # every candidate of the search, once
        cases.append((37, 53, 29, False, True, (0, 0, 0), s, Epilogue("row", "relu", True)))
    for s in SUBSET[:2]:  # K = 0 (only the epilogue) and a single element
        cases.append((5, 7, 0, False, False, (0, 1, 0), s, Epilogue("col", "relu", True)))
        cases.append((1, 1, 1, False, False, (0, 0, 0), s, Epilogue("row")))
    return [_case(i, *case) for i, case in enumerate(cases)]


@pytest.fixture(scope="module")
def built() -> tuple[ctypes.CDLL, list[dict]]:
    cases = _cases()
    return measure.build_matmuls([(c["name"], c["source"]) for c in cases]), cases


def _run(library: ctypes.CDLL, case: dict, rng: np.random.Generator, nan_row: int | None = None):
    m, n, k, (lda, ldb, ldc) = case["m"], case["n"], case["k"], case["lds"]
    a_full = rng.standard_normal((k if case["at"] else m, lda), dtype=np.float32)
    b_full = rng.standard_normal((n if case["bt"] else k, ldb), dtype=np.float32)
    if nan_row is not None:
        a_full[nan_row, 0] = np.nan
    bias = rng.standard_normal(n if case["e"].bias == "row" else m, dtype=np.float32)
    residual = rng.standard_normal((m, n), dtype=np.float32)
    c_full = np.full((m, ldc), 12345.0, np.float32)
    getattr(library, case["name"])(
        *(x.ctypes.data for x in (c_full, a_full, b_full, bias, residual))
    )
    a = a_full[:, : m if case["at"] else k]
    b = b_full[:, : k if case["bt"] else n]
    expected = measure.reference_matmul(a, b, case["at"], case["bt"], case["e"], bias, residual)
    return c_full, expected


def test_every_case_matches_float64_numpy(built: tuple[ctypes.CDLL, list[dict]]) -> None:
    library, cases = built
    rng = np.random.default_rng(0)
    failures = []
    for case in cases:
        c_full, expected = _run(library, case, rng)
        n = case["n"]
        if not np.allclose(c_full[:, :n], expected, rtol=1e-4, atol=1e-4):
            error = np.abs(c_full[:, :n] - expected).max()
            failures.append(f"{case['source'].splitlines()[2]} {case['e']}: max error {error}")
        if not (c_full[:, n:] == 12345.0).all():
            failures.append(f"{case['name']} wrote past column {n} (ldc padding)")
    assert not failures, "\n".join(failures)


def test_relu_keeps_nan(built: tuple[ctypes.CDLL, list[dict]]) -> None:
    library, cases = built
    case = next(c for c in cases if c["e"] == Epilogue("row", "relu") and not c["at"])
    c_full, _ = _run(library, case, np.random.default_rng(1), nan_row=3)
    assert np.isnan(c_full[3, : case["n"]]).all()
    assert not np.isnan(np.delete(c_full[:, : case["n"]], 3, axis=0)).any()


def test_generated_source_is_readable() -> None:
    source = mm.render_matmul("mm_doc", 64, 64, 64, False, True, 64, 64, 64, SUBSET[0])
    assert source.startswith("/* luminal matmul mm_doc")
    assert SUBSET[0].key() in source
    assert "long long mm_doc(float* restrict c, const float* restrict a" in source
    assert all(len(line) <= 120 for line in source.splitlines())


def test_schedule_space_is_modest_and_distinct() -> None:
    space = mm.schedule_space()
    assert 10 <= len(space) <= 30
    assert len({s.key() for s in space}) == len(space)
    assert mm.default_schedules() == space


@pytest.mark.parametrize(
    "knobs",
    [
        dict(vector_bits=128),
        dict(nr=24),
        dict(mc=60),
        dict(unroll=3),
        dict(parallel="k"),
        dict(mr=16, nr=32),  # 32 accumulators + B vectors do not fit in 32 registers
    ],
)
def test_invalid_schedules_are_rejected(knobs: dict) -> None:
    with pytest.raises(LuminalError, match="MatmulSchedule"):
        MatmulSchedule(**knobs)


def test_invalid_problems_are_rejected() -> None:
    with pytest.raises(LuminalError, match="lda=10 is less than the row"):
        mm.render_matmul("bad", 4, 4, 12, False, False, 10, 4, 4, MatmulSchedule())
    with pytest.raises(LuminalError, match="bias"):
        Epilogue("both")


def test_bench_matmul_schedules_times_each_candidate() -> None:
    schedules = [SUBSET[7], SUBSET[9]]
    timings = measure.bench_matmul_schedules(20, 40, 24, schedules, repeats=2, b_trans=True)
    assert [s for s, _ in timings] == schedules
    assert all(0 < seconds < 1 for _, seconds in timings)
