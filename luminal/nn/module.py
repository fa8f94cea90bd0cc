"""Modules: PyTorch's habits (parameters, state_dict, load_state_dict) on a lazy graph.

A module is built graph first, `lm.nn.Linear(cx, 784, 512)`: its parameters are graph
inputs (`cx.tensor`) named by their PyTorch path, so weights move from a PyTorch
`state_dict` unchanged. Calling a module on GraphTensors adds its ops to the graph.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from typing import Any

import numpy as np

from luminal.errors import ShapeError
from luminal.graph import Graph
from luminal.tensor import GraphTensor


class Module:
    """Base class. Subclasses create parameters with `self.param(...)` and submodules
    by attribute assignment, and implement `forward`."""

    def __init__(self, graph: Graph) -> None:
        object.__setattr__(self, "graph", graph)
        object.__setattr__(self, "_params", {})
        object.__setattr__(self, "_modules", {})

    def __setattr__(self, name: str, value: Any) -> None:
        if isinstance(value, Module):
            self._modules[name] = value
        object.__setattr__(self, name, value)

    def param(
        self,
        name: str,
        shape: tuple[int, ...],
        init: np.ndarray | None = None,
        dtype: Any = "float32",
    ) -> GraphTensor:
        """A parameter: a named graph input, given `init` data when provided."""
        tensor = self.graph.tensor(shape, dtype=dtype, name=name)
        if init is not None:
            tensor.set(init)
        self._params[name] = tensor
        object.__setattr__(self, name, tensor)
        return tensor

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

    def named_modules(self, prefix: str = "") -> Iterator[tuple[str, Module]]:
        yield prefix.rstrip("."), self
        for name, module in self._modules.items():
            yield from module.named_modules(f"{prefix}{name}.")

    def state_dict(self) -> dict[str, np.ndarray]:
        """Parameter values by PyTorch name (parameters without data are skipped)."""
        out = {}
        for name, tensor in self.named_parameters():
            data = self.graph.input_data.get(tensor.node_id)
            if data is not None:
                out[name] = np.array(data, copy=True)
        return out

    def load_state_dict(self, state: Mapping[str, Any], strict: bool = True) -> None:
        """Set parameters from a mapping of name -> array (numpy, torch or anything
        `np.asarray` takes). Checks every name and shape before setting anything."""
        params = dict(self.named_parameters())
        arrays = {name: _as_numpy(value) for name, value in state.items()}
        missing = sorted(set(params) - set(arrays))
        unexpected = sorted(set(arrays) - set(params))
        if strict and (missing or unexpected):
            raise ShapeError(
                f"load_state_dict into {type(self).__name__}: missing {missing}, "
                f"unexpected {unexpected}"
            )
        for name, array in arrays.items():
            if name in params and tuple(params[name].shape) != array.shape:
                raise ShapeError(
                    f"load_state_dict into {type(self).__name__}: parameter '{name}' has "
                    f"shape {tuple(params[name].shape)}, got {array.shape}"
                )
        for name, array in arrays.items():
            if name in params:
                params[name].set(array.astype(params[name].dtype.numpy, copy=False))

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
