"""Check a GenerationRequest before any work: every bad value named in one plain sentence.

Public API:
    problems(request, *, vocab_rows=None) -> list[str]   one plain phrase per bad value
    validate(request, *, vocab_rows=None) -> None          raises DraftPairError listing them
    token_problem(tokens, rows) -> str | None   why token ids cannot be read by a model whose
                                                embedding table has ``rows`` rows
    text_problem(data: bytes, name) -> str | None   why bytes are not a usable text prompt

Pure Python (no MLX): the CLI, the GUI and a server can all call it before loading anything.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from numbers import Real
from typing import TYPE_CHECKING, Any

from app.errors import DraftPairError

if TYPE_CHECKING:
    from app.engine.events import GenerationRequest, SamplingParams

MAX_OUTPUT_TOKENS = 262_144  # beyond any context mlx-lm models ship with
MAX_WIDTH = 64
MAX_NGRAM = 16
MAX_STOP_STRINGS = 32
ROLES = ("system", "user", "assistant", "tool")


def _number(value: object) -> bool:
    return isinstance(value, Real) and not isinstance(value, bool)


def _whole(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _finite(value: object) -> bool:
    return _number(value) and math.isfinite(float(value))  # type: ignore[arg-type]


def _sampling_problems(s: SamplingParams) -> list[str]:
    out = []
    if not _finite(s.temperature) or s.temperature < 0:
        out.append(f"the temperature must be a number of 0 or more (got {s.temperature!r})")
    if not _finite(s.top_p) or not 0 < s.top_p <= 1:
        out.append(f"top-p must be more than 0 and at most 1 (got {s.top_p!r})")
    if not _whole(s.top_k) or s.top_k < 0:
        out.append(f"top-k must be a whole number of 0 (off) or more (got {s.top_k!r})")
    if not _finite(s.min_p) or not 0 <= s.min_p <= 1:
        out.append(f"min-p must be between 0 and 1 (got {s.min_p!r})")
    if not _finite(s.repetition_penalty) or s.repetition_penalty <= 0:
        out.append("the repetition penalty must be a number above 0, 1 meaning off "
                   f"(got {s.repetition_penalty!r})")
    if not _whole(s.repetition_context_size) or s.repetition_context_size < 1:
        out.append("the repetition window must be at least 1 token "
                   f"(got {s.repetition_context_size!r})")
    if s.seed is not None and (not _whole(s.seed) or not 0 <= s.seed < 2**63):
        out.append(f"the seed must be a whole number from 0 to 2^63-1 (got {s.seed!r})")
    return out


def token_problem(tokens: Sequence[Any], rows: int | None) -> str | None:
    """Why ``tokens`` are not ids a model with ``rows`` embedding rows can read, or None.
    An id past the table is refused here: the model would read memory past its end."""
    bad = next((t for t in tokens if not _whole(t) or t < 0), None)
    if bad is not None:
        return f"prompt tokens must be whole numbers of 0 or more (got {bad!r})"
    if rows is not None and tokens:
        top = max(tokens)
        if top >= rows:
            return (f"the prompt holds the token id {top:,}, but the model knows only ids "
                    f"0 to {rows - 1:,}")
    return None


def _prompt_problems(req: GenerationRequest, vocab_rows: int | None = None) -> list[str]:
    given = [x is not None for x in (req.prompt, req.messages, req.prompt_tokens)]
    if sum(given) > 1:
        return ["give only one of a prompt, chat messages or prompt tokens"]
    if req.messages is not None:
        if not req.messages:
            return ["the conversation has no messages"]
        out = []
        for i, m in enumerate(req.messages, 1):
            if not isinstance(m, dict) or not isinstance(m.get("content"), str):
                out.append(f"message {i} has no text")
            elif m.get("role") not in ROLES:
                out.append(f"message {i} has the unknown role {m.get('role')!r}")
        if not out and not any(m["content"].strip() for m in req.messages):
            out.append("every message is empty")
        return out
    if req.prompt_tokens is not None:
        if not req.prompt_tokens:
            return ["the prompt has no tokens"]
        problem = token_problem(req.prompt_tokens, vocab_rows)
        return [problem] if problem else []
    if req.prompt is None or not isinstance(req.prompt, str) or not req.prompt.strip():
        return ["the prompt is empty"]
    if "\x00" in req.prompt:
        return ["the prompt holds binary data (a NUL character)"]
    return []


def problems(request: GenerationRequest, *, vocab_rows: int | None = None) -> list[str]:
    """Every problem with ``request`` (a GenerationRequest), as plain phrases; with
    ``vocab_rows`` (the model's embedding rows) prompt token ids are checked against it."""
    from app import kinds

    out = _prompt_problems(request, vocab_rows)
    if not _whole(request.max_tokens) or request.max_tokens < 1:
        out.append(f"max tokens must be at least 1 (got {request.max_tokens!r})")
    elif request.max_tokens > MAX_OUTPUT_TOKENS:
        out.append(f"max tokens must be at most {MAX_OUTPUT_TOKENS:,} (got {request.max_tokens:,})")
    out += _sampling_problems(request.sampling)
    if request.draft_kind not in kinds.names():
        out.append(f"the draft kind {request.draft_kind!r} is unknown "
                   f"(choose {', '.join(kinds.names())})")
    w = request.draft_width
    if w is not None and (not _whole(w) or not 1 <= w <= MAX_WIDTH):
        out.append(f"the draft width must be between 1 and {MAX_WIDTH} (got {w!r})")
    lo, hi = request.ngram_min, request.ngram_max
    if not (_whole(lo) and _whole(hi) and 1 <= lo <= hi <= MAX_NGRAM):
        out.append(f"the n-gram sizes must satisfy 1 <= min <= max <= {MAX_NGRAM} "
                   f"(got {lo!r} and {hi!r})")
    stops = request.stop
    if len(stops) > MAX_STOP_STRINGS:
        out.append(f"at most {MAX_STOP_STRINGS} stop strings are allowed (got {len(stops)})")
    elif any(not isinstance(s, str) or not s for s in stops):
        out.append("a stop string is empty (it would stop before the first token)")
    if not _finite(request.memory_interval_s) or request.memory_interval_s < 0:
        out.append("the memory sampling interval must be 0 (every round) or more seconds")
    return out


def validate(request: GenerationRequest, *, vocab_rows: int | None = None) -> None:
    """Raise DraftPairError naming every problem with ``request``."""
    found = problems(request, vocab_rows=vocab_rows)
    if found:
        text = "; ".join(found)
        raise DraftPairError(f"This request cannot run: {text}.", detail=repr(request))


def text_problem(data: bytes, name: str) -> str | None:
    """Why ``data`` (a prompt file's bytes) is not a usable text prompt, or None."""
    if not data.strip():
        return f"{name} is empty."
    if b"\x00" in data:
        return f"{name} is not a text file (it holds binary data)."
    try:
        data.decode("utf-8")
    except UnicodeDecodeError as exc:
        return f"{name} is not UTF-8 text (unreadable bytes at position {exc.start})."
    return None
