"""The value of a graph node at given logical indices, as kernel IR.

Every kernel computes one materialised node. Its loop nest runs over the node's logical
indices; values of inlined producers are IR expressions of those indices, built by
composing each edge's view (`index_expression`, `valid_expression`), so permutes,
broadcasts, slices and pads are index arithmetic, never copies. What a primitive
computes is one row of `OP_LOWERINGS` (the kernel layer's per-primitive table).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import fields, replace
from typing import Any

from luminal import ops
from luminal.dtype import DType
from luminal.graph import Edge, Graph, Node
from luminal.kernel import ir
from luminal.kernel.indexing import flat_index, loop_index, unravel
from luminal.shape.expr import Expr, sym
from luminal.shape.expr import product as shape_product


class NotRowLocal(Exception):
    """A row kernel would read a per-row value at another row: do not fuse."""


def zero(dtype: DType) -> ir.Const:
    return ir.Const(0.0 if dtype.is_float else 0, dtype)


class ValueLowering:
    """The IR value of any node at given logical indices, inlining what the schedule
    inlined and loading what it materialised. Collects the kernel's buffer parameters
    (`params`, node ids in parameter order) and the nodes it computes (`nodes`)."""

    def __init__(self, graph: Graph, materialised: set[int]) -> None:
        self.graph = graph
        self.materialised = materialised
        self.params: list[int] = []
        self.nodes: list[int] = []
        # row kernels: per-row values held in locals, valid at the current row only
        self.scalars: dict[int, ir.Var] = {}
        self.row_flat: Expr | None = None
        # row values already stored in the output row (param 0), by node: their flat index
        self.row_cache: dict[int, Expr] = {}
        self.extents: dict[str, Expr] = {}  # loop index variable -> number of iterations
        # (node, indices, scalars and row values known) -> (value, nodes it appended):
        # a value read by several readers (a row group recomputes its (rows, n) values in
        # each) is lowered once and shared, not rebuilt per read (MiniLM's exact GELU:
        # 1141 nodes built for 70 distinct)
        self.lowered: dict[tuple[Any, ...], tuple[ir.Value, list[int]]] = {}

    def loop_var(self, name: str, extent: Expr) -> Expr:
        """The index of a loop named `name` running over `extent` values."""
        index = loop_index(name, extent)
        self.extents[index.terms[0][0][0].args[0]] = extent
        return index

    def loop_vars(self, shape: Sequence[Expr], prefix: str = "i") -> list[Expr]:
        return [self.loop_var(f"{prefix}{axis}_", dim) for axis, dim in enumerate(shape)]

    def param(self, node_id: int) -> int:
        """The parameter position of a node's buffer (added on first use)."""
        if node_id not in self.params:
            self.params.append(node_id)
        return self.params.index(node_id)

    def kernel_params(self) -> tuple[ir.Param, ...]:
        return tuple(
            ir.Param(
                n,
                self.graph.nodes[n].dtype,
                output=position == 0,
                elements=shape_product(self.graph.nodes[n].shape),
            )
            for position, n in enumerate(self.params)
        )

    def scalar(self, node: Node, flat: Expr) -> ir.Var:
        """The local of a per-row value, if `flat` addresses the current row."""
        if flat != self.row_flat:
            raise NotRowLocal(f"node {node.id} is read away from the current row")
        return self.scalars[node.id]

    def load(self, node: Node, flat: Expr) -> ir.Load:
        return ir.Load(self.param(node.id), flat, node.dtype)

    def edge(self, edge: Edge, indices: Sequence[Expr]) -> ir.Value:
        """The value read through `edge` at the consumer's logical `indices`."""
        source = self.graph.nodes[edge.source]
        view = edge.view
        valid = view.valid_expression(indices)
        if valid == 0:  # reads padding only: no need to lower the source
            return zero(source.dtype)
        if view.is_identity():
            value = self.value(source, list(indices))
        else:
            padded = self.padded_read(source, edge, indices) if valid != 1 else None
            if padded is not None:
                value = padded
            else:
                value = self.value_at_flat(source, view.index_expression(indices))
        return value if valid == 1 else ir.Select(valid, value, zero(source.dtype))

    def padded_read(self, source: Node, edge: Edge, indices: Sequence[Expr]) -> ir.Value | None:
        """The value of an inlined `source` read through a padded view, its indices taken
        axis by axis: a pad's offset (-7 for one row and column of 6 x 6 images) would
        otherwise be unravelled by divisions the loop bounds cannot remove, here and in
        every producer below. Each padded index i (valid from lo to hi) is lowered as
        lo + t with t a fresh index below hi - lo, then t is replaced by i - lo in the
        result (where the pad is valid, which is the only place the value is read).
        None when the read is not a sum of indices times the source's own strides."""
        if source.id in self.materialised or source.id in self.scalars:
            return None
        if isinstance(source.op, ops.Input) or source.id in self.row_cache:
            return None
        view = edge.view
        shifted, back = list(indices), {}
        for d, (lo, hi) in enumerate(view.mask or ()):
            if lo == 0 or len(indices[d].variables()) != 1:
                continue
            t = self.loop_var(f"p{len(self.extents)}_", hi - lo)
            (name,) = t.variables()
            back[name] = indices[d] - lo
            shifted[d] = t + lo
        if not back:
            return None
        per_axis = unravel(view.index_expression(shifted), source.shape, self.extents)
        if any(_divides(e) for e in per_axis):
            return None
        return substitute_indices(self.value(source, per_axis), back)

    def value_at_flat(self, node: Node, flat: Expr) -> ir.Value:
        if node.id in self.scalars:
            return self.scalar(node, flat)
        if node.id in self.materialised or isinstance(node.op, ops.Input):
            return self.load(node, flat)
        # comparisons in place of divisions pay off where the indices only address loads
        # (they would nest through a further reshape of an inlined node)
        compare = all(
            e.source in self.materialised
            or isinstance(self.graph.nodes[e.source].op, ops.Input | ops.Constant)
            for e in node.inputs
        )
        return self.value(node, unravel(flat, node.shape, self.extents, compare))

    def value(self, node: Node, indices: list[Expr]) -> ir.Value:
        """The IR value of `node` at logical `indices`, one object per distinct read.
        `scalars` and `row_cache` only grow (a stage's local, a cached row), so their
        sizes tell what this read could see."""
        key = (node.id, tuple(indices), len(self.scalars), len(self.row_cache))
        known = self.lowered.get(key)
        if known is not None:
            value, computed = known
            self.nodes.extend(computed)
            return value
        start = len(self.nodes)
        value = self._value(node, indices)
        self.lowered[key] = (value, self.nodes[start:])
        return value

    def _value(self, node: Node, indices: list[Expr]) -> ir.Value:
        if node.id in self.scalars or node.id in self.row_cache:
            flat = flat_index(indices, node.shape)
            if node.id in self.row_cache and flat == self.row_cache[node.id]:
                return ir.Load(0, flat, node.dtype)
            if node.id in self.scalars:
                return self.scalar(node, flat)
        if node.id in self.materialised or isinstance(node.op, ops.Input):
            return self.load(node, flat_index(indices, node.shape))
        self.nodes.append(node.id)
        op = node.op
        reduces = isinstance(op, ops.SumReduce | ops.MaxReduce)
        args = [] if reduces else [self.edge(e, indices) for e in node.inputs]
        lower = OP_LOWERINGS.get(type(op))
        if lower is None:
            raise NotImplementedError(f"no kernel lowering for {op.name}")
        value = lower(self, node, args, indices)
        # half-precision values round after every op, as the reference runtime does
        if node.dtype in (DType.float16, DType.bfloat16):
            return ir.Cast(value, node.dtype, node.dtype)
        return value

    def reduced_value(self, node: Node, indices: list[Expr]) -> ir.Value:
        """What a reduction sums or maxes at `indices`: its input, or a Contract's
        product."""
        values = [self.edge(edge, indices) for edge in node.inputs]
        if len(values) == 1:
            return values[0]
        return ir.Alu("mul", tuple(values), node.dtype)


