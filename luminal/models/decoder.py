"""The decoder-only language model every causal LM in `luminal.models` is a configuration of.

`CausalLM` builds token embeddings (optionally scaled, optionally plus a learned position
table), a stack of `lm.nn.DecoderLayer` blocks, a final norm and a vocabulary head (or the
tied embedding), and names every parameter as the model's Hugging Face checkpoint does.
A model module (`llama.py`, `mistral.py`, ...) says only how it differs: its config class,
its `CheckpointNames`, and the hooks `build_attention`, `build_mlp`, `build_norm`,
`build_rotary`, `layer_window` and `checkpoint_state`.

`DecoderSession` owns one graph for generation: token ids `(batch, "seq")`, one KV cache
per layer in a preallocated buffer `(batch, kv_heads, "cap", head_dim)` of which the graph
reads the first "past" positions, and as outputs the logits of the last position and the
keys/values of the new positions, which the session writes into the buffers in place (an
append copies only the new rows). "seq", "past" and "cap" are symbolic, so the same
(compiled) graph runs the prompt (past = 0) and then every single-token step; nothing
recompiles.
"""

from __future__ import annotations

import dataclasses
import math
import os
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any, ClassVar

import numpy as np

from luminal import backends
from luminal.dtype import DType, float16, float32, int32
from luminal.errors import DTypeError, LuminalError, ShapeError
from luminal.graph import Graph
from luminal.nn.attention import KVCache, RotaryEmbedding, SelfAttention
from luminal.nn.layers import GELU, Embedding, Linear, RMSNorm, Stateless, activation
from luminal.nn.module import Module, ModuleList, build_then_load, skip_init
from luminal.nn.transformer import DecoderLayer, GatedMLP
from luminal.shape.expr import ExprLike, sym, var
from luminal.tensor import GraphTensor
from luminal.weights import LlamaConfig, load_hf_config, load_safetensors

PathLike = str | os.PathLike[str]
MIN_CACHE = 64  # positions a session's cache buffers hold at least


def hf_activation(name: str) -> Stateless:
    """Hugging Face's activation names: "gelu" is the exact (erf) GELU; "gelu_new" and
    "gelu_pytorch_tanh" the tanh approximation; others as `lm.nn.activation` spells them."""
    if name.lower() in ("gelu_new", "gelu_pytorch_tanh"):
        return GELU(approximate="tanh")
    return activation(name)


# ---------------------------------------------------------------- rotary embeddings
def rope_kind(config: LlamaConfig) -> str:
    scaling = config.rope_scaling
    if scaling is None:
        return "default"
    return str(scaling.get("rope_type", scaling.get("type", "default")))


def rotary_embedding(config: LlamaConfig) -> RotaryEmbedding:
    """The rotary embedding a config describes: transformers' "default", "linear",
    "llama3" and "longrope" rope types, over the first `partial_rotary_factor` of each
    head. Other types raise LuminalError."""
    assert config.head_dim is not None
    dim = int(config.head_dim * getattr(config, "partial_rotary_factor", 1.0))
    kind = rope_kind(config)
    if dim <= 0 or dim % 2:
        raise ShapeError(f"{type(config).__name__}: the rotary width {dim} must be even")
    if kind == "default":
        return RotaryEmbedding(dim, config.rope_theta)
    base = 1.0 / config.rope_theta ** (np.arange(0, dim, 2, dtype=np.float64) / dim)
    scaling = config.rope_scaling
    assert scaling is not None
    if kind == "linear":
        return RotaryEmbedding(dim, config.rope_theta, base / float(scaling["factor"]))
    if kind == "llama3":
        return RotaryEmbedding(dim, config.rope_theta, _llama3_frequencies(base, scaling))
    if kind == "longrope":
        return _longrope(config, base, scaling)
    raise LuminalError(
        f"{type(config).__name__}: rope_scaling type {kind!r} is not supported; expected "
        "'default', 'linear', 'llama3' or 'longrope'"
    )


def _llama3_frequencies(inv_freq: np.ndarray, scaling: Mapping[str, Any]) -> np.ndarray:
    factor = float(scaling["factor"])
    low, high = float(scaling["low_freq_factor"]), float(scaling["high_freq_factor"])
    old_context = float(scaling["original_max_position_embeddings"])
    wavelen = 2 * math.pi / inv_freq
    scaled = np.where(wavelen > old_context / low, inv_freq / factor, inv_freq)
    smooth = (old_context / wavelen - low) / (high - low)
    smoothed = (1 - smooth) * scaled / factor + smooth * scaled
    medium = (wavelen >= old_context / high) & (wavelen <= old_context / low)
    return np.where(medium, smoothed, scaled)


