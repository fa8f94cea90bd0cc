"""Choosing the next token from logits, and the generation loop.

Sampling runs in numpy on the last position's logits that a `DecoderSession` retrieves:
it is a few thousand numbers per step, and keeping it out of the graph lets one compiled
decode graph serve greedy and sampled generation alike. Order of the filters is
transformers': temperature, then top-k, then top-p (nucleus).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from luminal.errors import LuminalError, ShapeError


def top_k_filter(logits: np.ndarray, k: int | None) -> np.ndarray:
    """Logits with everything below the k-th largest of each row set to -inf (ties with
    the k-th value are kept, as in transformers' TopKLogitsWarper)."""
    logits = np.asarray(logits, dtype=np.float32)
    if k is None:
        return logits
    if k < 1:
        raise LuminalError(f"top_k must be a positive int, got {k}")
    if k >= logits.shape[-1]:
        return logits
    kth = np.partition(logits, -k, axis=-1)[..., -k, None]
    return np.where(logits < kth, -np.inf, logits).astype(np.float32)


def top_p_filter(logits: np.ndarray, p: float | None) -> np.ndarray:
    """Logits outside the nucleus set to -inf: per row, the smallest set of most likely
    tokens whose probabilities sum to at least `p` (the most likely token always stays)."""
    logits = np.asarray(logits, dtype=np.float32)
    if p is None or p >= 1.0:
        return logits
    if not p > 0.0:  # NaN too
        raise LuminalError(f"top_p must be in (0, 1], got {p}")
    order = np.argsort(-logits, axis=-1, kind="stable")
    sorted_logits = np.take_along_axis(logits, order, axis=-1)
    probs = softmax(sorted_logits)
    before = np.cumsum(probs, axis=-1) - probs  # mass of the strictly more likely tokens
    drop_sorted = before >= p  # keeps the first token whose cumulative mass reaches p
    drop = np.empty_like(drop_sorted)
    np.put_along_axis(drop, order, drop_sorted, axis=-1)
    return np.where(drop, -np.inf, logits).astype(np.float32)


def softmax(logits: np.ndarray) -> np.ndarray:
    """Row softmax in float64 (probabilities that sum to 1 for numpy's choice)."""
    x = np.asarray(logits, dtype=np.float64)
    x = x - np.max(x, axis=-1, keepdims=True)
    e = np.exp(x)
    return e / e.sum(axis=-1, keepdims=True)


def sample_logits(
    logits: np.ndarray,
    temperature: float = 0.0,
    top_k: int | None = None,
    top_p: float | None = None,
    rng: np.random.Generator | None = None,
) -> np.ndarray:
    """One token id per row of `logits` (batch, vocab) -> (batch,) int32. temperature 0
    is greedy (argmax, first index on ties); otherwise softmax(logits / temperature)
    restricted by top-k and top-p, drawn from `rng`."""
    logits = np.asarray(logits, dtype=np.float32)
    if logits.ndim == 1:
        return sample_logits(logits[None], temperature, top_k, top_p, rng)[0]
    if logits.ndim != 2:
        raise ShapeError(f"sample_logits: logits must be (batch, vocab), got {logits.shape}")
    if temperature < 0:
        raise LuminalError(f"sample_logits: temperature must be >= 0, got {temperature}")
    if temperature == 0:
        return np.argmax(logits, axis=-1).astype(np.int32)
    rng = np.random.default_rng() if rng is None else rng
    filtered = top_p_filter(top_k_filter(logits / np.float32(temperature), top_k), top_p)
    probs = softmax(filtered)
    # inverse-CDF draw per row: one uniform number each, reproducible for a seed
    cdf = np.cumsum(probs, axis=-1)
    draws = rng.random((logits.shape[0], 1)) * cdf[:, -1:]
    choice = (cdf <= draws).sum(axis=-1)
    choice = np.minimum(choice, logits.shape[-1] - 1)
    # never land on a removed token (possible only through float rounding at the edges)
    removed = probs[np.arange(len(choice)), choice] == 0
    choice[removed] = np.argmax(probs[removed], axis=-1)
    return choice.astype(np.int32)


def generate(
    model: Any,
    prompt_ids: Sequence[int] | np.ndarray,
    max_new_tokens: int,
    temperature: float = 0.0,
    top_k: int | None = None,
    top_p: float | None = None,
    seed: int | None = None,
    callback: Callable[[Any], Any] | None = None,
    eos_token_id: int | Sequence[int] | None = None,
    ignore_eos: bool = False,
    compile: bool = True,
    logits_processor: Callable[[np.ndarray, int], np.ndarray] | None = None,
) -> np.ndarray:
    """Continue `prompt_ids` ((seq,) or (batch, seq)) by up to `max_new_tokens` tokens with
    the KV cache: one prefill run, then one run per token.

    `model`: a causal LM (`Llama`, `Mistral`, `Qwen2`, `Phi3`, `Gemma`, `GPT2`; a session
    is made and kept on it, compiled with lm.CPUCompiler() unless `compile=False`) or a
    `DecoderSession` (`LlamaSession`). Sampling: see `sample_logits`; `seed`
    seeds a numpy Generator, so sampled generation is reproducible. `callback` streams each
    new token: an int for an unbatched prompt, a (batch,) array otherwise. Generation stops
    when every row has produced an end token (`eos_token_id`, default the config's; none
    with `ignore_eos`); rows that ended earlier are filled with their end token. Returns
    the new tokens, (n,) or (batch, n). Any other session with `prefill(ids)` and
    `step(tokens)` works too (a `WhisperSession` after `encode(log_mel)`).
    `logits_processor(logits, index)` edits the logits of new token `index` (0 for the
    first) before sampling (Whisper suppresses tokens with it)."""
    from luminal.models.decoder import CausalLM, DecoderSession

    if isinstance(model, CausalLM):
        session = _cached_session(model, compile)
    elif isinstance(model, DecoderSession) or (
        hasattr(model, "prefill") and hasattr(model, "step")
    ):
        session = model
    else:
        raise LuminalError(f"generate: expected a Llama or LlamaSession, got {type(model)}")
    prompt = np.asarray(prompt_ids)
    unbatched = prompt.ndim == 1
    if unbatched:
        prompt = prompt[None]
    if prompt.ndim != 2 or prompt.shape[1] == 0 or prompt.dtype.kind not in "iu":
        raise ShapeError(
            "generate: prompt_ids must be non-empty integer ids of shape (seq,) or "
            f"(batch, seq), got {prompt.dtype} of shape {prompt.shape}"
        )
    if eos_token_id is None:
        eos_token_id = session.model.config.eos_token_id
    eos = [] if ignore_eos or eos_token_id is None else np.atleast_1d(eos_token_id).tolist()
    rng = np.random.default_rng(seed)
    out = np.zeros((prompt.shape[0], 0), np.int32)
    ended = np.full(prompt.shape[0], -1, np.int32)  # the end token of each ended row
    if max_new_tokens <= 0:
        return out[0] if unbatched else out
    logits = session.prefill(prompt.astype(np.int32))
    while True:
        if logits_processor is not None:
            logits = logits_processor(logits, out.shape[1])
        tokens = sample_logits(logits, temperature, top_k, top_p, rng)
        tokens = np.where(ended >= 0, ended, tokens).astype(np.int32)
        out = np.concatenate([out, tokens[:, None]], axis=1)
        if callback is not None:
            callback(int(tokens[0]) if unbatched else tokens.copy())
        ended = np.where((ended < 0) & np.isin(tokens, eos), tokens, ended)
        if out.shape[1] >= max_new_tokens or (ended >= 0).all():
            break
        logits = session.step(tokens)
    return out[0] if unbatched else out


def _cached_session(model: Any, compile: bool) -> Any:
    """One session per model and mode, so repeated generate() calls compile once; its
    weights are re-pointed at the model's current arrays on every call."""
    sessions = model.__dict__.setdefault("_sessions", {})
    session = sessions.get(compile)
    if session is None:
        session = sessions[compile] = model.session(compile=compile)
    else:
        session.share_weights()
    return session


__all__ = ["generate", "sample_logits", "softmax", "top_k_filter", "top_p_filter"]
