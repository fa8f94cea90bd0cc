"""Basic layers against their torch.nn counterparts with copied weights: shapes, symbolic
batch dims run at two sizes, error messages and initialisation."""

from __future__ import annotations

from collections.abc import Callable, Sequence

import numpy as np
import pytest
import torch
from transformers.models.llama.modeling_llama import LlamaRMSNorm

import luminal as lm
from tests.conftest import assert_matches_torch, uniform

ATOL, RTOL = 1e-5, 1e-3


def _randomize(module: torch.nn.Module, seed: int = 0) -> torch.nn.Module:
    """Non-trivial weights everywhere (norm weights start as ones/zeros)."""
    generator = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for p in module.parameters():
            p.copy_(torch.rand(p.shape, generator=generator) * 2 - 1)
    return module.eval()


def _check(
    make: Callable[[lm.Graph], lm.nn.Module],
    torch_module: torch.nn.Module,
    input_shape: Sequence[str | int],
    sizes: Sequence[Sequence[int]],
    load: bool = True,
) -> None:
    """Build once with `input_shape` (maybe symbolic), run at each concrete size."""
    cx = lm.Graph()
    module = make(cx)
    if load:
        module.load_state_dict(torch_module.state_dict())
    x = cx.tensor(tuple(input_shape))
    out = module(x).retrieve()
    rng = np.random.default_rng(0)
    for size in sizes:
        data = uniform(rng, size)
        x.set(data)
        cx.execute()
        with torch.no_grad():
            expected = torch_module(torch.from_numpy(data))
        assert_matches_torch(out.numpy(), expected, atol=ATOL, rtol=RTOL)


# ---------------------------------------------------------------- Linear
@pytest.mark.parametrize("bias", [True, False])
def test_linear_matches_torch_with_symbolic_batch(bias):
    torch.manual_seed(0)
    theirs = torch.nn.Linear(8, 5, bias=bias).eval()
    _check(lambda cx: lm.nn.Linear(cx, 8, 5, bias=bias), theirs, ("batch", 8), [(3, 8), (7, 8)])


@pytest.mark.parametrize("shape", [(8,), (2, 3, 8), (2, 1, 2, 2, 8), (2, 1, 2, 2, 1, 3, 8)])
def test_linear_any_leading_dims(shape):
    torch.manual_seed(1)
    theirs = torch.nn.Linear(8, 4).eval()
    _check(lambda cx: lm.nn.Linear(cx, 8, 4), theirs, shape, [shape])


def test_linear_parameters_follow_torch_names_and_shapes():
    cx = lm.Graph()
    ours = lm.nn.Linear(cx, 784, 512)
    theirs = torch.nn.Linear(784, 512)
    assert {n: tuple(t.shape) for n, t in ours.named_parameters()} == {
        n: tuple(p.shape) for n, p in theirs.named_parameters()
    }
    assert lm.nn.Linear(cx, 3, 2, bias=False).bias is None


def test_linear_wrong_feature_size_names_layer_and_shapes():
    cx = lm.Graph()
    layer = lm.nn.Linear(cx, 784, 512)
    before = cx.num_nodes
    with pytest.raises(lm.ShapeError, match=r"Linear\(in_features=784, out_features=512\)") as e:
        layer(cx.tensor((2, 100)))
    assert "(2, 100)" in str(e.value) and "784" in str(e.value)
    assert cx.num_nodes == before + 1  # only the input added


def test_load_state_dict_missing_or_misshaped_raises_shape_error():
    cx = lm.Graph()
    layer = lm.nn.Linear(cx, 4, 3)
    theirs = torch.nn.Linear(4, 3).state_dict()
    with pytest.raises(lm.ShapeError, match="missing"):
        layer.load_state_dict({"weight": theirs["weight"]})
    with pytest.raises(lm.ShapeError, match="weight"):
        layer.load_state_dict({"weight": torch.zeros(3, 5), "bias": theirs["bias"]})


def test_linear_init_is_kaiming_uniform_and_seeded():
    lm.nn.manual_seed(123)
    a = lm.nn.Linear(lm.Graph(), 64, 32).state_dict()
    lm.nn.manual_seed(123)
    b = lm.nn.Linear(lm.Graph(), 64, 32).state_dict()
    for name in ("weight", "bias"):
        np.testing.assert_array_equal(a[name], b[name])
        assert np.abs(a[name]).max() <= 1 / 8 and np.abs(a[name]).max() > 0.1
        assert a[name].dtype == np.float32


def test_sequential_loads_torch_state_dict():
    torch.manual_seed(2)
    theirs = torch.nn.Sequential(
        torch.nn.Linear(6, 10), torch.nn.ReLU(), torch.nn.Linear(10, 3), torch.nn.Softmax(-1)
    ).eval()

    def make(cx: lm.Graph) -> lm.nn.Module:
        return lm.nn.Sequential(
            cx, lm.nn.Linear(cx, 6, 10), lm.nn.ReLU(), lm.nn.Linear(cx, 10, 3), lm.nn.Softmax(-1)
        )

    _check(make, theirs, ("batch", 6), [(4, 6), (1, 6)])