def _longrope(
    config: LlamaConfig, inv_freq: np.ndarray, scaling: Mapping[str, Any]
) -> RotaryEmbedding:
    """LongRoPE (Phi-3): short factors up to original_max_position_embeddings positions,
    long factors beyond, cos/sin scaled by the attention factor (transformers' formula)."""
    name = type(config).__name__
    original = scaling.get("original_max_position_embeddings") or getattr(
        config, "original_max_position_embeddings", None
    )
    if not isinstance(original, int) or original <= 0:
        raise LuminalError(f"{name}: longrope needs a positive original_max_position_embeddings")
    factors = [
        _factors(name, scaling, key, len(inv_freq)) for key in ("short_factor", "long_factor")
    ]
    factor = scaling.get("factor") or config.max_position_embeddings / original
    attention = scaling.get("attention_factor")
    if attention is None:
        attention = 1.0 if factor <= 1.0 else math.sqrt(1 + math.log(factor) / math.log(original))
    dim = 2 * len(inv_freq)
    return RotaryEmbedding(
        dim,
        config.rope_theta,
        inv_freq / factors[0],
        float(attention),
        inv_freq / factors[1],
        original,
    )


def _factors(name: str, scaling: Mapping[str, Any], key: str, count: int) -> np.ndarray:
    values = scaling.get(key)
    ok = isinstance(values, list) and len(values) == count
    if ok:
        array = np.asarray(values, np.float64)
        ok = array.dtype.kind == "f" and bool(np.all(np.isfinite(array) & (array > 0)))
    if not ok:
        raise LuminalError(
            f"{name}: rope_scaling 'longrope' needs {key!r}: {count} finite positive numbers, "
            f"got {values!r}"
        )
    return array


# ---------------------------------------------------------------- the model
@dataclasses.dataclass(frozen=True)
class CheckpointNames:
    """Where a decoder's parts sit in its checkpoint: the stack's attribute (`model.` in
    Llama, `transformer.` in GPT-2), its embedding tables, layer list and final norm, and
    each layer's attention, MLP and two norms."""

    model: str = "model"
    embed: str = "embed_tokens"
    positions: str | None = None
    layers: str = "layers"
    norm: str = "norm"
    layer: tuple[str, str, str, str] = (
        "self_attn",
        "mlp",
        "input_layernorm",
        "post_attention_layernorm",
    )


class DecoderStack(Module):
    """Embeddings, layers and final norm (transformers' `LlamaModel`, `GPT2Model`, ...),
    under the names `lm.names` gives."""

    def __init__(self, graph: Graph, lm: CausalLM) -> None:
        super().__init__(graph)
        names, config = lm.names, lm.config
        object.__setattr__(self, "names", names)
        object.__setattr__(self, "rotary", lm.rotary)
        object.__setattr__(self, "embed_scale", lm.embed_scale)
        setattr(self, names.embed, Embedding(graph, config.vocab_size, config.hidden_size))
        if names.positions is not None:
            table = Embedding(graph, config.max_position_embeddings, config.hidden_size)
            setattr(self, names.positions, table)
        layers = [lm.build_layer(graph, index) for index in range(config.num_hidden_layers)]
        setattr(self, names.layers, ModuleList(graph, layers))
        setattr(self, names.norm, lm.build_norm(graph))

    @property
    def token_embedding(self) -> Embedding:
        return getattr(self, self.names.embed)

    @property
    def blocks(self) -> ModuleList:
        return getattr(self, self.names.layers)

    @property
    def final_norm(self) -> Module:
        return getattr(self, self.names.norm)

    def forward(
        self, ids: GraphTensor, caches: Sequence[KVCache] | None = None
    ) -> tuple[GraphTensor, list[KVCache]]:
        """ids (batch, seq) -> (hidden states (batch, seq, hidden) before the final norm,
        new caches). With caches, positions start at their (symbolic) past length."""
        seq = ids.shape[1]
        past: ExprLike = 0 if not caches else caches[0].key.shape[2]
        hidden = self.token_embedding(ids)
        if self.embed_scale != 1.0:
            hidden = hidden * self.embed_scale
        if self.names.positions is not None:
            positions = self.graph.iota(var("z") + sym(past), (seq,))
            hidden = hidden + getattr(self, self.names.positions)(positions)
        # cos/sin once for all layers, positions past .. past + seq - 1
        position_embeddings = None if self.rotary is None else self.rotary(self.graph, seq, past)
        new_caches = []
        for index, layer in enumerate(self.blocks):
            cache = None if caches is None else caches[index]
            hidden, new_cache = layer(hidden, cache, None, position_embeddings)
            # one e-graph region per layer: identical layers are saturated once (a deep
            # stack as one region took seconds and, under load, could stop at the
            # e-graph's time limit before its products became BLAS calls)
            hidden = hidden.graph_break()
            new_caches.append(new_cache)
        return hidden, new_caches


