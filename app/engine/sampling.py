"""The target's distribution at a position, exactly as plain decoding would form it.

Plain decoding (``mlx_lm.generate_step`` + ``make_sampler``) does, per position:
logits processors on the raw logits (repetition penalty with the token history), log-softmax,
then top-p, min-p, top-k masks, then ``categorical(logprobs / temperature)``. Speculative
verification applies the same chain to every verified row, each row with its own history
(committed tokens + the proposals before it), so both paths draw from the same distribution.

Shared draws: at temperature > 0 a request with a seed draws the token at sequence position
``n`` as ``argmax(logits / T + g_n)``, where ``g_n`` is Gumbel noise keyed by (seed, n) alone
(the Gumbel-max trick: a draw from the same distribution as ``categorical``). Plain decoding,
every verify pass and the drafters read the same ``g_n``, so a reply depends on the seed and
not on whether or how it was drafted: speculation on or off, the same seed gives the same text
(drafter-invariant speculative decoding, Daliri et al. 2024). A drafter that draws its proposal
with ``g_n`` too proposes the token the target will draw wherever their distributions agree.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
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


# -- shared draws ---------------------------------------------------------------------------
NOISE_BLOCK = 16384  # noise is made in blocks of columns, so any width reads the same values
_MAX_BLOCKS = 32  # columns up to 32 x 16,384 = 524,288 token ids
_KEPT_POSITIONS = 96  # a round's positions and the next few: each is made once per request


class _Noise:
    """Gumbel rows by (seed, position), the newest kept: the drafter makes a position's row,
    the verify pass and later rounds at the same position read it again."""

    def __init__(self) -> None:
        self._rows: OrderedDict[tuple[int, int], mx.array] = OrderedDict()
        self._lock = threading.Lock()

    def row(self, seed: int, position: int, width: int) -> mx.array:
        blocks = -(-width // NOISE_BLOCK)
        if blocks > _MAX_BLOCKS:
            raise ValueError(f"a vocabulary of {width} tokens is larger than shared draws allow")
        key = (seed, position)
        with self._lock:
            row = self._rows.get(key)
            if row is not None:
                self._rows.move_to_end(key)
        have = 0 if row is None else row.shape[0] // NOISE_BLOCK
        if have < blocks:
            parts = [] if row is None else [row]
            for b in range(have, blocks):
                k = mx.array([_seed_word(seed), (position * _MAX_BLOCKS + b) & 0xFFFFFFFF],
                             dtype=mx.uint32)
                parts.append(mx.random.gumbel(shape=(NOISE_BLOCK,), key=k))
            row = mx.concatenate(parts) if len(parts) > 1 else parts[0]
            mx.eval(row)
            with self._lock:
                self._rows[key] = row
                self._rows.move_to_end(key)
                while len(self._rows) > _KEPT_POSITIONS:
                    self._rows.popitem(last=False)
        assert row is not None
        return row[:width]


_noise = _Noise()


def _seed_word(seed: int) -> int:
    """A seed of up to 64 bits folded into the key's 32 (the high half mixed in)."""
    return ((seed & 0xFFFFFFFF) ^ (((seed >> 32) * 0x9E3779B1) & 0xFFFFFFFF)) & 0xFFFFFFFF


def noise_rows(seed: int, positions: Sequence[int], width: int,
               ids: mx.array | None = None) -> mx.array:
    """Gumbel noise, a row per position: ``width`` columns, or with ``ids`` (the token id of
    each column, when the columns are a draft's own short list of ``width`` token ids) one
    column per entry of ``ids``."""
    if ids is None:
        rows = [_noise.row(seed, p, width) for p in positions]
    else:
        rows = [_noise.row(seed, p, width)[ids] for p in positions]
    return mx.stack(rows)


def shares_draws(sampling: SamplingParams) -> bool:
    """True when tokens are drawn with the noise of their position (temperature > 0, a seed)."""
    return not sampling.greedy and sampling.shared_draws and sampling.seed is not None


def sample(logits: mx.array, sampling: SamplingParams,
           positions: Sequence[int] | None = None) -> mx.array:
    """One token per row: argmax when greedy, else a draw from the transformed distribution,
    with each row's position's noise when ``positions`` is given (shared draws)."""
    if sampling.greedy:
        return mx.argmax(logits, axis=-1)
    scaled = scaled_logits(logits, sampling)
    if positions is None or not shares_draws(sampling):
        return mx.random.categorical(scaled)
    return draw(scaled, sampling, positions)


def draw(scaled: mx.array, sampling: SamplingParams, positions: Sequence[int],
         ids: mx.array | None = None, vocab: int = 0) -> mx.array:
    """``argmax(scaled + g)`` per row (``scaled``: ``(len(positions), V)`` logits already
    divided by the temperature): the shared draw at each row's position. ``ids``: the token
    id of each column when they are a draft's short list out of ``vocab`` target tokens."""
    assert sampling.seed is not None
    width = scaled.shape[-1] if ids is None else vocab
    g = noise_rows(sampling.seed, positions, width, ids)
    return mx.argmax(scaled.astype(mx.float32) + g, axis=-1)


def positions_from(first: int, n: int) -> list[int]:
    return list(range(first, first + n))
