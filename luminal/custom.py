"""User C kernels inside a graph: `lm.custom_kernel(inputs, c_source, output_shape)`.

The kernel is C with a fixed ABI, so the same source runs everywhere: the reference
runtime compiles it and calls it on numpy arrays, and the CPU backend calls it from the
generated runner. Its inputs are made contiguous first.

ABI, for a function named `name` with n inputs:

    void name(OUT* out, const IN0* in0, ..., const IN{n-1}* in{n-1}, const long long* numel);

`numel[0]` is the output's element count and `numel[1 + i]` input i's (they change with
symbolic dims); element types follow the dtypes (float, int, _Float16, unsigned short for
bfloat16, unsigned char for bool).
"""

from __future__ import annotations

import ctypes
import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from luminal import ops
from luminal.dtype import as_dtype, float32
from luminal.errors import GraphError, ShapeError
from luminal.reference import kernels
from luminal.shape.expr import ExprLike


@dataclass(frozen=True)
class CustomKernel(ops.Op):
    """A user's C function (see the module docstring for its ABI)."""

    function: str
    source: str
    arity = None


def custom_kernel(
    inputs: Sequence[Any],
    c_source: str,
    output_shape: Sequence[ExprLike],
    dtype: Any = float32,
    name: str | None = None,
) -> Any:
    """Add a node running `c_source`'s function on `inputs`; returns its output tensor.
    `name` is the C function to call (default: the first function defined)."""
    if not inputs:
        raise GraphError("custom_kernel: needs at least one input tensor")
    graph = inputs[0].graph
    function = name or _first_function(c_source)
    if function is None or f"{function}(" not in c_source.replace(" (", "("):
        raise GraphError(
            f"custom_kernel: cannot find the C function {function!r} in the source; pass name="
        )
    for dim in output_shape:
        if isinstance(dim, int) and dim < 0:
            raise ShapeError(f"custom_kernel '{function}': negative output dim in {output_shape}")
    with graph.atomic():
        contiguous = [t.contiguous() for t in inputs]
        return graph.add_node(
            CustomKernel(function, c_source), contiguous, tuple(output_shape), as_dtype(dtype)
        )


def _first_function(source: str) -> str | None:
    match = re.search(r"\bvoid\s+([A-Za-z_]\w*)\s*\(", source)
    return match.group(1) if match else None


def _reference(op: CustomKernel, inputs: list[np.ndarray], ctx: kernels.KernelContext) -> Any:
    """Compile the user's source (cached on disk) and call it on contiguous arrays in
    their storage dtypes (the reference runtime hands float16 over as float32)."""
    from luminal.backends.cpu import toolchain

    library = toolchain.load(toolchain.build_shared([(op.function, op.source)]))
    fn = getattr(library, op.function)
    fn.restype = None
    out = np.empty(ctx.shape, dtype=ctx.dtype.numpy)
    arrays = [
        np.ascontiguousarray(array.astype(dtype.numpy, copy=False))
        for array, dtype in zip(inputs, ctx.input_dtypes, strict=True)
    ]
    numel = (ctypes.c_longlong * (1 + len(arrays)))(out.size, *[a.size for a in arrays])
    pointers = [a.ctypes.data_as(ctypes.c_void_p) for a in arrays]
    fn(out.ctypes.data_as(ctypes.c_void_p), *pointers, numel)
    return out


kernels.KERNELS[CustomKernel] = _reference
