"""A compiled graph on a GPU-style device, whatever the API (OpenCL, CUDA, Metal).

The graph's buffers live on the device and stay there between runs: intermediates share
one device arena laid out by the memory plan (`luminal.schedule.memory`, offsets aligned
for the device), retrieved and kept tensors have their own device buffers, and inputs
have device buffers that `.set()` refreshes: an input is uploaded when it was set since
its last upload (the graph's input table records every set), so weights cross once.
After a run the retrieved and kept tensors are copied back to host arrays, which
`.numpy()` reads. Python `Function` nodes run on the host between launches.

A backend supplies a `GpuDevice` (allocation, transfers, building the program, binding and
launching kernels); plans (buffers, bound kernels, sizes) are cached per set of dims.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

import numpy as np

from luminal import ops
from luminal.errors import ExecutionError, format_shape
from luminal.graph import Graph
from luminal.kernel.gpu import GpuProgram, HostStep, Launch, rounded_global
from luminal.reference.executor import resolve_dims
from luminal.reference.kernels import KERNELS, KernelContext, compute_dtype
from luminal.reference.views import read_view
from luminal.schedule.memory import check_fits, footprint, liveness, plan_memory

MAX_CACHED_PLANS = 8
FAULT_WORDS = 4  # {code, offending value, bound, launch} as int32
FAULTS = {1: "index {value} is out of range for a table of {bound} rows (valid: 0 to {last})"}


class GpuDevice(Protocol):
    """What a backend's device offers the compiled graph."""

    alignment: int  # bytes: arena offsets are multiples of it

    def build(self, launches: Sequence[Launch]) -> list[str]:
        """Compile every launch's kernel (one program); returns their kernel names."""
        ...

    def alloc(self, nbytes: int) -> Any: ...

    def view(self, buffer: Any, offset: int, nbytes: int) -> Any: ...

    def upload(self, buffer: Any, array: np.ndarray) -> None: ...

    def download(self, buffer: Any, array: np.ndarray) -> None:
        """Copy the device buffer into `array` (blocking)."""
        ...

    def bind(self, name: str, args: list[Any]) -> Any:
        """A launchable kernel `name` with its arguments (buffers, then int64 scalars)."""
        ...

    def launch(self, bound: Any, global_size: tuple[int, ...], local: tuple[int, ...]) -> None: ...

    def synchronize(self) -> None: ...


class InputTable(dict):
    """`graph.input_data` of a graph compiled for a device: counts every set of an input,
    so a run uploads exactly the inputs set since their last upload."""

    _counter = itertools.count(1)

    def __init__(self, data: Mapping[int, np.ndarray] = ()) -> None:
        super().__init__(data)
        self.versions: dict[int, int] = {k: next(self._counter) for k in self}

    def __setitem__(self, key: int, value: np.ndarray) -> None:
        super().__setitem__(key, value)
        self.versions[key] = next(self._counter)

    def update(self, *args: Any, **kwargs: Any) -> None:
        for key, value in dict(*args, **kwargs).items():
            self[key] = value

    def setdefault(self, key: int, default: Any = None) -> Any:
        if key not in self:
            self[key] = default
        return self[key]

    def __reduce__(self) -> Any:  # pickled as a plain dict (measured search, copies)
        return (dict, (dict(self),))


@dataclass
class Plan:
    """Device buffers and bound launches for one set of dims."""

    dims: dict[str, int]
    buffers: dict[int, Any]  # node -> device buffer (inputs, arena views, outputs)
    outputs: dict[int, np.ndarray]  # retrieved/kept node -> host array
    calls: list[Any]  # per step: (bound kernel, global, local) or HostStep or None (empty)
    fault: Any
    arena_bytes: int = 0
    uploaded: dict[int, int] = field(default_factory=dict)  # node -> version uploaded


