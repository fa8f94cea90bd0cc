"""ONNX import: `lm.onnx.load(path_or_model, cx)` -> (inputs, outputs).

Needs the `onnx` package (`pip install luminal[onnx]`). `luminal.onnx.backend`
implements `onnx.backend.base.Backend` for ONNX's conformance suite. See docs/onnx.md.
"""

from __future__ import annotations

from luminal.onnx.errors import OnnxImportError, UnsupportedOpError
from luminal.onnx.loader import load

__all__ = ["OnnxImportError", "UnsupportedOpError", "load"]
