"""Compare: the off/on run plan and the result card's numbers (plain Python, no Qt).

The measurement rules are the benchmark's (``app.bench.measure``): a warm-up of each mode
first and never counted, then off/on pairs in alternating order (off on, on off, ...), the
median of the per-pair ratios, and the result flagged when other programs competed for the
CPU while it ran (in cores, the bench's definition and threshold).
"""

from __future__ import annotations

import statistics
from dataclasses import dataclass, field
from typing import Any

from app.bench import measure
from app.bench.contention import RunContention
from app.bench.stats import compare_tokens
from app.remote.results import RemoteTimings
from app.ui.format import copied_accepted

MODES = ("off", "on")


def plan(runs: int, *, warmup: bool = True) -> list[measure.PlannedRun[str]]:
    """Compare's runs: the two modes under the benchmark's plan."""
    return measure.plan(MODES, runs, warmup=warmup)


@dataclass
class RunResult:
    mode: str
    repeat: int
    done: Any  # DoneEvent, or RemoteDone for an endpoint's run

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
    kind: str | None  # None: an endpoint that does not say
    fallback: str | None
    other_cores: float | None = None  # CPU cores other programs kept busy (mean); None: unknown
    contention_flagged: bool = False  # above the benchmark's threshold: the numbers may be noisy
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


def summarize(
    results: list[RunResult], *, draft_weights_bytes: int = 0,
    contention: RunContention | None = None,
) -> CompareSummary | None:
    """The result card from measured (non-warm-up) runs; None until one full off/on pair."""
    off = {r.repeat: r for r in results if r.mode == "off" and r.done.finish_reason != "error"}
    on = {r.repeat: r for r in results if r.mode == "on" and r.done.finish_reason != "error"}
    keys = [k for k in sorted(set(off) & set(on)) if off[k].tok_s > 0 and on[k].tok_s > 0]
    speed = measure.speedup([on[k].tok_s for k in keys], [off[k].tok_s for k in keys])
    if speed is None:
        return None
    first_off, first_on = off[keys[0]].done, on[keys[0]].done
    compared_by = "tokens" if first_off.token_ids and first_on.token_ids else "text"
    if compared_by == "tokens":
        diff = compare_tokens(first_off.token_ids, first_on.token_ids).first_divergence
        compared = min(len(first_off.token_ids), len(first_on.token_ids))
    else:  # character index of the first difference
        diff = compare_tokens(first_off.text, first_on.text).first_divergence
        compared = min(len(first_off.text), len(first_on.text))
    on_peaks = [on[k].done.timings.peak_memory_bytes for k in keys]
    on_remote = first_on.timings if isinstance(first_on.timings, RemoteTimings) else None
    remote = (on_remote.endpoint or None) if on_remote is not None else None
    # another process's (or machine's) memory does not compare with this one's
    mem = None if on_remote is not None or None in on_peaks else int(
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
        pairs=speed.pairs,
        speedup_median=speed.median,
        speedup_min=speed.low,
        speedup_max=speed.high,
        speedups=list(speed.ratios),
        off_tok_s=statistics.median(off[k].tok_s for k in keys),
        on_tok_s=statistics.median(on[k].tok_s for k in keys),
        identical=diff is None,
        first_difference=diff,
        compared_tokens=compared,
        extra_memory_bytes=mem,
        draft_weights_bytes=draft_weights_bytes,
        accepted=accepted,
        proposed=proposed,
        accept_len_mean=None if accepted is None or rounds is None
        else (accepted / rounds if rounds else 0.0),
        kind=on_t[0].draft_kind,
        fallback=on_t[0].fallback,
        other_cores=contention.mean_other_cores if contention is not None else None,
        contention_flagged=contention.flagged if contention is not None else False,
        notes=notes,
        compared_by=compared_by,
        remote=remote,
        rate_source=on_remote.rate_source if on_remote is not None else "engine",
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
