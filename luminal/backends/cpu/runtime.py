"""The compiled CPU graph: kernels linked into one library and a runner per segment.

All kernels of a segment are called from one generated C function, so a run makes one
Python-level call per segment (a segment ends only at a Python `Function` op). Buffer
pointers live in one ctypes array: inputs are refreshed per run (the user may set new
arrays), intermediates point into an arena laid out by the memory plan, and retrieved or
kept tensors get their own arrays. Plans are cached per set of dimension sizes; a dim
that no output's shape uses is planned at its bucket (the next power of two, at least
16) when every buffer grows with it, so decoding, whose "past" grows by one per token,
plans its arena once per doubling instead of once per token.

State of a run lives in its own arguments, never in the library: a kernel that can fault
(an index out of range) writes the run plan's fault record, and the segment's runner
returns at the first fault, so two graphs loading one cached library never see each
other's faults. `Graph.execute` holds the graph's lock around a run (threading model:
docs/reliability.md).
"""

from __future__ import annotations

import ctypes
import math
import operator
import os
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from luminal import ops
from luminal.backends.cpu import buckets, invariants, toolchain
from luminal.backends.cpu.codegen import ALLOC_FAULT, PRELUDE, KernelSource
from luminal.backends.cpu.invariants import NO_REUSE, Reuse
from luminal.errors import ExecutionError, format_shape
from luminal.graph import Graph
from luminal.reference.executor import resolve_dims
from luminal.reference.kernels import KERNELS, KernelContext, compute_dtype
from luminal.reference.views import read_view
from luminal.schedule.memory import (
    MemoryPlan,
    check_fits,
    footprint,
    liveness,
    physical_memory,
    plan_memory,
)
from luminal.shape.expr import Expr

TIMING_HELPERS = r"""#include <stdio.h>
#include <time.h>
static double lm_now(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return t.tv_sec + 1e-9 * t.tv_nsec;
}
static void lm_report(int segment, const char* name, double seconds) {
    fprintf(stderr, "[luminal] segment %d %s %.3f ms\n", segment, name, seconds * 1e3);
}
"""


MAX_CACHED_PLANS = 8

# the fault record a runner receives: {code, offending value, bound, kernel in segment}
FAULT_WORDS = 4
# code -> what happened, given the op's name, the offending value and the bound
FAULTS = {
    1: "index {value} is out of range for a table of {bound} rows (valid: 0 to {last})",
    ALLOC_FAULT: "could not allocate {value} bytes of scratch memory",
}


MIN_BUCKET = 16


def bucket(size: int) -> int:
    """The size a plan is made for: the next power of two, at least MIN_BUCKET."""
    return MIN_BUCKET if size <= MIN_BUCKET else 1 << (size - 1).bit_length()


def grows_with_every_dim(expr: Expr) -> bool:
    """Whether `expr` never decreases when a dim grows: non-negative coefficients over
    variables, min/max of such expressions and their floor division by a positive
    constant (a plan for larger dims then holds it)."""
    for monomial, coefficient in expr.terms:
        if coefficient < 0:
            return False
        for atom in monomial:
            if atom.op == "var":
                continue
            if atom.op == "floordiv":
                divisor = atom.args[1].as_int()
                if divisor is None or divisor <= 0 or not grows_with_every_dim(atom.args[0]):
                    return False
            elif atom.op not in ("min", "max") or not all(map(grows_with_every_dim, atom.args)):
                return False
    return True


class _InputChecks:
    """Each input's expected shape, per set of sizes of the dims input shapes use."""

    def __init__(self, graph: Graph, input_nodes: list[int]) -> None:
        self.exprs = [(n, graph.nodes[n].shape) for n in input_nodes]
        names: set[str] = set()
        for _, shape in self.exprs:
            for d in shape:
                names |= d.variables()
        self.names = sorted(names)
        self.cache: dict[tuple, list[tuple[int, tuple[int, ...]]]] = {}

    def shapes(self, dims: dict[str, int]) -> list[tuple[int, tuple[int, ...]]] | None:
        """(input, shape) for every input at `dims`; None when a dim has no size."""
        key = tuple(dims.get(name) for name in self.names)
        cached = self.cache.get(key)
        if cached is not None:
            return cached
        if None in key:
            return None
        env = dict(zip(self.names, key, strict=True))
        shapes = [(n, tuple(d.evaluate(env) for d in shape)) for n, shape in self.exprs]
        if len(self.cache) >= MAX_CACHED_PLANS:
            self.cache.clear()
        self.cache[key] = shapes
        return shapes


