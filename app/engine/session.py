"""The engine's entry point: a ``Session`` owns the loaded target/draft and runs requests.

One thread owns a Session and every MLX object in it (load, generate, unload). Usage::

    s = Session()
    s.load_target("demo")                # folder path, "demo", or a store name
    s.load_draft("demo-draft")           # optional: the full-model drafter
    for ev in s.generate(GenerationRequest(prompt="Hi", draft_kind="prompt-lookup")):
        ...                              # events from app.engine.events

``generate`` never raises for problems of the request or of decoding: they arrive as a
``DoneEvent`` with ``finish_reason="error"`` and a plain ``error`` message. Speculation that
cannot run either falls back to plain decoding with a ``NoticeEvent`` and ``timings.fallback``
(when ``allow_fallback``), or ends with such an error.
"""

from __future__ import annotations

import dataclasses
import secrets
import threading
import time
from collections.abc import Generator, Iterator
from pathlib import Path
from typing import Any

import mlx.core as mx

from app import kinds
from app.checkpoints.chat_prompt import chat_tokens
from app.checkpoints.resolve import resolve_model
from app.engine import auto_build, proposals, rollback, session_warmup, tree_build
from app.engine import context as limits
from app.engine.auto_memory import Memory
from app.engine.auto_record import RecordStore
from app.engine.calibration import Calibration, CalibrationStore, target_key
from app.engine.calibration_measure import CALIBRATE_BUDGET_S, IDLE_LOAD, current_load
from app.engine.decode import RoundLoop
from app.engine.drafter_context import DrafterContext
from app.engine.drafters.base import Drafter
from app.engine.events import (
    RULE_NONE,
    DoneEvent,
    Event,
    GenerationRequest,
    NoticeEvent,
    StatusEvent,
    Timings,
)
from app.engine.lease import Lease
from app.engine.lease import union as lease_union
from app.engine.models import LoadedModel, load_model, make_cache
from app.engine.prompt_cache import PromptCache
from app.engine.reuse import ConversationLease
from app.engine.suffix_memory import DEFAULT_CAP_BYTES as DEFAULT_REPLY_MEMORY
from app.engine.suffix_memory import SuffixMemory
from app.engine.taps import TapRequest
from app.engine.tree_build import NodeBudget
from app.engine.validation import token_problem, validate
from app.engine.verify import choose_rule
from app.engine.width import DEFAULT_VERIFY_SLOPE, PolicyFactory, WidthPolicy
from app.errors import DraftPairError, ModelLoadError, user_message


