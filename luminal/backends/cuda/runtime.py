"""A CUDA device through `cuda-python`'s driver API: context, stream, device buffers,
modules and launches. Runs only where an NVIDIA driver and GPU exist; elsewhere
`missing()` says why and `CudaDevice` raises CompileError naming it.

Buffers stay on the device between runs; `upload`/`download` are the only host copies
(`.set()` and `.numpy()`). Launch arguments are packed once per launch site
(`bind`, once per plan), so a run costs one `cuLaunchKernel` per kernel.
"""

from __future__ import annotations

import ctypes
import functools
import weakref
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from luminal.backends import launch_limits
from luminal.backends.cuda import toolchain
from luminal.backends.cuda.render import CUDARenderer
from luminal.backends.cuda.toolchain import DEFAULT_ARCHES, CudaModule
from luminal.errors import CompileError, ExecutionError
from luminal.kernel.gpu import Launch

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


@dataclass(frozen=True)
class DeviceBuffer:
    """`nbytes` of device memory at `pointer`; `owner` is the allocation it lies in (None:
    it is one), so only allocations are ever freed."""

    pointer: int
    nbytes: int
    owner: DeviceBuffer | None = None


@dataclass
class BoundKernel:
    """A kernel with its argument array packed once: `cuLaunchKernel` reads the addresses
    in `pointers`, which point into `values` (kept alive here)."""

    function: Any
    values: list[Any]
    pointers: Any
    name: str = ""


