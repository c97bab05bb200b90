"""The round loop: read the prompt, then propose, verify, commit and emit until the reply ends.

The loop is composed of parts it is handed: a ``ProposalSource`` (prompt lookup's copies, the
drafter and its width policy: ``app.engine.proposals``), a ``TargetStep`` (the target's
passes, the verify rule and the rollback: ``app.engine.verify_step``, built here from the
source's and the lease's taps), a ``Lease`` on the prompt cache (``app.engine.lease``) and a
``LoopStats`` that turns what it counted into ``Timings`` (``app.engine.loop_stats``). What is
left here is the order of things and the events.
"""

from __future__ import annotations

import dataclasses
import threading
import time
from collections.abc import Callable, Iterator
from typing import Any

import mlx.core as mx

from app.engine import proposals
from app.engine.drafters.base import Drafter
from app.engine.events import (
    DoneEvent,
    Event,
    GenerationRequest,
    MemoryEvent,
    PrefillEvent,
    RoundEvent,
    StatusEvent,
    TokenEvent,
)
from app.engine.lease import Lease, union
from app.engine.loop_stats import LoopStats
from app.engine.memory import MemorySampler
from app.engine.models import LoadedModel, make_cache
from app.engine.proposals import Pick, ProposalSource
from app.engine.stopping import StopMatcher
from app.engine.taps import Hidden
from app.engine.verify_step import Step, TargetStep
from app.engine.width import PolicyFactory, WidthPolicy


