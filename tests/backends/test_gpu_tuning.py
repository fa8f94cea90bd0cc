"""The measured search every GPU compiler shares (`GpuCompiler` in a searching mode,
`gpu_tuning`), run end to end on the OpenCL device CI has: a compiler that supplies only
a device and its cache id (as CUDACompiler and MetalCompiler do) verifies and times every
option of every site, installs a correct program, records the trials, and a second
compile takes the choices from the disk cache without measuring."""

from __future__ import annotations

import numpy as np

from luminal.backends import gpu_search
from luminal.backends.gpu_compiler import GpuCompiler
from luminal.backends.opencl.runtime import OpenCLDevice
from tests.backends.cuda.test_search import mlp


class DeviceOnly(GpuCompiler):
    """A GPU compiler with nothing of its own but a device (the OpenCL one here)."""

    name = "DeviceOnly"

    def open_device(self) -> OpenCLDevice:
        return OpenCLDevice(None, cache=False)

    def backend_id(self, device: OpenCLDevice) -> str:
        return "test/device-only"


def test_the_shared_search_verifies_times_caches_and_reuses(rng, tmp_path, monkeypatch) -> None:
    monkeypatch.setenv("LUMINAL_CACHE_DIR", str(tmp_path))
    cx, out, expected = mlp(rng)
    compiler = DeviceOnly(mode="optimal")
    cx.compile(compiler)
    record = compiler.search_record
    assert record is not None and not compiler.cache_hit
    assert record.backend == "test/device-only" and record.stopped_by == "space exhausted"
    timed = {(site, t.config[site]) for t in record.trials for site in t.config}
    assert timed == {(site, option) for site, ops in record.sites.items() for option in ops}
    assert all(record.chosen[site] in ops for site, ops in record.sites.items())
    cx.execute()
    np.testing.assert_allclose(out.numpy(), expected, rtol=1e-4, atol=1e-6)

    def no_measuring(*args: object, **kwargs: object) -> None:
        raise AssertionError("a cached search measured again")

    monkeypatch.setattr(gpu_search, "search_sites", no_measuring)
    again, out, expected = mlp(rng)
    second = DeviceOnly(mode="optimal")
    again.compile(second)
    assert second.cache_hit and second.search_record.chosen == record.chosen
    again.execute()
    np.testing.assert_allclose(out.numpy(), expected, rtol=1e-4, atol=1e-6)
