"""Modules: PyTorch's habits (parameters, state_dict, load_state_dict) on a lazy graph.

A module is built graph first, `lm.nn.Linear(cx, 784, 512)`: its parameters are graph
inputs (`cx.tensor`) named by their PyTorch path, so weights move from a PyTorch
`state_dict` unchanged. Calling a module on GraphTensors adds its ops to the graph.
"""

from __future__ import annotations

import contextlib
import contextvars
from collections.abc import Callable, Iterator, Mapping
from typing import Any, TypeVar

import ml_dtypes
import numpy as np

from luminal.dtype import DType
from luminal.errors import DTypeError, ShapeError
from luminal.graph import Graph
from luminal.tensor import GraphTensor

M = TypeVar("M", bound="Module")
_SKIP_INIT: contextvars.ContextVar[bool] = contextvars.ContextVar("skip_init", default=False)


@contextlib.contextmanager
def skip_init() -> Iterator[None]:
    """Modules built inside leave their parameters without data: no random numbers drawn
    and no memory spent on weights that a checkpoint is about to replace (`from_pretrained`
    builds this way, then loads every parameter). Running the graph before loading raises
    ExecutionError naming the parameter."""
    token = _SKIP_INIT.set(True)
    try:
        yield
    finally:
        _SKIP_INIT.reset(token)


def build_then_load(graph: Graph, build: Callable[[], M], read_state: Callable[[], Any]) -> M:
    """`build()` a model inside `skip_init()`, then load `read_state()` into it: no random
    weights are drawn for a checkpoint to overwrite, and any error (a bad config, an
    unreadable file, a missing tensor) removes every node the model added to `graph`."""
    with graph.atomic():
        with skip_init():
            model = build()
        model.load_state_dict(read_state())
    return model