@dataclass
class Segment:
    """Either a run of C kernels (`runner` set) or one Python Function node."""

    kernels: list[KernelSource] = field(default_factory=list)
    runner: str | None = None
    function_node: int | None = None


@dataclass
class RunPlan:
    plan: MemoryPlan
    arena: np.ndarray
    outputs: dict[int, np.ndarray]
    pointers: Any
    dim_values: Any
    pointers_arg: Any  # the three arrays as c_void_p, made once
    dims_arg: Any
    fault: Any  # this plan's fault record (FAULT_WORDS long longs)
    fault_arg: Any
    input_arrays: dict[int, np.ndarray] = field(default_factory=dict)
    output_of: dict[int, int] = field(default_factory=dict)  # id(output array) -> node id
    retired: dict[int, np.ndarray] = field(default_factory=dict)  # node -> array handed over
    buckets: dict[int, np.ndarray] = field(default_factory=dict)  # bucket node -> its array
    # kernels reused while their inputs are unchanged (invariants.py), planned for the
    # inputs seen changing so far (`volatile`); `persistent`: their outputs' own arrays
    reuse: Reuse = NO_REUSE
    volatile: frozenset[int] = frozenset()
    persistent: dict[int, np.ndarray] = field(default_factory=dict)  # node -> its bytes
    sizes: dict[int, int] = field(default_factory=dict)  # arena node -> bytes at plan dims
    spare_bytes: int = 0  # memory left beside what the plan needs
    skip_flags: Any = None  # per kernel in run order: 1 = reused (the runner skips it)
    skip_arg: Any = None
    run_all_arg: Any = None  # pointer to flags all zero
    reused_dims: tuple[int, ...] | None = None  # the dims the reused outputs are for


# Reads a buffer of the run in progress by node id (a copy; a graph input's own array):
# what a `Watch` is given
ReadBuffer = Callable[[int], np.ndarray]


@dataclass
class Watch:
    """Kernels to look around during one run (the compile-time check does, for nodes whose
    reference is a step function of its inputs): the segments holding them run kernel by
    kernel, the same functions on the same buffers as the segment's runner calls them,
    with `before(node, read)` and `after(node, read)` around each kernel computing a
    node of `nodes`."""

    nodes: frozenset[int]
    before: Callable[[int, ReadBuffer], None]
    after: Callable[[int, ReadBuffer], None]


