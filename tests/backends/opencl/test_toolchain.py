"""The OpenCL toolchain: device choice, one program per source, and the on-disk program
cache under the CPU cache's trust rules (a second process loads instead of building; a
corrupted or planted binary is rebuilt, never loaded)."""

from __future__ import annotations

import os
import stat
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from luminal.backends.cpu import cache_files
from luminal.backends.opencl import toolchain
from luminal.errors import CompileError

REPO = Path(__file__).resolve().parents[3]
SOURCE = """__kernel void twice(__global float* out, __global const float* x, const long n) {
    const long i = get_global_id(0);
    if (i < n) out[i] = 2.0f * x[i] + %d.0f;
}
"""


def _run(program: object, device: toolchain.Device, shift: int) -> None:
    cl = device.cl
    x = np.arange(10, dtype=np.float32)
    flags = cl.mem_flags
    source = cl.Buffer(device.context, flags.READ_ONLY | flags.COPY_HOST_PTR, hostbuf=x)
    target = cl.Buffer(device.context, flags.WRITE_ONLY, x.nbytes)
    program.twice(device.queue, (16,), None, target, source, np.int64(10))
    out = np.empty_like(x)
    cl.enqueue_copy(device.queue, out, target)
    np.testing.assert_array_equal(out, 2 * x + shift)


def test_the_chosen_device_builds_and_runs_a_kernel() -> None:
    device = toolchain.open_device()
    assert device.info.unusable_reason is None
    _run(toolchain.build_program(device, SOURCE % 1), device, 1)


def test_the_cache_is_private_and_a_second_process_loads_instead_of_building(
    cache: Path,
) -> None:
    code = (
        "from luminal.backends.opencl import toolchain as t\n"
        f"t.build_program(t.open_device(), {SOURCE % 2!r})\n"
        "print(t.stats())\n"
    )
    env = {**os.environ, "LUMINAL_CACHE_DIR": str(cache)}
    runs = [
        subprocess.run(
            [sys.executable, "-c", code], capture_output=True, text=True, env=env, cwd=REPO
        )
        for _ in range(2)
    ]
    assert [r.returncode for r in runs] == [0, 0], [r.stderr for r in runs]
    assert "'builds': 1, 'cache_hits': 0" in runs[0].stdout
    assert "'builds': 0, 'cache_hits': 1" in runs[1].stdout
    directory = cache / toolchain.PROGRAMS
    assert stat.S_IMODE(directory.stat().st_mode) == 0o700
    for entry in directory.iterdir():
        assert stat.S_IMODE(entry.stat().st_mode) == 0o600


@pytest.mark.parametrize("damage", ["truncated", "planted"])
def test_a_damaged_or_planted_binary_is_rebuilt_not_loaded(damage: str) -> None:
    device = toolchain.open_device()
    source = SOURCE % (3 if damage == "truncated" else 4)
    toolchain.build_program(device, source)
    key = toolchain.program_key(source, device.info)
    path = toolchain.programs_dir() / f"{key}.bin"
    data = path.read_bytes()
    # a truncated binary fails its manifest's hash; a planted one (another program's bytes,
    # valid for the driver) too, so it is never loaded in place of ours
    other = toolchain.programs_dir() / f"{toolchain.program_key(SOURCE % 1, device.info)}.bin"
    toolchain.build_program(device, SOURCE % 1)
    path.write_bytes(data[: len(data) // 2] if damage == "truncated" else other.read_bytes())
    before = toolchain.stats()
    program = toolchain.build_program(device, source)
    after = toolchain.stats()
    assert after["builds"] == before["builds"] + 1
    assert after["cache_hits"] == before["cache_hits"]
    _run(program, device, 3 if damage == "truncated" else 4)
    # the rebuilt binary replaced the damaged one and matches its manifest again
    assert cache_files.verify(path, key, toolchain.build_id(device.info)) is not None


def test_a_device_that_cannot_build_is_named_and_skipped() -> None:
    info = toolchain.DeviceInfo(
        0,
        "Portable Computing Language",
        "pthread-AMD EPYC",
        "OpenCL 3.0 PoCL HSTR: pthread-x86_64-unknown-linux-gnu-generic",
        "3.0-rc2",
        "cpu",
        frozenset(),
        4096,
        1 << 20,
        128,
    )
    assert "does not know this CPU" in str(info.unusable_reason)
    with pytest.raises(CompileError, match="no OpenCL device matches 'no-such-device'"):
        toolchain.choose("no-such-device")
    with pytest.raises(CompileError, match="OpenCL device 99 does not exist"):
        toolchain.choose(99)
