"""The runnable examples: each main() runs with small arguments and prints what it promises;
`python -m luminal.examples.<name> --help` works for every example."""

from __future__ import annotations

import re
import subprocess
import sys

import pytest

from luminal.examples import demo, llama_generate, mlp_attention, sentence_similarity

FOOD, BREAD, MOVIE = (
    "A man is eating food.",
    "A man is eating a piece of bread.",
    "The new movie is awesome.",
)
EXAMPLES = ("demo", "mlp_attention", "sentence_similarity", "llama_generate")


def similarity_rows(text: str, n: int) -> list[list[float]]:
    """The printed matrix: lines "[i] label v1 .. vn", the last n numbers of each."""
    rows = []
    for line in text.splitlines():
        if re.match(r"^\s*\[\d+\] [^\s\[]", line):  # not the header row
            rows.append([float(v) for v in line.split()[-n:]])
    return rows


def streamed_tokens(text: str) -> list[int]:
    """Token ids printed between the prompt line and the "Generated" line."""
    lines = text.splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith("Prompt ids"))
    end = next(i for i, line in enumerate(lines) if line.startswith("Generated"))
    return [int(t) for line in lines[start + 1 : end] for t in line.split()]


def test_mlp_attention_matches_numpy(capsys: pytest.CaptureFixture[str]) -> None:
    assert mlp_attention.main(["--seed", "3"]) == 0
    errors = re.findall(r"max \|luminal - numpy\| = (\S+)", capsys.readouterr().out)
    assert len(errors) == 3 and all(float(e) < 1e-5 for e in errors)


def test_sentence_similarity_compiled(capsys: pytest.CaptureFixture[str]) -> None:
    args = ["--sentences", FOOD, BREAD, MOVIE, "--batch-size", "4"]
    assert sentence_similarity.main(args) == 0
    out = capsys.readouterr().out
    matrix = similarity_rows(out, 3)
    assert len(matrix) == 3
    assert [matrix[i][i] for i in range(3)] == [1.0, 1.0, 1.0]
    assert matrix[0][1] > matrix[0][2] + 0.3  # food ~ bread, not ~ movie
    assert matrix[0][1] == matrix[1][0]
    assert re.search(r"Throughput: \d+ sentences/s \(batch of 4", out)
    error = re.search(r"reference runtime\| over the embeddings = (\S+)", out)
    assert error is not None and float(error.group(1)) < 1e-4
    assert "Most similar: [1]" in out and "[2]" in out


def test_sentence_similarity_reference_runtime(capsys: pytest.CaptureFixture[str]) -> None:
    args = ["--sentences", FOOD, MOVIE, "--batch-size", "0", "--no-compile"]
    assert sentence_similarity.main(args) == 0
    out = capsys.readouterr().out
    matrix = similarity_rows(out, 2)
    assert len(matrix) == 2 and matrix[0][0] == 1.0 and matrix[0][1] < 0.5
    assert "reference runtime" in out and "sentences/s" not in out and "Check" not in out


def test_llama_generate_compiled_streams_tokens(capsys: pytest.CaptureFixture[str]) -> None:
    assert llama_generate.main(["--seed", "1", "--max-new-tokens", "6"]) == 0
    out = capsys.readouterr().out
    tokens = streamed_tokens(out)
    assert len(tokens) == 6 and all(0 <= t < llama_generate.CONFIG["vocab_size"] for t in tokens)
    assert "Generated 6 tokens" in out
    assert re.search(r"Decode: \d+ tokens/s \(5 steps", out)
    assert "reference runtime gives the same tokens" in out


def test_llama_generate_reference_runtime_is_seeded(capsys: pytest.CaptureFixture[str]) -> None:
    args = ["--seed", "2", "--max-new-tokens", "4", "--no-compile", "--prompt", "5", "9"]
    assert llama_generate.main(args) == 0
    first = streamed_tokens(capsys.readouterr().out)
    assert llama_generate.main(args) == 0
    assert streamed_tokens(capsys.readouterr().out) == first and len(first) == 4


def test_llama_generate_rejects_out_of_vocabulary_prompt() -> None:
    with pytest.raises(SystemExit) as info:
        llama_generate.main(["--prompt", "1", "5000"])
    assert info.value.code == 2


def test_demo_runs_every_part(capsys: pytest.CaptureFixture[str]) -> None:
    assert demo.main(["--max-new-tokens", "3", "--no-check", "--train-epochs", "2"]) == 0
    out = capsys.readouterr().out
    headers = re.findall(r"^== \[(\d)/4\] ", out, flags=re.MULTILINE)
    assert headers == ["1", "2", "3", "4"]
    assert re.search(r"Test accuracy: [\d.]+% \(\d+/360\) after 2 epochs", out)
    matrix = similarity_rows(out, 6)
    assert len(matrix) == 6 and matrix[0][1] > matrix[0][2]
    assert len(streamed_tokens(out)) == 3
    assert "sentences/s" in out and "tokens/s" in out and "Done in" in out


@pytest.mark.parametrize("name", EXAMPLES)
def test_help(name: str) -> None:
    result = subprocess.run(
        [sys.executable, "-m", f"luminal.examples.{name}", "--help"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout.startswith(f"usage: python -m luminal.examples.{name}")
