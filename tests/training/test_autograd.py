"""Autograd against torch.autograd.grad of out.sum(): every primitive, every high-level op,
chains of views, strided and dilated convolutions, pooling, embeddings, attention, a
LeNet, and the gradient graph compiled with the CPU backend."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np
import pytest
import torch
import torch.nn.functional as F

import luminal as lm
from luminal import ops
from tests.conftest import uniform

ATOL, RTOL = 1e-4, 1e-3


def _t(array: np.ndarray, grad: bool = False) -> torch.Tensor:
    return torch.tensor(np.array(array), requires_grad=grad)


def grads_of(build: Callable[..., lm.GraphTensor], arrays: Sequence[np.ndarray]) -> list:
    """Gradients of build(*inputs).sum() with respect to the float inputs."""
    cx = lm.Graph()
    inputs = [cx.tensor(a.shape, dtype=lm.DType(str(a.dtype))).set(a) for a in arrays]
    params = [t for t in inputs if t.dtype == lm.float32]
    grads = cx.compile(lm.training.Autograd(params, build(*inputs).sum()))
    for g in grads:
        g.retrieve()
    cx.execute()
    return [g.numpy() for g in grads]


def torch_grads(fn: Callable[..., torch.Tensor], arrays: Sequence[np.ndarray]) -> list:
    tensors = [_t(a, grad=a.dtype == np.float32) for a in arrays]
    params = [t for t in tensors if t.requires_grad]
    grads = torch.autograd.grad(fn(*tensors).sum(), params, allow_unused=True)
    return [torch.zeros_like(p) if g is None else g for p, g in zip(params, grads, strict=True)]


def check(ours: Callable, theirs: Callable, *arrays: np.ndarray) -> None:
    for g, e in zip(grads_of(ours, arrays), torch_grads(theirs, arrays), strict=True):
        assert g.shape == tuple(e.shape), (g.shape, e.shape)
        np.testing.assert_allclose(g, e.numpy(), atol=ATOL, rtol=RTOL)


def away_from_zero(rng: np.random.Generator, shape: Sequence[int], low: float = 0.3) -> np.ndarray:
    """Uniform in [-2, -low] U [low, 2]: no kinks (abs, relu, sign) and distinct values."""
    magnitude = rng.uniform(low, 2.0, size=tuple(shape))
    return (magnitude * rng.choice([-1.0, 1.0], size=tuple(shape))).astype(np.float32)


def positive(rng: np.random.Generator, shape: Sequence[int]) -> np.ndarray:
    return rng.uniform(0.5, 2.0, size=tuple(shape)).astype(np.float32)


# ---------------------------------------------------------------- primitives
def _primitive(op: ops.Op) -> Callable[..., lm.GraphTensor]:
    return lambda *xs: xs[0].graph.add_node(op, list(xs))


PRIMITIVES = {
    "Log2": (_primitive(ops.Log2()), torch.log2, [positive]),
    "Exp2": (_primitive(ops.Exp2()), torch.exp2, [uniform]),
    "Sin": (_primitive(ops.Sin()), torch.sin, [uniform]),
    "Sqrt": (_primitive(ops.Sqrt()), torch.sqrt, [positive]),
    "Recip": (_primitive(ops.Recip()), torch.reciprocal, [away_from_zero]),
    "Add": (_primitive(ops.Add()), torch.add, [uniform, uniform]),
    "Mul": (_primitive(ops.Mul()), torch.mul, [uniform, uniform]),
    "LessThan": (
        lambda a, b: _primitive(ops.LessThan())(a, b) * a,
        lambda a, b: (a < b).float() * a,
        [uniform, uniform],
    ),
    "Contiguous": (
        lambda a: _primitive(ops.Contiguous())(a.permute(1, 0)) * a.T,
        lambda a: a.T * a.T,
        [uniform],
    ),
    "GraphBreak": (lambda a: a.graph_break().sin(), torch.sin, [uniform]),
    "Cast": (
        lambda a: (a * 3).cast(lm.float16).cast(lm.float32) * a,
        lambda a: (a * 3).half().float() * a,
        [uniform],
    ),
}


@pytest.mark.parametrize("name", list(PRIMITIVES))
def test_primitive_gradients(name):
    ours, theirs, makers = PRIMITIVES[name]
    rng = np.random.default_rng(1)
    arrays = [make(rng, (3, 4)) for make in makers]
    check(ours, theirs, *arrays)


def test_mod_gradients_both_sides():
    rng = np.random.default_rng(2)
    a = rng.uniform(-5, 5, (3, 4)).astype(np.float32)
    b = away_from_zero(rng, (3, 4), low=0.7)
    a = np.where(np.abs(np.remainder(a, b)) < 0.05, a + 0.2, a).astype(np.float32)
    check(lambda x, y: x % y, torch.remainder, a, b)


def test_reduce_primitives_and_max_ties_are_shared_like_amax():
    rng = np.random.default_rng(3)
    check(lambda a: a.sum(1) * a.sum(0).sum(), lambda a: a.sum(1) * a.sum(), uniform(rng, (3, 4)))
    check(lambda a: a.max(0).sin(), lambda a: torch.amax(a, 0).sin(), uniform(rng, (3, 4)))
    ties = np.array([[1.0, 3.0, 3.0, 0.5], [2.0, 2.0, 2.0, 2.0], [-1, -1, -3, -2]], np.float32)
    check(lambda a: a.max(1) * a.max(1), lambda a: torch.amax(a, 1) ** 2, ties)


def test_max_over_a_padded_axis_shares_ties_with_the_padding_like_amax():
    """A max whose edge pads the reduced axis (relu is max over (x, 0)): a maximum of 0
    ties with the padded zeros, each getting an even share (torch.amax of F.pad), padding
    on two axes at once included."""
    x = np.array([[-1.0, -2.0, 0.0], [0.0, 3.0, 3.0], [-0.5, 0.0, -1.0]], np.float32)

    def ours(a):
        p = a.pad([(1, 0), (2, 1)])
        return (p.max(1) * p.max(1)).sum() + p.max(0).sin().sum()

    def theirs(a):
        p = F.pad(a, (2, 1, 1, 0))
        return (torch.amax(p, 1) ** 2).sum() + torch.amax(p, 0).sin().sum()

    check(ours, theirs, x)
    check(lambda a: a.relu() * a, lambda a: torch.maximum(a, torch.zeros(())) * a, x)


def test_relu_gradient_keeps_no_buffer_for_the_padded_zero():
    """relu's gradient is computed for x only: no node of the gradient graph holds the
    (x, 0) pair's trailing axis of 2, which would double every relu gradient buffer."""
    cx = lm.Graph()
    x = cx.tensor((4, 5)).set(np.linspace(-1, 1, 20, dtype=np.float32).reshape(4, 5))
    before = set(cx.nodes)
    (grad,) = cx.compile(lm.training.Autograd([x], (x.relu() * 3.0).sum()))
    added = [cx.nodes[n] for n in set(cx.nodes) - before]
    assert not [n for n in added if tuple(n.shape)[-1:] == (lm.shape.expr.sym(2),)]
    grad.retrieve()
    cx.execute()
    np.testing.assert_allclose(grad.numpy(), 3.0 * (np.linspace(-1, 1, 20) > 0).reshape(4, 5))


