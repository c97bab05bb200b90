"""Full-model draft: a small causal LM with its own KV cache proposes ``k`` tokens.

Greedy requests draft greedily (deterministic proposals, exact under the greedy rule).
Sampling requests draft by sampling from the draft's transformed distribution ``q`` and are
verified by rejection sampling with the residual ``max(0, p - q)``.

Reduced draft head (FR-Spec style): a draft folder may ship ``draft_head.json`` =
``{"format": 1, "token_ids": [...]}``. The output layer is then sliced to those target ids
(typically the 8k most frequent of 49k), which cuts the draft's dominant cost by ~5x. The
draft can only propose those ids; verification is unchanged, so outputs stay exact.

Cache bookkeeping follows mlx-lm's ``speculative_generate_step``: after proposing, the draft
cache holds ``committed + d_1..d_{k-1}``; after ``n`` accepted it is rewound by
``(k-1) - min(n, k-1)`` (``rewind_cache``: KV trim, recurrent state from the step it marked,
sliding windows with room for a round) and the tokens it has not seen yet are fed at the next
proposal. How many proposals a round asks for is the loop's width policy
(``app.engine.width``); the confidence stop below is the drafter's own.
"""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

import mlx.core as mx

from app.engine import sampling as sm
from app.engine.drafters.base import Drafter, Proposal
from app.engine.events import SamplingParams
from app.engine.mlx_types import item_float, item_int
from app.engine.models import LoadedModel, dequantized_weight, make_cache
from app.engine.prompt_cache import CachedState
from app.engine.rollback import cache_arrays, mark_cache, rewind_cache, widen_windows
from app.engine.taps import Hidden
from app.engine.width import DEFAULT_DRAFT_COST
from app.errors import DraftPairError

if TYPE_CHECKING:
    from app.engine.drafter_context import DrafterContext


class DraftHead:
    """The draft's output layer, optionally restricted to a subset of target ids."""

    def __init__(self, draft: LoadedModel, target_vocab: int):
        self.model = draft.model
        self.vocab_limit = min(draft.vocab_size, target_vocab)
        self.target_vocab = target_vocab
        # the subset's rows are gathered once per loaded draft (every request makes a head)
        key = f"draft_head:{target_vocab}"
        if key not in draft.extra:
            head_file = Path(draft.path) / "draft_head.json"
            draft.extra[key] = self._subset(head_file) if head_file.exists() else (None, None)
        self.ids: mx.array | None
        self.weight: mx.array | None
        self.ids, self.weight = draft.extra[key]

    def _subset(self, head_file: Path) -> tuple[mx.array | None, mx.array | None]:
        """The subset's target ids and their output rows (None, None: the full layer)."""
        data = json.loads(head_file.read_text())
        ids = sorted({int(i) for i in data.get("token_ids", []) if 0 <= int(i) < self.vocab_limit})
        if not ids:
            return None, None
        inner = getattr(self.model, "model", None)
        lm_head = getattr(self.model, "lm_head", None)
        if lm_head is not None and hasattr(lm_head, "weight"):
            layer = lm_head
        elif inner is not None and hasattr(inner, "embed_tokens"):
            layer = inner.embed_tokens
        else:
            return None, None  # unusual head: keep the full output layer
        rows = mx.array(ids, dtype=mx.uint32)
        # in the dtype of the hidden states (a quantized layer's rows come in its scales'
        # dtype), so the per-token matmul never casts the head
        norm = getattr(getattr(inner, "norm", None), "weight", None)
        w = dequantized_weight(layer, rows)
        weight = w.astype(norm.dtype) if norm is not None else w
        mx.eval(weight)
        return rows, weight

    @property
    def reduced(self) -> bool:
        return self.ids is not None

    @property
    def size(self) -> int:
        return int(self.ids.shape[0]) if self.ids is not None else self.vocab_limit

    def logits(self, inputs: mx.array, cache: list[Any]) -> mx.array:
        """Draft logits over its head for the last position of ``inputs`` (shape ``(1, size)``)."""
        out: mx.array
        if self.weight is not None:
            h = self.model.model(inputs[None], cache=cache)[:, -1, :]
            out = h @ self.weight.T
        else:
            out = self.model(inputs[None], cache=cache)[:, -1, :][:, : self.vocab_limit]
        return out

    def to_target_ids(self, draft_ids: mx.array) -> mx.array:
        return self.ids[draft_ids] if self.ids is not None else draft_ids

    def to_target_probs(self, q: mx.array) -> mx.array:
        """Spread ``(1, size)`` draft probabilities over the target's vocabulary."""
        if self.ids is not None:
            return mx.zeros((q.shape[0], self.target_vocab), q.dtype).at[:, self.ids].add(q)
        if q.shape[-1] < self.target_vocab:
            pad = mx.zeros((q.shape[0], self.target_vocab - q.shape[-1]), q.dtype)
            return mx.concatenate([q, pad], axis=-1)
        return q


