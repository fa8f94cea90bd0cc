"""What the kernel-IR tests look for in a lowered kernel."""

from __future__ import annotations

from luminal.kernel import ir


def nested_loops(body: tuple[ir.Stmt, ...]) -> list[ir.Loop]:
    """Every loop of `body`, outer before inner, in statement order."""
    found = []
    for stmt in body:
        if isinstance(stmt, ir.Loop):
            found += [stmt, *nested_loops(stmt.body)]
    return found
