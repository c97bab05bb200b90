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

import threading
import time
from collections.abc import Iterator
from pathlib import Path

import mlx.core as mx

from app.checkpoints.resolve import resolve_model
from app.engine.decode import RoundLoop
from app.engine.drafters.base import Drafter
from app.engine.drafters.full_model import FullModelDrafter
from app.engine.drafters.prompt_lookup import PromptLookupDrafter
from app.engine.events import (
    DRAFT_KINDS,
    DoneEvent,
    Event,
    GenerationRequest,
    NoticeEvent,
    StatusEvent,
    Timings,
)
from app.engine.models import LoadedModel, load_model, make_cache, rollback_problem
from app.engine.verify import choose_rule
from app.errors import DraftPairError, ModelLoadError, user_message

IMPLEMENTED_KINDS = ("none", "full-model", "prompt-lookup")


class Session:
    def __init__(self, *, precision: str = "auto"):
        self.precision = precision
        self.target: LoadedModel | None = None
        self.draft: LoadedModel | None = None
        self._warm: set[tuple[str, int]] = set()
        self._costs: dict[tuple[str, int], dict[str, float]] = {}

    # -- loading ----------------------------------------------------------------------
    def load_target(self, name_or_path: str | Path) -> LoadedModel:
        self.unload()
        self.target = load_model(resolve_model(name_or_path), precision=self.precision)
        return self.target

    def load_draft(self, name_or_path: str | Path) -> LoadedModel:
        if self.target is None:
            raise ModelLoadError("Load a target model before its draft.")
        draft = load_model(resolve_model(name_or_path), precision=self.precision)
        problem = token_id_problem(self.target.path, draft.path)
        if problem:
            raise ModelLoadError(f"{draft.name} cannot draft for {self.target.name}: {problem}")
        self.draft = draft
        self._warm = {w for w in self._warm if w[0] != "full-model"}
        return draft

    def unload_draft(self) -> None:
        self.draft = None
        self._warm = {w for w in self._warm if w[0] != "full-model"}

    def unload(self) -> None:
        self.target = None
        self.draft = None
        self._warm.clear()
        mx.clear_cache()

    def available_kinds(self) -> dict[str, str | None]:
        """Each draft kind -> None if it can run with what is loaded, else the reason."""
        reasons: dict[str, str | None] = {k: None for k in DRAFT_KINDS}
        if self.target is None:
            return {k: "no target model is loaded" for k in DRAFT_KINDS}
        if self.draft is None:
            reasons["full-model"] = "no draft model is loaded"
        reasons["mtp"] = "MTP heads are not supported by this version of DraftPair yet"
        reasons["dflash"] = "DFlash drafters are not supported by this version of DraftPair yet"
        return reasons

    # -- prompts ----------------------------------------------------------------------
    def encode(self, request: GenerationRequest) -> list[int]:
        assert self.target is not None
        tok = self.target.tokenizer
        if request.prompt_tokens is not None:
            return [int(t) for t in request.prompt_tokens]
        messages: list[dict[str, str]] | None = None
        if request.messages is not None:
            messages = [dict(m) for m in request.messages]
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
        if req.draft_kind not in DRAFT_KINDS:
            raise DraftPairError(
                f"Unknown draft kind {req.draft_kind!r}; choose one of {', '.join(DRAFT_KINDS)}."
            )
        if req.max_tokens < 1:
            raise DraftPairError("max tokens must be at least 1.")
        prompt = self.encode(req)
        if not prompt:
            raise DraftPairError("The prompt is empty.")
        kind = req.draft_kind
        fallback: str | None = None
        reason = self.available_kinds().get(kind) if kind != "none" else None
        width = req.draft_width or _default_width(kind)
        cache = make_cache(self.target)  # checked here, then used by the loop
        if reason is None and kind != "none":
            needed = len(prompt) + req.max_tokens + width + 1
            problem = rollback_problem(cache, needed)
            if problem:
                reason = f"speculation needs to rewind the model's cache, but {problem}"
        if reason is not None:
            if not req.allow_fallback:
                raise DraftPairError(f"Speculation ({kind}) cannot run: {reason}.")
            fallback = f"{kind} unavailable: {reason}"
            yield NoticeEvent("fallback", f"Speculation is off for this reply: {reason}.")
            kind = "none"
        drafter = self._make_drafter(kind, req)
        width = width if drafter is not None else 0
        if drafter is not None and (kind, width) not in self._warm:
            yield StatusEvent("warmup", f"preparing verify widths 1..{width + 1}")
            self._costs[(kind, width)] = self._warmup(drafter, width)
            self._warm.add((kind, width))
        if isinstance(drafter, FullModelDrafter) and (kind, width) in self._costs:
            drafter.set_costs(**self._costs[(kind, width)])
        rule = choose_rule(req.sampling, stochastic_draft=kind == "full-model")
        loop = RoundLoop(
            target=self.target,
            drafter=drafter,
            prompt=prompt,
            request=req,
            rule=rule,
            width=width,
            cancel=cancel,
            fallback=fallback,
            cache=cache,
        )
        yield from loop.run()

    def _make_drafter(self, kind: str, req: GenerationRequest) -> Drafter | None:
        assert self.target is not None
        if kind == "none":
            return None
        if kind == "prompt-lookup":
            return PromptLookupDrafter(
                ngram_min=req.ngram_min, ngram_max=req.ngram_max, adaptive=req.adaptive
            )
        if kind == "full-model":
            assert self.draft is not None
            return FullModelDrafter(
                self.draft,
                target_vocab=self.target.vocab_size,
                adaptive=req.adaptive,
                max_width=req.draft_width or _default_width(kind),
            )
        raise DraftPairError(f"Draft kind {kind!r} is not implemented.")

    def _warmup(self, drafter: Drafter, width: int) -> dict[str, float]:
        """Run the target once at every verify width so first-use costs are not timed, and
        measure what a wider verify and a draft step cost relative to one target step."""
        assert self.target is not None
        started = time.perf_counter()
        cache = make_cache(self.target)
        mx.eval(self.target.model(mx.zeros((1, 8), mx.uint32), cache=cache))
        step_ms: dict[int, float] = {}
        for n in [*range(1, width + 2), 1, width + 1]:
            t0 = time.perf_counter()
            out = self.target.model(mx.zeros((1, n), mx.uint32), cache=cache)
            mx.eval(out)
            ms = (time.perf_counter() - t0) * 1e3
            step_ms[n] = min(step_ms.get(n, ms), ms)
            for c in cache:
                c.trim(n)
        drafter.warmup(list(range(1, width + 1)))
        self.last_warmup_s = time.perf_counter() - started
        one = max(step_ms[1], 1e-3)
        slope = (step_ms[width + 1] / one - 1.0) / width if width else 0.0
        draft_ms = getattr(drafter, "draft_step_ms", None) or 0.0
        return {"verify_slope": slope, "draft_cost": draft_ms / one}


def _default_width(kind: str) -> int:
    return {"full-model": 4, "prompt-lookup": 7, "mtp": 4, "dflash": 16}.get(kind, 0)


def token_id_problem(target: Path, draft: Path) -> str | None:
    """Why the draft's token ids would mean something else to the target (None if they agree).

    The pairing check is the one definition of tokenizer compatibility; only its tokenizer and
    vocabulary blockers stop a load (memory or cache findings are reported elsewhere).
    """
    from app.checkpoints.pairing import BLOCKER, check

    report = check(target, draft, kind="full-model")
    for f in report.findings:
        if f.severity == BLOCKER and f.code.split(".")[0] in ("tokenizer", "vocab"):
            return f"{f.message} ({f.detail})" if f.detail else f.message
    return None
