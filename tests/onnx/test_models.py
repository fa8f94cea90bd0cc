"""Models exported by torch.onnx.export, run by luminal (reference and compiled) and by
onnxruntime on the same inputs: equal within atol 1e-4, rtol 1e-3."""

from __future__ import annotations

import numpy as np
import onnxruntime as ort
import pytest
import torch
from transformers import BertConfig, BertModel

import luminal as lm
from tests.onnx.export import export_onnx

ATOL, RTOL = 1e-4, 1e-3


def onnxruntime_outputs(model: bytes, feeds: dict[str, np.ndarray]) -> list[np.ndarray]:
    options = ort.SessionOptions()
    options.intra_op_num_threads = 1
    session = ort.InferenceSession(model, options, providers=["CPUExecutionProvider"])
    return session.run(None, feeds)


def luminal_outputs(model: bytes, feeds: dict[str, np.ndarray], compiled: bool) -> list:
    cx = lm.Graph()
    inputs, outputs = lm.onnx.load(model, cx)
    for name, array in feeds.items():
        inputs[name].set(array)
    if compiled:
        cx.compile(lm.CPUCompiler())
    cx.execute()
    return [tensor.numpy() for tensor in outputs.values()]


def check(model: bytes, feeds: dict[str, np.ndarray], compiled: bool) -> None:
    expected = onnxruntime_outputs(model, feeds)
    actual = luminal_outputs(model, feeds, compiled)
    assert len(actual) == len(expected)
    for got, want in zip(actual, expected, strict=True):
        assert got.shape == want.shape
        np.testing.assert_allclose(got, want, atol=ATOL, rtol=RTOL)


class BertEncoder(torch.nn.Module):
    """BertModel called by keyword (its positional signature has changed across versions)."""

    def __init__(self, config: BertConfig) -> None:
        super().__init__()
        self.bert = BertModel(config, add_pooling_layer=False)

    def forward(self, input_ids: torch.Tensor, attention_mask: torch.Tensor) -> torch.Tensor:
        return self.bert(input_ids=input_ids, attention_mask=attention_mask)[0]