def test_gather_and_scatter_primitives():
    rng = np.random.default_rng(4)
    table = uniform(rng, (5, 3))
    ids = np.array([[0, 2], [2, 4], [0, 0]], np.int32)
    check(lambda t, i: t.gather(i).sin(), lambda t, i: t[i.long()].sin(), table, ids)
    base, updates = uniform(rng, (5, 3)), uniform(rng, (4, 3))
    flat = np.array([1, 3, 1, 0], np.int32)

    def scatter(b, i, u):
        return b.graph.add_node(ops.Scatter(), [b, i, u]).sin()

    check(scatter, lambda b, i, u: b.index_add(0, i.long(), u).sin(), base, flat, updates)


def test_sources_are_leaves_and_unconnected_params_get_zeros():
    cx = lm.Graph()
    x = cx.tensor((2, 3)).set(np.ones((2, 3), np.float32))
    unused = cx.tensor((4,)).set(np.ones(4, np.float32))
    ramp = cx.arange(3).cast(lm.float32)
    loss = (x * ramp + cx.constant(2.0)).sum()
    before = set(cx.nodes.items())
    gx, gu = cx.compile(lm.training.Autograd([x, unused], loss))
    assert before <= set(cx.nodes.items())  # the pass only adds nodes
    gx.retrieve(), gu.retrieve()
    cx.execute()
    np.testing.assert_array_equal(gx.numpy(), np.tile([0, 1, 2], (2, 1)))
    np.testing.assert_array_equal(gu.numpy(), np.zeros(4))


def test_non_scalar_loss_is_summed_and_views_of_params_work():
    rng = np.random.default_rng(5)
    data = uniform(rng, (3, 4))
    cx = lm.Graph()
    x = cx.tensor((3, 4)).set(data)
    (g, gt) = cx.compile(lm.training.Autograd([x, x.T], (x * x).permute(1, 0)))
    g.retrieve(), gt.retrieve()
    cx.execute()
    np.testing.assert_allclose(g.numpy(), 2 * data, rtol=1e-6)
    np.testing.assert_allclose(gt.numpy(), 2 * data.T, rtol=1e-6)


def test_function_is_not_differentiable_and_graph_survives():
    cx = lm.Graph()
    x = cx.tensor((3,)).set(np.ones(3, np.float32))
    f = cx.add_node(ops.Function("double", lambda a: 2 * a), [x], shape=(3,))
    loss = (f * x).sum()
    count = cx.num_nodes
    with pytest.raises(lm.LuminalError, match="Function 'double'.*not differentiable"):
        cx.compile(lm.training.Autograd([x], loss))
    assert cx.num_nodes == count
    x.print("side effects are not on the path")
    (g,) = cx.compile(lm.training.Autograd([x], (x * x).sum()))
    g.retrieve()
    cx.execute()
    np.testing.assert_allclose(g.numpy(), [2, 2, 2])


