"""Neural-network modules with PyTorch names, built graph first."""

from luminal.nn.module import Module, ModuleList, Sequential, skip_init

__all__ = ["Module", "ModuleList", "Sequential", "skip_init"]

from luminal.nn.conv import Conv1d, Conv2d, Conv3d, conv  # noqa: E402
from luminal.nn.pooling import (  # noqa: E402
    AdaptiveAvgPool1d,
    AdaptiveAvgPool2d,
    AdaptiveAvgPool3d,
    AvgPool1d,
    AvgPool2d,
    AvgPool3d,
    MaxPool1d,
    MaxPool2d,
    MaxPool3d,
    adaptive_avg_pool,
    avg_pool,
    max_pool,
)

__all__ += [
    "AdaptiveAvgPool1d",
    "AdaptiveAvgPool2d",
    "AdaptiveAvgPool3d",
    "AvgPool1d",
    "AvgPool2d",
    "AvgPool3d",
    "Conv1d",
    "Conv2d",
    "Conv3d",
    "MaxPool1d",
    "MaxPool2d",
    "MaxPool3d",
    "adaptive_avg_pool",
    "avg_pool",
    "conv",
    "max_pool",
]

from luminal.nn.attention import (  # noqa: E402
    KVCache,
    LlamaDecoderLayer,
    LlamaMLP,
    MultiHeadAttention,
    MultiheadAttention,
    RotaryEmbedding,
    TransformerEncoderLayer,
    apply_rotary,
    causal_mask,
    rotate_half,
    scaled_dot_product_attention,
)
from luminal.nn.layers import (  # noqa: E402
    GELU,
    Dropout,
    Embedding,
    LayerNorm,
    Linear,
    ReLU,
    RMSNorm,
    Sigmoid,
    SiLU,
    Softmax,
    Tanh,
    manual_seed,
)

__all__ += [
    "GELU",
    "Dropout",
    "Embedding",
    "KVCache",
    "LayerNorm",
    "Linear",
    "LlamaDecoderLayer",
    "LlamaMLP",
    "MultiHeadAttention",
    "MultiheadAttention",
    "RMSNorm",
    "ReLU",
    "RotaryEmbedding",
    "SiLU",
    "Sigmoid",
    "Softmax",
    "Tanh",
    "TransformerEncoderLayer",
    "apply_rotary",
    "causal_mask",
    "manual_seed",
    "rotate_half",
    "scaled_dot_product_attention",
]
