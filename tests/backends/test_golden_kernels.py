"""Golden kernel sources ("process replay"): the C generated for the graphs of
`golden_cases` must equal tests/backends/golden/<case>.c byte for byte, so a refactor
shows exactly which kernels it changed.

After an intended change, regenerate and review the diff:

    LUMINAL_ACCEPT_GOLDEN=1 .venv/bin/pytest -p no:xdist tests/backends/test_golden_kernels.py
    git diff tests/backends/golden/

Sources are rendered (no gcc). Two things vary by machine and are normalised: the sgemm
symbol of the BLAS found (`LM_SGEMM`), and so the source hash in kernel names (`<hash>`).
"""

from __future__ import annotations

import os
import re
from pathlib import Path

import pytest

import luminal as lm
from luminal.backends.cpu import toolchain
from luminal.backends.cpu.codegen import PRELUDE
from luminal.backends.cpu.compiler import static_program
from luminal.backends.cpu.runtime import CompiledGraph
from luminal.backends.cpu.tuning import CpuSearchSpace
from tests.backends.golden_cases import CASES

GOLDEN = Path(__file__).parent / "golden"
ACCEPT = os.environ.get("LUMINAL_ACCEPT_GOLDEN") == "1"
HEADER = (
    "/* golden source of tests/backends/golden_cases.py::{name}; accept changes with\n"
    "   LUMINAL_ACCEPT_GOLDEN=1 .venv/bin/pytest tests/backends/test_golden_kernels.py */\n"
)


def _searched(graph: lm.Graph, choice: dict[str, str]) -> CompiledGraph:
    """The program with, at each site whose key starts with a prefix of `choice`, the
    first option starting with that prefix's option (a search's pick, made fixed)."""
    space = CpuSearchSpace(graph, {}, 1)
    config = {}
    for site in space.sites:
        for key_prefix, option_prefix in choice.items():
            if site.key.startswith(key_prefix) and site.key not in config:
                picked = [o for o in site.options if o.startswith(option_prefix)]
                if picked:
                    config[site.key] = picked[0]
    assert len(config) == len(choice), f"no site offers {choice}: {space.site_options()}"
    return space.compiled(config)


def render(name: str) -> str:
    """The golden text of one case: each kernel in run order, then the runners."""
    graph, choice = CASES[name]()
    graph.compile(lm.GenericCompiler())
    if choice:
        from luminal.backends.cpu.compiler import RULESETS
        from luminal.compiler.egraph import EGraphCompiler

        graph.compile(EGraphCompiler(rulesets=RULESETS))
        graph.compile(lm.GenericCompiler())
        compiled = _searched(graph, choice)
    else:
        compiled = static_program(graph)
    parts = [HEADER.format(name=name)]
    for index, segment in enumerate(compiled.segments):
        if segment.function_node is not None:
            parts.append(
                f"/* ---- segment {index}: Python function node {segment.function_node} */\n"
            )
        for kernel in segment.kernels:
            parts.append(f"/* ---- segment {index}: nodes {kernel.nodes} */")
            parts.append(kernel.source)
    parts.append("/* ---- runners */\n" + compiled.runner_source())
    return normalise("\n".join(parts))


def normalise(text: str) -> str:
    """What differs between machines with the same luminal: the BLAS symbol and hence
    the hashes of sources that call it."""
    text = text.replace(toolchain.blas_flags().sgemm + "(", "LM_SGEMM(")
    return re.sub(r"\b(lm_\w+?)_[0-9a-f]{12}(?![0-9a-f])", r"\1_<hash>", text)


def _check(path: Path, text: str) -> None:
    if ACCEPT:
        path.write_text(text)
        return
    assert path.exists(), f"{path.name} missing: run with LUMINAL_ACCEPT_GOLDEN=1 to create it"
    expected = path.read_text()
    assert text == expected, (
        f"generated C differs from {path}; if the change is intended, accept it with "
        "LUMINAL_ACCEPT_GOLDEN=1 and review `git diff tests/backends/golden/`"
    )


@pytest.mark.parametrize("name", sorted(CASES))
def test_kernels_equal_their_golden_source(name: str) -> None:
    text = render(name)
    assert "native" not in text and str(Path.home()) not in text
    _check(GOLDEN / f"{name}.c", text)


def test_prelude_equals_its_golden_source() -> None:
    _check(GOLDEN / "prelude.c", PRELUDE)


def test_every_golden_file_has_a_case() -> None:
    """A renamed or deleted case leaves no stale golden file behind."""
    names = {p.stem for p in GOLDEN.glob("*.c")} - {"prelude"}
    assert names <= set(CASES), f"golden files without a case: {sorted(names - set(CASES))}"


def test_rendering_is_deterministic() -> None:
    """Two renders of one graph are identical (no ids, paths or times leak in)."""
    assert render("conv_backward") == render("conv_backward")