@dataclass(frozen=True)
class _Cube:
    """x^3 in numpy, with its VJP (3 x^2 times the output's gradient) for autograd."""

    def __call__(self, x: np.ndarray) -> np.ndarray:
        return x**3

    def vjp(self, ctx):  # noqa: ANN001, ANN201
        x = ctx.input(0)
        return (ctx.grad * x * x * 3.0,)


CUBE_C = """
void cube(float* out, const float* x, const long long* numel) {
    for (long long i = 0; i < numel[0]; i++) out[i] = x[i] * x[i] * x[i];
}
"""


def test_a_custom_kernel_whose_reference_has_a_vjp_is_differentiable(rng):
    """`vjp` on a custom kernel's reference is its rule (`luminal/custom.py`): the
    gradient through it equals torch's, compiled; without one the error names it."""
    data = rng.uniform(-2, 2, (3, 5)).astype(np.float32)
    cx = lm.Graph()
    x = cx.tensor(data.shape).set(data)
    y = lm.custom_kernel([x], CUBE_C, data.shape, reference=_Cube())
    (g,) = cx.compile(lm.training.Autograd([x], (y * x).sum()))
    g.retrieve()
    cx.compile(lm.CPUCompiler())
    cx.execute()
    t = torch.from_numpy(data).requires_grad_()
    (t**3 * t).sum().backward()
    np.testing.assert_allclose(g.numpy(), t.grad.numpy(), rtol=1e-5, atol=1e-5)
    plain = lm.Graph()
    z = plain.tensor(data.shape).set(data)
    w = lm.custom_kernel([z], CUBE_C, data.shape)
    with pytest.raises(lm.LuminalError, match="cube.*not differentiable"):
        plain.compile(lm.training.Autograd([z], w.sum()))


def test_bad_arguments_raise():
    cx = lm.Graph()
    x = cx.tensor((3, 4))
    ids = cx.tensor((3,), dtype=lm.int32)
    with pytest.raises(lm.DTypeError, match="params\\[0\\].*int32"):
        cx.compile(lm.training.Autograd([ids], x.sum()))
    with pytest.raises(lm.LuminalError, match="slice, pad or broadcast"):
        cx.compile(lm.training.Autograd([x[1:]], x.sum()))
    with pytest.raises(lm.GraphError, match="another Graph"):
        cx.compile(lm.training.Autograd([lm.Graph().tensor(3)], x.sum()))


# ---------------------------------------------------------------- high-level ops
def _pos(rng):
    return positive(rng, (3, 4))


def _nz(rng):
    return away_from_zero(rng, (3, 4))


def _u(rng):
    return uniform(rng, (3, 4))


UNARY = {
    "exp": (lambda a: a.exp(), torch.exp, _u),
    "log": (lambda a: a.log(), torch.log, _pos),
    "sin": (lambda a: a.sin(), torch.sin, _u),
    "cos": (lambda a: a.cos(), torch.cos, _u),
    "sqrt": (lambda a: a.sqrt(), torch.sqrt, _pos),
    "reciprocal": (lambda a: a.reciprocal(), torch.reciprocal, _nz),
    "square": (lambda a: a.square(), torch.square, _u),
    "abs": (lambda a: a.abs(), torch.abs, _nz),
    "sign": (lambda a: a.sign() * a, lambda a: a.sign() * a, _nz),
    "sigmoid": (lambda a: a.sigmoid(), torch.sigmoid, _u),
    "silu": (lambda a: a.silu(), F.silu, _u),
    "tanh": (lambda a: a.tanh(), torch.tanh, _u),
    "gelu_tanh": (lambda a: a.gelu(), lambda a: F.gelu(a, approximate="tanh"), _u),
    "gelu_exact": (lambda a: a.gelu(approximate="none"), F.gelu, _u),
    "erf": (lambda a: a.erf(), torch.erf, _u),
    "relu": (lambda a: a.relu(), torch.relu, _nz),
    "leaky_relu": (lambda a: a.leaky_relu(0.1), lambda a: F.leaky_relu(a, 0.1), _nz),
    "softmax": (lambda a: a.softmax(-1) * a, lambda a: a.softmax(-1) * a, _u),
    "log_softmax": (lambda a: a.log_softmax(0).square(), lambda a: a.log_softmax(0) ** 2, _u),
    "layer_norm": (lambda a: a.layer_norm(-1) * a, lambda a: F.layer_norm(a, (4,)) * a, _u),
    "normalize": (lambda a: a.normalize() * a, lambda a: F.normalize(a) * a, _u),
    "pow_scalar": (lambda a: a.pow(2.5), lambda a: a**2.5, _pos),
    "pow_int": (lambda a: a.pow(3), lambda a: a**3, _u),
    "clip": (lambda a: a.clip(-0.8, 0.9), lambda a: a.clamp(-0.8, 0.9), _u),
    "sum": (lambda a: a.sum(0).square(), lambda a: a.sum(0) ** 2, _u),
    "max": (lambda a: a.max((0, 1)) * a, lambda a: a.amax((0, 1)) * a, _u),
    "min": (lambda a: a.min(1).square(), lambda a: a.amin(1) ** 2, _u),
    "mean": (lambda a: a.mean(1).square(), lambda a: a.mean(1) ** 2, _u),
    "prod": (lambda a: a.prod(1), lambda a: a.prod(1), _nz),
    "var": (lambda a: a.var(1), lambda a: a.var(1), _u),
    "std": (lambda a: a.std(0), lambda a: a.std(0), _u),
    "cumsum": (lambda a: a.cumsum(1).square(), lambda a: a.cumsum(1) ** 2, _u),
    "cumprod": (lambda a: a.cumprod(1), lambda a: a.cumprod(1), _nz),
    "cummax": (lambda a: a.cummax(1).sin(), lambda a: a.cummax(1).values.sin(), _u),
    "tril": (lambda a: a.tril(1).sin(), lambda a: a.tril(1).sin(), _u),
    "triu": (lambda a: a.triu().square(), lambda a: a.triu() ** 2, _u),
}


