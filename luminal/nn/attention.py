"""Attention: rotary embeddings, scaled dot-product attention, and attention modules with
a KV cache.

One attention module per weight layout users bring:

- `SelfAttention` names its projections `q_proj k_proj v_proj o_proj` (Hugging Face
  Llama), supports grouped-query attention, rotary embeddings (also partial), causal and
  sliding-window masking and a KV cache. Decoders with fused weights (Phi-3's `qkv_proj`,
  GPT-2's `c_attn`) subclass it and override only the projections.
- `MultiheadAttention` is `torch.nn.MultiheadAttention` (`in_proj_weight`, `out_proj`,
  its mask conventions), so `TransformerEncoderLayer` loads a PyTorch state dict.

The transformer blocks built from these modules live in `luminal.nn.transformer`.

KV cache: `forward(x, cache)` returns `(out, new_cache)`; a cache is a `KVCache` of
graph tensors `(batch, kv_heads, past, head_dim)`, keys after rotation. For decoding,
the cache is a pair of graph inputs whose `past` dim is symbolic (`cache_inputs()`), so
one graph serves the prompt (`past` = 0) and every decode step: the caller retrieves
the new cache and `.set()`s it as the next step's input. The causal mask and rotary
positions start at `past`.
"""

from __future__ import annotations

import math
import warnings
import weakref
from typing import Any, NamedTuple

import numpy as np

from luminal.dtype import DType, float32
from luminal.errors import LuminalError, ShapeError
from luminal.graph import Graph
from luminal.hl.combine import concat
from luminal.nn.layers import (
    Linear,
    check_features,
    uniform_init,
)
from luminal.nn.module import Module
from luminal.shape.expr import ExprLike, sym, var
from luminal.tensor import GraphTensor

# Added to masked scores. Finite on purpose: a 0/1 mask times -inf is NaN where it is 0,
# and a fully masked row stays finite (uniform weights) instead of NaN.
MASK_VALUE = -1e9


