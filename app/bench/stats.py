"""The fixed rules the benchmark judges by (decided before any run, not tuned to results)."""

from __future__ import annotations

import statistics
from collections.abc import Sequence
from dataclasses import dataclass

FASTER = "faster"
SLOWER = "slower"
UNCLEAR = "no clear difference"
TOO_FEW = "too few runs"
MIN_RUNS = 2  # below this a side's spread is unknown: no verdict, no recommendation


def verdict(on: Sequence[float], off: Sequence[float]) -> str:
    """All ``on`` rates above all ``off`` rates -> faster; all below -> slower; else unclear.

    Rates are decode tokens/s. With fewer than MIN_RUNS runs a side nothing can be said:
    TOO_FEW (the speedup is still reported, as a measurement, not a verdict).
    """
    if not on or not off:
        return UNCLEAR
    if min(len(on), len(off)) < MIN_RUNS:
        return TOO_FEW
    if min(on) > max(off):
        return FASTER
    if max(on) < min(off):
        return SLOWER
    return UNCLEAR


def median(values: Sequence[float]) -> float | None:
    vals = [v for v in values if v is not None]
    return statistics.median(vals) if vals else None


@dataclass(frozen=True)
class Identity:
    """Token-by-token comparison of two outputs (``first_divergence`` None when identical)."""

    first_divergence: int | None
    len_a: int
    len_b: int

    @property
    def identical(self) -> bool:
        return self.first_divergence is None

    def describe(self) -> str:
        if self.identical:
            return f"identical ({self.len_a} tokens)"
        return f"diverges at token {self.first_divergence} (lengths {self.len_a} / {self.len_b})"

    def to_dict(self) -> dict[str, object]:
        return {
            "identical": self.identical,
            "first_divergence": self.first_divergence,
            "len_a": self.len_a,
            "len_b": self.len_b,
        }


def compare_tokens(a: Sequence[object], b: Sequence[object]) -> Identity:
    """First index where ``a`` and ``b`` differ (token ids, or the characters of two texts);
    a length difference counts as a divergence at the end of the shorter one."""
    for i, (x, y) in enumerate(zip(a, b, strict=False)):
        if x != y:
            return Identity(i, len(a), len(b))
    if len(a) != len(b):
        return Identity(min(len(a), len(b)), len(a), len(b))
    return Identity(None, len(a), len(b))
