"""The Metal device's host-side logic off Apple hardware: a stand-in for the Metal
framework records what `MetalDevice` encodes, so argument bindings (buffers with their
offsets, int64 dims and the int32 launch number as bytes), threadgroup counts and the
one-command-buffer-per-run rule are checked here; the real framework runs in the `gpu`
tests."""

from __future__ import annotations

from types import SimpleNamespace

import numpy as np
import pytest

from luminal.backends.metal import runtime


class Recorder:
    """Any method call is recorded as (name, args) on the shared log."""

    def __init__(self, log: list, name: str) -> None:
        self.log, self.name = log, name

    def __getattr__(self, method: str):  # noqa: ANN204 - a recorder of any method
        def call(*args: object) -> object:
            self.log.append((f"{self.name}.{method}", args))
            if method == "commandBuffer":
                return Recorder(self.log, "command")
            if method == "computeCommandEncoder":
                return Recorder(self.log, "encoder")
            return None

        return call


@pytest.fixture
def metal() -> tuple[runtime.MetalDevice, list]:
    log: list = []
    device = object.__new__(runtime.MetalDevice)  # no GPU: only host-side logic runs
    device.metal = SimpleNamespace(MTLSizeMake=lambda *size: size)
    device.queue = Recorder(log, "queue")
    device._pipelines = {"k": "pipeline-k"}
    device._pending = None
    return device, log


def test_dispatch_binds_arguments_in_order(metal: tuple) -> None:
    device, log = metal
    arena = runtime.MetalBuffer("arena", 0, 4096)
    view = device.view(arena, 256, 512)
    assert view == runtime.MetalBuffer("arena", 256, 512)
    bound = device.bind("k", [arena, view, np.int64(5), np.int32(2)])
    device.launch(bound, (128, 3), (64, 1))
    device.launch(bound, (64,), (64,))
    calls = [(name, args) for name, args in log if name.startswith("encoder")]
    assert calls[:6] == [
        ("encoder.setComputePipelineState_", ("pipeline-k",)),
        ("encoder.setBuffer_offset_atIndex_", ("arena", 0, 0)),
        ("encoder.setBuffer_offset_atIndex_", ("arena", 256, 1)),
        ("encoder.setBytes_length_atIndex_", (np.int64(5).tobytes(), 8, 2)),
        ("encoder.setBytes_length_atIndex_", (np.int32(2).tobytes(), 4, 3)),
        ("encoder.dispatchThreadgroups_threadsPerThreadgroup_", ((2, 3, 1), (64, 1, 1))),
    ]
    # one command buffer for the run, one encoder per dispatch, nothing committed yet
    names = [name for name, _ in log]
    assert names.count("queue.commandBuffer") == 1
    assert names.count("command.computeCommandEncoder") == 2
    assert names.count("encoder.endEncoding") == 2
    assert "command.commit" not in names
    device.synchronize()  # commits the run and waits for it
    names = [name for name, _ in log]
    assert names[-3:] == ["command.commit", "command.waitUntilCompleted", "command.error"]
    device.synchronize()  # nothing queued: nothing to commit
    assert [name for name, _ in log].count("command.commit") == 1
