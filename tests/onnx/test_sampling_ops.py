"""GridSample, RoiAlign, DeformConv and Col2Im against onnxruntime (ONNX's reference
for DeformConv, which onnxruntime's CPU provider lacks), on cases the node suite leaves
out: every mode with every padding on a grid reaching past the borders, rois partly
outside the image in max mode, grouped deformable convolution with a mask."""

from __future__ import annotations

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper
from onnx.reference import ReferenceEvaluator

from luminal.onnx.backend import LuminalBackend


def _model(node: onnx.NodeProto, feeds: dict[str, np.ndarray], opset: int = 22):
    infos = [
        helper.make_tensor_value_info(n, helper.np_dtype_to_tensor_dtype(a.dtype), a.shape)
        for n, a in feeds.items()
    ]
    out = [helper.make_tensor_value_info("Y", TensorProto.FLOAT, None)]
    graph = helper.make_graph([node], "case", infos, out)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])
    model.ir_version = 10
    return model


def _check(model: onnx.ModelProto, feeds: dict[str, np.ndarray], reference: bool = False):
    if reference:
        expected = ReferenceEvaluator(model).run(None, feeds)[0]
    else:
        session = ort.InferenceSession(
            model.SerializeToString(), providers=["CPUExecutionProvider"]
        )
        expected = session.run(None, feeds)[0]
    ours = LuminalBackend.prepare(model).run(feeds)[0]
    np.testing.assert_allclose(ours, expected, rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("mode", ["nearest", "linear", "cubic"])
@pytest.mark.parametrize("padding", ["zeros", "border", "reflection"])
@pytest.mark.parametrize("align", [0, 1])
def test_grid_sample_past_the_borders(mode: str, padding: str, align: int) -> None:
    rng = np.random.default_rng(1)
    feeds = {
        "X": rng.standard_normal((2, 3, 5, 6)).astype(np.float32),
        "grid": rng.uniform(-1.7, 1.7, (2, 4, 7, 2)).astype(np.float32),
    }
    node = helper.make_node(
        "GridSample", ["X", "grid"], ["Y"], mode=mode, padding_mode=padding, align_corners=align
    )
    # cubic with border padding: onnxruntime (like PyTorch) clamps each tap, ONNX's
    # reference (which the node suite checks) clamps the coordinate first; luminal
    # follows ONNX's reference
    _check(_model(node, feeds), feeds, reference=(mode, padding) == ("cubic", "border"))


@pytest.mark.parametrize("mode", ["avg", "max"])
@pytest.mark.parametrize("transform", ["half_pixel", "output_half_pixel"])
def test_roi_align_rois_outside(mode: str, transform: str) -> None:
    rng = np.random.default_rng(2)
    feeds = {
        "X": rng.standard_normal((2, 3, 8, 9)).astype(np.float32),
        "rois": np.array(
            [[-3, -2, 4, 5], [1, 1, 12, 10], [2.5, 0.5, 3.5, 7.25], [7, 6, 8.9, 7.9]], np.float32
        ),
        "batch": np.array([1, 0, 1, 0], np.int64),
    }
    node = helper.make_node(
        "RoiAlign",
        ["X", "rois", "batch"],
        ["Y"],
        mode=mode,
        coordinate_transformation_mode=transform,
        output_height=3,
        output_width=4,
        sampling_ratio=3,
        spatial_scale=0.9,
    )
    _check(_model(node, feeds, opset=16), feeds)


def test_deform_conv_groups_mask_strides() -> None:
    rng = np.random.default_rng(3)
    feeds = {
        "X": rng.standard_normal((2, 4, 7, 6)).astype(np.float32),
        "W": rng.standard_normal((6, 2, 2, 3)).astype(np.float32),
        "offset": (rng.standard_normal((2, 2 * 2 * 3 * 2, 4, 2)) * 1.5).astype(np.float32),
        "B": rng.standard_normal((6,)).astype(np.float32),
        "mask": rng.uniform(0, 1, (2, 2 * 2 * 3, 4, 2)).astype(np.float32),
    }
    node = helper.make_node(
        "DeformConv",
        list(feeds),
        ["Y"],
        group=2,
        offset_group=2,
        strides=[2, 2],
        pads=[1, 0, 1, 1],
        dilations=[1, 2],
    )
    _check(_model(node, feeds), feeds, reference=True)


def test_col2im_overlapping_blocks_3d() -> None:
    rng = np.random.default_rng(4)
    feeds = {
        "X": rng.standard_normal((2, 3 * 2 * 2 * 2, 3 * 3 * 6)).astype(np.float32),
        "image": np.array([5, 4, 6], np.int64),
        "block": np.array([2, 2, 2], np.int64),
    }
    node = helper.make_node(
        "Col2Im", list(feeds), ["Y"], strides=[2, 1, 1], pads=[1, 0, 0, 0, 0, 1]
    )
    _check(_model(node, feeds), feeds, reference=True)
