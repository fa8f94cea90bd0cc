"""Whisper (Hugging Face `WhisperForConditionalGeneration`): encoder, decoder and the head.

`Whisper(cx, config)` takes a `config.json` mapping and names its parameters as
transformers' state dict does (`model.encoder.conv1.weight`, `model.encoder.layers.{i}.
self_attn.k_proj.weight`, `model.decoder.layers.{i}.encoder_attn.q_proj.weight`, ...,
`proj_out.weight` unless the head is tied to `model.decoder.embed_tokens.weight`), so
`load_state_dict(hf.state_dict())` and safetensors checkpoints load unchanged.

- Encoder: two Conv1d (kernel 3, the second with stride 2) with exact GELU, learned
  positions over all `max_source_positions`, pre-norm transformer layers, a final
  LayerNorm. It takes log-mel features `(batch, num_mel_bins, 2 * max_source_positions)`.
- Decoder: token + learned positions (starting at the symbolic past length), layers of
  causal self-attention with a KV cache, cross-attention over the encoder output, and an
  MLP; the head reads the last position only when decoding.

Cross-attention keys and values depend only on the audio, so `cross_attention_kv`
computes them once per utterance; `WhisperSession` (whisper_session.py) runs them in the
encoder graph and feeds them to every decode step as inputs.
"""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Mapping, Sequence
from typing import Any, ClassVar

import numpy as np

from luminal.errors import DTypeError, ShapeError
from luminal.graph import Graph
from luminal.hl.combine import concat
from luminal.nn.attention import KVCache, attend, causal_mask
from luminal.nn.conv import Conv1d
from luminal.nn.layers import GELU, Embedding, LayerNorm, Linear, Stateless, activation
from luminal.nn.module import Module, ModuleList, build_then_load
from luminal.shape.expr import ExprLike, sym, var
from luminal.tensor import GraphTensor
from luminal.weights import load_hf_config, load_safetensors
from luminal.weights.hf_config import MAX_SIZE, _FromDict

PathLike = str | os.PathLike[str]


@dataclasses.dataclass(frozen=True)
class WhisperConfig(_FromDict):
    """What a Whisper model needs from its config (defaults: transformers' WhisperConfig,
    i.e. whisper-tiny's sizes). The layer and head counts must be given."""

    REQUIRED: ClassVar[tuple[str, ...]] = (
        "vocab_size",
        "d_model",
        "encoder_layers",
        "encoder_attention_heads",
        "decoder_layers",
        "decoder_attention_heads",
    )
    _SIZES: ClassVar[tuple[str, ...]] = (
        "d_model",
        "encoder_ffn_dim",
        "decoder_ffn_dim",
        "num_mel_bins",
        "max_source_positions",
        "max_target_positions",
    )

    vocab_size: int
    d_model: int
    encoder_layers: int
    encoder_attention_heads: int
    decoder_layers: int
    decoder_attention_heads: int
    encoder_ffn_dim: int = 1536
    decoder_ffn_dim: int = 1536
    num_mel_bins: int = 80
    max_source_positions: int = 1500
    max_target_positions: int = 448
    activation_function: str = "gelu"
    tie_word_embeddings: bool = True
    pad_token_id: int | None = 50256
    bos_token_id: int | list[int] | None = 50256
    eos_token_id: int | list[int] | None = 50256
    decoder_start_token_id: int | None = 50257

    @property
    def num_frames(self) -> int:
        """Log-mel frames the encoder takes: its second convolution halves them."""
        return 2 * self.max_source_positions

    def validate(self) -> None:
        super().validate()
        for name in self._SIZES:
            value = getattr(self, name)
            if not 0 < value <= MAX_SIZE:
                raise ShapeError(f"WhisperConfig: {name} must be in [1, {MAX_SIZE}], got {value}")
        for part in ("encoder", "decoder"):
            heads = getattr(self, f"{part}_attention_heads")
            if self.d_model % heads:
                raise ShapeError(
                    f"WhisperConfig: d_model={self.d_model} is not a multiple of "
                    f"{part}_attention_heads={heads}"
                )
        whisper_activation(self.activation_function)  # an unknown name fails here


