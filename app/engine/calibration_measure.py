"""Measuring the calibration table: the target's verify pass by size and context, and a
drafter's proposal cost.

``measure_target`` is a generator: it yields ``Step`` items (for progress shown to the person)
and returns the ``Calibration``; use it as ``cal = yield from measure_target(...)``. It feeds
dummy tokens, so it needs no prompt: at the smallest context it times a few pass sizes up to
``MAX_PASS``, then reads more dummy tokens to reach each longer context and times the same
sizes there, and last, while the time budget allows, the sizes between them at the smallest
context. Longer contexts are measured while the model's context allows them and the time
spent stays within ``budget_s`` (a slow machine keeps fewer): how the cost of a wide pass
grows with the context is worth more to the choice than the sizes between the main ones. Every pass is rewound with the target's own rollback, so the
sweep works on every cache kind decoding supports.
"""

from __future__ import annotations

import time
from collections.abc import Generator
from dataclasses import dataclass, replace
from typing import Any

import mlx.core as mx

from app.engine import rollback
from app.engine.calibration import Calibration, new_table, target_key
from app.engine.models import LoadedModel, make_cache

MAX_PASS = 17  # the widest verify pass measured: 16 proposals (DFlash's block) + 1
FIRST_CONTEXT = 16  # tokens in the cache for the first row (a pass needs something before it)
CONTEXTS = (FIRST_CONTEXT, 512, 2048, 4096)
FIRST_SIZES = (1, 2, 3, 4, 5, 6, 7, 8, 9, 11, 13, 15, MAX_PASS)  # at the first context
WIDE_SIZES = (1, 2, 3, 5, 9, MAX_PASS)  # sizes timed at the longer contexts
REPEATS = 2  # each pass timed this many times; the fastest counts (noise only adds time)
# longer contexts are left out once the sweep would take longer than this: a warm-up before a
# reply keeps it short, ``draftpair calibrate`` takes its time
BUDGET_S = 10.0
CALIBRATE_BUDGET_S = 120.0
IDLE_LOAD = 0.5  # runnable programs per CPU below which a table measured while busy is redone
CALIBRATE_REPEATS = 3  # the command takes its time: one more try per pass against noise
CHUNK = 512  # dummy tokens read per step on the way to a longer context


@dataclass(frozen=True)
class Step:
    """Progress of a measurement: ``done`` of ``total`` steps."""

    done: int
    total: int

    @property
    def fraction(self) -> float:
        return min(1.0, self.done / self.total) if self.total else 1.0


def _contexts(limit: int | None) -> list[int]:
    room = (limit - MAX_PASS - 1) if limit else None
    return [c for c in CONTEXTS if room is None or c <= room] or [FIRST_CONTEXT]


