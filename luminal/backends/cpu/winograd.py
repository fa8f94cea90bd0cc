"""The CPU kernel of `ops.WinogradConv`: one call to `lm_winograd` (`winograd.c`, a support
unit of its own after gemm_tile.c, so its products run in gemm.c's register tiles; built
and linked only for graphs that call it), which takes
blocks of tiles through the input transform, the products and the output transform
while they are in cache (a block's V and M: about 1 MB at 64 channels, 2 MB at 128)."""

from __future__ import annotations

from collections.abc import Sequence
from functools import cache
from pathlib import Path

import numpy as np

from luminal.backends.cpu.gemm import tile_source
from luminal.compiler.winograd import sizes_of, weights_layout, windows_layout
from luminal.graph import Graph, Node
from luminal.kernel import ir
from luminal.kernel.values import ValueLowering
from luminal.nn.winograd import F2, F4
from luminal.shape.expr import product, sym
from luminal.shape.tracker import contiguous_strides

_ARGUMENTS = (
    "long long, long long, long long, long long, long long, long long, const float*, "
    "long long, long long, long long, long long, long long, const float*, long long, "
    "long long, float*, long long, long long, long long, long long"
)
PROTOTYPE = f"long long lm_winograd({_ARGUMENTS});"
# with the consumer fused (`fused_epilogue`): bias per output channel, residual, ReLU
EPILOGUE_PROTOTYPE = (
    f"long long lm_winograd_ep({_ARGUMENTS}, const float*, const float*, long long);"
)


def _array(name: str, matrix: np.ndarray) -> str:
    values = ", ".join(f"{float(v)!r}f" for v in np.asarray(matrix, np.float32).ravel())
    return f"static const float {name}[{matrix.size}] = {{{values}}};"


NAME = "lm_winograd"  # the support unit, and the prefix of its entry points


@cache
def source() -> str:
    """winograd.c after the register tile it multiplies in (`gemm.tile_source`) and the
    transforms of `nn/winograd.py` it is compiled with."""
    constants = [
        _array("LM_WG_BT4", F4.bt),
        _array("LM_WG_AT4", F4.at),
        _array("LM_WG_BT2", F2.bt),
        _array("LM_WG_AT2", F2.at),
    ]
    body = (Path(__file__).parent / "winograd.c").read_text()
    return "\n".join([tile_source(), *constants, body])


def support_unit() -> tuple[str, str]:
    """The (name, C source) unit defining `lm_winograd` and `lm_winograd_ep`: its own unit,
    built and linked only for a graph whose kernels call it (winograd.c is ~2.5 s of gcc
    on a cold cache, which every graph paid while it was part of gemm.c's unit)."""
    return NAME, source()


def winograd_kernel(
    graph: Graph, node: Node, materialised: set[int], dims: Sequence[str]
) -> ir.Kernel:
    """The IR of a `WinogradConv` node: the library call, with the windows' and U's
    layouts read from their views (`compiler/winograd.py` fused only those it can)."""
    s = sizes_of(node)
    windows, weights = node.inputs[0], node.inputs[1]
    x_offset, x_n, x_c, x_h, x_th = windows_layout(windows.view, s)  # type: ignore[misc]
    u_offset, u_q, u_k = weights_layout(weights.view)  # type: ignore[misc]
    y_n, y_k, y_th, y_i, _, _ = (int(v.as_int()) for v in contiguous_strides(node.shape))  # type: ignore[arg-type]
    # the floats of the windows' buffer from their offset (whole vectors are read up to it)
    x_size = product(graph.nodes[windows.source].shape) - x_offset
    w = ValueLowering(graph, materialised - {node.id})
    w.param(node.id)
    x = ir.Pointer(w.param(windows.source), sym(x_offset))
    u = ir.Pointer(w.param(weights.source), sym(u_offset))
    args = (
        s.tile, s.images, s.rows, s.cols, s.channels, s.outs,
        x, x_n, x_c, x_h, x_th, x_size, u, u_q, u_k,
        ir.Pointer(0, sym(0)), y_n, y_k, y_th, y_i,
    )  # fmt: skip
    call = ir.LibraryCall(
        "lm_winograd", tuple(sym(a) if isinstance(a, int) else a for a in args), reports_alloc=True
    )
    return ir.Kernel(
        "winograd",
        w.kernel_params(),
        tuple(dims),
        (call,),
        (node.id,),
        prelude=PROTOTYPE,
        reports_faults=True,
    )