class SmallCNN(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.body = torch.nn.Sequential(
            torch.nn.Conv2d(3, 8, 3, padding=1),
            torch.nn.BatchNorm2d(8),
            torch.nn.ReLU(),
            torch.nn.MaxPool2d(2),
            torch.nn.Conv2d(8, 16, 3, stride=2, padding=1, groups=2),
            torch.nn.BatchNorm2d(16),
            torch.nn.ReLU(),
            torch.nn.AdaptiveAvgPool2d(1),
            torch.nn.Flatten(),
            torch.nn.Linear(16, 10),
        )

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.body(x)


class TinyDecoder(torch.nn.Module):
    """A causal transformer decoder over token ids (GPT-style, cross-attending a memory)."""

    def __init__(self) -> None:
        super().__init__()
        self.embed = torch.nn.Embedding(50, 32)
        layer = torch.nn.TransformerDecoderLayer(32, 4, 64, dropout=0.0, batch_first=True)
        self.decoder = torch.nn.TransformerDecoder(layer, 2)
        self.head = torch.nn.Linear(32, 50)

    def forward(self, tokens: torch.Tensor, memory: torch.Tensor) -> torch.Tensor:
        steps = tokens.shape[1]
        mask = torch.triu(torch.full((steps, steps), float("-inf")), diagonal=1)
        hidden = self.decoder(self.embed(tokens), memory, tgt_mask=mask)
        return self.head(hidden)


class BasicBlock(torch.nn.Module):
    """ResNet's two 3x3 convolutions with BatchNorm and the identity (or strided 1x1)
    shortcut added before the last ReLU."""

    def __init__(self, channels: int, stride: int) -> None:
        super().__init__()
        self.conv1 = torch.nn.Conv2d(channels, channels, 3, stride, 1, bias=False)
        self.bn1 = torch.nn.BatchNorm2d(channels)
        self.conv2 = torch.nn.Conv2d(channels, channels, 3, 1, 1, bias=False)
        self.bn2 = torch.nn.BatchNorm2d(channels)
        self.shortcut = torch.nn.Identity()
        if stride != 1:
            self.shortcut = torch.nn.Sequential(
                torch.nn.Conv2d(channels, channels, 1, stride, bias=False),
                torch.nn.BatchNorm2d(channels),
            )

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = torch.relu(self.bn1(self.conv1(x)))
        return torch.relu(self.bn2(self.conv2(y)) + self.shortcut(x))


class TinyResNet(torch.nn.Module):
    """ResNet-18's structure at 128 channels on 32x32 images: the 16x16 block's 3x3
    convolutions take Winograd F(4x4) under algorithm='auto', the 8x8 one's F(2x2), the
    strided ones im2col (luminal/nn/winograd.py's rule)."""

    def __init__(self) -> None:
        super().__init__()
        self.stem = torch.nn.Sequential(
            torch.nn.Conv2d(3, 128, 3, 2, 1, bias=False),
            torch.nn.BatchNorm2d(128),
            torch.nn.ReLU(),
        )
        self.blocks = torch.nn.Sequential(BasicBlock(128, 1), BasicBlock(128, 2))
        self.head = torch.nn.Linear(128, 10)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.head(self.blocks(self.stem(x)).mean((2, 3)))


def _seeded_bn(model: torch.nn.Module) -> torch.nn.Module:
    """Non-trivial running statistics, so BatchNorm is really tested."""
    generator = torch.Generator().manual_seed(1)
    for module in model.modules():
        if isinstance(module, torch.nn.BatchNorm2d):
            module.running_mean.copy_(torch.randn(module.num_features, generator=generator))
            module.running_var.copy_(torch.rand(module.num_features, generator=generator) + 0.5)
    return model


@pytest.mark.parametrize("compiled", [False, True], ids=["reference", "compiled"])
def test_mlp(compiled: bool) -> None:
    torch.manual_seed(0)
    model = torch.nn.Sequential(
        torch.nn.Linear(16, 32), torch.nn.GELU(), torch.nn.Linear(32, 4), torch.nn.Softmax(-1)
    )
    x = np.random.default_rng(0).standard_normal((5, 16)).astype(np.float32)
    onnx_model = export_onnx(model, (torch.from_numpy(x),), ["x"], {"x": {0: "batch"}})
    check(onnx_model, {"x": x}, compiled)


@pytest.mark.parametrize("compiled", [False, True], ids=["reference", "compiled"])
def test_cnn_with_batchnorm(compiled: bool) -> None:
    torch.manual_seed(0)
    model = _seeded_bn(SmallCNN())
    x = np.random.default_rng(0).standard_normal((2, 3, 16, 16)).astype(np.float32)
    onnx_model = export_onnx(model, (torch.from_numpy(x),), ["images"], {})
    check(onnx_model, {"images": x}, compiled)


@pytest.mark.parametrize("compiled", [False, True], ids=["reference", "compiled"])
def test_resnet_blocks(compiled: bool) -> None:
    torch.manual_seed(0)
    model = _seeded_bn(TinyResNet()).eval()
    # batch 3: 48 tiles of 4x4 in 16x16 maps, what "auto" needs for Winograd
    x = np.random.default_rng(0).standard_normal((3, 3, 32, 32)).astype(np.float32)
    onnx_model = export_onnx(model, (torch.from_numpy(x),), ["images"], {})
    cx = lm.Graph()
    lm.onnx.load(onnx_model, cx)
    labels = [str(getattr(n.op, "label", "")).split("#")[0] for n in cx.nodes.values()]
    transforms = [label for label in labels if label == "winograd_BT"]
    assert len(transforms) == 3  # the three stride-1 3x3 convolutions of 128 channels
    check(onnx_model, {"images": x}, compiled)


@pytest.mark.parametrize("compiled", [False, True], ids=["reference", "compiled"])
def test_bert_with_attention_mask(compiled: bool) -> None:
    torch.manual_seed(0)
    config = BertConfig(
        vocab_size=100,
        hidden_size=32,
        num_hidden_layers=2,
        num_attention_heads=4,
        intermediate_size=64,
        max_position_embeddings=64,
    )
    model = BertEncoder(config)
    rng = np.random.default_rng(0)
    ids = rng.integers(0, 100, (2, 12)).astype(np.int64)
    mask = np.ones((2, 12), np.int64)
    mask[1, 8:] = 0  # the second sequence is padded
    args = (torch.from_numpy(ids), torch.from_numpy(mask))
    dynamic = {"input_ids": {0: "batch", 1: "seq"}, "attention_mask": {0: "batch", 1: "seq"}}
    onnx_model = export_onnx(model, args, ["input_ids", "attention_mask"], dynamic)
    check(onnx_model, {"input_ids": ids, "attention_mask": mask}, compiled)


@pytest.mark.parametrize("compiled", [False, True], ids=["reference", "compiled"])
def test_transformer_decoder(compiled: bool) -> None:
    torch.manual_seed(0)
    model = TinyDecoder()
    rng = np.random.default_rng(0)
    tokens = rng.integers(0, 50, (2, 7)).astype(np.int64)
    memory = rng.standard_normal((2, 5, 32)).astype(np.float32)
    args = (torch.from_numpy(tokens), torch.from_numpy(memory))
    onnx_model = export_onnx(model, args, ["tokens", "memory"], {})
    check(onnx_model, {"tokens": tokens, "memory": memory}, compiled)
