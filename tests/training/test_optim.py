"""Optimizers against torch.optim on the same parameter and gradient sequences."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

import luminal as lm
from luminal.training import optim, schedules

SHAPES = [(3, 4), (5,), ()]
STEPS = 5
ATOL = 1e-5


def _data(steps: int = STEPS, seed: int = 0) -> tuple[list[np.ndarray], list[list[np.ndarray]]]:
    rng = np.random.default_rng(seed)
    init = [rng.standard_normal(s).astype(np.float32) for s in SHAPES]
    grads = [[rng.standard_normal(s).astype(np.float32) for s in SHAPES] for _ in range(steps)]
    return init, grads


def _build(cls, kwargs, init):
    cx = lm.Graph()
    params = [cx.tensor(a.shape, name=f"p{i}").set(a) for i, a in enumerate(init)]
    grads = [cx.tensor(a.shape, name=f"g{i}") for i, a in enumerate(init)]
    opt = cls(params, **kwargs)
    opt.step_graph(grads)
    return cx, params, grads, opt


def run_ours(cls, kwargs, init, grad_steps, lr_at=None):
    """Gradients are graph inputs set from numpy each step; returns params, optimizer."""
    cx, params, grads, opt = _build(cls, kwargs, init)
    for step, arrays in enumerate(grad_steps):
        if lr_at is not None:
            opt.lr = lr_at(step)
        for grad, array in zip(grads, arrays, strict=True):
            grad.set(array)
        cx.execute()
        opt.apply()
    return [p.numpy() for p in params], opt


def run_torch(cls, kwargs, init, grad_steps, lr_at=None):
    params = [torch.tensor(a, requires_grad=True) for a in init]
    opt = cls(params, **kwargs)
    for step, arrays in enumerate(grad_steps):
        if lr_at is not None:
            opt.param_groups[0]["lr"] = lr_at(step)
        for param, array in zip(params, arrays, strict=True):
            param.grad = torch.tensor(array)
        opt.step()
    return [p.detach().numpy() for p in params], opt


def assert_params(ours, theirs, atol=ATOL):
    for a, b in zip(ours, theirs, strict=True):
        assert a.shape == b.shape and a.dtype == np.float32
        np.testing.assert_allclose(a, b, atol=atol, rtol=1e-5)


TORCH_CONFIGS = [
    ("SGD", {"lr": 0.1}),
    ("SGD", {"lr": 0.1, "momentum": 0.9}),
    ("SGD", {"lr": 0.1, "momentum": 0.9, "dampening": 0.3}),
    ("SGD", {"lr": 0.05, "momentum": 0.8, "nesterov": True, "weight_decay": 0.1}),
    ("SGD", {"lr": 0.1, "weight_decay": 0.01, "maximize": True}),
    ("Adam", {"lr": 0.01}),
    ("Adam", {"lr": 0.1, "betas": (0.8, 0.99), "eps": 1e-6, "weight_decay": 0.1}),
    ("Adam", {"lr": 0.01, "amsgrad": True}),
    ("Adam", {"lr": 0.01, "maximize": True, "betas": (0.0, 0.999)}),
    ("AdamW", {"lr": 0.01}),
    ("AdamW", {"lr": 0.05, "weight_decay": 0.1, "amsgrad": True}),
    ("RMSprop", {"lr": 0.01}),
    ("RMSprop", {"lr": 0.01, "momentum": 0.9}),
    ("RMSprop", {"lr": 0.01, "centered": True, "alpha": 0.9}),
    ("RMSprop", {"lr": 0.01, "momentum": 0.5, "centered": True, "weight_decay": 0.1}),
]


@pytest.mark.parametrize(("name", "kwargs"), TORCH_CONFIGS)
def test_matches_torch_optim(name, kwargs):
    init, grads = _data()
    ours, opt = run_ours(getattr(optim, name), kwargs, init, grads)
    theirs, torch_opt = run_torch(getattr(torch.optim, name), kwargs, init, grads)
    assert_params(ours, theirs)
    assert opt.step_count == STEPS


@pytest.mark.parametrize(
    ("name", "kwargs", "states"),
    [
        ("SGD", {"lr": 0.1, "momentum": 0.9}, ["momentum_buffer"]),
        ("Adam", {"lr": 0.01, "amsgrad": True}, ["exp_avg", "exp_avg_sq", "max_exp_avg_sq"]),
        ("RMSprop", {"lr": 0.01, "momentum": 0.9, "centered": True}, ["square_avg", "grad_avg"]),
    ],
)
def test_state_carries_across_executes(name, kwargs, states):
    init, grads = _data()
    _, opt = run_ours(getattr(optim, name), kwargs, init, grads)
    params, torch_opt = run_torch(getattr(torch.optim, name), kwargs, init, grads)
    for kind in states:
        for tensor, param in zip(opt.state[kind], torch_opt.param_groups[0]["params"], strict=True):
            expected = torch_opt.state[param][kind].numpy()
            np.testing.assert_allclose(tensor.numpy(), expected, atol=ATOL, rtol=1e-5)


def test_apply_moves_arrays_without_copying():
    init, grads = _data(1)
    cx, params, grad_inputs, opt = _build(optim.Adam, {"lr": 0.1}, init)
    for grad, array in zip(grad_inputs, grads[0], strict=True):
        grad.set(array)
    cx.execute()
    produced = [cx.buffers[new.node_id] for _, new in opt._carry]
    opt.apply()
    for (target, _), array in zip(opt._carry, produced, strict=True):
        assert cx.input_data[target.node_id] is array
    opt.apply()  # idempotent until the next run
    assert all(
        cx.input_data[t.node_id] is a for (t, _), a in zip(opt._carry, produced, strict=True)
    )


def torch_lamb(init, grad_steps, lr, betas, eps, weight_decay, bias_correction=True):
    """LAMB as in the paper (and luminal's docstring), in float32 torch ops."""
    params = [torch.tensor(a) for a in init]
    m = [torch.zeros_like(p) for p in params]
    v = [torch.zeros_like(p) for p in params]
    for t, arrays in enumerate(grad_steps, start=1):
        for i, (p, array) in enumerate(zip(params, arrays, strict=True)):
            g = torch.tensor(array)
            m[i] = m[i] * betas[0] + g * (1 - betas[0])
            v[i] = v[i] * betas[1] + g * g * (1 - betas[1])
            m_hat, v_hat = m[i], v[i]
            if bias_correction:
                m_hat, v_hat = m[i] / (1 - betas[0] ** t), v[i] / (1 - betas[1] ** t)
            update = m_hat / (v_hat.sqrt() + eps) + weight_decay * p
            w_norm, u_norm = p.norm(), update.norm()
            trust = w_norm / u_norm if w_norm > 0 and u_norm > 0 else torch.tensor(1.0)
            params[i] = p - lr * trust * update
    return [p.numpy() for p in params]


@pytest.mark.parametrize(
    "kwargs",
    [
        {"lr": 0.01, "betas": (0.9, 0.999), "eps": 1e-6, "weight_decay": 0.0},
        {"lr": 0.05, "betas": (0.8, 0.99), "eps": 1e-6, "weight_decay": 0.1},
        {
            "lr": 0.01,
            "betas": (0.9, 0.999),
            "eps": 1e-6,
            "weight_decay": 0.01,
            "bias_correction": False,
        },
    ],
)
def test_lamb_matches_reference(kwargs):
    init, grads = _data()
    init[1] = np.zeros_like(init[1])  # a zero parameter: trust ratio 1
    ours, _ = run_ours(optim.LAMB, kwargs, init, grads)
    assert_params(ours, torch_lamb(init, grads, **kwargs))


def test_lr_is_an_input_changed_by_a_schedule():
    init, grads = _data(8)
    cx, params, grad_inputs, opt = _build(optim.SGD, {"lr": 0.1, "momentum": 0.9}, init)
    schedule = schedules.StepLR(opt, step_size=2, gamma=0.5)
    torch_params = [torch.tensor(a, requires_grad=True) for a in init]
    torch_opt = torch.optim.SGD(torch_params, lr=0.1, momentum=0.9)
    torch_schedule = torch.optim.lr_scheduler.StepLR(torch_opt, step_size=2, gamma=0.5)
    nodes = cx.num_nodes
    for arrays in grads:
        for grad, array in zip(grad_inputs, arrays, strict=True):
            grad.set(array)
        cx.execute()
        opt.apply()
        schedule.step()
        for param, array in zip(torch_params, arrays, strict=True):
            param.grad = torch.tensor(array)
        torch_opt.step()
        torch_schedule.step()
    assert cx.num_nodes == nodes
    assert opt.lr == torch_opt.param_groups[0]["lr"] == 0.1 * 0.5**4
    assert_params([p.numpy() for p in params], [p.detach().numpy() for p in torch_params])


@pytest.mark.parametrize(
    ("name", "kwargs"), [("SGD", {"lr": 0.1, "momentum": 0.9}), ("Adam", {"lr": 0.05})]
)
def test_compiled_training_keeps_one_compiled_graph(name, kwargs):
    """CPUCompiler once; lr from a schedule, state carried, params read by the forward
    pass (hand-written gradients of mean((x W1 W2)^2)) while the update writes them."""
    rng = np.random.default_rng(1)
    x_data = rng.standard_normal((8, 6)).astype(np.float32)
    w_init = [rng.standard_normal((6, 5)).astype(np.float32), rng.standard_normal((5, 3))]
    w_init = [w.astype(np.float32) * 0.5 for w in w_init]

    cx = lm.Graph()
    x = cx.tensor((8, 6)).set(x_data)
    w1, w2 = (cx.tensor(w.shape, name=f"w{i}").set(w) for i, w in enumerate(w_init))
    hidden = x @ w1
    y = hidden @ w2
    loss = (y * y).mean().retrieve()
    grad_y = y * (2.0 / y.shape[0] / y.shape[1])
    grad_w1 = x.T @ (grad_y @ w2.T)
    grad_w2 = hidden.T @ grad_y
    opt = getattr(optim, name)([w1, w2], **kwargs)
    opt.step_graph([grad_w1, grad_w2])
    schedule = schedules.ExponentialLR(opt, gamma=0.7)
    compiled = cx.compile(lm.CPUCompiler())

    tw = [torch.tensor(w, requires_grad=True) for w in w_init]
    torch_opt = getattr(torch.optim, name)(tw, **kwargs)
    torch_schedule = torch.optim.lr_scheduler.ExponentialLR(torch_opt, gamma=0.7)
    seen_arrays = set()
    for _ in range(6):
        cx.execute()
        opt.apply()
        schedule.step()
        seen_arrays.add(id(cx.input_data[w1.node_id]))
        torch_opt.zero_grad()
        torch_loss = (torch.tensor(x_data) @ tw[0] @ tw[1]).square().mean()
        torch_loss.backward()
        torch_opt.step()
        torch_schedule.step()
        np.testing.assert_allclose(loss.numpy(), torch_loss.item(), rtol=1e-5, atol=ATOL)
    assert cx.compiled is compiled
    assert len(seen_arrays) <= 3  # the runtime ping-pongs two arrays per carried state
    assert_params([w1.numpy(), w2.numpy()], [w.detach().numpy() for w in tw])


def test_clip_grad_norm_matches_torch():
    rng = np.random.default_rng(2)
    arrays = [rng.standard_normal(s).astype(np.float32) for s in [(4, 3), (7,)]]
    for max_norm, norm_type in [(0.5, 2.0), (100.0, 2.0), (0.3, math.inf), (1.0, 1.0)]:
        cx = lm.Graph()
        grads = [cx.tensor(a.shape).set(a) for a in arrays]
        clipped, total = optim.clip_grad_norm(grads, max_norm, norm_type, return_norm=True)
        for t in [*clipped, total]:
            t.retrieve()
        cx.execute()
        expected = [torch.tensor(a) for a in arrays]
        params = [torch.zeros_like(e, requires_grad=True) for e in expected]
        for p, e in zip(params, expected, strict=True):
            p.grad = e.clone()
        norm = torch.nn.utils.clip_grad_norm_(params, max_norm, norm_type)
        np.testing.assert_allclose(total.numpy(), norm.item(), rtol=1e-5)
        for ours, p in zip(clipped, params, strict=True):
            np.testing.assert_allclose(ours.numpy(), p.grad.numpy(), atol=ATOL, rtol=1e-5)


def test_clip_grad_value_matches_torch():
    rng = np.random.default_rng(3)
    array = rng.standard_normal((5, 4)).astype(np.float32)
    cx = lm.Graph()
    (clipped,) = optim.clip_grad_value([cx.tensor(array.shape).set(array)], 0.4)
    clipped.retrieve()
    cx.execute()
    param = torch.zeros(5, 4, requires_grad=True)
    param.grad = torch.tensor(array)
    torch.nn.utils.clip_grad_value_([param], 0.4)
    np.testing.assert_array_equal(clipped.numpy(), param.grad.numpy())


@pytest.mark.parametrize("beta", [0.0, 0.5, 0.9, 0.999, 0.99999])
def test_bias_correction_is_accurate(beta):
    cx = lm.Graph()
    steps = np.array([1, 2, 3, 10, 1000, 100000], np.float32)
    log_beta = cx.tensor(()).set(np.float32(math.log(beta) if beta else -math.inf))
    result = optim.one_minus_pow(log_beta, cx.tensor(steps.shape).set(steps)).retrieve()
    cx.execute()
    exact = np.array([1 - beta ** float(t) for t in steps])
    np.testing.assert_allclose(result.numpy(), exact, rtol=3e-7)


def test_errors_name_the_problem():
    cx = lm.Graph()
    p = cx.tensor((2, 3)).set(np.zeros((2, 3), np.float32))
    with pytest.raises(lm.GraphError, match="graph inputs"):
        optim.SGD([p + 1])
    with pytest.raises(lm.LuminalError, match="Nesterov"):
        optim.SGD([p], nesterov=True)
    opt = optim.Adam([p])
    with pytest.raises(lm.ShapeError, match=r"gradient 0 has shape \(3, 2\)"):
        opt.step_graph([cx.tensor((3, 2))])
    with pytest.raises(lm.ShapeError, match="1 parameters"):
        opt.step_graph([])
    with pytest.raises(lm.GraphError, match="step_graph"):
        opt.apply()
    opt.step_graph([cx.tensor((2, 3))])
    with pytest.raises(lm.GraphError, match="execute"):
        opt.apply()
    with pytest.raises(lm.LuminalError, match="momentum buffer"):
        optim.SGD([p]).momentum = 0.9


@pytest.mark.parametrize(("name", "kwargs"), TORCH_CONFIGS)
def test_step_graph_range_in_two_ranges_equals_torch(name: str, kwargs: dict) -> None:
    """Two optimizers, each updating one range of the parameters laid end to end (as the
    ranks of a sharded data-parallel step do; the cut falls inside a parameter), give
    torch's parameters; each holds state for its range only."""
    init, grad_steps = _data()
    sizes = [a.size for a in init]
    vector = np.concatenate([a.reshape(-1) for a in init])
    cut = sizes[0] // 2 + 1
    ranges = [(0, cut), (cut, vector.size)]
    parts = []
    for start, stop in ranges:
        cx = lm.Graph()
        params = [cx.tensor(a.shape, name=f"p{i}") for i, a in enumerate(init)]
        grads = [cx.tensor(a.shape, name=f"g{i}") for i, a in enumerate(init)]
        opt = getattr(optim, name)(params, **kwargs)
        pieces = [piece.retrieve() for piece in opt.step_graph_range(grads, start, stop)]
        for states in opt.state.values():
            held = sum(int(np.prod(t.shape)) for t in states if t is not None)
            assert held == stop - start
        parts.append((cx, params, grads, opt, pieces))
    for arrays in grad_steps:
        new = vector.copy()
        for (start, stop), (cx, params, grads, opt, pieces) in zip(ranges, parts, strict=True):
            offset = 0
            for param, grad, array in zip(params, grads, arrays, strict=True):
                param.set(vector[offset : offset + array.size].reshape(array.shape).copy())
                grad.set(array)
                offset += array.size
            cx.execute()
            opt.apply()
            new[start:stop] = np.concatenate([piece.numpy().reshape(-1) for piece in pieces])
        vector = new
    bounds = np.cumsum([0, *sizes])
    ours = [vector[a:b].reshape(s.shape) for a, b, s in zip(bounds, bounds[1:], init, strict=False)]
    theirs, _ = run_torch(getattr(torch.optim, name), kwargs, init, grad_steps)
    assert_params(ours, theirs)


def test_step_graph_range_refuses_lamb() -> None:
    cx = lm.Graph()
    param = cx.tensor((4,), name="p").set(np.ones(4, np.float32))
    opt = optim.LAMB([param])
    with pytest.raises(lm.LuminalError, match="not elementwise"):
        opt.step_graph_range([cx.tensor((4,), name="g")], 0, 2)


def test_step_graph_range_refuses_bad_gradients_and_ranges_and_still_builds() -> None:
    """Too few gradients, a misshapen one, and ranges outside [0, total] or reversed are
    LuminalErrors naming what was expected (they were a ValueError from zip, or silently
    a clamped or empty update), leaving nothing behind: the same optimizer then builds
    the valid range and its update equals SGD's."""
    cx = lm.Graph()
    params = [cx.tensor((2, 3), name="p0"), cx.tensor((4,), name="p1")]
    grads = [cx.tensor((2, 3), name="g0"), cx.tensor((4,), name="g1")]
    opt = optim.SGD(params, lr=0.5)
    nodes = len(cx.nodes)
    with pytest.raises(lm.ShapeError, match="1 gradients for 2 parameters"):
        opt.step_graph_range(grads[:1], 0, 10)
    with pytest.raises(lm.ShapeError, match=r"gradient 1 has shape \(3,\), its parameter \(4,\)"):
        opt.step_graph_range([grads[0], cx.tensor((3,), name="g")], 0, 10)
    nodes += 1  # the misshapen gradient input made above
    for start, stop in ((-1, 4), (0, 11), (6, 2)):
        with pytest.raises(lm.LuminalError, match=r"0 <= start <= stop <= 10"):
            opt.step_graph_range(grads, start, stop)
    assert len(cx.nodes) == nodes
    pieces = [piece.retrieve() for piece in opt.step_graph_range(grads, 4, 8)]
    p = np.arange(10, dtype=np.float32)
    g = np.full(10, 2.0, np.float32)
    params[0].set(p[:6].reshape(2, 3))
    params[1].set(p[6:])
    grads[0].set(g[:6].reshape(2, 3))
    grads[1].set(g[6:])
    cx.execute()
    opt.apply()
    got = np.concatenate([piece.numpy().reshape(-1) for piece in pieces])
    np.testing.assert_allclose(got, p[4:8] - 0.5 * g[4:8])
