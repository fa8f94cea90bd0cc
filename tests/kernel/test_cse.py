"""Values a statement reads more than once are computed once (`luminal/kernel/cse.py`):
the rendered C, OpenCL, CUDA and Metal hold each common value once as a `const` local,
loads a select guards stay under it, and compiled kernels still equal numpy."""

from __future__ import annotations

import math
import re

import numpy as np
import pytest

import luminal as lm
from luminal.backends.cpu.compiler import static_program
from luminal.backends.cuda.render import CUDARenderer
from luminal.backends.metal.render import MetalRenderer
from luminal.backends.opencl.render import OpenCLRenderer
from luminal.dtype import DType
from luminal.kernel import ir
from luminal.kernel.cse import _children, share_common
from luminal.kernel.indexing import loop_index
from luminal.render.c import CRenderer
from luminal.shape.expr import const, greater_equal

F32 = DType.float32
I = loop_index("i0_", const(8))


def _kernel(*body: ir.Stmt) -> ir.Kernel:
    loop = ir.Loop("i0_", const(8), "serial", body)
    params = (ir.Param(0, F32, output=True), ir.Param(1, F32))
    return ir.Kernel("k", params, (), (loop,), (0,))


def _load(offset: int = 0) -> ir.Load:
    return ir.Load(1, I + offset, F32)


def _add(*args: ir.Value) -> ir.Alu:
    return ir.Alu("add", args, F32)


def _mul(*args: ir.Value) -> ir.Alu:
    return ir.Alu("mul", args, F32)


def _one(value: float) -> ir.Const:
    return ir.Const(value, F32)


def _declares(kernel: ir.Kernel) -> list[ir.Declare]:
    return [s for s in kernel.body[0].body if isinstance(s, ir.Declare)]


def test_a_value_read_twice_is_declared_once_and_read_by_name() -> None:
    s = _add(_load(), _one(1.0))  # (x + 1) * (x + 1): the sum once, the load inside it once
    kernel = _kernel(ir.Store(0, I, _mul(s, s), F32))
    shared = share_common(kernel)
    assert [d.value for d in _declares(shared)] == [s]
    c1 = ir.Var("c1", F32)
    assert shared.body[0].body[-1] == ir.Store(0, I, _mul(c1, c1), F32)
    _, source = CRenderer().render(kernel)
    assert source.count("b1[") == 1 and "const float c1 = (b1[i0_] + 1.0f);" in source
    assert "b0[i0_] = (c1 * c1);" in source


def test_nested_repeats_are_declared_children_first() -> None:
    x = _load()
    x2 = _mul(x, x)
    poly = _add(_mul(_add(_mul(x2, _one(2.0)), _one(3.0)), x2), x2)  # x2 read 3 times
    kernel = _kernel(ir.Store(0, I, _mul(poly, poly, x), F32))
    names = [(d.name, d.value) for d in _declares(share_common(kernel))]
    c1, c2 = ir.Var("c1", F32), ir.Var("c2", F32)
    assert names[0] == ("c1", x) and names[1] == ("c2", _mul(c1, c1))
    assert names[2][0] == "c3" and c2 in names[2][1].args
    assert len(names) == 3


def test_a_load_a_select_guards_is_not_read_outside_it() -> None:
    guarded = ir.Load(1, I - 4, F32)  # out of bounds where i0_ < 4
    cond = greater_equal(I, 4)
    kernel = _kernel(ir.Store(0, I, ir.Select(cond, _add(guarded, guarded), _one(0.0)), F32))
    assert share_common(kernel) == kernel
    # read unconditionally as well: then it is safe to read once, before the statement
    kernel = _kernel(
        ir.Store(0, I, _add(ir.Select(cond, _mul(guarded, guarded), _one(0.0)), guarded), F32)
    )
    assert [d.value for d in _declares(share_common(kernel))] == [guarded]


def test_pure_arithmetic_in_a_branch_is_shared() -> None:
    s = _mul(ir.Var("a", F32), _one(3.0))
    kernel = _kernel(ir.Store(0, I, ir.Select(greater_equal(I, 4), _add(s, s), _one(0.0)), F32))
    assert [d.value for d in _declares(share_common(kernel))] == [s]


def test_signed_zeros_and_nans_are_not_merged() -> None:
    x = _load()
    pos, neg = _mul(x, _one(0.0)), _mul(x, _one(-0.0))
    kernel = _kernel(ir.Store(0, I, _add(pos, neg, pos), F32))
    declared = [d.value for d in _declares(share_common(kernel))]
    assert declared == [x, _mul(ir.Var("c1", F32), _one(0.0))]
    assert math.copysign(1.0, declared[1].args[1].value) == 1.0
    _, source = CRenderer().render(kernel)
    assert "(c1 * -0.0f)" in source


