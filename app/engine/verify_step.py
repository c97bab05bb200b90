"""The target's side of the round loop: read the prompt, plain steps, verify a proposal.

State between steps: the target cache holds every committed token except ``pending`` (tokens
committed but not yet fed); when ``pending`` is empty, ``carry`` holds the target's raw logits
for the next position. A round feeds ``pending`` + the proposal in one pass and reads the
``k+1`` rows it needs (with ``carry`` in front when nothing is pending). Without a drafter a
plain step samples from ``carry`` and queues the next target step before syncing, like
``mlx_lm.generate_step``; with one, a plain step leaves its token pending, so the next step
feeds it either alone or together with the round's proposal, in one pass.

After a verify pass the cache keeps the accepted path (``app.engine.rollback``) and ``hidden``
holds the target rows of exactly the positions the cache gained (``app.engine.taps``), for the
drafter and for a kept conversation.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

import mlx.core as mx

from app.engine import prefill, rollback, taps, tree_pass
from app.engine import sampling as sm
from app.engine.events import SamplingParams
from app.engine.loop_stats import StepTimes
from app.engine.mlx_types import int_list
from app.engine.models import LoadedModel
from app.engine.proposal import Proposal
from app.engine.taps import Hidden, TapRequest
from app.engine.tree_verify import verify_tree
from app.engine.verify import verify


@dataclass(frozen=True)
class Step:
    """What one step committed: the accepted tokens then the target's own one."""

    tokens: list[int]
    accepted: int
    fed: int  # positions the target's cache gained (``hidden`` holds their rows)
    times: StepTimes | None = None  # a round's parts (None: a plain step)
    path: tuple[int, ...] | None = None  # a tree round's accepted nodes (None: a chain)


