"""Quantized inference: GGUF block formats (Q8_0, Q4_0, Q4_K, Q6_K) kept packed in memory
and computed with directly.

- `formats`: byte layouts, numpy `dequantize` (bit-exact with `gguf.quants`) and `quantize`.
- `quant_matmul(x, packed, kind)` / `dequantize_rows(rows, kind, k)`: graph nodes whose C
  kernels read packed blocks (integer dot products for decode, dequantise-then-FMA for
  prefill) and whose numpy references keep the reference runtime the oracle.
- `QuantLinear`, `QuantEmbedding`: `nn.Linear` / `nn.Embedding` with packed weights.
- `load_gguf_model(path, cx)`: a Llama GGUF file, memory-mapped and used in place, its
  embedded vocabulary as `model.tokenizer` (`gguf_tokenizer`);
  `quantize_pretrained(cls, folder, cx, "q8_0")`: a float checkpoint quantized at load.
"""

from luminal.quant.formats import (
    FORMATS,
    SUPPORTED,
    BlockFormat,
    block_format,
    dequantize,
    quantize,
)
from luminal.quant.loading import (
    PackedModule,
    PackedTensor,
    load_gguf_model,
    quantize_pretrained,
    quantized_class,
    read_gguf,
)
from luminal.quant.modules import QuantEmbedding, QuantLinear
from luminal.quant.ops import dequantize_rows, quant_matmul
from luminal.quant.reference import PREFILL_ROWS, quantize_activations
from luminal.quant.tokenizer import gguf_tokenizer

load_gguf_llama = load_gguf_model  # the name the plan used

__all__ = [
    "FORMATS",
    "PREFILL_ROWS",
    "SUPPORTED",
    "BlockFormat",
    "PackedModule",
    "PackedTensor",
    "QuantEmbedding",
    "QuantLinear",
    "block_format",
    "dequantize",
    "dequantize_rows",
    "gguf_tokenizer",
    "load_gguf_llama",
    "load_gguf_model",
    "quant_matmul",
    "quantize",
    "quantize_activations",
    "quantize_pretrained",
    "quantized_class",
    "read_gguf",
]