def measure_target(target: LoadedModel, *, context_limit: int | None = None,
                   budget_s: float = BUDGET_S, repeats: int = REPEATS,
                   contexts: list[int] | None = None) -> Generator[Step, None, Calibration]:
    """Time the target's passes; yields progress, returns the table (not yet kept).

    The sizes every row has come first, at each context while the budget allows: how a
    pass's cost grows with the context changes the choice far more than the sizes between
    them (interpolated well enough). The first context's in-between sizes are timed last,
    with what the budget has left."""
    started = time.perf_counter()
    ctxs = contexts or _contexts(context_limit)
    extra = [n for n in FIRST_SIZES if n not in WIDE_SIZES]
    reads = [max(0, -(-(c - p) // CHUNK)) for p, c in zip([0, *ctxs], ctxs, strict=False)]
    total = len(WIDE_SIZES) * repeats * len(ctxs) + len(extra) * repeats + sum(reads)
    done = 0
    rb = rollback.for_target(target)
    cache = make_cache(target)
    held = 0  # tokens in the cache
    measured_ctx: list[int] = []
    timed: list[dict[int, float]] = []
    read_ms_per_token: float | None = None  # measured on the last full chunk read
    for ci, ctx in enumerate(ctxs):
        if ci > 0 and _over_budget(started, budget_s, ctx - held, list(WIDE_SIZES),
                                   timed[-1], read_ms_per_token, repeats):
            break
        while held < ctx:
            n = min(CHUNK, ctx - held)
            t0 = time.perf_counter()
            mx.eval(target.model(mx.zeros((1, n), mx.uint32), cache=cache))
            if n == CHUNK:
                read_ms_per_token = (time.perf_counter() - t0) * 1e3 / n
            held += n
            done += 1
            yield Step(done, total)
        times: dict[int, float] = {}
        for _ in range(repeats):
            for n in WIDE_SIZES:
                times[n] = min(times.get(n, float("inf")), _pass_ms(target, rb, cache, n))
                done += 1
                yield Step(done, total)
        measured_ctx.append(ctx)
        timed.append(times)
    del cache
    # the first context's in-between sizes, while time allows (a cache read to it again)
    first = timed[0]
    cache = make_cache(target)
    mx.eval(target.model(mx.zeros((1, measured_ctx[0]), mx.uint32), cache=cache))
    for _ in range(repeats):
        for n in extra:
            if n not in first and _past(started, budget_s, _between(first, n) * repeats):
                done += 1
                continue
            first[n] = min(first.get(n, float("inf")), _pass_ms(target, rb, cache, n))
            done += 1
            yield Step(done, total)
    del cache
    sizes: list[list[int]] = []
    rows: list[list[float]] = []
    for times in timed:
        kept = sorted(times)
        top, row = 0.0, []
        for n in kept:  # a wider pass never costs less (timing noise): a running maximum
            top = max(top, times[n])
            row.append(top)
        sizes.append(kept)
        rows.append(row)
    yield Step(total, total)
    return new_table(target.path, target_key(target.path, target.precision), measured_ctx,
                     sizes, _never_cheaper_later(sizes, rows), time.perf_counter() - started,
                     load=current_load())


def measure_row(target: LoadedModel, cache: list[Any], *, repeats: int = REPEATS
                ) -> Generator[Step, None, tuple[tuple[int, ...], tuple[float, ...]]]:
    """Time the wide sizes' passes on ``cache`` as it is (a reply's own, its prompt read),
    each undone after it: the row of a context the table does not reach. Yields progress,
    returns the sizes and their times (a wider pass never cheaper)."""
    rb = rollback.for_target(target)
    times: dict[int, float] = {}
    total, done = len(WIDE_SIZES) * repeats, 0
    for _ in range(repeats):
        for n in WIDE_SIZES:
            times[n] = min(times.get(n, float("inf")), _pass_ms(target, rb, cache, n))
            done += 1
            yield Step(done, total)
    sizes = tuple(sorted(times))
    row, top = [], 0.0
    for n in sizes:
        top = max(top, times[n])
        row.append(top)
    return sizes, tuple(row)


def with_row(cal: Calibration, context: int, sizes: tuple[int, ...],
             row: tuple[float, ...]) -> Calibration:
    """``cal`` with the row measured at ``context`` (in place of one measured there), the
    shorter contexts' passes held to no more than the longer ones' (``_never_cheaper_later``)."""
    rows = {c: (s, v) for c, s, v in zip(cal.contexts, cal.sizes, cal.verify_ms, strict=True)}
    rows[context] = (tuple(sizes), tuple(row))
    contexts = sorted(rows)
    all_sizes = [list(rows[c][0]) for c in contexts]
    held = _never_cheaper_later(all_sizes, [list(rows[c][1]) for c in contexts])
    return replace(cal, contexts=tuple(contexts), sizes=tuple(tuple(s) for s in all_sizes),
                   verify_ms=tuple(tuple(v) for v in held))


def _never_cheaper_later(sizes: list[list[int]], rows: list[list[float]]) -> list[list[float]]:
    """A pass at a shorter context never costs more than the same pass at a longer one.
    Noise (another program on the CPU) only adds time, so where a shorter context measured
    slower, the longer context's time is the better estimate for it too."""
    out = [list(r) for r in rows]
    for i in range(len(out) - 2, -1, -1):
        later = dict(zip(sizes[i + 1], out[i + 1], strict=True))
        known = sorted(later)
        for j, n in enumerate(sizes[i]):
            lo = max((m for m in known if m <= n), default=known[0])
            hi = min((m for m in known if m >= n), default=known[-1])
            bound = later[lo] if lo == hi else later[lo] + (later[hi] - later[lo]) * (
                (n - lo) / (hi - lo))
            out[i][j] = min(out[i][j], bound)
    return out


def current_load() -> float:
    """How busy the computer was while measuring: runnable programs per CPU (1-minute load
    average; 0 where the system does not say)."""
    import os

    try:
        return os.getloadavg()[0] / (os.cpu_count() or 1)
    except (OSError, AttributeError):
        return 0.0


def _pass_ms(target: LoadedModel, rb: Any, cache: list[Any], n: int) -> float:
    tokens = mx.zeros((n,), mx.uint32)
    t0 = time.perf_counter()
    with rb.verifying(cache):
        out = target.model(tokens[None], cache=cache)
    mx.eval(out)
    ms = (time.perf_counter() - t0) * 1e3
    rb.rewind(cache, tokens, keep=0)
    return ms


def _past(started: float, budget_s: float, more_ms: float) -> bool:
    return time.perf_counter() - started + more_ms / 1e3 > budget_s


def _between(times: dict[int, float], n: int) -> float:
    """A pass of ``n`` tokens estimated from the nearest wider one timed."""
    wider = [m for m in times if m >= n]
    return times[min(wider)] if wider else max(times.values())


def _over_budget(started: float, budget_s: float, to_read: int, plan: list[int],
                 last: dict[int, float], read_ms_per_token: float | None,
                 repeats: int) -> bool:
    """Whether reading ``to_read`` more tokens and timing ``plan`` would pass the budget,
    estimated from the last context's times (a longer context only costs more) and the last
    chunk's reading rate (before one was read: the widest pass's rate, which reads fewer
    tokens at a time and so overestimates)."""
    widest = max(last)
    per_token_ms = read_ms_per_token or last[widest] / widest
    sweep_ms = repeats * sum(last.get(n, last[widest]) for n in plan)
    estimate_s = (to_read * per_token_ms + sweep_ms) / 1e3
    return time.perf_counter() - started + estimate_s > budget_s


def measure_drafter(drafter: Any, widths: list[int]) -> float | None:
    """One drafting step (or block pass) of ``drafter`` in ms, from its own warm-up; None
    for a drafter that runs no model (nothing to measure)."""
    from app.engine.drafters.base import Drafter

    if type(drafter).warmup is Drafter.warmup:
        return None
    drafter.warmup(widths)
    ms = getattr(drafter, "draft_step_ms", None)
    return float(ms) if ms else None


def needs_measuring(drafter: Any) -> bool:
    """Whether the drafter runs a model whose step must be timed."""
    from app.engine.drafters.base import Drafter

    return type(drafter).warmup is not Drafter.warmup
