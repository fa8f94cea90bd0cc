"""User C kernels inside a graph: `lm.custom_kernel(inputs, c_source, output_shape)`.

The kernel is C with a fixed ABI, so the same source runs everywhere: the reference
runtime compiles it and calls it on numpy arrays, and the CPU backend calls it from the
generated runner. Its inputs are made contiguous first.

ABI, for a function named `name` with n inputs:

    void name(OUT* out, const IN0* in0, ..., const IN{n-1}* in{n-1}, const long long* numel);

`numel[0]` is the output's element count and `numel[1 + i]` input i's (they change with
symbolic dims); element types follow the dtypes (float, int, _Float16, unsigned short for
bfloat16, unsigned char for bool).

The kernel is the first `void` function *defined* in the source (a prototype or a
`static` helper is not a kernel), unless `name=` says otherwise. It must write every
element of `out`: the reference runtime fills `out` with a pattern before the call and
raises ExecutionError for elements the call left untouched, so the check against the
reference catches a kernel that skips some.

`backend="opencl"`: the source is OpenCL C for the OpenCL backend, with the ABI

    __kernel void name(__global OUT* out, __global const IN0* in0, ...,
                       const long numel_out, const long numel_in0, ...);

launched with one work-item per output element (the global size is rounded up to whole
work-groups, so the kernel checks `get_global_id(0) < numel_out`). Such a node needs
`reference=` (the reference runtime and the check against it run the numpy callable) and
compiles only with `lm.OpenCLCompiler()`.

`backend="cuda"`: CUDA C for the CUDA backend (compiled by NVRTC with the graph's
kernels, checked by ptxas), with the ABI

    extern "C" __global__ void name(OUT* out, const IN0* in0, ...,
                                    long long numel_out, long long numel_in0, ...);

launched with one thread per output element in blocks of 64 (`blockIdx.x * blockDim.x +
threadIdx.x < numel_out`); `extern "C"` keeps the name the runtime looks up.
`backend="metal"`: Metal Shading Language for the Metal backend,

    kernel void name(device OUT* out [[buffer(0)]], device const IN0* in0 [[buffer(1)]],
                     ..., constant long& numel_out [[buffer(n + 1)]], ...,
                     uint3 gid [[thread_position_in_grid]]);

Several backends at once: pass `{backend: source}` as the source (`name=` or the first
function of each source must be the same); each compiler takes its own, and one with no
source for its backend raises CompileError naming the kernel and the backends it has. A
mapping holding "c" needs no `reference=` (the C is the oracle).

`reference=` gives the reference runtime a numpy callable instead (`reference(*inputs)`
on contiguous arrays in their storage dtypes, returning the output): the oracle the
compiled C is then checked against (luminal.quant's packed-weight kernels use it).
Make it picklable and hashable (a frozen dataclass with `__call__`), as it travels
with the graph node. A reference with a true `step_function` attribute says its output
is a step function of its float inputs (rounding them, as luminal.quant's 8-bit
activations do), where a one-ulp difference upstream may move it past any float
tolerance: CPUCompiler's check then runs it on the compiled program's own inputs, after
checking those against the reference's (luminal/backends/cpu/verify.py). A reference
with a `vjp(ctx)` method makes the kernel differentiable: `lm.training.Autograd` calls it
as it calls a primitive's rule (`training/autograd.py`'s VJPContext: the input gradients,
None for those not wanted); the CPU compiler's fused max pools have one
(`compiler/max_pool.py`).
"""

from __future__ import annotations

import ctypes
import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any

import numpy as np

from luminal import ops
from luminal.dtype import as_dtype, float32
from luminal.errors import CompileError, ExecutionError, GraphError, ShapeError
from luminal.reference import kernels
from luminal.shape.expr import ExprLike


