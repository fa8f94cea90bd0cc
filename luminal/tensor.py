"""GraphTensor: a handle on a node's output seen through a view.

High-level ops live in the mixins of `luminal.hl`, which build everything from the
primitives of `luminal.ops`; this module only holds data access and the plumbing
those mixins share.
"""

from __future__ import annotations

import functools
from typing import TYPE_CHECKING, Any

import numpy as np

from luminal import ops
from luminal.dtype import DType, as_dtype
from luminal.errors import DTypeError, ExecutionError, GraphError, ShapeError, format_shape
from luminal.hl.binary import BinaryOps
from luminal.hl.matmul import MatmulOps
from luminal.hl.movement import MovementOps
from luminal.hl.other import OtherOps
from luminal.hl.reduction import ReductionOps
from luminal.hl.unary import UnaryOps
from luminal.shape.expr import Expr
from luminal.shape.tracker import ShapeTracker

if TYPE_CHECKING:
    from luminal.graph import Graph


class GraphTensor(UnaryOps, BinaryOps, MovementOps, ReductionOps, MatmulOps, OtherOps):
    """A lazy tensor. Nothing runs until `Graph.execute()`."""

    __array_priority__ = 1000  # numpy scalars on the left defer to our operators
    __array_ufunc__ = None  # `ndarray + tensor` raises TypeError instead of numpy's own errors

    def __init__(self, graph: Graph, node_id: int, view: ShapeTracker, dtype: DType) -> None:
        self.graph = graph
        self._node_id = node_id
        self._view = view
        self.dtype = dtype

    # ---------------------------------------------------------------- identity
    def _follow(self) -> None:
        """Re-point this handle after a compiler replaced its node (see Graph.replace)."""
        resolved = self.graph.resolve(self._node_id, self._view)
        if resolved is None:
            raise GraphError(
                f"tensor of shape {format_shape(self._view.shape)} refers to node "
                f"{self._node_id}, which a compiler removed; retrieve() or keep() it "
                "before compiling to keep it alive"
            )
        self._node_id, self._view = resolved  # type: ignore[assignment]

    @property
    def node_id(self) -> int:
        """The node this tensor reads, following compiler rewrites."""
        if self._node_id not in self.graph.nodes:
            self._follow()
        return self._node_id

    @property
    def view(self) -> ShapeTracker:
        """How this tensor reads its node's buffer, following compiler rewrites."""
        if self._node_id not in self.graph.nodes:
            self._follow()
        return self._view

    @property
    def node(self) -> Any:
        return self.graph.nodes[self.node_id]

    @property
    def shape(self) -> tuple[int | Expr, ...]:
        """Dims as ints where known, symbolic expressions otherwise."""
        return tuple(d.as_int() if d.is_const else d for d in self.view.shape)

    @property
    def ndim(self) -> int:
        return len(self.view.shape)

    def _with_view(self, view: ShapeTracker) -> GraphTensor:
        return GraphTensor(self.graph, self.node_id, view, self.dtype)

    def _shape_text(self) -> str:
        return format_shape(self.view.shape)

    # ---------------------------------------------------------------- data
    def set(self, array: Any) -> GraphTensor:
        """Give an input its data (kept across execute() calls until set again)."""
        node = self.node
        if not isinstance(node.op, ops.Input) or not self.view.is_identity():
            raise GraphError(
                f"set: only graph inputs (cx.tensor) take data; this tensor is a "
                f"{node.op.name} of shape {self._shape_text()}"
            )
        if node.id in self.graph.constant_inputs:
            raise GraphError(
                f"set: input '{node.op.label}' is a constant matrix (its values are "
                f"compiled into kernels); build a new one instead"
            )
        data = np.asarray(array)
        if data.dtype != self.dtype.numpy:
            if not (data.dtype.kind in "fiub" and _safe_cast(data.dtype, self.dtype)):
                raise DTypeError(
                    f"set: input '{node.op.label}' has dtype {self.dtype.value}, "
                    f"got data of dtype {data.dtype}"
                )
            _check_int_range(data, self.dtype, node.op.label)
            data = data.astype(self.dtype.numpy)
        if data.ndim != len(node.shape):
            raise ShapeError(
                f"set: input '{node.op.label}' has shape {self._shape_text()}, "
                f"got data of shape {data.shape}"
            )
        bindings: dict[str, int] = {}
        for dim, size in zip(node.shape, data.shape, strict=True):
            value = dim.as_int()
            if value is not None:
                if value != size:
                    raise ShapeError(
                        f"set: input '{node.op.label}' has shape {self._shape_text()}, "
                        f"got data of shape {data.shape}"
                    )
            elif len(dim.terms) == 1 and dim.terms[0][1] == 1 and len(dim.terms[0][0]) == 1:
                atom = dim.terms[0][0][0]
                if atom.op == "var":
                    name = atom.args[0]
                    if bindings.setdefault(name, size) != size:
                        raise ShapeError(
                            f"set: input '{node.op.label}' of shape {self._shape_text()} "
                            f"binds {name!r} to both {bindings[name]} and {size} "
                            f"(data shape {data.shape})"
                        )
        self.graph.dims.update(bindings)
        self.graph.input_data[node.id] = np.asarray(data, order="C")
        self.graph.mark_changed(node.id)
        return self

    def retrieve(self) -> GraphTensor:
        """Mark this tensor as an output: its value is kept after execute()."""
        self.graph.retrieved.add(self.node_id)
        return self

    def keep(self) -> GraphTensor:
        """Keep this tensor's value after execute() (it is not freed)."""
        self.graph.kept.add(self.node_id)
        return self

    def drop(self) -> GraphTensor:
        """Free the stored value of this tensor."""
        self.graph.buffers.pop(self.node_id, None)
        return self

    def numpy(self) -> np.ndarray:
        """The value after execute(), as a numpy array of this tensor's shape."""
        from luminal.reference.views import read_view

        node_id = self.node_id
        graph = self.graph
        with graph.lock:  # never a copy of a buffer another thread's run is writing
            if node_id in graph.buffers:
                buffer = graph.buffers[node_id]
            elif node_id in graph.input_data:
                buffer = graph.input_data[node_id]
            else:
                why = "call retrieve() before execute()"
                if graph.failed_run is not None:
                    why = f"the last execute() failed ({graph.failed_run})"
                raise ExecutionError(
                    f"numpy: tensor of shape {self._shape_text()} (node {node_id}, "
                    f"{self.node.op.name}) has no value; {why}"
                )
            return np.array(read_view(buffer, self.view, graph.dims), copy=True)

    def __repr__(self) -> str:
        node = self.graph.nodes.get(self._node_id)
        op = node.op.name if node is not None else "removed"
        return f"GraphTensor(shape={self._shape_text()}, dtype={self.dtype.value}, op={op})"

    def __bool__(self) -> bool:
        raise GraphError("a GraphTensor has no truth value before execution; use .numpy()")

    __hash__ = object.__hash__

    def cast(self, dtype: Any) -> GraphTensor:
        """Convert to `dtype`; float -> int truncates toward zero."""
        target = as_dtype(dtype)
        if target == self.dtype:
            return self
        return self.graph.add_node(ops.Cast(target), [self])