Lowering = Callable[[ValueLowering, Node, list[ir.Value], list[Expr]], ir.Value]


def _constant(w: ValueLowering, node: Node, args: list[ir.Value], idx: list[Expr]) -> ir.Value:
    value = node.op.value
    if isinstance(value, Expr):
        return ir.IndexValue(value, node.dtype)
    return ir.Const(float(value) if node.dtype.is_float else int(value), node.dtype)


def _iota(w: ValueLowering, node: Node, args: list[ir.Value], idx: list[Expr]) -> ir.Value:
    flat = flat_index(idx, node.shape)
    return ir.IndexValue(node.op.expr.substitute({"z": flat}), node.dtype)


def _cast(w: ValueLowering, node: Node, args: list[ir.Value], idx: list[Expr]) -> ir.Value:
    source = w.graph.nodes[node.inputs[0].source]
    if node.op.dtype == DType.float32 and source.dtype.is_float:
        return args[0]  # float32 computes every float: nothing to round
    return ir.Cast(args[0], source.dtype, node.op.dtype)


def _alu(op: str) -> Lowering:
    return lambda w, node, args, idx: ir.Alu(op, tuple(args), node.dtype)


def _short_reduce(w: ValueLowering, node: Node, args: list[ir.Value], idx: list[Expr]) -> ir.Value:
    """A reduction over a few elements, inlined as one expression (relu, abs, clip and
    maximum are a max over a stacked pair)."""
    (edge,) = node.inputs
    axis = node.op.axis
    size = int(edge.view.shape[axis])
    terms = tuple(w.edge(edge, idx[:axis] + [sym(k)] + idx[axis:]) for k in range(size))
    is_sum = isinstance(node.op, ops.SumReduce)
    if not terms:  # an empty axis: the identity, as the reference runtime gives
        if is_sum:
            return zero(node.dtype)
        return ir.Const(float("-inf") if node.dtype.is_float else -(2**31), node.dtype)
    return ir.Alu("add" if is_sum else "max", terms, node.dtype)


