"""The CUDA toolchain without a GPU: NVRTC to PTX, ptxas to cubins for sm_80 and sm_90,
rejections named by kernel and architecture, and the on-disk cache's trust rules."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from luminal.backends.cpu import cache_location
from luminal.backends.cuda import nvrtc, ptxas, runtime, toolchain
from luminal.errors import CompileError

TWICE = 'extern "C" __global__ void twice(float* x, int n) {\n'
TWICE += "    int i = blockIdx.x * blockDim.x + threadIdx.x;\n    if (i < n) x[i] *= 2.0f;\n}\n"

# 64 KB of static shared memory: NVRTC writes the PTX, no GPU could run it (48 KB max)
TOO_MUCH_SHARED = """extern "C" __global__ void fits(float* x) { x[threadIdx.x] += 1.0f; }
extern "C" __global__ void hog(float* x) {
    __shared__ float stage[16384];
    stage[threadIdx.x] = x[threadIdx.x];
    __syncthreads();
    x[threadIdx.x] = stage[(threadIdx.x + 1) % 16384];
}
"""

# half precision and tensor cores through the wheels' headers (no CUDA toolkit needed)
WMMA = """#include <cuda_fp16.h>
#include <mma.h>
using namespace nvcuda;
extern "C" __global__ void tile16(const half* a, const half* b, float* c) {
    wmma::fragment<wmma::matrix_a, 16, 16, 16, half, wmma::row_major> fa;
    wmma::fragment<wmma::matrix_b, 16, 16, 16, half, wmma::col_major> fb;
    wmma::fragment<wmma::accumulator, 16, 16, 16, float> fc;
    wmma::fill_fragment(fc, 0.0f);
    wmma::load_matrix_sync(fa, a, 16);
    wmma::load_matrix_sync(fb, b, 16);
    wmma::mma_sync(fc, fa, fb, fc);
    wmma::store_matrix_sync(c, fc, 16, wmma::mem_row_major);
}
"""


@pytest.fixture
def private_cache(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Path:
    monkeypatch.setenv("LUMINAL_CACHE_DIR", str(tmp_path / "cache"))
    cache_location.reset()
    yield tmp_path / "cache"
    cache_location.reset()


def test_toolchain_is_present() -> None:
    """CI installs NVRTC and ptxas from PyPI (the dev extra): neither may be missing."""
    assert nvrtc.missing() is None
    assert nvrtc.version() >= (12, 4)
    assert ptxas.find() is not None and "release" in ptxas.version()


def test_build_gives_ptx_and_cubin_per_arch(private_cache: Path) -> None:
    module = toolchain.build(TWICE, ["twice"], ("sm_80", "sm_90"))
    assert sorted(module.binaries) == ["sm_80", "sm_90"]
    for arch, binary in module.binaries.items():
        assert f".target {arch}".encode() in binary.ptx
        assert b".entry twice" in binary.ptx
        assert binary.cubin[:4] == b"\x7fELF"
    assert module.image_for((9, 0)) == ("cubin", module.binaries["sm_90"].cubin)
    assert module.image_for((8, 9)) == ("ptx", module.binaries["sm_80"].ptx)  # driver JIT
    with pytest.raises(CompileError, match="sm_75"):
        module.image_for((7, 5))


def test_ptxas_rejection_names_kernel_and_arch(private_cache: Path) -> None:
    with pytest.raises(CompileError, match=r"ptxas rejected kernel 'hog' for sm_80.*shared"):
        toolchain.build(TOO_MUCH_SHARED, ["fits", "hog"], ("sm_80",))


def test_nvrtc_error_names_the_module_and_line(private_cache: Path) -> None:
    broken = TWICE.replace("*= 2.0f", "*= undeclared")
    with pytest.raises(
        CompileError, match=r"(?s)NVRTC could not compile g for compute_90.*g.cu\(3\).*undeclared"
    ):
        toolchain.build(broken, ["twice"], ("sm_90",), name="g")


def test_unknown_arch_is_a_compile_error() -> None:
    with pytest.raises(CompileError, match="unknown architecture 'ampere'"):
        toolchain.build(TWICE, ["twice"], ("ampere",))


def test_half_and_wmma_compile_for_tensor_core_arches(private_cache: Path) -> None:
    module = toolchain.build(WMMA, ["tile16"], ("sm_80", "sm_90"))
    for binary in module.binaries.values():
        assert b"wmma.mma.sync" in binary.ptx


def test_second_build_comes_from_the_cache(private_cache: Path) -> None:
    toolchain.reset_stats()
    first = toolchain.build(TWICE, ["twice"], ("sm_80", "sm_90"))
    assert toolchain.stats() == {"nvrtc": 2, "ptxas": 2}
    toolchain.reset_stats()
    second = toolchain.build(TWICE, ["twice"], ("sm_80", "sm_90"))
    assert toolchain.stats() == {"hits": 2}
    assert second == first
    folder = private_cache / toolchain.KERNELS
    assert oct(os.stat(folder).st_mode & 0o777) == "0o700"
    assert all(oct(p.stat().st_mode & 0o777) == "0o600" for p in folder.iterdir())


def test_edited_cache_file_is_rebuilt(private_cache: Path) -> None:
    built = toolchain.build(TWICE, ["twice"], ("sm_90",))
    (cubin,) = (private_cache / toolchain.KERNELS).glob("*.cubin")
    cubin.write_bytes(b"\x7fELF not what ptxas wrote")
    toolchain.reset_stats()
    again = toolchain.build(TWICE, ["twice"], ("sm_90",))
    assert toolchain.stats() == {"nvrtc": 1, "ptxas": 1}
    assert again == built


def test_shared_cache_folder_is_refused(private_cache: Path) -> None:
    toolchain.build(TWICE, ["twice"], ("sm_90",))
    os.chmod(private_cache / toolchain.KERNELS, 0o777)
    with pytest.raises(CompileError, match="not a private directory"):
        toolchain.build(TWICE, ["twice"], ("sm_90",))


def test_device_without_driver_names_what_is_missing() -> None:
    """Here (no NVIDIA driver) opening a device is a CompileError saying so; on a machine
    with a GPU it opens and reports a compute capability."""
    reason = runtime.missing(0)
    if reason is None:
        device = runtime.CudaDevice(0)
        assert device.capability >= (5, 0) and device.name
        device.close()
    else:
        assert "CUDA" in reason and ("driver" in reason or "GPU" in reason)
        with pytest.raises(CompileError, match="CUDA"):
            runtime.CudaDevice(0)