class CausalLM(Module):
    """A decoder-only causal language model (inference). `config`: a `config.json`
    mapping (or an instance of `config_class`). Calling it on int32 token ids
    `(batch, seq)` returns logits `(batch, seq, vocab)`; ids `(seq,)` give
    `(seq, vocab)`. The defaults are Llama's; subclasses override the hooks."""

    config_class: ClassVar[type[LlamaConfig]] = LlamaConfig
    names: ClassVar[CheckpointNames] = CheckpointNames()
    # state-dict entries some checkpoints carry that are buffers, not parameters
    buffer_suffixes: ClassVar[tuple[str, ...]] = ("rotary_emb.inv_freq",)
    # the attention module of every layer (a subclass where the checkpoint fuses projections)
    attention_class: ClassVar[type[SelfAttention]] = SelfAttention

    def __init__(self, graph: Graph, config: Mapping[str, Any] | LlamaConfig) -> None:
        super().__init__(graph)
        if not isinstance(config, self.config_class):
            config = self.config_class.from_dict(config)
        self.config = config
        self.tokenizer: Any = None
        self.rotary = self.build_rotary()
        stack = DecoderStack(graph, self)
        setattr(self, self.names.model, stack)
        object.__setattr__(self, "decoder", stack)
        self.lm_head: Linear | None = self.build_head(graph)

    # ---------------------------------------------------------------- hooks
    @property
    def embed_scale(self) -> float:
        """Factor on the token embeddings (Gemma: sqrt(hidden_size))."""
        return 1.0

    def build_rotary(self) -> RotaryEmbedding | None:
        return rotary_embedding(self.config)

    def build_norm(self, graph: Graph) -> Module:
        return RMSNorm(graph, self.config.hidden_size, self.config.rms_norm_eps)

    def layer_window(self, index: int) -> int | None:
        """The sliding attention window of layer `index` (None: full causal attention)."""
        return None

    def attention_biases(self) -> dict[str, bool]:
        """The `bias` / `out_bias` arguments of `attention_class` (Llama: the config's
        `attention_bias` on all four projections)."""
        return {"bias": self.config.attention_bias}

    def build_attention(self, graph: Graph, index: int) -> SelfAttention:
        c = self.config
        return self.attention_class(
            graph,
            c.hidden_size,
            c.num_attention_heads,
            c.num_key_value_heads,
            causal=True,
            rotary=self.rotary,
            head_dim=c.head_dim,
            sliding_window=self.layer_window(index),
            **self.attention_biases(),
        )

    def build_mlp(self, graph: Graph) -> Module:
        c = self.config
        act = hf_activation(c.hidden_act)
        return GatedMLP(graph, c.hidden_size, c.intermediate_size, c.mlp_bias, act)

    def build_layer(self, graph: Graph, index: int) -> DecoderLayer:
        attention, mlp = self.build_attention(graph, index), self.build_mlp(graph)
        norms = self.build_norm(graph), self.build_norm(graph)
        return DecoderLayer(graph, attention, mlp, *norms, names=self.names.layer)

    def build_head(self, graph: Graph) -> Linear | None:
        """The vocabulary head, or None with tied embeddings (the head reads the table)."""
        c = self.config
        return None if c.tie_word_embeddings else Linear(graph, c.hidden_size, c.vocab_size, False)

    def head(self, hidden: GraphTensor) -> GraphTensor:
        """Logits of the final-normed hidden states (..., hidden) -> (..., vocab)."""
        if self.lm_head is not None:
            return self.lm_head(hidden)
        return hidden @ self.decoder.token_embedding.weight.T

    def replica(self, graph: Graph) -> CausalLM:
        """The same model built again in `graph` (a decode session's copy; its weights
        are then shared, so build it inside `skip_init()`)."""
        return type(self)(graph, self.config)

    def checkpoint_state(self, state: Mapping[str, Any]) -> dict[str, Any]:
        """A checkpoint's state dict under this model's parameter names: buffers dropped,
        and with tied embeddings the `lm_head.weight` entry (transformers lists the shared
        tensor under both names)."""
        state = {k: v for k, v in state.items() if not str(k).endswith(self.buffer_suffixes)}
        if self.lm_head is None:
            state.pop("lm_head.weight", None)
        return state

    # ---------------------------------------------------------------- loading
    @classmethod
    def from_pretrained(
        cls,
        folder: PathLike,
        graph: Graph | None = None,
        dtype: Any = np.float32,
        tensor_parallel: Any = False,
    ) -> CausalLM:
        """A model from a Hugging Face folder (`config.json` and `*.safetensors`, sharded
        or not; `tokenizer.json`, when there, becomes `model.tokenizer`). Weights are
        converted to float32. The config is validated first, parameters get no random
        initial values, and on any error the graph is left as it was. `tensor_parallel`
        (True, or a `luminal.distributed` Communicator): this rank's shard only, see
        `luminal.models.tensor_parallel`."""
        graph = Graph() if graph is None else graph
        if tensor_parallel:
            from luminal.models.tensor_parallel import from_pretrained_sharded

            return from_pretrained_sharded(cls, folder, graph, dtype, tensor_parallel)
        config = cls.config_class.from_dict(load_hf_config(folder))
        tokenizer = load_tokenizer(folder)
        model = build_then_load(
            graph, lambda: cls(graph, config), lambda: load_safetensors(folder, dtype=dtype)
        )
        model.tokenizer = tokenizer
        return model

    def load_state_dict(self, state: Mapping[str, Any], strict: bool = True) -> None:
        """A transformers state dict as is (see `checkpoint_state`)."""
        super().load_state_dict(self.checkpoint_state(state), strict)

    # ---------------------------------------------------------------- graph building
    def cache_inputs(
        self, batch: ExprLike = "batch", past: ExprLike = "past", dtype: DType = float32
    ) -> list[KVCache]:
        """One KV-cache input pair per layer, (batch, kv_heads, past, head_dim), of
        `dtype` (float32, or float16: half the memory); start a generation by setting
        them to empty arrays (past = 0)."""
        prefix = f"{self.names.model}.{self.names.layers}"
        return [
            layer.parts[0].cache_inputs(batch, past, name=f"{prefix}.{i}.cache", dtype=dtype)
            for i, layer in enumerate(self.decoder.blocks)
        ]

    def forward(self, ids: GraphTensor) -> GraphTensor:
        """Logits for every position (no cache): (batch, seq, vocab), or (seq, vocab)."""
        logits, _ = self.forward_with_cache(ids)
        return logits

    def forward_with_cache(
        self,
        ids: GraphTensor,
        caches: Sequence[KVCache] | None = None,
        last_only: bool = False,
    ) -> tuple[GraphTensor, list[KVCache]]:
        """(logits, new caches). `last_only`: logits of the last position only, (batch,
        vocab), which is all decoding needs and skips the head for the other positions."""
        name = f"{type(self).__name__}(vocab_size={self.config.vocab_size})"
        if ids.dtype.is_float:
            raise DTypeError(
                f"{name}: token ids must be int32, got {ids.dtype.value} ids of shape "
                f"{ids._shape_text()}"
            )
        if ids.ndim == 1:
            logits, new_caches = self.forward_with_cache(ids.unsqueeze(0), caches, last_only)
            return logits.squeeze(0), new_caches
        if ids.ndim != 2:
            raise ShapeError(f"{name}: ids must be (batch, seq) or (seq,), got {ids._shape_text()}")
        if caches is not None and len(caches) != self.config.num_hidden_layers:
            raise ShapeError(
                f"{name}: {len(caches)} caches given, expected one per layer "
                f"({self.config.num_hidden_layers})"
            )
        hidden, new_caches = self.decoder(ids, caches)
        if last_only:
            hidden = hidden[:, -1]  # (batch, hidden)
        return self.head(self.decoder.final_norm(hidden)), new_caches

    def session(
        self,
        compile: bool = True,
        compiler: Any = None,
        batch: ExprLike = "batch",
        kv_dtype: DType = float32,
    ) -> DecoderSession:
        """A decode session sharing this model's weights (see `DecoderSession`)."""
        return DecoderSession(self, compile, compiler, batch, kv_dtype)

    def extra_repr(self) -> str:
        c = self.config
        return (
            f"layers={c.num_hidden_layers}, hidden_size={c.hidden_size}, "
            f"heads={c.num_attention_heads}, kv_heads={c.num_key_value_heads}, "
            f"vocab_size={c.vocab_size}, tied={c.tie_word_embeddings}"
        )


