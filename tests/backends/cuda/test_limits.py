"""CUDA's launch limits without a GPU: a grid holds at most 65535 blocks on y and z, so
work-item loops on those axes are grid-stride loops and the runtime caps the grid there
(x past 2^31 - 1 blocks is an ExecutionError); a block over 1024 threads (or 64 on z) is
a CompileError when the module is rendered; the tensor-core kernel loops over M tiles and
batches past the cap. (Real launches of such sizes: test_gpu.py.)"""

from __future__ import annotations

import re

import pytest

import luminal as lm
from luminal.backends import launch_limits
from luminal.backends.cuda.render import CUDARenderer
from luminal.dtype import DType
from luminal.kernel import ir
from luminal.kernel.gpu import Launch
from luminal.shape.expr import sym
from tests.backends.cuda.test_runtime import device  # noqa: F401 - the driver stand-in


def _elementwise(shape: tuple) -> lm.Graph:
    cx = lm.Graph()
    x = cx.tensor(shape)
    (x * 2.0 + 1.0).retrieve()
    return cx


def test_outer_axes_are_grid_stride_loops_and_axis_zero_is_guarded() -> None:
    source = lm.CUDACompiler().render(_elementwise((70000, 4, 8)))
    z = re.search(r"for \(long long (\w+) = \(\(long long\)blockIdx\.z \* blockDim\.z \+ "
                  r"threadIdx\.z\); \1 < (\d+); \1 \+= \(long long\)gridDim\.z \* blockDim\.z\)",
                  source)  # fmt: skip
    y = re.search(r"\+= \(long long\)gridDim\.y \* blockDim\.y\)", source)
    assert z is not None and z.group(2) == "70000" and y is not None
    assert re.search(r"const long long \w+ = \(\(long long\)blockIdx\.x \* blockDim\.x", source)
    assert "gridDim.x" not in source  # axis 0 is one work-item per index
    lm.CUDACompiler(arch=("sm_80",)).build(_elementwise((70000, 4, 8)))  # ptxas accepts it


def test_the_grid_is_capped_on_y_and_z(device) -> None:  # noqa: F811 - the fixture
    cuda, driver = device
    bound = cuda.bind("k", [])
    cuda.launch(bound, (64, 70000, 2**20), (64, 1, 1))
    (call,) = driver.launches
    assert call[1:4] == (1, 65535, 65535) and call[4:7] == (64, 1, 1)
    assert launch_limits.grid("k", (128 * 40000, 3), (128, 1)) == (40000, 3, 1)
    with pytest.raises(lm.ExecutionError, match="kernel 'k' needs 2147483648 blocks on x"):
        cuda.launch(bound, (2**31 * 64,), (64,))


def _launch(local: tuple[int, ...]) -> Launch:
    f32 = DType.float32
    kernel = ir.Kernel(
        "wide",
        (ir.Param(1, f32, output=True),),
        (),
        (ir.Store(0, sym(0), ir.Const(1.0, f32), f32),),
        (1,),
    )
    return Launch(kernel, tuple(sym(size) for size in local), local)


@pytest.mark.parametrize("local", [(2048,), (32, 32, 2), (1, 1, 128)])
def test_a_block_over_the_limit_is_a_compile_error(local: tuple[int, ...]) -> None:
    with pytest.raises(lm.CompileError, match=r"kernel 'wide' asks for blocks of .* 1024 threads"):
        CUDARenderer().program([_launch(local)])
    CUDARenderer().program([_launch((1024,))])  # the largest block is fine
    CUDARenderer().program([_launch((16, 16, 4))])


def test_tensor_core_kernel_loops_past_the_grid_cap() -> None:
    cx = lm.Graph()
    a, b = cx.tensor((70000, 16, 16), dtype=lm.float16), cx.tensor((16, 16), dtype=lm.float16)
    (a @ b).retrieve()
    source = lm.CUDACompiler().render(cx)
    assert "lm_wmma_float16(b0, b1, b2, numel);" in source  # not refused: 70000 batches
    assert "for (long long z = blockIdx.z; z < p[3]; z += gridDim.z)" in source
    assert "m0 += (long long)gridDim.y * 32" in source
