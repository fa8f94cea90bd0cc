"""The measuring process: what it is sent, how it reports crashes and hangs."""

from __future__ import annotations

import numpy as np

from luminal.search.measure import MeasuringProcess, _describe_exit
from luminal.search.strategy import Expected, check_outputs


def test_shared_inputs_travel_once_per_process() -> None:
    process = MeasuringProcess()
    blob = ("token-a", b"weights")
    first = process.attach_shared({"x": 1}, blob)
    second = process.attach_shared({"x": 2}, blob)
    assert first["shared"] == ("token-a", b"weights")
    assert second["shared"] == ("token-a", None)  # the child already holds it
    assert process.attach_shared({}, ("token-b", b"other"))["shared"] == ("token-b", b"other")
    process.shared_token = None  # what start() does for a new child
    assert process.attach_shared({}, blob)["shared"] == blob
    assert process.attach_shared({"x": 3}, None) == {"x": 3}


def test_exit_codes_are_described() -> None:
    assert _describe_exit(-11) == "killed by SIGSEGV"
    assert _describe_exit(3) == "exited with status 3"


def test_check_outputs_tells_nan_from_wrong() -> None:
    want = {1: Expected(np.array([1.0, 2.0], np.float32), 1e-3, 1e-4)}
    assert check_outputs({1: np.array([1.0, 2.0], np.float32)}, want) is None
    assert check_outputs({1: np.array([1.0, np.nan], np.float32)}, want).startswith("nan")
    assert check_outputs({1: np.array([1.0, np.inf], np.float32)}, want).startswith("nan")
    assert check_outputs({1: np.array([1.0, 2.5], np.float32)}, want).startswith("wrong")
    assert check_outputs({}, want).startswith("wrong")
    assert check_outputs({1: np.zeros(3, np.float32)}, want).startswith("wrong")
