"""Gemma 4's MTP assistant: a small drafter published beside a Gemma 4 model reads that
model's final state and attention cache and guesses the next few tokens."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from app.checkpoints.gemma4_assistant_config import is_gemma4_assistant
from app.checkpoints.pairing.gemma4_assistant import gemma4_assistant_findings
from app.plugins.engine_kind import EngineModuleKind

if TYPE_CHECKING:
    from app.checkpoints.inspect import CheckpointInfo
    from app.checkpoints.pairing.report import FindingList


class Gemma4Assistant(EngineModuleKind):
    name = "gemma4-assistant"
    label = "Gemma 4 assistant (MTP)"
    explanation = ("The small assistant published with a Gemma 4 model reads that model's "
                   "state and memory and guesses the next few tokens.")
    technical = "Gemma 4 MTP assistant"
    default_width = 4
    needs_draft_folder = True
    needs_taps = True
    stochastic = True
    scratch_width = 8
    suggest_bonus = 5.0
    aliases = ("gemma4-mtp",)

    def recognises(self, config: dict[str, Any]) -> bool:
        return isinstance(config, dict) and is_gemma4_assistant(config)

    def engine_module(self) -> str | None:
        return "app.engine.drafters.gemma4_assistant"

    def draft_findings(self, t: CheckpointInfo, d: CheckpointInfo, out: FindingList) -> None:
        gemma4_assistant_findings(t, d, out)

    def draft_kv_bytes(self, t: CheckpointInfo, d: CheckpointInfo | None,
                       context: int) -> int | None:
        return 0  # it reads the target's cache and keeps none of its own

    def folder_reason(self, ratio: float | None) -> str:
        return "The assistant published with this Gemma 4 model."


PLUGIN = Gemma4Assistant()
