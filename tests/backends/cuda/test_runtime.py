"""The CUDA device's host-side logic without a GPU: a driver stand-in records what
`CudaDevice` asks of cuda-python, so argument packing (device pointers, int64 dims, the
int32 launch number), grid sizes and views are checked here; the real driver calls run
in the `gpu` tests."""

from __future__ import annotations

import ctypes
from types import SimpleNamespace

import numpy as np
import pytest

from luminal.backends.cuda import runtime
from luminal.errors import ExecutionError

SUCCESS = "CUDA_SUCCESS"


class Driver:
    """Records cuLaunchKernel's arguments; every call succeeds."""

    CUresult = SimpleNamespace(CUDA_SUCCESS=SUCCESS)

    def __init__(self) -> None:
        self.launches: list[tuple] = []

    def cuLaunchKernel(self, *args: object) -> tuple[str]:  # noqa: N802 - the driver's name
        self.launches.append(args)
        return (SUCCESS,)


@pytest.fixture
def device(monkeypatch: pytest.MonkeyPatch) -> tuple[runtime.CudaDevice, Driver]:
    driver = Driver()
    monkeypatch.setattr(runtime, "_driver", lambda: driver)
    device = object.__new__(runtime.CudaDevice)  # no context: only host-side logic runs
    device.stream = "stream"
    device._functions = {"k": "function-k"}
    return device, driver


def test_arguments_are_packed_at_their_widths(device: tuple) -> None:
    cuda, driver = device
    arena = runtime.DeviceBuffer(0x7F00_0000_1000, 4096)
    view = cuda.view(arena, 512, 256)
    assert view == runtime.DeviceBuffer(0x7F00_0000_1200, 256, arena)
    bound = cuda.bind("k", [arena, view, np.int64(1 << 40), np.int64(-3), np.int32(7)])
    cuda.launch(bound, (256, 6, 2), (64, 3, 1))
    (call,) = driver.launches
    function, grid, block = call[0], call[1:4], call[4:7]
    assert function == "function-k" and grid == (4, 2, 2) and block == (64, 3, 1)
    assert call[7:9] == (0, "stream") and call[10] == 0
    slots = (ctypes.c_void_p * 5).from_address(call[9])
    read = [ctypes.c_uint64, ctypes.c_uint64, ctypes.c_int64, ctypes.c_int64, ctypes.c_int32]
    values = [kind.from_address(slot).value for kind, slot in zip(read, slots, strict=True)]
    assert values == [0x7F00_0000_1000, 0x7F00_0000_1200, 1 << 40, -3, 7]


def test_a_view_past_its_buffer_is_refused(device: tuple) -> None:
    cuda, _ = device
    with pytest.raises(ExecutionError, match="exceeds a 4096-byte buffer"):
        cuda.view(runtime.DeviceBuffer(4096, 4096), 4000, 200)
