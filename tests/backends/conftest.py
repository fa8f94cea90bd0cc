"""Fixtures of the tests that call luminal's product entry points directly (gemm_calls)."""

from __future__ import annotations

from collections.abc import Callable, Iterator

import pytest

from tests.backends.gemm_calls import product_function, thread_setter


@pytest.fixture(scope="module")
def sgemm() -> Callable[..., None]:
    """lm_sgemm (gemm.c) as a ctypes function."""
    return product_function("lm_sgemm")


@pytest.fixture
def threads() -> Iterator[Callable[[int], None]]:
    """Sets the thread count per case; restores it after."""
    yield from thread_setter()