@dataclass(frozen=True)
class CustomKernel(ops.Op):
    """A user's C function (see the module docstring for its ABI)."""

    function: str
    source: str
    reference: Callable[..., np.ndarray] | None = None
    backend: str = "c"  # the language of `source`: one of BACKENDS
    others: tuple[tuple[str, str], ...] = ()  # (backend, source) for further backends
    arity = None

    @property
    def backends(self) -> tuple[str, ...]:
        """The backends this kernel has a source for, `backend` first."""
        return (self.backend, *(b for b, _ in self.others))

    def for_backend(self, backend: str) -> CustomKernel:
        """This kernel with `backend`'s source as its only one; CompileError naming the
        kernel and the backends it has when there is none."""
        if backend == self.backend and not self.others:
            return self
        sources = dict(((self.backend, self.source), *self.others))
        if backend not in sources:
            raise CompileError(
                f"custom kernel '{self.function}' has no {backend} source (it has "
                f"{', '.join(self.backends)}); pass {{{backend!r}: source, ...}} to "
                "lm.custom_kernel"
            )
        return replace(self, source=sources[backend], backend=backend, others=())


def custom_kernel(
    inputs: Sequence[Any],
    c_source: str | Mapping[str, str],
    output_shape: Sequence[ExprLike],
    dtype: Any = float32,
    name: str | None = None,
    reference: Callable[..., np.ndarray] | None = None,
    backend: str = "c",
) -> Any:
    """Add a node running `c_source`'s function on `inputs`; returns its output tensor.
    `name` is the C function to call (default: the first non-static void function
    defined, prototypes do not count; in CUDA, OpenCL or Metal the first `__global__` /
    `__kernel` / `kernel` one); `reference` its numpy equivalent, which the
    reference runtime runs instead of the C; `backend="opencl"`, `"cuda"` or `"metal"`
    for a device language, or a `{backend: source}` mapping as `c_source` for several
    (see the module docstring)."""
    if not inputs:
        raise GraphError("custom_kernel: needs at least one input tensor")
    sources = dict(c_source) if isinstance(c_source, Mapping) else {backend: c_source}
    if not sources:
        raise GraphError("custom_kernel: the source mapping is empty")
    for language in sources:
        if language not in BACKENDS:
            raise GraphError(f"custom_kernel: backend {language!r} is not one of {BACKENDS}")
    if "c" not in sources and reference is None:
        raise GraphError(
            f"custom_kernel: a {'/'.join(sources)} kernel needs reference= (a numpy "
            "equivalent): the reference runtime runs only C"
        )
    primary = "c" if "c" in sources else next(iter(sources))
    function = name or _first_function(sources[primary], primary)
    for language, source in sources.items():
        if function is None or f"{function}(" not in source.replace(" (", "("):
            raise GraphError(
                f"custom_kernel: cannot find the {'C ' if language == 'c' else ''}function "
                f"{function!r} in the {language} source; pass name="
            )
    for dim in output_shape:
        if isinstance(dim, int) and dim < 0:
            raise ShapeError(f"custom_kernel '{function}': negative output dim in {output_shape}")
    others = tuple((b, text) for b, text in sources.items() if b != primary)
    op = CustomKernel(function, sources[primary], reference, primary, others)
    graph = inputs[0].graph
    with graph.atomic():
        contiguous = [t.contiguous() for t in inputs]
        return graph.add_node(op, contiguous, tuple(output_shape), as_dtype(dtype))


def narrow_to(graph: Any, backend: str) -> None:
    """Give every custom kernel of `graph` only `backend`'s source (a GPU compiler does
    this before lowering); CompileError naming the kernel and the backends it has where
    it has none."""
    for node_id, node in list(graph.nodes.items()):
        op = node.op
        if isinstance(op, CustomKernel) and (op.backend != backend or op.others):
            graph.nodes[node_id] = replace(node, op=op.for_backend(backend))


BACKENDS = ("c", "opencl", "cuda", "metal")
_COMMENT = re.compile(r"/\*.*?\*/|//[^\n]*", re.DOTALL)
_VOID_FUNCTION = re.compile(r"\bvoid\s+([A-Za-z_]\w*)\s*\(")
# what marks a device language's entry point (its helpers are plain functions)
_ENTRY = {"cuda": {"__global__"}, "opencl": {"__kernel", "kernel"}, "metal": {"kernel"}}


