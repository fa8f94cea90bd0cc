"""Basic layers with PyTorch's names, defaults, parameter names and shapes.

Parameters start from PyTorch's initialisation schemes (kaiming-uniform `Linear`,
standard-normal `Embedding`, ones/zeros for norms), drawn with numpy from one seeded
module-level generator: `manual_seed(seed)` makes a model's initial weights
reproducible, as `torch.manual_seed` does (the numbers differ from PyTorch's).
Modules without parameters (`ReLU()`, `Dropout(0.1)`, ...) need no graph; passing one
first (`ReLU(cx)`) is accepted too, so every module can be built graph first.
"""

from __future__ import annotations

import math
import numbers
from collections.abc import Sequence
from typing import Any

import numpy as np

from luminal.dtype import DType
from luminal.errors import DTypeError, LuminalError, ShapeError
from luminal.graph import Graph
from luminal.nn.module import Module
from luminal.tensor import GraphTensor

_generator = np.random.default_rng(0)


def manual_seed(seed: int) -> None:
    """Reseed the generator every module's initial weights come from."""
    global _generator
    _generator = np.random.default_rng(seed)


def default_generator() -> np.random.Generator:
    """The generator initial weights are drawn from (reseed with `manual_seed`)."""
    return _generator


def uniform_init(shape: Sequence[int], bound: float) -> np.ndarray:
    """U(-bound, bound) as float32: PyTorch's kaiming_uniform(a=sqrt(5)) for weights and
    its bias init both come down to this with bound = 1 / sqrt(fan_in)."""
    return _generator.uniform(-bound, bound, size=tuple(shape)).astype(np.float32)


def _normal_init(shape: tuple[int, int], padding_idx: int | None) -> np.ndarray:
    """N(0, 1) as float32 (PyTorch's Embedding init), zero at `padding_idx`."""
    init = _generator.standard_normal(shape).astype(np.float32)
    if padding_idx is not None:
        init[padding_idx] = 0.0
    return init


def fan_in_bound(fan_in: int) -> float:
    """1 / sqrt(fan_in), the bound PyTorch uses for Linear/Conv weights and biases."""
    return 1.0 / math.sqrt(fan_in) if fan_in > 0 else 0.0


def check_features(
    layer: str, x: GraphTensor, expected: Sequence[int], what: str = "features"
) -> None:
    """ShapeError naming the layer when x's trailing dims are not `expected`."""
    expected = tuple(expected)
    dims = tuple(x.shape)
    if len(dims) < len(expected) or dims[len(dims) - len(expected) :] != expected:
        got = dims[len(dims) - len(expected) :] if len(dims) >= len(expected) else dims
        raise ShapeError(
            f"{layer}: input of shape {x._shape_text()} has {what} "
            f"{_text(got)} in its last {len(expected)} dim(s), expected {_text(expected)}"
        )


def _text(dims: Sequence[Any]) -> str:
    return "(" + ", ".join(str(d) for d in dims) + ("," if len(dims) == 1 else "") + ")"


# ---------------------------------------------------------------- parameterised layers
class Linear(Module):
    """y = x @ weight.T + bias for x of any leading dims; weight (out, in) as in torch."""

    def __init__(
        self, graph: Graph, in_features: int, out_features: int, bias: bool = True
    ) -> None:
        super().__init__(graph)
        self.in_features, self.out_features = int(in_features), int(out_features)
        bound = fan_in_bound(self.in_features)
        shape = (self.out_features, self.in_features)
        self.param("weight", shape, lambda: uniform_init(shape, bound))
        if bias:
            self.param("bias", (self.out_features,), lambda: uniform_init(shape[:1], bound))
        else:
            self.bias = None

    def forward(self, x: GraphTensor) -> GraphTensor:
        check_features(self._name(), x, (self.in_features,))
        if x.ndim > 5:  # matmul broadcasts up to 5-D: fold the extra leading dims
            lead = x.view.shape[:-1]
            return self.forward(x.flatten(0, -2)).reshape((*lead, self.out_features))
        y = x @ self.weight.T
        return y + self.bias if self.bias is not None else y

    def _name(self) -> str:
        return f"Linear(in_features={self.in_features}, out_features={self.out_features})"

    def extra_repr(self) -> str:
        return (
            f"in_features={self.in_features}, out_features={self.out_features}, "
            f"bias={self.bias is not None}"
        )