class RoundLoop:
    def __init__(
        self,
        *,
        target: LoadedModel,
        source: ProposalSource,
        prompt: list[int],
        request: GenerationRequest,
        cancel: threading.Event | None,
        lease: Lease | None = None,  # the prompt cache it reads into (default: a fresh one)
        fallback: str | None = None,
        context: int | None = None,  # the model's context length (for progress events)
        # work on the cache once the prompt is read, before the first token (this machine's
        # table measured at the reply's context): timed apart, as a warm-up
        after_prompt: Callable[[list[Any], int], Iterator[Event]] | None = None,
    ):
        if not prompt:
            raise ValueError("the prompt is empty")
        self.target = target
        self.source = source
        self.prompt = list(prompt)
        self.req = request
        self.cancel = cancel or threading.Event()
        self.lease = lease if lease is not None else Lease(make_cache(target))
        self.context = context
        self.after_prompt = after_prompt
        self.committed: list[int] = list(prompt)
        self.output: list[int] = []
        self.finish_reason: str | None = None
        self.stats = LoopStats(kind=source.kind, width=source.width, rule=source.rule,
                               fallback=fallback, reused=self.lease.cache_n,
                               members=source.members_named)
        self.step = TargetStep(target=target, cache=self.lease.cache, sampling=request.sampling,
                               taps=union(source.taps, self.lease.taps),
                               queued=source.drafter is None, history=source.width)

    @classmethod
    def with_drafter(cls, *, target: LoadedModel, drafter: Drafter | None, prompt: list[int],
                     request: GenerationRequest, rule: str, width: int,
                     cancel: threading.Event | None, policy: PolicyFactory | None = WidthPolicy,
                     **kw: Any) -> RoundLoop:
        """A loop over the usual proposal source for ``drafter`` (see ``proposals``)."""
        source = proposals.for_drafter(drafter, rule=rule, width=width,
                                       lookup=request.lookup_assist, policy=policy)
        return cls(target=target, source=source, prompt=prompt, request=request,
                   cancel=cancel, **kw)

    # what tests and callers inspect between events
    @property
    def cache(self) -> list[Any]:
        return self.step.cache

    @property
    def pending(self) -> list[int]:
        return self.step.pending

    @property
    def rounds(self) -> list[Any]:
        return self.stats.rounds

    # -- the prompt ----------------------------------------------------------------------
    def _read_prompt(self) -> Iterator[PrefillEvent]:
        """Read the prompt after what the cache already holds, in steps that can be stopped."""
        reused = self.lease.cache_n
        drafter_arrays = self.source.begin(self.prompt, self.req.sampling)

        def chunk(part: list[int], hidden: Hidden | None) -> list[mx.array]:
            self.source.prefill(part, hidden)
            self.lease.rows(hidden)
            return []

        boundary = self.lease.boundary
        body = self.prompt[reused:]
        read = 0
        for p in self.step.read(body, self.cancel,
                                None if boundary is None else boundary - reused, chunk):
            read = p.done
            self.stats.read = read
            if boundary is not None and reused + read == boundary:
                self.lease.prompt_read(boundary)
            yield PrefillEvent(p.done, p.total, p.tokens_per_s, reused, self.context)
        if read == len(body):
            mx.eval(self.step.carry, *drafter_arrays)
            self.lease.prompt_read(len(self.prompt))

    # -- one step ------------------------------------------------------------------------
    def _step(self, remaining: int) -> tuple[Pick | None, Step]:
        pick = self.source.next(self.committed, remaining)
        if pick is None:
            step = self.step.plain(self.committed)
            self.stats.passed()
            return None, step
        step = self.step.round(pick.proposal, pick.rule, self.committed)
        self.stats.passed(step.times)
        self.source.judged(pick, step.accepted, step.path)
        return pick, step

    # -- the loop ------------------------------------------------------------------------
    def run(self) -> Iterator[Event]:
        failed = False
        try:
            yield from self._run()
        except Exception:
            failed = True  # the caches may hold half a pass: the lease keeps nothing
            raise
        finally:
            self.lease.done(self.committed, failed=failed)

    def _run(self) -> Iterator[Event]:
        req = self.req
        if req.sampling.seed is not None:
            mx.random.seed(req.sampling.seed)
        mx.reset_peak_memory()
        detok = self.target.tokenizer.detokenizer
        detok.reset()
        stopper = StopMatcher(req.stop)
        t_start = time.perf_counter()
        mem = MemorySampler(req.memory_interval_s, t0=t_start)
        reused = self.lease.cache_n
        yield StatusEvent("prefill", f"{len(self.prompt) - reused} prompt tokens"
                          + (f", {reused} reused" if reused else ""))
        yield from self._read_prompt()
        t_prefill = time.perf_counter()
        measured = False  # a measurement announces itself: the time between is no warm-up
        if self.after_prompt is not None and not self.cancel.is_set():
            for status in self.after_prompt(self.cache, len(self.prompt)):
                measured = True
                yield status
        t_decode = time.perf_counter()  # the reply's own time starts here
        warmup_ms = round((t_decode - t_prefill) * 1e3, 1) if measured else 0.0
        yield StatusEvent("decoding")
        yield MemoryEvent(self.lease.memory(mem.sample()))
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
                pick, step = self._step(remaining)
                if step.fed:
                    self.lease.rows(self.step.hidden)
                emitted = self._commit(step.tokens, step.accepted, pick is not None, detok,
                                       stopper)
                round_index = len(self.stats.rounds) if pick is not None else -1
                for ev in emitted:
                    yield TokenEvent(index=ev[0], token_id=ev[1], text=ev[2], from_draft=ev[3],
                                     round_index=round_index)
                if ttft_ms == 0.0 and emitted:  # from the submission: every wait counts
                    t_asked = req.submitted_at if req.submitted_at is not None else t_start
                    ttft_ms = (time.perf_counter() - t_asked) * 1e3
                t_obs = time.perf_counter()
                if self.finish_reason is None:
                    self.source.observe(self.committed, pick, step.accepted, step.tokens,
                                        self.step.hidden, step.path)
                obs_ms = (time.perf_counter() - t_obs) * 1e3  # drafter bookkeeping
                self.stats.draft_ms += obs_ms
                self.source.timed(pick, (time.perf_counter() - t_step) * 1e3)
                if pick is not None and step.times is not None:
                    tree = pick.proposal.parents is not None
                    rec = self.stats.round(
                        proposed=pick.proposal.spine or pick.proposal.k, accepted=step.accepted,
                        emitted=len(emitted), width=pick.width, copied=pick.copied,
                        times=step.times, extra_draft_ms=obs_ms,
                        t_ms=(time.perf_counter() - t_decode) * 1e3,
                        total_tokens=len(self.output), source=pick.source,
                        tree_nodes=pick.proposal.k if tree else 0)
                    yield RoundEvent(rec)
                if mem.due():
                    yield MemoryEvent(self.lease.memory(mem.sample()))
        finally:
            self.source.close()
        # text the detokenizer or the stop matcher still holds belongs to the reply unless a
        # stop string ended it (an EOS ends the reply too, but not its last word)
        detok.finalize()
        tail = "" if stopper.stopped else stopper.feed(detok.last_segment) + stopper.flush()
        if tail:
            yield TokenEvent(index=max(len(self.output) - 1, 0), token_id=-1, text=tail,
                             from_draft=False, round_index=-1)
        t_end = time.perf_counter()
        yield MemoryEvent(self.lease.memory(mem.sample()))
        yield DoneEvent(
            text=stopper.final_text,
            token_ids=tuple(self.output),
            finish_reason=self.finish_reason or "stop",
            timings=dataclasses.replace(
                self.stats.timings(n_out=len(self.output), prompt_ms=(t_prefill - t_start) * 1e3,
                                   predicted_ms=(t_end - t_decode) * 1e3, ttft_ms=ttft_ms),
                seed=None if req.sampling.greedy else req.sampling.seed,
                warmup_ms=warmup_ms),
            rounds=tuple(self.stats.rounds),
        )

    def _commit(self, new_tokens: list[int], accepted: int, drafted: bool, detok: Any,
                stopper: StopMatcher) -> list[tuple[int, int, str, bool]]:
        out = []
        for i, tok in enumerate(new_tokens):
            if tok in self.target.eos_token_ids:
                self.finish_reason = "stop"
                self.stats.eos_emitted = True
                break
            self.committed.append(tok)
            self.output.append(tok)
            detok.add_token(tok)
            text = stopper.feed(detok.last_segment)
            out.append((len(self.output) - 1, tok, text, drafted and i < accepted))
            if stopper.stopped:
                self.finish_reason = "stop"
                break
            if len(self.output) >= self.req.max_tokens:
                self.finish_reason = "length"
                break
        return out
