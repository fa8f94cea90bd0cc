"""Verification never leaves an unchecked program installed (issue 11, item 8), and custom
C kernels: the first definition is the kernel, an unwritten output is caught (item 9)."""

from __future__ import annotations

import numpy as np
import pytest

import luminal as lm
from luminal.backends.cpu import verify
from luminal.errors import CompileError

DATA = np.linspace(-1, 1, 6, dtype=np.float32).reshape(2, 3)


def _graph() -> tuple[lm.Graph, lm.GraphTensor, lm.GraphTensor]:
    cx = lm.Graph()
    x = cx.tensor((2, 3)).set(DATA)
    out = (x.exp() * 2.0).sum(1).retrieve()
    return cx, x, out


def _expected(x: np.ndarray) -> np.ndarray:
    return (np.exp(x) * 2.0).sum(1)


def _interrupt(*args: object) -> None:
    raise KeyboardInterrupt


def _mismatch(*args: object) -> str:
    return "wrong: planted mismatch"


@pytest.mark.parametrize(
    ("fault", "error"), [(_interrupt, KeyboardInterrupt), (_mismatch, CompileError)]
)
@pytest.mark.parametrize("compiled_before", [False, True], ids=["reference", "compiled"])
def test_failed_verification_leaves_the_graph_as_before(
    monkeypatch: pytest.MonkeyPatch, fault: object, error: type, compiled_before: bool
):
    """An interrupt or a mismatch after the new program ran on the graph: the graph keeps
    its previous runtime (the reference one, or the earlier compiled program) and its
    outputs, runs correctly with new data, and compiles again afterwards."""
    cx, x, out = _graph()
    if compiled_before:
        cx.compile(lm.CPUCompiler())
    cx.execute()
    before = (cx.compiled, cx.num_nodes, dict(cx.forward))
    monkeypatch.setattr(verify, "check_outputs", fault)
    with pytest.raises(error):
        cx.compile(lm.CPUCompiler())
    assert (cx.compiled, cx.num_nodes, dict(cx.forward)) == before
    np.testing.assert_allclose(out.numpy(), _expected(DATA), rtol=1e-5)
    x.set(DATA * 3)
    cx.execute()
    np.testing.assert_allclose(out.numpy(), _expected(DATA * 3), rtol=1e-5)
    monkeypatch.undo()
    compiled = cx.compile(lm.CPUCompiler())
    assert cx.compiled is compiled
    cx.execute()
    np.testing.assert_allclose(out.numpy(), _expected(DATA * 3), rtol=1e-5)


DOUBLE_WITH_PROTOTYPE = """
void double_it(float* p, long long n);           /* a prototype, not the kernel */
static void clear(float* p, long long n) {       /* a static helper, not the kernel */
    for (long long i = 0; i < n; i++) p[i] = 0.0f;
}
// void commented_out(float* out) { }
void copy_doubled(float* out, const float* in, const long long* numel) {
    clear(out, numel[0]);
    for (long long i = 0; i < numel[0]; i++) out[i] = in[i];
    double_it(out, numel[0]);
}
void double_it(float* p, long long n) { for (long long i = 0; i < n; i++) p[i] *= 2.0f; }
"""


def test_custom_kernel_is_the_first_definition_not_a_prototype():
    cx = lm.Graph()
    x = cx.tensor((2, 3)).set(DATA)
    out = lm.custom_kernel([x], DOUBLE_WITH_PROTOTYPE, (2, 3)).retrieve()
    cx.execute()
    np.testing.assert_allclose(out.numpy(), DATA * 2)
    cx.compile(lm.CPUCompiler())
    x.set(DATA + 1)
    cx.execute()
    np.testing.assert_allclose(out.numpy(), (DATA + 1) * 2)


POSITIVE_ONLY = """
void positive_only(float* out, const float* in, const long long* numel) {
    for (long long i = 0; i < numel[0]; i++)
        if (in[i] > 0.0f) out[i] = in[i];              /* forgets the other elements */
}
"""


def test_custom_kernel_leaving_output_unwritten_is_caught():
    """The reference runtime (and so the check at compile) names the kernel and how many
    elements it skipped; with inputs it writes fully, it runs and compiles."""
    cx = lm.Graph()
    x = cx.tensor((2, 3)).set(DATA)
    out = (lm.custom_kernel([x], POSITIVE_ONLY, (2, 3)) + 1.0).retrieve()
    unwritten = r"custom kernel 'positive_only' left 3 of the 6 elements .* unwritten"
    with pytest.raises(lm.ExecutionError, match=unwritten):
        cx.execute()
    with pytest.raises(lm.ExecutionError, match=unwritten):
        cx.compile(lm.CPUCompiler())
    assert cx.compiled is None
    positive = np.abs(DATA) + 0.5
    x.set(positive)
    cx.execute()
    np.testing.assert_allclose(out.numpy(), positive + 1)
    cx.compile(lm.CPUCompiler())
    cx.execute()
    np.testing.assert_allclose(out.numpy(), positive + 1)


def test_custom_kernel_writing_the_fill_pattern_is_not_flagged():
    """A value that happens to equal the first fill pattern is written, not missing."""
    pattern = np.frombuffer(bytes([0xA5] * 4), np.float32)[0]
    cx = lm.Graph()
    x = cx.tensor((3,)).set(np.array([pattern, 1.0, pattern], np.float32))
    source = (
        "void copy(float* out, const float* in, const long long* numel) {"
        " for (long long i = 0; i < numel[0]; i++) out[i] = in[i]; }"
    )
    out = lm.custom_kernel([x], source, (3,)).retrieve()
    cx.execute()
    np.testing.assert_array_equal(out.numpy(), [pattern, 1.0, pattern])