class CompiledGraph:
    """What `CPUCompiler` leaves in `graph.compiled`; `Graph.execute` calls `execute`."""

    def __init__(
        self,
        graph: Graph,
        segments: list[Segment],
        buffer_nodes: list[int],
        input_nodes: list[int],
        dims: list[str],
        steps: list[tuple[int, list[int]]],
    ) -> None:
        self.segments = segments
        self.buffer_nodes = buffer_nodes  # slot -> node id
        self.slot = {node_id: i for i, node_id in enumerate(buffer_nodes)}
        self.input_nodes = input_nodes
        self.dims = dims
        self.steps = steps
        self.keep = set(graph.retrieved) | set(graph.kept)
        self.version = graph.nodes.version
        self.plans: dict[tuple[int, ...], RunPlan] = {}
        self.library: ctypes.CDLL | None = None
        self.runners: list[Any] = []
        self.debug = debug_level()
        self._forget_inputs()

    def _forget_inputs(self) -> None:
        """Nothing seen yet of the inputs' data (invariants.py learns which change)."""
        self._last_arrays: tuple[np.ndarray, ...] | None = None  # per input, last run
        self._last_sets = 0  # graph.set_count at the last run
        self._changed: set[int] = set()  # inputs the last run found changed
        self._volatile: set[int] = set()
        self._writeable: set[int] = set()  # inputs whose arrays may change in place

    # ---------------------------------------------------------------- building
    def units(self) -> list[tuple[str, str]]:
        """The (name, C source) translation units of this graph's library."""
        units: dict[str, str] = {}
        for segment in self.segments:
            for kernel in segment.kernels:
                units[kernel.name] = PRELUDE + kernel.source
        units["lm_runner"] = self.runner_source()
        return sorted(units.items())

    def __getstate__(self) -> dict[str, Any]:
        """Pickled without the loaded library and run plans (measured search sends a
        candidate to a measuring process, which calls `build()` again: a cache hit)."""
        state = dict(self.__dict__)
        for transient in ("library", "runners"):
            state.pop(transient, None)
        state["plans"] = {}
        for derived in (
            "_bucketed",
            "_input_checks",
            "_bucket_layouts",
            "_depends",
            "_input_getter",
        ):
            state.pop(derived, None)
        for learnt in ("_last_arrays", "_last_sets", "_changed", "_volatile", "_writeable"):
            state.pop(learnt, None)
        return state

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__dict__.update(state)
        self.library = None
        self.runners = []
        self._forget_inputs()

    def build(self) -> None:
        if self.debug:
            for segment in self.segments:
                for kernel in segment.kernels:
                    print(f"// kernel {kernel.name} (graph nodes {kernel.nodes})")
                    print(kernel.source)
        path = toolchain.build_shared(self.units(), link_blas=True)
        self.library = toolchain.load(path)
        self.runners = []
        for segment in self.segments:
            if segment.runner is not None:
                fn = getattr(self.library, segment.runner)
                fn.argtypes = [ctypes.c_void_p] * 4
                fn.restype = ctypes.c_int
                self.runners.append(fn)
            else:
                self.runners.append(None)

    def runner_source(self) -> str:
        lines = ["typedef void (*lm_kernel_fn)(void);"]
        for segment in self.segments:
            for kernel in segment.kernels:
                lines.append(f"void {kernel.name}();")
        order = 0  # the kernel's place in the skip flags (all segments, run order)
        for index, segment in enumerate(self.segments):
            if segment.runner is None:
                continue
            body = ["    s[0] = 0;"]
            for position, kernel in enumerate(segment.kernels):
                args = ", ".join([*(f"b[{self.slot[n]}]" for n in kernel.buffers), "d"])
                call = f"{kernel.name}({args}{', s' if kernel.reports_faults else ''});"
                if self.debug >= 2:
                    report = f'lm_report({index}, "{kernel.name}", lm_now() - t0);'
                    call = f"{{ double t0 = lm_now(); {call} {report} }}"
                if kernel.reports_faults:  # stop at the first fault: later kernels read it
                    call += f" if (s[0]) {{ s[3] = {position}; return 1; }}"
                body.append(f"    if (!k[{order}]) {{ {call} }}")
                order += 1
            lines.append(
                f"int {segment.runner}(void** b, const long long* d, long long* s, "
                "const unsigned char* k) {"
            )
            lines.extend(body)
            lines.append("    return 0;\n}")
        if self.debug >= 2:
            lines.insert(0, TIMING_HELPERS)
        return "\n".join(lines) + "\n"

    # ---------------------------------------------------------------- running
    def plan_dims(self, graph: Graph, dims: dict[str, int]) -> tuple[int, ...]:
        """The dims a run's plan is made for (`self.dims` order): exact for dims an output
        shape uses, bucketed for the others when every buffer grows with them."""
        bucketed = self.__dict__.get("_bucketed")
        if bucketed is None:
            bucketed = self._bucketed = self._bucketable(graph)
        return tuple(
            bucket(dims.get(n, 0)) if flag else dims.get(n, 0)
            for n, flag in zip(self.dims, bucketed, strict=True)
        )

    def _bucketable(self, graph: Graph) -> tuple[bool, ...]:
        in_outputs: set[str] = set()
        for node_id in self.keep:
            for d in graph.nodes[node_id].shape:
                in_outputs |= d.variables()
        sizes = [
            d
            for n in self.buffer_nodes
            if n not in self.input_nodes and n not in self.keep
            for d in graph.nodes[n].shape
        ]
        scratch = [e for seg in self.segments for k in seg.kernels for e in k.scratch]
        monotone = all(grows_with_every_dim(e) for e in sizes + scratch)
        return tuple(monotone and name not in in_outputs for name in self.dims)

    def run_plan(self, graph: Graph, dims: dict[str, int], exact: bool = False) -> RunPlan:
        """The plan for a run at `dims` (cached); `exact` plans at `dims` themselves,
        not cached (what memory_report shows)."""
        key = tuple(dims.get(n, 0) for n in self.dims) if exact else self.plan_dims(graph, dims)
        cached = None if exact else self.plans.get(key)
        if cached is not None:
            self.plans[key] = self.plans.pop(key)  # most recently used last
            return cached
        while not exact and len(self.plans) >= MAX_CACHED_PLANS:
            self.plans.pop(next(iter(self.plans)))
        dims = {**dims, **dict(zip(self.dims, key, strict=True))}
        sizes: dict[int, int] = {}
        shapes: dict[int, tuple[int, ...]] = {}  # retrieved/kept: their own arrays
        for node_id in self.buffer_nodes:
            node = graph.nodes[node_id]
            if node_id in self.input_nodes:
                continue
            shape = tuple(d.evaluate(dims) for d in node.shape)
            if node_id in self.keep:
                shapes[node_id] = shape
            else:
                sizes[node_id] = math.prod(shape) * node.dtype.itemsize  # no int64 wrap
        first, last = liveness([s for s in self.steps if s[0] in sizes or s[0] in shapes])
        layouts = self._buckets(graph)
        for layout in layouts.values():  # in the bucket's own array, not the arena
            for node_id in (layout.node, *layout.placed):
                del sizes[node_id]
        first = {n: first.get(n, 0) for n in sizes}
        last = {n: last.get(n, first[n]) for n in sizes}
        plan = plan_memory(sizes, first, last)
        # everything this run allocates fits in memory, or OutOfMemoryError before any of it
        outputs_bytes = {n: math.prod(s) * graph.nodes[n].dtype.itemsize for n, s in shapes.items()}
        kernels = (kernel for segment in self.segments for kernel in segment.kernels)
        needs = footprint(plan, sizes, outputs_bytes, kernels, dims)
        check_fits(needs, graph, dims)
        outputs = {n: np.empty(s, dtype=graph.nodes[n].dtype.numpy) for n, s in shapes.items()}
        arena = np.empty(max(plan.arena_bytes, 64), dtype=np.uint8)
        pointers = (ctypes.c_void_p * max(len(self.buffer_nodes), 1))()
        base = arena.ctypes.data
        for node_id, offset in plan.offsets.items():
            pointers[self.slot[node_id]] = base + offset
        for node_id, array in outputs.items():
            pointers[self.slot[node_id]] = array.ctypes.data
        dim_values = (ctypes.c_longlong * max(len(self.dims), 1))()
        fault = (ctypes.c_longlong * FAULT_WORDS)()
        run_plan = RunPlan(
            plan,
            arena,
            outputs,
            pointers,
            dim_values,
            ctypes.cast(pointers, ctypes.c_void_p),
            ctypes.cast(dim_values, ctypes.c_void_p),
            fault,
            ctypes.cast(fault, ctypes.c_void_p),
        )
        run_plan.output_of = {id(array): node_id for node_id, array in outputs.items()}
        run_plan.sizes = sizes
        run_plan.spare_bytes = physical_memory() - needs.total
        self._set_reuse(run_plan, self._reuse(graph, layouts))
        for node_id, layout in layouts.items():
            run_plan.buckets[node_id] = layout.bind(graph, pointers, self.slot)
        if not exact:
            self.plans[key] = run_plan
        return run_plan

    def _reuse(self, graph: Graph, layouts: dict[int, buckets.BucketLayout]) -> Reuse:
        """The kernels a plan made now reuses (invariants.plan_reuse)."""
        depends = self.__dict__.get("_depends")
        if depends is None:
            functions = {s.function_node for s in self.segments if s.function_node is not None}
            depends = invariants.input_dependencies(self.steps, self.input_nodes, functions)
            self._depends = depends
        always = set(self.keep)
        always.update(s.function_node for s in self.segments if s.function_node is not None)
        for layout in layouts.values():
            always.update((layout.node, *layout.placed))
        return invariants.plan_reuse(self.steps, depends, self._volatile, always)

    def _set_reuse(self, run: RunPlan, reuse: Reuse) -> None:
        """Give `run` the reuse planned for the volatile inputs seen now: reused outputs
        that a recomputed kernel reads move from the arena (whose space later kernels
        take; the plan keeps their place, so the same plan serves whatever is reused) to
        their own arrays, and the runners get the skip flags, in their kernels' order.
        Without room for those arrays, nothing is reused."""
        if sum(run.sizes[n] for n in reuse.persistent) > run.spare_bytes:
            reuse = NO_REUSE
        base = run.arena.ctypes.data
        for node_id in run.persistent.keys() - reuse.persistent:
            run.pointers[self.slot[node_id]] = base + run.plan.offsets[node_id]
        persistent = {}
        for node_id in reuse.persistent:
            array = run.persistent.get(node_id)
            if array is None:
                array = np.empty(run.sizes[node_id], dtype=np.uint8)
            run.pointers[self.slot[node_id]] = array.ctypes.data
            persistent[node_id] = array
        kernels = [k.buffers[0] for segment in self.segments for k in segment.kernels]
        skip = (ctypes.c_ubyte * max(len(kernels), 1))(*(n in reuse.nodes for n in kernels))
        run_all = (ctypes.c_ubyte * max(len(kernels), 1))()
        run.reuse = reuse
        run.volatile = frozenset(self._volatile)
        run.persistent = persistent
        run.reused_dims = None
        run.skip_arg = ctypes.cast(skip, ctypes.c_void_p)
        run.run_all_arg = ctypes.cast(run_all, ctypes.c_void_p)
        run.skip_flags = (skip, run_all)  # keeps the arrays behind the pointers alive

    def _hand_over(self, run: RunPlan, node_id: int, array: np.ndarray, previous: Any) -> None:
        """Output `array` became an input (state carried to the next run, as an optimizer's
        apply() does): the output gets another array, so a run never writes what it reads.
        The input's previous array is reused when it was this output's before (ping-pong);
        a user's array never is."""
        spare = run.retired.pop(node_id, None)
        if spare is None or spare is not previous:
            spare = np.empty_like(array)
        run.retired[node_id] = array
        del run.output_of[id(array)]
        run.outputs[node_id] = spare
        run.output_of[id(spare)] = node_id
        run.pointers[self.slot[node_id]] = spare.ctypes.data

    def _dims(self, graph: Graph) -> dict[str, int]:
        """The dimension map, checked against the inputs' data: a shape comparison per
        input, the symbolic shapes evaluated once per set of sizes (the general check,
        `resolve_dims`, evaluates every input's expressions: ~25 us per run without
        symbolic dims, ~200 us for a decoder). Anything unexpected goes to the general
        check, which raises the error that names it."""
        checks = self.__dict__.get("_input_checks")
        if checks is None:
            checks = self._input_checks = _InputChecks(graph, self.input_nodes)
        dims = graph.dims
        data = graph.input_data
        expected = checks.shapes(dims)
        if expected is None or graph.dim_checks:  # checks: see Graph.require_nonzero
            return resolve_dims(graph, self.input_nodes)
        for node_id, shape in expected:
            array = data.get(node_id)
            if array is None or array.shape != shape:
                return resolve_dims(graph, self.input_nodes)
        return dict(dims)

    def execute(self, graph: Graph, watch: Watch | None = None) -> None:
        """One run: refresh input pointers that changed, then one C call per segment
        (kernel by kernel in segments holding a node `watch` looks at)."""
        if graph.nodes.version != self.version:
            raise ExecutionError(
                "execute: the graph changed after CPUCompiler compiled it; compile again"
            )
        dims = self._dims(graph)
        if not self._note_inputs(graph):  # a stable input changed: reused values are stale
            for plan in self.plans.values():
                plan.reused_dims = None
        run = self.run_plan(graph, dims)
        if run.volatile != self._volatile:  # planned for other volatile inputs
            self._set_reuse(run, self._reuse(graph, self._buckets(graph)))
        pointers = run.pointers
        seen = run.input_arrays
        for node_id in self.input_nodes:
            data = graph.input_data[node_id]
            previous = seen.get(node_id)
            if previous is data:
                continue  # the same array as last run: its pointer is already in place
            if not data.flags.c_contiguous:
                data = np.ascontiguousarray(data)
                graph.input_data[node_id] = data
            pointers[self.slot[node_id]] = data.ctypes.data
            seen[node_id] = data
            owner = run.output_of.get(id(data))
            if owner is not None and run.outputs.get(owner) is data:
                self._hand_over(run, owner, data, previous)
        dim_values = run.dim_values
        exact = tuple(dims.get(name, 0) for name in self.dims)
        for index, size in enumerate(exact):
            dim_values[index] = size
        skip = run.skip_arg if run.reused_dims == exact else run.run_all_arg
        run.reused_dims = None  # until this run has succeeded
        for segment, runner in zip(self.segments, self.runners, strict=True):
            start = time.perf_counter()
            if watch is not None and any(set(k.nodes) & watch.nodes for k in segment.kernels):
                self._run_watched(graph, segment, run, dims, watch)
            elif runner is not None:
                if runner(run.pointers_arg, run.dims_arg, run.fault_arg, skip):
                    self._raise_fault(graph, segment, run.fault)
            else:
                self._run_function(graph, segment.function_node, run, dims)
            if self.debug >= 2:
                print(f"[luminal] segment total {(time.perf_counter() - start) * 1e3:.3f} ms")
        graph.buffers = dict(run.outputs)
        if run.reuse.nodes:
            run.reused_dims = exact

    def _note_inputs(self, graph: Graph) -> bool:
        """Find the inputs whose data changed since the last run (another array, or the
        same one `.set()` again: `graph.input_versions` stamps each set()). One changed in
        two runs in a row becomes volatile; one unchanged in two runs in a row, stable
        again. An input whose array is writeable counts as changed on every run: only a
        read-only array promises that its data stays put until it is set() again, so only
        those are ever reused from (a writeable one may be edited in place). Whether only
        volatile inputs changed (so reused values still hold)."""
        nodes = self.input_nodes
        if not nodes:
            return True
        getter = self.__dict__.get("_input_getter")
        if getter is None:  # one C call for all the arrays
            getter = self._input_getter = operator.itemgetter(*nodes)
        arrays = getter(graph.input_data)
        if len(nodes) == 1:
            arrays = (arrays,)
        versions, last = graph.input_versions, self._last_arrays
        if last is None:
            self._last_arrays, self._last_sets = arrays, graph.set_count
            self._writeable = _writeable(nodes, arrays)
            return False
        if graph.set_count == self._last_sets and all(map(operator.is_, arrays, last)):
            changed = set(self._writeable)  # the common case, checked at C speed
        else:  # a set() since the last run is one with a later stamp than that run's
            stamp = self._last_sets
            changed = {n for n, a, b in zip(nodes, arrays, last, strict=True) if a is not b}
            changed.update(n for n in nodes if versions.get(n, 0) > stamp)
            self._writeable = _writeable(nodes, arrays)
            changed |= self._writeable
            self._last_arrays, self._last_sets = arrays, graph.set_count
        before, self._changed = self._changed, changed
        volatile = self._volatile
        if changed or before or volatile:
            volatile |= changed & before
            volatile -= volatile - changed - before
        return changed <= volatile

    def _run_watched(
        self, graph: Graph, segment: Segment, run: RunPlan, dims: dict, watch: Watch
    ) -> None:
        """The segment's kernels called one at a time, as its runner calls them (same
        symbols, same buffer pointers, the same fault record), `watch` around its nodes."""
        assert self.library is not None

        def read(node_id: int) -> np.ndarray:
            buffer = self._buffer(graph, node_id, run, dims)
            return buffer if node_id in self.input_nodes else buffer.copy()

        run.fault[0] = 0
        for position, kernel in enumerate(segment.kernels):
            watched = sorted(set(kernel.nodes) & watch.nodes)
            for node_id in watched:
                watch.before(node_id, read)
            fn = getattr(self.library, kernel.name)
            fn.restype = None
            args = [ctypes.c_void_p(run.pointers[self.slot[n]]) for n in kernel.buffers]
            args.append(run.dims_arg)
            if kernel.reports_faults:
                args.append(run.fault_arg)
            fn(*args)
            if kernel.reports_faults and run.fault[0]:
                run.fault[3] = position
                self._raise_fault(graph, segment, run.fault)
            for node_id in watched:
                watch.after(node_id, read)

    def _raise_fault(self, graph: Graph, segment: Segment, fault: Any) -> None:
        """The ExecutionError for the fault a runner returned: the op, the offending value
        and the bound. The record is cleared, so the next run starts clean."""
        code, value, bound, position = (int(fault[i]) for i in range(FAULT_WORDS))
        for i in range(FAULT_WORDS):
            fault[i] = 0
        node_id = segment.kernels[position].buffers[0]
        node = graph.nodes[node_id]
        what = FAULTS.get(code, "fault code {code}").format(
            code=code, value=value, bound=bound, last=bound - 1
        )
        raise ExecutionError(
            f"{node.op.name} (node {node_id}, shape {format_shape(node.shape)}): {what}; "
            "this run's outputs are discarded"
        )

    def _buckets(self, graph: Graph) -> dict[int, buckets.BucketLayout]:
        layouts = self.__dict__.get("_bucket_layouts")
        if layouts is None:
            layouts = buckets.layouts(graph, self.steps, self.input_nodes, self.keep)
            self._bucket_layouts = layouts
        return layouts

    def _run_function(self, graph: Graph, node_id: int, run: RunPlan, dims: dict) -> None:
        node = graph.nodes[node_id]
        flat = run.buckets.get(node_id)
        if flat is not None:  # inputs already in place but for the copied ones
            layout = self._bucket_layouts[node_id]
            for index, offset, size in layout.copied:
                edge = node.inputs[index]
                piece = read_view(self._buffer(graph, edge.source, run, dims), edge.view, dims)
                flat[offset : offset + size] = piece.reshape(-1)
            buckets.reduce(node, flat)
            return
        arrays = []
        for edge in node.inputs:
            source = graph.nodes[edge.source]
            buffer = self._buffer(graph, edge.source, run, dims)
            arrays.append(read_view(buffer, edge.view, dims).astype(compute_dtype(source.dtype)))
        result = KERNELS[ops.Function](node.op, arrays, KernelContext(node, dims))
        target = self._buffer(graph, node_id, run, dims)
        target[...] = np.asarray(result, dtype=node.dtype.numpy)

    def _buffer(self, graph: Graph, node_id: int, run: RunPlan, dims: dict) -> np.ndarray:
        node = graph.nodes[node_id]
        if node_id in self.input_nodes:
            return graph.input_data[node_id]
        if node_id in run.outputs:
            return run.outputs[node_id]
        if node_id in run.buckets:
            return run.buckets[node_id]
        shape = tuple(d.evaluate(dims) for d in node.shape)
        count = int(np.prod(shape, dtype=np.int64))
        own = run.persistent.get(node_id)
        if own is not None:
            return own[: count * node.dtype.itemsize].view(node.dtype.numpy).reshape(shape)
        offset = run.plan.offsets[node_id]
        return (
            run.arena[offset : offset + count * node.dtype.itemsize]
            .view(node.dtype.numpy)
            .reshape(shape)
        )

    def memory_report(self, graph: Graph) -> dict[str, int]:
        dims = resolve_dims(graph, self.input_nodes)
        run = self.run_plan(graph, dims, exact=True)
        report = run.plan.report()
        report["outputs_bytes"] = int(sum(a.nbytes for a in run.outputs.values()))
        # the own arrays of reused kernels' results (invariants.py), held between runs
        report["reused_results_bytes"] = int(sum(a.nbytes for a in run.persistent.values()))
        report["peak_bytes"] = (
            report["arena_bytes"] + report["outputs_bytes"] + report["reused_results_bytes"]
        )
        return report


def _writeable(nodes: Sequence[int], arrays: Sequence[np.ndarray]) -> set[int]:
    """The inputs whose arrays numpy lets anyone write to (their data may change in place
    without a set(), so kernels reading them are never reused)."""
    return {n for n, a in zip(nodes, arrays, strict=True) if a.flags.writeable}


def debug_level() -> int:
    """LUMINAL_DEBUG, read when a program is made or loaded: set before it is built, since
    level 2's per-kernel timing is compiled into the runner."""
    return int(os.environ.get("LUMINAL_DEBUG", "0") or 0)
