"""Decoding Whisper: the generation settings, the forced start tokens and a session.

`WhisperSession` owns two graphs that share the model's weight arrays:

- the encoder graph: log-mel features (batch, mels, frames) -> every decoder layer's
  cross-attention keys and values. It runs once per utterance (`encode`).
- the decoder graph: token ids (batch, "seq"), per-layer self-attention caches
  (batch, heads, "past", head_dim) and the cross keys/values as inputs; the last
  position's logits and the new caches as outputs. "seq" and "past" are symbolic, so one
  compiled graph runs the forced start tokens and then every single-token step.

`prefill` / `step` mirror `LlamaSession`, so `lm.models.generate(session, start_tokens)`
decodes after `session.encode(log_mel)`. `transcribe` adds what transformers'
`WhisperForConditionalGeneration.generate` does for short-form audio without timestamps:
the forced start tokens (decoder start, language, task, `<|notimestamps|>`), language
detection when a multilingual model is not told the language, and the suppressed tokens.
"""

from __future__ import annotations

import dataclasses
import json
import os
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from luminal import backends
from luminal.dtype import int32
from luminal.errors import LuminalError, ShapeError
from luminal.graph import Graph
from luminal.models.sampling import generate
from luminal.models.whisper import Whisper, WhisperConfig
from luminal.nn.module import skip_init

PathLike = str | os.PathLike[str]
TASKS = ("transcribe", "translate")


# ---------------------------------------------------------------- generation settings
@dataclasses.dataclass(frozen=True)
class WhisperGenerationConfig:
    """The fields of transformers' Whisper generation config that greedy decoding
    without timestamps reads. Made from `generation_config.json` (or, without one, from
    `config.json`, as transformers does); missing fields are absent features."""

    decoder_start_token_id: int
    eos_token_id: tuple[int, ...] = ()
    pad_token_id: int | None = None
    no_timestamps_token_id: int | None = None
    lang_to_id: Mapping[str, int] | None = None
    task_to_id: Mapping[str, int] | None = None
    is_multilingual: bool | None = None
    language: str | None = None
    task: str | None = None
    forced_decoder_ids: tuple[tuple[int, int | None], ...] = ()
    suppress_tokens: tuple[int, ...] = ()
    begin_suppress_tokens: tuple[int, ...] = ()

    @classmethod
    def from_dict(
        cls, mapping: Mapping[str, Any], config: WhisperConfig
    ) -> WhisperGenerationConfig:
        """Fields from a generation config mapping; the token ids default to `config`'s."""
        start = mapping.get("decoder_start_token_id", config.decoder_start_token_id)
        if start is None:
            raise LuminalError("WhisperGenerationConfig: no decoder_start_token_id")
        eos = mapping.get("eos_token_id", config.eos_token_id)
        return cls(
            decoder_start_token_id=_token(start, "decoder_start_token_id"),
            eos_token_id=tuple(_token(t, "eos_token_id") for t in _ids(eos)),
            pad_token_id=_optional_token(
                {"pad_token_id": config.pad_token_id, **mapping}, "pad_token_id"
            ),
            no_timestamps_token_id=_optional_token(mapping, "no_timestamps_token_id"),
            lang_to_id=_token_table(mapping, "lang_to_id"),
            task_to_id=_token_table(mapping, "task_to_id"),
            is_multilingual=mapping.get("is_multilingual"),
            language=mapping.get("language"),
            task=mapping.get("task"),
            forced_decoder_ids=tuple(
                (int(index), None if token is None else _token(token, "forced_decoder_ids"))
                for index, token in mapping.get("forced_decoder_ids") or ()
            ),
            suppress_tokens=tuple(_ids(mapping.get("suppress_tokens"))),
            begin_suppress_tokens=tuple(_ids(mapping.get("begin_suppress_tokens"))),
        )

    @classmethod
    def from_folder(cls, folder: PathLike, config: WhisperConfig) -> WhisperGenerationConfig:
        """From `generation_config.json` when the folder has one, else from `config.json`."""
        folder = Path(folder)
        path = folder / "generation_config.json"
        if not path.is_file():
            path = folder / "config.json"
        try:
            mapping = json.loads(path.read_text(encoding="utf-8"))
        except (OSError, UnicodeDecodeError, json.JSONDecodeError) as error:
            raise LuminalError(f"Whisper: cannot read {str(path)!r}: {error}") from None
        if not isinstance(mapping, dict):
            raise LuminalError(f"Whisper: {str(path)!r} does not hold a JSON object")
        return cls.from_dict(mapping, config)


