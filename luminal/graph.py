"""The lazy graph: nodes of primitive ops joined by edges that carry views.

A node's output is always a contiguous row-major buffer of its `shape`; each input
edge says which node it reads and through which `ShapeTracker`. User-facing
GraphTensors hold a node id plus a view, and survive compiler rewrites through
`Graph.forward` (a node id replaced by another).
"""

from __future__ import annotations

import contextlib
import copy
import dataclasses
import numbers
import threading
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np

from luminal import ops
from luminal.dtype import DType, as_dtype, float32
from luminal.errors import GraphError, ShapeError
from luminal.shape.expr import Expr, ExprLike, sym
from luminal.shape.tracker import ShapeTracker

if TYPE_CHECKING:
    from luminal.tensor import GraphTensor

_MAX_DIM = 2**62  # sizes travel to generated code as 64-bit ints; products must not overflow


@dataclass(frozen=True)
class Edge:
    """An input of a node: the source node, its output index, and the view read."""

    source: int
    output: int
    view: ShapeTracker


@dataclass(frozen=True)
class Node:
    id: int
    op: ops.Op
    inputs: tuple[Edge, ...]
    shape: tuple[Expr, ...]
    dtype: DType


class NodeTable(dict):
    """The graph's nodes by id. Every change bumps `version`, so executors can cache
    plans safely whoever edits the graph (ops, compilers, rollbacks)."""

    version = 0

    def _changed(self) -> None:
        self.version += 1

    def __setitem__(self, key: int, value: Node) -> None:
        super().__setitem__(key, value)
        self._changed()

    def __delitem__(self, key: int) -> None:
        super().__delitem__(key)
        self._changed()

    def pop(self, *args: Any) -> Any:
        self._changed()
        return super().pop(*args)

    def update(self, *args: Any, **kwargs: Any) -> None:
        super().update(*args, **kwargs)
        self._changed()

    def clear(self) -> None:
        super().clear()
        self._changed()

    def setdefault(self, key: int, default: Any = None) -> Any:
        self._changed()
        return super().setdefault(key, default)

    def popitem(self) -> tuple[int, Node]:
        self._changed()
        return super().popitem()


