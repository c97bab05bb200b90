"""A draft model: a small causal LM with the target's tokens guesses, the target checks."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

from app.checkpoints.pairing.full_model import full_model_findings
from app.kinds import KindPlugin

if TYPE_CHECKING:
    from app.checkpoints.inspect import CheckpointInfo
    from app.checkpoints.pairing.report import FindingList
    from app.engine.drafter_context import DrafterContext
    from app.engine.drafters.base import Drafter
    from app.engine.models import LoadedModel


class FullModel(KindPlugin):
    name = "full-model"
    label = "Draft model"
    share_word = "draft model"
    explanation = ("A small model with the same vocabulary guesses a few tokens; the "
                   "large one checks them all at once.")
    technical = "full-model draft (a small causal LM with its own KV cache)"
    default_width = 4
    grows_trees = True
    needs_draft_folder = True
    folder_fallback = True  # any causal LM folder no other kind claims
    stochastic = True
    demo_draft = "demo-draft"
    draft_is_lm = True
    mlx_lm_peer = True
    aliases = ("full_model", "draft", "model")
    bench_goals = (("vs-mlx-lm", "full-model draft vs mlx-lm speculative, same pair and width",
                    "peer", None, 1.10),)

    def draft_findings(self, t: CheckpointInfo, d: CheckpointInfo, out: FindingList) -> None:
        full_model_findings(t, d, out)

    def unavailable(self, ctx: DrafterContext) -> str | None:
        return None if ctx.asset is not None else "no draft model is loaded"

    def load_folder(self, folder: Path, target: LoadedModel, *, precision: str) -> Any:
        from app.engine.models import load_model
        from app.errors import ModelLoadError

        draft = load_model(folder, precision=precision)
        problem = self.token_id_problem(target.path, draft.path)
        if problem:
            raise ModelLoadError(f"{draft.name} cannot draft for {target.name}: {problem}")
        return draft

    def token_id_problem(self, target: Path, draft: Path) -> str | None:
        """Why the draft's token ids would mean something else to the target (None if they
        agree). The pairing check is the one definition of tokenizer compatibility; only its
        tokenizer and vocabulary blockers stop a load (memory or cache findings are reported
        elsewhere)."""
        from app.checkpoints.pairing import BLOCKER, check

        report = check(target, draft, kind=self.name)
        for f in report.findings:
            if f.severity == BLOCKER and f.code.split(".")[0] in ("tokenizer", "vocab"):
                return f"{f.message} ({f.detail})" if f.detail else f.message
        return None

    def make(self, ctx: DrafterContext) -> Drafter:
        from app.engine.drafters import full_model

        return full_model.make(ctx, self.default_width)


PLUGIN = FullModel()
