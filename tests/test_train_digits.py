"""The digits example: >= 97% test accuracy with the default settings (about 6 s with the
kernel cache warm, 11 s cold), the same seed gives the same run, and the reference runtime
trains the same model."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from luminal.examples import train_digits


@pytest.fixture(scope="module")
def digits() -> train_digits.Digits:
    return train_digits.load()


def test_default_settings_reach_97_percent(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    plot = tmp_path / "digits.png"
    assert train_digits.main(["--no-progress", "--plot", str(plot)]) == 0
    out = capsys.readouterr().out
    match = re.search(r"Test accuracy: ([\d.]+)% \((\d+)/360\) after 30 epochs", out)
    assert match is not None, out
    assert float(match.group(1)) >= 97.0
    assert len(re.findall(r"step \d+: test_accuracy", out)) == 6  # every 5 of 30 epochs
    assert "samples/s" in out
    assert plot.read_bytes()[:4] == b"\x89PNG"


def test_same_seed_same_run(digits: train_digits.Digits) -> None:
    """A short run: > 80% already, and bit-identical losses and accuracy for one seed."""
    runs = [
        train_digits.train(epochs=5, seed=7, progress=False, eval_every=None, data=digits)
        for _ in range(2)
    ]
    assert runs[0].accuracy > 0.8
    assert runs[0].accuracy == runs[1].accuracy
    assert runs[0].history.losses == runs[1].history.losses


def test_seed_sets_weights_and_batch_order(digits: train_digits.Digits) -> None:
    import luminal as lm

    weights = []
    for seed in (0, 0, 1):
        lm.nn.manual_seed(seed)
        weights.append(train_digits.DigitsCNN(lm.Graph()).state_dict()["features.0.weight"])
    assert np.array_equal(weights[0], weights[1]) and not np.array_equal(weights[0], weights[2])
    orders = [
        next(iter(lm.training.ArrayLoader(digits.y_train, batch_size=64, seed=s)))[0]
        for s in (0, 0, 1)
    ]
    assert np.array_equal(orders[0], orders[1]) and not np.array_equal(orders[0], orders[2])


def test_reference_runtime_trains_the_same_model(digits: train_digits.Digits) -> None:
    kwargs = {"epochs": 1, "seed": 1, "progress": False, "eval_every": None, "data": digits}
    compiled = train_digits.train(compile=True, **kwargs)
    reference = train_digits.train(compile=False, **kwargs)
    np.testing.assert_allclose(
        reference.history.losses, compiled.history.losses, rtol=1e-4, atol=1e-5
    )
    assert abs(reference.accuracy - compiled.accuracy) <= 2 / 360


def test_split_and_model_shapes(digits: train_digits.Digits) -> None:
    assert digits.x_train.shape == (1437, 1, 8, 8) and digits.x_test.shape == (360, 1, 8, 8)
    assert digits.x_train.dtype == np.float32 and 0 <= digits.x_train.min() <= 1.0
    assert digits.x_train.max() == 1.0 and digits.y_train.dtype == np.int32
    assert np.bincount(digits.y_test).min() >= 35  # stratified: every class ~36 times
    import luminal as lm

    model = train_digits.DigitsCNN(lm.Graph())
    names = [name for name, _ in model.named_parameters()]
    assert names[:2] == ["features.0.weight", "features.0.bias"] and len(names) == 10
    with pytest.raises(lm.ShapeError):
        model(model.graph.tensor((2, 1, 12, 12)))  # 32 * 3 * 3 features, not 32 * 2 * 2


def test_help_and_bad_arguments() -> None:
    result = subprocess.run(
        [sys.executable, "-m", "luminal.examples.train_digits", "--help"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout.startswith("usage: python -m luminal.examples.train_digits")
    for flag in ("--epochs", "--seed", "--no-compile", "--plot"):
        assert flag in result.stdout
    with pytest.raises(SystemExit) as info:
        train_digits.main(["--epochs", "0"])
    assert info.value.code == 2
