"""luminal's product entry points (gemm.c, gemv.c) as ctypes functions, for the tests that
call them directly against numpy: they share lm_sgemm's signature."""

from __future__ import annotations

import ctypes
from collections.abc import Callable, Iterator

from luminal.backends.cpu import toolchain

NO_TRANS, TRANS = 111, 112
I64 = ctypes.c_longlong


def product_function(name: str) -> Callable[..., None]:
    """`name` (lm_sgemm, lm_sgemm_rows) from a library that links the support units:
    (ta, tb, m, n, k, a, lda, b, ldb, c, ldc, width, stride)."""
    path = toolchain.build_shared([("probe", "int lm_probe(void) { return 0; }\n")], True)
    function = getattr(toolchain.load(path), name)
    pointer = ctypes.c_void_p
    function.argtypes = [ctypes.c_int, ctypes.c_int, I64, I64, I64, pointer, I64, pointer, I64]
    function.argtypes += [pointer, I64, I64, I64]
    function.restype = None
    return function


def gather_function() -> Callable[..., int]:
    """lm_sgemm_gather: (ta, m, n, k, a, lda, source, axes, c, ldc, width, stride), B's
    columns read through the (size, stride) axes table; returns an allocation fault."""
    path = toolchain.build_shared([("probe", "int lm_probe(void) { return 0; }\n")], True)
    function = toolchain.load(path).lm_sgemm_gather
    function.restype = I64
    pointer = ctypes.c_void_p
    function.argtypes = [ctypes.c_int, I64, I64, I64, pointer, I64, pointer, pointer, pointer]
    function.argtypes += [I64, I64, I64]
    return function


def epilogue_function() -> Callable[..., None]:
    """lm_sgemm_ep: lm_sgemm's arguments, then (row_bias, col_bias, residual, act, scale),
    the pointers null (None) when absent."""
    path = toolchain.build_shared([("probe", "int lm_probe(void) { return 0; }\n")], True)
    function = toolchain.load(path).lm_sgemm_ep
    pointer = ctypes.c_void_p
    function.argtypes = [ctypes.c_int, ctypes.c_int, I64, I64, I64, pointer, I64, pointer, I64]
    function.argtypes += [pointer, I64, I64, I64, pointer, pointer, pointer, ctypes.c_int]
    function.argtypes += [ctypes.c_float]
    function.restype = None
    return function


def thread_setter() -> Iterator[Callable[[int], None]]:
    """A fixture body: sets the OpenMP thread count per case and restores it after."""
    original = toolchain.get_num_threads().openmp
    yield toolchain.set_num_threads
    toolchain.set_num_threads(original)
