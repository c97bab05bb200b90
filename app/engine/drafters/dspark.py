"""DSpark block drafters as a draft kind: DFlash's block pass (``DFlashDrafter``) through the
DSpark network, each position's token picked after the token-transition head has added its
correction for the token before it. Greedy requests take the argmax; sampling requests
sample each position from its corrected distribution at the request's temperature / top-p and
return those distributions (over the target's vocabulary: DSpark reads the target's LM head)
as ``q`` for rejection sampling.

Where trees grow from its chains (``keep_dist``) every proposal carries its corrected
distribution (greedy: the plain softmax). Each one is conditioned on the chain's token before
it, so the tree keeps the runner-ups as leaves beside the chain (``tree_build``: each leaf's
parent is the token its distribution was corrected for), not DFlash's best-first tree over
independent positions (``marginals`` off).

Module entry points: ``make(ctx)``, ``unavailable(ctx)``, ``load(path, target)``.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import TYPE_CHECKING

import mlx.core as mx

from app.engine import sampling as sm
from app.engine.drafters.dflash import DFlashAssets, DFlashDrafter, check_fits, target_problem
from app.engine.drafters.dspark_model import DSparkModel, load_model
from app.engine.proposal import Proposal
from app.engine.taps import norm_dtype
from app.errors import DraftPairError

if TYPE_CHECKING:
    from app.engine.drafter_context import DrafterContext
    from app.engine.models import LoadedModel


class DSparkAssets(DFlashAssets):
    embed: mx.array | None = None


def load(path: Path | str, target: LoadedModel) -> DSparkAssets:
    path = Path(path)
    w = load_model(path, dtype=norm_dtype(target.model))
    check_fits(w.model.config, target, "DSpark drafter")
    a = DSparkAssets(path=path, model=w.model, head_ids=None, head_w=None)
    a.embed = w.embed
    return a


def unavailable(ctx: DrafterContext) -> str | None:
    a = ctx.asset
    if a is None:
        return "no DSpark drafter is loaded (choose a DSpark drafter folder as the draft)"
    return target_problem(a.config, ctx.target)


def make(ctx: DrafterContext) -> DSparkDrafter:
    a = ctx.asset
    if a is None:
        raise DraftPairError("No DSpark drafter is loaded.")
    return DSparkDrafter(ctx.target, a)


class DSparkDrafter(DFlashDrafter):
    marginals = False  # each position's distribution depends on the chain's token before it

    def __init__(self, target: LoadedModel, assets: DSparkAssets):
        super().__init__(target, assets, adaptive=False)
        assert isinstance(assets.model, DSparkModel)
        self.spark: DSparkModel = assets.model
        self.own_embed = assets.embed
        self.embed_scale = float(getattr(self.inner, "embed_scale", 1.0) or 1.0)

    @property
    def proposals(self) -> int:
        return self.spark.extras.proposal_length

    def _embed(self, block: mx.array) -> mx.array:
        if self.own_embed is not None:
            return self.own_embed[block][None]
        out: mx.array = self.inner.embed_tokens(block[None]) * self.embed_scale
        return out

    def propose(self, committed: list[int], k: int) -> Proposal | None:
        k = min(k, self.proposals)
        L = len(committed)
        if k <= 0 or self.lost or L < 1 or self.n_rows < L - 1:
            return None
        started = time.perf_counter()
        ctx = self._context(L - 1)
        block = mx.array([committed[-1]] + [self.cfg.mask_token_id] * (self.cfg.block_size - 1),
                         dtype=mx.uint32)
        first = 0 if self.spark.extras.sample_from_anchor else 1
        states = self.net(self._embed(block).astype(self._dtype()), ctx, self.cache)[0]
        logits = self.logits(states[first: first + k]).astype(mx.float32)
        prev = mx.array([committed[-1]], dtype=mx.uint32)
        picks, qs = [], []
        for i in range(k):
            step = self.spark.markov_head.step(logits[i][None], prev)
            if self.stochastic:
                scaled = sm.scaled_logits(step, self.sampling)
                qs.append(mx.softmax(scaled, axis=-1))
                prev = mx.random.categorical(scaled).astype(mx.uint32)
            elif not self.sampling.greedy:  # the shared draw at this position
                scaled = sm.scaled_logits(step.astype(mx.float32), self.sampling)
                if self.keep_dist:
                    qs.append(mx.softmax(scaled, axis=-1))
                prev = sm.draw(scaled, self.sampling, [L + i]).astype(mx.uint32)
            else:
                prev = mx.argmax(step, axis=-1).astype(mx.uint32)
                if self.keep_dist:
                    qs.append(mx.softmax(step.astype(mx.float32), axis=-1))
            picks.append(prev)
        tokens = mx.concatenate(picks)
        dist = self._to_target_probs(mx.concatenate(qs, axis=0)) if qs else None
        q = dist if self.stochastic else None
        mx.async_eval(tokens, *([q] if q is not None else []))
        self.rounds += 1
        self.proposed += k
        return Proposal(tokens=tokens, q=q, dist=dist,
                        draft_ms=(time.perf_counter() - started) * 1e3)
