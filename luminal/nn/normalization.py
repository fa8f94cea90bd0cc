"""BatchNorm1d/2d/3d and GroupNorm with PyTorch's names, defaults and state dicts.

BatchNorm's running statistics are buffers (graph inputs in the state dict, not in
`parameters()`). A module called in training mode normalises with the batch's own
statistics and registers the updated running statistics with `Graph.carry`, so every
successful `execute()` moves them into the buffers for the next run, as every forward of
a `torch.nn.BatchNorm2d` in train mode does. In eval mode the layer is the per-channel
affine map `x * scale + shift`; a compiler pass (`luminal.compiler.fold`) folds that scale
into a preceding convolution's weight.
"""

from __future__ import annotations

import numpy as np

from luminal.dtype import float32, int32
from luminal.errors import LuminalError, ShapeError
from luminal.graph import Graph
from luminal.nn.module import Module
from luminal.shape.expr import product
from luminal.tensor import GraphTensor


class _BatchNorm(Module):
    """Shared body of BatchNorm1d/2d/3d: `weight`/`bias` (affine), buffers `running_mean`,
    `running_var`, `num_batches_tracked` (track_running_stats)."""

    input_dims: tuple[int, ...] = ()

    def __init__(
        self,
        graph: Graph,
        num_features: int,
        eps: float = 1e-5,
        momentum: float | None = 0.1,
        affine: bool = True,
        track_running_stats: bool = True,
    ) -> None:
        super().__init__(graph)
        name = type(self).__name__
        if not eps >= 0:
            raise LuminalError(f"{name}: eps must be >= 0, got {eps}")
        if momentum is not None and not 0.0 <= momentum <= 1.0:
            raise LuminalError(f"{name}: momentum must be in [0, 1] or None, got {momentum}")
        self.num_features = int(num_features)
        self.eps, self.momentum = float(eps), momentum
        self.affine, self.track_running_stats = affine, track_running_stats
        shape = (self.num_features,)
        self.weight = self.bias = None
        if affine:
            self.param("weight", shape, lambda: np.ones(shape, np.float32))
            self.param("bias", shape, lambda: np.zeros(shape, np.float32))
        self.running_mean = self.running_var = self.num_batches_tracked = None
        if track_running_stats:
            self.buffer("running_mean", shape, lambda: np.zeros(shape, np.float32))
            self.buffer("running_var", shape, lambda: np.ones(shape, np.float32))
            self.buffer("num_batches_tracked", (), lambda: np.zeros((), np.int32), int32)

    def forward(self, x: GraphTensor) -> GraphTensor:
        self._check(x)
        channel_shape = (self.num_features,) + (1,) * (x.ndim - 2)
        if self.training or not self.track_running_stats:
            y = self._batch_normalized(x)
            if self.weight is not None:
                y = y * self.weight.reshape(channel_shape) + self.bias.reshape(channel_shape)
            return y
        scale = (self.running_var + self.eps).sqrt().reciprocal()
        if self.weight is not None:
            scale = scale * self.weight
        shift = -self.running_mean * scale
        if self.bias is not None:
            shift = shift + self.bias
        return x * scale.reshape(channel_shape) + shift.reshape(channel_shape)

    def _batch_normalized(self, x: GraphTensor) -> GraphTensor:
        """(x - mean) / sqrt(var + eps) over the batch and spatial dims; in training mode
        with running statistics, their update is carried to the next run."""
        axes = (0, *range(2, x.ndim))
        mean = x.mean(axes)
        centered = x - mean.reshape((self.num_features,) + (1,) * (x.ndim - 2))
        var = centered.square().mean(axes)
        if self.training and self.track_running_stats:
            self._carry_statistics(x, mean, var)
        inv_std = (var + self.eps).sqrt().reciprocal()
        return centered * inv_std.reshape((self.num_features,) + (1,) * (x.ndim - 2))

    def _carry_statistics(self, x: GraphTensor, mean: GraphTensor, var: GraphTensor) -> None:
        """running = (1 - m) * running + m * batch (the unbiased variance, as PyTorch);
        momentum None is the cumulative average, m = 1 / num_batches_tracked."""
        count = product((x.view.shape[0], *x.view.shape[2:]))
        known = count.as_int()
        if known is not None:
            unbiased = var * (known / (known - 1))
        else:
            n = self.graph.constant(count, float32)
            unbiased = var * n / (n - 1)
        tracked = self.num_batches_tracked + 1
        cumulative = self.momentum is None  # the running average of every batch so far
        factor = tracked.cast(float32).reciprocal() if cumulative else self.momentum
        graph = self.graph
        new_mean = self.running_mean + (mean - self.running_mean) * factor
        new_var = self.running_var + (unbiased - self.running_var) * factor
        graph.carry(self.running_mean, new_mean)
        graph.carry(self.running_var, new_var)
        graph.carry(self.num_batches_tracked, tracked)

    def _check(self, x: GraphTensor) -> None:
        name = type(self).__name__
        if x.ndim not in self.input_dims:
            expected = " or ".join(f"{d}-D" for d in self.input_dims)
            raise ShapeError(f"{name}: expected {expected} input, got {x._shape_text()}")
        count = product((x.view.shape[0], *x.view.shape[2:])).as_int()
        if self.training and count == 1:
            raise ShapeError(
                f"{name}: expected more than 1 value per channel when training, got input "
                f"{x._shape_text()}"
            )
        if x.view.shape[1] != self.num_features:
            raise ShapeError(
                f"{name}({self.num_features}): input {x._shape_text()} has "
                f"{x.view.shape[1]} channels in dim 1, expected {self.num_features}"
            )

    def extra_repr(self) -> str:
        return (
            f"{self.num_features}, eps={self.eps}, momentum={self.momentum}, "
            f"affine={self.affine}, track_running_stats={self.track_running_stats}"
        )


