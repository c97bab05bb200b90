"""Rank the local checkpoints that pair with a target; one sentence per exclusion."""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

from app import kinds
from app.checkpoints.inspect import (
    KIND_UNSUPPORTED,
    CheckpointInfo,
    inspect_checkpoint,
)
from app.checkpoints.memory_estimate import Budget, memory_budget
from app.checkpoints.pairing.checker import check
from app.checkpoints.pairing.checkpoint import as_info
from app.checkpoints.pairing.report import (
    VERDICT_FAILS,
    VERDICT_WARNINGS,
    VERDICT_WORKS,
    PairingReport,
)

if TYPE_CHECKING:
    from app.checkpoints.store import Store, StoreEntry


@dataclass(frozen=True)
class Suggestion:
    name: str
    path: Path | None
    kind: str
    report: PairingReport
    reason: str  # one sentence: why it is ranked where it is
    score: float = 0.0


@dataclass(frozen=True)
class Exclusion:
    name: str
    path: Path
    reason: str  # one plain sentence


@dataclass(frozen=True)
class Suggestions:
    target: str
    ranked: tuple[Suggestion, ...]
    excluded: tuple[Exclusion, ...]
    no_model_options: tuple[Suggestion, ...] = field(default=())  # kinds with no draft folder


def _builtin_note(path: Path) -> str | None:
    """A shipped model's own line on what it is (e.g. a drafter trained for the demo)."""
    from app.checkpoints import builtins

    b = builtins.shipped_as(path)
    return b.note if b is not None else None


def _score(kind: str, report: PairingReport, ratio: float | None) -> float:
    s = 0.0 if report.verdict == VERDICT_WORKS else -10.0
    s += kinds.get(kind).suggest_bonus
    if ratio:
        s -= abs(math.log(ratio / 0.08))  # drafts about 1/12 of the target tend to pay best
    return s


def suggest_drafts(
    target: str | Path | CheckpointInfo,
    *,
    store: Store | None = None,
    context: int | None = None,
    budget: Budget | None = None,
    entries: list[StoreEntry] | None = None,
) -> Suggestions:
    """Rank local checkpoints that pair with ``target``; explain each exclusion in one sentence."""
    t = as_info(target)
    budget = budget or memory_budget()
    if entries is None:
        if store is None:
            from app.checkpoints.store import Store

            store = Store()
        entries = store.list()
    ranked: list[Suggestion] = []
    excluded: list[Exclusion] = []
    t_path = t.path.resolve() if t.path.exists() else t.path
    for e in entries:
        p = Path(e.path)
        if (p.resolve() if p.exists() else p) == t_path:
            excluded.append(Exclusion(e.name, p, "This is the target itself."))
            continue
        info = inspect_checkpoint(p)  # store listings skip tokenizer files; pairing needs them
        if info.kind == KIND_UNSUPPORTED:
            excluded.append(
                Exclusion(e.name, p, info.unsupported_reason or "DraftPair cannot use it.")
            )
            continue
        plugin = kinds.for_folder(info.config or {})
        if plugin is None:
            excluded.append(Exclusion(e.name, p, "No draft kind of this DraftPair reads it."))
            continue
        kind = plugin.name
        report = check(t, info, kind=kind, context=context, budget=budget)
        if report.verdict == VERDICT_FAILS:
            excluded.append(Exclusion(e.name, p, report.blockers[0].message))
            continue
        ratio = (info.param_count / t.param_count) if info.param_count and t.param_count else None
        if ratio is not None and ratio >= 1:
            excluded.append(
                Exclusion(
                    e.name, p, "It is not smaller than the target, so it cannot make it faster."
                )
            )
            continue
        note = _builtin_note(p)
        if note:
            reason = note
        else:
            reason = plugin.folder_reason(ratio)
        if report.verdict == VERDICT_WARNINGS:
            reason += f" Warning: {report.warnings[0].message}"
        ranked.append(Suggestion(e.name, p, kind, report, reason, _score(kind, report, ratio)))
    ranked.sort(key=lambda s: -s.score)
    options: list[Suggestion] = []
    if t.config is not None:
        for plugin in kinds.drafting():
            why = None if plugin.needs_draft_folder else plugin.offer(t)
            if why is None:
                continue
            label = f"{plugin.label} (no draft model)"  # the name the pickers show
            report = check(t, None, kind=plugin.name, context=context, budget=budget)
            options.append(Suggestion(label, None, plugin.name, report,
                                      why if report.works else report.summary()))
    return Suggestions(str(t.path), tuple(ranked), tuple(excluded), tuple(options))
