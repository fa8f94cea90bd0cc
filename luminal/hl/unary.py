"""Unary math, activations and normalisations, built from Log2/Exp2/Sin/Sqrt/Recip.

Dtype rules (PyTorch's): float functions of int/bool inputs compute in float32; `relu`,
`abs`, `sign` and `square` keep an int dtype. Composite float ops of float16/bfloat16
inputs compute in float32 and round once at the end, as PyTorch's CPU kernels do, rather
than rounding after every primitive.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, TypeVar

from luminal import ops
from luminal.dtype import DType, float32
from luminal.errors import DTypeError, LuminalError
from luminal.hl.movement import normalize_axes

if TYPE_CHECKING:
    from luminal.tensor import GraphTensor

Axes = Any  # int | tuple[int, ...]
Method = TypeVar("Method", bound=Callable[..., Any])

LOG2_E = 1.4426950408889634  # exp(x) = exp2(x * log2(e))
LN_2 = 0.6931471805599453  # log(x) = log2(x) * ln(2)
HALF_PI = math.pi / 2
SQRT_HALF = math.sqrt(0.5)
GELU_TANH_SCALE = 2.0 * math.sqrt(2.0 / math.pi)  # 0.5 * (1 + tanh(u)) = sigmoid(2u)
GELU_TANH_CUBIC = 0.044715

# erf(x) ~ x * P(x^2) / Q(x^2) on [-3.92, 3.92]; beyond, where the true erf rounds to +-1 in
# float32, exactly +-1 (so 1 - erf(x) is exactly 0 there, as in PyTorch). Coefficients fitted
# here (iteratively reweighted least squares on Chebyshev nodes), lowest degree first: the
# approximation error is 4.3e-8 and, evaluated in float32, the error against the true erf
# stays below 4e-7 on every real (tests/hl/test_unary.py checks < 1e-6 on a dense grid).
ERF_SATURATION = 3.92
ERF_NUMERATOR = (
    1.1283787488937378,
    0.20611466467380524,
    0.051397331058979034,
    0.003972914069890976,
    0.00014898755762260407,
    -1.994306558117387e-06,
    1.992147957707857e-08,
)
ERF_DENOMINATOR = (
    1.0,
    0.5159931182861328,
    0.11756473779678345,
    0.014889256097376347,
    0.0010241302661597729,
)


def in_float32(method: Method) -> Method:
    """Run a composite float op in float32: int/bool inputs stay float32 (PyTorch's
    promotion), float16/bfloat16 inputs are cast back once at the end."""

    @functools.wraps(method)
    def wrapper(self: GraphTensor, *args: Any, **kwargs: Any) -> GraphTensor:
        if self.dtype == float32:
            return method(self, *args, **kwargs)
        if not self.dtype.is_float:
            return method(self.cast(float32), *args, **kwargs)
        return method(self.cast(float32), *args, **kwargs).cast(self.dtype)

    return wrapper  # type: ignore[return-value]


def _polynomial(x: GraphTensor, coefficients: tuple[float, ...]) -> GraphTensor:
    """sum(c_k * x^k) by Horner's rule (coefficients lowest degree first)."""
    result = x * coefficients[-1] + coefficients[-2]
    for c in reversed(coefficients[:-2]):
        result = result * x + c
    return result