class CudaDevice:
    """GPU `ordinal` as a compiled graph uses it (`luminal.backends.gpu_runtime.GpuDevice`):
    its primary context, one stream for every copy and launch (in order, no host waits
    between them), and the graph's kernels as one module built for `arches`."""

    alignment = 256  # cuMemAlloc's own alignment; arena views keep it

    def __init__(self, ordinal: int = 0, arches: Sequence[str] = DEFAULT_ARCHES) -> None:
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
        self.arches = tuple(arches)
        self.module: CudaModule | None = None
        self._modules: list[Any] = []
        self._functions: dict[str, Any] = {}
        self._allocations: list[DeviceBuffer] = []
        # freed with the device (a recompiled graph drops its old one), or by `close`
        self.close = weakref.finalize(
            self, _release, self._allocations, self._modules, self.stream, self.device
        )

    def __getstate__(self) -> dict[str, Any]:
        raise TypeError("a CUDA device cannot be pickled")

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

    # ---------------------------------------------------------------- building
    def build(self, launches: Sequence[Launch]) -> list[str]:
        """Render every launch as CUDA C (one module), build it for `arches`, and load
        this device's image (its cubin, else PTX the driver compiles); kernel names in order."""
        names, source = CUDARenderer().program(list(launches))
        self.module = toolchain.build(source, sorted(set(names)), self.arches)
        self._load(self.module)
        return names

    def _load(self, module: CudaModule) -> None:
        kind, image = module.image_for(self.capability)
        driver = _driver()
        self._make_current()
        result, handle = driver.cuModuleLoadData(image + (b"\0" if kind == "ptx" else b""))
        _check(result, f"cuModuleLoadData ({kind} for {self.name})", CompileError)
        self._modules.append(handle)
        for name in module.kernels:
            result, function = driver.cuModuleGetFunction(handle, name.encode())
            _check(result, f"cuModuleGetFunction({name})", CompileError)
            self._functions[name] = function

    # ---------------------------------------------------------------- memory
    def alloc(self, nbytes: int) -> DeviceBuffer:
        result, pointer = _driver().cuMemAlloc(max(nbytes, 1))
        _check(result, f"cuMemAlloc({nbytes} bytes on {self.name})")
        buffer = DeviceBuffer(int(pointer), nbytes)
        self._allocations.append(buffer)
        return buffer

    def view(self, buffer: DeviceBuffer, offset: int, nbytes: int) -> DeviceBuffer:
        if offset + nbytes > buffer.nbytes:
            raise ExecutionError(
                f"CUDA: a view of {nbytes} bytes at {offset} exceeds a {buffer.nbytes}-byte buffer"
            )
        return DeviceBuffer(buffer.pointer + offset, nbytes, buffer.owner or buffer)

    def upload(self, buffer: DeviceBuffer, array: np.ndarray) -> None:
        """Copy `array` into `buffer`; returns once copied (the host array may change)."""
        data = np.ascontiguousarray(array)
        if data.nbytes > buffer.nbytes:
            raise ExecutionError(
                f"CUDA upload: {data.nbytes} bytes into a {buffer.nbytes}-byte device buffer"
            )
        if data.nbytes:
            copy = _driver().cuMemcpyHtoDAsync
            (result,) = copy(buffer.pointer, data.ctypes.data, data.nbytes, self.stream)
            _check(result, "cuMemcpyHtoDAsync")
            self.synchronize()

    def download(self, buffer: DeviceBuffer, array: np.ndarray) -> None:
        """Copy `buffer` into the contiguous host `array` after the queued work ends."""
        if array.nbytes > buffer.nbytes:
            raise ExecutionError(
                f"CUDA download: {array.nbytes} bytes from a {buffer.nbytes}-byte device buffer"
            )
        if array.nbytes:
            copy = _driver().cuMemcpyDtoHAsync
            (result,) = copy(array.ctypes.data, buffer.pointer, array.nbytes, self.stream)
            _check(result, "cuMemcpyDtoHAsync")
        self.synchronize()

    # ---------------------------------------------------------------- kernels
    def bind(self, name: str, args: list[Any]) -> BoundKernel:
        """Kernel `name` with its arguments packed: buffers as device pointers, numpy
        scalars (int64 dims, the int32 launch site) at their own width."""
        values = [_argument(a) for a in args]
        pointers = (ctypes.c_void_p * max(len(values), 1))(*[ctypes.addressof(v) for v in values])
        return BoundKernel(self._functions[name], values, pointers, name)

    def launch(
        self, bound: BoundKernel, global_size: tuple[int, ...], local: tuple[int, ...]
    ) -> None:
        """`global_size` work-items per axis (whole work-groups): grid = global / local,
        y and z capped at CUDA's 65535 (the kernels loop over the rest)."""
        grid = launch_limits.grid(bound.name, global_size, local)
        arguments = ctypes.addressof(bound.pointers)
        (result,) = _driver().cuLaunchKernel(
            bound.function, *grid, *_dim3(local), 0, self.stream, arguments, 0
        )
        _check(result, "cuLaunchKernel")

    def synchronize(self) -> None:
        (result,) = _driver().cuStreamSynchronize(self.stream)
        _check(result, "cuStreamSynchronize (a kernel failed on the device)")


def _release(allocations: list, modules: list, stream: Any, device: Any) -> None:
    """Free a device's allocations and modules, its stream and its hold on the context
    (results unchecked: at interpreter exit the driver may already be gone)."""
    driver = _driver()
    for buffer in allocations:
        driver.cuMemFree(buffer.pointer)
    for handle in modules:
        driver.cuModuleUnload(handle)
    allocations.clear()
    modules.clear()
    driver.cuStreamDestroy(stream)
    driver.cuDevicePrimaryCtxRelease(device)


def _argument(value: Any) -> Any:
    if isinstance(value, DeviceBuffer):
        return ctypes.c_uint64(value.pointer)
    if isinstance(value, np.int32):
        return ctypes.c_int32(int(value))
    if isinstance(value, np.integer | int):
        return ctypes.c_int64(int(value))
    raise CompileError(f"CUDA: cannot pass {type(value).__name__} to a kernel")


def _dim3(sizes: Sequence[int]) -> tuple[int, int, int]:
    padded = [int(s) for s in sizes] + [1] * (3 - len(sizes))
    if len(padded) != 3 or min(padded) < 1:
        raise CompileError(f"CUDA launch: sizes {list(sizes)} are not 1 to 3 positive ints")
    return padded[0], padded[1], padded[2]
