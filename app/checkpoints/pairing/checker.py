"""The pairing check: will this target + draft (or drafter kind) work, and why not.

Reads config, tokenizer files and safetensors headers only. The checks themselves live beside
this file, one concern each: ``checkpoint`` (one model alone), ``tokenizers``, ``runtime``
(rollback, drafter code), ``fit`` (memory); each draft kind's own findings come from its
plugin (``app.kinds``), which may keep them beside these (``full_model``, ``mtp``, ``dflash``).
"""

from __future__ import annotations

import time
from pathlib import Path

from app import kinds
from app.checkpoints.inspect import CheckpointInfo
from app.checkpoints.memory_estimate import Budget, estimate_memory
from app.checkpoints.pairing.checkpoint import (
    as_info,
    model_findings,
    options_note,
    target_findings,
)
from app.checkpoints.pairing.fit import memory_findings
from app.checkpoints.pairing.report import (
    BLOCKER,
    DEFAULT_CONTEXT,
    VERDICT_FAILS,
    WARNING,
    Finding,
    FindingList,
    PairingReport,
    normalize_kind,
    verdict_of,
)
from app.checkpoints.pairing.runtime import rollback_findings, runtime_findings


def check(
    target: str | Path | CheckpointInfo,
    draft: str | Path | CheckpointInfo | None = None,
    kind: str | None = None,
    context: int | None = None,
    *,
    width: int | None = None,
    budget: Budget | None = None,
) -> PairingReport:
    """Judge a pairing from config, tokenizer files and safetensors headers (no weights loaded).

    ``context`` defaults to min(4096, the target's trained context).
    Raises ValueError only for an unknown ``kind`` name; anything odd in the files becomes a
    finding, never an exception.
    """
    start = time.perf_counter()
    kind = normalize_kind(kind)
    try:
        return _check(target, draft, kind, context, width=width, budget=budget, start=start)
    except Exception as exc:  # noqa: BLE001 - a settings file we did not foresee
        finding = Finding(
            "check.failed",
            BLOCKER,
            "DraftPair could not make sense of these model files, so it cannot vouch for them.",
            f"{type(exc).__name__}: {exc}",
        )
        name = lambda x: str(x.path if isinstance(x, CheckpointInfo) else x)  # noqa: E731
        return PairingReport(
            target=name(target),
            draft=name(draft) if draft is not None else None,
            kind=kind or (_folder_kind(None) if draft is not None else kinds.OFF),
            context=int(context or DEFAULT_CONTEXT),
            verdict=VERDICT_FAILS,
            findings=(finding,),
            elapsed_ms=(time.perf_counter() - start) * 1000,
        )


def _check(target, draft, kind, context, *, width, budget, start) -> PairingReport:
    t = as_info(target)
    if context is None:
        context = min(DEFAULT_CONTEXT, t.context_length or DEFAULT_CONTEXT)
    context = max(int(context), 1)
    d = as_info(draft) if draft is not None else None
    if kind is None:
        kind = _folder_kind(d.config) if d is not None else kinds.OFF
    out = FindingList()
    t_ok = model_findings(t, "target", out)
    if t_ok:
        target_findings(t, out)
    d_ok = _draft_findings(d, kind, out)
    runtime_findings(kind, out)
    memory = None
    if t_ok and t.config is not None:
        _pair_findings(t, d, d_ok, kind, context, out)
        if not out.has_blocker("target."):
            memory = estimate_memory(
                t, d if d_ok else None, context=context, draft_kind=kind, width=width, budget=budget
            )
            memory_findings(memory, out)
    findings = tuple(out.items)
    return PairingReport(
        target=str(t.path),
        draft=str(d.path) if d is not None else None,
        kind=kind,
        context=context,
        verdict=verdict_of(findings),
        findings=findings,
        memory=memory,
        elapsed_ms=(time.perf_counter() - start) * 1000,
    )


def _folder_kind(config: dict | None) -> str:
    """The kind a draft folder is for, from its config (the catch-all kind when unreadable)."""
    plugin = kinds.for_folder(config or {}) or kinds.for_folder({})
    assert plugin is not None, "no draft kind takes a draft folder"
    return plugin.name


def _draft_findings(d: CheckpointInfo | None, kind: str, out: FindingList) -> bool:
    """Whether a draft folder was given as the kind wants; True when the draft can be judged."""
    needs_folder = kinds.get(kind).needs_draft_folder
    if d is None:
        if needs_folder:
            out.add(
                "kind.needs_draft",
                BLOCKER,
                f"The {kind} mode needs a draft model.",
                f"kind={kind}, no draft given",
            )
        return False
    if not needs_folder:
        out.add(
            "kind.no_draft_model",
            BLOCKER,
            f"The {kind} mode does not use a draft model; leave the draft out.",
            f"kind={kind}, draft={d.path}",
        )
        return False
    return model_findings(d, "draft", out)


def _pair_findings(
    t: CheckpointInfo,
    d: CheckpointInfo | None,
    d_ok: bool,
    kind: str,
    context: int,
    out: FindingList,
) -> None:
    """The checks that need a readable target: context, rollback, then the kind's own."""
    if t.context_length and context > t.context_length:
        out.add(
            "context.too_long",
            WARNING,
            f"The target was trained for at most {t.context_length} tokens of context.",
            f"requested context {context}",
        )
    plugin = kinds.get(kind)
    if plugin.proposes or d is not None:
        rollback_findings(t, kind, context, out, d if d_ok else None)
    plugin.target_findings(t, out)
    if not plugin.proposes and d is None and not out.has_blocker("target."):
        options_note(t, context, out)
    if d is None or not d_ok or d.config is None:
        return
    if d.path.resolve() == t.path.resolve():
        out.add(
            "draft.same_as_target",
            WARNING,
            "The draft is the target itself, which can never be faster.",
            str(d.path),
        )
    plugin.draft_findings(t, d, out)