@pytest.mark.parametrize("name", list(UNARY))
def test_high_level_unary_and_reduction_gradients(name):
    ours, theirs, make = UNARY[name]
    check(ours, theirs, make(np.random.default_rng(6)))


BINARY = {
    "maximum": (lambda a, b: a.maximum(b), torch.maximum),
    "minimum": (lambda a, b: a.minimum(b), torch.minimum),
    "pow": (lambda a, b: a.abs().pow(b), lambda a, b: a.abs() ** b),
    "div": (lambda a, b: a / b, lambda a, b: a / b),
    "sub": (lambda a, b: a - b * a, lambda a, b: a - b * a),
    "clip_tensors": (lambda a, b: a.clip(b, b + 0.5), lambda a, b: a.clamp(b, b + 0.5)),
}


@pytest.mark.parametrize("name", list(BINARY))
def test_high_level_binary_gradients(name):
    ours, theirs = BINARY[name]
    rng = np.random.default_rng(7)
    check(ours, theirs, away_from_zero(rng, (3, 4)), away_from_zero(rng, (3, 4)))


def test_broadcasting_binary_ops_sum_over_broadcast_dims():
    rng = np.random.default_rng(8)
    check(lambda a, b: (a * b).sin(), lambda a, b: (a * b).sin(), _u(rng), uniform(rng, (4,)))
    check(lambda a, b: a + b, lambda a, b: a + b, uniform(rng, (2, 1, 3)), uniform(rng, (4, 1)))


@pytest.mark.parametrize(
    "a_shape, b_shape",
    [
        ((3, 4), (4, 5)),
        ((4,), (4, 5)),
        ((3, 4), (4,)),
        ((2, 3, 4), (4, 5)),
        ((2, 1, 3, 4), (3, 4, 2)),
    ],
)
def test_matmul_with_broadcasting(a_shape, b_shape):
    rng = np.random.default_rng(9)
    check(
        lambda a, b: (a @ b).sin(),
        lambda a, b: torch.matmul(a, b).sin(),
        uniform(rng, a_shape),
        uniform(rng, b_shape),
    )


# one callable where PyTorch spells the op the same way, else (ours, theirs)
MOVEMENT = {
    "permute": lambda a: a.permute(2, 0, 1).sin(),
    "transpose": lambda a: a.transpose(0, 2).cos(),
    "reshape": lambda a: a.reshape(4, 6).sin() * a.reshape(6, 4).T,
    "expand": lambda a: a[:, :1].expand(2, 3, 4).sin(),
    "indexing": lambda a: a[1, ::2, None, 1:].sin() + a[..., -1:].sum(),
    "squeeze_flatten": lambda a: a[:, 1:2].squeeze(1).flatten().sin(),
    "slice_steps": (
        lambda a: a.slice([(0, 2), (0, 3, 2), (1, 4, 2)]).sin(),
        lambda a: a[0:2, 0:3:2, 1:4:2].sin(),
    ),
    "slice_steps_uneven": (
        lambda a: a.slice([None, (1, 3, 3), (0, 4, 3)]).square(),
        lambda a: a[:, 1:3:3, 0:4:3] ** 2,
    ),
    "pad": (
        lambda a: a.pad([(1, 0), (0, 2), (2, 1)]).sin(),
        lambda a: F.pad(a, (2, 1, 0, 2, 1, 0)).sin(),
    ),
    "pad_value": (
        lambda a: a.pad([None, (1, 1), None], 3.0).square(),
        lambda a: F.pad(a, (0, 0, 1, 1), value=3.0) ** 2,
    ),
    "concat": (
        lambda a: lm.concat([a, a.sin(), a[:, :1]], 1).square(),
        lambda a: torch.cat([a, a.sin(), a[:, :1]], 1) ** 2,
    ),
    "stack": (
        lambda a: lm.stack([a, a.cos()], 3).square(),
        lambda a: torch.stack([a, a.cos()], 3) ** 2,
    ),
    "pool_last_dim": (lambda a: a.pool_last_dim(2, 1).sin(), lambda a: a.unfold(-1, 2, 1).sin()),
    "pool_last_dim_strided_dilated": (
        lambda a: a.reshape(2, 12).pool_last_dim(3, 2, 3).sin(),
        lambda a: a.reshape(2, 12).unfold(-1, 7, 2)[..., ::3].sin(),
    ),
    "view_chain": (  # permute -> strided slice -> pad -> reshape -> slice again
        lambda a: (
            a.permute(2, 0, 1)[1::2, :, ::2].pad([(0, 1), None, (1, 0)]).reshape(9, 2)[1:7].sin()
        ),
        lambda a: (
            F.pad(a.permute(2, 0, 1)[1::2, :, ::2], (1, 0, 0, 0, 0, 1)).reshape(9, 2)[1:7].sin()
        ),
    ),
}


