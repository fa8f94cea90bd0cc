"""`QuantLinear` and `QuantEmbedding`: `nn.Linear` / `nn.Embedding` with packed weights.

Each keeps its parameter name (`weight`), so a packed model has the state-dict names of
its float twin; the parameter holds the packed bytes as int32 words (or bool bytes),
shape (rows, row words): `BlockFormat.storage`.
`rope_heads` on a QuantLinear says its rows are in llama.cpp's interleaved-RoPE order
(how GGUF files store q/k projections): the output is put back into Hugging Face's
order with a view, so the file's bytes are used as they are.
"""

from __future__ import annotations

from luminal.dtype import DType
from luminal.errors import DTypeError, ShapeError
from luminal.graph import Graph
from luminal.nn.module import Module
from luminal.quant.formats import block_format
from luminal.quant.ops import dequantize_rows, quant_matmul
from luminal.tensor import GraphTensor


class QuantLinear(Module):
    """y = x @ W.T (+ bias) with W (out_features, in_features) packed in `kind`.
    `weight`: an existing packed parameter to share (a head tied to the embedding);
    `quantized_activations`: llama.cpp's 8-bit activations when decoding, and on the
    prompt for Q8_0/Q4_0 (see `quant_matmul`)."""

    def __init__(
        self,
        graph: Graph,
        in_features: int,
        out_features: int,
        kind: str,
        bias: bool = False,
        rope_heads: int | None = None,
        weight: GraphTensor | None = None,
        quantized_activations: bool = False,
    ) -> None:
        super().__init__(graph)
        self.quantized_activations = quantized_activations
        self.format = block_format(kind)
        self.in_features, self.out_features = int(in_features), int(out_features)
        dtype, width = self.format.storage(self.in_features)
        shape = (self.out_features, width)
        if weight is None:
            self.param("weight", shape, dtype=dtype)
        else:
            if tuple(weight.shape) != shape or weight.dtype != DType(dtype):
                raise ShapeError(f"{self._name()}: a shared weight must be {dtype} {shape}")
            self._params["weight"] = weight
            object.__setattr__(self, "weight", weight)
        self.bias = self.param("bias", (self.out_features,)) if bias else None
        if rope_heads is not None and self.out_features % (2 * rope_heads):
            raise ShapeError(f"{self._name()}: {rope_heads} heads of an even size do not fit")
        self.rope_heads = rope_heads

    def forward(self, x: GraphTensor) -> GraphTensor:
        if x.ndim == 0 or x.shape[-1] != self.in_features:
            raise ShapeError(
                f"{self._name()}: expects (..., {self.in_features}), got {x._shape_text()}"
            )
        if not x.dtype.is_float:
            raise DTypeError(f"{self._name()}: expects float input, got {x.dtype.value}")
        y = quant_matmul(x, self.weight, self.format.name, self.quantized_activations)
        if self.rope_heads is not None:
            y = _deinterleave(y, self.rope_heads)
        return y + self.bias if self.bias is not None else y

    def _name(self) -> str:
        return (
            f"QuantLinear({self.format.name}, in_features={self.in_features}, "
            f"out_features={self.out_features})"
        )

    def extra_repr(self) -> str:
        return (
            f"in_features={self.in_features}, out_features={self.out_features}, "
            f"format={self.format.name}, bias={self.bias is not None}"
        )


def _deinterleave(y: GraphTensor, heads: int) -> GraphTensor:
    """Undo llama.cpp's q/k row order on the outputs: per head, its rows are pairs
    (i, i + half) interleaved; Hugging Face keeps the halves apart."""
    lead, width = y.shape[:-1], y.shape[-1]
    half = int(width) // heads // 2
    split = y.reshape((*lead, heads, half, 2))
    return split.transpose(-1, -2).reshape((*lead, width))


class QuantEmbedding(Module):
    """Rows of a packed table (num_embeddings, embedding_dim) at int32 ids: the packed
    rows are gathered (index checks as `gather`), then dequantised."""

    def __init__(self, graph: Graph, num_embeddings: int, embedding_dim: int, kind: str) -> None:
        super().__init__(graph)
        self.format = block_format(kind)
        self.num_embeddings, self.embedding_dim = int(num_embeddings), int(embedding_dim)
        dtype, width = self.format.storage(self.embedding_dim)
        if dtype != "int32":  # bool gathers normalise bytes to 0/1
            raise ShapeError(
                f"QuantEmbedding: {self.format.name} rows of {embedding_dim} values are "
                f"{self.format.row_bytes(embedding_dim)} bytes, not whole int32 words"
            )
        self.param("weight", (self.num_embeddings, width), dtype=dtype)

    def forward(self, ids: GraphTensor) -> GraphTensor:
        if ids.dtype != DType.int32:
            raise DTypeError(
                f"QuantEmbedding({self.num_embeddings}, {self.embedding_dim}): ids must be "
                f"int32, got {ids.dtype.value} of shape {ids._shape_text()}"
            )
        return dequantize_rows(self.weight.gather(ids), self.format.name, self.embedding_dim)

    def extra_repr(self) -> str:
        return f"{self.num_embeddings}, {self.embedding_dim}, format={self.format.name}"
