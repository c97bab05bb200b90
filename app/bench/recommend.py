"""From a report, which drafter to use for each kind of task."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from app import kinds
from app.bench.stats import FASTER, MIN_RUNS, SLOWER, TOO_FEW, median


@dataclass(frozen=True)
class Recommendation:
    task_kind: str
    draft_kind: str  # "none" when no drafter reliably paid
    width: int
    speedup: float | None  # median over the kind's tasks (None for "none")
    reason: str


CLI_MORE_RUNS = f"measure with --runs {MIN_RUNS + 1} or more"


def recommend_drafters(
    report: Any, *, temperature: float = 0.0, more_runs: str = CLI_MORE_RUNS
) -> dict[str, Recommendation]:
    """Task kind -> the DraftPair drafter with the best median speedup among those judged
    "faster" on every task of that kind at ``temperature``; "none" otherwise (a drafter that
    is only sometimes faster is not worth its risk, and a single run says nothing).

    Args:
        report: a ``BenchReport`` or its dict.
        more_runs: how to get enough runs, in the words of the caller's controls (the CLI's
            flag by default; the app speaks of its Runs box).
    """
    summary = report.summary if hasattr(report, "summary") else report.get("summary", {})
    rows = [
        r for r in summary.get("rows", [])
        if r["engine"] == "draftpair" and r["condition"] != "off"
        and r["temperature"] == temperature
    ]
    by_kind: dict[str, dict[str, list[dict[str, Any]]]] = {}
    for r in rows:
        by_kind.setdefault(r["task_kind"], {}).setdefault(r["condition"], []).append(r)
    out: dict[str, Recommendation] = {}
    for task_kind, per_drafter in by_kind.items():
        if any(r["verdict"] == TOO_FEW for rs in per_drafter.values() for r in rs):
            out[task_kind] = Recommendation(
                task_kind, kinds.OFF, 0, None,
                f"too few runs to recommend a drafter ({more_runs})",
            )
            continue
        best: Recommendation | None = None
        notes = []
        for drafter, rs in per_drafter.items():
            speed = median([r["speedup"] for r in rs if r["speedup"] is not None])
            if all(r["verdict"] == FASTER for r in rs) and speed is not None:
                if best is None or (best.speedup or 0) < speed:
                    best = Recommendation(
                        task_kind, drafter, int(rs[0]["width"]), speed,
                        f"{drafter} was faster on every run ({speed:.2f}x median)",
                    )
            else:
                slower = any(r["verdict"] == SLOWER for r in rs)
                notes.append(f"{drafter} {'was slower' if slower else 'did not clearly pay'}")
        out[task_kind] = best or Recommendation(
            task_kind, kinds.OFF, 0, None,
            "; ".join(notes) + ": decode without speculation" if notes
            else "no drafter was measured",
        )
    return out
