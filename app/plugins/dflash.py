"""DFlash: a block-diffusion drafter, conditioned on the target's hidden states, guesses a
whole block per pass."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from app.checkpoints.dflash2_config import is_dflash2
from app.checkpoints.dspark_config import is_dspark
from app.checkpoints.inspect import dflash_config
from app.checkpoints.pairing.dflash import dflash_findings
from app.plugins.engine_kind import EngineModuleKind

if TYPE_CHECKING:
    from app.checkpoints.inspect import CheckpointInfo
    from app.checkpoints.pairing.report import FindingList
    from app.engine.drafter_context import DrafterContext


class DFlash(EngineModuleKind):
    name = "dflash"
    label = "Block drafter (DFlash)"
    share_word = "DFlash"
    explanation = ("A small drafter made for this model guesses a whole block of tokens "
                   "in one step, reading the model's own state.")
    technical = "DFlash"
    default_width = 16
    grows_trees = True
    needs_draft_folder = True
    needs_taps = True
    stochastic = True
    scratch_width = 16
    demo_draft = "demo-dflash"
    suggest_bonus = 5.0  # a drafter made for the target tends to pay best

    def recognises(self, config: dict[str, Any]) -> bool:
        return (isinstance(config, dict) and dflash_config(config) is not None
                and not is_dflash2(config) and not is_dspark(config))  # their own kinds

    def engine_module(self) -> str | None:
        return "app.engine.drafters.dflash"

    def draft_findings(self, t: CheckpointInfo, d: CheckpointInfo, out: FindingList) -> None:
        dflash_findings(t, d, out)

    def folder_reason(self, ratio: float | None) -> str:
        return "A DFlash drafter made for this target: usually the fastest option."

    def load_assets(self, ctx: DrafterContext) -> Any:
        from app.engine.drafters import dflash

        return dflash.load_default(ctx)


PLUGIN = DFlash()