def whisper_activation(name: str) -> Stateless:
    """transformers' `activation_function`: "gelu" is exact (erf), "gelu_new" the tanh form."""
    if name.lower() == "gelu_new":
        return GELU(approximate="tanh")
    return activation(name)


# ---------------------------------------------------------------- blocks
class WhisperAttention(Module):
    """Multi-head attention with q_proj, k_proj (no bias), v_proj and out_proj. The query
    is scaled before the product, as transformers does for Whisper."""

    def __init__(self, graph: Graph, embed_dim: int, num_heads: int) -> None:
        super().__init__(graph)
        self.embed_dim, self.num_heads = embed_dim, num_heads
        self.head_dim = embed_dim // num_heads
        self.q_proj = Linear(graph, embed_dim, embed_dim)
        self.k_proj = Linear(graph, embed_dim, embed_dim, bias=False)
        self.v_proj = Linear(graph, embed_dim, embed_dim)
        self.out_proj = Linear(graph, embed_dim, embed_dim)

    def heads(self, x: GraphTensor) -> GraphTensor:
        """(batch, seq, embed) -> (batch, heads, seq, head_dim)."""
        return x.split_dims(-1, self.head_dim).permute(0, 2, 1, 3)

    def keys_values(self, x: GraphTensor) -> KVCache:
        """Keys and values of x (batch, seq, embed), each (batch, heads, seq, head_dim)."""
        return KVCache(self.heads(self.k_proj(x)), self.heads(self.v_proj(x)))

    def forward(self, x: GraphTensor, kv: KVCache, mask: GraphTensor | None = None) -> GraphTensor:
        """Queries from x (batch, seq, embed) attend to `kv`; additive `mask` optional."""
        query = self.heads(self.q_proj(x) * (self.head_dim**-0.5))
        out, _ = attend(query, kv.key, kv.value, mask, scale=1.0)
        return self.out_proj(out.permute(0, 2, 1, 3).merge_dims(2, 3))

    def extra_repr(self) -> str:
        return f"embed_dim={self.embed_dim}, num_heads={self.num_heads}"


class WhisperFeedForward(Module):
    """fc1, the activation, fc2 and the LayerNorm before them: the last block of both
    layer kinds (transformers keeps these on the layer, so layers inherit from this)."""

    def feed_forward_init(self, graph: Graph, config: WhisperConfig, ffn_dim: int) -> None:
        self.fc1 = Linear(graph, config.d_model, ffn_dim)
        self.fc2 = Linear(graph, ffn_dim, config.d_model)
        self.activation_fn = whisper_activation(config.activation_function)
        self.final_layer_norm = LayerNorm(graph, config.d_model)

    def feed_forward(self, x: GraphTensor) -> GraphTensor:
        """x + fc2(activation(fc1(LN(x))))."""
        return x + self.fc2(self.activation_fn(self.fc1(self.final_layer_norm(x))))


class WhisperEncoderLayer(WhisperFeedForward):
    """Pre-norm: x + self_attn(LN(x)), then the feed-forward block."""

    def __init__(self, graph: Graph, config: WhisperConfig) -> None:
        super().__init__(graph)
        d = config.d_model
        self.self_attn = WhisperAttention(graph, d, config.encoder_attention_heads)
        self.self_attn_layer_norm = LayerNorm(graph, d)
        self.feed_forward_init(graph, config, config.encoder_ffn_dim)

    def forward(self, x: GraphTensor) -> GraphTensor:
        normed = self.self_attn_layer_norm(x)
        x = x + self.self_attn(normed, self.self_attn.keys_values(normed))
        return self.feed_forward(x)