def _atomic(method: Any) -> Any:
    """Wrap a high-level op so that an error rolls back every node it added."""

    @functools.wraps(method)
    def wrapper(self: GraphTensor, *args: Any, **kwargs: Any) -> Any:
        graph = self.graph
        if graph._building:
            return method(self, *args, **kwargs)
        with graph.atomic():
            return method(self, *args, **kwargs)

    return wrapper


def _make_ops_atomic() -> None:
    """Every op a mixin of `luminal.hl` defines becomes all-or-nothing."""
    for mixin in GraphTensor.__mro__[1:]:
        if not mixin.__module__.startswith("luminal.hl"):
            continue
        for name, member in vars(mixin).items():
            if (
                callable(member)
                and not isinstance(member, type)
                and (not name.startswith("_") or name.startswith("__") and name not in _NOT_OPS)
            ):
                setattr(mixin, name, _atomic(member))


_NOT_OPS = {"__init__", "__repr__", "__bool__", "__hash__", "__init_subclass__"}


def _check_int_range(data: np.ndarray, target: DType, label: str) -> None:
    """Integer data stored as int32 must fit: a wrapped value (2**32 + 7 -> 7) would change a
    token id silently. Only wider integer types are scanned, once, when they are cast."""
    if target != DType.int32 or data.dtype.kind not in "iu" or data.size == 0:
        return
    info = np.iinfo(np.int32)
    if np.can_cast(data.dtype, np.int32):
        return
    low, high = data.min(), data.max()
    if low < info.min or high > info.max:
        bad = low if low < info.min else high
        raise DTypeError(
            f"set: input '{label}' is int32, but its {data.dtype} data holds {bad}, outside "
            f"int32's range [{info.min}, {info.max}]"
        )


def _safe_cast(source: np.dtype, target: DType) -> bool:
    """Whether data of `source` may be stored as `target` without surprise."""
    if target.is_float:
        return source.kind in "fiub"
    if target == DType.int32:
        return source.kind in "iub"
    return source.kind == "b"


_make_ops_atomic()