# With the adaptive policy, a round stops drafting after the first proposal whose draft
# probability is below this: the draft is well calibrated (shipped demo draft on held-out
# replies: agreement 0.06 / 0.21 / 0.41 / 0.60 / 0.92 for confidence 0-.2 / .2-.4 / ... /
# .8-1, see its model card), so a low-confidence token is still worth verifying but the
# ones after it are not. Simulated on held-out teacher replies with an earlier checkpoint,
# stopping at 0.6 lifted tokens per unit of cost from 1.07 to 1.22 at width 3.
CONFIDENCE_STOP = 0.6


class FullModelDrafter(Drafter):
    catches_up = True  # the tokens it sat out are fed at its next proposal
    step_cost = DEFAULT_DRAFT_COST  # until the session measures it at warm-up

    def __init__(
        self,
        draft: LoadedModel,
        *,
        target_vocab: int,
        prefill_step: int = 2048,
        adaptive: bool = False,
        max_width: int = 4,
        confidence_stop: float | None = None,
    ):
        self.draft = draft
        if confidence_stop is None and adaptive:
            confidence_stop = CONFIDENCE_STOP
        self.confidence_stop = confidence_stop
        self.head = DraftHead(draft, target_vocab)
        self.prefill_step = prefill_step
        self.cache: list[Any] | None = None
        self.pending: list[int] = []
        self.sampling = SamplingParams()
        self.stochastic = False
        self.adaptive = adaptive
        self.adaptive_width = adaptive  # the loop's width policy sizes the rounds
        self.stops_early = bool(confidence_stop)
        self.max_width = max_width
        self.draft_step_ms: float | None = None
        self._resume: CachedState | None = None
        self._body: list[int] = []

    def begin(self, prompt: list[int], sampling: SamplingParams) -> list[mx.array]:
        self.sampling = sampling
        self.stochastic = not sampling.greedy and not sm.shares_draws(sampling)
        body = prompt[:-1]
        self._body = body
        self.length = len(body)  # positions the draft cache holds
        # a kept conversation's cache (app.engine.reuse) may already hold a prefix of the body
        kept, self._resume = self._resume, None
        if kept is not None and kept.tokens == body[: kept.n]:
            self.cache, first = kept.cache, kept.n
        else:  # sliding-window layers keep room for a round's writes, so rewinds stay exact
            self.cache, first = widen_windows(make_cache(self.draft), self.max_width + 2), 0
        outs: list[mx.array] = []
        for start in range(first, len(body), self.prefill_step):
            chunk = mx.array(body[start : start + self.prefill_step], dtype=mx.uint32)
            self.draft.model(chunk[None], cache=self.cache)
            outs = cache_arrays(self.cache)
            if start + self.prefill_step < len(body):
                mx.eval(outs)
        self.pending = prompt[-1:]
        mark_cache(self.cache, self.length)
        return outs

    def propose(self, committed: list[int], k: int) -> Proposal | None:
        if k <= 0 or self.cache is None:
            return None
        started = time.perf_counter()
        y = mx.array(self.pending, dtype=mx.uint32)
        tokens: list[mx.array] = []
        qs: list[mx.array] = []
        for j in range(k):
            logits = self.head.logits(y, self.cache)
            self.length += int(y.shape[0])
            mark_cache(self.cache, self.length)
            if self.sampling.greedy:
                probs = mx.softmax(logits.astype(mx.float32), axis=-1)
                d = mx.argmax(logits, axis=-1)
            else:  # a draw: independent (rejection), or shared with the target's
                scaled = sm.scaled_logits(logits.astype(mx.float32), self.sampling)
                probs = mx.softmax(scaled, axis=-1)
                d = (mx.random.categorical(scaled) if self.stochastic else
                     sm.draw(scaled, self.sampling, [len(committed) + j], self.head.ids,
                             self.head.target_vocab))
            if self.stochastic or self.keep_dist:
                qs.append(self.head.to_target_probs(probs))
            y = self.head.to_target_ids(d).astype(mx.uint32)
            tokens.append(y)
            if self.confidence_stop and j < k - 1:
                # stop after this proposal if the draft itself doubts it (exactness is
                # unaffected: the decision uses only the draft's own distribution)
                conf = mx.max(probs)
                mx.eval(y, conf)
                if item_float(conf) < self.confidence_stop:
                    break
            else:
                mx.async_eval(y)
        dist = mx.concatenate(qs, axis=0) if qs else None
        proposal = Proposal(
            tokens=mx.concatenate(tokens),
            q=dist if self.stochastic else None,
            dist=dist,
            draft_ms=(time.perf_counter() - started) * 1e3,
        )
        return proposal

    def observe(
        self,
        committed: list[int],
        proposal: Proposal | None,
        accepted: int,
        new_tokens: list[int],
        hidden: Hidden | None = None,
    ) -> None:
        if proposal is None:
            self.pending = self.pending + list(new_tokens)
            return
        assert self.cache is not None, "a proposal was made from this cache"
        k = proposal.k
        keep = min(accepted, k - 1)
        self.length -= (k - 1) - keep
        rewind_cache(self.cache, self.length)
        pending = []
        if accepted == k:
            pending.append(item_int(proposal.tokens[k - 1]))
        pending.extend(new_tokens[accepted:])
        self.pending = pending

    def warmup(self, widths: list[int]) -> None:
        cache = make_cache(self.draft)
        for n in sorted(set([1, 2, *widths])):
            mx.eval(self.head.logits(mx.zeros((n,), mx.uint32), cache))
        times = []
        for _ in range(3):
            started = time.perf_counter()
            mx.eval(self.head.logits(mx.zeros((1,), mx.uint32), cache))
            times.append(time.perf_counter() - started)
        self.draft_step_ms = sorted(times)[1] * 1e3
        del cache

    def close(self) -> None:
        self.cache = None

    # -- kept conversations --------------------------------------------------------------
    keeps_state = True

    def state_key(self, width: int) -> str:
        return f"{self.kind}:{self.draft.path}:{width}"

    def kept_state(self) -> CachedState | None:
        """The draft cache after the prompt: it holds the prompt but its last token."""
        return CachedState(list(self._body), self.cache) if self.cache is not None else None

    def resume(self, state: CachedState) -> None:
        self._resume = state

    def stats(self) -> dict[str, Any]:
        return {
            "reduced_head": self.head.reduced,
            "head_size": self.head.size,
            "adaptive": self.adaptive,
        }


def make(ctx: DrafterContext, default_width: int) -> FullModelDrafter:
    draft = ctx.asset
    if draft is None:
        raise DraftPairError("No draft model is loaded.")
    req = ctx.request
    return FullModelDrafter(draft, target_vocab=ctx.target.vocab_size, adaptive=req.adaptive,
                            max_width=req.draft_width or default_width)
