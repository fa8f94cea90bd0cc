"""GPU lowering: a kernel of the IR as launches of work-items, shared by every GPU backend.

A CPU kernel's outer loop nest runs output elements (or rows) on threads; on a GPU each
iteration of that nest is a work-item. `to_gpu` finds, at the top of a kernel, the
perfectly nested loops under a `parallel` loop (the independent iterations over the
output) and turns them into `gpu_global` loops, at most three: the innermost is axis 0
(x, consecutive work-items touch consecutive elements), the next axis 1, and all outer
ones merge into axis 2 (their indices decoded from it). Serial and reduce loops inside
stay in the work-item. A kernel whose top level is several loop nests (a scatter: copy
the base in parallel, then add the update rows in order) becomes one launch per nest; a
nest with no parallel loop runs in one work-item, so its order is kept. The geometry is
data (`Launch.global_size` in work-items per axis, `Launch.local_size`), so the OpenCL,
CUDA and Metal runtimes launch the same thing.

A site's schedule knobs (`Choice`: the work-group size, `Opt`s of
`luminal.kernel.transforms` such as unrolling a loop of the work-item) are applied here,
as IR and launch geometry, never as text; the measured search picks them per node.

How a renderer writes a `gpu_global` loop: `const <index> var = <global id on its axis>;
if (var < extent) { body }` (no loop: the runtime rounds the global size up to a multiple
of the local size).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, replace

from luminal import ops
from luminal.custom import CustomKernel
from luminal.errors import CompileError
from luminal.graph import Graph, Node
from luminal.kernel import ir
from luminal.kernel.gpu_rows import LID, cooperative, row_width, strided_loop
from luminal.kernel.indexing import dims_of, loop_index
from luminal.kernel.lower import (
    NotRowLocal,
    elementwise_kernel,
    gather_kernel,
    reduce_kernel,
    row_kernel,
    scatter_kernel,
)
from luminal.kernel.transforms import IllegalTransform, Opt, apply_opts, opts_name
from luminal.schedule.fusion import plan_fusion
from luminal.shape.expr import ONE, Expr, product

MAX_AXES = 3
GROUP = 64  # work-items per work-group (the product over axes), a multiple of warp sizes
WORK_ITEM_KINDS = ("parallel", "gpu_global")
NESTED_KINDS = ("parallel", "serial", "gpu_global")


@dataclass(frozen=True)
class Choice:
    """The schedule knobs of one node's launches: `group` work-items per work-group (a
    row shared by a work-group: its width; None: the lowering's default), `vector`
    elements per work-item on axis 0 with wide loads and stores (`transforms.lanes`; 1:
    none) and `opts` applied to every launch's kernel after the work-item loops are
    formed."""

    group: int | None = None
    opts: tuple[Opt, ...] = field(default=())
    vector: int = 1

    @property
    def name(self) -> str:
        """Stable name for cached choices: `default`, `local(128)`, `vector(4)`,
        `unroll(r0_,4)`."""
        parts = [f"local({self.group})"] if self.group else []
        parts += [f"vector({self.vector})"] if self.vector > 1 else []
        parts += [opts_name(self.opts)] if self.opts else []
        return "+".join(parts) or "default"


DEFAULT_CHOICE = Choice()


@dataclass(frozen=True)
class Launch:
    """One kernel launch: `kernel` (with `gpu_global` loops at the top of its body, or
    none: a single work-item), its work-items per axis (axis 0 first; expressions of the
    dims) and its work-group size per axis. `scalars` are `long` arguments after the
    dims (a custom kernel's element counts)."""

    kernel: ir.Kernel
    global_size: tuple[Expr, ...]
    local_size: tuple[int, ...]
    scalars: tuple[Expr, ...] = ()

    @property
    def buffers(self) -> tuple[int, ...]:
        """Node ids bound to the kernel's buffer parameters, output first."""
        return tuple(p.node for p in self.kernel.params)

    @property
    def faults(self) -> bool:
        return self.kernel.reports_faults


@dataclass(frozen=True)
class HostStep:
    """A Python `Function` node, run on the host between launches."""

    node: int


@dataclass
class GpuProgram:
    """What a GPU backend runs: launches and host steps in order, over the buffers of
    `buffer_nodes` (inputs first); `steps_io` are (written node, read nodes) per step, for
    the memory plan; `dims` the graph's symbolic dims."""

    steps: list[Launch | HostStep]
    inputs: list[int]
    buffer_nodes: list[int]
    dims: list[str]
    steps_io: list[tuple[int, list[int]]]

    @property
    def launches(self) -> list[Launch]:
        return [s for s in self.steps if isinstance(s, Launch)]


# a backend's own kernel for a node (CUDA: a tensor-core matmul), or None for the default
Special = Callable[[Graph, Node, set[int], list[str]], "ir.Kernel | Launch | None"]


def lower_gpu(
    graph: Graph,
    special: Special | None = None,
    tile: int | tuple[int, int] | None = None,
    tiles: Mapping[int, int | tuple[int, int]] | None = None,
    choices: Mapping[int, Choice] | None = None,
) -> GpuProgram:
    """The launches of a graph after the e-graph: the schedule's kernels, each as GPU
    launches; Python functions as host steps. A matrix product is a tiled kernel staging
    its operands in local memory (`gpu_matmul`: `tile` a tile size or (tile, register
    block), by default `DEFAULT_TILE`; `tiles` per node; tile 0 is the plain loop kernel),
    other
    contractions loop kernels (no BLAS on a GPU); `choices` the knobs of other nodes'
    launches (`Choice`; IllegalTransform when one does not apply).
    `special` may supply a backend's own kernel for a node first."""
    from luminal.compiler.attention import unfuse_attention
    from luminal.compiler.winograd import unfuse_winograd
    from luminal.kernel.gpu_matmul import DEFAULT_TILE, schedule, tiled_matmul

    unfuse_attention(graph)  # a graph compiled for the CPU first: no GPU kernel for it
    unfuse_winograd(graph)
    tile = DEFAULT_TILE if tile is None else tile
    tiles = tiles or {}
    choices = choices or {}
    plan = plan_fusion(graph)
    materialised = set(plan.materialised) | set(plan.inputs)
    dims = dims_of(graph)
    kernels: dict[int, ir.Kernel | Launch] = {}
    for head, absorbed in plan.row_groups.items():
        try:
            kernels[head] = row_kernel(graph, graph.nodes[head], absorbed, materialised, dims)
        except NotRowLocal:
            continue
        materialised -= set(absorbed)
    order = [n for n in plan.materialised if n in materialised]
    steps: list[Launch | HostStep] = []
    steps_io: list[tuple[int, list[int]]] = []
    for node_id in order:
        node = graph.nodes[node_id]
        if isinstance(node.op, ops.Function):
            steps.append(HostStep(node_id))
            steps_io.append((node_id, [e.source for e in node.inputs]))
            continue
        chosen = kernels.get(node_id)
        if chosen is None and special is not None:
            chosen = special(graph, node, materialised, dims)
        size, block = schedule(tiles.get(node_id, tile))
        if chosen is None and size:
            chosen = tiled_matmul(graph, node, materialised, dims, size, block)
        if chosen is None:
            chosen = _node_kernel(graph, node, materialised, dims)
        choice = choices.get(node_id, DEFAULT_CHOICE)
        launches = [chosen] if isinstance(chosen, Launch) else to_gpu(chosen, choice)
        for launch in launches:
            steps.append(launch)
            steps_io.append((node_id, list(launch.buffers[1:])))
    inputs = list(plan.inputs)
    return GpuProgram(steps, inputs, inputs + order, dims, steps_io)


def _node_kernel(
    graph: Graph, node: Node, materialised: set[int], dims: list[str]
) -> ir.Kernel | Launch:
    op = node.op
    if isinstance(op, CustomKernel):
        return custom_launch(graph, node)
    if isinstance(op, ops.Contract | ops.SumReduce | ops.MaxReduce):
        return reduce_kernel(graph, node, materialised, dims)
    if isinstance(op, ops.Gather):
        return gather_kernel(graph, node, materialised, dims)
    if isinstance(op, ops.Scatter):
        return scatter_kernel(graph, node, materialised, dims)
    return elementwise_kernel(graph, node, materialised, dims)


CUSTOM = "custom"


def custom_launch(graph: Graph, node: Node) -> Launch:
    """A user's device kernel (`lm.custom_kernel(..., backend=...)`): its source as the
    kernel's prelude, one work-item per output element, the element counts of the output
    and the inputs as `long` arguments after the buffers. Its label names the backend
    whose language the source is in (`custom_kernel_source`); a C kernel is refused."""
    op = node.op
    if op.backend == "c":
        raise CompileError(
            f"custom kernel '{op.function}' (node {node.id}) is C, which runs on the CPU "
            "backend only; give the GPU backend its own source (lm.custom_kernel(..., "
            'backend="opencl"))'
        )
    buffers = [node.id] + [edge.source for edge in node.inputs]
    params = tuple(ir.Param(n, graph.nodes[n].dtype, output=i == 0) for i, n in enumerate(buffers))
    counts = (product(node.shape), *(product(e.view.shape) for e in node.inputs))
    call = ir.Call(op.function, tuple(range(len(buffers))), counts)
    label = f"{CUSTOM}_{op.backend}_{op.function}"
    kernel = ir.Kernel(label, params, (), (call,), (node.id,), prelude=op.source)
    return Launch(kernel, (counts[0],), (GROUP,), counts)


def custom_kernel_source(kernel: ir.Kernel) -> tuple[str, str, str] | None:
    """(backend, function, source) of a custom launch's kernel, None for any other."""
    body = kernel.body
    if len(body) != 1 or not isinstance(body[0], ir.Call) or not kernel.prelude:
        return None
    if not kernel.label.startswith(f"{CUSTOM}_"):  # a backend's own kernel (CUDA's WMMA)
        return None
    backend = kernel.label.removeprefix(f"{CUSTOM}_").removesuffix(f"_{body[0].function}")
    return backend, body[0].function, kernel.prelude


def to_gpu(kernel: ir.Kernel, choice: Choice = DEFAULT_CHOICE) -> list[Launch]:
    """The launches that compute `kernel` on a GPU (see the module docstring), with the
    knobs of `choice`."""
    body = kernel.body
    if len(body) > 1 and all(isinstance(s, ir.Loop) for s in body):
        parts = [(s,) for s in body]  # independent nests in order: one launch each
    else:
        parts = [body]
    launches = [_launch(replace(kernel, body=part), choice.group, choice.vector) for part in parts]
    if not choice.opts:
        return launches
    return [share_staging(replace(x, kernel=apply_opts(x.kernel, choice.opts))) for x in launches]


def innermost_work_loop(body: tuple[ir.Stmt, ...]) -> ir.Loop | None:
    """The `gpu_global` loop of axis 0 (the innermost one), or None."""
    for stmt in body:
        if isinstance(stmt, ir.Loop) and stmt.kind == "gpu_global":
            return innermost_work_loop(stmt.body) or stmt
        if isinstance(stmt, ir.Declare):
            continue
        return None
    return None


def share_staging(launch: Launch) -> Launch:
    """A tile staged in local memory at the start of a work-item (`stage_local` on the
    axis-0 `gpu_global` loop: local memory, a loop filling it, a barrier) as GPUs need
    it: the memory declared at kernel scope, and the fill shared by the work-group (each
    of its work-items copies every `group`-th element) instead of done by each alone.
    Other launches are returned unchanged."""
    loop = innermost_work_loop(launch.kernel.body)
    body = loop.body if loop is not None else ()
    staged = (
        len(body) >= 3
        and isinstance(body[0], ir.LocalMemory)
        and isinstance(body[1], ir.Loop)
        and isinstance(body[2], ir.Barrier)
    )
    if not staged:
        return launch
    group = launch.local_size[0]
    lid = loop_index(loop.var, loop.extent) % group
    fill = strided_loop(body[1], lid, group)
    shared = replace(loop, body=(fill, *body[2:]))
    kernel = launch.kernel
    new_body = _replace_loop(kernel.body, loop, shared)
    return replace(launch, kernel=replace(kernel, body=(body[0], *new_body)))


def _replace_loop(body: tuple[ir.Stmt, ...], old: ir.Loop, new: ir.Loop) -> tuple[ir.Stmt, ...]:
    out: list[ir.Stmt] = []
    for stmt in body:
        if stmt is old:
            stmt = new
        elif isinstance(stmt, ir.Loop):
            stmt = replace(stmt, body=_replace_loop(stmt.body, old, new))
        out.append(stmt)
    return tuple(out)


def _launch(kernel: ir.Kernel, group: int | None = None, vector: int = 1) -> Launch:
    chain = _work_item_chain(kernel.body)
    if not chain and vector > 1:
        raise IllegalTransform(f"vector({vector}) on kernel {kernel.label!r}: no work-item loop")
    if not chain:
        return Launch(kernel, (ONE,), (1,))
    innermost_body = chain[-1].body
    loops = [(loop.var, loop.extent) for loop in chain]
    width = row_width(innermost_body)
    if width is not None and group is not None:
        width = group
    if width is not None and vector > 1:
        why = "its rows are shared by a work-group"
        raise IllegalTransform(f"vector({vector}) on kernel {kernel.label!r}: {why}")
    if width is not None:  # a work-group per row: local id on axis 0, rows on 1 and 2
        memory, shared = cooperative(innermost_body, width)
        group = (ir.Loop(LID, ONE * width, "gpu_local", shared),)
        body, axes = _gpu_loops(loops, group, MAX_AXES - 1)
        extents = (ONE * width, *(extent for _, extent in axes))
        local = (width, *(1 for _ in axes))
        return Launch(replace(kernel, body=(*memory, *body)), extents, local)
    body, axes = _gpu_loops(loops, innermost_body, MAX_AXES)
    kernel = replace(kernel, body=body)
    extents = tuple(extent for _, extent in axes)
    if vector > 1:  # axis 0's work-items each do `vector` consecutive elements
        kernel = Opt("lanes", axes[0][0], vector).apply(kernel)
        extents = (innermost_work_loop(kernel.body).extent, *extents[1:])  # type: ignore[union-attr]
    return Launch(kernel, extents, local_size(extents, group or GROUP))


def _work_item_chain(body: tuple[ir.Stmt, ...]) -> list[ir.Loop]:
    """The loops whose iterations are independent: a top-level parallel loop and the
    loops perfectly nested in it (each the only statement of its parent's body)."""
    if len(body) != 1 or not isinstance(body[0], ir.Loop):
        return []
    loop = body[0]
    if loop.kind not in WORK_ITEM_KINDS:
        return []
    chain = [loop]
    while (
        len(loop.body) == 1
        and isinstance(loop.body[0], ir.Loop)
        and loop.body[0].kind in NESTED_KINDS
    ):
        loop = loop.body[0]
        chain.append(loop)
    return chain


def _gpu_loops(
    loops: list[tuple[str, Expr]], body: tuple[ir.Stmt, ...], max_axes: int
) -> tuple[tuple[ir.Stmt, ...], list[tuple[str, Expr]]]:
    """Nested `gpu_global` loops over `loops` (outermost first), merging the outer ones
    into one axis when there are more than `max_axes`; returns the body and the axes in
    axis order (innermost first)."""
    if len(loops) > max_axes:
        merged = loops[: len(loops) - max_axes + 1]
        flat_name = "gz_"
        flat_extent = product(extent for _, extent in merged)
        flat = loop_index(flat_name, flat_extent)
        decode: list[ir.Stmt] = []
        stride: Expr = ONE
        for name, extent in reversed(merged):
            value = (flat // stride) % extent
            decode.insert(0, ir.Declare(name, ir.INDEX, ir.IndexValue(value, ir.INDEX), True))
            stride = stride * extent
        body = (*decode, *body)
        loops = [(flat_name, flat_extent), *loops[len(merged) :]]
    for name, extent in reversed(loops):
        body = (ir.Loop(name, extent, "gpu_global", body),)
    return body, list(reversed(loops))


def local_size(extents: tuple[Expr, ...], group: int = GROUP) -> tuple[int, ...]:
    """Work-group sizes per axis, `group` work-items in all at most: axis 0 takes what it
    can use (a power of two up to its extent), the next axes the rest."""
    sizes = []
    left = group
    for extent in extents:
        known = extent.as_int()
        size = left if known is None else min(left, _next_power_of_two(max(known, 1)))
        sizes.append(size)
        left = max(left // size, 1)
    return tuple(sizes)


def _next_power_of_two(n: int) -> int:
    return 1 << (n - 1).bit_length()


def rounded_global(global_size: tuple[int, ...], local_size: tuple[int, ...]) -> tuple[int, ...]:
    """Work-items per axis rounded up to whole work-groups (OpenCL's global size; a CUDA
    grid is this divided by the local size)."""
    return tuple(-(-g // l) * l for g, l in zip(global_size, local_size, strict=True))