@pytest.mark.parametrize("name", list(MOVEMENT))
def test_movement_gradients(name):
    entry = MOVEMENT[name]
    ours, theirs = entry if isinstance(entry, tuple) else (entry, entry)
    check(ours, theirs, uniform(np.random.default_rng(10), (2, 3, 4)))


@pytest.mark.parametrize("n, kernel, stride, dilation", [(9, 3, 2, 1), (10, 2, 3, 2), (8, 4, 1, 2)])
def test_pool_last_dim_adjoint_is_exact(n, kernel, stride, dilation):
    """Overlapping windows, gaps between windows, and dilated taps: every position adds
    the gradients of every window reading it."""
    span = dilation * (kernel - 1) + 1
    windows = (n - span) // stride + 1
    rng = np.random.default_rng(11)
    weights = uniform(rng, (3, windows, kernel))
    check(
        lambda a, w: a.pool_last_dim(kernel, stride, dilation) * w,
        lambda a, w: a.unfold(-1, span, stride)[..., ::dilation] * w,
        uniform(rng, (3, n)),
        weights,
    )


def test_symbolic_dims_flow_through_the_gradient():
    cx = lm.Graph()
    x = cx.tensor(("batch", 7))
    w = cx.tensor((5, 7))
    y = (x @ w.T).relu().pool_last_dim(2, 2).max(-1).sum() + x[:, ::3].square().sum()
    gx, gw = cx.compile(lm.training.Autograd([x, w], y))
    gx.retrieve(), gw.retrieve()
    rng = np.random.default_rng(12)
    wd = uniform(rng, (5, 7))
    w.set(wd)
    for batch in (2, 3):
        xd = uniform(rng, (batch, 7))
        x.set(xd)
        cx.execute()
        expected = torch_grads(
            lambda a, b: (
                F.max_pool1d((a @ b.T).relu()[:, None], 2)[:, 0].sum() + (a[:, ::3] ** 2).sum()
            ),
            [xd, wd],
        )
        np.testing.assert_allclose(gx.numpy(), expected[0].numpy(), atol=ATOL, rtol=RTOL)
        np.testing.assert_allclose(gw.numpy(), expected[1].numpy(), atol=ATOL, rtol=RTOL)


# ---------------------------------------------------------------- layers and models
def module_grads(
    ours: lm.nn.Module,
    theirs: torch.nn.Module,
    x: np.ndarray,
    loss: Callable = lambda y: (y * y).sum(),
) -> None:
    """Gradients of loss(module(x)) wrt the input and every parameter, against torch."""
    cx = ours.graph
    ours.load_state_dict(theirs.state_dict())
    xt = cx.tensor(x.shape).set(x)
    names, params = zip(*ours.named_parameters(), strict=True)
    grads = cx.compile(lm.training.Autograd([xt, *params], loss(ours(xt))))
    for g in grads:
        g.retrieve()
    cx.execute()
    xr = _t(x, grad=True)
    tparams = dict(theirs.named_parameters())
    expected = torch.autograd.grad(
        loss(theirs(xr)), [xr, *(tparams[n] for n in names)], allow_unused=True
    )
    for name, g, e in zip(("input", *names), grads, expected, strict=True):
        e = np.zeros(g.numpy().shape) if e is None else e.numpy()
        np.testing.assert_allclose(g.numpy(), e, atol=ATOL, rtol=RTOL, err_msg=name)


def _conv_pair(cx: lm.Graph, **kwargs):
    return lm.nn.Conv2d(cx, **kwargs), torch.nn.Conv2d(**kwargs)


@pytest.mark.parametrize(
    "kwargs",
    [
        dict(in_channels=2, out_channels=3, kernel_size=3),
        dict(in_channels=2, out_channels=3, kernel_size=3, stride=2, padding=1),
        dict(in_channels=2, out_channels=3, kernel_size=3, dilation=2, padding=2),
        dict(in_channels=2, out_channels=4, kernel_size=(3, 2), stride=(2, 3), dilation=(1, 2)),
        dict(in_channels=4, out_channels=4, kernel_size=3, groups=2, padding=1, bias=False),
    ],
)
def test_conv2d_gradients(kwargs):
    torch.manual_seed(0)
    cx = lm.Graph()
    ours, theirs = _conv_pair(cx, **kwargs)
    channels = kwargs["in_channels"]
    module_grads(ours, theirs, uniform(np.random.default_rng(13), (2, channels, 9, 8)))


