"""The exception family: every error luminal raises on bad input derives from LuminalError."""


class LuminalError(Exception):
    """Base class of every error luminal raises for bad input or an impossible request."""


class ShapeError(LuminalError, ValueError):
    """Shapes do not fit the op (broadcasting, reshape, axis out of range, data shape)."""


class DTypeError(LuminalError, TypeError):
    """A dtype is not accepted by the op, or data of the wrong dtype was given."""


class GraphError(LuminalError):
    """A graph is used wrongly: a missing input, a removed node, tensors of two graphs."""


class CompileError(LuminalError):
    """A compiler could not compile the graph."""


class ExecutionError(LuminalError):
    """A graph could not be executed (an input without data, a failing Function op)."""


class OutOfMemoryError(ExecutionError, MemoryError):
    """A run needs more memory than the machine has: names the tensor and the bytes.
    Raised before anything runs where the dims tell (the memory plan, kernel scratch)."""


class DistributedError(LuminalError):
    """A collective failed: a peer raised, died or timed out, or the ranks disagree."""


def format_shape(dims: object) -> str:
    """A shape as users write it: (2, 3), (batch,), ()."""
    items = [str(d) for d in dims]  # type: ignore[attr-defined]
    return "(" + ", ".join(items) + ("," if len(items) == 1 else "") + ")"