def _ids(value: Any) -> list[Any]:
    return [] if value is None else [value] if isinstance(value, int) else list(value)


def _token(value: Any, field: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise LuminalError(f"WhisperGenerationConfig: {field} holds {value!r}, not a token id")
    return value


def _optional_token(mapping: Mapping[str, Any], field: str) -> int | None:
    value = mapping.get(field)
    return None if value is None else _token(value, field)


def _token_table(mapping: Mapping[str, Any], field: str) -> dict[str, int] | None:
    table = mapping.get(field)
    if table is None:
        return None
    if not isinstance(table, Mapping):
        raise LuminalError(f"WhisperGenerationConfig: {field} must be a mapping, got {table!r}")
    return {str(name): _token(token, field) for name, token in table.items()}


# ---------------------------------------------------------------- the session
class WhisperSession:
    """Generation state for one Whisper model (see the module docstring). Compiled once
    per graph on first use (`compile=True`: `lm.CPUCompiler()` unless `compiler`, a
    compiler or a backend name, is given; False: the reference runtime)."""

    def __init__(self, model: Whisper, compile: bool = True, compiler: Any = None) -> None:
        self.source, self.config = model, model.config
        c = model.config
        self.encoder_graph, self.graph = Graph(), Graph()
        with skip_init():
            self.encoder_model = Whisper(self.encoder_graph, c)
            self.model = Whisper(self.graph, c)
        self.share_weights()
        self.features = self.encoder_graph.tensor(
            ("batch", c.num_mel_bins, c.num_frames), name="input_features"
        )
        encoded = self.encoder_model.encode(self.features)
        self.cross_out = [kv.retrieve() for kv in self.encoder_model.cross_attention_kv(encoded)]
        self.ids = self.graph.tensor(("batch", "seq"), dtype=int32, name="decoder_input_ids")
        self.cache_in = self.model.cache_inputs("batch", "past")
        self.cross_in = self.model.cross_inputs("batch")
        logits, self.cache_out = self.model.decode(self.ids, self.cross_in, self.cache_in, True)
        self.logits = logits.retrieve()
        for cache in self.cache_out:
            cache.retrieve()
        self.want_compile, self.compiler = compile, compiler
        self.compiled: set[int] = set()  # ids of the graphs compiled so far
        self.batch = 0  # rows of the encoded audio; 0 before encode()
        self.past = 0

    def share_weights(self) -> None:
        """Point both graphs' parameters at the source model's current arrays."""
        source = dict(self.source.named_parameters())
        data = self.source.graph.input_data
        for copy in (self.encoder_model, self.model):
            for name, tensor in copy.named_parameters():
                array = data.get(source[name].node_id)
                if array is None:
                    raise LuminalError(f"WhisperSession: parameter {name!r} has no data")
                copy.graph.input_data[tensor.node_id] = array

    def _run(self, graph: Graph) -> None:
        if self.want_compile and id(graph) not in self.compiled:
            graph.compile(backends.compiler("cpu" if self.compiler is None else self.compiler))
            self.compiled.add(id(graph))
        graph.execute()

    def encode(self, log_mel: np.ndarray) -> None:
        """Run the encoder on features (mels, frames) or (batch, mels, frames) and hand
        its cross-attention keys/values to the decoder graph; empties the caches."""
        c = self.config
        features = np.asarray(log_mel, np.float32)
        if features.ndim == 2:
            features = features[None]
        if features.ndim != 3 or features.shape[1:] != (c.num_mel_bins, c.num_frames):
            raise ShapeError(
                f"WhisperSession.encode: log-mel features must be ({c.num_mel_bins}, "
                f"{c.num_frames}) or (batch, {c.num_mel_bins}, {c.num_frames}), got "
                f"{np.shape(log_mel)}"
            )
        self.features.set(features)
        self._run(self.encoder_graph)
        for cross_in, cross_out in zip(self.cross_in, self.cross_out, strict=True):
            cross_in.set(*cross_out.numpy())
        self.batch = features.shape[0]
        self.reset()

    def reset(self) -> None:
        """Empty self-attention caches: the next run starts a new decoded sequence."""
        c = self.config
        heads = c.decoder_attention_heads
        empty = np.zeros((self.batch, heads, 0, c.d_model // heads), np.float32)
        for cache in self.cache_in:
            cache.set(empty, empty)
        self.past = 0

    def run(self, ids: np.ndarray) -> np.ndarray:
        """Feed `ids` (batch, n) after the cached tokens; returns the last position's
        logits (batch, vocab) and moves the new caches to the inputs."""
        ids = np.asarray(ids)
        if self.batch == 0:
            raise LuminalError("WhisperSession: encode(log_mel) the audio before decoding")
        if ids.ndim != 2 or ids.shape[0] != self.batch or ids.shape[1] == 0:
            raise ShapeError(
                f"WhisperSession.run: ids must be ({self.batch}, n >= 1) for the encoded "
                f"batch of {self.batch}, got shape {ids.shape}"
            )
        limit = self.config.max_target_positions
        if self.past + ids.shape[1] > limit:
            raise ShapeError(
                f"WhisperSession.run: {self.past} cached + {ids.shape[1]} new tokens exceed "
                f"max_target_positions={limit}"
            )
        self.ids.set(ids.astype(np.int32, copy=False))
        self._run(self.graph)
        logits = self.logits.numpy()
        new_caches = [cache.numpy() for cache in self.cache_out]  # read all, then set
        for cache_in, arrays in zip(self.cache_in, new_caches, strict=True):
            cache_in.set(*arrays)
        self.past += ids.shape[1]
        return logits

    def prefill(self, start_ids: np.ndarray | Sequence[int]) -> np.ndarray:
        """Start a sequence for the encoded audio: empty caches, run `start_ids` (batch,
        seq) or (seq,) (one row is repeated for every encoded row); last logits."""
        start = np.asarray(start_ids)
        if start.ndim == 1:
            start = np.broadcast_to(start[None], (self.batch, start.shape[0]))
        self.reset()
        return self.run(start)

    def step(self, token_ids: np.ndarray | Sequence[int] | int) -> np.ndarray:
        """One new token per row (batch,) -> its logits (batch, vocab)."""
        return self.run(np.asarray(token_ids, dtype=np.int32).reshape(-1, 1))

    # ---------------------------------------------------------------- transcription
    @property
    def generation(self) -> WhisperGenerationConfig:
        """The source model's generation settings (see `Whisper.generation`)."""
        settings = self.source.generation
        if settings is None:
            settings = WhisperGenerationConfig.from_dict(self.source.raw_config, self.config)
        return settings

    def start_tokens(
        self, language: str | int | None = None, task: str | None = None
    ) -> np.ndarray:
        """The forced start tokens for the encoded batch, (batch, n) int32, chosen as
        transformers does; a multilingual model told no language detects it per row."""
        settings = self.generation
        language = settings.language if language is None else language
        task = settings.task if task is None else task
        tokens: list[int | None] = [settings.decoder_start_token_id]
        if language is None and task is None:
            forced = list(settings.forced_decoder_ids)
            while forced and forced[0][0] == len(tokens):
                tokens.append(forced.pop(0)[1])
        rows = [list(tokens) for _ in range(self.batch)]
        languages = self._language_ids(settings, language, rows)
        for row, language_id in zip(rows, languages or [], strict=False):
            row[1:2] = [language_id]
        task_ids = set((settings.task_to_id or {}).values())
        for row in rows:
            if task is not None:
                self._set_task(settings, task, row, task_ids)
            elif language is not None and settings.task_to_id and not task_ids & set(row):
                row.append(settings.task_to_id["transcribe"])
            no_timestamps = settings.no_timestamps_token_id
            if no_timestamps is not None and row[-1] != no_timestamps:
                row.append(no_timestamps)
        start = np.array([[t for t in row if t is not None] for row in rows], np.int32)
        self._check_ids(start, "start token")
        return start

    def _language_ids(
        self, settings: WhisperGenerationConfig, language: str | int | None, rows: list[list]
    ) -> list[int] | None:
        if settings.is_multilingual is False and language is not None:
            raise LuminalError("Whisper: this model is English-only; it takes no language")
        if language is not None:
            return [self._language_id(settings, language)] * self.batch
        undefined = len(rows[0]) <= 1 or rows[0][1] is None
        if settings.lang_to_id is None or not undefined:
            return None
        return self.detect_language(settings)

    def _language_id(self, settings: WhisperGenerationConfig, language: str | int) -> int:
        if isinstance(language, int) and not isinstance(language, bool):
            return language
        table = settings.lang_to_id or {}
        name = str(language).lower()
        for key in (name, f"<|{name}|>"):
            if key in table:
                return table[key]
        raise LuminalError(
            f"Whisper: unknown language {language!r}; this model knows "
            f"{sorted(table) if table else 'no languages (no lang_to_id)'}"
        )

    @staticmethod
    def _set_task(
        settings: WhisperGenerationConfig, task: str, row: list, task_ids: set[int]
    ) -> None:
        if settings.task_to_id is None or task not in settings.task_to_id:
            raise LuminalError(
                f"Whisper: task {task!r} is not in the generation config's task_to_id; "
                f"expected one of {TASKS}"
            )
        task_id = settings.task_to_id[task]
        if task_ids & set(row):
            row[:] = [task_id if t in task_ids else t for t in row]
        else:
            row.append(task_id)

    def detect_language(self, settings: WhisperGenerationConfig | None = None) -> list[int]:
        """The most likely language token of each encoded row: the decoder's logits after
        the start token, restricted to the language tokens."""
        settings = settings or self.generation
        if not settings.lang_to_id:
            raise LuminalError("Whisper: the generation config has no lang_to_id")
        logits = self.prefill([settings.decoder_start_token_id])
        allowed = np.array(sorted(settings.lang_to_id.values()))
        return [int(i) for i in allowed[np.argmax(logits[:, allowed], axis=-1)]]

    def suppressor(self) -> Any:
        """A logits processor for `generate`: the generation config's `suppress_tokens`
        at every step, and `begin_suppress_tokens` at the first generated token."""
        vocab = self.config.vocab_size
        settings = self.generation
        always = [t for t in settings.suppress_tokens if 0 <= t < vocab]
        first = [t for t in settings.begin_suppress_tokens if 0 <= t < vocab]

        def suppress(logits: np.ndarray, index: int) -> np.ndarray:
            logits = logits.copy()
            logits[:, always] = -np.inf
            if index == 0:
                logits[:, first] = -np.inf
            return logits

        return suppress

    def transcribe(
        self,
        log_mel: np.ndarray,
        language: str | int | None = None,
        task: str | None = None,
        max_new_tokens: int | None = None,
        callback: Any = None,
    ) -> np.ndarray:
        """Greedy tokens after the forced start ones, up to (not including) the end token
        or `max_new_tokens` of them (default: up to max_target_positions in all), as
        transformers returns them: features (mels, frames) -> (n,); a batch (batch, mels,
        frames) -> (batch, n), rows right-padded with `pad_token_id` to the longest."""
        unbatched = np.ndim(log_mel) == 2
        self.encode(log_mel)
        start = self.start_tokens(language, task)
        room = self.config.max_target_positions - start.shape[1]
        max_new_tokens = room if max_new_tokens is None else max_new_tokens
        if max_new_tokens > room:
            raise ShapeError(
                f"Whisper: {start.shape[1]} start tokens + max_new_tokens={max_new_tokens} "
                f"exceed max_target_positions={self.config.max_target_positions}"
            )
        eos = list(self.generation.eos_token_id)
        tokens = generate(
            self,
            start,
            max_new_tokens,
            eos_token_id=eos,
            ignore_eos=not eos,
            callback=callback,
            logits_processor=self.suppressor(),
        )
        return self._cut_at_end(tokens, eos, unbatched)

    def _cut_at_end(self, tokens: np.ndarray, eos: list[int], unbatched: bool) -> np.ndarray:
        """Each row up to its first end token, padded to the longest row."""
        ended = np.isin(tokens, eos)
        lengths = np.where(ended.any(axis=1), ended.argmax(axis=1), tokens.shape[1])
        if unbatched:
            return tokens[0, : lengths[0]]
        pad = self.generation.pad_token_id
        out = np.full((tokens.shape[0], lengths.max(initial=0)), 0 if pad is None else pad)
        for row, length in enumerate(lengths):
            out[row, :length] = tokens[row, :length]
        return out.astype(np.int32)

    def _check_ids(self, ids: np.ndarray, what: str) -> None:
        vocab = self.config.vocab_size
        if ids.size and (ids.min() < 0 or ids.max() >= vocab):
            raise LuminalError(f"Whisper: {what} ids {ids.tolist()} are outside [0, {vocab})")


def cached_session(model: Whisper, compile: bool) -> WhisperSession:
    """One session per model and mode, so repeated transcriptions compile once; its
    weights are re-pointed at the model's current arrays on every call."""
    sessions = model.__dict__.setdefault("_sessions", {})
    session = sessions.get(compile)
    if session is None:
        session = sessions[compile] = WhisperSession(model, compile=compile)
    else:
        session.share_weights()
    return session


__all__ = ["WhisperGenerationConfig", "WhisperSession", "cached_session"]
