"""MTP: the multi-token-prediction head shipped with (or beside) the target guesses ahead."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

from app.checkpoints import mtp_source
from app.checkpoints.memory_estimate import one_layer_kv_bytes
from app.checkpoints.pairing.mtp import builtin_head, mtp_findings
from app.kinds import KindPlugin

if TYPE_CHECKING:
    from app.checkpoints.inspect import CheckpointInfo
    from app.checkpoints.pairing.report import FindingList
    from app.engine.drafter_context import DrafterContext
    from app.engine.drafters.base import Drafter
    from app.engine.models import LoadedModel


class MTP(KindPlugin):
    name = "mtp"
    label = "Built-in predictor (MTP)"
    share_word = "MTP head"
    explanation = ("An extra layer trained with the model predicts the tokens after the "
                   "next one; no separate draft model.")
    technical = "MTP"
    default_width = 4
    grows_trees = True
    needs_taps = True
    stochastic = True

    def engine_module(self) -> str | None:
        return "app.engine.drafters.mtp"

    def target_findings(self, t: CheckpointInfo, out: FindingList) -> None:
        mtp_findings(t, out)

    def draft_kv_bytes(self, t: CheckpointInfo, d: CheckpointInfo | None,
                       context: int) -> int | None:
        return one_layer_kv_bytes(t, context) if d is None else None  # the head's one layer

    def offer(self, t: CheckpointInfo) -> str | None:
        beside = not t.mtp_tensors and bool(mtp_source.beside(t.path))
        shipped = builtin_head(t)[1] if not t.mtp_tensors else None
        if not (t.mtp_tensors or beside or shipped or mtp_source.declared_layers(t.config)):
            return None
        if shipped:
            from app.checkpoints import builtins

            b = builtins.shipped_as(Path(shipped))
            reason = (b.note if b is not None else None) or "Uses the head shipped for this model."
        elif beside:
            reason = "Uses the prediction head kept beside the target."
        else:
            reason = "Uses the prediction head shipped inside the target."
        return reason

    def unavailable(self, ctx: DrafterContext) -> str | None:
        from app.engine.drafters import mtp

        return mtp.unavailable(ctx)

    def load_folder(self, folder: Path, target: LoadedModel, *, precision: str) -> Any:
        """A head folder of its own (a split head, a trained one) instead of the target's."""
        from app.engine.drafters import mtp

        return mtp.load(folder, target)

    def load_assets(self, ctx: DrafterContext) -> Any:
        from app.engine.drafters import mtp

        return mtp.load(ctx.target.path, ctx.target)

    def make(self, ctx: DrafterContext) -> Drafter:
        from app.engine.drafters import mtp

        return mtp.make(ctx)


PLUGIN = MTP()
