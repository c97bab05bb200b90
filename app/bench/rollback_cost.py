"""What rewinding the target costs per speculative round, as a fraction of a plain step.

For a target, after a prefill of ``prompt_len`` tokens: the median time of a plain step
(one token, evaluated with its cache), of a verify pass of ``width + 1`` tokens, and of the
rewind that keeps ``keep`` of them for every ``keep`` in ``0..width`` (``keep = width + 1``,
everything accepted, costs nothing). The strategy the engine chose for the target is
measured and, for a recurrent target, the generic snapshot-and-replay one too.
"""

from __future__ import annotations

import statistics
import time
from dataclasses import asdict, dataclass, field
from typing import Any

import mlx.core as mx

from app.engine import rollback
from app.engine.models import LoadedModel, make_cache


@dataclass
class StrategyCost:
    method: str
    verify_ms: float
    rollback_ms_by_keep: dict[int, float]

    @property
    def rollback_ms(self) -> float:
        """Mean over the partial-acceptance outcomes (every keep but 'all accepted')."""
        return statistics.fmean(self.rollback_ms_by_keep.values())


@dataclass
class RollbackCost:
    model: str
    model_type: str
    width: int
    prompt_len: int
    plain_step_ms: float
    strategies: list[StrategyCost] = field(default_factory=list)

    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
        for s, row in zip(self.strategies, d["strategies"], strict=True):
            row["rollback_ms"] = s.rollback_ms
            row["fraction_of_plain_step"] = s.rollback_ms / self.plain_step_ms
        return d

    def lines(self) -> list[str]:
        out = [f"{self.model} ({self.model_type}): plain step {self.plain_step_ms:.2f} ms, "
               f"verify of {self.width + 1} tokens "
               f"{self.strategies[0].verify_ms:.2f} ms (after {self.prompt_len} prompt tokens)"]
        for s in self.strategies:
            keeps = ", ".join(f"keep {k}: {v:.3f}" for k, v in s.rollback_ms_by_keep.items())
            out.append(f"  {s.method}: rollback {s.rollback_ms:.3f} ms per partial round = "
                       f"{s.rollback_ms / self.plain_step_ms:.1%} of a plain step ({keeps} ms)")
        return out


def _median_ms(fn, repeats: int) -> float:
    times = []
    for _ in range(repeats):
        times.append(fn())
    return statistics.median(times)


def measure(target: LoadedModel, *, width: int = 4, prompt_len: int = 256,
            repeats: int = 9, seed: int = 0) -> RollbackCost:
    model = target.model
    vocab = int(target.vocab_size)
    mx.random.seed(seed)
    prompt = mx.random.randint(0, vocab, (prompt_len,)).astype(mx.uint32)

    def prefilled() -> list:
        cache = make_cache(target)
        mx.eval(model(prompt[None], cache=cache))
        mx.eval(rollback.cache_arrays(cache))
        return cache

    cache = prefilled()

    def plain() -> float:
        tok = mx.random.randint(0, vocab, (1,)).astype(mx.uint32)
        mx.eval(tok)
        t0 = time.perf_counter()
        out = model(tok[None], cache=cache)
        mx.eval(out, rollback.cache_arrays(cache))
        return (time.perf_counter() - t0) * 1e3

    plain()  # first use
    plain_ms = _median_ms(plain, repeats)
    chosen = rollback.for_target(target)
    methods = [chosen.method]
    if chosen.method == rollback.CAPTURE:
        methods.append(rollback.REPLAY)
    result = RollbackCost(target.name, target.model_type, width, prompt_len, plain_ms)
    for method in methods:
        rb = chosen if method == chosen.method else rollback.Rollback(
            model, make_cache(target), method=method)
        cache = prefilled()
        verify_times: list[float] = []
        by_keep: dict[int, float] = {}
        for keep in range(width + 1):
            times = []
            for _ in range(repeats + 1):
                tokens = mx.random.randint(0, vocab, (width + 1,)).astype(mx.uint32)
                mx.eval(tokens)
                t0 = time.perf_counter()
                with rb.verifying(cache):
                    out = model(tokens[None], cache=cache)
                mx.eval(out, rollback.cache_arrays(cache))
                t1 = time.perf_counter()
                rb.rewind(cache, tokens, keep=keep)
                mx.eval(rollback.cache_arrays(cache))
                t2 = time.perf_counter()
                verify_times.append((t1 - t0) * 1e3)
                times.append((t2 - t1) * 1e3)
            by_keep[keep] = statistics.median(times[1:])
        result.strategies.append(
            StrategyCost(method, statistics.median(verify_times), by_keep))
    return result
