"""Llama (Hugging Face `LlamaForCausalLM`) as a luminal module, and a decode session.

`Llama(cx, config)` takes a `config.json` mapping and names its parameters exactly like
transformers' state dict (`model.embed_tokens.weight`, `model.layers.{i}.self_attn.q_proj.
weight`, ..., `model.norm.weight`, `lm_head.weight`), so `load_state_dict(hf.state_dict())`
and safetensors checkpoints load unchanged. With `tie_word_embeddings` there is no
`lm_head.weight` parameter: the head reads `model.embed_tokens.weight`.

`LlamaSession` owns one graph for generation: token ids `(batch, "seq")`, one KV cache
per layer `(batch, kv_heads, "past", head_dim)`, and as outputs the logits of the last
position and the new caches. "seq" and "past" are symbolic, so the same (compiled) graph
runs the prompt (past = 0) and then every single-token step; nothing recompiles.
"""

from __future__ import annotations

import math
import os
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from luminal.dtype import int32
from luminal.errors import DTypeError, LuminalError, ShapeError
from luminal.graph import Graph
from luminal.nn.attention import KVCache, LlamaDecoderLayer, RotaryEmbedding
from luminal.nn.layers import Embedding, Linear, RMSNorm
from luminal.nn.module import Module, ModuleList, build_then_load
from luminal.shape.expr import ExprLike
from luminal.tensor import GraphTensor
from luminal.weights import LlamaConfig, load_hf_config, load_safetensors

PathLike = str | os.PathLike[str]

# state-dict entries some checkpoints carry that are buffers, not parameters
_BUFFER_SUFFIXES = ("rotary_emb.inv_freq",)


def rope_inv_freq(config: LlamaConfig) -> np.ndarray | None:
    """The rotary frequencies for a scaled RoPE (`rope_scaling`), or None for the default
    ones (which the graph computes itself). Supports transformers' "linear" and "llama3"
    rope types; their attention factor is 1, so only the frequencies change."""
    scaling = config.rope_scaling
    kind = None if scaling is None else scaling.get("rope_type", scaling.get("type", "default"))
    if kind in (None, "default"):
        return None
    if kind not in ("linear", "llama3"):
        raise LuminalError(
            f"Llama: rope_scaling type {kind!r} is not supported; expected 'default', "
            "'linear' or 'llama3'"
        )
    assert scaling is not None and config.head_dim is not None
    dim = config.head_dim
    inv_freq = 1.0 / config.rope_theta ** (np.arange(0, dim, 2, dtype=np.float64) / dim)
    factor = float(scaling["factor"])
    if kind == "linear":
        return (inv_freq / factor).astype(np.float32)
    low, high = float(scaling["low_freq_factor"]), float(scaling["high_freq_factor"])
    old_context = float(scaling["original_max_position_embeddings"])
    wavelen = 2 * math.pi / inv_freq
    scaled = np.where(wavelen > old_context / low, inv_freq / factor, inv_freq)
    smooth = (old_context / wavelen - low) / (high - low)
    smoothed = (1 - smooth) * scaled / factor + smooth * scaled
    medium = (wavelen >= old_context / high) & (wavelen <= old_context / low)
    return np.where(medium, smoothed, scaled).astype(np.float32)


