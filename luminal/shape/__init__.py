"""Symbolic dimensions and views."""

from luminal.shape.expr import Expr, ceildiv, const, sym, var
from luminal.shape.tracker import ConcreteView, ShapeTracker, contiguous_strides

__all__ = [
    "ConcreteView",
    "Expr",
    "ShapeTracker",
    "ceildiv",
    "const",
    "contiguous_strides",
    "sym",
    "var",
]