class Session:
    def __init__(self, *, precision: str = "auto", width_policy: PolicyFactory = WidthPolicy,
                 calibrations: CalibrationStore | None = None,
                 reply_memory_bytes: int = DEFAULT_REPLY_MEMORY):
        """``width_policy``: how rounds are sized (``app.engine.width``; a measurement or a
        test passes ``FixedWidth`` to draft at every step). ``calibrations``: where this
        machine's speed tables are kept (default: the user data folder).
        ``reply_memory_bytes``: the cap on earlier replies kept for drafters that propose
        from them (per scope: a chat, an API key)."""
        self.precision = precision
        self.width_policy = width_policy
        self._tap_union: TapRequest | None = None  # rows kept conversations keep (per target)
        self.target: LoadedModel | None = None
        # what each kind loaded for this target (a draft model, a head, a drafter network),
        # by kind name: only the Session writes it, through the kind's plugin
        self.assets: dict[str, Any] = {}
        self.draft_kind: str | None = None  # the kind whose draft folder is loaded
        self.calibrations = calibrations if calibrations is not None else (
            CalibrationStore.default())
        self.calibration: Calibration | None = None  # the loaded target's, once read/measured
        self.last_warmup_s = 0.0  # what the last request spent measuring (0 when it did not)
        self.prompt_cache = PromptCache()  # kept conversation states (reuse_cache requests)
        self.auto_memory = Memory()  # what auto speculation learnt, per chat and for the pair
        # the pair's record is also kept on disk, beside the calibration tables
        self.auto_records = RecordStore.beside(self.calibrations.folder)
        self._record_target: str | None = None  # the loaded target's name in that record
        self.replies = SuffixMemory(reply_memory_bytes)  # earlier replies, per reply_scope

    # -- loading ----------------------------------------------------------------------
    def load_target(self, name_or_path: str | Path) -> LoadedModel:
        self.unload()
        self.target = load_model(resolve_model(name_or_path), precision=self.precision)
        rollback.for_target(self.target)  # the rewind strategy is chosen at load
        key = target_key(self.target.path, self.target.precision)
        cal = self.calibrations.load(self.target.path, key)
        self._record_target = f"{key['model']}:{key['precision']}"
        if cal is not None and cal.busy and current_load() < IDLE_LOAD:
            cal = None  # measured while other programs ran: measured again now it is idle
        self.calibration = cal
        return self.target

    @property
    def draft(self) -> LoadedModel | None:
        """The loaded draft folder when it is a model of its own (name, path, weights)."""
        held = self.assets.get(self.draft_kind) if self.draft_kind else None
        return held if isinstance(held, LoadedModel) else None

    def load_draft(self, name_or_path: str | Path) -> Any:
        """A draft folder, for the kind that recognises it (a DFlash drafter, a small LM...).
        Returns what was loaded."""
        if self.target is None:
            raise ModelLoadError("Load a target model before its draft.")
        folder = resolve_model(name_or_path)
        plugin = kinds.for_folder(_read_config(folder))
        if plugin is None:
            raise ModelLoadError(f"No draft kind of this DraftPair reads {folder.name}.")
        try:
            held = plugin.load_folder(folder, self.target, precision=self.precision)
        except ModuleNotFoundError as exc:
            raise ModelLoadError(_not_supported(plugin) + ".") from exc
        self.assets[plugin.name] = held
        self.draft_kind = plugin.name
        self._tap_union = None
        self.prompt_cache.clear()
        self.auto_memory.forget(plugin.name)  # what the old drafter did says nothing
        return held

    def load_for(self, kind: str, name_or_path: str | Path) -> Any:
        """Load a folder for one kind explicitly (e.g. a head folder instead of the one in the
        target's files) and hold it; the draft folder (``load_draft``) is left as it is."""
        if self.target is None:
            raise ModelLoadError("Load a target model before its draft.")
        plugin = kinds.get(kind)
        held = plugin.load_folder(resolve_model(name_or_path), self.target,
                                  precision=self.precision)
        self.assets[plugin.name] = held
        self._tap_union = None
        self.prompt_cache.clear()
        return held

    def unload_draft(self) -> None:
        """Drop every draft folder's weights (a head in the target's own files stays)."""
        self.prompt_cache.clear()
        self.auto_memory = Memory()  # another pair: what auto learnt was about this one
        self._tap_union = None
        for plugin in kinds.plugins():
            if plugin.needs_draft_folder:
                self.assets.pop(plugin.name, None)
        self.draft_kind = None

    def unload(self) -> None:
        self.prompt_cache.clear()
        self.auto_memory = Memory()
        self.replies.clear()  # token ids of another model's vocabulary mean other words
        self._tap_union = None
        self.target = None
        self._record_target = None
        self.draft_kind = None
        self.assets.clear()
        self.calibration = None
        mx.clear_cache()

    def context(self, request: GenerationRequest | None = None,
                kind: str | None = None) -> DrafterContext | None:
        """What ``kind``'s plugin reads (the target, the request, that kind's assets)."""
        if self.target is None:
            return None
        request = request or GenerationRequest()
        return DrafterContext(target=self.target, request=request,
                              asset=self.assets.get(kind or request.draft_kind),
                              replies=self.replies)

    def unavailable(self, kind: str, request: GenerationRequest | None = None) -> str | None:
        """Why ``kind`` cannot run with what is loaded (None if it can); loads nothing."""
        plugin = kinds.get(kind)
        ctx = self.context(request, kind)
        if ctx is None:
            return "no target model is loaded"
        if not plugin.proposes:
            return None
        if plugin.combines:
            return auto_build.unavailable(self, request)
        try:
            return plugin.unavailable(ctx)
        except ModuleNotFoundError:
            return _not_supported(plugin)

    def available_kinds(self) -> dict[str, str | None]:
        """Each draft kind -> None if it can run with what is loaded, else the reason."""
        return {k: self.unavailable(k) for k in kinds.names()}

    def make_drafter(self, request: GenerationRequest) -> Drafter | None:
        """A fresh drafter for the request's kind (None when it proposes nothing), loading
        and holding the kind's assets first when it has none yet."""
        plugin = kinds.get(request.draft_kind)
        if not plugin.proposes or plugin.combines or self.target is None:
            return None  # (a combining kind's drafters are its members': auto_build)
        if self.assets.get(plugin.name) is None:
            ctx = self.context(request, plugin.name)
            assert ctx is not None
            held = plugin.load_assets(ctx)
            if held is not None:
                self.assets[plugin.name] = held
                self._tap_union = None
        ctx = self.context(request, plugin.name)
        assert ctx is not None
        drafter = plugin.make(ctx)
        drafter.kind = plugin.name  # one source for the name timings and kept states carry
        return drafter

    # -- prompts ----------------------------------------------------------------------
    def context_length(self) -> int | None:
        assert self.target is not None
        return limits.context_length(self.target.config,
                                      getattr(self.target.tokenizer, "model_max_length", None))

    def admit(self, request: GenerationRequest) -> limits.Admission:
        """The one admission path (generate, the server, the bench): the prompt's token ids
        and the context limit they were checked against. Refuses, with a plain sentence, an
        empty prompt or one that does not fit the model's context (for chats, trims first by
        the request's policy), before any model work."""
        assert self.target is not None
        limit = self.context_length()
        dropped = 0
        if request.messages is not None and request.prompt_tokens is None:
            tokens, dropped = limits.fit_messages(
                request.messages, lambda m: self._encode(request, m), limit,
                policy=request.context_policy)
        else:
            tokens = self._encode(request, None)
            limits.check(len(tokens), limit)
        if not tokens:
            raise DraftPairError("The prompt is empty.")
        problem = token_problem(tokens, self.target.embedding_rows)
        if problem:  # MLX would read past the embedding table (garbage or a crash)
            if request.prompt_tokens is None:  # the model's own tokenizer gave these ids
                problem = (f"{self.target.name}'s tokenizer gives ids its embedding table "
                           f"does not have ({problem})")
            raise DraftPairError(f"This request cannot run: {problem}.")
        return limits.Admission(tuple(tokens), limit, dropped)

    def encode(self, request: GenerationRequest) -> list[int]:
        """The prompt's token ids, admitted by ``admit``."""
        return list(self.admit(request).tokens)

    def _encode(self, request: GenerationRequest, msgs: list[dict[str, str]] | None) -> list[int]:
        assert self.target is not None
        tok = self.target.tokenizer
        if request.prompt_tokens is not None:
            return [int(t) for t in request.prompt_tokens]
        messages: list[dict[str, str]] | None = None
        if msgs is not None:
            messages = [dict(m) for m in msgs]
        elif request.chat and request.prompt is not None:
            messages = [{"role": "user", "content": request.prompt}]
        if messages is not None:
            if request.system_prompt and not any(m.get("role") == "system" for m in messages):
                messages.insert(0, {"role": "system", "content": request.system_prompt})
            if getattr(tok, "chat_template", None):
                return chat_tokens(tok, messages, model=self.target.name, folder=self.target.path)
            text = "\n".join(m["content"] for m in messages)
            return list(tok.encode(text))
        if request.prompt is None:
            raise DraftPairError("Nothing to generate from: give a prompt or messages.")
        return list(tok.encode(request.prompt))

    # -- generation ---------------------------------------------------------------------
    def generate(
        self, request: GenerationRequest, *, cancel: threading.Event | None = None
    ) -> Iterator[Event]:
        if request.submitted_at is None:  # time to first token counts from here at the latest
            request = dataclasses.replace(request, submitted_at=time.perf_counter())
        try:
            yield from self._generate(request, cancel)
        except Exception as exc:  # errors cross to the caller as data
            yield DoneEvent(
                text="",
                token_ids=(),
                finish_reason="error",
                timings=Timings(draft_kind=request.draft_kind),
                error=user_message(exc),
            )

    def _generate(
        self, req: GenerationRequest, cancel: threading.Event | None
    ) -> Iterator[Event]:
        if self.target is None:
            raise DraftPairError("No target model is loaded.")
        # every problem of the request, named, before any work
        validate(req, vocab_rows=self.target.embedding_rows)
        if not req.sampling.greedy and req.sampling.seed is None:
            # every sampled reply has a seed: shared draws need one, and it is reported, so
            # the same reply can be asked for again (speculation on or off)
            req = dataclasses.replace(req, sampling=dataclasses.replace(
                req.sampling, seed=secrets.randbits(31)))
        admission = self.admit(req)
        prompt = list(admission.tokens)
        limit = admission.limit
        room = admission.reply_room
        if room is not None and req.max_tokens > room:
            req = dataclasses.replace(req, max_tokens=room)
            yield NoticeEvent("context-full", f"The reply can be at most {req.max_tokens} tokens: "
                              "the model's context is full after that.")
        if admission.dropped_turns:
            yield NoticeEvent("context-trimmed", f"The {admission.dropped_turns} oldest messages "
                              "were left out so the conversation fits the model's context.")
        kind = req.draft_kind
        plugin = kinds.get(kind)
        fallback: str | None = None
        reason = self.unavailable(kind, req) if plugin.proposes else None
        width = req.draft_width or plugin.default_width
        if reason is None and plugin.proposes:
            problem = rollback.for_target(self.target).problem
            if problem:
                reason = f"speculation needs to rewind the model's cache, but {problem}"
        draft_lm = self.assets.get(kind) if plugin.draft_is_lm else None
        if (reason is None and isinstance(draft_lm, LoadedModel)
                and max(prompt) >= draft_lm.embedding_rows):
            reason = "the prompt holds token ids the draft model does not have"
        if reason is not None:
            if not req.allow_fallback:
                raise DraftPairError(f"Speculation ({kind}) cannot run: {reason.rstrip('.')}.")
            fallback = f"{kind} unavailable: {reason}"
            yield NoticeEvent("fallback", f"Speculation is off for this reply: {reason}.")
            kind, plugin = kinds.OFF, kinds.get(kinds.OFF)
        left_out: dict[str, str] = {}
        members: list[str] = []  # a combining kind's sources (their record is kept)
        if plugin.combines:  # every drafter that can run, one chosen per round
            built = yield from auto_build.build(self, kind, req, prompt, cancel)
            source: proposals.ProposalSource = (
                built.source if built.source is not None else proposals.for_drafter(
                    None, rule=RULE_NONE, width=0))
            drafter: Drafter | None = built.source.fleet if built.source is not None else None
            width, warmup_ms, left_out = source.width, built.warmup_s * 1e3, built.left_out
            members = [m.name for m in built.source.fleet.members] if built.source else []
        else:
            drafter = self.make_drafter(req) if plugin.proposes else None
            width = width if drafter is not None else 0
            verify_slope = None
            warmup_ms = 0.0
            if drafter is not None:
                costs = yield from session_warmup.warm_up(self, kind, drafter, width,
                                                          context=len(prompt), cancel=cancel)
                warmup_ms = self.last_warmup_s * 1e3
                drafter.step_cost = costs["draft_cost"]
                verify_slope = costs["verify_slope"]
            rule = (choose_rule(req.sampling, stochastic_draft=plugin.stochastic)
                    if plugin.proposes else RULE_NONE)
            source = proposals.for_drafter(drafter, rule=rule, width=width,
                                           lookup=req.lookup_assist, policy=self.width_policy,
                                           verify_slope=verify_slope,
                                           budget=self._node_budget(req, drafter,
                                                                    verify_slope))
        fresh = make_cache(self.target)
        lease = (ConversationLease(self.prompt_cache, self.target, prompt, fresh, drafter, width,
                                   req.conversation, keep_taps=self._keep_taps(req))
                 if req.reuse_cache else Lease(fresh))
        loop = RoundLoop(target=self.target, source=source, prompt=prompt, request=req,
                         cancel=cancel, lease=lease, fallback=fallback, context=limit,
                         after_prompt=(lambda cache, n: session_warmup.reach(self, cache, n,
                                                                             cancel))
                         if drafter is not None else None)
        for ev in loop.run():
            if isinstance(ev, DoneEvent) and members:
                self.keep_auto_record(members)
            if isinstance(ev, DoneEvent) and (warmup_ms or left_out):
                ev = dataclasses.replace(ev, timings=dataclasses.replace(
                    ev.timings, warmup_ms=round(warmup_ms + ev.timings.warmup_ms, 1),
                    sources_left_out=left_out))
            yield ev

    # -- the pair's record (auto speculation), kept between runs --------------------------
    def restore_auto_record(self, names: list[str]) -> None:
        """Start the sources ``names`` from what was kept for their drafters on this target
        (once per drafter while the pair is loaded)."""
        if self._record_target is None:
            return
        keys = self.auto_memory.unread({n: self.drafter_key(n) for n in names})
        if keys:
            self.auto_memory.restore(self.auto_records.load(self._record_target), keys)

    def kept_auto_rounds(self) -> dict[str, float]:
        """How many recent rounds the kept record of this target holds, per way of sampling
        (a copy's length classes not counted twice)."""
        if self._record_target is None:
            return {}
        kept = self.auto_records.load(self._record_target)
        return {regime: round(sum(ev.rounds for key, ev in sources.items() if "#" not in key), 1)
                for regime, sources in kept.items()}

    def keep_auto_record(self, names: list[str]) -> None:
        """Keep the record of the sources ``names`` on disk (after each auto request)."""
        if self._record_target is not None:
            self.auto_records.save(self._record_target, self.auto_memory.export(
                {n: self.drafter_key(n) for n in names}))

    def _node_budget(self, req: GenerationRequest, drafter: Drafter | None,
                     verify_slope: float | None) -> NodeBudget | None:
        """Trees where the request asks for them and the drafter has a distribution."""
        if req.trees == "off" or drafter is None:
            return None
        if req.trees == "flat":  # drafters that size their own trees (Medusa) price them so too
            drafter.set_verify_costs({n: tree_build.flat_cost()(n, 0) for n in range(1, 65)})
            return NodeBudget(tree_build.flat_cost())
        assert self.target is not None
        again = tree_build.second_pass(self.target, make_cache(self.target))
        cal = self.calibration
        cost = (cal.verify_cost if cal is not None else tree_build.linear_cost(
            verify_slope if verify_slope is not None else DEFAULT_VERIFY_SLOPE))
        return NodeBudget(cost, tree_overhead=tree_build.ONE_PASS_OVERHEAD, second_pass=again,
                          patient=True)

    def _keep_taps(self, req: GenerationRequest) -> TapRequest | None:
        """The target rows a kept conversation keeps: those of every drafter that reads the
        target's hidden states and can run with what is loaded, so a later turn of that kind
        rebuilds its drafter from them instead of reading the conversation again."""
        if self._tap_union is None:
            union_taps: TapRequest | None = None
            for plugin in kinds.plugins():
                if not plugin.needs_taps or self.unavailable(plugin.name, req):
                    continue
                try:
                    drafter = self.make_drafter(dataclasses.replace(req, draft_kind=plugin.name))
                except DraftPairError:
                    continue
                union_taps = lease_union(union_taps, drafter.taps if drafter else None)
            self._tap_union = union_taps or TapRequest()
        return None if self._tap_union.empty else self._tap_union

    def recalibrate(
        self, kind_names: list[str], *, budget_s: float = CALIBRATE_BUDGET_S,
        cancel: threading.Event | None = None,
    ) -> Generator[StatusEvent, None, Calibration | None]:
        """Measure this machine again for the loaded target and the drafters of ``kind_names``
        (those that run a model), keep the table and return it (None when stopped)."""
        return session_warmup.recalibrate(self, kind_names, budget_s=budget_s, cancel=cancel)

    def drafter_key(self, kind: str) -> str:
        """The calibration's name for the drafter of ``kind`` that is loaded now."""
        return session_warmup.loaded_drafter_key(self, kind)


def _read_config(folder: Path) -> dict[str, Any]:
    """A folder's config.json, or {} when it has none or it is unreadable (the loader then
    says so plainly)."""
    import json

    try:
        config = json.loads((folder / "config.json").read_text())
    except (OSError, ValueError):
        return {}
    return config if isinstance(config, dict) else {}


def _not_supported(plugin: kinds.KindPlugin) -> str:
    return f"drafting with {plugin.label} is not supported by this version of DraftPair yet"
