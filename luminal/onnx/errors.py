"""Errors of the ONNX importer: members of the LuminalError family."""

from __future__ import annotations

from luminal.errors import LuminalError


class OnnxImportError(LuminalError, ValueError):
    """A model cannot be imported: a corrupt file, a missing tensor, a bad attribute."""


class UnsupportedOpError(OnnxImportError, NotImplementedError):
    """An ONNX op (or an attribute value of it) that luminal does not import."""


class NeedsConstantInput(UnsupportedOpError):
    """A graph input fixes a shape (Reshape's shape, Reduce's axes, ...): the model can
    only be imported with that input's value given (`load(..., constants=...)`).
    `input_name` is None when the value is computed from inputs rather than one."""

    def __init__(self, message: str, input_name: str | None) -> None:
        super().__init__(message)
        self.input_name = input_name


def node_text(node: object, domain: str, opset: int) -> str:
    """How a node is named in messages: op, domain, opset and the node's own name."""
    name = getattr(node, "name", "") or "<unnamed>"
    outputs = ", ".join(getattr(node, "output", ())) or "-"
    return (
        f"{getattr(node, 'op_type', '?')} (domain {domain or 'ai.onnx'!r}, opset {opset}, "
        f"node {name!r}, outputs {outputs})"
    )
