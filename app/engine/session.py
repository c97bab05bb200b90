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
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import mlx.core as mx

from app import kinds
from app.checkpoints.resolve import resolve_model
from app.engine import context as limits
from app.engine import rollback
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
from app.engine.models import LoadedModel, load_model, make_cache
from app.engine.prompt_cache import PromptCache
from app.engine.reuse import Turn
from app.engine.validation import validate
from app.engine.verify import choose_rule
from app.errors import DraftPairError, ModelLoadError, user_message


class Session:
    def __init__(self, *, precision: str = "auto"):
        self.precision = precision
        self.target: LoadedModel | None = None
        # what each kind loaded for this target (a draft model, a head, a drafter network),
        # by kind name: only the Session writes it, through the kind's plugin
        self.assets: dict[str, Any] = {}
        self.draft_kind: str | None = None  # the kind whose draft folder is loaded
        self._warm: set[tuple[str, int]] = set()
        self._costs: dict[tuple[str, int], dict[str, float]] = {}
        self.prompt_cache = PromptCache()  # kept conversation states (reuse_cache requests)
        self.dropped_turns = 0  # turns the last request left out to fit the context

    @property
    def draft(self) -> LoadedModel | None:
        """The loaded draft folder when it is a model of its own (name, path, weights)."""
        held = self.assets.get(self.draft_kind) if self.draft_kind else None
        return held if isinstance(held, LoadedModel) else None

    # -- loading ----------------------------------------------------------------------
    def load_target(self, name_or_path: str | Path) -> LoadedModel:
        self.unload()
        self.target = load_model(resolve_model(name_or_path), precision=self.precision)
        rollback.for_target(self.target)  # the rewind strategy is chosen at load
        return self.target

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
        self._forget_warm(plugin.name)
        self.prompt_cache.clear()
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
        self._forget_warm(plugin.name)
        self.prompt_cache.clear()
        return held

    def unload_draft(self) -> None:
        """Drop every draft folder's weights (a head in the target's own files stays)."""
        self.prompt_cache.clear()
        for plugin in kinds.plugins():
            if plugin.needs_draft_folder:
                self.assets.pop(plugin.name, None)
                self._forget_warm(plugin.name)
        self.draft_kind = None

    def _forget_warm(self, kind: str) -> None:
        self._warm = {w for w in self._warm if w[0] != kind}

    def unload(self) -> None:
        self.prompt_cache.clear()
        self.target = None
        self.draft_kind = None
        self.assets.clear()
        self._warm.clear()
        mx.clear_cache()

    def context(self, request: GenerationRequest | None = None,
                kind: str | None = None) -> DrafterContext | None:
        """What ``kind``'s plugin reads (the target, the request, that kind's assets)."""
        if self.target is None:
            return None
        request = request or GenerationRequest()
        return DrafterContext(target=self.target, request=request,
                              asset=self.assets.get(kind or request.draft_kind))

    def unavailable(self, kind: str, request: GenerationRequest | None = None) -> str | None:
        """Why ``kind`` cannot run with what is loaded (None if it can); loads nothing."""
        plugin = kinds.get(kind)
        ctx = self.context(request, kind)
        if ctx is None:
            return "no target model is loaded"
        if not plugin.proposes:
            return None
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
        if not plugin.proposes or self.target is None:
            return None
        if self.assets.get(plugin.name) is None:
            ctx = self.context(request, plugin.name)
            assert ctx is not None
            held = plugin.load_assets(ctx)
            if held is not None:
                self.assets[plugin.name] = held
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

    def encode(self, request: GenerationRequest) -> list[int]:
        """The prompt's token ids; refuses (or, for chats, trims by the request's policy) a
        prompt that does not fit the model's context, before any model work."""
        assert self.target is not None
        self.dropped_turns = 0
        limit = self.context_length()
        if request.messages is not None and request.prompt_tokens is None:
            tokens, self.dropped_turns = limits.fit_messages(
                request.messages, lambda m: self._encode(request, m), limit,
                policy=request.context_policy)
            return tokens
        tokens = self._encode(request, None)
        limits.check(len(tokens), limit)
        return tokens

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
                return list(tok.apply_chat_template(messages, add_generation_prompt=True))
            text = "\n".join(m["content"] for m in messages)
            return list(tok.encode(text))
        if request.prompt is None:
            raise DraftPairError("Nothing to generate from: give a prompt or messages.")
        return list(tok.encode(request.prompt))

    # -- generation ---------------------------------------------------------------------
    def generate(
        self, request: GenerationRequest, *, cancel: threading.Event | None = None
    ) -> Iterator[Event]:
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
        validate(req)  # every problem of the request, named, before any work
        prompt = self.encode(req)
        if not prompt:
            raise DraftPairError("The prompt is empty.")
        limit = self.context_length()
        if limit is not None and len(prompt) + req.max_tokens > limit:
            req = dataclasses.replace(req, max_tokens=limit - len(prompt))
            yield NoticeEvent("context-full", f"The reply can be at most {req.max_tokens} tokens: "
                              "the model's context is full after that.")
        if self.dropped_turns:
            yield NoticeEvent("context-trimmed", f"The {self.dropped_turns} oldest messages were "
                              "left out so the conversation fits the model's context.")
        kind = req.draft_kind
        plugin = kinds.get(kind)
        fallback: str | None = None
        reason = self.unavailable(kind, req) if plugin.proposes else None
        width = req.draft_width or plugin.default_width
        if reason is None and plugin.proposes:
            problem = rollback.for_target(self.target).problem
            if problem:
                reason = f"speculation needs to rewind the model's cache, but {problem}"
        if reason is not None:
            if not req.allow_fallback:
                raise DraftPairError(f"Speculation ({kind}) cannot run: {reason.rstrip('.')}.")
            fallback = f"{kind} unavailable: {reason}"
            yield NoticeEvent("fallback", f"Speculation is off for this reply: {reason}.")
            kind, plugin = kinds.OFF, kinds.get(kinds.OFF)
        drafter = self.make_drafter(req) if plugin.proposes else None
        width = width if drafter is not None else 0
        if drafter is not None and (kind, width) not in self._warm:
            yield StatusEvent("warmup", f"preparing verify widths 1..{width + 1}")
            self._costs[(kind, width)] = self._warmup(drafter, width)
            self._warm.add((kind, width))
        verify_slope = None
        if drafter is not None and (kind, width) in self._costs:
            costs = self._costs[(kind, width)]
            drafter.step_cost = costs["draft_cost"]
            verify_slope = costs["verify_slope"]
        rule = (choose_rule(req.sampling, stochastic_draft=plugin.stochastic)
                if plugin.proposes else RULE_NONE)
        turn = Turn(self.prompt_cache if req.reuse_cache else None, self.target, prompt,
                    make_cache(self.target), drafter, width, req.conversation)
        loop = RoundLoop(
            target=self.target,
            drafter=drafter,
            prompt=prompt,
            request=req,
            rule=rule,
            width=width,
            cancel=cancel,
            fallback=fallback,
            verify_slope=verify_slope,
            cache=turn.cache,
            reused=turn.cache_n,
            context=limit,
        )
        yield from turn.run(turn.prepare(loop))

    def _warmup(self, drafter: Drafter, width: int) -> dict[str, float]:
        """Run the target once at every verify width so first-use costs are not timed, and
        measure what a wider verify and a draft step cost relative to one target step."""
        assert self.target is not None
        started = time.perf_counter()
        rb = rollback.for_target(self.target)
        cache = make_cache(self.target)
        mx.eval(self.target.model(mx.zeros((1, 8), mx.uint32), cache=cache))
        step_ms: dict[int, float] = {}
        for n in [*range(1, width + 2), 1, width + 1]:
            tokens = mx.zeros((n,), mx.uint32)
            t0 = time.perf_counter()
            with rb.verifying(cache):
                out = self.target.model(tokens[None], cache=cache)
            mx.eval(out)
            ms = (time.perf_counter() - t0) * 1e3
            step_ms[n] = min(step_ms.get(n, ms), ms)
            rb.rewind(cache, tokens, keep=0)
        drafter.warmup(list(range(1, width + 1)))
        self.last_warmup_s = time.perf_counter() - started
        one = max(step_ms[1], 1e-3)
        slope = (step_ms[width + 1] / one - 1.0) / width if width else 0.0
        draft_ms = getattr(drafter, "draft_step_ms", None) or 0.0
        return {"verify_slope": slope, "draft_cost": draft_ms / one}


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