# ---------------------------------------------------------------- decoding
class DecoderSession:
    """Generation state for one model: a graph of its own holding a copy of the model
    that shares the weight arrays (no copies), inputs `ids` (batch, "seq") and per-layer
    caches (batch, kv_heads, "past", head_dim), outputs the last position's logits and
    the new caches. Compiled once (`compile=True`: `lm.CPUCompiler()` unless `compiler`, a
    compiler or a backend name, is given; False: the reference runtime); `prefill` then
    `step` re-set the inputs. `kv_dtype` float16 keeps the caches in float16 (half the
    memory; keys and values rounded to float16 as they are appended, attention computed
    in float32); float32 (the default) keeps them exact.
    `compile_count` counts compilations (1 after the first run, and it stays 1)."""

    def __init__(
        self,
        model: CausalLM,
        compile: bool = True,
        compiler: Any = None,
        batch: ExprLike = "batch",
        kv_dtype: DType = float32,
    ) -> None:
        if kv_dtype not in (float32, float16):
            raise DTypeError(
                f"{type(self).__name__}: kv_dtype must be float32 or float16, got {kv_dtype}"
            )
        self.source = model
        self.graph = Graph()
        with skip_init():  # the weights are the source model's
            self.model = model.replica(self.graph)
        self.share_weights()
        self.ids = self.graph.tensor((batch, "seq"), dtype=int32, name="input_ids")
        # buffers of capacity "cap"; the model reads their first "past" positions
        self.cache_store = self.model.cache_inputs(batch, "cap", kv_dtype)
        past = var("past")
        self.cache_in = [
            KVCache(c.key[:, :, :past], c.value[:, :, :past]) for c in self.cache_store
        ]
        logits, caches = self.model.forward_with_cache(self.ids, self.cache_in, True)
        self.logits = logits.retrieve()
        # the new positions only, (batch, kv_heads, seq, head_dim), in buffers of their own
        held = self.cache_in[0].key.shape[2]
        self.cache_out = [
            KVCache(*(t[:, :, held:].contiguous() for t in c)).retrieve() for c in caches
        ]
        self.want_compile = compile
        self.compiler = compiler
        self.compiled: Any = None
        self.compile_count = 0
        self.past = 0
        self.batch = 0
        self.history = np.zeros((0, 0), np.int32)
        # per layer (keys, values), (batch, kv_heads, capacity, head_dim): cache_store's data
        self.buffers: list[tuple[np.ndarray, np.ndarray]] = []

    def share_weights(self) -> None:
        """Point this session's parameters at the source model's current arrays (call
        again after loading new weights into the source model)."""
        source = dict(self.source.named_parameters())
        data = self.source.graph.input_data
        for name, tensor in self.model.named_parameters():
            array = data.get(source[name].node_id)
            if array is None:
                raise LuminalError(
                    f"{type(self).__name__}: parameter {name!r} of the model has no data"
                )
            self.graph.input_data[tensor.node_id] = array

    def _ensure_compiled(self) -> None:
        if not self.want_compile or self.compiled is not None:
            return
        self.graph.compile(backends.compiler("cpu" if self.compiler is None else self.compiler))
        self.compiled = self.graph.compiled
        self.compile_count += 1

    def reset(self, batch: int = 1) -> None:
        """Empty caches for a new sequence of `batch` rows."""
        self.past, self.batch = 0, batch
        self.buffers = []
        self._reserve(0)
        self.graph.set_dim("past", 0)
        self.history = np.zeros((batch, 0), np.int32)

    def _reserve(self, positions: int) -> None:
        """Cache buffers holding at least `positions` (capacity doubles, at least
        MIN_CACHE), the positions held so far copied over: amortised O(1) per token."""
        capacity = self.buffers[0][0].shape[2] if self.buffers else -1
        if positions <= capacity:
            return
        capacity = max(MIN_CACHE, 1 << max(positions - 1, 0).bit_length())
        kv_heads, head_dim = (int(d) for d in self.cache_store[0].key.shape[1::2])
        shape = (self.batch, kv_heads, capacity, head_dim)
        dtype = self.cache_store[0].key.dtype.numpy
        grown = []
        for index, store in enumerate(self.cache_store):
            pair = np.zeros(shape, dtype), np.zeros(shape, dtype)
            if self.buffers:
                for new, old in zip(pair, self.buffers[index], strict=True):
                    new[:, :, : self.past] = old[:, :, : self.past]
            store.set(*pair)
            grown.append(pair)
        self.buffers = grown

    def run(self, ids: np.ndarray) -> np.ndarray:
        """Feed `ids` (batch, n) after what the caches hold; returns the logits of the last
        position (batch, vocab) and writes the new keys and values into the cache buffers
        (growing them first when full). A LongRoPE model whose sequence first outgrows its
        original context reruns the whole sequence, as transformers' Phi-3 does: the
        cached keys were rotated with the short factors."""
        ids = np.asarray(ids)
        if ids.ndim != 2 or ids.shape[0] != self.batch or ids.shape[1] == 0:
            raise ShapeError(
                f"{type(self).__name__}.run: ids must be ({self.batch}, n >= 1) after "
                f"reset(batch={self.batch}), got shape {ids.shape}"
            )
        ids = ids.astype(np.int32, copy=False)
        switch = None if self.model.rotary is None else self.model.rotary.long_after
        if switch is not None and 0 < self.past <= switch < self.past + ids.shape[1]:
            ids = np.concatenate([self.history, ids], axis=1)
            self.reset(self.batch)
        count = ids.shape[1]
        self._reserve(self.past + count)
        self.ids.set(ids)
        self.graph.set_dim("past", self.past)
        self._ensure_compiled()
        self.graph.execute()
        logits = self.logits.numpy()
        end = self.past + count
        for buffers, rows in zip(self.buffers, self.cache_out, strict=True):
            for buffer, new in zip(buffers, rows, strict=True):
                buffer[:, :, self.past : end] = _value(new)
        self.past = end
        self.graph.set_dim("past", end)  # cache_in now reads every position held
        self.history = np.concatenate([self.history, ids], axis=1)
        return logits

    def prefill(self, prompt_ids: np.ndarray | Sequence[int]) -> np.ndarray:
        """Start a sequence: reset the caches and run the prompt, (batch, seq) or (seq,);
        returns the last position's logits (batch, vocab)."""
        prompt = np.asarray(prompt_ids)
        if prompt.ndim == 1:
            prompt = prompt[None]
        self.reset(prompt.shape[0] if prompt.ndim == 2 else 0)
        return self.run(prompt)

    def step(self, token_ids: np.ndarray | Sequence[int] | int) -> np.ndarray:
        """One new token per row (batch,) -> logits of it (batch, vocab)."""
        tokens = np.asarray(token_ids, dtype=np.int32).reshape(-1, 1)
        return self.run(tokens)


def _value(tensor: GraphTensor) -> np.ndarray:
    """A retrieved tensor's value after a run: its output buffer itself when it reads
    the whole buffer (no copy), else `numpy()`."""
    buffer = tensor.graph.buffers.get(tensor.node_id)
    if buffer is not None and tensor.view.is_identity():
        return buffer
    return tensor.numpy()


def load_tokenizer(folder: PathLike) -> Any:
    """The folder's `tokenizer.json` as a `tokenizers.Tokenizer`, or None when it has
    none (LuminalError when the file is there but unreadable)."""
    path = Path(folder) / "tokenizer.json"
    if not path.is_file():
        return None
    from tokenizers import Tokenizer

    try:
        return Tokenizer.from_file(str(path))
    except Exception as error:  # tokenizers raises its own exception type
        raise LuminalError(f"load_tokenizer: {str(path)!r} is not readable: {error}") from None


__all__ = [
    "CausalLM",
    "CheckpointNames",
    "DecoderSession",
    "DecoderStack",
    "hf_activation",
    "load_tokenizer",
    "rope_kind",
    "rotary_embedding",
]