def _first_function(source: str, language: str = "c") -> str | None:
    """The first non-static `void name(...) {` of the source: a definition, not a
    prototype (`...);`) and not a helper the library does not export; in a device
    language the first such entry point (`__global__`, `__kernel`, `kernel`) when it
    has one, so that a helper defined before the kernel is not taken for it."""
    code = _COMMENT.sub(" ", source)
    found: list[tuple[str, set[str]]] = []
    for match in _VOID_FUNCTION.finditer(code):
        after = _after_parameters(code, match.end())
        if after is None or code[after:].lstrip()[:1] != "{":
            continue
        qualifiers = set(re.findall(r"[A-Za-z_]\w*", _declaration_head(code, match.start())))
        if "static" not in qualifiers:
            found.append((match.group(1), qualifiers))
    entries = [name for name, words in found if words & _ENTRY.get(language, set())]
    return (entries or [name for name, _ in found] or [None])[0]


def _declaration_head(code: str, start: int) -> str:
    """The declaration's text before `start`, back to the previous `;`, `}` or `{`,
    without preprocessor lines: `static inline`, `extern "C" __global__`."""
    head = code[max(code.rfind(mark, 0, start) for mark in ";{}") + 1 : start]
    return "\n".join(line for line in head.splitlines() if not line.lstrip().startswith("#"))


def _after_parameters(code: str, start: int) -> int | None:
    """The position after the `)` closing the parameter list opened just before `start`."""
    depth = 1
    for position in range(start, len(code)):
        depth += {"(": 1, ")": -1}.get(code[position], 0)
        if depth == 0:
            return position + 1
    return None


def _reference(op: CustomKernel, inputs: list[np.ndarray], ctx: kernels.KernelContext) -> Any:
    """Compile the user's source (cached on disk) and call it on contiguous arrays in
    their storage dtypes (the reference runtime hands float16 over as float32), or run
    the node's numpy `reference` on them."""
    if op.reference is not None:
        return _numpy_reference(op, inputs, ctx)
    from luminal.backends.cpu import toolchain

    library = toolchain.load(toolchain.build_shared([(op.function, op.source)]))
    fn = getattr(library, op.function)
    fn.restype = None
    arrays = [
        np.ascontiguousarray(array.astype(dtype.numpy, copy=False))
        for array, dtype in zip(inputs, ctx.input_dtypes, strict=True)
    ]

    def call(fill: int) -> np.ndarray:
        out = np.empty(ctx.shape, dtype=ctx.dtype.numpy)
        out.view(np.uint8).fill(fill)
        numel = (ctypes.c_longlong * (1 + len(arrays)))(out.size, *[a.size for a in arrays])
        pointers = [a.ctypes.data_as(ctypes.c_void_p) for a in arrays]
        fn(out.ctypes.data_as(ctypes.c_void_p), *pointers, numel)
        return out

    out = call(UNWRITTEN[0])
    suspects = _holding(out, UNWRITTEN[0])
    if suspects.any():  # a written value may equal the pattern: a second pattern tells
        unwritten = suspects & _holding(call(UNWRITTEN[1]), UNWRITTEN[1])
        if unwritten.any():
            first = int(np.flatnonzero(unwritten)[0])
            raise ExecutionError(
                f"custom kernel '{op.function}' left {int(unwritten.sum())} of the "
                f"{out.size} elements of its output unwritten (the first at flat index "
                f"{first}); it must write every element of out"
            )
    return out


def _numpy_reference(
    op: CustomKernel, inputs: list[np.ndarray], ctx: kernels.KernelContext
) -> np.ndarray:
    arrays = [
        np.ascontiguousarray(array.astype(dtype.numpy, copy=False))
        for array, dtype in zip(inputs, ctx.input_dtypes, strict=True)
    ]
    assert op.reference is not None
    out = np.asarray(op.reference(*arrays))
    if out.shape != tuple(ctx.shape):
        raise ExecutionError(
            f"custom kernel '{op.function}': its numpy reference returned shape {out.shape}, "
            f"expected {tuple(ctx.shape)}"
        )
    return out.astype(ctx.dtype.numpy, copy=False)


# byte patterns an output is filled with before the call: an element still holding both
# (in two calls) was never written; no value holds two different patterns
UNWRITTEN = (0xA5, 0x5A)


def _holding(out: np.ndarray, fill: int) -> np.ndarray:
    """Per element (flat), whether all its bytes still hold `fill`."""
    raw = out.reshape(-1).view(np.uint8).reshape(out.size, out.itemsize)
    return (raw == fill).all(axis=1)


kernels.KERNELS[CustomKernel] = _reference
