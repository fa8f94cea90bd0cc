"""Generated matmul options of the search space: every layout the matcher accepts
computes what numpy computes, with and without the fused epilogue."""

from __future__ import annotations

import numpy as np
import pytest

import luminal as lm
from luminal import ops
from luminal.backends.cpu import tuning
from luminal.backends.cpu.compiler import RULESETS
from luminal.backends.cpu.lowering import assemble, lower_kernels
from luminal.backends.cpu.matmul_options import SEARCHED_SCHEDULES, matmul_problem
from luminal.backends.cpu.tuning import CpuSearchSpace
from luminal.compiler.egraph import EGraphCompiler
from luminal.kernel import ir
from luminal.kernel.transforms import walk
from luminal.schedule.epilogue import match_epilogue


def _space(cx: lm.Graph) -> CpuSearchSpace:
    cx.compile(lm.GenericCompiler())
    cx.compile(EGraphCompiler(rulesets=RULESETS))
    cx.compile(lm.GenericCompiler())
    return CpuSearchSpace(cx, {}, 1)


def _run(cx: lm.Graph, space: CpuSearchSpace, config: dict[str, str]) -> None:
    compiled = space.compiled(config)
    compiled.build()
    cx.compiled = compiled
    cx.execute()


def _cases(rng: np.random.Generator):  # noqa: ANN202
    f = lambda *s: rng.uniform(-1, 1, s).astype(np.float32)  # noqa: E731
    a, w, bias, res = f(37, 53), f(29, 53), f(29), f(37, 29)
    yield (
        "linear+bias+relu",
        lambda cx, t: (t(a) @ t(w).transpose(0, 1) + t(bias)).relu(),
        (np.maximum(a @ w.T + bias, 0)),
    )
    b = f(53, 29)
    yield "plain", lambda cx, t: t(a) @ t(b), a @ b
    yield "residual", lambda cx, t: t(a) @ t(b) + t(res), a @ b + res
    at = f(53, 37)
    yield (
        "transposed a",
        lambda cx, t: (t(at).transpose(0, 1) @ t(b)).relu(),
        np.maximum(at.T @ b, 0),
    )
    x3 = f(3, 11, 53)
    yield "merged rows", lambda cx, t: t(x3) @ t(b) + t(bias), x3 @ b + bias


@pytest.mark.parametrize("case", range(5))
def test_generated_matmul_options_match_numpy(case: int) -> None:
    name, build, expected = list(_cases(np.random.default_rng(case)))[case]
    cx = lm.Graph()
    y = build(cx, lambda v: cx.tensor(v.shape).set(v)).retrieve()
    space = _space(cx)
    options = [(s.key, o) for s in space.sites for o in s.options if o.startswith("gen")]
    assert options, f"{name}: no generated matmul option offered"
    fused = [item for item in options if item[1].startswith("gen+epilogue")]
    if name != "plain":
        assert fused, f"{name}: the epilogue should be fusable"
    chosen = [*options[:2], *fused[:2], *options[-1:]]
    for key, option in chosen:
        _run(cx, space, {key: option})
        np.testing.assert_allclose(y.numpy(), expected, rtol=1e-4, atol=1e-4, err_msg=option)


def test_batched_and_symbolic_products_are_not_offered() -> None:
    cx = lm.Graph()
    a = cx.tensor((4, 8, 16)).set(np.ones((4, 8, 16), np.float32))
    b = cx.tensor((4, 16, 8)).set(np.ones((4, 16, 8), np.float32))
    (a @ b).retrieve()
    space = _space(cx)
    assert not [o for s in space.sites for o in s.options if o.startswith("gen")]
    contract = next(n for n in cx.nodes.values() if type(n.op) is ops.Contract)
    assert matmul_problem(contract) is None


def test_every_searched_schedule_is_valid() -> None:
    assert len({s.key() for s in SEARCHED_SCHEDULES}) == len(SEARCHED_SCHEDULES)


def test_epilogue_recognised_from_a_linear_layer() -> None:
    rng = np.random.default_rng(0)
    cx = lm.Graph()
    x = cx.tensor((8, 16)).set(rng.uniform(-1, 1, (8, 16)).astype(np.float32))
    linear = lm.nn.Linear(cx, 16, 4)
    for p in linear.parameters():
        p.set(rng.uniform(-1, 1, tuple(int(d) for d in p.shape)).astype(np.float32))
    residual = cx.tensor((8, 4)).set(rng.uniform(-1, 1, (8, 4)).astype(np.float32))
    (linear(x) + residual).relu().retrieve()
    space = _space(cx)
    lowering = space.lowering({})
    contract = next(n for n in cx.nodes.values() if type(n.op) is ops.Contract)
    fused = match_epilogue(
        lowering.graph, lowering.kernel_nodes, lowering.materialised, contract.id
    )
    assert fused is not None
    assert (fused.epilogue.bias, fused.epilogue.activation, fused.epilogue.residual) == (
        "row",
        "relu",
        True,
    )


def _calls(kernel: ir.Kernel) -> list[ir.LibraryCall]:
    return [x for x in walk(kernel.body) if isinstance(x, ir.LibraryCall)]


def test_products_are_ir_library_calls() -> None:
    """sgemm and the generated matmul are IR kernels calling a library function:
    `lm_sgemm` (luminal's product, linked into every library), the generated product's
    function (the kernel's prelude, rendered from the schedule)."""
    name, build, _ = next(_cases(np.random.default_rng(0)))
    cx = lm.Graph()
    build(cx, lambda v: cx.tensor(v.shape).set(v)).retrieve()
    space = _space(cx)
    (site,) = [s for s in space.sites if any(o.startswith("gen") for o in s.options)]
    static = space.lowering({}).kernels[space.node_of[site.key]]
    assert [c.function for c in _calls(static.kernel)] == ["lm_sgemm"]
    option = next(o for o in site.options if o.startswith("gen+epilogue"))
    lowering = space.lowering({site.key: option})
    (generated,) = [k for k in lowering.kernels.values() if _calls(k.kernel)]
    (call,) = _calls(generated.kernel)
    assert call.reports_alloc and generated.kernel.prelude.startswith("/* luminal matmul")
    assert option.removeprefix("gen+epilogue:") in generated.kernel.prelude


def test_loop_knobs_apply_to_sgemm_packing_loops(rng) -> None:
    """An operand BLAS cannot read in place is packed by IR loops (outermost parallel),
    so the loop knobs of the search apply to them; each variant computes the product."""
    av = rng.uniform(-1, 1, (64, 96)).astype(np.float32)
    bv = rng.uniform(-1, 1, (48, 32)).astype(np.float32)
    cx = lm.Graph()
    y = (cx.tensor(av.shape).set(av)[:, ::2] @ cx.tensor(bv.shape).set(bv)).retrieve()
    _space(cx)  # the generic and e-graph passes: the product is a Contract
    lowering = lower_kernels(cx)
    (node_id,) = [n for n, k in lowering.kernels.items() if _calls(k.kernel)]
    sgemm = lowering.kernels[node_id]
    assert any(isinstance(x, ir.Alloc) for x in sgemm.kernel.body)
    names = [o.name for o in tuning.loop_options(lowering, node_id, {})]
    assert {"serial", "parallel", "vector_width(512)+serial"} <= set(names)
    for option in tuning.loop_options(lowering, node_id, {}):
        variant = lower_kernels(cx)
        option.apply(variant, node_id)
        compiled = assemble(variant)
        compiled.build()
        cx.compiled = compiled
        cx.execute()
        np.testing.assert_allclose(y.numpy(), av[:, ::2] @ bv, rtol=1e-4, atol=1e-4)