class LlamaModel(Module):
    """The decoder stack: embed_tokens, layers, norm (transformers' `LlamaModel`)."""

    def __init__(self, graph: Graph, config: LlamaConfig) -> None:
        super().__init__(graph)
        head_dim = config.head_dim
        assert head_dim is not None
        self.rotary = RotaryEmbedding(head_dim, config.rope_theta, rope_inv_freq(config))
        self.embed_tokens = Embedding(graph, config.vocab_size, config.hidden_size)
        self.layers = ModuleList(
            graph,
            [
                LlamaDecoderLayer(
                    graph,
                    config.hidden_size,
                    config.num_attention_heads,
                    config.num_key_value_heads,
                    config.intermediate_size,
                    config.rms_norm_eps,
                    config.rope_theta,
                    head_dim,
                    config.attention_bias,
                    config.mlp_bias,
                    config.hidden_act,
                    self.rotary,
                )
                for _ in range(config.num_hidden_layers)
            ],
        )
        self.norm = RMSNorm(graph, config.hidden_size, config.rms_norm_eps)

    def forward(
        self, ids: GraphTensor, caches: Sequence[KVCache] | None = None
    ) -> tuple[GraphTensor, list[KVCache]]:
        """ids (batch, seq) -> (hidden states (batch, seq, hidden) before the final norm,
        new caches). With caches, positions start at their (symbolic) past length."""
        hidden = self.embed_tokens(ids)
        seq = ids.shape[1]
        past: ExprLike = 0 if not caches else caches[0].key.shape[2]
        # cos/sin once for all layers, positions past .. past + seq - 1
        position_embeddings = self.rotary(self.graph, seq, past)
        new_caches = []
        for index, layer in enumerate(self.layers):
            cache = None if caches is None else caches[index]
            hidden, new_cache = layer(hidden, cache, None, position_embeddings)
            new_caches.append(new_cache)
        return hidden, new_caches


