"""How speculation is measured against plain decoding: the one set of rules the benchmark and
Compare both follow, so a figure means the same in either.

- Warm-up: each condition runs once first, ``WARMUP_TOKENS`` long, and is never counted
  (allocations and first-use costs of every verify width are paid there).
- Order: the repeats interleave the conditions and reverse their order every other repeat
  (A B, B A, A B, ...), so slow drift of the machine hits every condition alike and each
  repeat's ratio compares neighbours in time.
- Speedup: the median of the per-repeat ratios of decode rates (a repeat's runs ran back to
  back, so drift cancels in each ratio), with the lowest and highest ratio as its spread.
- Contention: other processes' CPU load during a measurement, in cores, from
  ``app.bench.contention`` (the one definition), judged against one threshold.
"""

from __future__ import annotations

import statistics
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Generic, TypeVar

from app.bench.contention import (
    DEFAULT_THRESHOLD_CORES,
    ContentionSampler,
    Reading,
    RunContention,
    judge,
    other_load,
    read_now,
)

WARMUP_TOKENS = 8

C = TypeVar("C")


@dataclass(frozen=True)
class PlannedRun(Generic[C]):
    condition: C
    repeat: int  # 0-based; -1 for a warm-up

    @property
    def warmup(self) -> bool:
        return self.repeat < 0


def order(conditions: Sequence[C], repeat: int) -> list[C]:
    """The conditions in the order repeat ``repeat`` runs them (reversed every other one)."""
    return list(conditions) if repeat % 2 == 0 else list(reversed(conditions))


def plan(conditions: Sequence[C], runs: int, *, warmup: bool = True) -> list[PlannedRun[C]]:
    """A warm-up of each condition (when ``warmup``), then ``runs`` repeats in ``order``."""
    out = [PlannedRun(c, -1) for c in conditions] if warmup else []
    for rep in range(runs):
        out += [PlannedRun(c, rep) for c in order(conditions, rep)]
    return out


@dataclass(frozen=True)
class Speedup:
    ratios: tuple[float, ...]  # on / off per repeat, in repeat order
    median: float
    low: float
    high: float

    @property
    def pairs(self) -> int:
        return len(self.ratios)


def speedup(on: Sequence[float], off: Sequence[float]) -> Speedup | None:
    """Per-repeat ratios of two aligned lists of rates (``on[i]`` and ``off[i]`` ran in the
    same repeat); pairs with a rate of 0 or less are no measurement. None without a pair."""
    if len(on) != len(off):
        raise ValueError("speedup() takes one rate per repeat on each side")
    ratios = tuple(a / b for a, b in zip(on, off, strict=True) if a > 0 and b > 0)
    if not ratios:
        return None
    return Speedup(ratios, statistics.median(ratios), min(ratios), max(ratios))


def paired_speedup(on: Sequence[float], off: Sequence[float]) -> float | None:
    """The median of the per-repeat ratios ``on[i] / off[i]``. With unequal counts (a
    cancelled run) the repeats do not pair up: the ratio of the medians."""
    if not on or not off:
        return None
    if len(on) == len(off):
        s = speedup(on, off)
        return s.median if s is not None else None
    base = statistics.median(off)
    return statistics.median(on) / base if base > 0 else None


class ContentionMeter:
    """Other processes' CPU load between ``start`` and ``stop``, in cores, flagged above
    ``threshold_cores``. With a running ``ContentionSampler`` (the bench), a busy sampled
    window that overlaps the measurement flags it too, even when the mean stays low."""

    def __init__(self, *, threshold_cores: float = DEFAULT_THRESHOLD_CORES,
                 sampler: ContentionSampler | None = None):
        self.threshold = sampler.threshold if sampler is not None else threshold_cores
        self.sampler = sampler
        self._start: Reading | None = None

    def start(self) -> None:
        self._start = read_now()

    def stop(self) -> RunContention:
        """The load since ``start``."""
        if self._start is None:
            raise RuntimeError("ContentionMeter.stop() without start()")
        start, end = self._start, read_now()
        self._start = None
        if self.sampler is not None:
            return self.sampler.assess(start, end)
        return judge(other_load(start, end), [], start.t, end.t, self.threshold)
