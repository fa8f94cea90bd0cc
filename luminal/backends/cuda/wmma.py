"""Tensor-core matrix products for float16 and bfloat16 contractions (CUDA WMMA).

`special_kernel` is the CUDA backend's hook into the shared GPU lowering
(`luminal.kernel.gpu.lower_gpu(special=...)`): for a `Contract` whose inputs and output
are float16 (or bfloat16) buffers read through plain strided views, it returns one launch
of `lm_wmma_<dtype>`, a kernel that multiplies 32x32 output tiles with four warps, 16x16x16
`mma_sync` steps accumulating in float32 (as the reference runtime computes half
precision), and rounds once when it stores. Anything else (a masked view, axes that do
not merge into M, N, K and batch, a float32 product) gets the default loop kernel.

Operands are staged through shared memory element by element with their strides, zero
padded past M, N and K, so any layout (transposed, batched, unaligned sizes) takes the
same path. A grid holds at most 65535 blocks on y and z: the runtime caps the grid and
each block loops over the M tiles and batches past it. The problem's sizes, offsets and
strides are expressions of the dims, passed as the kernel's `numel` array (`ir.Call`'s
counts), in the order of `PROBLEM`.
"""

from __future__ import annotations

from dataclasses import dataclass

from luminal import ops
from luminal.dtype import DType
from luminal.graph import Edge, Graph, Node
from luminal.kernel import ir
from luminal.kernel.gpu import Launch
from luminal.schedule.contraction import classify, merged_axes
from luminal.shape.expr import Expr, sym
from luminal.shape.tracker import contiguous_strides

TILE = 32  # output tile per block (2x2 warps of 16x16)
THREADS = 128
NEEDS = {DType.float16: 70, DType.bfloat16: 80}  # oldest architecture with WMMA for it
STORAGE = {
    DType.float16: ("half", "__half2float", "__float2half_rn"),
    DType.bfloat16: ("__nv_bfloat16", "__bfloat162float", "__float2bfloat16_rn"),
}
PROBLEM = (
    "M", "N", "K", "batch",
    "a_offset", "a_m", "a_k", "a_batch",
    "b_offset", "b_k", "b_n", "b_batch",
    "c_m", "c_n", "c_batch",
)  # fmt: skip

SOURCE = r"""#include <cuda_bf16.h>
#include <mma.h>
/* C = A B on tensor cores: one 32x32 tile of C per block of 4 warps, K in steps of 16 */
__device__ void lm_wmma_{name}(void* c_out, const void* a_in, const void* b_in,
                              const long long* p) {{
    using namespace nvcuda;
    typedef {element} T;
    const T* a = (const T*)a_in;
    const T* b = (const T*)b_in;
    T* c = (T*)c_out;
    const long long M = p[0], N = p[1], K = p[2];
    const long long n0 = (long long)blockIdx.x * 32;
    __shared__ __align__(32) T a_tile[32 * 24];   /* 32 rows of 16, ldm 24 */
    __shared__ __align__(32) T b_tile[16 * 40];   /* 16 rows of 32, ldm 40 */
    __shared__ __align__(32) float c_tile[32 * 36]; /* 32 rows of 32, ldm 36 */
    const int t = threadIdx.x, warp = t / 32;
    const int wm = (warp / 2) * 16, wn = (warp % 2) * 16;
    wmma::fragment<wmma::matrix_a, 16, 16, 16, T, wmma::row_major> fa;
    wmma::fragment<wmma::matrix_b, 16, 16, 16, T, wmma::row_major> fb;
    wmma::fragment<wmma::accumulator, 16, 16, 16, float> acc;
    const T zero = {from_float}(0.0f);
    /* a grid holds at most 65535 blocks on y and z: the block loops over the rest */
    for (long long z = blockIdx.z; z < p[3]; z += gridDim.z)
    for (long long m0 = (long long)blockIdx.y * 32; m0 < M; m0 += (long long)gridDim.y * 32) {{
    const long long a0 = p[4] + z * p[7], b0 = p[8] + z * p[11], c0 = z * p[14];
    wmma::fill_fragment(acc, 0.0f);
    for (long long k0 = 0; k0 < K; k0 += 16) {{
        for (int e = t; e < 32 * 16; e += 128) {{
            const long long m = m0 + e / 16, k = k0 + e % 16;
            a_tile[(e / 16) * 24 + e % 16] =
                (m < M && k < K) ? a[a0 + m * p[5] + k * p[6]] : zero;
        }}
        for (int e = t; e < 16 * 32; e += 128) {{
            const long long k = k0 + e / 32, n = n0 + e % 32;
            b_tile[(e / 32) * 40 + e % 32] =
                (k < K && n < N) ? b[b0 + k * p[9] + n * p[10]] : zero;
        }}
        __syncthreads();
        wmma::load_matrix_sync(fa, a_tile + wm * 24, 24);
        wmma::load_matrix_sync(fb, b_tile + wn, 40);
        wmma::mma_sync(acc, fa, fb, acc);
        __syncthreads();
    }}
    wmma::store_matrix_sync(c_tile + wm * 36 + wn, acc, 36, wmma::mem_row_major);
    __syncthreads();
    for (int e = t; e < 32 * 32; e += 128) {{
        const long long m = m0 + e / 32, n = n0 + e % 32;
        if (m < M && n < N)
            c[c0 + m * p[12] + n * p[13]] = {from_float}(c_tile[(e / 32) * 36 + e % 32]);
    }}
    __syncthreads(); /* c_tile is read before the next tile overwrites it */
    }}
}}
"""


