"""A Metal device through `pyobjc-framework-Metal`, as a compiled graph uses it
(`luminal.backends.gpu_runtime.GpuDevice`): one library per graph, pipelines, buffers,
dispatches on one command queue. Runs only on Apple hardware (macOS); elsewhere
`missing()` says why and `MetalDevice` raises CompileError naming it.

Buffers use shared storage: on Apple silicon that is the GPU's own memory (unified), so
data stays where kernels read it between runs and uploads and downloads are copies
through `contents()`. Launches are encoded into one command buffer (one compute encoder
each, so every dispatch sees the previous one's writes) that `synchronize` commits.
"""

from __future__ import annotations

import functools
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from luminal.backends.metal.render import MetalRenderer
from luminal.errors import CompileError, ExecutionError
from luminal.kernel.gpu import Launch

INSTALL_HINT = "pip install 'luminal[metal]' on macOS"


@functools.cache
def _metal() -> Any:
    if sys.platform != "darwin":
        raise CompileError(f"Metal: needs macOS on Apple hardware; this is {sys.platform}")
    try:
        import Metal
    except ImportError as error:
        raise CompileError(
            f"Metal: pyobjc-framework-Metal is not installed ({INSTALL_HINT}): {error}"
        ) from None
    return Metal


@functools.cache
def _system_device() -> Any:
    device = _metal().MTLCreateSystemDefaultDevice()
    if device is None:
        raise CompileError("Metal: MTLCreateSystemDefaultDevice found no GPU")
    return device


def missing() -> str | None:
    """Why Metal cannot be used here (None when it can)."""
    try:
        _system_device()
    except CompileError as error:
        return str(error)
    return None


@dataclass(frozen=True)
class MetalBuffer:
    """`nbytes` at `offset` in the MTLBuffer `handle` (arena views share one handle)."""

    handle: Any
    offset: int
    nbytes: int


@dataclass(frozen=True)
class BoundKernel:
    """A pipeline with its arguments in binding order: buffers at `[[buffer(i)]]`, numpy
    scalars (int64 dims, the int32 launch number) as constants of their width."""

    pipeline: Any
    arguments: tuple[Any, ...]


class MetalDevice:
    """The system's default Metal GPU and one command queue."""

    alignment = 256  # a buffer offset bound for `device` data must be aligned; 256 always is

    def __init__(self) -> None:
        reason = missing()
        if reason is not None:
            raise CompileError(reason)
        self.metal = _metal()
        self.device = _system_device()
        self.queue = self.device.newCommandQueue()
        self.source = ""
        self._pipelines: dict[str, Any] = {}
        self._pending: Any = None  # the command buffer being filled

    def __getstate__(self) -> dict[str, Any]:
        raise TypeError("a Metal device cannot be pickled")

    @property
    def name(self) -> str:
        return str(self.device.name())

    # ---------------------------------------------------------------- building
    def build(self, launches: Sequence[Launch]) -> list[str]:
        """Render the launches as one library, compile it (no fast math: NaN and the
        infinities keep their meaning) and make a pipeline per kernel."""
        names, self.source = MetalRenderer().program(list(launches))
        options = self.metal.MTLCompileOptions.new()
        options.setFastMathEnabled_(False)
        library, error = self.device.newLibraryWithSource_options_error_(self.source, options, None)
        if library is None:
            raise CompileError(f"Metal: the library did not compile: {error}")
        for name in dict.fromkeys(names):
            function = library.newFunctionWithName_(name)
            if function is None:
                raise CompileError(f"Metal: kernel {name!r} is not in the compiled library")
            pipeline, error = self.device.newComputePipelineStateWithFunction_error_(function, None)
            if pipeline is None:
                raise CompileError(f"Metal: no pipeline for kernel {name!r}: {error}")
            self._pipelines[name] = pipeline
        return names

    # ---------------------------------------------------------------- memory
    def alloc(self, nbytes: int) -> MetalBuffer:
        options = self.metal.MTLResourceStorageModeShared
        handle = self.device.newBufferWithLength_options_(max(nbytes, 1), options)
        if handle is None:
            raise ExecutionError(f"Metal: could not allocate {nbytes} bytes on {self.name}")
        return MetalBuffer(handle, 0, nbytes)

    def view(self, buffer: MetalBuffer, offset: int, nbytes: int) -> MetalBuffer:
        if offset + nbytes > buffer.nbytes:
            raise ExecutionError(
                f"Metal: a view of {nbytes} bytes at {offset} exceeds a {buffer.nbytes}-byte buffer"
            )
        return MetalBuffer(buffer.handle, buffer.offset + offset, nbytes)

    def _bytes(self, buffer: MetalBuffer) -> np.ndarray:
        whole = buffer.handle.contents().as_buffer(buffer.offset + buffer.nbytes)
        return np.frombuffer(whole, np.uint8)[buffer.offset :]

    def upload(self, buffer: MetalBuffer, array: np.ndarray) -> None:
        """Copy `array` into `buffer` once the queued work is done with it."""
        data = np.ascontiguousarray(array).reshape(-1).view(np.uint8)
        if data.nbytes > buffer.nbytes:
            raise ExecutionError(
                f"Metal upload: {data.nbytes} bytes into a {buffer.nbytes}-byte buffer"
            )
        self.synchronize()
        self._bytes(buffer)[: data.nbytes] = data

    def download(self, buffer: MetalBuffer, array: np.ndarray) -> None:
        """Copy `buffer` into the contiguous host `array` after the queued work ends."""
        if array.nbytes > buffer.nbytes:
            raise ExecutionError(
                f"Metal download: {array.nbytes} bytes from a {buffer.nbytes}-byte buffer"
            )
        self.synchronize()
        array.reshape(-1).view(np.uint8)[:] = self._bytes(buffer)[: array.nbytes]

    # ---------------------------------------------------------------- kernels
    def bind(self, name: str, args: list[Any]) -> BoundKernel:
        return BoundKernel(self._pipelines[name], tuple(args))

    def launch(
        self, bound: BoundKernel, global_size: tuple[int, ...], local: tuple[int, ...]
    ) -> None:
        """Encode one dispatch of `global_size` work-items (whole threadgroups of `local`)."""
        if self._pending is None:
            self._pending = self.queue.commandBuffer()
        encoder = self._pending.computeCommandEncoder()
        encoder.setComputePipelineState_(bound.pipeline)
        for index, argument in enumerate(bound.arguments):
            if isinstance(argument, MetalBuffer):
                encoder.setBuffer_offset_atIndex_(argument.handle, argument.offset, index)
            else:
                value = np.asarray(argument).tobytes()  # int64 dims, the int32 launch number
                encoder.setBytes_length_atIndex_(value, len(value), index)
        groups = [g // size for g, size in zip(global_size, local, strict=True)]
        encoder.dispatchThreadgroups_threadsPerThreadgroup_(
            self.metal.MTLSizeMake(*_size3(groups)), self.metal.MTLSizeMake(*_size3(local))
        )
        encoder.endEncoding()

    def synchronize(self) -> None:
        """Commit the queued dispatches and wait for them."""
        command, self._pending = self._pending, None
        if command is None:
            return
        command.commit()
        command.waitUntilCompleted()
        if command.error() is not None:
            raise ExecutionError(f"Metal: a kernel failed on {self.name}: {command.error()}")


def _size3(sizes: Sequence[int]) -> tuple[int, int, int]:
    padded = [int(s) for s in sizes] + [1] * (3 - len(sizes))
    return padded[0], padded[1], padded[2]