class TargetStep:
    def __init__(self, *, target: LoadedModel, cache: list[Any], sampling: SamplingParams,
                 taps: TapRequest | None, queued: bool, history: int):
        """``queued``: plain steps queue the next pass (no drafter to feed it with);
        ``history``: extra tokens of context the logits processors need beyond their own."""
        self.target = target
        self.cache = cache
        self.sampling = sampling
        self.taps = taps
        self.queued = queued
        self.processors = sm.make_processors(sampling)
        self.history = history
        self.rollback = rollback.for_target(target)
        self.pending: list[int] = []
        self.carry: mx.array | None = None
        self.hidden: Hidden | None = None  # rows of the positions the last step added

    def _forward(self, tokens: mx.array) -> tuple[mx.array, Hidden | None]:
        return taps.forward(self.target.model, tokens, self.cache, self.taps)

    def _history(self, committed: list[int]) -> mx.array | None:
        if not self.processors:
            return None
        ctx = self.sampling.repetition_context_size + self.history + 1
        return mx.array(committed[-ctx:], dtype=mx.uint32)

    # -- the prompt ---------------------------------------------------------------------
    def read(self, body: list[int], cancel: threading.Event, boundary: int | None,
             chunk: Callable[[list[int], Hidden | None], list[mx.array]],
             ) -> Iterator[prefill.Progress]:
        """Feed ``body`` (the prompt after what the cache holds) in stoppable chunks; each
        chunk's tokens and rows go to ``chunk``, which returns arrays to evaluate with it."""
        last: list[mx.array] = []

        def feed(part: list[int]) -> list[mx.array]:
            logits, hidden = self._forward(mx.array(part, dtype=mx.uint32))
            last[:] = [logits[-1:]]  # lazy: only the last chunk's logits are ever computed
            return (rollback.cache_arrays(self.cache) + chunk(part, hidden)
                    + (hidden.arrays() if hidden else []))

        done = 0
        for p in prefill.chunked(feed, body, cancel, boundary=boundary):
            done = p.done
            yield p
        if done == len(body) and last:
            self.carry = last[0]

    # -- steps --------------------------------------------------------------------------
    def plain(self, committed: list[int]) -> Step:
        parts: list[Hidden] = []
        fed = len(self.pending)
        if self.pending:
            logits, hidden = self._forward(mx.array(self.pending, dtype=mx.uint32))
            self.carry = logits[-1:]
            if hidden is not None:
                parts.append(hidden)
            self.pending = []
        assert self.carry is not None  # logits for the next position: nothing is pending
        rows = sm.process_rows(self.carry, self._history(committed), [], self.processors)
        tok = sm.sample(rows, self.sampling, [len(committed)])
        if not self.queued:  # the next step feeds it, with proposals if it drafts
            t = int(tok.item())  # type: ignore[arg-type]  # (a token id)
            self.pending = [t]
            self.carry = None
            # (no rows when it fed nothing: an empty Hidden, not a missing one)
            self.hidden = Hidden.concat(parts) if self.taps is not None else None
            return Step([t], 0, fed)
        # queue the next target step before syncing (mlx-lm's pipelining)
        logits, hidden = self._forward(tok.astype(mx.uint32))
        next_carry = logits[-1:]
        if hidden is not None:
            parts.append(hidden)
        mx.async_eval(tok, next_carry)
        t = int(tok.item())  # type: ignore[arg-type]  # (a token id)
        self.carry = next_carry
        self.hidden = Hidden.concat(parts) if self.taps is not None else None
        return Step([t], 0, fed + 1)

    def round(self, proposal: Proposal, rule: str, committed: list[int]) -> Step:
        if not proposal.is_chain:
            return self.tree_round(proposal, rule, committed)
        started = time.perf_counter()
        mx.eval(proposal.tokens)
        t_verify = time.perf_counter()
        n_pending = len(self.pending)
        inputs = proposal.tokens.astype(mx.uint32)
        if n_pending:
            inputs = mx.concatenate([mx.array(self.pending, dtype=mx.uint32), inputs])
        with self.rollback.verifying(self.cache):
            logits, hidden = self._forward(inputs)
        if n_pending:
            rows = logits[n_pending - 1 :]
        else:
            assert self.carry is not None
            rows = mx.concatenate([self.carry, logits], axis=0)
        rows = sm.process_rows(rows, self._history(committed), proposal.tokens, self.processors)
        verdict = verify(rows, proposal, sampling=self.sampling, rule=rule,
                         start=len(committed))
        t_roll = time.perf_counter()
        self.rollback.keep(self.cache, inputs, n_pending, proposal, verdict.path)
        # rows of what the pass fed and kept: pending + the accepted path
        self.hidden = hidden.kept(n_pending, verdict.path) if hidden is not None else None
        self.pending = [verdict.token]
        self.carry = None
        times = StepTimes(draft=proposal.draft_ms + (t_verify - started) * 1e3,
                          verify=(t_roll - t_verify) * 1e3,
                          rollback=(time.perf_counter() - t_roll) * 1e3)
        return Step(verdict.kept, verdict.accepted, n_pending + len(verdict.path), times)

    # -- trees (``app.engine.tree_pass``) -------------------------------------------------
    def tree_method(self) -> str:
        m: str | None = self.target.extra.get("tree_method")
        if m is None:
            m = tree_pass.method(self.target.model, self.cache)
            if self.rollback.method != rollback.TRIM:
                m = tree_pass.PATHS
            self.target.extra["tree_method"] = m
        return m

    def tree_round(self, proposal: Proposal, rule: str, committed: list[int]) -> Step:
        """Verify a tree: one pass with a tree mask, or its paths side by side then the kept
        path fed again (``tree_pass``); the rules walk it (``tree_verify``)."""
        assert proposal.parents is not None
        if self.processors:
            raise ValueError("tree proposals need sampling without logits processors")
        started = time.perf_counter()
        mx.eval(proposal.tokens)
        t_verify = time.perf_counter()
        n_pending = len(self.pending)
        nodes = proposal.tokens.astype(mx.uint32)
        one_pass = self.tree_method() == tree_pass.ONE_PASS
        hidden: Hidden | None = None
        if one_pass:
            inputs = mx.concatenate([mx.array(self.pending, dtype=mx.uint32), nodes])
            logits, hidden = tree_pass.forward_one_pass(
                self.target.model, inputs, proposal.parents, n_pending, self.cache, self.taps)
            rows = logits[n_pending - 1 :] if n_pending else logits
        else:  # the root's row (when something is pending), then every node's
            rows = tree_pass.forward_paths(self.target.model, self.pending, int_list(nodes),
                                           proposal.parents, self.cache)
        if not n_pending:
            assert self.carry is not None
            rows = mx.concatenate([self.carry, rows], axis=0)
        verdict = verify_tree(rows, proposal, sampling=self.sampling, rule=rule,
                              start=len(committed))
        t_roll = time.perf_counter()
        if one_pass:
            self.rollback.keep(self.cache, inputs, n_pending, proposal, verdict.path)
            self.hidden = hidden.kept(n_pending, verdict.path) if hidden is not None else None
        else:  # the cache is untouched: feed what the round keeps
            fed = [*self.pending, *(verdict.proposals[i] for i in verdict.path)]
            if fed:
                _, hidden = self._forward(mx.array(fed, dtype=mx.uint32))
                mx.eval(rollback.cache_arrays(self.cache))
            self.hidden = (hidden if hidden is not None else Hidden()) if self.taps else None
        self.pending = [verdict.token]
        self.carry = None
        times = StepTimes(draft=proposal.draft_ms + (t_verify - started) * 1e3,
                          verify=(t_roll - t_verify) * 1e3,
                          rollback=(time.perf_counter() - t_roll) * 1e3)
        return Step(verdict.kept, verdict.accepted, n_pending + len(verdict.path), times,
                    path=verdict.path)
