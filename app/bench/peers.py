"""Peer rows: the same pair and prompt through mlx-lm itself, timed like DraftPair.

DraftPair's decode rate is ``predicted_n / predicted_ms``: output tokens over the time from
the end of prompt processing to the last token. mlx-lm's ``stream_generate`` folds the last
prompt token into its first decode step, so its own ``generation_tps`` is not comparable.
To time both the same way we process ``prompt[:-1]`` into the caches ourselves (what mlx-lm's
prefill does), evaluate, start the clock, and hand mlx-lm the last prompt token with those
caches; the clock stops when the final response arrives. Each window then holds about
``n + 1`` target forward passes on both sides (mlx-lm: the last prompt token and ``n`` steps;
DraftPair: ``n`` steps and the pipelined step after the last token). Detokenizing is inside
both windows.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any

PREFILL_STEP = 2048


@dataclass(frozen=True)
class PeerResult:
    tokens: tuple[int, ...]
    finish_reason: str
    prompt_n: int
    prompt_ms: float
    predicted_n: int
    predicted_ms: float
    ttft_ms: float
    from_draft: int  # tokens mlx-lm reports as accepted drafts

    @property
    def predicted_per_second(self) -> float:
        return self.predicted_n / (self.predicted_ms / 1e3) if self.predicted_ms > 0 else 0.0

    def timings(self, *, draft_kind: str, width: int) -> dict[str, Any]:
        """A timings dict with DraftPair's field names (fields mlx-lm cannot report: 0)."""
        return {
            "prompt_n": self.prompt_n,
            "prompt_ms": self.prompt_ms,
            "prompt_per_second": self.prompt_n / (self.prompt_ms / 1e3) if self.prompt_ms else 0.0,
            "predicted_n": self.predicted_n,
            "predicted_ms": self.predicted_ms,
            "predicted_per_second": self.predicted_per_second,
            "draft_n_accepted": self.from_draft,
            "draft_kind": draft_kind,
            "draft_width": width,
            "ttft_ms": self.ttft_ms,
        }


def _prefill(model: Any, cache: list[Any], tokens: list[int]) -> None:
    import mlx.core as mx

    for start in range(0, len(tokens), PREFILL_STEP):
        model(mx.array(tokens[start : start + PREFILL_STEP], dtype=mx.uint32)[None], cache=cache)
        mx.eval([c.state for c in cache])


def run_mlx_lm(
    *,
    model: Any,
    tokenizer: Any,
    prompt: list[int],
    max_tokens: int,
    temperature: float,
    seed: int | None,
    draft_model: Any = None,
    num_draft_tokens: int = 4,
) -> PeerResult:
    """One request through ``mlx_lm.stream_generate`` (speculative when ``draft_model``)."""
    import mlx.core as mx
    from mlx_lm.generate import stream_generate
    from mlx_lm.models.cache import make_prompt_cache
    from mlx_lm.sample_utils import make_sampler

    if seed is not None:
        mx.random.seed(seed)
    t_start = time.perf_counter()
    cache = make_prompt_cache(model)
    _prefill(model, cache, prompt[:-1])
    kwargs: dict[str, Any] = {"sampler": make_sampler(temp=temperature)}
    if draft_model is not None:
        draft_cache = make_prompt_cache(draft_model)
        _prefill(draft_model, draft_cache, prompt[:-1])
        cache = cache + draft_cache
        kwargs.update(draft_model=draft_model, num_draft_tokens=num_draft_tokens)
    t_prefill = time.perf_counter()
    tokens: list[int] = []
    from_draft = 0
    ttft_ms = 0.0
    finish = "length"
    last = mx.array(prompt[-1:], dtype=mx.uint32)
    for resp in stream_generate(
        model, tokenizer, last, max_tokens=max_tokens, prompt_cache=cache, **kwargs
    ):
        if not ttft_ms:
            ttft_ms = (time.perf_counter() - t_start) * 1e3
        if resp.finish_reason is None or resp.finish_reason == "length":
            tokens.append(int(resp.token))
            from_draft += int(bool(resp.from_draft))
        if resp.finish_reason is not None:
            finish = resp.finish_reason
    t_end = time.perf_counter()
    return PeerResult(
        tokens=tuple(tokens),
        finish_reason=finish,
        prompt_n=len(prompt),
        prompt_ms=(t_prefill - t_start) * 1e3,
        predicted_n=len(tokens),
        predicted_ms=(t_end - t_prefill) * 1e3,
        ttft_ms=ttft_ms,
        from_draft=from_draft,
    )