class BatchNorm1d(_BatchNorm):
    """torch.nn.BatchNorm1d: input (N, C) or (N, C, L)."""

    input_dims = (2, 3)


class BatchNorm2d(_BatchNorm):
    """torch.nn.BatchNorm2d: input (N, C, H, W)."""

    input_dims = (4,)


class BatchNorm3d(_BatchNorm):
    """torch.nn.BatchNorm3d: input (N, C, D, H, W)."""

    input_dims = (5,)


class GroupNorm(Module):
    """torch.nn.GroupNorm: statistics over each group of `num_channels // num_groups`
    channels and the spatial dims of each sample; per-channel `weight` and `bias`."""

    def __init__(
        self,
        graph: Graph,
        num_groups: int,
        num_channels: int,
        eps: float = 1e-5,
        affine: bool = True,
    ) -> None:
        super().__init__(graph)
        if num_groups < 1 or num_channels % num_groups:
            raise ShapeError(
                f"GroupNorm: num_channels {num_channels} must be divisible by num_groups "
                f"{num_groups}"
            )
        self.num_groups, self.num_channels = int(num_groups), int(num_channels)
        self.eps, self.affine = float(eps), affine
        shape = (self.num_channels,)
        self.weight = self.bias = None
        if affine:
            self.param("weight", shape, lambda: np.ones(shape, np.float32))
            self.param("bias", shape, lambda: np.zeros(shape, np.float32))

    def forward(self, x: GraphTensor) -> GraphTensor:
        if x.ndim < 2 or x.view.shape[1] != self.num_channels:
            raise ShapeError(
                f"GroupNorm({self.num_groups}, {self.num_channels}): expected input "
                f"(N, {self.num_channels}, ...), got {x._shape_text()}"
            )
        shape = x.view.shape
        grouped = x.reshape((shape[0], self.num_groups, -1))
        y = grouped.layer_norm((-1,), self.eps).reshape(shape)
        if self.weight is not None:
            channel_shape = (self.num_channels,) + (1,) * (x.ndim - 2)
            y = y * self.weight.reshape(channel_shape) + self.bias.reshape(channel_shape)
        return y

    def extra_repr(self) -> str:
        return f"{self.num_groups}, {self.num_channels}, eps={self.eps}, affine={self.affine}"