@pytest.mark.parametrize("layers", [2, 3])
def test_stacked_conv_gradients(layers):
    torch.manual_seed(1)
    cx = lm.Graph()
    specs = [
        dict(in_channels=2, out_channels=3, kernel_size=3, padding=1),
        dict(in_channels=3, out_channels=4, kernel_size=3, stride=2),
        dict(in_channels=4, out_channels=2, kernel_size=2, dilation=2, padding=1),
    ][:layers]
    ours_layers, theirs_layers = [], []
    for spec in specs:
        a, b = _conv_pair(cx, **spec)
        ours_layers += [a, lm.nn.Tanh()]
        theirs_layers += [b, torch.nn.Tanh()]
    ours = lm.nn.Sequential(cx, *ours_layers)
    theirs = torch.nn.Sequential(*theirs_layers)
    module_grads(ours, theirs, uniform(np.random.default_rng(14), (2, 2, 10, 9)))


@pytest.mark.parametrize("pool", ["max", "avg", "avg_padded"])
def test_conv_then_pool_gradients(pool):
    torch.manual_seed(2)
    cx = lm.Graph()
    conv, tconv = _conv_pair(cx, in_channels=2, out_channels=3, kernel_size=3, padding=1)
    if pool == "max":
        p, tp = lm.nn.MaxPool2d(2), torch.nn.MaxPool2d(2)
    elif pool == "avg":
        p, tp = lm.nn.AvgPool2d(3, stride=2), torch.nn.AvgPool2d(3, stride=2)
    else:
        p = lm.nn.AvgPool2d(3, stride=2, padding=1, count_include_pad=False)
        tp = torch.nn.AvgPool2d(3, stride=2, padding=1, count_include_pad=False)
    ours = lm.nn.Sequential(cx, conv, p)
    theirs = torch.nn.Sequential(tconv, tp)
    module_grads(ours, theirs, uniform(np.random.default_rng(15), (2, 2, 8, 7)))


def test_conv_input_gradient_sums_windows_in_the_order_the_next_pass_reads():
    """col2im's first pass (sum of a kernel column's shifted placements) is stored with
    the image row axis before the window columns, the order the second pass reads it,
    not (out columns, kernel columns, rows) with rows innermost; values equal torch's."""
    rng = np.random.default_rng(11)
    xs, ws = uniform(rng, (2, 3, 9, 8)), uniform(rng, (4, 3, 5, 3))
    cx = lm.Graph()
    x, w = cx.tensor(xs.shape).set(xs), cx.tensor(ws.shape).set(ws)
    loss = lm.nn.conv(x, w).square().sum()
    forward = set(cx.nodes)
    (grad,) = cx.compile(lm.training.Autograd([x], loss))
    sums = [
        tuple(d.as_int() for d in cx.nodes[n].shape)
        for n in set(cx.nodes) - forward
        if isinstance(cx.nodes[n].op, ops.Add) and len(cx.nodes[n].shape) == 5
    ]
    assert sums and all(shape == (2, 3, 9, 6, 3) for shape in sums), sums
    grad.retrieve()
    cx.execute()
    xt = _t(xs, grad=True)
    (expected,) = torch.autograd.grad(F.conv2d(xt, _t(ws)).square().sum(), [xt])
    np.testing.assert_allclose(grad.numpy(), expected.numpy(), atol=ATOL, rtol=RTOL)


def test_overlapping_max_pool_with_padding():
    rng = np.random.default_rng(16)
    check(
        lambda a: lm.nn.MaxPool2d(3, stride=2, padding=1)(a).square(),
        lambda a: F.max_pool2d(a, 3, stride=2, padding=1) ** 2,
        rng.permutation(2 * 2 * 7 * 6).reshape(2, 2, 7, 6).astype(np.float32) / 10,
    )


def test_embedding_gradients():
    cx = lm.Graph()
    emb = lm.nn.Embedding(cx, 6, 4)
    temb = torch.nn.Embedding(6, 4)
    emb.load_state_dict(temb.state_dict())
    ids = np.array([[1, 3, 1], [5, 0, 1]], np.int32)
    out = emb(cx.tensor(ids.shape, dtype=lm.int32).set(ids))
    (g,) = cx.compile(lm.training.Autograd([emb.weight], (out.sin() * out).sum()))
    g.retrieve()
    cx.execute()
    tout = temb(torch.tensor(ids).long())
    (expected,) = torch.autograd.grad((tout.sin() * tout).sum(), [temb.weight])
    np.testing.assert_allclose(g.numpy(), expected.numpy(), atol=ATOL, rtol=RTOL)


