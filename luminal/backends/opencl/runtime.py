"""The OpenCL device behind a compiled graph (`luminal.backends.gpu_runtime.GpuDevice`):
buffers, transfers and launches on one in-order queue, kernels from one program."""

from __future__ import annotations

import warnings
from collections.abc import Sequence
from typing import Any

import numpy as np

from luminal.backends.opencl import toolchain
from luminal.backends.opencl.render import OpenCLRenderer
from luminal.errors import CompileError, ExecutionError
from luminal.kernel.gpu import Launch


def half_arithmetic(info: toolchain.DeviceInfo, half: bool | None) -> bool:
    """Whether float16 kernels compute in `half` on this device: `half` None follows the
    device (`cl_khr_fp16`), False keeps float arithmetic, True requires the extension."""
    if half and not info.has_fp16:
        raise CompileError(
            f"OpenCL: half=True needs a device with cl_khr_fp16; {info.label} does not "
            "report it (half=None uses half arithmetic only where the device has it)"
        )
    return info.has_fp16 if half is None else half


class OpenCLDevice:
    """One OpenCL device (see `toolchain.choose`) as the compiled graph uses it."""

    def __init__(
        self, spec: int | str | None = None, cache: bool = True, half: bool | None = None
    ) -> None:
        self.device = toolchain.open_device(spec)
        self.half = half_arithmetic(self.device.info, half)
        self.cl = self.device.cl
        self.queue = self.device.queue
        self.alignment = max(self.device.info.base_addr_align_bytes, 64)
        self.cache = cache
        self.program: Any = None
        self.source = ""

    def __getstate__(self) -> dict[str, Any]:
        raise TypeError("an OpenCL device cannot be pickled")

    # ---------------------------------------------------------------- building
    def render(self, launches: Sequence[Launch]) -> tuple[list[str], str]:
        return OpenCLRenderer(half_arithmetic=self.half).program(list(launches))

    def build(self, launches: Sequence[Launch]) -> list[str]:
        names, self.source = self.render(launches)
        with warnings.catch_warnings():  # the driver's remarks on generated code
            warnings.simplefilter("ignore")
            self.program = toolchain.build_program(self.device, self.source, cache=self.cache)
        return names

    # ---------------------------------------------------------------- memory
    def alloc(self, nbytes: int) -> Any:
        cl = self.cl
        try:
            return cl.Buffer(self.device.context, cl.mem_flags.READ_WRITE, size=nbytes)
        except cl.Error as error:
            raise ExecutionError(
                f"OpenCL: could not allocate {nbytes} bytes on {self.device.info.label}: {error}"
            ) from None

    def view(self, buffer: Any, offset: int, nbytes: int) -> Any:
        return buffer.get_sub_region(offset, nbytes)

    def upload(self, buffer: Any, array: np.ndarray) -> None:
        if array.nbytes:
            self.cl.enqueue_copy(self.queue, buffer, array, is_blocking=True)

    def download(self, buffer: Any, array: np.ndarray) -> None:
        if array.nbytes:
            self.cl.enqueue_copy(self.queue, array, buffer, is_blocking=True)

    # ---------------------------------------------------------------- kernels
    def bind(self, name: str, args: list[Any]) -> Any:
        kernel = self.cl.Kernel(self.program, name)
        kernel.set_args(*args)
        return kernel

    def launch(self, kernel: Any, global_size: tuple[int, ...], local: tuple[int, ...]) -> None:
        self.cl.enqueue_nd_range_kernel(self.queue, kernel, global_size, local)

    def synchronize(self) -> None:
        self.queue.finish()
