"""What the runtime must do for a pair: undo rejected guesses, have the drafter's code."""

from __future__ import annotations

import importlib.util

from app.checkpoints.inspect import CheckpointInfo, cache_rollback
from app.checkpoints.pairing.report import BLOCKER, WARNING, FindingList

# Looked up, never imported: the checkpoint layer only asks whether the runtime has them.
RUNTIME_MODULES = {"mtp": "app.engine.drafters.mtp", "dflash": "app.engine.drafters.dflash"}


def rollback_findings(
    t: CheckpointInfo, kind: str, context: int, out: FindingList, d: CheckpointInfo | None = None
) -> None:
    if t.config is None:
        return
    rb = cache_rollback(t.config, context)
    if rb.reason:
        hard = kind in ("full-model", "prompt-lookup")
        if rb.recurrent:
            sev = BLOCKER if hard else WARNING
            msg = (
                "This target cannot undo rejected guesses, so speculative decoding cannot run on it."
                if hard
                else "This target cannot simply undo rejected guesses; the drafter must replay its state, which costs speed."
            )
            out.add("cache.not_trimmable", sev, msg, rb.reason)
        elif rb.sliding_only:
            out.add(
                "cache.sliding_window",
                BLOCKER if hard else WARNING,
                f"This target only remembers the last {rb.sliding_window} tokens and cannot undo guesses beyond that.",
                rb.reason,
            )
        elif rb.sliding_window:
            out.add(
                "cache.sliding_window",
                WARNING,
                f"Speculation will stop once the conversation passes {rb.sliding_window} tokens.",
                rb.reason,
            )
    if d is not None and d.config is not None and kind == "full-model":
        drb = cache_rollback(d.config, context)
        if not drb.trimmable:
            out.add(
                "cache.draft_not_trimmable",
                BLOCKER,
                "The draft cannot undo rejected guesses, so it cannot be used as a draft.",
                drb.reason,
            )


def runtime_findings(kind: str, out: FindingList) -> None:
    module = RUNTIME_MODULES.get(kind)
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
            f"This version of DraftPair cannot run {kind.upper() if kind == 'mtp' else 'DFlash'} drafting yet.",
            f"module {module} not found",
        )
