"""DFlash 2 block drafters as a draft kind: DFlash's block pass (``DFlashDrafter``) through
the DFlash 2 network, its tokens picked by the candidate selector. The selector takes the
argmax, so the proposals are deterministic at every temperature (verified as such: exact);
the drafter proposes the block's first ``k`` (no confidence-based width: the selector gives
no probabilities). For the same reason it grows no trees: the selector's scores rank a pick
among the LM head's candidates, they are no distribution, so nothing says what a runner-up
leaf is worth; its rounds stay chains.

Module entry points: ``make(ctx)``, ``unavailable(ctx)``, ``load(path, target)``.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import TYPE_CHECKING

import mlx.core as mx

from app.engine.drafters.dflash import DFlashAssets, DFlashDrafter, check_fits, target_problem
from app.engine.drafters.dflash2_model import DFlash2Model, load_model
from app.engine.events import SamplingParams
from app.engine.proposal import Proposal
from app.engine.taps import norm_dtype
from app.errors import DraftPairError

if TYPE_CHECKING:
    from app.engine.drafter_context import DrafterContext
    from app.engine.models import LoadedModel


def load(path: Path | str, target: LoadedModel) -> DFlashAssets:
    path = Path(path)
    model = load_model(path, dtype=norm_dtype(target.model))
    check_fits(model.config, target, "DFlash 2 drafter")
    return DFlashAssets(path=path, model=model, head_ids=None, head_w=None)


def unavailable(ctx: DrafterContext) -> str | None:
    a = ctx.asset
    if a is None:
        return "no DFlash 2 drafter is loaded (choose a DFlash 2 drafter folder as the draft)"
    return target_problem(a.config, ctx.target)


def make(ctx: DrafterContext) -> DFlash2Drafter:
    a = ctx.asset
    if a is None:
        raise DraftPairError("No DFlash 2 drafter is loaded.")
    return DFlash2Drafter(ctx.target, a)


class DFlash2Drafter(DFlashDrafter):
    def __init__(self, target: LoadedModel, assets: DFlashAssets):
        super().__init__(target, assets, adaptive=False)
        assert isinstance(assets.model, DFlash2Model)
        self.net2: DFlash2Model = assets.model
        self.embed_scale = float(getattr(self.inner, "embed_scale", 1.0) or 1.0)

    def begin(self, prompt: list[int], sampling: SamplingParams) -> list[mx.array]:
        out = super().begin(prompt, sampling)
        self.stochastic = False  # the selector's pick is deterministic by design
        return out

    def logits(self, states: mx.array) -> mx.array:
        x = self.net2.extras
        out = super().logits(states) * x.output_multiplier
        if x.final_logit_softcapping:
            out = mx.tanh(out / x.final_logit_softcapping) * x.final_logit_softcapping
        return out

    def propose(self, committed: list[int], k: int) -> Proposal | None:
        k = min(k, self.cfg.block_size - 1)
        L = len(committed)
        if k <= 0 or self.lost or L < 1 or self.n_rows < L - 1:
            return None
        started = time.perf_counter()
        ctx = self._context(L - 1)
        block = mx.array([committed[-1]] + [self.cfg.mask_token_id] * (self.cfg.block_size - 1),
                         dtype=mx.uint32)
        emb = self.inner.embed_tokens(block[None]) * (
            self.embed_scale * self.net2.extras.input_embedding_scale)
        states = self.net(emb.astype(self._dtype()), ctx, self.cache)[0, 1: 1 + k]
        logits = self.logits(states).astype(mx.float32)
        tokens = self.net2.candidate_selector.select(states, logits, committed[-1])
        mx.async_eval(tokens)
        self.rounds += 1
        self.proposed += k
        return Proposal(tokens=tokens, q=None, draft_ms=(time.perf_counter() - started) * 1e3)
