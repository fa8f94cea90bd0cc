"""A Metal device through `pyobjc-framework-Metal`: library from source, pipelines,
buffers, dispatches on one command queue. Runs only on Apple hardware (macOS); elsewhere
`missing()` says why and `MetalDevice` raises CompileError naming it.

Buffers use shared storage: on Apple silicon that is the GPU's own memory (unified), so
data stays where kernels read it between runs and `upload`/`download` are plain copies
through `contents()`.
"""

from __future__ import annotations

import functools
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from luminal.errors import CompileError, ExecutionError

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


@dataclass
class MetalBuffer:
    handle: Any
    nbytes: int


@dataclass(frozen=True)
class Dispatch:
    """One kernel dispatch, arguments bound in order: buffers at `[[buffer(i)]]`, ints as
    32-bit constants at theirs."""

    pipeline: Any
    groups: tuple[int, int, int]
    threads_per_group: tuple[int, int, int]
    arguments: tuple[MetalBuffer | int, ...]


class MetalDevice:
    """The system's default Metal GPU and one command queue."""

    def __init__(self) -> None:
        reason = missing()
        if reason is not None:
            raise CompileError(reason)
        self.metal = _metal()
        self.device = _system_device()
        self.queue = self.device.newCommandQueue()

    @property
    def name(self) -> str:
        return str(self.device.name())

    def alloc(self, nbytes: int) -> MetalBuffer:
        options = self.metal.MTLResourceStorageModeShared
        handle = self.device.newBufferWithLength_options_(max(nbytes, 1), options)
        if handle is None:
            raise ExecutionError(f"Metal: could not allocate {nbytes} bytes")
        return MetalBuffer(handle, nbytes)

    def _view(self, buffer: MetalBuffer) -> memoryview:
        return buffer.handle.contents().as_buffer(buffer.nbytes)

    def upload(self, buffer: MetalBuffer, array: np.ndarray) -> None:
        data = np.ascontiguousarray(array).reshape(-1).view(np.uint8)
        if data.nbytes > buffer.nbytes:
            raise ExecutionError(
                f"Metal upload: {data.nbytes} bytes into a {buffer.nbytes}-byte buffer"
            )
        np.frombuffer(self._view(buffer), np.uint8)[: data.nbytes] = data

    def download(self, buffer: MetalBuffer, dtype: np.dtype, shape: Sequence[int]) -> np.ndarray:
        count = int(np.prod(shape, dtype=np.int64))
        raw = np.frombuffer(self._view(buffer), dtype, count=count)
        return raw.reshape(tuple(shape)).copy()

    def load(self, source: str, kernels: Sequence[str]) -> dict[str, Any]:
        """Compile `source` (Metal Shading Language) and a pipeline per kernel name."""
        options = self.metal.MTLCompileOptions.new()
        library, error = self.device.newLibraryWithSource_options_error_(source, options, None)
        if library is None:
            raise CompileError(f"Metal: the library did not compile: {error}")
        pipelines = {}
        for name in kernels:
            function = library.newFunctionWithName_(name)
            if function is None:
                raise CompileError(f"Metal: kernel {name!r} is not in the compiled library")
            pipeline, error = self.device.newComputePipelineStateWithFunction_error_(function, None)
            if pipeline is None:
                raise CompileError(f"Metal: no pipeline for kernel {name!r}: {error}")
            pipelines[name] = pipeline
        return pipelines

    def run(self, dispatches: Sequence[Dispatch]) -> None:
        """Encode every dispatch into one command buffer, commit it and wait."""
        command = self.queue.commandBuffer()
        encoder = command.computeCommandEncoder()
        for dispatch in dispatches:
            encoder.setComputePipelineState_(dispatch.pipeline)
            for index, argument in enumerate(dispatch.arguments):
                if isinstance(argument, MetalBuffer):
                    encoder.setBuffer_offset_atIndex_(argument.handle, 0, index)
                else:
                    value = np.int32(argument).tobytes()
                    encoder.setBytes_length_atIndex_(value, len(value), index)
            encoder.dispatchThreadgroups_threadsPerThreadgroup_(
                self.metal.MTLSizeMake(*dispatch.groups),
                self.metal.MTLSizeMake(*dispatch.threads_per_group),
            )
        encoder.endEncoding()
        command.commit()
        command.waitUntilCompleted()
        if command.error() is not None:
            raise ExecutionError(f"Metal: a kernel failed on the device: {command.error()}")
