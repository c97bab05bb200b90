"""What the runtime must do for a pair: undo rejected guesses, have the drafter's code."""

from __future__ import annotations

import importlib.util

from app import kinds
from app.checkpoints.inspect import CheckpointInfo
from app.checkpoints.pairing.report import BLOCKER, WARNING, FindingList
from app.checkpoints.rewind_rules import config_problem


def rollback_findings(
    t: CheckpointInfo, kind: str, context: int, out: FindingList, d: CheckpointInfo | None = None
) -> None:
    """The engine rewinds KV, sliding-window and recurrent caches exactly; only the caches
    ``rewind_problem`` names stop speculation (the session gives the same verdict)."""
    if t.config is None:
        return
    problem = rewind_problem(t.config)
    if problem:
        out.add(
            "cache.not_trimmable",
            BLOCKER if kinds.get(kind).proposes else WARNING,
            "This target cannot undo rejected guesses, so speculative decoding cannot run on it.",
            problem,
        )
    if d is not None and d.config is not None and kinds.get(kind).draft_is_lm:
        problem = rewind_problem(d.config)
        if problem:
            out.add(
                "cache.draft_not_trimmable",
                BLOCKER,
                "The draft cannot undo rejected guesses, so it cannot be used as a draft.",
                problem,
            )


def rewind_problem(config: dict) -> str | None:
    """Why rejected drafts could not be undone on this checkpoint's cache (None if they can)."""
    return config_problem(config)


def runtime_findings(kind: str, out: FindingList) -> None:
    """Whether this build has the engine code the kind names (looked up, never imported:
    the checkpoint layer only asks whether the runtime has it)."""
    plugin = kinds.get(kind)
    module = plugin.engine_module()
    if not module:
        return
    try:
        found = importlib.util.find_spec(module) is not None
    except (ImportError, ValueError):
        found = False
    if not found:
        out.add(
            "kind.runtime_missing",
            BLOCKER,
            f"This version of DraftPair cannot run {plugin.technical} drafting yet.",
            f"module {module} not found",
        )
