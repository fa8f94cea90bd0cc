"""The CUDA backend as the registry sees it (`luminal.backends.BACKENDS["cuda"]`): the
shared GPU lowering as CUDA C, NVRTC + ptxas for PTX and cubins, cuda-python's driver API
to run them. Available where an NVIDIA driver sees a GPU."""

from __future__ import annotations

from typing import Any

from luminal.backends import Capabilities
from luminal.backends.cuda import runtime, toolchain
from luminal.backends.cuda.compiler import CUDACompiler, gpu_program
from luminal.backends.gpu_compiler import RULESETS
from luminal.backends.gpu_runtime import GpuCompiledGraph
from luminal.dtype import DType


class CudaBackend:
    """NVIDIA GPU 0."""

    name = "cuda"
    rulesets = RULESETS
    render = staticmethod(gpu_program)
    toolchain = toolchain
    runtime = GpuCompiledGraph
    search_options: tuple = ()

    def is_available(self) -> bool:
        return runtime.missing(0) is None

    def capabilities(self) -> Capabilities:
        return Capabilities(
            dtypes=(DType.float32, DType.float16, DType.bfloat16, DType.int32, DType.bool),
            blas=False,
            generated_matmul=True,
            parallelism="cuda-threads",
            vector_bits=(),
            python_functions=True,
            custom_kernels=True,
        )

    def device_id(self) -> str:
        device = runtime.CudaDevice(0)
        try:
            major, minor = device.capability
            return f"cuda/{device.name}/sm_{major}{minor}"
        finally:
            device.close()

    def compiler(self, **options: Any) -> CUDACompiler:
        return CUDACompiler(**options)


BACKEND = CudaBackend()
