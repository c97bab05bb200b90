"""DSpark: DFlash's block drafter with a token-transition head that corrects each guess for
the token before it."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from app.checkpoints.dspark_config import is_dspark
from app.checkpoints.pairing.dflash import dflash_findings
from app.plugins.engine_kind import EngineModuleKind

if TYPE_CHECKING:
    from app.checkpoints.inspect import CheckpointInfo
    from app.checkpoints.pairing.report import FindingList


class DSpark(EngineModuleKind):
    name = "dspark"
    label = "Block drafter (DSpark)"
    explanation = ("A small drafter made for this model guesses a block of tokens in one "
                   "step, correcting each guess for the one before it.")
    technical = "DSpark"
    default_width = 4
    needs_draft_folder = True
    grows_trees = True
    needs_taps = True
    stochastic = True
    scratch_width = 8
    suggest_bonus = 5.0

    def recognises(self, config: dict[str, Any]) -> bool:
        return isinstance(config, dict) and is_dspark(config)

    def engine_module(self) -> str | None:
        return "app.engine.drafters.dspark"

    def draft_findings(self, t: CheckpointInfo, d: CheckpointInfo, out: FindingList) -> None:
        dflash_findings(t, d, out)

    def folder_reason(self, ratio: float | None) -> str:
        return "A DSpark drafter made for this target."


PLUGIN = DSpark()
