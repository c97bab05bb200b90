"""Whether the pair fits in memory, as findings."""

from __future__ import annotations

from app.checkpoints.memory_estimate import MemoryEstimate, format_bytes
from app.checkpoints.pairing.report import BLOCKER, NOTE, WARNING, FindingList


def memory_findings(m: MemoryEstimate, out: FindingList) -> None:
    figures = "; ".join(m.lines())
    if m.budget and m.total > m.budget:
        out.add(
            "memory.over_budget",
            BLOCKER,
            f"This needs about {format_bytes(m.total)} of memory but only {format_bytes(m.budget)} is available to models here.",
            figures,
        )
    elif m.available is not None and m.total > m.available:
        out.add(
            "memory.tight",
            WARNING,
            f"This needs about {format_bytes(m.total)}, more than is free right now ({format_bytes(m.available)}); close other apps first.",
            figures,
        )
    else:
        out.add(
            "memory.fits",
            NOTE,
            f"It fits in memory: about {format_bytes(m.total)} of {format_bytes(m.budget)}.",
            figures,
        )
