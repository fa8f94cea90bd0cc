"""BERT's encoder layers are separate e-graph regions (a graph break after each): the
e-graph holds one layer at a time and identical layers are saturated once, which is what
keeps MiniLM's compile peak near its weights (bench/compile_memory.py, docs/compiling.md)."""

from __future__ import annotations

import numpy as np

import luminal as lm
from luminal.compiler.egraph import EGraphCompiler
from luminal.models.bert import Bert

CONFIG = dict(
    hidden_size=32,
    num_hidden_layers=4,
    num_attention_heads=4,
    intermediate_size=64,
    vocab_size=50,
)


def _encoder() -> tuple[lm.Graph, lm.GraphTensor, lm.GraphTensor, lm.GraphTensor]:
    cx = lm.Graph()
    model = Bert(cx, CONFIG)
    ids = cx.tensor(("batch", "seq"), lm.int32)
    mask = cx.tensor(("batch", "seq"), lm.int32)
    return cx, ids, mask, model(ids, mask).retrieve()


def test_each_layer_is_one_region_and_identical_layers_saturate_once() -> None:
    cx, ids, mask, out = _encoder()
    rng = np.random.default_rng(0)
    ids.set(rng.integers(1, 50, (2, 5)).astype(np.int32))
    mask.set(np.array([[1, 1, 1, 1, 1], [1, 1, 1, 0, 0]], np.int32))
    cx.execute()
    expected = out.numpy()
    cx.compile(lm.GenericCompiler())
    report = cx.compile(EGraphCompiler(rulesets=("algebra", "structure", "cpu")))
    layers = CONFIG["num_hidden_layers"]
    assert report.regions >= layers, report
    # the first layer shares its region with the embeddings; the others are one program,
    # saturated once
    assert report.distinct_regions == 2, report
    cx.execute()
    np.testing.assert_allclose(out.numpy(), expected, rtol=1e-4, atol=1e-5)
