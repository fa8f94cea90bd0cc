"""ONNX's own conformance suite (onnx.backend.test node cases) against luminal.

Every node case runs through `luminal.onnx.backend` on the reference runtime; the
cases in `node_exclusions.py` are skipped there, each with its reason, and
`test_excluded_cases_still_fail` keeps that list honest. A handful of cases also run
compiled with lm.CPUCompiler.
"""

from __future__ import annotations

import re
import warnings

import numpy as np
import onnx.backend.test
import pytest
from onnx.backend.test.loader import load_model_tests
from onnx.backend.test.runner import Runner, _normalize_tensor

import luminal as lm
from luminal.onnx.backend import LuminalBackend
from tests.onnx.node_exclusions import EXCLUDED

EXCLUDED_NAMES = {name for names in EXCLUDED.values() for name in names}

with warnings.catch_warnings():
    warnings.simplefilter("ignore")  # the case generators warn about their own overflows
    _backend_test = onnx.backend.test.BackendTest(LuminalBackend, __name__)
    NODE_CASES = {case.name: case for case in load_model_tests(kind="node")}
for _name in sorted(EXCLUDED_NAMES):
    _backend_test.exclude(f"^{re.escape(_name)}_cpu$")
OnnxBackendNodeModelTest = _backend_test.test_cases["OnnxBackendNodeModelTest"]
for _attribute in [a for a in vars(OnnxBackendNodeModelTest) if a.endswith("_cuda")]:
    delattr(OnnxBackendNodeModelTest, _attribute)  # CPU only: no thousand "skipped" lines


def _run_case(case: object, **prepare: object) -> None:
    """What BackendTest does for one node case: prepare, run every data set, compare."""
    rep = LuminalBackend.prepare(case.model, "CPU", **prepare)
    for inputs, expected in case.data_sets:
        outputs = rep.run([_normalize_tensor(i) for i in inputs])
        Runner.assert_similar_outputs(
            [_normalize_tensor(e) for e in expected], list(outputs), case.rtol, case.atol
        )


def test_exclusions_name_real_cases() -> None:
    missing = sorted(EXCLUDED_NAMES - set(NODE_CASES))
    assert not missing, f"excluded cases that ONNX no longer ships: {missing}"


def test_excluded_cases_still_fail() -> None:
    """An excluded case that passes must leave the list (counts stay true)."""
    passing = []
    for name in sorted(EXCLUDED_NAMES):
        try:
            with warnings.catch_warnings(), np.errstate(all="ignore"):
                warnings.simplefilter("ignore")
                _run_case(NODE_CASES[name])
        except Exception:
            continue
        passing.append(name)
    assert not passing, f"now passing, remove from node_exclusions.py: {passing}"


COMPILED_SAMPLE = [
    "test_gemm_all_attributes",
    "test_conv_with_strides_and_asymmetric_padding",
    "test_layer_normalization_4d_axis1",
    "test_softmax_axis_1",
    "test_gather_elements_1",
    "test_reduce_log_sum_exp_keepdims_random",
]


@pytest.mark.parametrize("name", COMPILED_SAMPLE)
def test_compiled_sample(name: str) -> None:
    _run_case(NODE_CASES[name], compiler=lm.CPUCompiler())
