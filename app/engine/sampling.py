"""The target's distribution at a position, exactly as plain decoding would form it.

Plain decoding (``mlx_lm.generate_step`` + ``make_sampler``) does, per position:
logits processors on the raw logits (repetition penalty with the token history), log-softmax,
then top-p, min-p, top-k masks, then ``categorical(logprobs / temperature)``. Speculative
verification applies the same chain to every verified row, each row with its own history
(committed tokens + the proposals before it), so both paths draw from the same distribution.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import mlx.core as mx
from mlx_lm.sample_utils import apply_min_p, apply_top_k, apply_top_p, make_logits_processors

from app.engine.events import SamplingParams

LogitsProcessor = Callable[[mx.array, mx.array], mx.array]


def make_processors(sampling: SamplingParams) -> list[LogitsProcessor]:
    penalty = sampling.repetition_penalty
    if penalty is None or penalty == 1.0:
        return []
    return make_logits_processors(
        repetition_penalty=penalty,
        repetition_context_size=sampling.repetition_context_size,
    )


def process_rows(
    raw: mx.array,
    history: mx.array | None,
    row_tokens: Sequence[int] | mx.array,
    processors: list[LogitsProcessor],
) -> mx.array:
    """Apply logits processors to each row of ``raw`` (shape ``(m, V)``).

    Row ``i`` sees ``history`` followed by ``row_tokens[:i]`` (the proposals before it).
    """
    if not processors:
        return raw
    rows = []
    extra = (row_tokens if isinstance(row_tokens, mx.array)
             else mx.array(list(row_tokens), mx.uint32))
    for i in range(raw.shape[0]):
        parts = [p for p in (history, extra[:i]) if p is not None and p.size > 0]
        hist = mx.concatenate(parts) if parts else mx.array([], mx.uint32)
        row = raw[i : i + 1]
        for proc in processors:
            row = proc(hist, row)
        rows.append(row)
    return mx.concatenate(rows, axis=0)


def filtered_logprobs(logits: mx.array, sampling: SamplingParams) -> mx.array:
    """Log-softmax then the sampler's masks (top-p, min-p, top-k), as ``make_sampler`` orders them."""
    logprobs = logits - mx.logsumexp(logits, axis=-1, keepdims=True)
    if 0.0 < sampling.top_p < 1.0:
        logprobs = apply_top_p(logprobs, sampling.top_p)
    if sampling.min_p > 0.0:
        logprobs = apply_min_p(logprobs, sampling.min_p)
    if sampling.top_k > 0 and sampling.top_k < logprobs.shape[-1]:
        logprobs = apply_top_k(logprobs, sampling.top_k)
    return logprobs


def scaled_logits(logits: mx.array, sampling: SamplingParams) -> mx.array:
    """Logits whose softmax is the sampling distribution (temperature > 0)."""
    return filtered_logprobs(logits, sampling) * (1.0 / sampling.temperature)


def probabilities(logits: mx.array, sampling: SamplingParams) -> mx.array:
    return mx.softmax(scaled_logits(logits, sampling).astype(mx.float32), axis=-1)


def sample(logits: mx.array, sampling: SamplingParams) -> mx.array:
    """One token per row: argmax when greedy, else a draw from the transformed distribution."""
    if sampling.greedy:
        return mx.argmax(logits, axis=-1)
    return mx.random.categorical(scaled_logits(logits, sampling))
