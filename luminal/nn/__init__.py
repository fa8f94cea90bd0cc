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
    MultiHeadAttention,
    MultiheadAttention,
    RotaryEmbedding,
    SelfAttention,
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
from luminal.nn.transformer import (  # noqa: E402
    DecoderLayer,
    GatedMLP,
    LlamaDecoderLayer,
    TransformerEncoderLayer,
)

__all__ += [
    "GELU",
    "DecoderLayer",
    "Dropout",
    "Embedding",
    "GatedMLP",
    "KVCache",
    "LayerNorm",
    "Linear",
    "LlamaDecoderLayer",
    "MultiHeadAttention",
    "MultiheadAttention",
    "RMSNorm",
    "ReLU",
    "RotaryEmbedding",
    "SelfAttention",
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

from luminal.nn.conv import (  # noqa: E402
    ConvTranspose1d,
    ConvTranspose2d,
    ConvTranspose3d,
    conv_transpose,
)
from luminal.nn.layers import Flatten, Identity, Unflatten, dropout  # noqa: E402
from luminal.nn.normalization import (  # noqa: E402
    BatchNorm1d,
    BatchNorm2d,
    BatchNorm3d,
    GroupNorm,
)
from luminal.nn.random import RandomState, random_state  # noqa: E402
from luminal.nn.upsample import Upsample, interpolate  # noqa: E402

__all__ += [
    "BatchNorm1d",
    "BatchNorm2d",
    "BatchNorm3d",
    "ConvTranspose1d",
    "ConvTranspose2d",
    "ConvTranspose3d",
    "Flatten",
    "GroupNorm",
    "Identity",
    "RandomState",
    "Unflatten",
    "Upsample",
    "conv_transpose",
    "dropout",
    "functional",
    "interpolate",
    "random_state",
]

from luminal.nn import functional  # noqa: E402