class Module:
    """Base class. Subclasses create parameters with `self.param(...)` and submodules
    by attribute assignment, and implement `forward`."""

    def __init__(self, graph: Graph) -> None:
        object.__setattr__(self, "graph", graph)
        object.__setattr__(self, "_params", {})
        object.__setattr__(self, "_buffers", {})
        object.__setattr__(self, "_modules", {})
        object.__setattr__(self, "training", False)

    def __setattr__(self, name: str, value: Any) -> None:
        if isinstance(value, Module):
            self._modules[name] = value
        object.__setattr__(self, name, value)

    def param(
        self,
        name: str,
        shape: tuple[int, ...],
        init: np.ndarray | Callable[[], np.ndarray] | None = None,
        dtype: Any = "float32",
    ) -> GraphTensor:
        """A parameter: a named graph input, given `init` data when provided (an array, or
        a function making one, which is not called inside `skip_init()`)."""
        tensor = self.graph.tensor(shape, dtype=dtype, name=name)
        if init is not None and not _SKIP_INIT.get():
            tensor.set(init() if callable(init) else init)
        self._params[name] = tensor
        object.__setattr__(self, name, tensor)
        return tensor

    def buffer(
        self,
        name: str,
        shape: tuple[int, ...],
        init: np.ndarray | Callable[[], np.ndarray] | None = None,
        dtype: Any = "float32",
    ) -> GraphTensor:
        """A buffer (BatchNorm's running statistics): a named graph input that is in the
        state dict but not in `parameters()`, so optimizers leave it alone."""
        tensor = self.param(name, shape, init, dtype)
        self._buffers[name] = self._params.pop(name)
        return tensor

    def train(self: M, mode: bool = True) -> M:
        """Build the graph in training mode (dropout masks, batch statistics) from now on,
        for this module and its children. Modules start in eval mode (unlike PyTorch): the
        mode is read when a module is called, i.e. when its ops are added to the graph."""
        for _, module in self.named_modules():
            object.__setattr__(module, "training", bool(mode))
        return self

    def eval(self: M) -> M:
        """`train(False)`: graphs built from now on use inference behaviour."""
        return self.train(False)

    def forward(self, *args: Any, **kwargs: Any) -> Any:
        raise NotImplementedError(f"{type(self).__name__} does not implement forward()")

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        return self.forward(*args, **kwargs)

    def named_parameters(self, prefix: str = "") -> Iterator[tuple[str, GraphTensor]]:
        for name, tensor in self._params.items():
            yield prefix + name, tensor
        for name, module in self._modules.items():
            yield from module.named_parameters(f"{prefix}{name}.")

    def parameters(self) -> list[GraphTensor]:
        return [tensor for _, tensor in self.named_parameters()]

    def named_buffers(self, prefix: str = "") -> Iterator[tuple[str, GraphTensor]]:
        for name, tensor in self._buffers.items():
            yield prefix + name, tensor
        for name, module in self._modules.items():
            yield from module.named_buffers(f"{prefix}{name}.")

    def named_tensors(self, prefix: str = "") -> Iterator[tuple[str, GraphTensor]]:
        """Parameters and buffers, each module's own first, in PyTorch's state-dict order."""
        yield from ((prefix + n, t) for n, t in self._params.items())
        yield from ((prefix + n, t) for n, t in self._buffers.items())
        for name, module in self._modules.items():
            yield from module.named_tensors(f"{prefix}{name}.")

    def named_modules(self, prefix: str = "") -> Iterator[tuple[str, Module]]:
        yield prefix.rstrip("."), self
        for name, module in self._modules.items():
            yield from module.named_modules(f"{prefix}{name}.")

    def state_dict(self) -> dict[str, np.ndarray]:
        """Parameter and buffer values by PyTorch name (those without data are skipped)."""
        out = {}
        for name, tensor in self.named_tensors():
            data = self.graph.input_data.get(tensor.node_id)
            if data is not None:
                out[name] = np.array(data, copy=True)
        return out

    def load_state_dict(self, state: Mapping[str, Any], strict: bool = True) -> None:
        """Set parameters and buffers from a mapping of name -> array (numpy, torch or
        anything `np.asarray` takes). All or nothing: every name, shape and dtype is
        checked, and every array converted to its parameter's dtype, before any changes.
        Names and shapes that do not fit raise ShapeError; complex, non-numeric, float
        data for an int parameter, and values outside the parameter dtype's range (a
        finite float64 that would become inf in float32, an int64 beyond int32) raise
        DTypeError."""
        params = dict(self.named_tensors())
        owner = type(self).__name__
        missing = sorted(set(params) - set(state))
        unexpected = sorted(str(name) for name in set(state) - set(params))
        if strict and (missing or unexpected):
            raise ShapeError(
                f"load_state_dict into {owner}: missing {missing}, unexpected {unexpected}"
            )
        converted = {
            name: _converted(owner, name, value, params[name])
            for name, value in state.items()
            if name in params
        }
        for name in converted:
            params[name].node  # noqa: B018 - a parameter a compiler removed fails here, first
        for name, array in converted.items():
            params[name].set(array)

    def __repr__(self) -> str:
        children = "".join(
            f"\n  ({n}): {m!r}".replace("\n", "\n  ") for n, m in self._modules.items()
        )
        return f"{type(self).__name__}({self.extra_repr()}{children}{chr(10) if children else ''})"

    def extra_repr(self) -> str:
        return ""


def _as_numpy(value: Any) -> np.ndarray:
    if hasattr(value, "detach"):  # a torch tensor, without importing torch
        value = value.detach().cpu()
        if str(value.dtype) == "torch.bfloat16":
            value = value.float()
        value = value.numpy()
    return np.asarray(value)


