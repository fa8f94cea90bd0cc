"""What an op rule sees: its node's inputs (graph tensors or values known at load),
attributes, opset, and helpers to turn a known value into a graph tensor.

A value known at load time is a numpy array; shape values of symbolic tensors are
object arrays of `Expr` (see `folding.py`). Rules ask for what they need: `tensor(i)`
lifts a known value into the graph, `static(i)` insists on a load-time value (a shape,
axes, pads) and raises naming the node when it is computed at run time.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np
import onnx
from onnx import helper, numpy_helper

from luminal.dtype import DType
from luminal.graph import Graph
from luminal.onnx import dtypes
from luminal.onnx.errors import (
    NeedsConstantInput,
    OnnxImportError,
    UnsupportedOpError,
    node_text,
)
from luminal.shape.expr import Expr
from luminal.tensor import GraphTensor

Value = Any  # GraphTensor | np.ndarray | None (an omitted optional input)


def is_static(value: Value) -> bool:
    return isinstance(value, np.ndarray)


class NodeContext:
    """One ONNX node being imported into `graph`."""

    def __init__(
        self,
        graph: Graph,
        node: onnx.NodeProto,
        inputs: list[Value],
        opset: int,
        domain: str,
        lift: Callable[[np.ndarray, str], GraphTensor],
        run_subgraph: Callable[..., list[Value]] | None = None,
        graph_inputs: dict[int, str] | None = None,
        elem_types: dict[str, int] | None = None,
    ) -> None:
        self.graph = graph
        self.node = node
        self.inputs = inputs
        self.opset = opset
        self.domain = domain
        self._lift = lift
        self.run_subgraph = run_subgraph
        self.graph_inputs = graph_inputs or {}
        self.elem_types = elem_types or {}
        self.attrs = {a.name: _attribute(a) for a in node.attribute}

    # ---------------------------------------------------------------- messages
    def describe(self) -> str:
        return node_text(self.node, self.domain, self.opset)

    def unsupported(self, why: str) -> UnsupportedOpError:
        return UnsupportedOpError(f"{self.describe()}: {why}")

    def invalid(self, why: str) -> OnnxImportError:
        return OnnxImportError(f"{self.describe()}: {why}")

    # ---------------------------------------------------------------- attributes
    def attr(self, name: str, default: Any = None) -> Any:
        return self.attrs.get(name, default)

    # ---------------------------------------------------------------- inputs
    def __len__(self) -> int:
        return len(self.inputs)

    def has(self, index: int) -> bool:
        return index < len(self.inputs) and self.inputs[index] is not None

    def tensor(self, index: int) -> GraphTensor:
        """Input `index` as a graph tensor (a known value becomes a constant or weight)."""
        value = self.inputs[index] if index < len(self.inputs) else None
        if value is None:
            raise self.invalid(f"input {index} is required")
        if isinstance(value, GraphTensor):
            return value
        name = self.node.input[index] if index < len(self.node.input) else f"input{index}"
        return self._lift(value, name)

    def tensors(self) -> list[GraphTensor]:
        return [self.tensor(i) for i in range(len(self.inputs)) if self.has(i)]

    def optional(self, index: int) -> GraphTensor | None:
        return self.tensor(index) if self.has(index) else None

    def static(self, index: int, what: str = "") -> np.ndarray:
        """Input `index` as a value known at load time (shapes, axes, pads, ...)."""
        value = self.inputs[index] if index < len(self.inputs) else None
        if value is None:
            raise self.invalid(f"input {index} ({what or 'value'}) is required")
        if not is_static(value):
            source = self.graph_inputs.get(id(value))
            if source is not None:
                raise NeedsConstantInput(
                    f"{self.describe()}: input {index} ({what}) is the graph input "
                    f"{source!r}; pass its value with load(..., constants={{{source!r}: "
                    "array}) so the shapes it fixes are known",
                    source,
                )
            raise NeedsConstantInput(
                f"{self.describe()}: input {index} ({what or self.node.input[index]}) must be "
                "known when the model is loaded (a constant, an initializer or computed from "
                "shapes); a value computed from run-time data would give a data-dependent shape",
                None,
            )
        return value

    def static_ints(self, index: int, what: str = "") -> list[Any]:
        """A 1-D known input as Python ints (or Exprs for symbolic entries)."""
        return [_int_or_expr(v) for v in np.asarray(self.static(index, what)).reshape(-1)]

    def lift(self, array: np.ndarray, name: str = "constant") -> GraphTensor:
        return self._lift(array, name)

    def elem_type(self, index: int) -> int | None:
        """Input `index`'s ONNX element type where the model declares it (luminal holds
        every integer type as int32, so the tensor's dtype does not tell)."""
        name = self.node.input[index] if index < len(self.node.input) else ""
        return self.elem_types.get(name)

    def dtype_of(self, index: int) -> DType:
        value = self.inputs[index]
        if isinstance(value, GraphTensor):
            return value.dtype
        return dtypes.luminal_dtype(dtypes.from_numpy(np.asarray(value).dtype))


def _int_or_expr(value: Any) -> Any:
    if isinstance(value, Expr):
        known = value.as_int()
        return value if known is None else known
    return int(value)


def _attribute(attribute: onnx.AttributeProto) -> Any:
    value = helper.get_attribute_value(attribute)
    if isinstance(value, onnx.TensorProto):
        return numpy_helper.to_array(value)
    if isinstance(value, bytes):
        return value.decode()
    if isinstance(value, list) and value and isinstance(value[0], bytes):
        return [v.decode() for v in value]
    return value
