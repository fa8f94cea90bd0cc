"""The Metal backend as the registry sees it (`luminal.backends.BACKENDS["metal"]`): the
shared GPU lowering as Metal Shading Language, run through pyobjc's Metal bindings.
Available on macOS with a Metal GPU."""

from __future__ import annotations

from typing import Any

from luminal.backends import Capabilities
from luminal.backends.gpu_compiler import RULESETS
from luminal.backends.gpu_runtime import GpuCompiledGraph
from luminal.backends.metal import runtime
from luminal.backends.metal.compiler import MetalCompiler
from luminal.dtype import DType
from luminal.kernel.gpu import lower_gpu


class MetalBackend:
    """The system's default Metal GPU."""

    name = "metal"
    rulesets = RULESETS
    render = staticmethod(lower_gpu)
    toolchain = runtime  # the Metal framework compiles libraries (`MetalDevice.build`)
    runtime = GpuCompiledGraph
    search_options: tuple = ()

    def is_available(self) -> bool:
        return runtime.missing() is None

    def capabilities(self) -> Capabilities:
        return Capabilities(
            dtypes=(DType.float32, DType.float16, DType.bfloat16, DType.int32, DType.bool),
            blas=False,
            generated_matmul=True,
            parallelism="metal-threads",
            vector_bits=(),
            python_functions=True,
            custom_kernels=True,
        )

    def device_id(self) -> str:
        return f"metal/{runtime.MetalDevice().name}"

    def compiler(self, **options: Any) -> MetalCompiler:
        return MetalCompiler(**options)


BACKEND = MetalBackend()
