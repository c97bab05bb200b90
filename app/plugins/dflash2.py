"""DFlash 2: DFlash's block drafter with convolutions around its layers and a candidate
selector that picks each token knowing the one before it; deterministic by design."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from app.checkpoints.dflash2_config import is_dflash2
from app.checkpoints.pairing.dflash import dflash_findings
from app.plugins.engine_kind import EngineModuleKind

if TYPE_CHECKING:
    from app.checkpoints.inspect import CheckpointInfo
    from app.checkpoints.pairing.report import FindingList


class DFlash2(EngineModuleKind):
    name = "dflash2"
    label = "Block drafter (DFlash 2)"
    explanation = ("A small drafter made for this model guesses a block of tokens in one "
                   "step, each chosen knowing the one before it.")
    technical = "DFlash 2"
    default_width = 4
    needs_draft_folder = True
    needs_taps = True
    stochastic = False  # the selector's pick is deterministic (verified as such)
    grows_trees = False  # its selector scores picks, it gives no distribution to grow from
    scratch_width = 8
    suggest_bonus = 5.0
    aliases = ("dflash-2",)

    def recognises(self, config: dict[str, Any]) -> bool:
        return isinstance(config, dict) and is_dflash2(config)

    def engine_module(self) -> str | None:
        return "app.engine.drafters.dflash2"

    def draft_findings(self, t: CheckpointInfo, d: CheckpointInfo, out: FindingList) -> None:
        dflash_findings(t, d, out)

    def folder_reason(self, ratio: float | None) -> str:
        return "A DFlash 2 drafter made for this target."


PLUGIN = DFlash2()
