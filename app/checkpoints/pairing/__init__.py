"""The pairing check: will this target + draft (or drafter kind) work, and why not.

Public API:
    check(target, draft=None, kind=None, context=None, *, width=None, budget=None) -> PairingReport
        target/draft: a folder path or a CheckpointInfo. kind: a registered draft kind
        (``app.kinds.names()``; None: inferred from the draft). Reads config, tokenizer files and
        safetensors headers only; never raises for bad checkpoints (problems are findings).
    suggest_drafts(target, *, store=None, context=None, budget=None, entries=None) -> Suggestions
        ranks local checkpoints (the store, or ``entries`` with .name/.path) that pair with the
        target; one sentence per exclusion; .no_model_options = the kinds with no draft folder.
    PairingReport: verdict (VERDICT_*), findings (Finding: code, severity, message, detail),
                   memory (MemoryEstimate), to_dict(), format_text().
    normalize_kind(name)

Modules: ``report`` (findings, verdict, kinds), ``checker`` (the order of the checks),
``checkpoint`` (one model alone), ``tokenizers``, ``runtime`` (rollback, drafter code),
``full_model``, ``mtp``, ``dflash`` (their kinds' plugins call them), ``fit`` (memory),
``suggest``.
"""

from app.checkpoints.pairing.checker import check
from app.checkpoints.pairing.report import (
    BLOCKER,
    DEFAULT_CONTEXT,
    NOTE,
    VERDICT_FAILS,
    VERDICT_LABELS,
    VERDICT_WARNINGS,
    VERDICT_WORKS,
    WARNING,
    Finding,
    PairingReport,
    normalize_kind,
)
from app.checkpoints.pairing.suggest import Exclusion, Suggestion, Suggestions, suggest_drafts

__all__ = [
    "BLOCKER",
    "DEFAULT_CONTEXT",
    "NOTE",
    "VERDICT_FAILS",
    "VERDICT_LABELS",
    "VERDICT_WARNINGS",
    "VERDICT_WORKS",
    "WARNING",
    "Exclusion",
    "Finding",
    "PairingReport",
    "Suggestion",
    "Suggestions",
    "check",
    "normalize_kind",
    "suggest_drafts",
]