class Graph:
    """A lazily built computation. See the README for the public API."""

    def __init__(self) -> None:
        self.nodes: NodeTable = NodeTable()
        self._next_id = 0
        self._building = False
        self.input_data: dict[int, np.ndarray] = {}
        # input -> the set() that gave its data (`set_count` then): a runtime that reuses
        # results computed from an input tells a new set() of the same array by it
        self.input_versions: dict[int, int] = {}
        self.set_count = 0  # set() calls so far
        # inputs whose data is fixed for the graph's life (`kernel/constant_matrix.py`):
        # set() refuses them, and the CPU backend folds their values into kernels
        self.constant_inputs: set[int] = set()
        self.buffers: dict[int, np.ndarray] = {}
        self.retrieved: set[int] = set()
        self.kept: set[int] = set()
        self.dims: dict[str, int] = {}
        # a compiler's replacements: old id -> (new id, view of new as old) or None (removed)
        self.forward: dict[int, tuple[int, ShapeTracker | None] | None] = {}
        self.compiled: Any = None
        # an execution order chosen by a scheduling pass, valid while nodes.version matches
        self.schedule: tuple[int, tuple[int, ...]] | None = None
        # (first node id of the op, size, what): sizes that must not be 0 at run time
        self.dim_checks: list[tuple[int, Expr, str]] = []
        # held by compile, execute and numpy(): one of them at a time per graph (a run
        # writes its outputs in place); reentrant, so a user may hold it around all three
        self.lock = threading.RLock()
        self._compiling = False
        # why the last execute() failed; its outputs were discarded (numpy() says why)
        self.failed_run: str | None = None
        # (input, next value): state carried from one successful run to the next
        self.carries: list[tuple[GraphTensor, GraphTensor]] = []

    def __getstate__(self) -> dict[str, Any]:
        """Copied and pickled without the lock (it belongs to this process's threads)."""
        state = dict(self.__dict__)
        state.pop("lock", None)
        return state

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__dict__.update(state)
        self.__dict__.setdefault("failed_run", None)
        self.__dict__.setdefault("constant_inputs", set())
        self.__dict__.setdefault("carries", [])
        self.__dict__.setdefault("input_versions", {})
        self.__dict__.setdefault("set_count", 0)
        self._compiling = False
        self.lock = threading.RLock()

    # ---------------------------------------------------------------- building
    def add_node(
        self,
        op: ops.Op,
        inputs: Sequence[GraphTensor] = (),
        shape: Sequence[ExprLike] | None = None,
        dtype: DType | None = None,
    ) -> GraphTensor:
        """Add a primitive consuming `inputs` (through their views). Checks types first,
        so a rejected op leaves the graph untouched."""
        from luminal.tensor import GraphTensor

        for tensor in inputs:
            if tensor.graph is not self:
                raise GraphError(f"{op.name}: an input belongs to another Graph")
        shapes = [t.view.shape for t in inputs]
        dtypes = [t.dtype for t in inputs]
        ops.check_inputs(op, shapes, dtypes)
        implied_shape = ops.output_shape(op, shapes)
        out_shape = tuple(sym(d) for d in shape) if shape is not None else implied_shape
        if out_shape is None:
            raise GraphError(f"{op.name} needs an explicit output shape")
        out_dtype = dtype if dtype is not None else ops.output_dtype(op, dtypes)
        if out_dtype is None:
            out_dtype = float32
        edges = tuple(Edge(t.node_id, 0, t.view) for t in inputs)
        node_id = self.insert(op, edges, out_shape, out_dtype)
        return GraphTensor(self, node_id, ShapeTracker.contiguous(out_shape), out_dtype)

    def insert(self, op: ops.Op, edges: Sequence[Edge], shape: Sequence[Expr], dtype: DType) -> int:
        """Add a node from already-checked parts (for compilers); returns its id."""
        node_id = self._next_id
        self._next_id += 1
        self.nodes[node_id] = Node(node_id, op, tuple(edges), tuple(shape), dtype)
        return node_id

    @contextlib.contextmanager
    def atomic(self) -> Iterator[None]:
        """Undo every node added inside the block if it raises, so an error never leaves
        a half-built op behind. Nested blocks defer to the outermost one."""
        if self._building:
            yield
            return
        self._building = True
        mark = self._next_id
        try:
            yield
        except BaseException:
            self._rollback(mark)
            raise
        finally:
            self._building = False

    def _rollback(self, mark: int) -> None:
        """Remove every node created since id `mark` (ids only grow)."""
        for node_id in [i for i in self.nodes if i >= mark]:
            del self.nodes[node_id]
            self.kept.discard(node_id)
            self.retrieved.discard(node_id)
            self.input_data.pop(node_id, None)
        self.dim_checks = [check for check in self.dim_checks if check[0] < mark]
        self.carries = [(target, new) for target, new in self.carries if new._node_id < mark]

    def tensor(
        self, shape: Sequence[ExprLike] | ExprLike, dtype: Any = float32, name: str | None = None
    ) -> GraphTensor:
        """A new input. Dims are ints or names of symbolic dimensions (e.g. "batch")."""
        if isinstance(shape, int | str | Expr):
            shape = (shape,)
        dims = tuple(sym(d) for d in shape)
        for d in dims:
            value = d.as_int()
            if value is not None and value < 0:
                raise ShapeError(f"tensor: dimension {value} in shape {tuple(shape)} is negative")
        label = name or f"input{len(self.nodes)}"
        return self.add_node(ops.Input(label), (), dims, as_dtype(dtype))

    def constant(self, value: float | int | ExprLike, dtype: Any = None) -> GraphTensor:
        """A scalar constant; a symbolic expression is evaluated at execute time."""
        if isinstance(value, str):
            value = sym(value)
        if dtype is None:
            dtype = float32
        return self.add_node(ops.Constant(value), (), (), as_dtype(dtype))

    def iota(self, expr: ExprLike, shape: Sequence[ExprLike], dtype: Any = "int32") -> GraphTensor:
        """A tensor whose element at flat index z is `expr` evaluated at z (variable "z")."""
        return self.add_node(ops.Iota(sym(expr)), (), shape, as_dtype(dtype))

    def arange(self, n: ExprLike, dtype: Any = "int32") -> GraphTensor:
        """0, 1, ..., n-1."""
        return self.iota("z", (n,), dtype)

    def mark_changed(self, node_id: int) -> None:
        """Record that input `node_id`'s data changed, as `set()` does: for data rewritten
        in place by someone else (a peer rank's gradient bucket), so a runtime that reuses
        results computed from unchanged inputs computes them again."""
        self.set_count += 1
        self.input_versions[node_id] = self.set_count

    def set_dim(self, name: str, size: int) -> None:
        """Give the symbolic dimension `name` a size for the next execute(). Only integers
        are sizes: 2.5, "3" or True would be truncated or misread, so they raise."""
        if not isinstance(name, str) or not name:
            raise ShapeError(f"set_dim: the dimension name must be a non-empty str, got {name!r}")
        if not isinstance(size, numbers.Integral) or isinstance(size, bool | np.bool_):
            raise ShapeError(
                f"set_dim: size of {name!r} must be an int, got {size!r} ({type(size).__name__})"
            )
        if not 0 <= int(size) <= _MAX_DIM:
            raise ShapeError(
                f"set_dim: size of {name!r} must be in [0, {_MAX_DIM}], got {int(size)}"
            )
        self.dims[name] = int(size)

    def carry(self, target: GraphTensor, new: GraphTensor) -> None:
        """After every successful execute(), the value of `new` becomes the data of input
        `target` (the array itself moves; nothing is copied): state that lives in the graph
        from one run to the next, such as BatchNorm's running statistics or the dropout
        step counter. `new` is kept; it needs the target's shape and dtype."""
        if not isinstance(target.node.op, ops.Input) or not target.view.is_identity():
            raise GraphError(f"carry: the target must be a graph input, got {target!r}")
        if target.node_id in self.constant_inputs:  # its values are folded into kernels
            raise GraphError(
                f"carry: input '{target.node.op.label}' is a constant matrix; its data "
                "is fixed for the graph's life"
            )
        if tuple(new.view.shape) != tuple(target.view.shape) or new.dtype != target.dtype:
            raise ShapeError(
                f"carry: input '{target.node.op.label}' is {target._shape_text()} "
                f"{target.dtype.value}, its next value {new._shape_text()} {new.dtype.value}"
            )
        self.carries.append((target, new.keep()))

    def _apply_carries(self) -> None:
        from luminal.reference.views import read_view

        moves = []
        for target, new in self.carries:
            array = self.buffers.get(new.node_id)
            if array is None:
                array = self.input_data[new.node_id]
            if not new.view.is_identity():
                array = np.ascontiguousarray(read_view(array, new.view, self.dims))
            moves.append((target.node_id, array))
        for node_id, array in moves:
            self.input_data[node_id] = array

    def require_nonzero(self, size: Expr, what: str) -> None:
        """Record that the symbolic `size` must not be 0 when the graph runs (a reduction
        with no identity, such as argmax, over an axis of that size). Both runtimes check
        it against each run's dims (`reference.executor.resolve_dims`); an op that fails
        after recording it rolls it back with its nodes."""
        self.dim_checks.append((self._next_id, size, what))

    # ---------------------------------------------------------------- queries
    @property
    def num_nodes(self) -> int:
        return len(self.nodes)

    def resolve(
        self, node_id: int, view: ShapeTracker | None = None
    ) -> tuple[int, ShapeTracker | None] | None:
        """Follow compiler forwarding from `node_id`, composing `view` with any view a
        replacement carries; None when the node was removed (or the view cannot follow)."""
        for _ in range(len(self.forward) + 1):
            if node_id in self.nodes:
                return node_id, view
            entry = self.forward.get(node_id)
            if entry is None:
                return None
            node_id, base = entry
            if base is not None and view is not None:
                view = base.then(view)
                if view is None:
                    return None
        return None

    # ---------------------------------------------------------------- surgery
    def readers(self) -> dict[int, set[int]]:
        """For each node, the ids of the nodes that read it."""
        out: dict[int, set[int]] = {node_id: set() for node_id in self.nodes}
        for node in self.nodes.values():
            for edge in node.inputs:
                out[edge.source].add(node.id)
        return out

    def replace(
        self,
        old: int,
        new: int,
        view: ShapeTracker | None = None,
        readers: dict[int, set[int]] | None = None,
    ) -> bool:
        """Make every reader of `old` read `new` instead, then delete `old`.

        `view` (optional) reads `new`'s buffer as `old`'s output; each reader's own view
        is composed with it. Returns False, changing nothing, when a composition is not
        expressible or `old` is an output and `view` is not the identity. User handles
        follow through `forward`. Pass `readers` (from `readers()`) to avoid a scan; it
        is kept up to date."""
        if old == new:
            return True
        if view is not None and view.is_identity():
            view = None
        if view is not None and (old in self.retrieved or old in self.kept):
            return False
        reader_ids = (
            readers[old]
            if readers is not None
            else {n.id for n in self.nodes.values() if any(e.source == old for e in n.inputs)}
        )
        rewired: dict[int, Node] = {}
        for reader_id in reader_ids:
            node = self.nodes[reader_id]
            edges = []
            for edge in node.inputs:
                if edge.source == old:
                    composed = edge.view if view is None else view.then(edge.view)
                    if composed is None:
                        return False
                    edge = Edge(new, edge.output, composed)
                edges.append(edge)
            rewired[reader_id] = dataclasses.replace(node, inputs=tuple(edges))
        self.nodes.update(rewired)
        for flags in (self.retrieved, self.kept):
            if old in flags:
                flags.discard(old)
                flags.add(new)
        sources = {edge.source for edge in self.nodes[old].inputs}
        self.remove(old, forward_to=(new, view))
        if readers is not None:
            readers.setdefault(new, set()).update(reader_ids)
            readers.pop(old, None)
            for source in sources:  # only old's sources list it as a reader
                readers.get(source, set()).discard(old)
        return True

    def remove(
        self, node_id: int, forward_to: tuple[int, ShapeTracker | None] | None = None
    ) -> None:
        """Delete a node nobody reads; user handles to it resolve to `forward_to` (or fail)."""
        del self.nodes[node_id]
        self.retrieved.discard(node_id)
        self.kept.discard(node_id)
        self.buffers.pop(node_id, None)
        self.forward[node_id] = forward_to

    def consumers(self) -> dict[int, list[int]]:
        out: dict[int, list[int]] = {node_id: [] for node_id in self.nodes}
        for node in self.nodes.values():
            for edge in node.inputs:
                out[edge.source].append(node.id)
        return out

    def output_roots(self) -> list[int]:
        """What a run must compute: retrieved and kept nodes, and side-effect ops (print,
        diff). Compilers and runtimes agree on outputs through this one function."""
        roots = set(self.retrieved) | set(self.kept)
        roots |= {
            node.id
            for node in self.nodes.values()
            if isinstance(node.op, ops.Function) and node.op.side_effect
        }
        return sorted(r for r in roots if r in self.nodes)

    def execution_order(self, roots: Sequence[int]) -> list[int]:
        """The order to run the nodes `roots` need: the scheduled order when a scheduling
        pass set one for the current graph, else a depth-first topological order."""
        if self.schedule is not None and self.schedule[0] == self.nodes.version:
            needed = set(self.topological_order(roots))
            return [node_id for node_id in self.schedule[1] if node_id in needed]
        return self.topological_order(roots)

    def topological_order(self, roots: Sequence[int] | None = None) -> list[int]:
        """Nodes needed by `roots` (default: all), producers before consumers."""
        order: list[int] = []
        state: dict[int, int] = {}
        start = list(roots) if roots is not None else sorted(self.nodes)
        for root in start:
            stack: list[tuple[int, bool]] = [(root, False)]
            while stack:
                node_id, expanded = stack.pop()
                if expanded:
                    if state.get(node_id) != 2:
                        state[node_id] = 2
                        order.append(node_id)
                    continue
                if state.get(node_id):
                    continue
                state[node_id] = 1
                stack.append((node_id, True))
                for edge in reversed(self.nodes[node_id].inputs):
                    if not state.get(edge.source):
                        stack.append((edge.source, False))
        return order

    # ---------------------------------------------------------------- running
    def compile(self, compiler: Any) -> Any:
        """Run a compiler (or a tuple of compilers, in order) on this graph. All or
        nothing: if a compiler raises or is interrupted, the graph is as before the call,
        its previous compiled program included (compilers called inside share it)."""
        with self.lock:
            if self._compiling:
                return self._run_compiler(compiler)
            saved = self._snapshot()
            self._compiling = True
            try:
                return self._run_compiler(compiler)
            except BaseException:
                self._restore(saved)
                raise
            finally:
                self._compiling = False

    def _run_compiler(self, compiler: Any) -> Any:
        if isinstance(compiler, tuple | list):
            return tuple(self._run_compiler(c) for c in compiler)
        if not hasattr(compiler, "compile"):
            raise GraphError(f"{compiler!r} is not a compiler (it has no compile(graph) method)")
        return compiler.compile(self)

    def _snapshot(self) -> dict[str, Any]:
        """This graph's attributes with their containers copied (nodes are immutable), so
        `_restore` undoes whatever a compiler changed; the node table keeps its version,
        which the previous compiled program checks."""
        state: dict[str, Any] = {}
        for name, value in self.__dict__.items():
            if isinstance(value, NodeTable):
                table = NodeTable(value)
                table.version = value.version
                value = table
            elif isinstance(value, dict | set | list):
                value = value.copy()
            state[name] = value
        return state

    def _restore(self, state: dict[str, Any]) -> None:
        self.__dict__.clear()
        self.__dict__.update(state)

    def structure_copy(self, inputs: bool = True) -> Graph:
        """A graph to rewrite or run beside this one (verification's reference, the
        search's candidates) that copies no data: the node table is copied shallowly
        (nodes are immutable, as `_snapshot` relies on), input arrays are shared as
        read-only views (or left out), and the copy has no outputs, compiled program or
        cached plan. The rest is copied deeply, so tensors it holds point at the copy."""
        clone = Graph.__new__(Graph)
        state = self.__getstate__()
        for name in ("nodes", "input_data", "buffers", "compiled", "_reference_plan"):
            state.pop(name, None)
        table = NodeTable(self.nodes)
        table.version = self.nodes.version
        data = {n: read_only_view(a) for n, a in self.input_data.items()} if inputs else {}
        shared = {"nodes": table, "input_data": data, "buffers": {}, "compiled": None}
        clone.__setstate__({**copy.deepcopy(state, {id(self): clone}), **shared})
        clone.failed_run = None
        return clone

    def execute(self) -> None:
        """Run the graph: the compiled executable if any, else the reference runtime.
        A run that raises (or is interrupted) leaves no outputs: the compiled runtime
        writes them in place, so they may be partial; numpy() then raises and says why."""
        with self.lock:
            try:
                if self.compiled is not None:
                    self.compiled.execute(self)
                else:
                    from luminal.reference.executor import execute

                    execute(self)
                if self.carries:
                    self._apply_carries()
            except BaseException as error:
                self.buffers = {}
                self.failed_run = f"{type(error).__name__}: {error}"
                raise
            self.failed_run = None

    def memory_report(self) -> dict[str, int]:
        """Bytes the compiled graph's memory plan uses at the current dims (arena, without
        reuse, outputs, peak); needs a compiler with a memory plan (lm.CPUCompiler)."""
        if self.compiled is None or not hasattr(self.compiled, "memory_report"):
            raise GraphError("memory_report: compile the graph with lm.CPUCompiler() first")
        return self.compiled.memory_report(self)

    def execute_debug(self) -> None:
        """Run with the reference runtime, printing each op, its shapes and its time. Like
        execute(), it holds the graph's lock, and a run that raises leaves no outputs."""
        from luminal.reference.executor import execute

        with self.lock:
            try:
                execute(self, debug=True)
            except BaseException as error:
                self.buffers = {}
                self.failed_run = f"{type(error).__name__}: {error}"
                raise
            self.failed_run = None

    def to_dot(self) -> str:
        from luminal.debug import graph_to_dot

        return graph_to_dot(self)

    def display(self, path: str = "luminal_graph") -> str:
        from luminal.debug import display_graph

        return display_graph(self, path)

    def __repr__(self) -> str:
        return f"Graph({self.num_nodes} nodes)"


def read_only_view(array: np.ndarray) -> np.ndarray:
    """A view of `array` that numpy refuses to write through (the data is not copied)."""
    view = array.view()
    view.flags.writeable = False
    return view
