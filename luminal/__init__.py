"""luminal: a deep-learning compiler. Build a lazy graph, compile it, execute it."""

from luminal import audio, backends, nn
from luminal.compiler import GenericCompiler, Looped, Timed
from luminal.custom import custom_kernel
from luminal.dtype import DType, bfloat16, float16, float32, int32
from luminal.dtype import bool_ as bool  # noqa: A001 - lm.bool mirrors torch.bool
from luminal.errors import (
    CompileError,
    DTypeError,
    ExecutionError,
    GraphError,
    LuminalError,
    ShapeError,
)
from luminal.graph import Graph
from luminal.hl.combine import concat, stack
from luminal.search.budget import TimeBudget
from luminal.tensor import GraphTensor

__version__ = "0.1.0"


def __getattr__(name: str) -> object:
    # the e-graph layer imports egglog; load it only when asked for
    if name == "EGraphCompiler":
        from luminal.compiler.egraph import EGraphCompiler

        return EGraphCompiler
    if name == "CPUCompiler":
        from luminal.backends.cpu.compiler import CPUCompiler

        return CPUCompiler
    if name == "OpenCLCompiler":
        from luminal.backends.opencl.compiler import OpenCLCompiler

        return OpenCLCompiler
    if name == "CUDACompiler":
        from luminal.backends.cuda.compiler import CUDACompiler

        return CUDACompiler
    if name == "MetalCompiler":
        from luminal.backends.metal.compiler import MetalCompiler

        return MetalCompiler
    if name == "models":  # lm.models.Bert / lm.models.Llama without an explicit import
        import luminal.models

        return luminal.models
    if name == "onnx":  # lm.onnx.load; imports the onnx package only when asked for
        import luminal.onnx

        return luminal.onnx
    if name == "quant":  # lm.quant.QuantLinear, load_gguf_model, ... (packed weights)
        import luminal.quant

        return luminal.quant
    if name == "training":  # lm.training.Autograd without an explicit import
        import luminal.training

        return luminal.training
    raise AttributeError(f"module 'luminal' has no attribute {name!r}")


__all__ = [
    "CPUCompiler",
    "CUDACompiler",
    "CompileError",
    "DType",
    "DTypeError",
    "EGraphCompiler",
    "ExecutionError",
    "GenericCompiler",
    "Graph",
    "GraphError",
    "GraphTensor",
    "LuminalError",
    "MetalCompiler",
    "OpenCLCompiler",
    "Looped",
    "ShapeError",
    "Timed",
    "TimeBudget",
    "audio",
    "backends",
    "bfloat16",
    "bool",
    "concat",
    "custom_kernel",
    "nn",
    "float16",
    "float32",
    "int32",
    "stack",
]