class UnaryOps:
    """Elementwise math and activations, and normalisations over axes."""

    # ---------------------------------------------------------------- plumbing
    def _float(self: GraphTensor) -> GraphTensor:
        """Integer and bool inputs compute in float32, as in PyTorch."""
        return self if self.dtype.is_float else self.cast(float32)

    def _primitive_unary(self: GraphTensor, op: ops.Op) -> GraphTensor:
        return self.graph.add_node(op, [self._float()])

    def _no_bool(self: GraphTensor, op: str) -> None:
        if self.dtype == DType.bool:
            raise DTypeError(
                f"{op}: not defined for bool tensors (shape {self._shape_text()}); cast first"
            )

    def _checked_axes(self: GraphTensor, axes: Axes, op: str) -> tuple[int, ...]:
        """Axes checked before the op's own nodes (ShapeError naming op and shape); a cast
        added before the check is rolled back by the op's atomic wrapper."""
        return normalize_axes(axes, self.ndim, op, self._shape_text())

    # ---------------------------------------------------------------- primitives
    def log2(self: GraphTensor) -> GraphTensor:
        return self._primitive_unary(ops.Log2())

    def exp2(self: GraphTensor) -> GraphTensor:
        return self._primitive_unary(ops.Exp2())

    def sin(self: GraphTensor) -> GraphTensor:
        return self._primitive_unary(ops.Sin())

    def sqrt(self: GraphTensor) -> GraphTensor:
        return self._primitive_unary(ops.Sqrt())

    def reciprocal(self: GraphTensor) -> GraphTensor:
        return self._primitive_unary(ops.Recip())

    # ---------------------------------------------------------------- elementwise math
    @in_float32
    def exp(self: GraphTensor) -> GraphTensor:
        """e^x as 2^(x log2 e)."""
        return (self * LOG2_E).exp2()

    @in_float32
    def log(self: GraphTensor) -> GraphTensor:
        """Natural log as log2(x) ln 2."""
        return self.log2() * LN_2

    @in_float32
    def cos(self: GraphTensor) -> GraphTensor:
        """cos(x) = sin(x + pi/2); abs error below 2e-7 on [-2, 2] in float32 (the same as
        sin(pi/2 - x), which costs one more op)."""
        return (self + HALF_PI).sin()

    def square(self: GraphTensor) -> GraphTensor:
        """x * x; int stays int."""
        return self * self

    def abs(self: GraphTensor) -> GraphTensor:
        """|x|, exact for infinities and zeros (max(x, -x)); int stays int."""
        self._no_bool("abs")
        return self.maximum(-self)

    def sign(self: GraphTensor) -> GraphTensor:
        """-1, 0 or 1 in the input dtype; sign(0) = sign(NaN) = 0 like PyTorch."""
        if self.dtype == DType.bool:
            return self
        return self.gt(0) - self.lt(0)

    @in_float32
    def erf(self: GraphTensor) -> GraphTensor:
        """The error function to float32 accuracy (abs error < 1e-6): an odd rational
        approximation, selected away (exactly +-1) where |x| > 3.92. The clamp keeps the
        polynomials finite for huge |x|; NaN stays NaN."""
        x = self.clip(-ERF_SATURATION, ERF_SATURATION)
        x2 = x * x
        numerator = _polynomial(x2, ERF_NUMERATOR)
        denominator = _polynomial(x2, ERF_DENOMINATOR)
        approximation = x * numerator * denominator.reciprocal()
        saturated = self.abs().gt(ERF_SATURATION)  # 0/1; adding 0 * finite keeps it exact
        return approximation + (x.sign() - approximation) * saturated

    # ---------------------------------------------------------------- activations
    def relu(self: GraphTensor) -> GraphTensor:
        """max(x, 0): exact, keeps NaN and the int dtype."""
        self._no_bool("relu")
        return self.maximum(0)

    @in_float32
    def leaky_relu(self: GraphTensor, negative_slope: float = 0.01) -> GraphTensor:
        """x for x > 0, negative_slope * x otherwise (one term is always zero, so exact
        up to the one rounding of the product)."""
        return self.maximum(0) + self.minimum(0) * negative_slope

    @in_float32
    def sigmoid(self: GraphTensor) -> GraphTensor:
        """1 / (1 + e^-x): e^-x overflowing to inf gives exactly 0, never NaN."""
        return (1.0 + (self * -LOG2_E).exp2()).reciprocal()

    @in_float32
    def silu(self: GraphTensor) -> GraphTensor:
        """x * sigmoid(x)."""
        return self * self.sigmoid()

    swish = silu

    @in_float32
    def tanh(self: GraphTensor) -> GraphTensor:
        """2 sigmoid(2x) - 1: saturates to +-1 for large |x| without inf/inf."""
        return (self * 2.0).sigmoid() * 2.0 - 1.0

    def gelu(self: GraphTensor, approximate: str = "tanh") -> GraphTensor:
        """GELU; the tanh approximation by default (the original luminal's).
        approximate="none" is the exact erf form of PyTorch's default and BERT checkpoints."""
        if approximate == "tanh":
            return self._gelu_tanh()
        if approximate == "none":
            return self._gelu_erf()
        raise LuminalError(f"gelu: approximate must be 'tanh' or 'none', got {approximate!r}")

    def gelu_exact(self: GraphTensor) -> GraphTensor:
        """0.5 x (1 + erf(x / sqrt 2)): torch.nn.functional.gelu(approximate='none')."""
        return self._gelu_erf()

    @in_float32
    def _gelu_tanh(self: GraphTensor) -> GraphTensor:
        """0.5 x (1 + tanh(u)) = x sigmoid(2u), u = sqrt(2/pi) (x + 0.044715 x^3)."""
        inner = self * ((self * self) * (GELU_TANH_SCALE * GELU_TANH_CUBIC) + GELU_TANH_SCALE)
        return self * inner.sigmoid()

    @in_float32
    def _gelu_erf(self: GraphTensor) -> GraphTensor:
        return self * ((self * SQRT_HALF).erf() * 0.5 + 0.5)

    # ---------------------------------------------------------------- normalisations
    @in_float32
    def softmax(self: GraphTensor, axis: Axes = -1) -> GraphTensor:
        """exp(x - max) / sum(exp(x - max)) over `axis` (an int or a tuple); subtracting
        the max keeps it finite for large inputs and -inf entries."""
        axes = self._checked_axes(axis, "softmax")
        exps = (self - self._reduce(ops.MaxReduce, axes, True, "softmax")).exp()
        return exps * exps.sum(axes, keepdim=True).reciprocal()

    @in_float32
    def log_softmax(self: GraphTensor, axis: Axes = -1) -> GraphTensor:
        """x - max - log(sum(exp(x - max))) over `axis`."""
        axes = self._checked_axes(axis, "log_softmax")
        shifted = self - self._reduce(ops.MaxReduce, axes, True, "log_softmax")
        return shifted - shifted.exp().sum(axes, keepdim=True).log()

    @in_float32
    def mean_norm(self: GraphTensor, axes: Axes = -1) -> GraphTensor:
        """x - mean(x) over `axes`."""
        norm = self._checked_axes(axes, "mean_norm")
        return self - self.mean(norm, keepdim=True)

    @in_float32
    def std_norm(self: GraphTensor, axes: Axes = -1, eps: float = 1e-5) -> GraphTensor:
        """x / sqrt(mean(x^2) + eps) over `axes` (RMS normalisation, as in the original)."""
        norm = self._checked_axes(axes, "std_norm")
        mean_square = (self * self).mean(norm, keepdim=True)
        return self * (mean_square + eps).sqrt().reciprocal()

    @in_float32
    def layer_norm(self: GraphTensor, axes: Axes = -1, eps: float = 1e-5) -> GraphTensor:
        """(x - mean) / sqrt(var + eps) over `axes` with the biased variance, no affine
        part: torch's layer_norm when `axes` are the trailing dims."""
        norm = self._checked_axes(axes, "layer_norm")
        centered = self.mean_norm(norm)
        return centered.std_norm(norm, eps)

    @in_float32
    def normalize(
        self: GraphTensor, p: float = 2.0, axis: Axes = -1, eps: float = 1e-12
    ) -> GraphTensor:
        """x / max(||x||_p, eps) over `axis` (torch.nn.functional.normalize)."""
        norm = self._checked_axes(axis, "normalize")
        if p == 2:
            length = (self * self).sum(norm, keepdim=True).sqrt()
        elif p == math.inf:
            length = self.abs()._reduce(ops.MaxReduce, norm, True, "normalize")
        elif p == 1:
            length = self.abs().sum(norm, keepdim=True)
        else:
            length = self.abs().pow(p).sum(norm, keepdim=True).pow(1.0 / p)
        return self * length.maximum(eps).reciprocal()
