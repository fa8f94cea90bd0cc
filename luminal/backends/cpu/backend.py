"""The CPU backend as the registry sees it (`luminal.backends.BACKENDS["cpu"]`): generated
C built by gcc with OpenMP, BLAS from MKL or OpenBLAS, run through ctypes."""

from __future__ import annotations

import shutil
from typing import Any

from luminal.backends import Capabilities
from luminal.backends.cpu import toolchain, tuning
from luminal.backends.cpu.compiler import RULESETS, CPUCompiler
from luminal.backends.cpu.lowering import lower
from luminal.backends.cpu.runtime import CompiledGraph
from luminal.dtype import DType


class CpuBackend:
    """This machine's CPU."""

    name = "cpu"
    rulesets = RULESETS
    render = staticmethod(lower)
    toolchain = toolchain
    runtime = CompiledGraph

    @property
    def search_options(self) -> list:
        return list(tuning.OPTION_PROVIDERS)

    def is_available(self) -> bool:
        return shutil.which(toolchain.CC) is not None

    def capabilities(self) -> Capabilities:
        return Capabilities(
            dtypes=(DType.float32, DType.float16, DType.bfloat16, DType.int32, DType.bool),
            blas=True,
            generated_matmul=True,
            parallelism="openmp",
            vector_bits=(256, 512),
            python_functions=True,
            custom_kernels=True,
        )

    def device_id(self) -> str:
        from luminal.search.cache import cpu_model

        return f"cpu/{cpu_model()}/threads={toolchain.get_num_threads().openmp}"

    def compiler(self, **options: Any) -> CPUCompiler:
        return CPUCompiler(**options)


BACKEND = CpuBackend()
