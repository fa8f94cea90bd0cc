"""python -m luminal.examples.onnx_run: outputs and timings beside onnxruntime's."""

from __future__ import annotations

import numpy as np
import onnx

from luminal.examples import onnx_run
from tests.onnx.test_loader import expected_flatten, flatten_model


def test_onnx_run_prints_outputs_and_onnxruntime(tmp_path, capsys) -> None:
    model_path = tmp_path / "model.onnx"
    onnx.save(flatten_model(), model_path)
    x = np.linspace(-1, 1, 24, dtype=np.float32).reshape(3, 4, 2)
    np.save(tmp_path / "x.npy", x)
    onnx_run.main([str(model_path), "--input", f"x={tmp_path / 'x.npy'}", "--runs", "2"])
    text = capsys.readouterr().out
    first = float(expected_flatten(x)[0, 0])
    assert f"y: shape (3, 1) float32 [{first:.5g}" in text
    assert "luminal (CPUCompiler)" in text
    assert "onnxruntime (2 threads)" in text
    difference = float(text.rsplit("max abs difference ", 1)[1])
    assert difference < 1e-5