# ---------------------------------------------------------------- rotary embeddings
class RotaryEmbedding:
    """cos/sin tables for rotary position embeddings (Hugging Face layout: the
    head_dim / 2 frequencies base^(-2i/head_dim) repeated twice). Computed in the
    graph from the positions, so the offset (a KV cache's past length) may be symbolic.
    `inv_freq` overrides the frequencies (scaled RoPE variants); it becomes a graph
    input holding that data. `scaling` multiplies cos and sin (LongRoPE's attention
    factor). With `long_inv_freq` (LongRoPE), those frequencies replace `inv_freq` once
    the sequence (offset + seq) is longer than `long_after` positions, as transformers'
    Phi-3 switches them. `head_dim` is the rotated width: a partial rotary embedding
    rotates only the first `head_dim` features of each head (see `apply_rotary`)."""

    def __init__(
        self,
        head_dim: int,
        base: float = 10000.0,
        inv_freq: np.ndarray | None = None,
        scaling: float = 1.0,
        long_inv_freq: np.ndarray | None = None,
        long_after: int | None = None,
    ) -> None:
        if head_dim % 2:
            raise ShapeError(f"RotaryEmbedding: head_dim must be even, got {head_dim}")
        self.head_dim, self.base, self.scaling = int(head_dim), float(base), float(scaling)
        self.inv_freq = _frequencies("inv_freq", inv_freq, head_dim)
        self.long_inv_freq = _frequencies("long_inv_freq", long_inv_freq, head_dim)
        if (self.long_inv_freq is None) != (long_after is None) or (
            self.long_inv_freq is not None and self.inv_freq is None
        ):
            raise ShapeError(
                "RotaryEmbedding: long_inv_freq needs inv_freq and long_after (and "
                "long_after needs long_inv_freq)"
            )
        self.long_after = long_after
        self._inputs: weakref.WeakKeyDictionary[Graph, dict[str, GraphTensor]] = (
            weakref.WeakKeyDictionary()
        )

    def __call__(
        self, graph: Graph, seq: ExprLike, offset: ExprLike = 0
    ) -> tuple[GraphTensor, GraphTensor]:
        """cos and sin, each (seq, head_dim) float32, for positions offset .. offset+seq-1."""
        positions = graph.iota(var("z") + sym(offset), (seq,)).cast(float32).unsqueeze(1)
        angles = positions * self._inv_freq(graph, seq, offset)  # (seq, half)
        angles = concat([angles, angles], -1)
        cos, sin = angles.cos(), angles.sin()
        if self.scaling != 1.0:
            cos, sin = cos * self.scaling, sin * self.scaling
        return cos, sin

    def _inv_freq(self, graph: Graph, seq: ExprLike, offset: ExprLike) -> GraphTensor:
        if self.inv_freq is None:
            exponent = -2.0 * math.log2(self.base) / self.head_dim
            return (graph.arange(self.head_dim // 2).cast(float32) * exponent).exp2()
        short = self._input(graph, "inv_freq", self.inv_freq)
        if self.long_inv_freq is None:
            return short
        long = self._input(graph, "long_inv_freq", self.long_inv_freq)
        # 1 once the sequence outgrows long_after positions, else 0 (symbolic in offset)
        longer = (sym(offset) + sym(seq)).ge(int(self.long_after) + 1)  # type: ignore[arg-type]
        use_long = graph.iota(longer, (1,)).cast(float32)
        return short + use_long * (long - short)

    def _input(self, graph: Graph, name: str, data: np.ndarray) -> GraphTensor:
        """One graph input per table and graph (a rolled-back graph gets a new one)."""
        inputs = self._inputs.setdefault(graph, {})
        tensor = inputs.get(name)
        if tensor is None or tensor._node_id not in graph.nodes:
            tensor = inputs[name] = graph.tensor(data.shape, name=f"rotary.{name}").set(data)
        return tensor

    def __repr__(self) -> str:
        return f"RotaryEmbedding(head_dim={self.head_dim}, base={self.base})"


def _frequencies(name: str, data: np.ndarray | None, head_dim: int) -> np.ndarray | None:
    if data is None:
        return None
    data = np.asarray(data, np.float32)
    if data.shape != (head_dim // 2,):
        raise ShapeError(
            f"RotaryEmbedding: {name} has shape {data.shape}, expected ({head_dim // 2},)"
        )
    return data


def rotate_half(x: GraphTensor) -> GraphTensor:
    """(x1, x2) -> (-x2, x1) over the halves of the last dim."""
    half = x.shape[-1] // 2
    return concat([-x[..., half:], x[..., :half]], -1)


def apply_rotary(x: GraphTensor, cos: GraphTensor, sin: GraphTensor) -> GraphTensor:
    """x * cos + rotate_half(x) * sin (transformers' Llama convention); cos/sin
    broadcast against x, e.g. (seq, head_dim) against (batch, heads, seq, head_dim).
    Narrower tables (a partial rotary embedding) rotate the first cos.shape[-1]
    features and pass the rest through, as transformers' Phi-3 does."""
    width = cos.shape[-1]
    if width != x.shape[-1]:
        rotated = apply_rotary(x[..., :width], cos, sin)
        return concat([rotated, x[..., width:]], -1)
    return x * cos + rotate_half(x) * sin


# ---------------------------------------------------------------- attention core
def causal_mask(
    graph: Graph,
    queries: ExprLike,
    keys: ExprLike,
    offset: ExprLike | None = None,
    window: int | None = None,
) -> GraphTensor:
    """(queries, keys) float32 additive mask: 0 where key <= offset + query, MASK_VALUE
    elsewhere. `offset` defaults to keys - queries: the queries are the last positions
    (a KV cache's convention); torch's is_causal is offset 0. With a sliding `window`,
    a query also sees only the last `window` positions, itself included (transformers'
    `kv_idx > q_idx - sliding_window`, as Mistral attends)."""
    keys = sym(keys)
    offset = keys - sym(queries) if offset is None else sym(offset)
    z = var("z")
    row, col = z // keys, z % keys
    position = row + offset
    masked = position.lt(col)
    if window is not None:
        if window < 1:
            raise ShapeError(f"causal_mask: window must be a positive int, got {window}")
        masked = masked.or_(col.lt(position - window + 1))
    return graph.iota(masked, (queries, keys)).cast(float32) * MASK_VALUE


def additive_mask(mask: GraphTensor, attend_when_true: bool = True) -> GraphTensor:
    """A float mask as is; a bool mask as 0 / MASK_VALUE (True means attend when
    `attend_when_true`, as in scaled_dot_product_attention; torch.nn.MultiheadAttention
    uses the opposite)."""
    if mask.dtype != DType.bool:
        return mask
    keep = mask.cast(float32)
    return (1.0 - keep if attend_when_true else keep) * MASK_VALUE


def attend(
    query: GraphTensor,
    key: GraphTensor,
    value: GraphTensor,
    mask: GraphTensor | None = None,
    scale: float | None = None,
) -> tuple[GraphTensor, GraphTensor]:
    """softmax(q k^T * scale + mask) v over (..., heads, seq, dim) operands; key and value
    may have fewer heads (grouped-query: each kv head serves heads // kv_heads
    consecutive query heads). `mask` is additive, broadcastable to (..., heads, L, S).
    Returns the output (..., heads, L, dim_v) and the attention weights (..., heads, L, S)."""
    if min(query.ndim, key.ndim, value.ndim) < 3:  # no head dim: one head
        return _attend_heads(query, key, value, mask, scale)
    heads, kv_heads = query.shape[-3], key.shape[-3]
    if key.shape[-3] != value.shape[-3] or heads % kv_heads:
        raise ShapeError(
            f"attention: query {query._shape_text()}, key {key._shape_text()} and value "
            f"{value._shape_text()}: key/value heads must be equal and divide the query heads"
        )
    groups = heads // kv_heads
    if groups > 1:  # (..., kv, groups, L, E) against (..., kv, 1, S, E): no copies of k, v
        query = query.split_dims(-3, groups)
        key, value = key.unsqueeze(-3), value.unsqueeze(-3)
        if mask is not None and mask.ndim >= 3:
            mask = mask.split_dims(-3, groups) if mask.shape[-3] != 1 else mask.unsqueeze(-3)
    out, weights = _attend_heads(query, key, value, mask, scale)
    if groups > 1:
        out, weights = out.merge_dims(-4, -3), weights.merge_dims(-4, -3)
    return out, weights


def _attend_heads(
    query: GraphTensor,
    key: GraphTensor,
    value: GraphTensor,
    mask: GraphTensor | None,
    scale: float | None,
) -> tuple[GraphTensor, GraphTensor]:
    scale = 1.0 / math.sqrt(query.shape[-1]) if scale is None else scale
    scores = (query @ key.transpose(-1, -2)) * scale
    if mask is not None:
        scores = scores + mask
    weights = scores.softmax(-1)
    return weights @ value, weights


def scaled_dot_product_attention(
    query: GraphTensor,
    key: GraphTensor,
    value: GraphTensor,
    attn_mask: GraphTensor | None = None,
    dropout_p: float = 0.0,
    is_causal: bool = False,
    scale: float | None = None,
    enable_gqa: bool = False,
) -> GraphTensor:
    """torch.nn.functional.scaled_dot_product_attention (inference: dropout_p must be 0).
    A bool mask means True = attend; is_causal is top-left aligned as in torch."""
    if dropout_p:
        raise LuminalError("scaled_dot_product_attention: dropout is not implemented")
    if min(query.ndim, key.ndim) >= 3 and query.shape[-3] != key.shape[-3] and not enable_gqa:
        raise ShapeError(
            f"scaled_dot_product_attention: query {query._shape_text()} and key "
            f"{key._shape_text()} have different head counts; pass enable_gqa=True"
        )
    mask = None if attn_mask is None else additive_mask(attn_mask)
    if is_causal:
        causal = causal_mask(query.graph, query.shape[-2], key.shape[-2], offset=0)
        mask = causal if mask is None else mask + causal
    return attend(query, key, value, mask, scale)[0]


# ---------------------------------------------------------------- KV cache
class KVCache(NamedTuple):
    """Keys and values seen so far, each (batch, kv_heads, past, head_dim)."""

    key: GraphTensor
    value: GraphTensor

    def retrieve(self) -> KVCache:
        self.key.retrieve()
        self.value.retrieve()
        return self

    def numpy(self) -> tuple[np.ndarray, np.ndarray]:
        return self.key.numpy(), self.value.numpy()

    def set(self, key: Any, value: Any) -> KVCache:
        """Give cache inputs their data (e.g. the previous step's `numpy()`)."""
        self.key.set(key)
        self.value.set(value)
        return self


def _appended(cache: KVCache, key: GraphTensor, value: GraphTensor) -> KVCache:
    """The cache with the new keys and values appended along the positions, in the
    cache's dtype (rounded to it when the cache is narrower)."""
    parts = []
    for held, new in zip(cache, (key, value), strict=True):
        new = new if new.dtype == held.dtype else new.cast(held.dtype)
        parts.append(concat([held, new], 2))
    return KVCache(*parts)


# ---------------------------------------------------------------- Hugging Face-style attention
class SelfAttention(Module):
    """Self-attention with q_proj/k_proj/v_proj/o_proj (Hugging Face Llama names):
    grouped-query attention when num_kv_heads < num_heads, optional rotary embeddings,
    causal mask (with a `sliding_window`: each query sees its last `sliding_window`
    positions) and a KV cache (see the module docstring). `bias` applies to all four
    projections unless `out_bias` says otherwise (Qwen2: q/k/v only). `scale` defaults
    to 1/sqrt(head_dim). Layouts with fused weights override `make_projections`,
    `project` and `project_out`; everything else is shared."""

    def __init__(
        self,
        graph: Graph,
        embed_dim: int,
        num_heads: int,
        num_kv_heads: int | None = None,
        bias: bool = True,
        causal: bool = False,
        rotary: RotaryEmbedding | None = None,
        head_dim: int | None = None,
        out_bias: bool | None = None,
        sliding_window: int | None = None,
        scale: float | None = None,
    ) -> None:
        super().__init__(graph)
        num_kv_heads = num_kv_heads or num_heads
        head_dim = head_dim or embed_dim // num_heads
        name = type(self).__name__
        if num_heads % num_kv_heads:
            raise ShapeError(
                f"{name}: {num_heads} heads do not split into {num_kv_heads} kv groups"
            )
        if rotary is not None and rotary.head_dim > head_dim:
            raise ShapeError(f"{name}: rotary head_dim {rotary.head_dim} > head_dim {head_dim}")
        if sliding_window is not None and sliding_window < 1:
            raise ShapeError(f"{name}: sliding_window must be positive, got {sliding_window}")
        self.embed_dim, self.num_heads, self.num_kv_heads = embed_dim, num_heads, num_kv_heads
        self.head_dim, self.causal, self.rotary = head_dim, causal, rotary
        self.sliding_window = sliding_window
        self.scale = 1.0 / math.sqrt(head_dim) if scale is None else float(scale)
        self.make_projections(bias, bias if out_bias is None else out_bias)

    def make_projections(self, bias: bool, out_bias: bool) -> None:
        """The projection parameters: Llama's four separate Linear layers."""
        graph, q_width, kv_width = self.graph, self.q_width, self.kv_width
        self.q_proj = Linear(graph, self.embed_dim, q_width, bias)
        self.k_proj = Linear(graph, self.embed_dim, kv_width, bias)
        self.v_proj = Linear(graph, self.embed_dim, kv_width, bias)
        self.o_proj = Linear(graph, q_width, self.embed_dim, out_bias)

    @property
    def q_width(self) -> int:
        return self.num_heads * self.head_dim

    @property
    def kv_width(self) -> int:
        return self.num_kv_heads * self.head_dim

    def project(self, x: GraphTensor) -> tuple[GraphTensor, GraphTensor, GraphTensor]:
        """x (batch, seq, embed) -> queries, keys, values (batch, seq, heads * head_dim)."""
        return self.q_proj(x), self.k_proj(x), self.v_proj(x)

    def project_out(self, out: GraphTensor) -> GraphTensor:
        """The heads' outputs (batch, seq, heads * head_dim) -> (batch, seq, embed)."""
        return self.o_proj(out)

    def cache_inputs(
        self,
        batch: ExprLike = "batch",
        past: ExprLike = "past",
        name: str = "cache",
        dtype: DType = DType.float32,
    ) -> KVCache:
        """Graph inputs for a cache of symbolic length `past`; start decoding by setting
        them to empty arrays of shape (batch, kv_heads, 0, head_dim). A float16 cache
        holds the keys and values rounded to float16 (half the memory); `forward` reads
        it back as float32."""
        shape = (batch, self.num_kv_heads, past, self.head_dim)
        return KVCache(
            self.graph.tensor(shape, dtype=dtype, name=f"{name}.key"),
            self.graph.tensor(shape, dtype=dtype, name=f"{name}.value"),
        )

    def forward(
        self,
        x: GraphTensor,
        cache: KVCache | tuple[GraphTensor, GraphTensor] | None = None,
        attn_mask: GraphTensor | None = None,
        position_embeddings: tuple[GraphTensor, GraphTensor] | None = None,
    ) -> tuple[GraphTensor, KVCache]:
        """x (batch, seq, embed_dim) or (seq, embed_dim) -> (out of x's shape, new cache).
        `attn_mask`: additive float or bool (True = attend), broadcastable to
        (batch, heads, seq, past + seq). `position_embeddings`: precomputed (cos, sin),
        (seq, rotary_dim) or (batch, seq, rotary_dim), instead of `rotary`."""
        name = f"{type(self).__name__}(embed_dim={self.embed_dim}, num_heads={self.num_heads})"
        check_features(name, x, (self.embed_dim,))
        if x.ndim == 2:
            out, new_cache = self.forward(x.unsqueeze(0), cache, attn_mask, position_embeddings)
            return out.squeeze(0), new_cache
        if x.ndim != 3:
            raise ShapeError(
                f"{name}: input must be (batch, seq, embed) or (seq, embed), got {x._shape_text()}"
            )
        seq = x.shape[1]

        def heads(t: GraphTensor) -> GraphTensor:  # (b, s, h*d) -> (b, h, s, d)
            return t.split_dims(-1, self.head_dim).permute(0, 2, 1, 3)

        q, k, v = (heads(t) for t in self.project(x))
        past: ExprLike = 0
        if cache is not None:
            cache = KVCache(*cache)
            self._check_cache(name, x, cache)
            past = cache.key.shape[2]
        if position_embeddings is None and self.rotary is not None:
            position_embeddings = self.rotary(self.graph, seq, past)
        if position_embeddings is not None:
            cos, sin = position_embeddings
            if cos.ndim == 3:  # (batch, seq, d) -> (batch, 1, seq, d)
                cos, sin = cos.unsqueeze(1), sin.unsqueeze(1)
            q, k = apply_rotary(q, cos, sin), apply_rotary(k, cos, sin)
        new_cache = None
        if cache is not None:
            new_cache = _appended(cache, k, v)
            k, v = (t if t.dtype == q.dtype else t.cast(q.dtype) for t in new_cache)
        mask = None if attn_mask is None else additive_mask(attn_mask)
        if self.causal:
            causal = causal_mask(self.graph, seq, k.shape[2], past, self.sliding_window)
            mask = causal if mask is None else mask + causal
        out, _ = attend(q, k, v, mask, self.scale)
        out = out.permute(0, 2, 1, 3).merge_dims(2, 3)  # (b, s, h*d)
        return self.project_out(out), KVCache(k, v) if new_cache is None else new_cache

    def _check_cache(self, name: str, x: GraphTensor, cache: KVCache) -> None:
        for part in cache:
            dims = part.shape
            if len(dims) != 4 or dims[1] != self.num_kv_heads or dims[3] != self.head_dim:
                raise ShapeError(
                    f"{name}: cache tensors must be (batch, {self.num_kv_heads}, past, "
                    f"{self.head_dim}), got {part._shape_text()}"
                )
            known = (_as_int(dims[0]), _as_int(x.shape[0]))
            if None not in known and known[0] not in (1, known[1]):
                raise ShapeError(
                    f"{name}: cache batch {dims[0]} does not match input {x._shape_text()}"
                )

    def extra_repr(self) -> str:
        window = "" if self.sliding_window is None else f", sliding_window={self.sliding_window}"
        return (
            f"embed_dim={self.embed_dim}, num_heads={self.num_heads}, "
            f"num_kv_heads={self.num_kv_heads}, head_dim={self.head_dim}, "
            f"causal={self.causal}{window}"
        )


class MultiHeadAttention(SelfAttention):
    """Deprecated name of `SelfAttention` (kept because earlier releases documented it;
    `MultiheadAttention` is torch.nn.MultiheadAttention, a different weight layout)."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        warnings.warn(
            "lm.nn.MultiHeadAttention is deprecated; use lm.nn.SelfAttention (same "
            "arguments and parameter names)",
            DeprecationWarning,
            stacklevel=2,
        )
        super().__init__(*args, **kwargs)


def _as_int(dim: Any) -> int | None:
    return dim if isinstance(dim, int) else sym(dim).as_int()


# ---------------------------------------------------------------- PyTorch-style attention
class MultiheadAttention(Module):
    """torch.nn.MultiheadAttention (inference): packed `in_proj_weight` (3E, E) and
    `in_proj_bias`, `out_proj`; bool masks mean True = do NOT attend, as in torch.
    Returns (output, attention weights averaged over heads, or per head, or None)."""

    def __init__(
        self,
        graph: Graph,
        embed_dim: int,
        num_heads: int,
        dropout: float = 0.0,
        bias: bool = True,
        add_bias_kv: bool = False,
        add_zero_attn: bool = False,
        kdim: int | None = None,
        vdim: int | None = None,
        batch_first: bool = False,
    ) -> None:
        super().__init__(graph)
        if (
            add_bias_kv
            or add_zero_attn
            or kdim not in (None, embed_dim)
            or vdim
            not in (
                None,
                embed_dim,
            )
        ):
            raise LuminalError(
                "MultiheadAttention: add_bias_kv, add_zero_attn and kdim/vdim != embed_dim "
                "are not supported"
            )
        if embed_dim % num_heads:
            raise ShapeError(
                f"MultiheadAttention: embed_dim {embed_dim} is not divisible by {num_heads} heads"
            )
        self.embed_dim, self.num_heads, self.batch_first = embed_dim, num_heads, batch_first
        self.head_dim, self.dropout = embed_dim // num_heads, dropout
        bound = math.sqrt(6.0 / (4 * embed_dim))  # xavier_uniform on (3E, E)
        shape = (3 * embed_dim, embed_dim)
        self.param("in_proj_weight", shape, uniform_init(shape, bound))
        self.in_proj_bias = None
        if bias:
            self.param("in_proj_bias", (3 * embed_dim,), np.zeros(3 * embed_dim, np.float32))
        self.out_proj = Linear(graph, embed_dim, embed_dim, bias)
        if bias:
            self.out_proj.bias.set(np.zeros(embed_dim, np.float32))

    def forward(
        self,
        query: GraphTensor,
        key: GraphTensor,
        value: GraphTensor,
        key_padding_mask: GraphTensor | None = None,
        need_weights: bool = True,
        attn_mask: GraphTensor | None = None,
        average_attn_weights: bool = True,
        is_causal: bool = False,
    ) -> tuple[GraphTensor, GraphTensor | None]:
        name = f"MultiheadAttention(embed_dim={self.embed_dim}, num_heads={self.num_heads})"
        for t in (query, key, value):
            check_features(name, t, (self.embed_dim,))
        if query.ndim == 2:  # unbatched (L, E)
            out, weights = self.forward(
                query.unsqueeze(1 - self.batch_first),
                key.unsqueeze(1 - self.batch_first),
                value.unsqueeze(1 - self.batch_first),
                None if key_padding_mask is None else key_padding_mask.unsqueeze(0),
                need_weights,
                attn_mask,
                average_attn_weights,
                is_causal,
            )
            return out.squeeze(1 - self.batch_first), None if weights is None else weights[0]
        if not self.batch_first:  # (L, N, E) -> (N, L, E)
            query, key, value = (t.transpose(0, 1) for t in (query, key, value))
        e, h = self.embed_dim, self.num_heads
        w, b = self.in_proj_weight, self.in_proj_bias

        def project(x: GraphTensor, part: int) -> GraphTensor:  # -> (N, h, L, d)
            y = x @ w[part * e : (part + 1) * e].T
            if b is not None:
                y = y + b[part * e : (part + 1) * e]
            return y.split_dims(-1, self.head_dim).permute(0, 2, 1, 3)

        q, k, v = project(query, 0), project(key, 1), project(value, 2)
        batch, length, source = query.shape[0], query.shape[1], key.shape[1]
        mask = None
        if attn_mask is not None:
            mask = additive_mask(attn_mask, attend_when_true=False)
            if mask.ndim == 3:  # (N * h, L, S) -> (N, h, L, S)
                mask = mask.reshape((batch, h, length, source))
        if key_padding_mask is not None:
            padding = additive_mask(key_padding_mask, attend_when_true=False)
            padding = padding.reshape((batch, 1, 1, source))
            mask = padding if mask is None else mask + padding
        if is_causal and attn_mask is None:
            causal = causal_mask(self.graph, length, source, offset=0)
            mask = causal if mask is None else mask + causal
        out, weights = attend(q, k, v, mask)
        out = self.out_proj(out.permute(0, 2, 1, 3).merge_dims(2, 3))
        if not self.batch_first:
            out = out.transpose(0, 1)
        if not need_weights:
            return out, None
        return out, weights.mean(1) if average_attn_weights else weights

    def extra_repr(self) -> str:
        return f"embed_dim={self.embed_dim}, num_heads={self.num_heads}"


__all__ = [
    "KVCache",
    "MultiHeadAttention",
    "MultiheadAttention",
    "RotaryEmbedding",
    "SelfAttention",
    "apply_rotary",
    "attend",
    "causal_mask",
    "rotate_half",
    "scaled_dot_product_attention",
]
