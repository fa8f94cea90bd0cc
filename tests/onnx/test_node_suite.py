"""ONNX's own conformance suite (onnx.backend.test node cases) against luminal.

Every node case runs through `luminal.onnx.backend` on the reference runtime, in the
test class `onnx.backend.test.BackendTest` generates. The cases listed in
`node_exclusions.py` are removed from that class before pytest collects it (not
skipped: nothing in this module skips), and `test_excluded_cases_still_fail` keeps the
list honest. `test_counts` pins the figures docs/onnx.md reports. A handful of cases
also run compiled with lm.CPUCompiler.
"""

from __future__ import annotations

import re
import warnings
from pathlib import Path

import numpy as np
import onnx
import onnx.backend.test
import pytest
from onnx import TensorProto
from onnx.backend.test.loader import load_model_tests
from onnx.backend.test.runner import Runner, _normalize_tensor

import luminal as lm
from luminal.onnx.backend import LuminalBackend
from tests.onnx.node_exclusions import EXCLUDED

EXCLUDED_NAMES = {name for names in EXCLUDED.values() for name in names}
# the floor: cases whose inputs and outputs are all float32/int32/int64/bool
FLOOR_TYPES = {TensorProto.FLOAT, TensorProto.INT32, TensorProto.INT64, TensorProto.BOOL}
FLOOR_CASES = 1371
# floor cases still excluded; lower it when a fix removes some, never raise it
MAX_EXCLUDED_FLOOR = 4

with warnings.catch_warnings():
    warnings.simplefilter("ignore")  # the case generators warn about their own overflows
    _backend_test = onnx.backend.test.BackendTest(LuminalBackend, __name__)
    NODE_CASES = {case.name: case for case in load_model_tests(kind="node")}
OnnxBackendNodeModelTest = _backend_test.test_cases["OnnxBackendNodeModelTest"]
for _attribute in [a for a in vars(OnnxBackendNodeModelTest) if a.startswith("test_")]:
    _case = re.sub(r"_(cpu|cuda)$", "", _attribute)
    if _attribute.endswith("_cuda") or _case in EXCLUDED_NAMES:
        delattr(OnnxBackendNodeModelTest, _attribute)  # CPU only; excluded: not collected
COLLECTED = sorted(a for a in vars(OnnxBackendNodeModelTest) if a.startswith("test_"))


def _run_case(case: object, **prepare: object) -> None:
    """What BackendTest does for one node case: prepare, run every data set, compare."""
    rep = LuminalBackend.prepare(case.model, "CPU", **prepare)
    for inputs, expected in case.data_sets:
        outputs = rep.run([_normalize_tensor(i) for i in inputs])
        Runner.assert_similar_outputs(
            [_normalize_tensor(e) for e in expected], list(outputs), case.rtol, case.atol
        )


def _in_floor(name: str) -> bool:
    model = NODE_CASES[name].model
    model = model if isinstance(model, onnx.ModelProto) else onnx.load(model)
    values = [*model.graph.input, *model.graph.output]
    return all(
        v.type.WhichOneof("value") == "tensor_type" and v.type.tensor_type.elem_type in FLOOR_TYPES
        for v in values
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


def test_counts() -> None:
    """Every shipped case is collected here or excluded; the floor's exclusions do not
    grow; docs/onnx.md states the current `P passed of T collected` figures."""
    total = len(NODE_CASES)
    passed = len(COLLECTED)
    assert passed + len(EXCLUDED_NAMES) == total
    assert {re.sub(r"_cpu$", "", a) for a in COLLECTED} == set(NODE_CASES) - EXCLUDED_NAMES
    floor_excluded = sorted(n for n in EXCLUDED_NAMES if _in_floor(n))
    assert len(floor_excluded) <= MAX_EXCLUDED_FLOOR, f"floor exclusions grew: {floor_excluded}"
    assert len(floor_excluded) == MAX_EXCLUDED_FLOOR, "fewer floor exclusions: lower the bound"
    docs = (Path(__file__).parents[2] / "docs" / "onnx.md").read_text()
    stated = f"**{passed:,} passed of {total:,} collected**"
    assert stated in docs, f"docs/onnx.md should state {stated}"
    floor = f"**{FLOOR_CASES - len(floor_excluded):,} of the {FLOOR_CASES:,} floor cases**"
    assert floor in docs, f"docs/onnx.md should state {floor}"


COMPILED_SAMPLE = [
    "test_gemm_all_attributes",
    "test_conv_with_strides_and_asymmetric_padding",
    "test_layer_normalization_4d_axis1",
    "test_softmax_axis_1",
    "test_gather_elements_1",
    "test_reduce_log_sum_exp_keepdims_random",
    "test_resize_upsample_scales_cubic",
    "test_resize_downsample_sizes_nearest",
    "test_bitwise_and_i32_2d",
    "test_bitshift_right_int32_shift_ge_width",
    "test_top_k_same_values_2d",
    "test_scatternd_max",
    "test_reversesequence_batch",
    "test_if",
    "test_scan9_sum",
    "test_linear_attention_gated_delta",
    "test_gridsample_bicubic",
    "test_roialign_aligned_true",
    "test_dft_rfft",
    "test_qlinearconv",
    "test_maxpool_with_argmax_2d_precomputed_pads",
]


@pytest.mark.parametrize("name", COMPILED_SAMPLE)
def test_compiled_sample(name: str) -> None:
    _run_case(NODE_CASES[name], compiler=lm.CPUCompiler())
