"""YOLOv8 against a PyTorch re-implementation of ultralytics' DetectionModel with the
same seeded state dict (ultralytics itself cannot be installed beside torch 2.13 here):
parameter names and shapes (n and s), the head output on 64x96 images, boxes after
postprocess equal to a torch NMS oracle, BatchNorm folded by the generic passes, loading
half-precision safetensors, the detect example end to end, and errors."""

from __future__ import annotations

import numpy as np
import pytest
import torch

import luminal as lm
from luminal.models.yolo import YOLOv8, infer_variant, nms, postprocess
from luminal.weights.safetensors_io import save_safetensors
from tests.conftest import assert_matches_torch
from tests.models.yolo_torch import DetectionModel, non_max_suppression, seeded_model


@pytest.fixture(scope="module")
def reference() -> torch.nn.Module:
    return seeded_model("n")


@pytest.fixture(scope="module")
def images() -> np.ndarray:
    return np.random.default_rng(0).random((2, 3, 64, 96)).astype(np.float32)


@pytest.fixture(scope="module")
def outputs(reference, images) -> tuple[np.ndarray, np.ndarray]:
    """(ours, torch's) head outputs for the same weights and images."""
    cx = lm.Graph()
    model = YOLOv8(cx, "n")
    model.load_state_dict(reference.state_dict())
    raw = model(cx.tensor(images.shape).set(images)).retrieve()
    cx.execute()
    with torch.no_grad():
        expected = reference(torch.from_numpy(images)).numpy()
    return raw.numpy(), expected


@pytest.mark.parametrize("variant", ["n", "s"])
def test_parameter_names_and_shapes_are_ultralytics(variant):
    with lm.nn.skip_init():
        model = YOLOv8(lm.Graph(), variant)
    theirs = DetectionModel(variant).state_dict()
    ours = dict(model.named_tensors())
    assert list(ours) == list(theirs)
    assert {k: tuple(v.shape) for k, v in ours.items()} == {
        k: tuple(v.shape) for k, v in theirs.items()
    }
    assert infer_variant(theirs) == (variant, 80)


def test_head_output_matches_torch(outputs):
    ours, expected = outputs
    assert ours.shape == expected.shape == (2, 84, 8 * 12 + 4 * 6 + 2 * 3)
    assert_matches_torch(ours, torch.from_numpy(expected), atol=1e-3, rtol=1e-4)


def test_boxes_after_postprocess_match_torch_nms(outputs):
    ours, expected = outputs
    oracle = non_max_suppression(torch.from_numpy(expected), 0.25, 0.45)
    same_input = postprocess(expected, 0.25, 0.45)
    for mine, theirs in zip(same_input, oracle, strict=True):
        assert len(theirs) > 1
        np.testing.assert_array_equal(mine, theirs.numpy())
    for mine, theirs in zip(postprocess(ours, 0.25, 0.45), oracle, strict=True):
        np.testing.assert_array_equal(mine[:, 5], theirs[:, 5].numpy())
        np.testing.assert_allclose(mine[:, :5], theirs[:, :5].numpy(), atol=1e-3, rtol=1e-5)


def test_nms_suppresses_overlaps_of_one_class_only():
    boxes = np.array([[0, 0, 10, 10], [1, 1, 11, 11], [20, 20, 30, 30], [0, 0, 10, 9]], np.float32)
    scores = np.array([0.9, 0.8, 0.7, 0.95], np.float32)
    np.testing.assert_array_equal(nms(boxes, scores, 0.5), [3, 2])
    raw = np.zeros((1, 6, 4), np.float32)
    raw[0, :2] = (boxes[:, :2] + boxes[:, 2:]).T / 2
    raw[0, 2:4] = (boxes[:, 2:] - boxes[:, :2]).T
    raw[0, 4] = [0.9, 0.0, 0.7, 0.95]  # class 0
    raw[0, 5] = [0.0, 0.8, 0.0, 0.0]  # box 1 is class 1: not suppressed by class-0 boxes
    found = postprocess(raw, conf=0.25, iou=0.5)[0]
    np.testing.assert_array_equal(found[:, 5], [0, 1, 0])
    np.testing.assert_allclose(found[:, 4], [0.95, 0.8, 0.7])
    assert len(postprocess(raw, conf=0.25, iou=0.5, agnostic=True)[0]) == 2


def test_batchnorm_folds_into_the_convolutions():
    cx = lm.Graph()
    with lm.nn.skip_init():
        model = YOLOv8(cx, "n")
    model(cx.tensor((1, 3, 640, 640))).retrieve()
    convs_with_bn = sum(1 for _, m in model.named_modules() if isinstance(m, lm.nn.BatchNorm2d))
    cx.compile(lm.GenericCompiler())
    folded = 0
    for node in cx.nodes.values():
        if isinstance(node.op, lm.ops.SumReduce):
            product = cx.nodes[node.inputs[0].source]
            weights = [cx.nodes[e.source] for e in product.inputs]
            folded += isinstance(product.op, lm.ops.Mul) and any(
                isinstance(w.op, lm.ops.Mul) for w in weights
            )
    # a Winograd convolution (conv algorithm "auto") keeps the scale as a multiply in its
    # elementwise reader: FoldChannelScale needs the scale right after one contraction
    winograd = sum(
        isinstance(n.op, lm.ops.Input) and n.op.label.startswith("winograd_BT")
        for n in cx.nodes.values()
    )
    assert convs_with_bn == 57 and winograd > 0
    # all the others but the four 3x3 convolutions on the 20x20 map, whose weights (up to
    # 256 x 256 x 9) outnumber their outputs (256 x 20 x 20): there, scaling the output is
    # cheaper
    assert folded == convs_with_bn - 4 - winograd


def test_half_precision_safetensors_and_the_detect_example(reference, tmp_path, capsys):
    from PIL import Image

    from luminal.examples import detect

    state = {k: v.half() if v.is_floating_point() else v for k, v in reference.state_dict().items()}
    weights = tmp_path / "yolov8n.safetensors"
    save_safetensors(state, weights)
    cx = lm.Graph()
    model = YOLOv8.from_pretrained(weights, cx)
    assert (model.variant, model.nc) == ("n", 80)
    loaded = model.state_dict()
    for name, value in state.items():
        np.testing.assert_array_equal(loaded[name], value.float().numpy(), err_msg=name)
    image = (np.random.default_rng(1).random((40, 70, 3)) * 255).astype(np.uint8)
    Image.fromarray(image).save(tmp_path / "image.png")
    out = tmp_path / "boxes.png"
    args = [str(tmp_path / "image.png"), "--weights", str(weights), "--size", "64"]
    assert detect.main([*args, "--out", str(out), "--no-compile", "--conf", "0.3"]) == 0
    assert out.exists() and Image.open(out).size == (70, 40)
    assert "detections drawn into" in capsys.readouterr().out


def test_errors():
    cx = lm.Graph()
    with pytest.raises(lm.LuminalError, match="variant must be one of"):
        YOLOv8(cx, "q")
    with lm.nn.skip_init():
        model = YOLOv8(cx, "n", nc=3)
    with pytest.raises(lm.ShapeError, match="multiples of 32"):
        model(cx.tensor((1, 3, 60, 64)))
    with pytest.raises(lm.ShapeError, match="expected images"):
        model(cx.tensor((1, 4, 64, 64)))
    with pytest.raises(lm.ShapeError, match="expected \\(N, 4 \\+ classes"):
        postprocess(np.zeros((2, 4)))
    with pytest.raises(lm.LuminalError, match="not a YOLOv8"):
        infer_variant({"model.0.conv.weight": np.zeros((16, 3, 3, 3))})