@dataclass(frozen=True)
class Operand:
    """Where an operand's elements lie: node, offset, stride per class of axes."""

    node: int
    offset: Expr
    strides: dict[str, Expr]


def special_kernel(
    graph: Graph, node: Node, materialised: set[int], dims: list[str], oldest: int = 80
) -> Launch | None:
    """The tensor-core launch for `node`, or None when the default kernel should run
    (also when `oldest`, the oldest architecture built for as 10 * major + minor, lacks
    WMMA for the dtype: float16 needs sm_70, bfloat16 sm_80)."""
    if type(node.op) not in (ops.Contract, ops.ContractSum) or node.dtype not in STORAGE:
        return None
    if oldest < NEEDS[node.dtype]:
        return None
    a_edge, b_edge = node.inputs
    if any(not _readable(graph, e, node.dtype, materialised) for e in (a_edge, b_edge)):
        return None
    shape = tuple(a_edge.view.shape)
    axes = classify(shape, node.op.summed, (a_edge.view, b_edge.view))
    if axes is None or not (axes.m and axes.n):
        return None  # a dot product or a matrix-vector product: the loop kernel
    out_axes = [d for d in range(len(shape)) if d not in node.op.summed]
    out_strides = dict(zip(out_axes, contiguous_strides(node.shape), strict=True))
    groups = {
        "a": {"m": axes.m, "k": axes.k, "batch": axes.batch},
        "b": {"k": axes.k, "n": axes.n, "batch": axes.batch},
        "c": {"m": axes.m, "n": axes.n, "batch": axes.batch},
    }
    strides = {"a": a_edge.view.strides, "b": b_edge.view.strides, "c": out_strides}
    sizes: dict[str, Expr] = {}
    merged: dict[str, dict[str, Expr]] = {}
    for operand, classes in groups.items():
        merged[operand] = {}
        for name, members in classes.items():
            group = merged_axes(members, shape, strides[operand])
            if group is None:
                return None
            sizes[name], merged[operand][name] = group
    problem = {
        "M": sizes["m"], "N": sizes["n"], "K": sizes["k"], "batch": sizes["batch"],
        "a_offset": a_edge.view.offset, "a_m": merged["a"]["m"], "a_k": merged["a"]["k"],
        "a_batch": merged["a"]["batch"],
        "b_offset": b_edge.view.offset, "b_k": merged["b"]["k"], "b_n": merged["b"]["n"],
        "b_batch": merged["b"]["batch"],
        "c_m": merged["c"]["m"], "c_n": merged["c"]["n"], "c_batch": merged["c"]["batch"],
    }  # fmt: skip
    counts = tuple(sym(problem[name]) for name in PROBLEM)
    used = set().union(*(c.variables() for c in counts))
    name = f"lm_wmma_{node.dtype.value}"
    kernel = ir.Kernel(
        label=f"wmma_{node.dtype.value}",
        params=(
            ir.Param(node.id, node.dtype, output=True),
            ir.Param(a_edge.source, node.dtype),
            ir.Param(b_edge.source, node.dtype),
        ),
        dims=tuple(d for d in dims if d in used),
        body=(ir.Call(name, (0, 1, 2), counts),),
        nodes=(node.id,),
        prelude=source(node.dtype),
    )
    global_size = (
        sizes["n"].ceildiv(TILE) * THREADS,
        sizes["m"].ceildiv(TILE),
        sizes["batch"],
    )
    return Launch(kernel, global_size, (THREADS, 1, 1))


def source(dtype: DType) -> str:
    """The device function `lm_wmma_<dtype>` (called by the launch's kernel)."""
    element, _, from_float = STORAGE[dtype]
    return SOURCE.format(name=dtype.value, element=element, from_float=from_float)


def _readable(graph: Graph, edge: Edge, dtype: DType, materialised: set[int]) -> bool:
    """The operand is a buffer of `dtype` read through an unmasked strided view."""
    source_node = graph.nodes[edge.source]
    buffered = edge.source in materialised or isinstance(source_node.op, ops.Input)
    return buffered and source_node.dtype == dtype and edge.view.mask is None