def _same(w: ValueLowering, node: Node, args: list[ir.Value], idx: list[Expr]) -> ir.Value:
    return args[0]


# primitive -> its value as IR (Input, Gather, Scatter and Function are not values of
# an expression: see tests/test_primitive_tables.py)
OP_LOWERINGS: dict[type, Lowering] = {
    ops.SumReduce: _short_reduce,
    ops.MaxReduce: _short_reduce,
    ops.Constant: _constant,
    ops.Iota: _iota,
    ops.Log2: _alu("log2"),
    ops.Exp2: _alu("exp2"),
    ops.Sin: _alu("sin"),
    ops.Sqrt: _alu("sqrt"),
    ops.Recip: _alu("recip"),
    ops.Add: _alu("add"),
    ops.Mul: _alu("mul"),
    ops.Mod: _alu("mod"),
    ops.LessThan: _alu("lt"),
    ops.Cast: _cast,
    ops.Contiguous: _same,
    ops.GraphBreak: _same,
}


def _divides(expr: Expr) -> bool:
    """Whether an index expression divides (a `//` or `%` anywhere in it)."""
    return any(atom.op != "var" for mono, _ in expr.terms for atom in mono)


def substitute_indices(value: object, mapping: dict[str, Expr]) -> object:
    """`value` (an IR value tree) with the index variables of `mapping` replaced."""
    if isinstance(value, Expr):
        return value.substitute(mapping)
    if isinstance(value, tuple):
        return tuple(substitute_indices(v, mapping) for v in value)
    if isinstance(value, ir.Value):
        changes = {
            f.name: substitute_indices(getattr(value, f.name), mapping) for f in fields(value)
        }
        return replace(value, **changes)
    return value
