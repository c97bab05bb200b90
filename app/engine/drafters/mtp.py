"""MTP heads as a draft kind: the target's own multi-token-prediction layer proposes.

The head reads one target state per position from the round loop's hidden-state taps (before
or after the target's final norm, as the head was trained) and keeps its own KV cache with
one entry per *pair* ``(t_{p+1}, h_p)``, i.e. per position whose next token is known. After
every step it pairs the new rows with the tokens committed since; the output of the last
pair predicts the token after the newest committed one, which is the first proposal.
Further proposals chain on the head's own output state and token (one head step each); they
are speculative cache entries, dropped before the next pairing so every kept entry reads the
target's real state (``reuse_draft_kv=True`` keeps accepted ones instead, as mlx-vlm's
``qwen3_5_mtp`` drafter does). Greedy requests take the argmax; sampling requests sample from
the head's transformed distribution and return it as ``q`` for rejection sampling.

Module entry points for the registry: ``make(ctx)``, ``unavailable(ctx)``, ``load(path,
target)``.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

import mlx.core as mx

from app.engine import sampling as sm
from app.engine.drafters.base import Drafter, Proposal
from app.engine.drafters.mtp_head import POSTNORM, BoundHead, MTPHead
from app.engine.events import SamplingParams
from app.engine.rollback import rewind_cache
from app.engine.taps import Hidden, TapRequest
from app.errors import DraftPairError

if TYPE_CHECKING:
    from app.engine.drafter_context import DrafterContext
    from app.engine.models import LoadedModel


def _tap_request(head: MTPHead) -> TapRequest:
    """The one target state the head reads (as it was trained)."""
    if head.hidden_state == POSTNORM:
        return TapRequest(final_postnorm=True)
    return TapRequest(final_prenorm=True)


class MTPDrafter(Drafter):
    catches_up = True  # the tokens it sat out are fed at its next proposal
    peeks = True  # a one-token proposal adds no entry of its own (``_drop_spec`` has none)

    def __init__(self, head: MTPHead, target_model: Any, *, target_vocab: int,
                 reuse_draft_kv: bool = False):
        self.head = head
        self.bound = BoundHead(head, target_model)
        self.target_model = target_model
        self.target_vocab = target_vocab
        self.reuse_draft_kv = reuse_draft_kv
        self.taps = _tap_request(head)
        self.stochastic = False
        self.sampling = SamplingParams()
        self.draft_step_ms: float | None = None
        self._kept_rows: Hidden | None = None
        self._reset([])
        self.n_proposed = self.n_accepted = self.n_rounds = 0

    # -- state --------------------------------------------------------------------------
    def _reset(self, prompt: list[int]) -> None:
        from mlx_lm.models.cache import KVCache

        self.cache = [KVCache() for _ in self.head.module.layers]
        self.n_pairs = 0  # entries of the head's cache that read real target states
        self.n_rows = 0  # target rows received (positions the target cache holds)
        self.rows: mx.array | None = None  # rows for positions n_pairs..n_rows-1
        self.seed: tuple[mx.array, mx.array] | None = None  # logits, state of last pair
        self.spec = 0  # speculative (chained) entries on top of the pairs
        self.spec_tokens: list[int] = []
        self.known = list(prompt)

    def _rows_of(self, hidden: Hidden | None) -> mx.array | None:
        if hidden is None:
            return None
        rows = hidden.final_postnorm if self.head.hidden_state == POSTNORM else hidden.final_prenorm
        if rows is None and isinstance(hidden, Hidden) and hidden.n == 0:
            return None  # a step that fed nothing (its token waits to be fed with a round)
        if rows is None:
            raise RuntimeError(f"the target pass did not return the {self.head.hidden_state} "
                               "state the MTP head reads")
        return rows.reshape(-1, rows.shape[-1])

    def _add_rows(self, rows: mx.array | None) -> None:
        if rows is None or rows.shape[0] == 0:
            return
        self.rows = rows if self.rows is None else mx.concatenate([self.rows, rows], axis=0)
        self.n_rows += int(rows.shape[0])

    def _drop_spec(self, keep: int = 0) -> None:
        """Remove the chained entries, or keep the first ``keep`` (they become pairs)."""
        if self.spec - keep > 0:
            rewind_cache(self.cache, self.n_pairs + keep)
        if keep:
            self.n_pairs += keep
            self.rows = self.rows[keep:] if self.rows is not None else None
        self.spec = 0
        self.spec_tokens = []

    def _pair(self, committed: list[int]) -> None:
        """Feed every position whose next token is now known (one head pass)."""
        m = min(self.n_rows, len(committed) - 1)
        n = m - self.n_pairs
        if n <= 0 or self.rows is None:
            return
        tokens = mx.array(committed[self.n_pairs + 1 : m + 1], dtype=mx.uint32)
        self.seed = self.bound.step(tokens, self.rows[:n], self.cache, last_only=True)
        self.n_pairs = m
        self.rows = self.rows[n:] if self.rows.shape[0] > n else None

    # -- Drafter ------------------------------------------------------------------------
    def begin(self, prompt: list[int], sampling: SamplingParams) -> list[mx.array]:
        self.sampling = sampling
        self.stochastic = not sampling.greedy and not sm.shares_draws(sampling)
        self._reset(prompt)
        kept, self._kept_rows = self._kept_rows, None
        if kept is not None:  # a kept conversation: its rows, paired with the first chunk
            self._add_rows(self._rows_of(kept))
        return []

    def resume_rows(self, rows: Hidden) -> None:
        """The head's cache is rebuilt from the target's rows of the reused prefix: they are
        paired at the first prefill chunk, in the one head pass that pairs the chunk's."""
        self._kept_rows = rows

    def prefill(self, tokens: list[int], hidden: Hidden | None) -> None:
        self._add_rows(self._rows_of(hidden))
        self._pair(self.known)
        if self.seed is not None:  # the head reads the prompt as part of prompt processing
            mx.eval(*self.seed, *[c.state for c in self.cache])

    def _pick(self, logits: mx.array, qs: list[mx.array], position: int) -> mx.array:
        if self.sampling.greedy:
            if self.keep_dist:
                qs.append(self.bound.to_target_probs(
                    mx.softmax(logits.astype(mx.float32), axis=-1), self.target_vocab))
            return mx.argmax(logits, axis=-1)
        scaled = sm.scaled_logits(logits.astype(mx.float32), self.sampling)
        if self.stochastic or self.keep_dist:
            qs.append(self.bound.to_target_probs(mx.softmax(scaled, axis=-1), self.target_vocab))
        if self.stochastic:
            return mx.random.categorical(scaled)
        return sm.draw(scaled, self.sampling, [position], self.bound.ids, self.target_vocab)

    def propose(self, committed: list[int], k: int) -> Proposal | None:
        if k <= 0:
            return None
        started = time.perf_counter()
        self._drop_spec()
        self._pair(committed)
        if self.seed is None or self.n_pairs != len(committed) - 1:
            return None  # no state for the newest position yet
        logits, state = self.seed
        qs: list[mx.array] = []
        at = len(committed)  # the sequence position of the first proposal
        tokens = [self.bound.to_target_ids(self._pick(logits, qs, at)).astype(mx.uint32)]
        for j in range(1, k):
            logits, state = self.bound.step(tokens[-1], state, self.cache)
            self.spec += 1
            tokens.append(self.bound.to_target_ids(
                self._pick(logits, qs, at + j)).astype(mx.uint32))
        out = mx.concatenate(tokens)
        mx.async_eval(out)
        dist = mx.concatenate(qs, axis=0) if qs else None
        return Proposal(tokens=out, q=dist if self.stochastic else None, dist=dist,
                        draft_ms=(time.perf_counter() - started) * 1e3)

    def observe(self, committed: list[int], proposal: Proposal | None, accepted: int,
                new_tokens: list[int], hidden: Hidden | None = None) -> None:
        if proposal is not None:
            self.n_rounds += 1
            self.n_proposed += proposal.k
            self.n_accepted += accepted
        rows = self._rows_of(hidden)
        if self.reuse_draft_kv and proposal is not None and self.spec:
            # keep the chained entries of accepted proposals; their target rows are dropped
            keep = min(accepted, self.spec)
            self._add_rows(rows)
            self._drop_spec(keep)
        else:
            self._drop_spec()
            self._add_rows(rows)
        # pairing waits for the next proposal: plain-step stretches cost no head passes

    def warmup(self, widths: list[int]) -> None:
        """Compile every pairing width once and time one head step (``draft_step_ms``; the
        session turns it into target steps). A round of ``k`` proposals costs ``k`` head
        steps: one pairing pass over the rows since the last round, then ``k - 1`` chained."""
        from mlx_lm.models.cache import KVCache

        H = self.head.module.fc.weight.shape[0]
        cache = [KVCache() for _ in self.head.module.layers]
        for n in sorted({1, 2, *[w + 1 for w in widths]}):
            mx.eval(self.bound.step(mx.zeros((n,), mx.uint32), mx.zeros((n, H)), cache,
                                    last_only=True))
        times = []
        for _ in range(5):
            t0 = time.perf_counter()
            mx.eval(self.bound.step(mx.zeros((1,), mx.uint32), mx.zeros((1, H)), cache))
            times.append(time.perf_counter() - t0)
        self.draft_step_ms = sorted(times)[2] * 1e3

    def close(self) -> None:
        self._reset([])

    def stats(self) -> dict[str, Any]:
        return {
            "hidden_state": self.head.hidden_state,
            "source": self.head.source,
            "layout": self.head.layout,
            "reduced_head": self.head.head_ids is not None,
            "step_cost": round(self.step_cost, 3),
            "acceptance": round(self.n_accepted / self.n_proposed, 3) if self.n_proposed else 0.0,
        }


# -- registry entry points ------------------------------------------------------------------
def load(path: Path | str, target: LoadedModel) -> MTPHead:
    """The MTP head for ``target`` (a LoadedModel) found at/for ``path``; DraftPairError if
    there is none (the reason in one sentence)."""
    from app.engine.drafters.mtp_load import load_head

    return load_head(Path(path), target)


def unavailable(ctx: DrafterContext) -> str | None:
    """A pure query: reads names in the target's files, not tensors (none once loaded)."""
    from app.engine.drafters.mtp_load import problem_for

    return None if ctx.asset is not None else problem_for(ctx.target)


def make(ctx: DrafterContext) -> MTPDrafter:
    head = ctx.asset
    if head is None:
        raise DraftPairError("No MTP head is loaded.")
    return MTPDrafter(head, ctx.target.model, target_vocab=ctx.target.vocab_size)
