"""Loop order of elementwise copies (`lower._read_major_order`): a copy whose outermost
output axis is not its input's largest stride runs over the largest-stride axes first, so
the threads read disjoint parts of the input; the values are numpy's either way."""

from __future__ import annotations

import numpy as np

import luminal as lm
from luminal.backends.cpu.compiler import static_program
from luminal.kernel import ir
from tests.kernel.ir_walk import nested_loops


def _copy(x: np.ndarray, axes: tuple[int, ...]) -> tuple[ir.Kernel, np.ndarray]:
    """The kernel of x.permute(axes).contiguous() and its value from the CPU backend."""
    cx = lm.Graph()
    out = cx.tensor(x.shape).set(x).permute(*axes).contiguous().retrieve()
    cx.compile(lm.CPUCompiler())
    cx.execute()
    value = out.numpy()
    (kernel,) = [k.kernel for s in static_program(cx).segments for k in s.kernels]
    return kernel, value


def _extents(kernel: ir.Kernel) -> list[int]:
    return [int(loop.extent) for loop in nested_loops(kernel.body)]


def test_a_copy_with_small_outer_strides_runs_over_the_large_ones_first() -> None:
    x = np.arange(8 * 16 * 12 * 20, dtype=np.float32).reshape(8, 16, 12, 20)
    kernel, value = _copy(x, (2, 1, 0, 3))  # (H, C, N, W): H's input stride is 20
    np.testing.assert_array_equal(value, x.transpose(2, 1, 0, 3))
    loops = nested_loops(kernel.body)
    # N (stride 3840) and C (240) give 128 iterations to share; H and W keep their order
    assert _extents(kernel) == [8, 16, 12, 20]
    assert [loop.kind for loop in loops] == ["parallel", "serial", "serial", "serial"]


def test_a_copy_whose_outer_axis_has_the_largest_stride_keeps_the_output_order() -> None:
    x = np.arange(6 * 10 * 14, dtype=np.float32).reshape(6, 10, 14)
    kernel, value = _copy(x, (0, 2, 1))  # a transpose of the last two: N outermost already
    np.testing.assert_array_equal(value, x.transpose(0, 2, 1))
    assert _extents(kernel) == [6, 14, 10]
