"""torch.nn.functional's names for the functional forms of `lm.nn` layers."""

from luminal.nn.attention import scaled_dot_product_attention
from luminal.nn.conv import conv, conv_transpose
from luminal.nn.layers import dropout
from luminal.nn.pooling import adaptive_avg_pool, avg_pool, max_pool
from luminal.nn.upsample import interpolate

__all__ = [
    "adaptive_avg_pool",
    "avg_pool",
    "conv",
    "conv_transpose",
    "dropout",
    "interpolate",
    "max_pool",
    "scaled_dot_product_attention",
]
