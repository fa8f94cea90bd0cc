"""The OpenCL backend as the registry sees it (`luminal.backends.BACKENDS["opencl"]`): the
shared GPU lowering rendered as OpenCL C, built and run through pyopencl on any OpenCL
device (PoCL, a CPU driver, in CI)."""

from __future__ import annotations

from typing import Any

from luminal.backends import Capabilities
from luminal.backends.gpu_runtime import GpuCompiledGraph
from luminal.backends.opencl import toolchain
from luminal.backends.opencl.compiler import RULESETS, OpenCLCompiler
from luminal.backends.opencl.runtime import OpenCLDevice
from luminal.dtype import DType
from luminal.graph import Graph
from luminal.kernel.gpu import lower_gpu


def render(graph: Graph) -> GpuCompiledGraph:
    """The graph after the e-graph as a compiled graph on the chosen device, not built."""
    return GpuCompiledGraph(graph, lower_gpu(graph), OpenCLDevice(), OpenCLCompiler.name)


class OpenCLBackend:
    """The OpenCL device `toolchain.choose()` picks."""

    name = "opencl"
    rulesets = RULESETS
    render = staticmethod(render)
    toolchain = toolchain
    runtime = GpuCompiledGraph
    search_options: tuple = ()

    def is_available(self) -> bool:
        return toolchain.is_available()

    def capabilities(self) -> Capabilities:
        return Capabilities(
            dtypes=(DType.float32, DType.float16, DType.bfloat16, DType.int32, DType.bool),
            blas=False,
            generated_matmul=True,
            parallelism="work-items",
            vector_bits=(),
            python_functions=True,
            custom_kernels=True,  # OpenCL C: lm.custom_kernel(..., backend="opencl")
        )

    def device_id(self) -> str:
        _, info = toolchain.choose()
        return f"opencl/{info.label}/{info.driver}"

    def compiler(self, **options: Any) -> OpenCLCompiler:
        return OpenCLCompiler(**options)


BACKEND = OpenCLBackend()