class Llama(Module):
    """transformers' `LlamaForCausalLM` (inference). `config`: a `config.json` mapping
    (or a `LlamaConfig`). Calling it on int32 token ids `(batch, seq)` returns logits
    `(batch, seq, vocab)`; ids `(seq,)` give `(seq, vocab)`, as unbatched inputs do in
    PyTorch modules."""

    def __init__(self, graph: Graph, config: Mapping[str, Any] | LlamaConfig) -> None:
        super().__init__(graph)
        if not isinstance(config, LlamaConfig):
            config = LlamaConfig.from_dict(config)
        self.config = config
        self.model = LlamaModel(graph, config)
        self.lm_head: Linear | None = None
        if not config.tie_word_embeddings:
            self.lm_head = Linear(graph, config.hidden_size, config.vocab_size, bias=False)

    # ---------------------------------------------------------------- loading
    @classmethod
    def from_pretrained(
        cls, folder: PathLike, graph: Graph | None = None, dtype: Any = np.float32
    ) -> Llama:
        """A model from a Hugging Face folder (`config.json` and `*.safetensors`, sharded
        or not). Weights are converted to float32 (bfloat16 checkpoints included). The
        config is validated first, parameters get no random initial values, and on any
        error the graph is left as it was."""
        graph = Graph() if graph is None else graph
        config = LlamaConfig.from_dict(load_hf_config(folder))
        return build_then_load(
            graph, lambda: cls(graph, config), lambda: load_safetensors(folder, dtype=dtype)
        )

    def load_state_dict(self, state: Mapping[str, Any], strict: bool = True) -> None:
        """A transformers state dict as is: rotary `inv_freq` buffers are dropped, and with
        tied embeddings a `lm_head.weight` entry (transformers lists the shared tensor
        under both names) is dropped too."""
        state = {k: v for k, v in state.items() if not k.endswith(_BUFFER_SUFFIXES)}
        if self.lm_head is None:
            state.pop("lm_head.weight", None)
        super().load_state_dict(state, strict)

    # ---------------------------------------------------------------- graph building
    def cache_inputs(self, batch: ExprLike = "batch", past: ExprLike = "past") -> list[KVCache]:
        """One KV-cache input pair per layer, (batch, kv_heads, past, head_dim); start a
        generation by setting them to empty arrays (past = 0)."""
        return [
            layer.self_attn.cache_inputs(batch, past, name=f"model.layers.{i}.cache")
            for i, layer in enumerate(self.model.layers)
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
        name = f"Llama(vocab_size={self.config.vocab_size})"
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
        hidden, new_caches = self.model(ids, caches)
        if last_only:
            hidden = hidden[:, -1]  # (batch, hidden)
        hidden = self.model.norm(hidden)
        if self.lm_head is not None:
            return self.lm_head(hidden), new_caches
        return hidden @ self.model.embed_tokens.weight.T, new_caches

    def session(
        self, compile: bool = True, compiler: Any = None, batch: ExprLike = "batch"
    ) -> LlamaSession:
        """A decode session sharing this model's weights (see `LlamaSession`)."""
        return LlamaSession(self, compile=compile, compiler=compiler, batch=batch)

    def extra_repr(self) -> str:
        c = self.config
        return (
            f"layers={c.num_hidden_layers}, hidden_size={c.hidden_size}, "
            f"heads={c.num_attention_heads}, kv_heads={c.num_key_value_heads}, "
            f"vocab_size={c.vocab_size}, tied={c.tie_word_embeddings}"
        )


class LlamaSession:
    """Generation state for one model: a graph of its own holding a copy of the model
    that shares the weight arrays (no copies), inputs `ids` (batch, "seq") and per-layer
    caches (batch, kv_heads, "past", head_dim), outputs the last position's logits and
    the new caches. Compiled once (`compile=True`: `lm.CPUCompiler()` unless `compiler`
    is given; False: the reference runtime); `prefill` then `step` re-set the inputs.
    `compile_count` counts compilations (1 after the first run, and it stays 1)."""

    def __init__(
        self,
        model: Llama,
        compile: bool = True,
        compiler: Any = None,
        batch: ExprLike = "batch",
    ) -> None:
        self.source = model
        self.graph = Graph()
        self.model = Llama(self.graph, model.config)
        self.share_weights()
        self.ids = self.graph.tensor((batch, "seq"), dtype=int32, name="input_ids")
        self.cache_in = self.model.cache_inputs(batch, "past")
        logits, self.cache_out = self.model.forward_with_cache(self.ids, self.cache_in, True)
        self.logits = logits.retrieve()
        for cache in self.cache_out:
            cache.retrieve()
        self.want_compile = compile
        self.compiler = compiler
        self.compiled: Any = None
        self.compile_count = 0
        self.past = 0
        self.batch = 0

    def share_weights(self) -> None:
        """Point this session's parameters at the source model's current arrays (call
        again after loading new weights into the source model)."""
        source = dict(self.source.named_parameters())
        data = self.source.graph.input_data
        for name, tensor in self.model.named_parameters():
            array = data.get(source[name].node_id)
            if array is None:
                raise LuminalError(f"LlamaSession: parameter {name!r} of the model has no data")
            self.graph.input_data[tensor.node_id] = array

    def _ensure_compiled(self) -> None:
        if not self.want_compile or self.compiled is not None:
            return
        compiler = self.compiler
        if compiler is None:
            from luminal.backends.cpu.compiler import CPUCompiler

            compiler = CPUCompiler()
        self.graph.compile(compiler)
        self.compiled = self.graph.compiled
        self.compile_count += 1

    def reset(self, batch: int = 1) -> None:
        """Empty caches for a new sequence of `batch` rows."""
        c = self.model.config
        empty = np.zeros((batch, c.num_key_value_heads, 0, c.head_dim), np.float32)
        for cache in self.cache_in:
            cache.set(empty, empty)
        self.past, self.batch = 0, batch

    def run(self, ids: np.ndarray) -> np.ndarray:
        """Feed `ids` (batch, n) after what the caches hold; returns the logits of the last
        position (batch, vocab) and moves the new caches to the inputs."""
        ids = np.asarray(ids)
        if ids.ndim != 2 or ids.shape[0] != self.batch or ids.shape[1] == 0:
            raise ShapeError(
                f"LlamaSession.run: ids must be ({self.batch}, n >= 1) after reset(batch="
                f"{self.batch}), got shape {ids.shape}"
            )
        self.ids.set(ids.astype(np.int32, copy=False))
        self._ensure_compiled()
        self.graph.execute()
        logits = self.logits.numpy()
        # read every new cache before setting any input: setting one rebinds "past"
        new_caches = [cache.numpy() for cache in self.cache_out]
        for cache_in, arrays in zip(self.cache_in, new_caches, strict=True):
            cache_in.set(*arrays)
        self.past += ids.shape[1]
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


__all__ = ["Llama", "LlamaModel", "LlamaSession", "rope_inv_freq"]
