"""Packed-weight ops as graph nodes: `quant_matmul` and `dequantize_rows`.

Both are `lm.custom_kernel` nodes: C source from luminal/quant/kernels (common.h plus
the format's file, plus a small exported entry with the shapes baked in) for the CPU
backend, and a numpy `reference` (luminal/quant/reference.py) that the reference
runtime runs instead, so it stays the oracle. The packed bytes are a graph input of
int32 words (bool bytes when a row is not whole words; `BlockFormat.storage`), shape
(rows, row words); C reads them as bytes.
"""

from __future__ import annotations

import functools
import hashlib
from importlib import resources

from luminal.custom import custom_kernel
from luminal.dtype import DType
from luminal.errors import DTypeError, ShapeError
from luminal.quant.formats import BlockFormat, block_format
from luminal.quant.reference import PREFILL_ROWS, PackedRows, QuantMatmul
from luminal.tensor import GraphTensor


@functools.cache
def kernel_file(name: str) -> str:
    return resources.files("luminal.quant").joinpath("kernels", name).read_text()


def format_source(fmt: BlockFormat) -> str:
    """common.h and the format's kernels, as one translation unit's prelude."""
    return kernel_file("common.h") + "\n" + kernel_file(f"{fmt.name.lower()}.c")


def _entry(fmt: BlockFormat, what: str, signature: str, body: str) -> tuple[str, str]:
    """(function name, full source) of an exported entry; the name carries a hash of the
    source, and the symbol is weak, so kernels of one library may repeat it."""
    code = f"{signature} {{\n    {body}\n}}\n"
    digest = hashlib.sha256((format_source(fmt) + code).encode()).hexdigest()[:10]
    name = f"lq_{fmt.name.lower()}_{what}_{digest}"
    return name, f"{format_source(fmt)}\n__attribute__((weak)) " + code.replace("NAME", name)


SIXTEEN_BIT = ("q8_0", "q4_0", "q4_k")  # formats with a 16-bit integer decode kernel
TILED = ("q8_0", "q4_0")  # formats whose prefill with 8-bit activations is integer (lq_tile)


def matmul_source(
    fmt: BlockFormat, n: int, k: int, prefill_rows: int, bits: int
) -> tuple[str, str]:
    f = fmt.name.lower()
    return _entry(
        fmt,
        f"matmul_a{bits}_{n}x{k}",
        f"void NAME(float* out, const float* x, const {_c_type(fmt, k)}* w, "
        "const long long* numel)",
        f"lq_matmul(out, x, (const uint8_t*)w, numel[1] / {k}, {n}, {k}, {fmt.row_bytes(k)}LL, "
        f"{prefill_rows}LL, {bits}, lq_dot_{f}, lq_fdot_{f}, lq_dequant_{f}, "
        f"{f'lq_repack_{f}' if f in TILED else 'NULL'});",
    )


def _activation_bits(fmt: BlockFormat, quantized_activations: bool, bits: int | None) -> int:
    """The decode path's activation precision: `bits` if given (8, 16 or 32), else 8 for
    llama.cpp's `quantized_activations`, else 16 where a format has a 16-bit integer
    kernel (Q8_0, Q4_0, Q4_K) and 32 (float FMA) for the others (Q6_K)."""
    if bits is None:
        sixteen = fmt.name.lower() in SIXTEEN_BIT
        bits = 8 if quantized_activations else 16 if sixteen else 32
    if bits not in (8, 16, 32) or (bits == 16 and fmt.name.lower() not in SIXTEEN_BIT):
        raise DTypeError(
            f"quant_matmul({fmt.name}): activation_bits must be 8, 32 or, for "
            f"{', '.join(f.upper() for f in SIXTEEN_BIT)}, 16; got {bits}"
        )
    return bits


def rows_source(fmt: BlockFormat, k: int) -> tuple[str, str]:
    return _entry(
        fmt,
        f"rows_{k}",
        f"void NAME(float* out, const {_c_type(fmt, k)}* rows, const long long* numel)",
        f"lq_dequant_rows(out, (const uint8_t*)rows, numel[0] / {k}, {k}, {fmt.row_bytes(k)}LL, "
        f"lq_dequant_{fmt.name.lower()});",
    )


def _c_type(fmt: BlockFormat, k: int) -> str:
    return "int" if fmt.storage(k)[0] == "int32" else "unsigned char"


def _check_packed(what: str, packed: GraphTensor, fmt: BlockFormat, k: int) -> None:
    dtype, width = fmt.storage(k)
    if packed.dtype != DType(dtype) or packed.ndim < 1 or packed.shape[-1] != width:
        raise ShapeError(
            f"{what}: packed {fmt.name} rows of {k} values are {dtype} (..., {width}), got "
            f"{packed.dtype.value} {packed._shape_text()}"
        )


def quant_matmul(
    x: GraphTensor,
    packed: GraphTensor,
    kind: str,
    quantized_activations: bool = False,
    prefill_rows: int = PREFILL_ROWS,
    activation_bits: int | None = None,
) -> GraphTensor:
    """x (..., k) @ W.T with W (n, k) given as packed `kind` blocks: float32 (..., n).
    `prefill_rows` or more activation rows: with 8-bit activations, Q8_0 and Q4_0
    (`TILED`) round them once and multiply tiles of rows x 16 repacked weight rows with
    integer dot products (llama.cpp's prefill); otherwise W is dequantised in panels and
    multiplied in float32.
    Fewer (decode): W is unpacked in registers against activations of
    `activation_bits` (default: `_activation_bits`): 32 is float FMA; 16 rounds activations
    to two 8-bit levels per block of 32 (within max|x| / 32512) for integer dot products;
    8 (`quantized_activations`, llama.cpp's Q8) to one. Integer activations are a step
    function of the input: a float difference of one ulp upstream can flip a rounding
    and move an output by ~1/32512 (16 bits) or ~1/127 (8 bits) of a block's largest
    term: far inside CPUCompiler's check for 16 bits; for 8 the check runs the node's
    reference on the compiled program's own x (`QuantMatmul.step_function`)."""
    fmt = block_format(kind)
    n, k = int(packed.shape[0]), int(x.shape[-1])
    what = f"quant_matmul({fmt.name}, n={n}, k={k})"
    _check_packed(what, packed, fmt, k)
    if packed.ndim != 2:
        raise ShapeError(f"{what}: packed weights must be 2-D, got {packed._shape_text()}")
    if not x.dtype.is_float:
        raise DTypeError(f"{what}: activations must be float, got {x.dtype.value}")
    bits = _activation_bits(fmt, quantized_activations, activation_bits)
    x = x.cast("float32") if x.dtype != DType.float32 else x
    name, source = matmul_source(fmt, n, k, prefill_rows, bits)
    prefill_bits = 8 if bits == 8 and fmt.name.lower() in TILED else 32
    reference = QuantMatmul(fmt.name.lower(), n, k, bits, prefill_rows, prefill_bits)
    shape = (*x.shape[:-1], n)
    return custom_kernel([x, packed], source, shape, name=name, reference=reference)


def dequantize_rows(rows: GraphTensor, kind: str, k: int) -> GraphTensor:
    """Packed rows (..., row_bytes) -> float32 (..., k), e.g. embedding rows gathered
    from a packed table."""
    fmt = block_format(kind)
    _check_packed(f"dequantize_rows({fmt.name}, k={k})", rows, fmt, k)
    name, source = rows_source(fmt, k)
    shape = (*rows.shape[:-1], k)
    return custom_kernel(
        [rows], source, shape, name=name, reference=PackedRows(fmt.name.lower(), k)
    )