class WhisperDecoderLayer(WhisperFeedForward):
    """Pre-norm: causal self-attention with a KV cache, cross-attention over the
    encoder's keys/values, then the feed-forward block; each with a residual."""

    def __init__(self, graph: Graph, config: WhisperConfig) -> None:
        super().__init__(graph)
        d, heads = config.d_model, config.decoder_attention_heads
        self.self_attn = WhisperAttention(graph, d, heads)
        self.self_attn_layer_norm = LayerNorm(graph, d)
        self.encoder_attn = WhisperAttention(graph, d, heads)
        self.encoder_attn_layer_norm = LayerNorm(graph, d)
        self.feed_forward_init(graph, config, config.decoder_ffn_dim)

    def forward(
        self, x: GraphTensor, cross: KVCache, cache: KVCache | None = None
    ) -> tuple[GraphTensor, KVCache]:
        """x (batch, seq, d) -> (x, the self-attention keys/values after this step)."""
        normed = self.self_attn_layer_norm(x)
        key, value = self.self_attn.keys_values(normed)
        past: ExprLike = 0
        if cache is not None:
            past = cache.key.shape[2]
            key, value = concat([cache.key, key], 2), concat([cache.value, value], 2)
        mask = causal_mask(self.graph, x.shape[1], key.shape[2], offset=past)
        x = x + self.self_attn(normed, KVCache(key, value), mask)
        x = x + self.encoder_attn(self.encoder_attn_layer_norm(x), cross)
        return self.feed_forward(x), KVCache(key, value)


class WhisperEncoder(Module):
    """Log-mel features (batch, num_mel_bins, num_frames) -> (batch, positions, d_model)."""

    def __init__(self, graph: Graph, config: WhisperConfig) -> None:
        super().__init__(graph)
        d = config.d_model
        self.config = config
        self.conv1 = Conv1d(graph, config.num_mel_bins, d, kernel_size=3, padding=1)
        self.conv2 = Conv1d(graph, d, d, kernel_size=3, stride=2, padding=1)
        self.embed_positions = Embedding(graph, config.max_source_positions, d)
        self.layers = ModuleList(
            graph, [WhisperEncoderLayer(graph, config) for _ in range(config.encoder_layers)]
        )
        self.layer_norm = LayerNorm(graph, d)

    def forward(self, features: GraphTensor) -> GraphTensor:
        c = self.config
        expected = (c.num_mel_bins, c.num_frames)
        if features.ndim != 3 or tuple(features.shape[1:]) != tuple(sym(e) for e in expected):
            raise ShapeError(
                f"WhisperEncoder: input features must be (batch, {expected[0]}, {expected[1]}) "
                f"(num_mel_bins, 2 * max_source_positions), got {features._shape_text()}"
            )
        if not features.dtype.is_float:
            raise DTypeError(f"WhisperEncoder: features must be float, got {features.dtype.value}")
        x = self.conv1(features).gelu(approximate="none")
        x = self.conv2(x).gelu(approximate="none")
        x = x.permute(0, 2, 1) + self.embed_positions.weight
        for layer in self.layers:
            x = layer(x).graph_break()  # one e-graph region per layer (see DecoderStack)
        return self.layer_norm(x)


class WhisperDecoder(Module):
    """Token ids (batch, seq) after `past` cached ones -> hidden states (batch, seq, d)."""

    def __init__(self, graph: Graph, config: WhisperConfig) -> None:
        super().__init__(graph)
        d = config.d_model
        self.config = config
        self.embed_tokens = Embedding(graph, config.vocab_size, d, config.pad_token_id)
        self.embed_positions = Embedding(graph, config.max_target_positions, d)
        self.layers = ModuleList(
            graph, [WhisperDecoderLayer(graph, config) for _ in range(config.decoder_layers)]
        )
        self.layer_norm = LayerNorm(graph, d)

    def forward(
        self,
        ids: GraphTensor,
        cross: Sequence[KVCache],
        caches: Sequence[KVCache] | None = None,
    ) -> tuple[GraphTensor, list[KVCache]]:
        past: ExprLike = 0 if not caches else caches[0].key.shape[2]
        positions = self.graph.iota(var("z") + sym(past), (ids.shape[1],))
        x = self.embed_tokens(ids) + self.embed_positions(positions)
        new_caches = []
        for index, layer in enumerate(self.layers):
            x, cache = layer(x, cross[index], None if caches is None else caches[index])
            x = x.graph_break()
            new_caches.append(cache)
        return self.layer_norm(x), new_caches


