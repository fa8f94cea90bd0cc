"""`lm.MetalCompiler().render(graph)` off Apple hardware: every golden graph gives a
complete Metal library (each kernel `kernel void`, its buffer bindings numbered in
order and matching its arguments, threadgroup memory declared where it is used), which
g++ type-checks against a stand-in `metal_stdlib`; building or compiling names what is
missing."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

import luminal as lm
from luminal.backends.metal import runtime
from luminal.backends.metal.render import PRELUDE, MetalRenderer
from luminal.dtype import DType
from luminal.kernel import ir
from luminal.kernel.gpu import Launch
from luminal.kernel.indexing import loop_index
from luminal.shape.expr import sym
from tests.backends.golden_cases import CASES

SHIM = Path(__file__).parent / "shim"
KERNEL = re.compile(r"^kernel void (\w+)\((.*)\) \{$", re.MULTILINE)
BINDING = re.compile(r"\[\[buffer\((\d+)\)\]\]")


def _kernels(source: str) -> list[tuple[str, list[str]]]:
    return [(name, params.split(", ")) for name, params in KERNEL.findall(source)]


@pytest.fixture(scope="module")
def sources() -> dict[str, str]:
    return {name: lm.MetalCompiler().render(build()[0]) for name, build in sorted(CASES.items())}


def test_every_golden_graph_renders_complete_kernels(sources: dict[str, str]) -> None:
    for name, source in sources.items():
        kernels = _kernels(source)
        assert kernels, name
        assert source.count("kernel void ") == len(kernels) == len({k for k, _ in kernels})
        for kernel, params in kernels:
            bound = [p for p in params if "[[buffer(" in p]
            numbers = [int(BINDING.search(p).group(1)) for p in bound]
            assert numbers == list(range(len(bound))), (name, kernel, params)
            # every argument is a bound buffer or constant, or the work-item's position
            positions = [p for p in params if "[[thread_position" in p]
            assert len(bound) + len(positions) == len(params), (name, kernel)
            buffers = [p for p in bound if re.match(r"device (const )?\w+\* b\d+ ", p)]
            assert [p.split("* b")[1].split()[0] for p in buffers] == [
                str(i) for i in range(len(buffers))
            ]
            used = {int(i) for i in re.findall(r"\bb(\d+)\[", _body(source, kernel))}
            assert used <= set(range(len(buffers))), (name, kernel)


def _body(source: str, kernel: str) -> str:
    start = source.index(f"kernel void {kernel}(")
    end = source.find("\nkernel void ", start + 1)
    return source[start : end if end > 0 else len(source)]


def test_golden_sources_type_check_against_a_metal_stand_in(
    sources: dict[str, str], tmp_path: Path
) -> None:
    """One g++ run over every library (each in its own namespace after one prelude):
    undeclared names, wrong types or argument counts fail it."""
    parts = [PRELUDE]
    for index, source in enumerate(sources.values()):
        assert source.startswith(PRELUDE)
        parts.append(f"namespace case{index} {{\n{source[len(PRELUDE) :]}\n}}\n")
    path = tmp_path / "all.metal"
    path.write_text("".join(parts))
    command = ["g++", "-std=c++17", "-fsyntax-only", "-Wno-attributes", f"-I{SHIM}"]
    done = subprocess.run([*command, "-x", "c++", str(path)], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr[:3000]


def test_threadgroup_memory_is_declared_at_the_top_when_staged(tmp_path: Path) -> None:
    """A kernel that stages a row in threadgroup memory (a work-group sum): the array is
    declared at function scope, the barrier is Metal's, the ids are the thread's."""
    f32 = DType.float32
    lane = loop_index("l0_", sym(64))
    body = (
        ir.Loop(
            "l0_",
            sym(64),
            "gpu_local",
            (
                ir.LocalMemory("stage", f32, sym(64)),
                ir.Store("stage", lane, ir.Load(1, lane, f32), f32),
                ir.Barrier(),
                ir.Store(0, lane, ir.Load("stage", 63 - lane, f32), f32),
            ),
        ),
    )
    kernel = ir.Kernel("staged", (ir.Param(2, f32, output=True), ir.Param(1, f32)), (), body, (2,))
    names, source = MetalRenderer().program([Launch(kernel, (sym(64),), (64,))])
    head = source.index(f"kernel void {names[0]}(")
    opening = source.index("{", head)
    assert source[opening:].splitlines()[1] == "    threadgroup float stage[64];"
    assert "threadgroup_barrier(mem_flags::mem_threadgroup);" in source
    assert "const long l0_ = (long)lm_lid.x;" in source
    assert "stage[l0_] = b1[l0_];" in source and "b0[l0_] = stage[(-l0_ + 63)];" in source
    path = tmp_path / "staged.metal"
    path.write_text(source)
    command = ["g++", "-std=c++17", "-fsyntax-only", "-Wno-attributes", f"-I{SHIM}", "-x", "c++"]
    done = subprocess.run([*command, str(path)], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr[:2000]


def test_build_and_compile_off_apple_name_what_is_missing() -> None:
    cx = lm.Graph()
    x = cx.tensor((4,)).set(np.arange(4, dtype=np.float32))
    y = (x * 2.0).retrieve()
    reason = runtime.missing()
    if reason is None:  # a Mac with a Metal GPU: both work
        lm.MetalCompiler().build(cx)
        cx.compile(lm.MetalCompiler())
    else:
        assert "Metal" in reason and ("macOS" in reason or "pyobjc" in reason)
        assert sys.platform == "darwin" or "macOS" in reason
        with pytest.raises(lm.CompileError, match="Metal"):
            lm.MetalCompiler().build(cx)
        with pytest.raises(lm.CompileError, match="Metal"):
            cx.compile(lm.MetalCompiler())
    cx.execute()
    np.testing.assert_array_equal(y.numpy(), np.arange(4, dtype=np.float32) * 2)
