"""Conditions measured against the alternative they replace, not only against plain decoding.

- A row with trees (``Condition.trees`` on or flat) against the same drafter's chains.
- The auto kind against the best single kind on the same task and temperature (the single
  kind with the highest speedup over plain there): what choosing for the person costs, or
  gains, against a person who knew which kind to pick.

Each is the same paired comparison as against plain (``summary.compare``: the median of the
per-repeat ratios of decode rates, runs of one repeat back to back, and the verdict rule).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from app import kinds
from app.bench.records import OFF, Condition, RunRecord

Cells = dict[tuple[str, float, str], list[RunRecord]]
Compare = Callable[[Sequence[RunRecord], Sequence[RunRecord]], dict[str, Any]]


def _chain_of(cond: Condition, conditions: Sequence[Condition]) -> Condition | None:
    return next((c for c in conditions if c.trees == "off" and c.engine == cond.engine
                 and c.draft_kind == cond.draft_kind and c.width == cond.width
                 and c.lookup_assist == cond.lookup_assist), None)


def _singles(conditions: Sequence[Condition]) -> list[Condition]:
    """The conditions that are one drafting kind on its own (chains, this engine)."""
    out = []
    for c in conditions:
        if c.engine != "draftpair" or c.trees != "off" or c.name == OFF:
            continue
        plugin = kinds.find(c.draft_kind)
        if plugin is not None and plugin.proposes and not plugin.combines:
            out.append(c)
    return out


def relative_rows(cells: Cells, conditions: Sequence[Condition], rows: Sequence[dict[str, Any]],
                  compare: Compare) -> list[dict[str, Any]]:
    """One row per (task, temperature, condition) measured against what it replaces."""
    out: list[dict[str, Any]] = []
    singles = _singles(conditions)
    speedups = {(r["task_id"], r["temperature"], r["condition"]): r["speedup"] for r in rows}
    for task_id, temp in sorted({(k[0], k[1]) for k in cells}, key=lambda k: (k[0], k[1])):
        for cond in conditions:
            mine = cells.get((task_id, temp, cond.name), [])
            if not mine:
                continue
            against: Condition | None = None
            if cond.trees != "off":
                against = _chain_of(cond, conditions)
            else:
                plugin = kinds.find(cond.draft_kind)
                if plugin is not None and plugin.combines:
                    measured = [(speedups.get((task_id, temp, c.name)), c) for c in singles]
                    ranked = [(s, c) for s, c in measured if s is not None]
                    against = max(ranked, key=lambda sc: sc[0])[1] if ranked else None
            other = cells.get((task_id, temp, against.name), []) if against else []
            if against is None or not other:
                continue
            out.append({"task_id": task_id, "temperature": temp, "condition": cond.name,
                        "against": against.name, **compare(mine, other)})
    return out
