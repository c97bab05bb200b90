"""EAGLE-3: a one-layer drafter made for one target reads three of its layers (low, middle,
high) and guesses the next few tokens, in its own smaller vocabulary mapped to the target's."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from app.checkpoints.eagle3_config import is_eagle3
from app.checkpoints.pairing.eagle3 import eagle3_findings
from app.plugins.engine_kind import EngineModuleKind

if TYPE_CHECKING:
    from app.checkpoints.inspect import CheckpointInfo
    from app.checkpoints.pairing.report import FindingList
    from app.engine.drafter_context import DrafterContext


class Eagle3(EngineModuleKind):
    name = "eagle3"
    label = "Layer-reading drafter (EAGLE-3)"
    share_word = "EAGLE-3"
    explanation = ("A small drafter made for this model reads three of its layers and "
                   "guesses the next few tokens.")
    technical = "EAGLE-3"
    default_width = 4
    needs_draft_folder = True
    grows_trees = True
    needs_taps = True
    stochastic = True
    scratch_width = 8
    demo_draft = "demo-eagle3"
    suggest_bonus = 5.0  # a drafter made for the target tends to pay best
    aliases = ("eagle-3", "eagle")

    def recognises(self, config: dict[str, Any]) -> bool:
        return isinstance(config, dict) and is_eagle3(config)

    def engine_module(self) -> str | None:
        return "app.engine.drafters.eagle3"

    def draft_findings(self, t: CheckpointInfo, d: CheckpointInfo, out: FindingList) -> None:
        eagle3_findings(t, d, out)

    def draft_kv_bytes(self, t: CheckpointInfo, d: CheckpointInfo | None,
                       context: int) -> int | None:
        """Its layer's K/V (the settings sit under ``transformer_layer_config`` in the
        speculators layout, where a plain reading finds none)."""
        e = d.eagle3 if d is not None else None
        if not e or not e.get("num_key_value_heads") or not e.get("head_dim"):
            return None
        dtype = d.dtype if d is not None else None
        width = 4 if dtype == "float32" else 2
        return int(2 * e["num_hidden_layers"] * e["num_key_value_heads"] * e["head_dim"]
                   * width * context)

    def folder_reason(self, ratio: float | None) -> str:
        return "An EAGLE-3 drafter made for this target."

    def load_assets(self, ctx: DrafterContext) -> Any:
        from app.engine.drafters import eagle3

        return eagle3.load_default(ctx)


PLUGIN = Eagle3()
