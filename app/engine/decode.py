"""The round loop: prefill, propose, verify, accept, roll back, emit.

State between rounds: the target cache holds every committed token except ``pending`` (tokens
committed but not yet fed); when ``pending`` is empty, ``carry`` holds the target's raw logits
for the next position. A round with proposals ``d_1..d_k`` feeds ``pending + d`` in one pass
and reads the ``k+1`` rows it needs (with ``carry`` in front when nothing is pending). Without a
drafter a plain step samples from ``carry`` and immediately queues the next target step before
syncing, like ``mlx_lm.generate_step``. With one, a plain step leaves its token pending
instead: the next step feeds it either alone (plain) or together with the round's proposals,
in one pass. Queued ahead, the token would already be in the cache when a round begins and
the proposals would need a pass of their own — a whole extra target step for a round after
a plain stretch (a probe, or the first round after one), which no acceptance could pay back.

After a verify pass the target's cache is rewound to what was kept by the strategy chosen for
its cache kind (``app.engine.rollback``); the width of each round comes from the width policy
(``app.engine.width``) and the drafter's cost model; drafters that read hidden states get the
rows of every pass through ``app.engine.taps`` (prefill chunks, then one ``observe`` per step).
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from typing import Any

import mlx.core as mx

from app.engine import prefill, rollback, taps
from app.engine import sampling as sm
from app.engine.drafters import lookup_assist
from app.engine.drafters.base import Drafter, Proposal
from app.engine.events import (
    RULE_NONE,
    DoneEvent,
    Event,
    GenerationRequest,
    MemoryEvent,
    PrefillEvent,
    RoundEvent,
    RoundRecord,
    StatusEvent,
    Timings,
    TokenEvent,
)
from app.engine.memory import MemorySampler
from app.engine.models import LoadedModel, make_cache
from app.engine.stopping import StopMatcher
from app.engine.taps import Hidden
from app.engine.verify import verify
from app.engine.width import WidthPolicy
from app.kinds import OFF


class RoundLoop:
    def __init__(
        self,
        *,
        target: LoadedModel,
        drafter: Drafter | None,
        prompt: list[int],
        request: GenerationRequest,
        rule: str,
        width: int,
        cancel: threading.Event | None,
        fallback: str | None = None,
        cache: list | None = None,  # a fresh target cache (default: made here)
        verify_slope: float | None = None,  # measured at warm-up, for the width policy
        reused: int = 0,  # prompt tokens ``cache`` already holds (a kept conversation)
        context: int | None = None,  # the model's context length (for progress events)
    ):
        if not prompt:
            raise ValueError("the prompt is empty")
        self.target = target
        self.drafter = drafter
        self.prompt = list(prompt)
        self.req = request
        self.sampling = request.sampling
        self.rule = rule if drafter is not None else RULE_NONE
        self.width = width if drafter is not None else 0
        self.cancel = cancel or threading.Event()
        self.fallback = fallback
        self.processors = sm.make_processors(self.sampling)
        self.eos = target.eos_token_ids
        self.cache = cache if cache is not None else make_cache(target)
        self.committed: list[int] = list(prompt)
        self.output: list[int] = []
        self.pending: list[int] = []
        self.carry: mx.array | None = None
        self.rounds: list[RoundRecord] = []
        self.draft_n = self.draft_acc = self.verify_passes = 0
        self.draft_ms = self.verify_ms = self.rollback_ms = 0.0
        self.finish_reason: str | None = None
        self._round_ms = (0.0, 0.0, 0.0)
        self.eos_emitted = False
        self.taps = drafter.taps if drafter is not None else None
        self.rollback = rollback.for_target(target)
        self.policy: WidthPolicy | None = None
        # a model drafter gets prompt lookup beside it for the stretches that copy context
        self.assist = lookup_assist.for_drafter(drafter, request.lookup_assist)
        if drafter is not None and drafter.adaptive_width and self.width > 0:
            self.policy = WidthPolicy(self.width, cost=drafter.cost)
            if verify_slope is not None:
                self.policy.set_costs(verify_slope=verify_slope)
        self.hidden: Hidden | None = None  # rows of the last step, for the drafter
        self.reused = self.prefilled = reused
        self.context = context
        self.boundary: int | None = None  # a prompt length where a prefill chunk must end

    # -- target passes ---------------------------------------------------------------
    def _forward(self, tokens: mx.array) -> tuple[mx.array, Hidden | None]:
        """Raw logits ``(n, V)`` for ``tokens`` (appended to the target cache), plus the
        hidden rows the drafter reads (None when it reads none)."""
        return taps.forward(self.target.model, tokens, self.cache, self.taps)

    def _history(self) -> mx.array | None:
        if not self.processors:
            return None
        ctx = self.sampling.repetition_context_size + self.width + 1
        return mx.array(self.committed[-ctx:], dtype=mx.uint32)

    def _prefill(self) -> Iterator[PrefillEvent]:
        """Read the prompt after what the cache already holds, in steps that can be stopped."""
        drafter_arrays = self.drafter.begin(self.prompt, self.sampling) if self.drafter else []
        if self.assist is not None:
            self.assist.begin(self.prompt, self.sampling)
        last: list[mx.array] = []

        def feed(part: list[int]) -> list[mx.array]:
            logits, hidden = self._forward(mx.array(part, dtype=mx.uint32))
            if self.drafter is not None:
                self.drafter.prefill(part, hidden)
            last[:] = [logits[-1:]]  # lazy: only the last chunk's logits are ever computed
            return rollback.cache_arrays(self.cache) + (hidden.arrays() if hidden else [])

        body = self.prompt[self.reused :]
        boundary = None if self.boundary is None else self.boundary - self.reused
        for p in prefill.chunked(feed, body, self.cancel, boundary=boundary):
            self.prefilled = self.reused + p.done
            yield PrefillEvent(p.done, p.total, p.tokens_per_s, self.reused, self.context)
        if self.prefilled == len(self.prompt):
            self.carry = last[0]
            mx.eval(self.carry, *drafter_arrays)

    # -- one step ----------------------------------------------------------------------
    def _plain_step(self) -> list[int]:
        parts: list[Hidden | None] = []
        if self.pending:
            logits, hidden = self._forward(mx.array(self.pending, dtype=mx.uint32))
            self.carry = logits[-1:]
            parts.append(hidden)
            self.pending = []
        rows = sm.process_rows(self.carry, self._history(), [], self.processors)
        tok = sm.sample(rows, self.sampling)
        if self.drafter is not None:  # the next step feeds it, with proposals if it drafts
            t = int(tok.item())
            self.pending = [t]
            self.carry = None
            self.verify_passes += 1
            self.hidden = Hidden.concat(parts) if self.taps is not None and parts else None
            return [t]
        # queue the next target step before syncing (mlx-lm's pipelining)
        logits, hidden = self._forward(tok.astype(mx.uint32))
        next_carry = logits[-1:]
        parts.append(hidden)
        mx.async_eval(tok, next_carry)
        t = int(tok.item())
        self.carry = next_carry
        self.verify_passes += 1
        self.hidden = Hidden.concat(parts) if self.taps is not None else None
        return [t]

    def _spec_round(self, proposal: Proposal, rule: str) -> tuple[list[int], int]:
        k = proposal.k
        started = time.perf_counter()
        mx.eval(proposal.tokens)
        self.draft_ms += proposal.draft_ms + (time.perf_counter() - started) * 1e3
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
            rows = mx.concatenate([self.carry, logits], axis=0)
        rows = sm.process_rows(rows, self._history(), proposal.tokens, self.processors)
        verdict = verify(rows, proposal.tokens, sampling=self.sampling, rule=rule, q=proposal.q)
        self.verify_ms += (time.perf_counter() - t_verify) * 1e3
        self.verify_passes += 1
        t_roll = time.perf_counter()
        n = verdict.accepted
        self.rollback.rewind(self.cache, inputs, keep=n_pending + n)
        # rows of what the pass fed and kept: pending + accepted proposals
        self.hidden = hidden.rows(0, n_pending + n) if hidden is not None else None
        self.pending = [verdict.token]
        self.carry = None
        self.rollback_ms += (time.perf_counter() - t_roll) * 1e3
        self.draft_n += k
        self.draft_acc += n
        self._round_ms = (
            proposal.draft_ms + (t_verify - started) * 1e3,
            (t_roll - t_verify) * 1e3,
            (time.perf_counter() - t_roll) * 1e3,
        )
        return [*verdict.proposals[:n], verdict.token], n

    # -- the loop ----------------------------------------------------------------------
    def run(self) -> Iterator[Event]:
        req = self.req
        if self.sampling.seed is not None:
            mx.random.seed(self.sampling.seed)
        mx.reset_peak_memory()
        detok = self.target.tokenizer.detokenizer
        detok.reset()
        stopper = StopMatcher(req.stop)
        t_start = time.perf_counter()
        mem = MemorySampler(req.memory_interval_s, t0=t_start)
        yield StatusEvent("prefill", f"{len(self.prompt) - self.reused} prompt tokens"
                          + (f", {self.reused} reused" if self.reused else ""))
        yield from self._prefill()
        t_prefill = time.perf_counter()
        yield StatusEvent("decoding")
        yield MemoryEvent(mem.sample())
        ttft_ms = 0.0
        try:
            while self.finish_reason is None:
                if self.cancel.is_set():
                    self.finish_reason = "cancelled"
                    break
                t_step = time.perf_counter()
                remaining = req.max_tokens - len(self.output)
                if remaining <= 0:
                    self.finish_reason = "length"
                    break
                proposal = None
                k = min(self.width, remaining - 1)
                copied = False
                if self.assist is not None:
                    proposal = self.assist.propose(self.committed, remaining - 1)
                    copied = proposal is not None
                if proposal is None and self.drafter is not None and k > 0:
                    if self.policy is not None:
                        k = self.policy.request(k, stops_early=self.drafter.stops_early)
                    proposal = self.drafter.propose(self.committed, k) if k > 0 else None
                    if proposal is not None and proposal.k == 0:
                        proposal = None
                if proposal is None:
                    new_tokens, accepted = self._plain_step(), 0
                else:
                    rule = self.assist.rule if copied and self.assist else self.rule
                    new_tokens, accepted = self._spec_round(proposal, rule)
                    if self.policy is not None and not copied:
                        self.policy.observe(proposal.k, accepted)
                emitted = self._commit(new_tokens, accepted, proposal, detok, stopper)
                round_index = len(self.rounds) if proposal is not None else -1
                for ev in emitted:
                    yield TokenEvent(
                        index=ev[0], token_id=ev[1], text=ev[2], from_draft=ev[3],
                        round_index=round_index,
                    )
                if ttft_ms == 0.0 and emitted:
                    ttft_ms = (time.perf_counter() - t_start) * 1e3
                t_obs = time.perf_counter()
                if self.drafter is not None and self.finish_reason is None:
                    # a copy round is committed text to the model drafter, not its proposal
                    self.drafter.observe(self.committed, None if copied else proposal,
                                         accepted, new_tokens, self.hidden)
                    if self.assist is not None:
                        self.assist.observe(self.committed, proposal if copied else None,
                                            accepted, new_tokens)
                obs_ms = (time.perf_counter() - t_obs) * 1e3  # drafter bookkeeping
                self.draft_ms += obs_ms
                if self.policy is not None:
                    if copied:
                        self.policy.observe_other()
                    else:
                        self.policy.observe_time(proposal.k if proposal is not None else 0,
                                                 (time.perf_counter() - t_step) * 1e3)
                if proposal is not None:
                    d_ms, v_ms, r_ms = self._round_ms
                    rec = RoundRecord(
                        index=len(self.rounds),
                        proposed=proposal.k,
                        accepted=accepted,
                        bonus=len(emitted) > accepted,
                        emitted=len(emitted),
                        width=proposal.k if copied else k,
                        copied=copied,
                        draft_ms=d_ms + obs_ms,
                        verify_ms=v_ms,
                        rollback_ms=r_ms,
                        t_ms=(time.perf_counter() - t_prefill) * 1e3,
                        total_tokens=len(self.output),
                    )
                    self.rounds.append(rec)
                    yield RoundEvent(rec)
                if mem.due():
                    yield MemoryEvent(mem.sample())
        finally:
            if self.drafter is not None:
                self.drafter.close()
        # text the detokenizer or the stop matcher still holds belongs to the reply unless a
        # stop string ended it (an EOS ends the reply too, but not its last word)
        detok.finalize()
        tail = "" if stopper.stopped else stopper.feed(detok.last_segment) + stopper.flush()
        if tail:
            yield TokenEvent(
                index=max(len(self.output) - 1, 0), token_id=-1, text=tail, from_draft=False,
                round_index=-1,
            )
        t_end = time.perf_counter()
        yield MemoryEvent(mem.sample())
        yield DoneEvent(
            text=stopper.final_text,
            token_ids=tuple(self.output),
            finish_reason=self.finish_reason or "stop",
            timings=self._timings(t_start, t_prefill, t_end, ttft_ms),
            rounds=tuple(self.rounds),
        )

    def _commit(
        self,
        new_tokens: list[int],
        accepted: int,
        proposal: Proposal | None,
        detok: Any,
        stopper: StopMatcher,
    ) -> list[tuple[int, int, str, bool]]:
        out = []
        for i, tok in enumerate(new_tokens):
            if tok in self.eos:
                self.finish_reason = "stop"
                self.eos_emitted = True
                break
            self.committed.append(tok)
            self.output.append(tok)
            detok.add_token(tok)
            text = stopper.feed(detok.last_segment)
            out.append((len(self.output) - 1, tok, text, proposal is not None and i < accepted))
            if stopper.stopped:
                self.finish_reason = "stop"
                break
            if len(self.output) >= self.req.max_tokens:
                self.finish_reason = "length"
                break
        return out

    def _timings(self, t_start: float, t_prefill: float, t_end: float, ttft_ms: float) -> Timings:
        prompt_ms = (t_prefill - t_start) * 1e3
        predicted_ms = (t_end - t_prefill) * 1e3
        n = len(self.output)
        n_rounds = len(self.rounds)
        drafter_kind = self.drafter.kind if self.drafter is not None else OFF
        return Timings(
            prompt_n=self.prefilled - self.reused,
            cache_n=self.reused,
            prompt_ms=prompt_ms,
            prompt_per_second=(self.prefilled - self.reused) / (prompt_ms / 1e3)
            if prompt_ms > 0 else 0.0,
            predicted_n=n,
            predicted_ms=predicted_ms,
            predicted_per_second=n / (predicted_ms / 1e3) if predicted_ms > 0 else 0.0,
            draft_n=self.draft_n,
            draft_n_accepted=self.draft_acc,
            draft_rounds=n_rounds,
            copy_n=sum(r.proposed for r in self.rounds if r.copied),
            copy_n_accepted=sum(r.accepted for r in self.rounds if r.copied),
            copy_rounds=sum(r.copied for r in self.rounds),
            draft_kind=drafter_kind,
            accept_len_mean=self.draft_acc / n_rounds if n_rounds else 0.0,
            acceptance_rate=self.draft_acc / self.draft_n if self.draft_n else 0.0,
            # the end-of-text token was produced by a pass too, though it is not output text
            tokens_per_verify=(n + self.eos_emitted) / self.verify_passes
            if self.verify_passes
            else 0.0,
            verify_passes=self.verify_passes,
            draft_ms=self.draft_ms,
            verify_ms=self.verify_ms,
            rollback_ms=self.rollback_ms,
            ttft_ms=ttft_ms,
            peak_memory_bytes=int(mx.get_peak_memory()),
            draft_width=self.width,
            acceptance_rule=self.rule,
            fallback=self.fallback,
        )

