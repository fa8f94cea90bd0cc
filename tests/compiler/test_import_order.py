"""Registries are explicit: what a table holds does not depend on which module a program
imports first. Each case runs in a fresh interpreter (the only way to import first)."""

from __future__ import annotations

import subprocess
import sys

import pytest

LOWER_A_MATMUL = """
import numpy as np, luminal as lm
from luminal import ops
cx = lm.Graph()
a = cx.tensor((4, 3)).set(np.arange(12, dtype=np.float32).reshape(4, 3))
b = cx.tensor((3, 2)).set(np.ones((3, 2), np.float32))
out = (a @ b).retrieve()
cx.compile(EGraphCompiler(rulesets=("algebra", "structure", "cpu")))
assert any(type(n.op) is ops.Contract for n in cx.nodes.values()), "not lowered"
cx.execute()
assert np.array_equal(out.numpy(), np.arange(12).reshape(4, 3).sum(1, keepdims=True) * [1, 1])
"""

CASES = {
    "the e-graph compiler with the cpu ruleset": (
        "from luminal.compiler.egraph import EGraphCompiler\n" + LOWER_A_MATMUL
    ),
    "the rules package": "import luminal.compiler.rules",
    "a rules module": "import luminal.compiler.rules.algebra",
    "autograd of a lowered graph, no backend imported": (
        "from luminal.compiler.egraph import EGraphCompiler\n"
        + LOWER_A_MATMUL
        + """
import sys
from luminal.training.autograd import gradients
(grad,) = gradients(cx, [a], out.sum())
grad.retrieve()
cx.execute()
assert np.array_equal(grad.numpy(), np.full((4, 3), 2.0, np.float32)), grad.numpy()
assert not any(m.startswith("luminal.backends.cpu") for m in sys.modules)
"""
    ),
}


@pytest.mark.parametrize("name", sorted(CASES))
def test_first_import(name: str) -> None:
    result = subprocess.run(
        [sys.executable, "-c", CASES[name]], capture_output=True, text=True, timeout=120
    )
    assert result.returncode == 0, f"{name}:\n{result.stderr[-2000:]}"
