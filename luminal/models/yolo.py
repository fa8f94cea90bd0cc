"""YOLOv8 detection (ultralytics' `DetectionModel` from `yolov8{n,s,m,l,x}.yaml`).

`YOLOv8(cx, variant="n", nc=80)` builds the module tree with ultralytics' parameter
names (`model.0.conv.weight`, `model.0.bn.running_mean`, ..., `model.22.dfl.conv.weight`),
so `load_state_dict(DetectionModel.state_dict())` works unchanged. `model(images)` takes
(N, 3, H, W) float32 images in [0, 1] (H, W multiples of 32) and returns what
ultralytics' model returns in eval mode before NMS: (N, 4 + nc, anchors), boxes as
(cx, cy, w, h) in input pixels from the DFL head, then class probabilities.
`postprocess(raw, conf, iou)` is `ultralytics.utils.ops.non_max_suppression` in numpy.

Every convolution is Conv2d(bias=False) + BatchNorm2d + SiLU, written as such; in eval
mode the BatchNorm is a per-channel affine map that `GenericCompiler` (and so
`CPUCompiler`) folds into the convolution's weight (`luminal.compiler.fold`).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from luminal.dtype import float32
from luminal.errors import LuminalError, ShapeError
from luminal.graph import Graph
from luminal.hl.combine import concat
from luminal.nn.conv import Conv2d
from luminal.nn.layers import Stateless
from luminal.nn.module import Module, ModuleList, Sequential, build_then_load
from luminal.nn.normalization import BatchNorm2d
from luminal.nn.pooling import MaxPool2d
from luminal.nn.upsample import Upsample
from luminal.shape.expr import var
from luminal.tensor import GraphTensor

# variant: (depth multiple, width multiple, max channels), as in ultralytics' yolov8.yaml
SCALES = {
    "n": (0.33, 0.25, 1024),
    "s": (0.33, 0.50, 1024),
    "m": (0.67, 0.75, 768),
    "l": (1.00, 1.00, 512),
    "x": (1.00, 1.25, 512),
}
REG_MAX = 16
STRIDES = (8, 16, 32)
MAX_WH = 7680  # ultralytics' class offset for batched NMS


def make_divisible(value: float, divisor: int = 8) -> int:
    return int(math.ceil(value / divisor) * divisor)


# ---------------------------------------------------------------- blocks
class Conv(Module):
    """Conv2d (no bias, 'same' padding for odd kernels) + BatchNorm2d + SiLU."""

    def __init__(
        self, graph: Graph, c1: int, c2: int, k: int = 1, s: int = 1, groups: int = 1
    ) -> None:
        super().__init__(graph)
        self.conv = Conv2d(graph, c1, c2, k, s, k // 2, groups=groups, bias=False)
        self.bn = BatchNorm2d(graph, c2, eps=1e-3, momentum=0.03)

    def forward(self, x: GraphTensor) -> GraphTensor:
        return self.bn(self.conv(x)).silu()


class Bottleneck(Module):
    """Two 3x3 Convs, with a residual when `shortcut` and the widths match."""

    def __init__(self, graph: Graph, c1: int, c2: int, shortcut: bool = True) -> None:
        super().__init__(graph)
        self.cv1 = Conv(graph, c1, c2, 3)
        self.cv2 = Conv(graph, c2, c2, 3)
        self.add = shortcut and c1 == c2

    def forward(self, x: GraphTensor) -> GraphTensor:
        y = self.cv2(self.cv1(x))
        return x + y if self.add else y


class C2f(Module):
    """CSP bottleneck with two convolutions: split cv1's output in halves, chain `n`
    Bottlenecks on the second, concatenate every intermediate, mix with cv2."""

    def __init__(self, graph: Graph, c1: int, c2: int, n: int = 1, shortcut: bool = False):
        super().__init__(graph)
        self.c = int(c2 * 0.5)
        self.cv1 = Conv(graph, c1, 2 * self.c, 1)
        self.cv2 = Conv(graph, (2 + n) * self.c, c2, 1)
        self.m = ModuleList(graph, [Bottleneck(graph, self.c, self.c, shortcut) for _ in range(n)])

    def forward(self, x: GraphTensor) -> GraphTensor:
        y = self.cv1(x)
        parts = [y[:, : self.c], y[:, self.c :]]
        for block in self.m:
            parts.append(block(parts[-1]))
        return self.cv2(concat(parts, 1))


class SPPF(Module):
    """Spatial pyramid pooling, fast: three chained 5x5 max pools, concatenated."""

    def __init__(self, graph: Graph, c1: int, c2: int, k: int = 5) -> None:
        super().__init__(graph)
        hidden = c1 // 2
        self.cv1 = Conv(graph, c1, hidden, 1)
        self.cv2 = Conv(graph, hidden * 4, c2, 1)
        self.m = MaxPool2d(k, 1, k // 2)

    def forward(self, x: GraphTensor) -> GraphTensor:
        parts = [self.cv1(x)]
        for _ in range(3):
            parts.append(self.m(parts[-1]))
        return self.cv2(concat(parts, 1))


class Concat(Stateless):
    """Concatenate a list of tensors along `dimension` (ultralytics' Concat)."""

    def setup(self, dimension: int = 1) -> None:
        self.d = dimension

    def forward(self, xs: Sequence[GraphTensor]) -> GraphTensor:  # type: ignore[override]
        return concat(list(xs), self.d)


class DFL(Module):
    """Distribution focal loss integral: the expected bin under a softmax over 16 bins,
    as a fixed 1x1 convolution with weights 0..15 (`dfl.conv.weight`)."""

    def __init__(self, graph: Graph, c1: int = REG_MAX) -> None:
        super().__init__(graph)
        self.c1 = c1
        self.conv = Conv2d(graph, c1, 1, 1, bias=False)
        self.conv.weight.set(np.arange(c1, dtype=np.float32).reshape(1, c1, 1, 1))

    def forward(self, x: GraphTensor) -> GraphTensor:
        batch, _, anchors = x.view.shape
        bins = x.reshape((batch, 4, self.c1, anchors)).transpose(2, 1).softmax(1)
        return self.conv(bins).reshape((batch, 4, anchors))


class Detect(Module):
    """Decoupled head: per level a box branch (cv2: 4 x 16 DFL bins) and a class branch
    (cv3: nc logits); decoded to (cx, cy, w, h) pixels and class probabilities."""

    def __init__(self, graph: Graph, nc: int, channels: Sequence[int]) -> None:
        super().__init__(graph)
        self.nc, self.no = nc, nc + 4 * REG_MAX
        c2 = max(16, channels[0] // 4, 4 * REG_MAX)
        c3 = max(channels[0], min(nc, 100))
        self.cv2 = ModuleList(
            graph,
            [
                Sequential(graph, Conv(graph, c, c2, 3), Conv(graph, c2, c2, 3),
                           Conv2d(graph, c2, 4 * REG_MAX, 1))
                for c in channels
            ],
        )  # fmt: skip
        self.cv3 = ModuleList(
            graph,
            [
                Sequential(graph, Conv(graph, c, c3, 3), Conv(graph, c3, c3, 3),
                           Conv2d(graph, c3, nc, 1))
                for c in channels
            ],
        )  # fmt: skip
        self.dfl = DFL(graph, REG_MAX)

    def forward(self, xs: Sequence[GraphTensor]) -> GraphTensor:  # type: ignore[override]
        levels = []
        for x, box, cls in zip(xs, self.cv2, self.cv3, strict=True):
            y = concat([box(x), cls(x)], 1)
            levels.append(y.reshape((y.view.shape[0], self.no, -1)))
        joined = concat(levels, 2)
        box, cls = joined[:, : 4 * REG_MAX], joined[:, 4 * REG_MAX :]
        distances = self.dfl(box)  # (N, 4, anchors): left, top, right, bottom in cells
        anchors, strides = make_anchors(self.graph, [x.shape[2:] for x in xs])
        x1y1 = anchors - distances[:, :2]
        x2y2 = anchors + distances[:, 2:]
        boxes = concat([(x1y1 + x2y2) * 0.5, x2y2 - x1y1], 1) * strides
        return concat([boxes, cls.sigmoid()], 1)


def make_anchors(
    graph: Graph, sizes: Sequence[Sequence[Any]], offset: float = 0.5
) -> tuple[GraphTensor, GraphTensor]:
    """Cell centres (1, 2, anchors) as (x, y) in cells, row-major per level, and each
    anchor's stride (1, 1, anchors): ultralytics' make_anchors, built from iotas."""
    points, strides = [], []
    for (h, w), stride in zip(sizes, STRIDES, strict=True):
        if not isinstance(h, int) or not isinstance(w, int):
            raise ShapeError(f"YOLOv8: feature map sizes must be known, got {(h, w)}")
        x = graph.iota(var("z") % w, (h * w,)).cast(float32) + offset
        y = graph.iota(var("z") // w, (h * w,)).cast(float32) + offset
        points.append(concat([x.unsqueeze(0), y.unsqueeze(0)], 0))
        strides.append(graph.constant(float(stride)).expand((1, h * w)))
    return concat(points, 1).unsqueeze(0), concat(strides, 1).unsqueeze(0)


# ---------------------------------------------------------------- the model
class YOLOv8(Module):
    """ultralytics' YOLOv8 DetectionModel (`model.0` ... `model.22`); see module docstring."""

    def __init__(self, graph: Graph, variant: str = "n", nc: int = 80) -> None:
        super().__init__(graph)
        if variant not in SCALES:
            raise LuminalError(f"YOLOv8: variant must be one of {sorted(SCALES)}, got {variant!r}")
        if not isinstance(nc, int) or nc < 1:
            raise LuminalError(f"YOLOv8: nc must be a positive int, got {nc!r}")
        self.variant, self.nc = variant, nc
        depth, width, max_channels = SCALES[variant]

        def ch(c: int) -> int:
            return make_divisible(min(c, max_channels) * width, 8)

        def n(repeats: int) -> int:
            return max(round(repeats * depth), 1)

        g = graph
        p3, p4, p5 = ch(256), ch(512), ch(1024)
        layers: list[Module] = [
            Conv(g, 3, ch(64), 3, 2),  # 0 P1/2
            Conv(g, ch(64), ch(128), 3, 2),  # 1 P2/4
            C2f(g, ch(128), ch(128), n(3), True),
            Conv(g, ch(128), p3, 3, 2),  # 3 P3/8
            C2f(g, p3, p3, n(6), True),
            Conv(g, p3, p4, 3, 2),  # 5 P4/16
            C2f(g, p4, p4, n(6), True),
            Conv(g, p4, p5, 3, 2),  # 7 P5/32
            C2f(g, p5, p5, n(3), True),
            SPPF(g, p5, p5, 5),  # 9
            Upsample(None, 2, "nearest"),
            Concat(1),  # 11: cat backbone P4
            C2f(g, p5 + p4, p4, n(3)),  # 12
            Upsample(None, 2, "nearest"),
            Concat(1),  # 14: cat backbone P3
            C2f(g, p4 + p3, p3, n(3)),  # 15 (P3/8 small)
            Conv(g, p3, p3, 3, 2),
            Concat(1),  # 17: cat head P4
            C2f(g, p3 + p4, p4, n(3)),  # 18 (P4/16 medium)
            Conv(g, p4, p4, 3, 2),
            Concat(1),  # 20: cat head P5
            C2f(g, p4 + p5, p5, n(3)),  # 21 (P5/32 large)
            Detect(g, nc, (p3, p4, p5)),  # 22
        ]
        self.model = ModuleList(graph, layers)

    # which earlier outputs each layer reads (-1: the previous layer), as in the yaml
    SOURCES = {11: (-1, 6), 14: (-1, 4), 17: (-1, 12), 20: (-1, 9), 22: (15, 18, 21)}

    def forward(self, images: GraphTensor) -> GraphTensor:
        if images.ndim != 4 or images.view.shape[1] != 3:
            raise ShapeError(f"YOLOv8: expected images (N, 3, H, W), got {images._shape_text()}")
        for size in images.shape[2:]:
            if isinstance(size, int) and size % 32:
                raise ShapeError(
                    f"YOLOv8: image sizes must be multiples of 32, got {images._shape_text()}"
                )
        outputs: list[GraphTensor] = []
        x = images
        for index, layer in enumerate(self.model):
            sources = self.SOURCES.get(index)
            if sources is not None:
                x = layer([x if s == -1 else outputs[s] for s in sources])
            else:
                x = layer(x)
            outputs.append(x)
        return x

    def load_state_dict(self, state: Any, strict: bool = True) -> None:
        """ultralytics' DetectionModel state dict (also with the `YOLO` wrapper's extra
        `model.` prefix); half-precision checkpoints are converted to float32."""
        if any(str(name).startswith("model.model.") for name in state):
            state = {name[len("model.") :]: value for name, value in state.items()}
        super().load_state_dict(state, strict)

    @classmethod
    def from_pretrained(cls, path: str | Path, graph: Graph) -> YOLOv8:
        """Load a `.safetensors` file of ultralytics' state dict; the variant and the
        number of classes are read from the weight shapes."""
        from luminal.weights.safetensors_io import load_safetensors

        state = load_safetensors(path, dtype=np.float32)
        variant, nc = infer_variant(state)
        return build_then_load(graph, lambda: cls(graph, variant, nc), lambda: state)

    def extra_repr(self) -> str:
        return f"variant={self.variant!r}, nc={self.nc}"


def infer_variant(state: Any) -> tuple[str, int]:
    """(variant, nc) from the widths of a YOLOv8 state dict."""
    names = {str(name).removeprefix("model.model.").removeprefix("model."): v for name, v in
             state.items()}  # fmt: skip
    first = names.get("0.conv.weight")
    last = names.get("22.cv3.0.2.bias")
    if first is None or last is None:
        raise LuminalError("YOLOv8: not a YOLOv8 detection state dict (no model.0/model.22)")
    width = np.shape(first)[0]
    for variant, (_, multiple, _) in SCALES.items():
        if make_divisible(64 * multiple, 8) == width:
            return variant, int(np.shape(last)[0])
    raise LuminalError(f"YOLOv8: no variant has {width} channels in its first convolution")


# ---------------------------------------------------------------- post-processing
def xywh_to_xyxy(boxes: np.ndarray) -> np.ndarray:
    """(cx, cy, w, h) -> (x1, y1, x2, y2)."""
    half = boxes[..., 2:] / 2
    return np.concatenate([boxes[..., :2] - half, boxes[..., :2] + half], -1)


def nms(boxes: np.ndarray, scores: np.ndarray, iou: float) -> np.ndarray:
    """Greedy non-maximum suppression (torchvision.ops.nms): indices of kept boxes by
    descending score; a box is dropped when its IoU with a kept one exceeds `iou`."""
    order = np.argsort(-scores, kind="stable")
    areas = (boxes[:, 2] - boxes[:, 0]) * (boxes[:, 3] - boxes[:, 1])
    keep = []
    while order.size:
        best, rest = order[0], order[1:]
        keep.append(best)
        low = np.maximum(boxes[best, :2], boxes[rest, :2])
        high = np.minimum(boxes[best, 2:], boxes[rest, 2:])
        inter = np.prod(np.clip(high - low, 0, None), axis=1)
        overlap = inter / (areas[best] + areas[rest] - inter)
        order = rest[~(overlap > iou)]
    return np.asarray(keep, dtype=np.int64)


def postprocess(
    raw: Any,
    conf: float = 0.25,
    iou: float = 0.45,
    max_det: int = 300,
    agnostic: bool = False,
    max_nms: int = 30000,
) -> list[np.ndarray]:
    """Detections per image as (n, 6) arrays of x1, y1, x2, y2, confidence, class,
    best first: ultralytics' non_max_suppression (one label per box, class-aware NMS
    unless `agnostic`). `raw` is the model output (N, 4 + nc, anchors)."""
    raw = np.asarray(raw.numpy() if isinstance(raw, GraphTensor) else raw, dtype=np.float32)
    if raw.ndim != 3 or raw.shape[1] < 5:
        raise ShapeError(f"postprocess: expected (N, 4 + classes, anchors), got {raw.shape}")
    results = []
    for prediction in raw:
        candidates = prediction.T[prediction[4:].max(0) > conf]
        boxes = xywh_to_xyxy(candidates[:, :4])
        scores = candidates[:, 4:].max(1)
        labels = candidates[:, 4:].argmax(1)
        order = np.argsort(-scores, kind="stable")[:max_nms]
        boxes, scores, labels = boxes[order], scores[order], labels[order]
        offset = 0.0 if agnostic else MAX_WH
        keep = nms(boxes + labels[:, None] * offset, scores, iou)[:max_det]
        results.append(
            np.concatenate(
                [boxes[keep], scores[keep, None], labels[keep, None].astype(np.float32)], 1
            )
        )
    return results


def letterbox(image: np.ndarray, size: int = 640) -> tuple[np.ndarray, float, tuple[int, int]]:
    """An (H, W, 3) uint8/float image resized to fit `size` x `size` (aspect kept,
    bilinear) and padded with gray 114 as ultralytics does: returns the (1, 3, size, size)
    float32 batch in [0, 1], the scale and the (left, top) padding."""
    from PIL import Image

    array = np.asarray(image)
    if array.dtype != np.uint8:
        array = np.clip(np.asarray(array, np.float32) * 255 + 0.5, 0, 255).astype(np.uint8)
    height, width = array.shape[:2]
    scale = min(size / height, size / width)
    new_w, new_h = round(width * scale), round(height * scale)
    resized = np.asarray(Image.fromarray(array[..., :3]).resize((new_w, new_h), Image.BILINEAR))
    left, top = (size - new_w) // 2, (size - new_h) // 2
    canvas = np.full((size, size, 3), 114, np.uint8)
    canvas[top : top + new_h, left : left + new_w] = resized
    batch = canvas.transpose(2, 0, 1)[None].astype(np.float32) / 255.0
    return batch, scale, (left, top)


def scale_boxes(
    detections: np.ndarray, scale: float, padding: tuple[int, int], shape: tuple[int, int]
) -> np.ndarray:
    """Detections on the letterboxed image mapped back to an image of `shape` (H, W)."""
    out = detections.copy()
    out[:, [0, 2]] = np.clip((out[:, [0, 2]] - padding[0]) / scale, 0, shape[1])
    out[:, [1, 3]] = np.clip((out[:, [1, 3]] - padding[1]) / scale, 0, shape[0])
    return out
