"""The compiler protocol and the combinators that run compilers.

A compiler is any object with `compile(graph)`; it rewrites the graph in place and may
return something for the user (gradients, a report). `Graph.compile` runs tuples of
compilers in order.
"""

from __future__ import annotations

import time
from typing import Any, Protocol, runtime_checkable

from luminal.graph import Graph


@runtime_checkable
class Compiler(Protocol):
    def compile(self, graph: Graph) -> Any: ...


class Looped:
    """Run a compiler (or tuple of compilers) until the graph stops changing."""

    def __init__(self, compiler: Any, max_iterations: int = 32) -> None:
        self.compiler = compiler
        self.max_iterations = max_iterations

    def compile(self, graph: Graph) -> Any:
        result = None
        for _ in range(self.max_iterations):
            before = graph.nodes.version
            result = graph.compile(self.compiler)
            if graph.nodes.version == before:
                break
        return result


class Timed:
    """Run a compiler and report how long it took (printed, and kept in `seconds`)."""

    def __init__(self, compiler: Any, label: str | None = None, quiet: bool = False) -> None:
        self.compiler = compiler
        self.label = label or type(compiler).__name__
        self.quiet = quiet
        self.seconds = 0.0

    def compile(self, graph: Graph) -> Any:
        start = time.perf_counter()
        result = graph.compile(self.compiler)
        self.seconds = time.perf_counter() - start
        if not self.quiet:
            print(f"{self.label}: {self.seconds * 1e3:.1f} ms ({graph.num_nodes} nodes)")
        return result