class Embedding(Module):
    """Rows of `weight` (num_embeddings, embedding_dim) at integer ids of any shape."""

    def __init__(
        self,
        graph: Graph,
        num_embeddings: int,
        embedding_dim: int,
        padding_idx: int | None = None,
    ) -> None:
        super().__init__(graph)
        self.num_embeddings, self.embedding_dim = int(num_embeddings), int(embedding_dim)
        if padding_idx is not None:
            if not -num_embeddings <= padding_idx < num_embeddings:
                raise ShapeError(
                    f"Embedding: padding_idx {padding_idx} is out of range for "
                    f"{num_embeddings} embeddings"
                )
            padding_idx %= num_embeddings
        self.padding_idx = padding_idx
        shape = (self.num_embeddings, self.embedding_dim)
        self.param("weight", shape, lambda: _normal_init(shape, padding_idx))

    def forward(self, ids: GraphTensor) -> GraphTensor:
        if ids.dtype != DType.int32:
            raise DTypeError(
                f"Embedding({self.num_embeddings}, {self.embedding_dim}): ids must be int32, "
                f"got {ids.dtype.value} of shape {ids._shape_text()}"
            )
        return self.weight.gather(ids)

    def extra_repr(self) -> str:
        pad = f", padding_idx={self.padding_idx}" if self.padding_idx is not None else ""
        return f"{self.num_embeddings}, {self.embedding_dim}{pad}"


def _normalized_shape(shape: int | Sequence[int]) -> tuple[int, ...]:
    if isinstance(shape, numbers.Integral):
        return (int(shape),)
    return tuple(int(d) for d in shape)


class LayerNorm(Module):
    """(x - mean) / sqrt(var + eps) * weight + bias over the trailing `normalized_shape`."""

    def __init__(
        self,
        graph: Graph,
        normalized_shape: int | Sequence[int],
        eps: float = 1e-5,
        elementwise_affine: bool = True,
        bias: bool = True,
    ) -> None:
        super().__init__(graph)
        self.normalized_shape = _normalized_shape(normalized_shape)
        self.eps = eps
        self.elementwise_affine = elementwise_affine
        self.weight = self.bias = None
        if elementwise_affine:
            shape = self.normalized_shape
            self.param("weight", shape, lambda: np.ones(shape, np.float32))
            if bias:
                self.param("bias", shape, lambda: np.zeros(shape, np.float32))

    def forward(self, x: GraphTensor) -> GraphTensor:
        check_features(f"LayerNorm({self.normalized_shape})", x, self.normalized_shape, "dims")
        axes = tuple(range(-len(self.normalized_shape), 0))
        y = x.layer_norm(axes, self.eps)
        if self.weight is not None:
            y = y * self.weight
        if self.bias is not None:
            y = y + self.bias
        return y

    def extra_repr(self) -> str:
        return (
            f"{self.normalized_shape}, eps={self.eps}, elementwise_affine={self.elementwise_affine}"
        )


class RMSNorm(Module):
    """x * rsqrt(mean(x^2) + eps) * weight over the trailing dims: torch.nn.RMSNorm and
    Hugging Face's LlamaRMSNorm. eps defaults to Llama's 1e-6 (torch's default, None,
    means the dtype's machine epsilon; pass it explicitly to match)."""

    def __init__(
        self,
        graph: Graph,
        dim: int | Sequence[int],
        eps: float = 1e-6,
        elementwise_affine: bool = True,
    ) -> None:
        super().__init__(graph)
        self.normalized_shape = _normalized_shape(dim)
        self.eps = eps
        self.weight = None
        if elementwise_affine:
            shape = self.normalized_shape
            self.param("weight", shape, lambda: np.ones(shape, np.float32))

    def forward(self, x: GraphTensor) -> GraphTensor:
        check_features(f"RMSNorm({self.normalized_shape})", x, self.normalized_shape, "dims")
        axes = tuple(range(-len(self.normalized_shape), 0))
        y = x.std_norm(axes, self.eps)
        return y * self.weight if self.weight is not None else y

    def extra_repr(self) -> str:
        return f"{self.normalized_shape}, eps={self.eps}"


# ---------------------------------------------------------------- parameter-free layers
class Stateless(Module):
    """A module without parameters: the graph is optional (`ReLU()` or `ReLU(cx)`).
    Subclasses put their own arguments in `setup`."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        graph = None
        if args and isinstance(args[0], Graph):
            graph, args = args[0], args[1:]
        super().__init__(graph)  # type: ignore[arg-type]
        self.setup(*args, **kwargs)

    def setup(self) -> None:
        """Store the module's arguments (none by default)."""


class Dropout(Stateless):
    """Dropout(p=0.5): the identity in eval mode (the default); in training mode
    (`module.train()` before building) each element is zeroed with probability p and the
    rest scaled by 1 / (1 - p), as torch.nn.Dropout. Masks come from the graph's in-graph
    random source (`luminal.nn.random`): a fresh mask every run, the same sequence for the
    same seed, identical in the reference runtime and compiled code."""

    def setup(self, p: float = 0.5, inplace: bool = False) -> None:
        if not 0.0 <= p <= 1.0:
            raise LuminalError(f"Dropout: probability must be between 0 and 1, got {p}")
        self.p, self.inplace = float(p), inplace

    def forward(self, x: GraphTensor) -> GraphTensor:
        return dropout(x, self.p, self.training)

    def extra_repr(self) -> str:
        return f"p={self.p}"