def _converted(owner: str, name: str, value: Any, param: GraphTensor) -> np.ndarray:
    """`value` as an array of `param`'s shape and dtype, or ShapeError/DTypeError naming
    the entry. Nothing is set here, so a bad entry leaves every parameter as it was."""
    where = f"load_state_dict into {owner}: parameter '{name}'"
    try:
        array = _as_numpy(value)
    except (TypeError, ValueError) as error:
        raise DTypeError(f"{where}: {type(value).__name__} is not an array ({error})") from None
    shape = tuple(param.shape)
    if array.shape != shape:
        raise ShapeError(f"{where} has shape {shape}, got {array.shape}")
    target = param.dtype
    if array.dtype == target.numpy:
        return array
    if not _castable(array.dtype, target):
        raise DTypeError(f"{where} is {target.value}, got data of dtype {array.dtype}")
    with np.errstate(over="ignore", invalid="ignore"):
        result = array.astype(target.numpy)
    _check_range(where, array, result, target)
    return result


_ML_FLOATS = {
    np.dtype(t) for t in (ml_dtypes.bfloat16, ml_dtypes.float8_e4m3fn, ml_dtypes.float8_e5m2)
}


def _castable(source: np.dtype, target: DType) -> bool:
    """What PyTorch's copy_ would take without losing meaning: numbers into floats, ints
    and bools into int32, bools into bool; never complex, strings or objects."""
    floating = source.kind == "f" or source in _ML_FLOATS
    if target.is_float:
        return floating or source.kind in "iub"
    if target == DType.int32:
        return source.kind in "iub"
    return source.kind == "b"


def _check_range(where: str, array: np.ndarray, result: np.ndarray, target: DType) -> None:
    """DTypeError when a value does not survive the conversion: an integer that would wrap,
    or a finite value that would become inf. Scans only when the source type reaches
    beyond the target's range."""
    if target == DType.int32:
        info = np.iinfo(np.int32)
        if array.dtype.kind in "iu" and array.size and not np.can_cast(array.dtype, np.int32):
            low, high = array.min(), array.max()
            if low < info.min or high > info.max:
                bad = low if low < info.min else high
                raise DTypeError(
                    f"{where} is int32, but the value {bad} is outside [{info.min}, {info.max}]"
                )
        return
    if not target.is_float or _largest(array.dtype) <= _largest(target.numpy):
        return
    with np.errstate(invalid="ignore"):
        overflow = np.isinf(result) & np.isfinite(array)
    if overflow.any():
        bad = array[overflow].reshape(-1)[0].item()
        raise DTypeError(
            f"{where} is {target.value}, but the value {bad!r} is outside its range "
            f"(largest finite: {_largest(target.numpy):g})"
        )


def _largest(dtype: np.dtype) -> float:
    """The largest finite value of a numeric dtype (ml_dtypes floats included)."""
    if dtype.kind in "iu":
        return float(np.iinfo(dtype).max)
    if dtype.kind == "b":
        return 1.0
    return float(ml_dtypes.finfo(dtype).max)


class Sequential(Module):
    """Modules applied in order; parameters named "0.weight", "1.bias", ... as in PyTorch."""

    def __init__(self, graph: Graph, *modules: Module) -> None:
        super().__init__(graph)
        for index, module in enumerate(modules):
            setattr(self, str(index), module)

    def forward(self, x: Any) -> Any:
        for module in self._modules.values():
            x = module(x)
        return x

    def __getitem__(self, index: int) -> Module:
        return list(self._modules.values())[index]

    def __len__(self) -> int:
        return len(self._modules)


class ModuleList(Module):
    """A list of submodules named "0", "1", ... (torch.nn.ModuleList)."""

    def __init__(self, graph: Graph, modules: list[Module] | None = None) -> None:
        super().__init__(graph)
        for module in modules or []:
            self.append(module)

    def append(self, module: Module) -> None:
        setattr(self, str(len(self._modules)), module)

    def __getitem__(self, index: int) -> Module:
        return list(self._modules.values())[index]

    def __iter__(self) -> Iterator[Module]:
        return iter(self._modules.values())

    def __len__(self) -> int:
        return len(self._modules)