class GpuCompiledGraph:
    """What a GPU compiler leaves in `graph.compiled`; `Graph.execute` calls `execute`."""

    def __init__(self, graph: Graph, program: GpuProgram, device: GpuDevice, label: str) -> None:
        self.program = program
        self.device = device
        self.label = label  # the compiler's name, for errors
        self.keep = set(graph.retrieved) | set(graph.kept)
        self.version = graph.nodes.version
        self.names: list[str] = []
        self.plans: dict[tuple[int, ...], Plan] = {}
        self.faulting = any(launch.faults for launch in program.launches)

    def build(self) -> None:
        self.names = self.device.build(self.program.launches)

    # ---------------------------------------------------------------- plans
    def run_plan(self, graph: Graph, dims: dict[str, int]) -> Plan:
        key = tuple(dims.get(n, 0) for n in self.program.dims)
        plan = self.plans.get(key)
        if plan is not None:
            return plan
        while len(self.plans) >= MAX_CACHED_PLANS:
            self.plans.pop(next(iter(self.plans)))
        plan = self._make_plan(graph, dims)
        self.plans[key] = plan
        return plan

    def _nbytes(self, graph: Graph, node_id: int, dims: dict[str, int]) -> int:
        node = graph.nodes[node_id]
        return math.prod(d.evaluate(dims) for d in node.shape) * node.dtype.itemsize

    def _make_plan(self, graph: Graph, dims: dict[str, int]) -> Plan:
        device, program = self.device, self.program
        align = device.alignment
        sizes: dict[int, int] = {}
        outputs_bytes: dict[int, int] = {}
        for node_id in program.buffer_nodes:
            if node_id in program.inputs:
                continue
            nbytes = self._nbytes(graph, node_id, dims)
            if node_id in self.keep:
                outputs_bytes[node_id] = nbytes
            else:
                sizes[node_id] = -(-max(nbytes, 1) // align) * align
        io = [s for s in program.steps_io if s[0] in sizes or s[0] in outputs_bytes]
        first, last = liveness(io)
        first = {n: first.get(n, 0) for n in sizes}
        last = {n: last.get(n, first[n]) for n in sizes}
        memory = plan_memory(sizes, first, last)
        check_fits(footprint(memory, sizes, outputs_bytes, (), dims), graph, dims)
        buffers: dict[int, Any] = {}
        arena = device.alloc(max(memory.arena_bytes, align))
        for node_id, offset in memory.offsets.items():
            buffers[node_id] = device.view(arena, offset, sizes[node_id])
        outputs = {}
        for node_id, nbytes in outputs_bytes.items():
            node = graph.nodes[node_id]
            buffers[node_id] = device.alloc(max(nbytes, align))
            shape = tuple(d.evaluate(dims) for d in node.shape)
            outputs[node_id] = np.empty(shape, dtype=node.dtype.numpy)
        for node_id in program.inputs:
            buffers[node_id] = device.alloc(max(self._nbytes(graph, node_id, dims), align))
        fault = device.alloc(max(4 * FAULT_WORDS, align)) if self.faulting else None
        if fault is not None:
            device.upload(fault, np.zeros(FAULT_WORDS, np.int32))
        calls = self._bind(program, buffers, dims, fault)
        return Plan(dict(dims), buffers, outputs, calls, fault, memory.arena_bytes)

    def _bind(self, program: GpuProgram, buffers: dict, dims: dict, fault: Any) -> list[Any]:
        calls: list[Any] = []
        position = 0
        for step in program.steps:
            if isinstance(step, HostStep):
                calls.append(step)
                continue
            name = self.names[position]
            kernel = step.kernel
            args: list[Any] = [buffers[n] for n in step.buffers]
            args += [np.int64(dims.get(n, 0)) for n in kernel.dims]
            args += [np.int64(e.evaluate(dims)) for e in step.scalars]
            if step.faults:
                args += [fault, np.int32(position)]
            size = tuple(e.evaluate(dims) for e in step.global_size)
            if 0 in size:
                calls.append(None)  # nothing to compute (an empty dim)
            else:
                global_size = rounded_global(size, step.local_size)
                calls.append((self.device.bind(name, args), global_size, step.local_size))
            position += 1
        return calls

    # ---------------------------------------------------------------- running
    def _dims(self, graph: Graph) -> dict[str, int]:
        if not self.program.dims and not graph.dim_checks:
            return {}
        return resolve_dims(graph, self.program.inputs)

    def execute(self, graph: Graph) -> None:
        if graph.nodes.version != self.version:
            raise ExecutionError(
                f"execute: the graph changed after {self.label} compiled it; compile again"
            )
        table = graph.input_data
        if not isinstance(table, InputTable):
            table = graph.input_data = InputTable(table)
        for node_id in self.program.inputs:
            if node_id not in table:
                node = graph.nodes[node_id]
                raise ExecutionError(
                    f"execute: input '{node.op.label}' (node {node_id}, shape "
                    f"{format_shape(node.shape)}) has no data; call set() first"
                )
        dims = self._dims(graph)
        plan = self.run_plan(graph, dims)
        self._upload_inputs(graph, table, plan)
        device = self.device
        for call in plan.calls:
            if call is None:
                continue
            if isinstance(call, HostStep):
                self._run_function(graph, call.node, plan)
            else:
                device.launch(*call)
        for node_id, array in plan.outputs.items():
            device.download(plan.buffers[node_id], array)
        if plan.fault is not None:
            self._check_fault(graph, plan)
        graph.buffers = dict(plan.outputs)

    def _upload_inputs(self, graph: Graph, table: InputTable, plan: Plan) -> None:
        stamp_of = table.versions
        for node_id in self.program.inputs:
            stamp = stamp_of.get(node_id, 0)  # versions are unique across tables
            if plan.uploaded.get(node_id) == stamp:
                continue
            data = table[node_id]
            if not data.flags.c_contiguous:
                data = np.ascontiguousarray(data)
            self.device.upload(plan.buffers[node_id], data)
            plan.uploaded[node_id] = stamp

    def _check_fault(self, graph: Graph, plan: Plan) -> None:
        record = np.zeros(FAULT_WORDS, np.int32)
        self.device.download(plan.fault, record)
        code, value, bound, position = (int(v) for v in record)
        if code == 0:
            return
        self.device.upload(plan.fault, np.zeros(FAULT_WORDS, np.int32))
        graph.buffers = {}
        launch = self.program.launches[position]
        node_id = launch.buffers[0]
        node = graph.nodes[node_id]
        what = FAULTS.get(code, "fault code {code}").format(
            code=code, value=value, bound=bound, last=bound - 1
        )
        raise ExecutionError(
            f"{node.op.name} (node {node_id}, shape {format_shape(node.shape)}): {what}; "
            "this run's outputs are discarded"
        )

    def _run_function(self, graph: Graph, node_id: int, plan: Plan) -> None:
        """A Python function between launches: its inputs come back to the host, its
        result goes to the device."""
        self.device.synchronize()
        node = graph.nodes[node_id]
        arrays = []
        for edge in node.inputs:
            source = graph.nodes[edge.source]
            buffer = self._host_copy(graph, edge.source, plan)
            array = read_view(buffer, edge.view, plan.dims).astype(compute_dtype(source.dtype))
            arrays.append(array)
        result = KERNELS[ops.Function](node.op, arrays, KernelContext(node, plan.dims))
        shape = tuple(d.evaluate(plan.dims) for d in node.shape)
        out = np.ascontiguousarray(np.broadcast_to(np.asarray(result, node.dtype.numpy), shape))
        self.device.upload(plan.buffers[node_id], out)

    def _host_copy(self, graph: Graph, node_id: int, plan: Plan) -> np.ndarray:
        if node_id in self.program.inputs:
            return graph.input_data[node_id]
        node = graph.nodes[node_id]
        shape = tuple(d.evaluate(plan.dims) for d in node.shape)
        array = np.empty(shape, dtype=node.dtype.numpy)
        self.device.download(plan.buffers[node_id], array)
        return array

    def memory_report(self, graph: Graph) -> dict[str, int]:
        """Device bytes of the current dims' plan: arena, outputs, peak (as the CPU's)."""
        dims = resolve_dims(graph, self.program.inputs)
        plan = self.run_plan(graph, dims)
        outputs = sum(a.nbytes for a in plan.outputs.values())
        arena = plan.arena_bytes
        return {"arena_bytes": arena, "outputs_bytes": outputs, "peak_bytes": arena + outputs}
