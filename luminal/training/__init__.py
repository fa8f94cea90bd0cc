"""Training: reverse-mode autograd as a compiler pass, and what builds on it."""

from luminal.training.autograd import Autograd

__all__ = ["Autograd"]

# optimizers, losses and schedules (luminal/training/optim.py, losses.py, schedules.py)
from luminal.training import losses, schedules  # noqa: E402
from luminal.training.optim import (  # noqa: E402
    LAMB,
    SGD,
    Adam,
    AdamW,
    Optimizer,
    RMSprop,
    clip_grad_norm,
    clip_grad_value,
)

__all__ += [
    "LAMB",
    "SGD",
    "Adam",
    "AdamW",
    "Optimizer",
    "RMSprop",
    "clip_grad_norm",
    "clip_grad_value",
    "losses",
    "schedules",
]

# the training loop (luminal/training/loop.py)
from luminal.training.loop import ArrayLoader, History, TrainStep, fit, plot_history  # noqa: E402

__all__ += ["ArrayLoader", "History", "TrainStep", "fit", "plot_history"]

# gradient checkpointing (luminal/training/checkpoint.py)
from luminal.training.checkpoint import checkpoint, checkpoint_sequential  # noqa: E402

__all__ += ["checkpoint", "checkpoint_sequential"]

# mixed precision (luminal/training/mixed_precision.py)
from luminal.training.mixed_precision import GradScaler, autocast  # noqa: E402

__all__ += ["GradScaler", "autocast"]
