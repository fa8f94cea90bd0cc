"""Contractions with a small matrix whose values are fixed when the graph is built (the
Winograd transforms), rendered as straight-line sums with the values folded in.

A dense product with kron(B^T, B^T) (36 x 36, 484 nonzeros, mostly +-1) is compute-bound
in sgemm; as sums it is memory-bound: per column of the long operand, each output row is
sum_q c[m, q] * x[q] with zero coefficients skipped, the terms sharing a coefficient
added first and multiplied once (1 and -1 need no multiply at all).

How the compiler knows the values: `constant_matrix` makes a graph input whose data is
fixed for the graph's life. Its id is in `graph.constant_inputs`, `GraphTensor.set`
refuses it, the array is a private read-only copy, and its label carries a SHA-256 of the
data (`name#digest`), so the program cache (keyed on the graph's structure, labels
included) never reuses a program built for other values; lowering re-checks the digest
and falls back to the ordinary product if it does not match (the cache's key names the
constants that still match, so a graph whose data was replaced behind its back never
loads a program that folded the old values). `Graph.carry` and the optimizers refuse
these inputs too. Everything else (the
reference runtime, autograd, the GPU backends) sees an ordinary input and computes the
dense product.

Skipping zero coefficients changes one thing against the dense product: an inf or NaN
in the long operand no longer turns the outputs whose coefficient for it is 0 into NaN
(0 * inf); those outputs stay finite, as in exact arithmetic.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass

import numpy as np

from luminal import ops
from luminal.dtype import DType
from luminal.graph import Edge, Graph, Node
from luminal.shape.expr import Expr, sym

# the matrix is unrolled: at most this many rows times summed terms
MAX_ENTRIES = 48 * 48


def constant_matrix(graph: Graph, array: np.ndarray, name: str):  # noqa: ANN201 - GraphTensor
    """A float32 graph input holding `array` for good (see the module docstring)."""
    data = np.array(array, dtype=np.float32, order="C")
    data.setflags(write=False)
    digest = hashlib.sha256(repr(data.shape).encode() + data.tobytes()).hexdigest()[:16]
    tensor = graph.tensor(data.shape, name=f"{name}#{digest}").set(data)
    graph.constant_inputs.add(tensor.node_id)
    return tensor


def constant_value(graph: Graph, node_id: int) -> np.ndarray | None:
    """The fixed data of input `node_id`, or None when it is not a constant matrix (or
    its data no longer matches the digest in its label)."""
    node = graph.nodes.get(node_id)
    if node_id not in getattr(graph, "constant_inputs", ()) or node is None:
        return None
    data = graph.input_data.get(node_id)
    if not isinstance(node.op, ops.Input) or data is None or data.dtype != np.float32:
        return None
    digest = hashlib.sha256(repr(data.shape).encode() + data.tobytes()).hexdigest()[:16]
    return data if node.op.label.endswith(f"#{digest}") else None


@dataclass(frozen=True)
class ConstantContract:
    """A contraction with a constant matrix: the constant operand's `side`, the logical
    axes it alone varies along (`rows`), and its values as (rows, summed) `matrix`."""

    side: int
    rows: tuple[int, ...]
    matrix: np.ndarray


def constant_contract(graph: Graph, node: Node) -> ConstantContract | None:
    """How `node` is a float32 `Contract` with a constant matrix varying only along
    concrete-size axes (at most MAX_ENTRIES values), or None."""
    if type(node.op) is not ops.Contract or node.dtype != DType.float32:
        return None
    for side in (0, 1):
        constant_edge, data_edge = node.inputs[side], node.inputs[1 - side]
        data = constant_value(graph, constant_edge.source)
        if data is None:
            continue
        shape = tuple(constant_edge.view.shape)
        axis = node.op.axis
        rows = [d for d in range(len(shape)) if d != axis and constant_edge.view.strides[d] != 0]
        if any(data_edge.view.strides[d] != 0 and shape[d] != 1 for d in rows):
            continue  # a batch axis: both vary along it
        data_mask = data_edge.view.mask
        if data_mask is not None and any(tuple(data_mask[d]) != (0, shape[d]) for d in rows):
            continue  # the other operand padded along a row: it varies there too
        columns = [d for d in range(len(shape)) if d != axis and d not in rows]
        mask = constant_edge.view.mask
        if mask is not None and any(tuple(mask[d]) != (0, shape[d]) for d in columns):
            continue  # padding along a column axis: the values would vary with the column
        sizes = [shape[d].as_int() for d in (*rows, axis)]
        if any(s is None for s in sizes) or np.prod(sizes) > MAX_ENTRIES:
            continue
        matrix = _coefficients(constant_edge, data, shape, rows, axis, sizes)
        if matrix is not None:
            return ConstantContract(side, tuple(rows), matrix)
    return None


def _coefficients(
    edge: Edge, data: np.ndarray, shape: tuple, rows: list[int], axis: int, sizes: list
) -> np.ndarray | None:
    """The constant operand as a (rows, summed) float32 matrix read through its view:
    from the view's integer strides, or element by element through its index and
    validity expressions (a masked or merged view)."""
    flat_data = data.reshape(-1)
    view = edge.view
    strides = [view.strides[d].as_int() for d in (*rows, axis)]
    offset = view.offset.as_int()
    if view.mask is None and offset is not None and None not in strides:
        flat = np.full(sizes, offset, dtype=np.int64)
        for position, (size, stride) in enumerate(zip(sizes, strides, strict=True)):
            step = [1] * len(sizes)
            step[position] = size
            flat = flat + (np.arange(size) * stride).reshape(step)
        return flat_data[flat].reshape(-1, sizes[-1]).astype(np.float32)
    matrix = np.zeros((int(np.prod(sizes[:-1])), sizes[-1]), dtype=np.float32)
    for position, row in enumerate(np.ndindex(*sizes[:-1])):
        for q in range(sizes[-1]):
            index: list[Expr] = [sym(0)] * len(shape)
            for d, r in zip(rows, row, strict=True):
                index[d] = sym(r)
            index[axis] = sym(q)
            valid = view.valid_expression(index).as_int()
            flat = view.index_expression(index).as_int()
            if valid is None or flat is None:
                return None
            matrix[position, q] = flat_data[flat] if valid else 0.0
    return matrix
