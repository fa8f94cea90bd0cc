"""The CPU backend's C: the OpenMP dialect of the C renderer, and `KernelSource`, a
rendered kernel as the runtime and the search handle it.

Kernels are lowered to IR (`luminal.kernel.lower`) and rendered here; `CpuRenderer`
adds to the portable `CRenderer` what this backend runs with: outer loops on OpenMP
threads above a work threshold, `omp simd` reductions, and a preferred vector width.
Kernels take their buffers and the dimension array as arguments, so identical layers
share one compiled object; symbolic dims are read from the dimension array at run time.
"""

from __future__ import annotations

from dataclasses import dataclass

from luminal.kernel import ir
from luminal.kernel.canonical import canonical
from luminal.kernel.hoist import hoist_loads
from luminal.kernel.values import NotRowLocal
from luminal.render.c import ALLOC_FAULT, PRELUDE, CRenderer, c_expr
from luminal.shape.expr import Expr

__all__ = [
    "ALLOC_FAULT",
    "FAULT_PARAM",
    "PARALLEL_THRESHOLD",
    "PRELUDE",
    "CpuRenderer",
    "KernelSource",
    "NotRowLocal",
    "c_expr",
    "kernel_source",
]

# the last parameter of a kernel that can fault (an index out of range): the run's own
# record {code, offending value, bound}, never a global shared by every graph
FAULT_PARAM = CRenderer.fault_param

# a kernel's outer loop runs on OpenMP threads above this many elements: measured on
# LeNet-5 and MLP training steps (2 threads), 2**14 beats 2**18 by 15-20%; far lower
# (2**9) loses again to thread wake-ups
PARALLEL_THRESHOLD = 1 << 14

# a parallel loop of fewer iterations than this shares the next loop's iterations too
# (`collapse(2)`): the input image's pad copy parallelised over its 3 channels ran 2:1
# on 2 threads
COLLAPSE_BELOW = 64

_OMP_REDUCTION = {"add": "+", "max": "max"}


class CpuRenderer(CRenderer):
    """C for gcc with OpenMP: parallel loops as `omp parallel for` (serial below
    PARALLEL_THRESHOLD elements of work), reduce loops as `omp simd` reductions."""

    def parallel_loop(self, loop: ir.Loop, depth: int) -> list[str]:
        clause = (
            "" if loop.work is None else f" if(({self.index(loop.work)}) > {PARALLEL_THRESHOLD})"
        )
        if _collapsible(loop):
            clause = " collapse(2)" + clause
        pragma = self.line(f"#pragma omp parallel for{clause}", depth)
        return pragma + self.for_loop(loop, depth, loop.body)

    def reduce_pragma(self, loop: ir.Loop, depth: int) -> list[str]:
        clauses = []
        for r in loop.reductions:
            if r.op == "add" and not r.dtype.is_float:
                clauses.append(f"reduction(+:{r.name}_bits)")
                continue
            clauses.append(f"reduction({_OMP_REDUCTION[r.op]}:{r.name})")
            if r.op == "max" and r.dtype.is_float:
                clauses.append(f"reduction(|:{r.name}_nan)")
        return self.line("#pragma omp simd " + " ".join(clauses), depth)

    def attributes(self, kernel: ir.Kernel) -> str:
        if kernel.vector_width is None:
            return ""
        return f'__attribute__((target("prefer-vector-width={kernel.vector_width}"))) '


def _collapsible(loop: ir.Loop) -> bool:
    """Whether a parallel loop of few iterations (under COLLAPSE_BELOW) shares them with
    the serial loop it holds: the two are perfectly nested and a loop runs inside the
    second, so the innermost loop stays whole (vectorised)."""
    extent = loop.extent.as_int()
    if extent is None or extent >= COLLAPSE_BELOW or len(loop.body) != 1:
        return False
    inner = loop.body[0]
    return (
        isinstance(inner, ir.Loop)
        and inner.kind == "serial"
        and loop.var not in str(inner.extent)
        and any(isinstance(stmt, ir.Loop) for stmt in inner.body)
    )


RENDERER = CpuRenderer()


@dataclass
class KernelSource:
    """A kernel's C source and how to call it; `kernel` is the IR it was rendered from,
    which the search's knobs transform and render again (None for a kernel loaded from the
    program cache, which holds sources only)."""

    name: str
    source: str
    buffers: list[int]  # node ids passed as arguments: output first, then inputs
    nodes: list[int]  # graph nodes computed by this kernel (for LUMINAL_DEBUG)
    # bytes the kernel mallocs while it runs (all held at once), as expressions of the
    # dims: the run checks them against the machine's memory before anything runs
    scratch: tuple[Expr, ...] = ()
    kernel: ir.Kernel | None = None

    @property
    def reports_faults(self) -> bool:
        """Whether the kernel takes the run's fault record (`FAULT_PARAM`); read from the
        source, so renamed variants of a kernel keep it."""
        return FAULT_PARAM in self.source


def kernel_source(kernel: ir.Kernel, renderer: CRenderer = RENDERER) -> KernelSource:
    """Render `kernel` into the form the runtime links and calls: loads that cannot fault
    read unconditionally and hoisted out of the loops they do not depend on
    (`hoist_loads`), then canonical, so identical kernels share one symbol and one
    compiled object."""
    kernel = canonical(hoist_loads(kernel))
    name, source = renderer.render(kernel)
    buffers = [p.node for p in kernel.params]
    return KernelSource(name, source, buffers, list(kernel.nodes), kernel.scratch, kernel)
