"""Object detection with YOLOv8, compiled for the CPU; boxes drawn into a PNG.

    python -m luminal.examples.detect image.png --weights yolov8n.safetensors
        [--out detections.png] [--size 640] [--conf 0.25] [--iou 0.45] [--no-compile]

`--weights` is a safetensors file of ultralytics' DetectionModel state dict (any variant;
the variant and class count are read from the shapes). ultralytics ships `.pt` pickles;
convert once where ultralytics is installed:

    from safetensors.torch import save_file
    from ultralytics import YOLO
    save_file(YOLO("yolov8n.pt").model.float().state_dict(), "yolov8n.safetensors")

The image is letterboxed to `--size` (a multiple of 32) as ultralytics does, the graph is
built, compiled with `lm.CPUCompiler()` (BatchNorm folded into the convolutions by the
generic passes) and run, `lm.models.yolo.postprocess` applies NMS, and the boxes are
mapped back to the image and drawn with matplotlib. COCO class names label the boxes
when the model has 80 classes.
"""

from __future__ import annotations

import argparse
import time
from collections.abc import Sequence
from pathlib import Path

import numpy as np

import luminal as lm
from luminal.models.yolo import YOLOv8, letterbox, postprocess, scale_boxes

COCO_NAMES = (
    "person", "bicycle", "car", "motorcycle", "airplane", "bus", "train", "truck", "boat",
    "traffic light", "fire hydrant", "stop sign", "parking meter", "bench", "bird", "cat",
    "dog", "horse", "sheep", "cow", "elephant", "bear", "zebra", "giraffe", "backpack",
    "umbrella", "handbag", "tie", "suitcase", "frisbee", "skis", "snowboard", "sports ball",
    "kite", "baseball bat", "baseball glove", "skateboard", "surfboard", "tennis racket",
    "bottle", "wine glass", "cup", "fork", "knife", "spoon", "bowl", "banana", "apple",
    "sandwich", "orange", "broccoli", "carrot", "hot dog", "pizza", "donut", "cake", "chair",
    "couch", "potted plant", "bed", "dining table", "toilet", "tv", "laptop", "mouse",
    "remote", "keyboard", "cell phone", "microwave", "oven", "toaster", "sink", "refrigerator",
    "book", "clock", "vase", "scissors", "teddy bear", "hair drier", "toothbrush",
)  # fmt: skip


def read_image(path: str | Path) -> np.ndarray:
    """An (H, W, 3) uint8 RGB image (PNG, JPEG, ... through Pillow)."""
    from PIL import Image

    with Image.open(path) as image:
        return np.asarray(image.convert("RGB"))


def detect(
    image: np.ndarray,
    weights: str | Path,
    size: int = 640,
    conf: float = 0.25,
    iou: float = 0.45,
    compile: bool = True,
) -> tuple[np.ndarray, int]:
    """Detections (n, 6: x1, y1, x2, y2, confidence, class) in the image's pixels, and
    the number of classes the model predicts."""
    batch, scale, padding = letterbox(image, size)
    cx = lm.Graph()
    model = YOLOv8.from_pretrained(weights, cx)
    images = cx.tensor(batch.shape, name="images").set(batch)
    raw = model(images).retrieve()
    if compile:
        start = time.perf_counter()
        cx.compile(lm.CPUCompiler())
        print(f"compiled in {time.perf_counter() - start:.1f} s")
    start = time.perf_counter()
    cx.execute()
    print(f"inference {1e3 * (time.perf_counter() - start):.1f} ms")
    found = postprocess(raw.numpy(), conf, iou)[0]
    return scale_boxes(found, scale, padding, image.shape[:2]), model.nc


def draw(image: np.ndarray, detections: np.ndarray, path: str | Path, names: Sequence[str]):
    """Save the image with one labelled rectangle per detection, at its own resolution."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.patches import Rectangle

    height, width = image.shape[:2]
    figure = plt.figure(figsize=(width / 100, height / 100), dpi=100)
    axes = figure.add_axes((0, 0, 1, 1))
    axes.imshow(image)
    axes.set_axis_off()
    colors = plt.get_cmap("tab20")
    for x1, y1, x2, y2, score, label in detections:
        color = colors(int(label) % 20)
        axes.add_patch(Rectangle((x1, y1), x2 - x1, y2 - y1, fill=False, color=color, lw=2))
        name = names[int(label)] if int(label) < len(names) else str(int(label))
        axes.text(x1, y1, f"{name} {score:.2f}", color="white", fontsize=8, va="bottom",
                  bbox={"facecolor": color, "pad": 1, "lw": 0})  # fmt: skip
    figure.savefig(path, dpi=100)
    plt.close(figure)


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(description="YOLOv8 object detection with luminal")
    p.add_argument("image", help="input image (PNG, JPEG, ...)")
    p.add_argument("--weights", required=True, help="ultralytics state dict as .safetensors")
    p.add_argument("--out", default=None, help="output PNG (default: <image>_detections.png)")
    p.add_argument("--size", type=int, default=640, help="network input size (multiple of 32)")
    p.add_argument("--conf", type=float, default=0.25, help="confidence threshold")
    p.add_argument("--iou", type=float, default=0.45, help="NMS IoU threshold")
    p.add_argument("--no-compile", action="store_true", help="run the reference runtime")
    return p


def main(argv: Sequence[str] | None = None) -> int:
    args = parser().parse_args(argv)
    image = read_image(args.image)
    found, classes = detect(
        image, args.weights, args.size, args.conf, args.iou, not args.no_compile
    )
    names = COCO_NAMES if classes == len(COCO_NAMES) else ()
    for x1, y1, x2, y2, score, label in found:
        name = names[int(label)] if names else str(int(label))
        print(f"{name:>14} {score:.2f}  ({x1:.0f}, {y1:.0f}) - ({x2:.0f}, {y2:.0f})")
    out = args.out or str(Path(args.image).with_suffix("")) + "_detections.png"
    draw(image, found, out, names)
    print(f"{len(found)} detections drawn into {out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
