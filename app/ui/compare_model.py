"""Compare: the off/on run plan and the result card's numbers (plain Python, no Qt).

Measurement rules: ratios within one session, alternating A/B (off, on, off, on…),
medians over repeats, a short warm-up of each mode first and never counted, and the result
flagged when other programs competed for the CPU while it ran.
"""

from __future__ import annotations

import statistics
from dataclasses import dataclass, field
from typing import Any

from app.ui.format import copied_accepted

WARMUP_TOKENS = 8


@dataclass(frozen=True)
class PlannedRun:
    mode: str  # "off" | "on"
    repeat: int  # 0-based; -1 for the warm-up
    warmup: bool = False


def plan(runs: int, *, warmup: bool = True) -> list[PlannedRun]:
    out = []
    if warmup:
        out += [PlannedRun("off", -1, True), PlannedRun("on", -1, True)]
    for i in range(runs):
        out += [PlannedRun("off", i), PlannedRun("on", i)]
    return out


@dataclass
class RunResult:
    mode: str
    repeat: int
    done: Any  # DoneEvent

    @property
    def tok_s(self) -> float:  # a remote endpoint's unknown rate counts as no measurement
        return float(self.done.timings.predicted_per_second or 0.0)


@dataclass
class CompareSummary:
    pairs: int
    speedup_median: float
    speedup_min: float
    speedup_max: float
    speedups: list[float]
    off_tok_s: float  # medians
    on_tok_s: float
    identical: bool
    first_difference: int | None  # token index where the texts first differ
    compared_tokens: int
    extra_memory_bytes: int | None  # median peak MLX memory on - off; None: unknown (remote)
    draft_weights_bytes: int
    accepted: int | None  # None: the remote endpoint does not report draft counts
    proposed: int | None
    accept_len_mean: float | None
    kind: str
    fallback: str | None
    cpu_contention: float | None = None  # share of the CPU other programs used
    notes: list[str] = field(default_factory=list)
    compared_by: str = "tokens"  # "text" when a side reports no token ids
    remote: str | None = None  # the endpoint of the "on" side, if remote
    rate_source: str = "engine"  # of the "on" rate: engine | server | client (arrival times)
    copied: int = 0  # of ``accepted``, tokens prompt lookup copied from the context

    @property
    def acceptance(self) -> float | None:
        if self.accepted is None or self.proposed is None:
            return None
        return self.accepted / self.proposed if self.proposed else 0.0

    def to_dict(self) -> dict[str, Any]:
        from dataclasses import asdict

        d = asdict(self)
        d["acceptance"] = self.acceptance
        return d


def first_difference(a: tuple[int, ...], b: tuple[int, ...]) -> int | None:
    for i, (x, y) in enumerate(zip(a, b, strict=False)):
        if x != y:
            return i
    if len(a) != len(b):
        return min(len(a), len(b))
    return None


def summarize(
    results: list[RunResult], *, draft_weights_bytes: int = 0, cpu_contention: float | None = None
) -> CompareSummary | None:
    """The result card from measured (non-warm-up) runs; None until one full off/on pair."""
    off = {r.repeat: r for r in results if r.mode == "off" and r.done.finish_reason != "error"}
    on = {r.repeat: r for r in results if r.mode == "on" and r.done.finish_reason != "error"}
    keys = sorted(set(off) & set(on))
    keys = [k for k in keys if off[k].tok_s > 0 and on[k].tok_s > 0]
    if not keys:
        return None
    speedups = [on[k].tok_s / off[k].tok_s for k in keys]
    first_off, first_on = off[keys[0]].done, on[keys[0]].done
    compared_by = "tokens" if first_off.token_ids and first_on.token_ids else "text"
    if compared_by == "tokens":
        diff = first_difference(tuple(first_off.token_ids), tuple(first_on.token_ids))
        compared = min(len(first_off.token_ids), len(first_on.token_ids))
    else:  # character index of the first difference
        diff = first_difference(tuple(first_off.text), tuple(first_on.text))
        compared = min(len(first_off.text), len(first_on.text))
    on_peaks = [on[k].done.timings.peak_memory_bytes for k in keys]
    remote = getattr(first_on.timings, "endpoint", None) or None
    # another process's (or machine's) memory does not compare with this one's
    mem = None if remote or None in on_peaks else int(
        statistics.median(on_peaks)
        - statistics.median(off[k].done.timings.peak_memory_bytes for k in keys)
    )
    on_t = [on[k].done.timings for k in keys]
    accepted = _total(t.draft_n_accepted for t in on_t)
    proposed = _total(t.draft_n for t in on_t)
    rounds = _total(t.draft_rounds for t in on_t)
    copied = sum(copied_accepted(on[k].done) for k in keys)
    notes = []
    if any(r.done.finish_reason == "cancelled" for r in results):
        notes.append("Some runs were stopped early; their speed covers fewer tokens.")
    lengths = {len(off[k].done.token_ids) for k in keys} | {len(on[k].done.token_ids) for k in keys}
    if len(lengths) > 1:
        notes.append("Runs produced different numbers of tokens.")
    return CompareSummary(
        pairs=len(keys),
        speedup_median=statistics.median(speedups),
        speedup_min=min(speedups),
        speedup_max=max(speedups),
        speedups=speedups,
        off_tok_s=statistics.median(off[k].tok_s for k in keys),
        on_tok_s=statistics.median(on[k].tok_s for k in keys),
        identical=diff is None,
        first_difference=diff,
        compared_tokens=compared,
        extra_memory_bytes=mem,
        draft_weights_bytes=draft_weights_bytes,
        accepted=accepted,
        proposed=proposed,
        accept_len_mean=(accepted / rounds if rounds else 0.0) if None not in (accepted, rounds)
        else None,
        kind=on_t[0].draft_kind,
        fallback=on_t[0].fallback,
        cpu_contention=cpu_contention,
        notes=notes,
        compared_by=compared_by,
        remote=remote,
        rate_source=getattr(on_t[0], "rate_source", "engine"),
        copied=copied,
    )


def _total(values: Any) -> int | None:
    """Sum, or None when any value is unknown (a remote endpoint that does not report it)."""
    out = 0
    for v in values:
        if v is None:
            return None
        out += v
    return out


class CpuMeter:
    """Share of the machine's CPU used by other processes between ``start`` and ``stop``."""

    def __init__(self) -> None:
        import psutil

        self._psutil = psutil
        self._proc = psutil.Process()
        self._t0: tuple[float, float, float] | None = None

    def _now(self) -> tuple[float, float, float]:
        import time

        sys_t = self._psutil.cpu_times()
        busy = sum(sys_t) - getattr(sys_t, "idle", 0.0) - getattr(sys_t, "iowait", 0.0)
        own = sum(self._proc.cpu_times()[:2])
        return time.monotonic(), busy, own

    def start(self) -> None:
        self._t0 = self._now()

    def stop(self) -> float | None:
        if self._t0 is None:
            return None
        t1 = self._now()
        wall = t1[0] - self._t0[0]
        if wall <= 0:
            return None
        cores = self._psutil.cpu_count() or 1
        others = (t1[1] - self._t0[1]) - (t1[2] - self._t0[2])
        return max(0.0, min(1.0, others / (wall * cores)))