def test_multi_head_attention_gradients():
    cx = lm.Graph()
    attn = lm.nn.SelfAttention(cx, 16, 4, 2, bias=True, causal=True)
    state = {name: _t(a, grad=True) for name, a in attn.state_dict().items()}
    data = uniform(np.random.default_rng(17), (2, 5, 16))
    x = cx.tensor(data.shape).set(data)
    out, _ = attn(x)
    names, params = zip(*attn.named_parameters(), strict=True)
    grads = cx.compile(lm.training.Autograd([x, *params], (out * out).sum()))
    for g in grads:
        g.retrieve()
    cx.execute()

    def project(xt: torch.Tensor, name: str, heads: int) -> torch.Tensor:
        y = F.linear(xt, state[f"{name}.weight"], state[f"{name}.bias"])
        return y.view(2, 5, heads, 4).transpose(1, 2)

    xt = _t(data, grad=True)
    q, k, v = project(xt, "q_proj", 4), project(xt, "k_proj", 2), project(xt, "v_proj", 2)
    y = F.scaled_dot_product_attention(q, k, v, is_causal=True, enable_gqa=True)
    y = F.linear(y.transpose(1, 2).reshape(2, 5, 16), state["o_proj.weight"], state["o_proj.bias"])
    expected = torch.autograd.grad((y * y).sum(), [xt, *(state[n] for n in names)])
    for name, g, e in zip(("input", *names), grads, expected, strict=True):
        np.testing.assert_allclose(g.numpy(), e.numpy(), atol=ATOL, rtol=RTOL, err_msg=name)


