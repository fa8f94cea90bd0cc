"""torch models as ONNX the way the ONNX tests and bench/onnx.py export them."""

from __future__ import annotations

import io
import warnings

import torch


def export_onnx(model: torch.nn.Module, args: tuple, inputs: list[str], dynamic: dict) -> bytes:
    """The model in eval mode as ONNX bytes (opset 17, one output named `output`), by the
    TorchScript exporter: the dynamo one needs onnxscript. The exporter's warnings (tracer
    constants, deprecation) are silenced: the callers check the exported model's outputs."""
    model.eval()
    buffer = io.BytesIO()
    with torch.no_grad(), warnings.catch_warnings():
        warnings.simplefilter("ignore")
        torch.onnx.export(
            model,
            args,
            buffer,
            dynamo=False,
            input_names=inputs,
            output_names=["output"],
            dynamic_axes=dynamic,
            opset_version=17,
        )
    return buffer.getvalue()