def dropout(x: GraphTensor, p: float = 0.5, training: bool = True) -> GraphTensor:
    """torch.nn.functional.dropout: keep each element with probability 1 - p (to 2**-24)
    and scale it by 1 / (1 - p); the identity when not training or p == 0."""
    if not 0.0 <= p <= 1.0:
        raise LuminalError(f"dropout: probability must be between 0 and 1, got {p}")
    if not x.dtype.is_float:
        raise DTypeError(f"dropout: needs a floating tensor, got {x.dtype.value}")
    if not training or p == 0.0:
        return x
    if p == 1.0:
        return x * 0.0
    from luminal.nn.random import UNIFORM_BITS, random_state

    bits = random_state(x.graph).uniform_bits(x.view.shape)
    keep = bits.ge(round(p * (1 << UNIFORM_BITS))).cast(x.dtype)
    return x * keep * (1.0 / (1.0 - p))


class ReLU(Stateless):
    def forward(self, x: GraphTensor) -> GraphTensor:
        return x.relu()


class GELU(Stateless):
    """GELU(approximate="none"): exact through erf, as torch.nn.GELU; "tanh" for the
    tanh approximation."""

    def setup(self, approximate: str = "none") -> None:
        if approximate not in ("none", "tanh"):
            raise LuminalError(f"GELU: approximate must be 'none' or 'tanh', got {approximate!r}")
        self.approximate = approximate

    def forward(self, x: GraphTensor) -> GraphTensor:
        return x.gelu(approximate=self.approximate)

    def extra_repr(self) -> str:
        return f"approximate={self.approximate!r}"


class SiLU(Stateless):
    def forward(self, x: GraphTensor) -> GraphTensor:
        return x.silu()


class Sigmoid(Stateless):
    def forward(self, x: GraphTensor) -> GraphTensor:
        return x.sigmoid()


class Tanh(Stateless):
    def forward(self, x: GraphTensor) -> GraphTensor:
        return x.tanh()


class Softmax(Stateless):
    """Softmax over `dim` (-1 by default; torch's implicit-dim default is deprecated)."""

    def setup(self, dim: int = -1) -> None:
        self.dim = dim

    def forward(self, x: GraphTensor) -> GraphTensor:
        return x.softmax(self.dim)

    def extra_repr(self) -> str:
        return f"dim={self.dim}"


class Identity(Stateless):
    """torch.nn.Identity: returns its input (extra arguments are accepted and ignored)."""

    def setup(self, *args: Any, **kwargs: Any) -> None:
        """PyTorch's Identity takes and ignores any arguments."""

    def forward(self, x: GraphTensor) -> GraphTensor:
        return x


class Flatten(Stateless):
    """torch.nn.Flatten: merge dims start_dim..end_dim (1..-1 by default, keeping the batch)."""

    def setup(self, start_dim: int = 1, end_dim: int = -1) -> None:
        self.start_dim, self.end_dim = start_dim, end_dim

    def forward(self, x: GraphTensor) -> GraphTensor:
        return x.flatten(self.start_dim, self.end_dim)

    def extra_repr(self) -> str:
        return f"start_dim={self.start_dim}, end_dim={self.end_dim}"


class Unflatten(Stateless):
    """torch.nn.Unflatten: split dim `dim` into `unflattened_size` (one entry may be -1)."""

    def setup(self, dim: int, unflattened_size: Sequence[int]) -> None:
        self.dim, self.unflattened_size = dim, tuple(unflattened_size)

    def forward(self, x: GraphTensor) -> GraphTensor:
        from luminal.hl.movement import normalize_axis

        axis = normalize_axis(self.dim, x.ndim, "Unflatten", x._shape_text())
        shape = x.view.shape
        size, sizes = shape[axis].as_int(), self.unflattened_size
        known = math.prod(d for d in sizes if d != -1)
        fits = (
            sizes.count(-1) <= 1
            and known > 0
            and (size is None or (size % known == 0 if -1 in sizes else size == known))
        )
        if not fits:
            raise ShapeError(
                f"Unflatten: dim {self.dim} of {x._shape_text()} cannot be split into {sizes}"
            )
        return x.reshape((*shape[:axis], *sizes, *shape[axis + 1 :]))

    def extra_repr(self) -> str:
        return f"dim={self.dim}, unflattened_size={self.unflattened_size}"


ACTIVATIONS = {"relu": ReLU, "gelu": GELU, "silu": SiLU, "sigmoid": Sigmoid, "tanh": Tanh}


def activation(name: str) -> Stateless:
    """An activation module by its lower-case name (PyTorch / Hugging Face spelling)."""
    key = name.lower()
    if key == "swish":
        key = "silu"
    if key == "gelu_pytorch_tanh":
        return GELU(approximate="tanh")
    if key not in ACTIVATIONS:
        raise LuminalError(f"activation: unknown {name!r}; expected one of {sorted(ACTIVATIONS)}")
    return ACTIVATIONS[key]()
