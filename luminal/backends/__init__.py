"""Backends: lower a compiled graph to kernels for one kind of hardware and run them.

Nothing in the layers above imports a backend; users and this registry do. `BACKENDS`
is the one place a backend is listed (a name and the module that defines it, imported
only when asked for), so what exists never depends on what happened to be imported:

    lm.backends.available()          # ["cpu"]: the backends this machine can run
    lm.backends.get("cpu")           # the Backend: capabilities, rulesets, device id, ...
    lm.backends.compiler("cpu")      # a compiler for it (options pass through)
"""

from __future__ import annotations

import importlib
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

from luminal.dtype import DType
from luminal.errors import CompileError

# name -> module defining `BACKEND`; a new backend adds its row here
BACKENDS: dict[str, str] = {
    "cpu": "luminal.backends.cpu.backend",
    "opencl": "luminal.backends.opencl.backend",
    "cuda": "luminal.backends.cuda.backend",
    "metal": "luminal.backends.metal.backend",
}


@dataclass(frozen=True)
class Capabilities:
    """What a backend runs, so callers can choose without trying: dtypes it computes,
    whether it calls a BLAS library or generates matrix products, how it runs in
    parallel, its vector widths (bits), and whether Python functions and user C kernels
    may sit between its kernels."""

    dtypes: tuple[DType, ...]
    blas: bool
    generated_matmul: bool
    parallelism: str
    vector_bits: tuple[int, ...]
    python_functions: bool
    custom_kernels: bool


class Backend(Protocol):
    """A backend: the parts the compiler pipeline and the search need from it.

    `rulesets` are the e-graph rulesets it compiles with (names in
    `luminal.compiler.rules.RULESETS`); `render(graph)` turns a graph after the e-graph
    into its kernels, not yet built; `toolchain` builds them (a module or object with
    `build_shared`); `runtime` is the compiled-graph type that runs them;
    `search_options` the providers of alternatives for a kernel site in measured search.
    """

    name: str
    rulesets: tuple[str, ...]
    render: Callable[[Any], Any]
    toolchain: Any
    runtime: type
    search_options: Sequence[Callable[..., list]]

    def is_available(self) -> bool:
        """Whether this machine can build and run its kernels."""
        ...

    def capabilities(self) -> Capabilities: ...

    def device_id(self) -> str:
        """What identifies the device for cached search results (model, threads)."""
        ...

    def compiler(self, **options: Any) -> Any:
        """A compiler for this backend (`graph.compile(...)`)."""
        ...


def get(name: str) -> Backend:
    """The backend named `name` (CompileError naming the known ones otherwise)."""
    module = BACKENDS.get(name)
    if module is None:
        raise CompileError(f"unknown backend {name!r}; known: {sorted(BACKENDS)}")
    return importlib.import_module(module).BACKEND


def available() -> list[str]:
    """Names of the backends this machine runs, in registry order."""
    return [name for name in BACKENDS if get(name).is_available()]


def compiler(target: Any = "cpu", **options: Any) -> Any:
    """A compiler from a backend name (options go to its compiler), or `target` itself
    when it already is a compiler (anything with `compile`)."""
    if isinstance(target, str):
        return get(target).compiler(**options)
    if options:
        raise CompileError("backends.compiler: options apply to a backend name, not a compiler")
    if not hasattr(target, "compile"):
        raise CompileError(f"expected a backend name or a compiler, got {target!r}")
    return target