class WhisperModel(Module):
    """encoder + decoder (transformers' `WhisperModel`, the "model." prefix)."""

    def __init__(self, graph: Graph, config: WhisperConfig) -> None:
        super().__init__(graph)
        self.encoder = WhisperEncoder(graph, config)
        self.decoder = WhisperDecoder(graph, config)


# ---------------------------------------------------------------- the model
class Whisper(Module):
    """transformers' `WhisperForConditionalGeneration` (inference). `config`: a
    `config.json` mapping or a `WhisperConfig`. `model(features, decoder_ids)` returns
    logits (batch, seq, vocab); `transcribe_tokens(log_mel)` decodes greedily."""

    def __init__(self, graph: Graph, config: Mapping[str, Any] | WhisperConfig) -> None:
        super().__init__(graph)
        # generation settings (suppressed tokens, ...) that config.json may carry
        self.raw_config = dict(config) if isinstance(config, Mapping) else {}
        if not isinstance(config, WhisperConfig):
            config = WhisperConfig.from_dict(config)
        self.config = config
        # a WhisperGenerationConfig: from_pretrained reads generation_config.json; None
        # means "from raw_config", as transformers does without that file
        self.generation: Any = None
        self.model = WhisperModel(graph, config)
        self.proj_out: Linear | None = None
        if not config.tie_word_embeddings:
            self.proj_out = Linear(graph, config.d_model, config.vocab_size, bias=False)

    # ---------------------------------------------------------------- loading
    @classmethod
    def from_pretrained(cls, folder: PathLike, graph: Graph | None = None) -> Whisper:
        """A model from a Hugging Face folder (`config.json`, `*.safetensors` and, when
        present, `generation_config.json`). The config is validated first, parameters get
        no random initial values, and on any error the graph is left as it was."""
        from luminal.models.whisper_session import WhisperGenerationConfig

        graph = Graph() if graph is None else graph
        config = WhisperConfig.from_dict(load_hf_config(folder))
        generation = WhisperGenerationConfig.from_folder(folder, config)
        model = build_then_load(graph, lambda: cls(graph, config), lambda: load_safetensors(folder))
        model.generation = generation
        return model

    def load_state_dict(self, state: Mapping[str, Any], strict: bool = True) -> None:
        """A transformers state dict as is: `WhisperModel` names (no "model." prefix) are
        accepted too, and with a tied head a `proj_out.weight` entry is dropped."""
        if state and not any(str(name).startswith("model.") for name in state):
            state = {f"model.{name}": value for name, value in state.items()}
        if self.proj_out is None:
            state = {k: v for k, v in state.items() if k != "proj_out.weight"}
        super().load_state_dict(state, strict)

    # ---------------------------------------------------------------- graph building
    def encode(self, features: GraphTensor) -> GraphTensor:
        """Log-mel features (batch, num_mel_bins, num_frames) -> encoder output."""
        return self.model.encoder(features)

    def cross_attention_kv(self, encoder_output: GraphTensor) -> list[KVCache]:
        """Each decoder layer's cross-attention keys and values of the encoder output,
        (batch, heads, positions, head_dim): computed once per utterance."""
        return [
            layer.encoder_attn.keys_values(encoder_output) for layer in self.model.decoder.layers
        ]

    def decode(
        self,
        ids: GraphTensor,
        cross: Sequence[KVCache],
        caches: Sequence[KVCache] | None = None,
        last_only: bool = False,
    ) -> tuple[GraphTensor, list[KVCache]]:
        """(logits, new self-attention caches) for int32 decoder ids (batch, seq) after the
        cached ones; `last_only`: logits of the last position only, (batch, vocab)."""
        c = self.config
        name = f"Whisper(vocab_size={c.vocab_size})"
        if ids.dtype.is_float:
            raise DTypeError(f"{name}: decoder ids must be int32, got {ids.dtype.value}")
        if ids.ndim != 2:
            raise ShapeError(f"{name}: decoder ids must be (batch, seq), got {ids._shape_text()}")
        for what, given in (("cross-attention", cross), ("cache", caches)):
            if given is not None and len(given) != c.decoder_layers:
                raise ShapeError(
                    f"{name}: {len(given)} {what} pairs given, expected one per decoder "
                    f"layer ({c.decoder_layers})"
                )
        hidden, new_caches = self.model.decoder(ids, cross, caches)
        if last_only:
            hidden = hidden[:, -1]
        if self.proj_out is not None:
            return self.proj_out(hidden), new_caches
        return hidden @ self.model.decoder.embed_tokens.weight.T, new_caches

    def forward(self, features: GraphTensor, decoder_ids: GraphTensor) -> GraphTensor:
        """Logits (batch, seq, vocab) of `decoder_ids` given the audio, without a cache."""
        cross = self.cross_attention_kv(self.encode(features))
        logits, _ = self.decode(decoder_ids, cross)
        return logits

    def cache_inputs(self, batch: ExprLike = "batch", past: ExprLike = "past") -> list[KVCache]:
        """Self-attention cache inputs per decoder layer, (batch, heads, past, head_dim)."""
        return self._kv_inputs(batch, past, "self_cache")

    def cross_inputs(self, batch: ExprLike = "batch") -> list[KVCache]:
        """Cross-attention key/value inputs per decoder layer, (batch, heads, positions,
        head_dim): what `cross_attention_kv` computed for the utterance."""
        return self._kv_inputs(batch, self.config.max_source_positions, "cross")

    def _kv_inputs(self, batch: ExprLike, length: ExprLike, what: str) -> list[KVCache]:
        c = self.config
        heads = c.decoder_attention_heads
        shape = (batch, heads, length, c.d_model // heads)
        return [
            KVCache(
                self.graph.tensor(shape, name=f"model.decoder.layers.{i}.{what}.key"),
                self.graph.tensor(shape, name=f"model.decoder.layers.{i}.{what}.value"),
            )
            for i in range(c.decoder_layers)
        ]

    # ---------------------------------------------------------------- decoding
    def session(self, compile: bool = True, compiler: Any = None) -> Any:
        """A decode session sharing this model's weights (see `WhisperSession`)."""
        from luminal.models.whisper_session import WhisperSession

        return WhisperSession(self, compile=compile, compiler=compiler)

    def transcribe_tokens(
        self,
        log_mel: np.ndarray,
        language: str | int | None = None,
        task: str | None = None,
        max_new_tokens: int | None = None,
        compile: bool = True,
    ) -> np.ndarray:
        """Greedy decoding of log-mel features (num_mel_bins, num_frames) or a batch of
        them: the forced start tokens (decoder start, language and task where the
        generation config knows them, `<|notimestamps|>`), then argmax tokens with the
        suppressed tokens removed, until the end token. Returns the generated tokens
        after the forced ones, (n,) or (batch, n); see `WhisperSession.transcribe`."""
        from luminal.models.whisper_session import cached_session

        session = cached_session(self, compile)
        return session.transcribe(log_mel, language, task, max_new_tokens)

    def extra_repr(self) -> str:
        c = self.config
        return (
            f"d_model={c.d_model}, encoder_layers={c.encoder_layers}, "
            f"decoder_layers={c.decoder_layers}, vocab_size={c.vocab_size}, "
            f"mels={c.num_mel_bins}, positions={c.max_source_positions}"
        )


__all__ = [
    "Whisper",
    "WhisperAttention",
    "WhisperConfig",
    "WhisperDecoder",
    "WhisperDecoderLayer",
    "WhisperEncoder",
    "WhisperEncoderLayer",
    "WhisperModel",
]
