"""Lowering from the schedule to kernel IR: the loop structure it decides (parallel outer
loops, reduce loops with their accumulators, unrolled short reductions, row groups) and
the text form of the IR."""

from __future__ import annotations

import numpy as np

import luminal as lm
from luminal.backends.cpu.compiler import static_program
from luminal.kernel import ir
from luminal.kernel.dump import dump
from tests.kernel.ir_walk import nested_loops


def _kernels(build) -> list[ir.Kernel]:  # noqa: ANN001 - a graph builder
    cx = lm.Graph()
    build(cx)
    cx.compile(lm.GenericCompiler())
    compiled = static_program(cx)
    return [k.kernel for s in compiled.segments for k in s.kernels]


def test_softmax_is_one_row_kernel_with_two_reduce_loops() -> None:
    (kernel,) = _kernels(
        lambda cx: cx.tensor((8, 64)).set(np.zeros((8, 64), np.float32)).softmax(-1).retrieve()
    )
    kinds = [(loop.kind, loop.var) for loop in nested_loops(kernel.body)]
    assert kinds == [("parallel", "i0_"), ("reduce", "j0_"), ("reduce", "j0_"), ("serial", "j0_")]
    text = dump(kernel)
    assert text.startswith("kernel recip_sumreduce_exp2_maxreduce(b0: out float32 #")
    assert (
        "    reduce j0_ < 64 [s1 = max float32]:\n      const v: float32 = b1[64*i0_ + j0_]" in text
    )
    assert "      b0[64*i0_ + j0_] = v\n      s2 add= v" in text


def test_short_reductions_unroll_and_long_ones_loop() -> None:
    def build(cx: lm.Graph) -> None:
        x = cx.tensor((4, 6)).set(np.ones((4, 6), np.float32))
        x.pool_last_dim(2, 2).max(-1).retrieve()  # windows of 2: unrolled
        x.transpose(0, 1).sum(-1).retrieve()  # 4 terms: unrolled too (UNROLL_LIMIT 8)
        cx.tensor((3, 40)).set(np.ones((3, 40), np.float32)).sum(-1).retrieve()

    unrolled_max, unrolled_sum, looped = _kernels(build)
    assert [loop.kind for loop in nested_loops(unrolled_max.body)] == ["parallel", "serial"]
    assert "acc max= v1" in dump(unrolled_max)
    assert all(loop.kind != "reduce" for loop in nested_loops(unrolled_sum.body))
    (reduce,) = [loop for loop in nested_loops(looped.body) if loop.kind == "reduce"]
    assert reduce.reductions == (ir.Reduction("acc", "add", lm.float32),)
    assert looped.params[0].output and not looped.params[1].output


def test_gather_checks_its_index_and_takes_the_fault_record() -> None:
    def build(cx: lm.Graph) -> None:
        table = cx.tensor((5, 3)).set(np.ones((5, 3), np.float32))
        ids = cx.tensor((2,), dtype=lm.int32).set(np.array([1, 4], np.int32))
        table.gather(ids).retrieve()

    (kernel,) = _kernels(build)
    assert kernel.reports_faults
    assert "check 0 <= g0_ < 5 else fault, clamp" in dump(kernel)
