"""A CUDA device through `cuda-python`'s driver API: context, stream, device buffers,
modules and launches. Runs only where an NVIDIA driver and GPU exist; elsewhere
`missing()` says why and `CudaDevice` raises CompileError naming it.

Buffers stay on the device between runs; `upload`/`download` are the only host copies
(`.set()` and `.numpy()`). Launch arguments are packed once per launch site
(`prepare_arguments`), so a run costs one `cuLaunchKernel` per kernel.
"""

from __future__ import annotations

import ctypes
import functools
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from luminal.backends.cuda.toolchain import CudaModule
from luminal.errors import CompileError, ExecutionError

INSTALL_HINT = "pip install 'luminal[cuda]'"


@functools.cache
def _driver() -> Any:
    try:
        from cuda.bindings import driver
    except ImportError as error:
        raise CompileError(
            f"CUDA: cuda-python is not installed ({INSTALL_HINT}): {error}"
        ) from None
    return driver


def _check(result: Any, call: str, error: type[Exception] = ExecutionError) -> None:
    driver = _driver()
    if result != driver.CUresult.CUDA_SUCCESS:
        _, text = driver.cuGetErrorString(result)
        name = text.decode(errors="replace") if isinstance(text, bytes) else str(result)
        raise error(f"CUDA: {call} failed: {name} ({result!r})")


@functools.cache
def _initialise() -> int:
    """cuInit, then the number of devices; CompileError naming what is missing."""
    driver = _driver()
    try:
        (result,) = driver.cuInit(0)
    except Exception as error:  # libcuda.so itself is missing: no NVIDIA driver
        raise CompileError(f"CUDA: no NVIDIA driver on this machine (libcuda): {error}") from None
    _check(result, "cuInit (no usable NVIDIA driver or GPU)", CompileError)
    result, count = driver.cuDeviceGetCount()
    _check(result, "cuDeviceGetCount", CompileError)
    return int(count)


def missing(ordinal: int = 0) -> str | None:
    """Why CUDA device `ordinal` cannot be used here (None when it can)."""
    try:
        count = _initialise()
    except CompileError as error:
        return str(error)
    if ordinal >= count:
        return f"CUDA: no GPU {ordinal}: the driver sees {count} device(s)"
    return None


@dataclass
class DeviceBuffer:
    """`nbytes` of device memory at `pointer` (freed by `CudaDevice.free`)."""

    pointer: int
    nbytes: int


@dataclass
class LaunchSite:
    """One kernel launch with its argument array packed once: `cuLaunchKernel` reads the
    addresses in `pointers`, which point into `values`."""

    function: Any
    grid: tuple[int, int, int]
    block: tuple[int, int, int]
    shared_bytes: int
    values: list[Any] = field(default_factory=list)
    pointers: Any = None


