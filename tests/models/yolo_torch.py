"""A PyTorch re-implementation of ultralytics' YOLOv8 DetectionModel, the test oracle.

`ultralytics` cannot be installed beside torch 2.13.0 here (its torchvision requirement
replaces torch), so this file rebuilds the modules of `ultralytics.nn.modules` (Conv,
Bottleneck, C2f, SPPF, Concat, DFL, Detect) and the layer list of `yolov8.yaml`
with the same parameter names and the same inference math, written from the published
architecture. Also a torch greedy NMS and ultralytics' `non_max_suppression` steps.
"""

from __future__ import annotations

import math

import torch
from torch import nn

SCALES = {"n": (0.33, 0.25, 1024), "s": (0.33, 0.50, 1024), "m": (0.67, 0.75, 768)}
STRIDES = (8, 16, 32)


def make_divisible(x: float, divisor: int = 8) -> int:
    return int(math.ceil(x / divisor) * divisor)


class Conv(nn.Module):
    def __init__(self, c1: int, c2: int, k: int = 1, s: int = 1) -> None:
        super().__init__()
        self.conv = nn.Conv2d(c1, c2, k, s, k // 2, bias=False)
        self.bn = nn.BatchNorm2d(c2, eps=1e-3, momentum=0.03)
        self.act = nn.SiLU()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.act(self.bn(self.conv(x)))


class Bottleneck(nn.Module):
    def __init__(self, c1: int, c2: int, shortcut: bool = True) -> None:
        super().__init__()
        self.cv1 = Conv(c1, c2, 3)
        self.cv2 = Conv(c2, c2, 3)
        self.add = shortcut and c1 == c2

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x + self.cv2(self.cv1(x)) if self.add else self.cv2(self.cv1(x))


class C2f(nn.Module):
    def __init__(self, c1: int, c2: int, n: int = 1, shortcut: bool = False) -> None:
        super().__init__()
        self.c = int(c2 * 0.5)
        self.cv1 = Conv(c1, 2 * self.c, 1)
        self.cv2 = Conv((2 + n) * self.c, c2, 1)
        self.m = nn.ModuleList(Bottleneck(self.c, self.c, shortcut) for _ in range(n))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = list(self.cv1(x).chunk(2, 1))
        y.extend(m(y[-1]) for m in self.m)
        return self.cv2(torch.cat(y, 1))


class SPPF(nn.Module):
    def __init__(self, c1: int, c2: int, k: int = 5) -> None:
        super().__init__()
        c_ = c1 // 2
        self.cv1 = Conv(c1, c_, 1)
        self.cv2 = Conv(c_ * 4, c2, 1)
        self.m = nn.MaxPool2d(kernel_size=k, stride=1, padding=k // 2)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = [self.cv1(x)]
        y.extend(self.m(y[-1]) for _ in range(3))
        return self.cv2(torch.cat(y, 1))


class Concat(nn.Module):
    def forward(self, xs: list[torch.Tensor]) -> torch.Tensor:
        return torch.cat(xs, 1)


class DFL(nn.Module):
    def __init__(self, c1: int = 16) -> None:
        super().__init__()
        self.conv = nn.Conv2d(c1, 1, 1, bias=False).requires_grad_(False)
        self.conv.weight.data[:] = torch.arange(c1, dtype=torch.float).view(1, c1, 1, 1)
        self.c1 = c1

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b, _, a = x.shape
        return self.conv(x.view(b, 4, self.c1, a).transpose(2, 1).softmax(1)).view(b, 4, a)


def make_anchors(feats: list[torch.Tensor], offset: float = 0.5):
    points, strides = [], []
    for feat, stride in zip(feats, STRIDES, strict=True):
        _, _, h, w = feat.shape
        sx = torch.arange(w, dtype=feat.dtype) + offset
        sy = torch.arange(h, dtype=feat.dtype) + offset
        sy, sx = torch.meshgrid(sy, sx, indexing="ij")
        points.append(torch.stack((sx, sy), -1).view(-1, 2))
        strides.append(torch.full((h * w, 1), stride, dtype=feat.dtype))
    return torch.cat(points), torch.cat(strides)


class Detect(nn.Module):
    def __init__(self, nc: int, ch: tuple[int, ...]) -> None:
        super().__init__()
        self.nc, self.reg_max = nc, 16
        self.no = nc + 4 * self.reg_max
        c2, c3 = max(16, ch[0] // 4, 4 * self.reg_max), max(ch[0], min(nc, 100))
        self.cv2 = nn.ModuleList(
            nn.Sequential(Conv(x, c2, 3), Conv(c2, c2, 3), nn.Conv2d(c2, 4 * self.reg_max, 1))
            for x in ch
        )
        self.cv3 = nn.ModuleList(
            nn.Sequential(Conv(x, c3, 3), Conv(c3, c3, 3), nn.Conv2d(c3, nc, 1)) for x in ch
        )
        self.dfl = DFL(self.reg_max)

    def forward(self, x: list[torch.Tensor]) -> torch.Tensor:
        for i in range(len(x)):
            x[i] = torch.cat((self.cv2[i](x[i]), self.cv3[i](x[i])), 1)
        b = x[0].shape[0]
        x_cat = torch.cat([xi.view(b, self.no, -1) for xi in x], 2)
        anchors, strides = (t.transpose(0, 1) for t in make_anchors(x))
        box, cls = x_cat.split((4 * self.reg_max, self.nc), 1)
        lt, rb = self.dfl(box).chunk(2, 1)
        x1y1, x2y2 = anchors.unsqueeze(0) - lt, anchors.unsqueeze(0) + rb
        dbox = torch.cat(((x1y1 + x2y2) / 2, x2y2 - x1y1), 1) * strides
        return torch.cat((dbox, cls.sigmoid()), 1)


class DetectionModel(nn.Module):
    """yolov8{variant}.yaml: `model` is the layer list, `model(x)` the eval output."""

    def __init__(self, variant: str = "n", nc: int = 80) -> None:
        super().__init__()
        depth, width, max_ch = SCALES[variant]

        def ch(c: int) -> int:
            return make_divisible(min(c, max_ch) * width, 8)

        def n(r: int) -> int:
            return max(round(r * depth), 1)

        p3, p4, p5 = ch(256), ch(512), ch(1024)
        self.model = nn.ModuleList([
            Conv(3, ch(64), 3, 2), Conv(ch(64), ch(128), 3, 2), C2f(ch(128), ch(128), n(3), True),
            Conv(ch(128), p3, 3, 2), C2f(p3, p3, n(6), True), Conv(p3, p4, 3, 2),
            C2f(p4, p4, n(6), True), Conv(p4, p5, 3, 2), C2f(p5, p5, n(3), True), SPPF(p5, p5, 5),
            nn.Upsample(None, 2, "nearest"), Concat(), C2f(p5 + p4, p4, n(3)),
            nn.Upsample(None, 2, "nearest"), Concat(), C2f(p4 + p3, p3, n(3)),
            Conv(p3, p3, 3, 2), Concat(), C2f(p3 + p4, p4, n(3)),
            Conv(p4, p4, 3, 2), Concat(), C2f(p4 + p5, p5, n(3)),
            Detect(nc, (p3, p4, p5)),
        ])  # fmt: skip
        self.sources = {11: (-1, 6), 14: (-1, 4), 17: (-1, 12), 20: (-1, 9), 22: (15, 18, 21)}

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        outputs: list[torch.Tensor] = []
        for i, layer in enumerate(self.model):
            if i in self.sources:
                x = layer([x if s == -1 else outputs[s] for s in self.sources[i]])
            else:
                x = layer(x)
            outputs.append(x)
        return x


def seeded_model(variant: str = "n", nc: int = 80, seed: int = 0) -> DetectionModel:
    """A DetectionModel with seeded weights and non-trivial BatchNorm statistics."""
    torch.manual_seed(seed)
    model = DetectionModel(variant, nc)
    with torch.no_grad():
        for module in model.modules():
            if isinstance(module, nn.BatchNorm2d):
                module.weight.uniform_(0.5, 1.5)
                module.bias.uniform_(-0.5, 0.5)
                module.running_mean.uniform_(-0.2, 0.2)
                module.running_var.uniform_(0.5, 2.0)
                module.num_batches_tracked.fill_(7)
    return model.eval()


def torch_nms(boxes: torch.Tensor, scores: torch.Tensor, iou: float) -> torch.Tensor:
    """torchvision.ops.nms: greedy, by descending score, drop IoU > iou."""
    order = torch.argsort(scores, descending=True, stable=True)
    x1, y1, x2, y2 = boxes.unbind(1)
    areas = (x2 - x1) * (y2 - y1)
    suppressed = torch.zeros(len(boxes), dtype=torch.bool)
    keep = []
    for index in order.tolist():
        if suppressed[index]:
            continue
        keep.append(index)
        w = (torch.minimum(x2[index], x2) - torch.maximum(x1[index], x1)).clamp(min=0)
        h = (torch.minimum(y2[index], y2) - torch.maximum(y1[index], y1)).clamp(min=0)
        inter = w * h
        suppressed |= inter / (areas[index] + areas - inter) > iou
    return torch.tensor(keep, dtype=torch.long)


def non_max_suppression(
    prediction: torch.Tensor, conf: float = 0.25, iou: float = 0.45, max_det: int = 300
) -> list[torch.Tensor]:
    """ultralytics.utils.ops.non_max_suppression (single label, class-aware)."""
    out = []
    for x in prediction.transpose(-1, -2):
        x = x[x[:, 4:].amax(1) > conf]
        box = torch.cat((x[:, :2] - x[:, 2:4] / 2, x[:, :2] + x[:, 2:4] / 2), 1)
        score, label = x[:, 4:].max(1, keepdim=True)
        x = torch.cat((box, score, label.float()), 1)[score.view(-1) > conf]
        x = x[torch.argsort(x[:, 4], descending=True, stable=True)[:30000]]
        keep = torch_nms(x[:, :4] + x[:, 5:6] * 7680, x[:, 4], iou)[:max_det]
        out.append(x[keep])
    return out
