"""Medusa heads: extra heads on the target's last state guess several tokens ahead at once;
their top candidates are checked together as a tree."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

from app.kinds import KindPlugin

if TYPE_CHECKING:
    from app.engine.drafter_context import DrafterContext
    from app.engine.drafters.base import Drafter
    from app.engine.models import LoadedModel


class Medusa(KindPlugin):
    name = "medusa"
    label = "Look-ahead heads (Medusa)"
    explanation = ("Small extra heads made for this model guess the next few tokens from its "
                   "last state; several guesses are checked at once.")
    technical = "Medusa heads (FasterDecoding layout), verified as a token tree"
    default_width = 4
    needs_draft_folder = True
    needs_taps = True
    scratch_width = 32
    suggest_bonus = 4.0  # heads made for the target
    aliases = ("medusa-heads",)

    def recognises(self, config: dict[str, Any]) -> bool:
        return isinstance(config, dict) and "medusa_num_heads" in config

    def engine_module(self) -> str | None:
        return "app.engine.drafters.medusa"

    def folder_reason(self, ratio: float | None) -> str:
        return "Medusa heads made for this target."

    def unavailable(self, ctx: DrafterContext) -> str | None:
        from app.engine.drafters import medusa

        return medusa.unavailable(ctx)

    def load_folder(self, folder: Path, target: LoadedModel, *, precision: str) -> Any:
        from app.engine.drafters import medusa

        return medusa.load(folder, target)

    def make(self, ctx: DrafterContext) -> Drafter:
        from app.engine.drafters import medusa

        return medusa.make(ctx)


PLUGIN = Medusa()