class CudaDevice:
    """GPU `ordinal`: its primary context made current, and one stream for every copy and
    launch (so they run in order without host synchronisation between them)."""

    def __init__(self, ordinal: int = 0) -> None:
        reason = missing(ordinal)
        if reason is not None:
            raise CompileError(reason)
        driver = _driver()
        result, self.device = driver.cuDeviceGet(ordinal)
        _check(result, "cuDeviceGet", CompileError)
        result, self.context = driver.cuDevicePrimaryCtxRetain(self.device)
        _check(result, "cuDevicePrimaryCtxRetain", CompileError)
        self._make_current()
        result, self.stream = driver.cuStreamCreate(0)
        _check(result, "cuStreamCreate", CompileError)
        self.ordinal = ordinal
        self._modules: list[Any] = []

    def _make_current(self) -> None:
        (result,) = _driver().cuCtxSetCurrent(self.context)
        _check(result, "cuCtxSetCurrent")

    @property
    def name(self) -> str:
        result, raw = _driver().cuDeviceGetName(256, self.device)
        _check(result, "cuDeviceGetName")
        return raw.split(b"\0", 1)[0].decode(errors="replace")

    @property
    def capability(self) -> tuple[int, int]:
        driver = _driver()
        attribute = driver.CUdevice_attribute
        values = []
        for which in ("MAJOR", "MINOR"):
            name = f"CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_{which}"
            result, value = driver.cuDeviceGetAttribute(getattr(attribute, name), self.device)
            _check(result, "cuDeviceGetAttribute")
            values.append(int(value))
        return values[0], values[1]

    # ---------------------------------------------------------------- memory
    def alloc(self, nbytes: int) -> DeviceBuffer:
        result, pointer = _driver().cuMemAlloc(max(nbytes, 1))
        _check(result, f"cuMemAlloc({nbytes} bytes)")
        return DeviceBuffer(int(pointer), nbytes)

    def free(self, buffer: DeviceBuffer) -> None:
        (result,) = _driver().cuMemFree(buffer.pointer)
        _check(result, "cuMemFree")

    def upload(self, buffer: DeviceBuffer, array: np.ndarray) -> None:
        """Copy `array` into `buffer` (synchronised: the host array may change after)."""
        data = np.ascontiguousarray(array)
        if data.nbytes > buffer.nbytes:
            raise ExecutionError(
                f"CUDA upload: {data.nbytes} bytes into a {buffer.nbytes}-byte device buffer"
            )
        driver = _driver()
        (result,) = driver.cuMemcpyHtoDAsync(
            buffer.pointer, data.ctypes.data, data.nbytes, self.stream
        )
        _check(result, "cuMemcpyHtoDAsync")
        self.synchronize()

    def download(self, buffer: DeviceBuffer, dtype: np.dtype, shape: Sequence[int]) -> np.ndarray:
        """A host copy of `buffer` as an array of `shape` (after the queued work ends)."""
        out = np.empty(tuple(shape), dtype)
        if out.nbytes > buffer.nbytes:
            raise ExecutionError(
                f"CUDA download: {out.nbytes} bytes from a {buffer.nbytes}-byte device buffer"
            )
        driver = _driver()
        (result,) = driver.cuMemcpyDtoHAsync(
            out.ctypes.data, buffer.pointer, out.nbytes, self.stream
        )
        _check(result, "cuMemcpyDtoHAsync")
        self.synchronize()
        return out

    # ---------------------------------------------------------------- code
    def load(self, module: CudaModule) -> dict[str, Any]:
        """Load the image for this device (its cubin, else PTX for the driver to JIT) and
        return its kernels by name."""
        kind, image = module.image_for(self.capability)
        driver = _driver()
        self._make_current()
        result, handle = driver.cuModuleLoadData(image + (b"\0" if kind == "ptx" else b""))
        _check(result, f"cuModuleLoadData ({kind} for {self.name})", CompileError)
        self._modules.append(handle)
        functions = {}
        for name in module.kernels:
            result, function = driver.cuModuleGetFunction(handle, name.encode())
            _check(result, f"cuModuleGetFunction({name})", CompileError)
            functions[name] = function
        return functions

    def prepare(
        self,
        function: Any,
        grid: Sequence[int],
        block: Sequence[int],
        arguments: Sequence[DeviceBuffer | int],
        shared_bytes: int = 0,
    ) -> LaunchSite:
        """A launch with its arguments packed: buffers as device pointers, ints as int32
        (the dims a kernel takes)."""
        values = [
            ctypes.c_uint64(a.pointer) if isinstance(a, DeviceBuffer) else ctypes.c_int32(a)
            for a in arguments
        ]
        pointers = (ctypes.c_void_p * max(len(values), 1))(
            *[ctypes.addressof(value) for value in values]
        )
        return LaunchSite(function, _dim3(grid), _dim3(block), shared_bytes, values, pointers)

    def launch(self, site: LaunchSite) -> None:
        (result,) = _driver().cuLaunchKernel(
            site.function,
            *site.grid,
            *site.block,
            site.shared_bytes,
            self.stream,
            ctypes.addressof(site.pointers),
            0,
        )
        _check(result, "cuLaunchKernel")

    def synchronize(self) -> None:
        (result,) = _driver().cuStreamSynchronize(self.stream)
        _check(result, "cuStreamSynchronize (a kernel failed on the device)")

    def close(self) -> None:
        """Unload modules and release the stream and context (buffers are freed by their
        owner first)."""
        driver = _driver()
        for handle in self._modules:
            driver.cuModuleUnload(handle)
        self._modules.clear()
        driver.cuStreamDestroy(self.stream)
        driver.cuDevicePrimaryCtxRelease(self.device)


def _dim3(sizes: Sequence[int]) -> tuple[int, int, int]:
    padded = [int(s) for s in sizes] + [1] * (3 - len(sizes))
    if len(padded) != 3 or min(padded) < 1:
        raise CompileError(f"CUDA launch: sizes {list(sizes)} are not 1 to 3 positive ints")
    return padded[0], padded[1], padded[2]
