"""Neural-network modules with PyTorch names, built graph first."""

from luminal.nn.module import Module, ModuleList, Sequential

__all__ = ["Module", "ModuleList", "Sequential"]