class TorchLeNet(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.conv1 = torch.nn.Conv2d(1, 4, 5, padding=2)
        self.conv2 = torch.nn.Conv2d(4, 6, 3)
        self.fc1 = torch.nn.Linear(6 * 3 * 3, 20)
        self.fc2 = torch.nn.Linear(20, 16)
        self.fc3 = torch.nn.Linear(16, 10)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = F.max_pool2d(F.relu(self.conv1(x)), 2)
        x = F.max_pool2d(F.relu(self.conv2(x)), 2)
        x = F.relu(self.fc1(x.flatten(1)))
        return self.fc3(F.relu(self.fc2(x)))


class LeNet(lm.nn.Module):
    def __init__(self, cx: lm.Graph) -> None:
        super().__init__(cx)
        self.conv1 = lm.nn.Conv2d(cx, 1, 4, 5, padding=2)
        self.conv2 = lm.nn.Conv2d(cx, 4, 6, 3)
        self.fc1 = lm.nn.Linear(cx, 6 * 3 * 3, 20)
        self.fc2 = lm.nn.Linear(cx, 20, 16)
        self.fc3 = lm.nn.Linear(cx, 16, 10)
        self.pool = lm.nn.MaxPool2d(2)

    def forward(self, x: lm.GraphTensor) -> lm.GraphTensor:
        x = self.pool(self.conv1(x).relu())
        x = self.pool(self.conv2(x).relu())
        x = self.fc1(x.flatten(1)).relu()
        return self.fc3(self.fc2(x).relu())


def test_lenet_full_parameter_gradients():
    torch.manual_seed(3)
    targets = np.eye(10, dtype=np.float32)[[3, 7, 1]]

    def cross_entropy(logits):
        if isinstance(logits, torch.Tensor):
            return -(logits.log_softmax(-1) * torch.from_numpy(targets)).sum()
        target = logits.graph.tensor(targets.shape).set(targets)
        return (logits.log_softmax(-1) * target).sum() * -1.0

    module_grads(
        LeNet(lm.Graph()),
        TorchLeNet(),
        uniform(np.random.default_rng(18), (3, 1, 16, 16)),
        cross_entropy,
    )


def test_gradients_compiled_with_cpu_backend_match():
    torch.manual_seed(4)
    cx = lm.Graph()
    conv, tconv = _conv_pair(cx, in_channels=2, out_channels=3, kernel_size=3, stride=2)
    conv.load_state_dict(tconv.state_dict())
    fc, tfc = lm.nn.Linear(cx, 3 * 3 * 3, 4), torch.nn.Linear(3 * 3 * 3, 4)
    fc.load_state_dict(tfc.state_dict())
    data = uniform(np.random.default_rng(19), (2, 2, 7, 7))
    x = cx.tensor(data.shape).set(data)
    loss = fc(conv(x).relu().flatten(1)).softmax(-1).square().sum()
    params = [conv.weight, conv.bias, fc.weight, fc.bias]
    grads = cx.compile(lm.training.Autograd(params, loss))
    for g in grads:
        g.retrieve()
    cx.compile(lm.CPUCompiler())
    cx.execute()
    xt = _t(data)
    tloss = (tfc(tconv(xt).relu().flatten(1)).softmax(-1) ** 2).sum()
    tparams = [tconv.weight, tconv.bias, tfc.weight, tfc.bias]
    for g, e in zip(grads, torch.autograd.grad(tloss, tparams), strict=True):
        np.testing.assert_allclose(g.numpy(), e.numpy(), atol=ATOL, rtol=RTOL)


def test_backend_contract_op_is_differentiable():
    """After the e-graph lowers matmuls to the CPU backend's Contract, the pass still works."""
    rng = np.random.default_rng(20)
    a_data, b_data = uniform(rng, (2, 3, 4)), uniform(rng, (4, 5))
    cx = lm.Graph()
    a, b = cx.tensor(a_data.shape).set(a_data).keep(), cx.tensor(b_data.shape).set(b_data).keep()
    y = (a @ b).sin().retrieve()
    cx.compile(lm.EGraphCompiler(rulesets=("algebra", "structure", "cpu")))
    assert any(type(n.op).__name__ == "Contract" for n in cx.nodes.values())
    grads = cx.compile(lm.training.Autograd([a, b], y.sum()))
    for g in grads:
        g.retrieve()
    cx.execute()
    expected = torch_grads(lambda x, w: (x @ w).sin(), [a_data, b_data])
    for g, e in zip(grads, expected, strict=True):
        np.testing.assert_allclose(g.numpy(), e.numpy(), atol=ATOL, rtol=RTOL)


def test_a_compiled_graph_with_contract_sum_differentiates_again():
    """A weight gradient summed over the batch compiles to one ContractSum; differentiating
    the compiled graph through it (a second-order gradient) matches torch."""
    rng = np.random.default_rng(22)
    x_data, w_data = uniform(rng, (3, 4, 5)), uniform(rng, (5, 6))
    cx = lm.Graph()
    x, w = cx.tensor(x_data.shape).set(x_data), cx.tensor(w_data.shape).set(w_data)
    (grad_w,) = cx.compile(lm.training.Autograd([w], (x @ w).square().sum()))
    grad_w.retrieve()
    cx.compile(lm.CPUCompiler())
    assert any(isinstance(n.op, ops.ContractSum) for n in cx.nodes.values())
    (grad_x,) = cx.compile(lm.training.Autograd([x], grad_w.square().sum()))
    grad_x.retrieve()
    cx.compile(lm.CPUCompiler())
    cx.execute()
    xt, wt = _t(x_data, grad=True), _t(w_data, grad=True)
    (first,) = torch.autograd.grad(((xt @ wt) ** 2).sum(), wt, create_graph=True)
    (expected,) = torch.autograd.grad((first**2).sum(), xt)
    np.testing.assert_allclose(grad_x.numpy(), expected.numpy(), atol=1e-3, rtol=RTOL)


def test_symbolic_scan_and_half_precision_params():
    cx = lm.Graph()
    x = cx.tensor((2, "n"))
    (g,) = cx.compile(lm.training.Autograd([x], x.cumsum(-1).square().sum()))
    g.retrieve()
    data = uniform(np.random.default_rng(21), (2, 5))
    x.set(data)
    cx.execute()
    (expected,) = torch_grads(lambda t: t.cumsum(-1) ** 2, [data])
    np.testing.assert_allclose(g.numpy(), expected.numpy(), atol=ATOL, rtol=RTOL)

    cx = lm.Graph()
    h = cx.tensor((3,), dtype=lm.float16).set(np.array([0.5, 1.0, 2.0], np.float16))
    (gh,) = cx.compile(lm.training.Autograd([h], (h * h).sum()))
    assert gh.dtype == lm.float16
    gh.retrieve()
    cx.execute()
    np.testing.assert_allclose(gh.numpy(), [1.0, 2.0, 4.0])


def test_second_order_gradients():
    """The gradient graph is an ordinary graph, so the pass differentiates it again."""
    data = uniform(np.random.default_rng(22), (4,))
    cx = lm.Graph()
    x = cx.tensor((4,)).set(data)
    (first,) = cx.compile(lm.training.Autograd([x], (x * x * x).sin().sum()))
    (second,) = cx.compile(lm.training.Autograd([x], first.sum()))
    second.retrieve()
    cx.execute()
    xt = _t(data, grad=True)
    (g,) = torch.autograd.grad((xt**3).sin().sum(), [xt], create_graph=True)
    (expected,) = torch.autograd.grad(g.sum(), [xt])
    np.testing.assert_allclose(second.numpy(), expected.numpy(), atol=ATOL, rtol=RTOL)


def test_moving_broadcasts_last_keeps_the_view():
    """The adjoint sums broadcast axes first by reordering the history; the reordered
    history must rebuild exactly the same view."""
    from luminal.shape.tracker import ShapeTracker
    from luminal.training.autograd_views import broadcasts_last

    base = ShapeTracker.contiguous((3, 4))
    views = [
        base.expand(0, 5).expand(1, 6).permute((1, 3, 0, 2)).expand(2, 1),
        base.expand(1, 2).pad(((1, 0), (0, 0), (2, 2))).slice(((0, 2, 1), (0, 2, 1), (1, 6, 2))),
        base.expand(2, 7).reshape((3, 4, 7)).permute((2, 0, 1)),
    ]
    for view in views:
        rebuilt = base
        for move in broadcasts_last(view.history):
            rebuilt = rebuilt.replay(move)
        assert (rebuilt.shape, rebuilt.strides, rebuilt.offset, rebuilt.mask) == (
            view.shape,
            view.strides,
            view.offset,
            view.mask,
        )