# ---------------------------------------------------------------- Embedding
def test_embedding_matches_torch_with_symbolic_shape():
    torch.manual_seed(3)
    theirs = torch.nn.Embedding(20, 6)
    cx = lm.Graph()
    ours = lm.nn.Embedding(cx, 20, 6)
    ours.load_state_dict(theirs.state_dict())
    ids = cx.tensor(("batch", "seq"), dtype=lm.int32)
    out = ours(ids).retrieve()
    rng = np.random.default_rng(0)
    for shape in [(2, 5), (3, 1)]:
        data = rng.integers(0, 20, size=shape, dtype=np.int32)
        ids.set(data)
        cx.execute()
        assert_matches_torch(out.numpy(), theirs(torch.from_numpy(data).long()), atol=0, rtol=0)


def test_embedding_rejects_float_ids_and_zeroes_padding_row():
    cx = lm.Graph()
    table = lm.nn.Embedding(cx, 10, 4, padding_idx=-1)
    assert table.padding_idx == 9
    np.testing.assert_array_equal(table.state_dict()["weight"][9], 0)
    with pytest.raises(lm.DTypeError, match=r"Embedding\(10, 4\)"):
        table(cx.tensor((3,)))


# ---------------------------------------------------------------- norms
@pytest.mark.parametrize(
    "kwargs",
    [
        {},
        {"bias": False},
        {"elementwise_affine": False},
        {"eps": 1e-3},
    ],
)
def test_layer_norm_matches_torch(kwargs):
    theirs = _randomize(torch.nn.LayerNorm(16, **kwargs))
    _check(lambda cx: lm.nn.LayerNorm(cx, 16, **kwargs), theirs, ("b", 3, 16), [(2, 3, 16)])


def test_layer_norm_over_several_dims():
    theirs = _randomize(torch.nn.LayerNorm((3, 8)))
    _check(lambda cx: lm.nn.LayerNorm(cx, (3, 8)), theirs, ("b", 3, 8), [(2, 3, 8), (5, 3, 8)])


def test_layer_norm_wrong_shape_names_layer():
    cx = lm.Graph()
    with pytest.raises(lm.ShapeError, match=r"LayerNorm\(\(16,\)\).*\(2, 15\)"):
        lm.nn.LayerNorm(cx, 16)(cx.tensor((2, 15)))


@pytest.mark.parametrize("eps", [1e-6, 1e-5])
def test_rms_norm_matches_torch_and_llama(eps):
    theirs = _randomize(torch.nn.RMSNorm(32, eps=eps))
    _check(lambda cx: lm.nn.RMSNorm(cx, 32, eps=eps), theirs, ("b", "s", 32), [(2, 4, 32)])
    llama = LlamaRMSNorm(32, eps=eps)
    llama.load_state_dict(theirs.state_dict())
    _check(lambda cx: lm.nn.RMSNorm(cx, 32, eps=eps), llama, ("b", "s", 32), [(1, 3, 32)])


def test_rms_norm_default_eps_is_llamas():
    cx = lm.Graph()
    norm = lm.nn.RMSNorm(cx, 8)
    assert norm.eps == 1e-6
    np.testing.assert_array_equal(norm.state_dict()["weight"], np.ones(8, np.float32))


# ---------------------------------------------------------------- activations and dropout
@pytest.mark.parametrize(
    "ours, theirs",
    [
        (lambda: lm.nn.ReLU(), torch.nn.ReLU()),
        (lambda: lm.nn.GELU(), torch.nn.GELU()),
        (lambda: lm.nn.GELU(approximate="tanh"), torch.nn.GELU(approximate="tanh")),
        (lambda: lm.nn.SiLU(), torch.nn.SiLU()),
        (lambda: lm.nn.Sigmoid(), torch.nn.Sigmoid()),
        (lambda: lm.nn.Tanh(), torch.nn.Tanh()),
        (lambda: lm.nn.Softmax(), torch.nn.Softmax(dim=-1)),
        (lambda: lm.nn.Softmax(dim=1), torch.nn.Softmax(dim=1)),
        (lambda: lm.nn.Dropout(0.3), torch.nn.Dropout(0.3).eval()),
    ],
    ids=["relu", "gelu", "gelu_tanh", "silu", "sigmoid", "tanh", "softmax", "softmax1", "drop"],
)
def test_activations_match_torch(ours, theirs):
    _check(lambda cx: ours(), theirs, ("batch", 3, 5), [(2, 3, 5), (4, 3, 5)], load=False)


def test_parameter_free_modules_take_an_optional_graph():
    cx = lm.Graph()
    assert lm.nn.GELU(cx, approximate="tanh").approximate == "tanh"
    assert lm.nn.Dropout(cx, 0.2).p == 0.2
    assert lm.nn.Softmax(cx, dim=0).dim == 0
    assert lm.nn.ReLU().state_dict() == {}
    with pytest.raises(lm.LuminalError, match="Dropout"):
        lm.nn.Dropout(1.5)
    with pytest.raises(lm.LuminalError, match="GELU"):
        lm.nn.GELU(approximate="fast")