def test_names_do_not_clash_with_the_kernels_locals() -> None:
    s = _add(_load(), _one(1.0))
    taken = ir.Declare("c1", F32, _one(5.0), const=True)
    kernel = _kernel(taken, ir.Store(0, I, _mul(s, s, ir.Var("c1", F32)), F32))
    assert [d.name for d in _declares(share_common(kernel))] == ["c1", "c2"]


@pytest.mark.parametrize("renderer", [OpenCLRenderer(), CUDARenderer(), MetalRenderer()])
def test_gpu_dialects_print_the_common_value_once(renderer: CRenderer) -> None:
    s = _add(_load(), _one(1.0))
    _, source = renderer.render(_kernel(ir.Store(0, I, _mul(s, s), F32)))
    assert source.count("b1[") == 1 and "(c1 * c1)" in source


def _kernel_sources(cx: lm.Graph) -> list[str]:
    return [k.source for s in static_program(cx).segments for k in s.kernels]


def test_exact_gelu_renders_the_erf_argument_once_and_equals_numpy(tmp_path, monkeypatch):
    monkeypatch.setenv("LUMINAL_CACHE_DIR", str(tmp_path))
    rng = np.random.default_rng(0)
    a = (rng.standard_normal((16, 64)) * 3).astype(np.float32)
    a[0, :4] = [np.nan, 50.0, -50.0, 0.0]  # NaN and the saturated tails
    cx = lm.Graph()
    y = cx.tensor((16, 64)).set(a).gelu_exact().retrieve()
    (source,) = [s for s in _kernel_sources(cx) if "0.7071067811865476f" in s]
    body = source[source.index("/* ") :]
    assert body.count("0.7071067811865476f") == 1 and body.count("b1[") == 1
    assert len(body) < 3000  # 11 KB of nested repeats before
    cx.compile(lm.CPUCompiler())
    cx.execute()
    import torch

    want = torch.nn.functional.gelu(torch.from_numpy(a), approximate="none").numpy()
    np.testing.assert_allclose(y.numpy(), want, rtol=1e-5, atol=1e-6)


def test_integer_floor_division_shares_its_terms_and_equals_numpy(tmp_path, monkeypatch):
    monkeypatch.setenv("LUMINAL_CACHE_DIR", str(tmp_path))
    rng = np.random.default_rng(1)
    a = rng.integers(-1000, 1000, (8, 8)).astype(np.int32)
    b = rng.integers(-9, 9, (8, 8)).astype(np.int32)
    b[b == 0] = 7
    cx = lm.Graph()
    q = (cx.tensor((8, 8), lm.int32).set(a) // cx.tensor((8, 8), lm.int32).set(b)).retrieve()
    sources = _kernel_sources(cx)
    assert any(re.search(r"const int c\d+ = ", s) for s in sources)
    assert all(s.count("b1[") <= 1 and s.count("b2[") <= 1 for s in sources)
    cx.compile(lm.CPUCompiler())
    cx.execute()
    np.testing.assert_array_equal(q.numpy(), a // b)


def test_a_deep_shared_chain_renders_one_local_per_level() -> None:
    """x -> x * x forty times: one object per level in lowering's DAG, 2^40 leaves as a
    tree. Numbering visits each object once; the source holds one line per level."""
    value: ir.Value = _add(_load(), _one(1.0))
    for _ in range(40):
        value = _mul(value, value)
    _, source = CRenderer().render(_kernel(ir.Store(0, I, value, F32)))
    assert source.count("b1[") == 1 and "const float c40 = (c39 * c39);" in source
    assert "b0[i0_] = (c40 * c40);" in source


def _objects_and_values(value: ir.Value) -> tuple[int, int]:
    """Distinct objects under `value`, and distinct values (structurally)."""
    objects: dict[int, ir.Value] = {}
    stack = [value]
    while stack:
        node = stack.pop()
        if id(node) not in objects:
            objects[id(node)] = node
            stack.extend(_children(node))
    return len(objects), len(set(objects.values()))


def test_lowering_builds_a_value_read_by_many_readers_once() -> None:
    """The exact GELU's row group recomputes x^2 and clip(x / sqrt 2) in every reader:
    lowering builds one object per distinct read (it built 1047 objects for 68 values;
    now 75: a few leaves and one value reached through two index spellings), so the
    passes after it visit each about once."""
    cx = lm.Graph()
    cx.tensor((16, 64)).set(np.ones((16, 64), np.float32)).gelu_exact().retrieve()
    kernels = [k.kernel for s in static_program(cx).segments for k in s.kernels]
    (store,) = [
        s
        for k in kernels
        for s in ir.statements(k.body)
        if isinstance(s, ir.Store) and isinstance(s.value, ir.Alu)
    ]
    objects, values = _objects_and_values(store.value)
    assert values > 50 and objects < 1.2 * values
