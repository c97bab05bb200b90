"""Soak run: many randomized requests through one Session, looking for anything that breaks.

Public API:
    SoakConfig(requests=1000, seed=0, max_tokens=48, cancel_rate=0.1, invalid_rate=0.05)
    run_soak(session, config, *, progress=None) -> SoakResult
    SoakResult: counts, crashes, greedy mismatches, invariant violations, memory at start/end;
                to_dict(), format_text(), ok

Every kind the loaded pair can run, temperatures 0..1.5 with the full sampling chain, stop
strings cut from real outputs (so they fall across token boundaries), cancels before the
first token and mid-stream, edge sizes (1 token, tiny and long prompts, wide and narrow
widths) and deliberately invalid requests (which validation must refuse). Each greedy request
that ran to the end is compared token for token with plain decoding of the same request.
Not a timed test: it reports counts and memory, never speed.
"""

from __future__ import annotations

import random
import threading
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field, replace

from app import kinds
from app.engine.events import DoneEvent, GenerationRequest, SamplingParams, TokenEvent
from app.engine.validation import problems

PROMPTS = (
    "Hi",
    "?",
    "Fix the typos: Teh cat sat on teh mat and looked at teh dog.",
    "Write a Python function that returns the squares of a list of numbers.",
    "Explain in two sentences why the sky is blue.",
    "List the days of the week, one per line.",
    "Übersetze: Guten Morgen, wie geht es dir? 你好，世界。 😀",
    "def add(a, b):\n    return a + b\n\n# now write subtract in the same style\n",
    "Repeat after me: the quick brown fox jumps over the lazy dog. " * 12,
    "Count from 1 to 30: 1, 2, 3,",
)


@dataclass
class SoakConfig:
    requests: int = 1000
    seed: int = 0
    max_tokens: int = 48
    cancel_rate: float = 0.1
    invalid_rate: float = 0.05
    greedy_rate: float = 0.5


@dataclass
class SoakResult:
    requests: int = 0
    kinds: Counter = field(default_factory=Counter)
    finish: Counter = field(default_factory=Counter)
    refused: int = 0  # invalid requests that validation refused (expected)
    crashes: list[str] = field(default_factory=list)  # exceptions or error finishes
    mismatches: list[str] = field(default_factory=list)  # greedy output != plain
    violations: list[str] = field(default_factory=list)  # broken event-stream invariants
    greedy_compared: int = 0
    tokens: int = 0
    memory: dict[str, int] = field(default_factory=dict)
    rss_trace: list[int] = field(default_factory=list)  # RSS after each tenth of the run
    elapsed_s: float = 0.0
    interrupted: bool = False  # stopped with Ctrl-C before all requests ran

    @property
    def ok(self) -> bool:
        return not (self.crashes or self.mismatches or self.violations)

    def to_dict(self) -> dict:
        return {
            "requests": self.requests, "kinds": dict(self.kinds), "finish": dict(self.finish),
            "refused_invalid": self.refused, "crashes": self.crashes,
            "greedy_mismatches": self.mismatches, "violations": self.violations,
            "greedy_compared": self.greedy_compared, "tokens": self.tokens,
            "memory": self.memory, "rss_trace_mib": [round(x / 2**20, 1) for x in self.rss_trace],
            "elapsed_s": round(self.elapsed_s, 1), "interrupted": self.interrupted, "ok": self.ok,
        }  # fmt: skip

    def format_text(self) -> str:
        m = self.memory
        mib = lambda k: f"{m.get(k, 0) / 2**20:.1f} MiB"  # noqa: E731
        lines = [
            f"{self.requests} requests" + (" (interrupted)" if self.interrupted else "")
            + f" in {self.elapsed_s:.0f} s, {self.tokens} tokens; "
            f"kinds {dict(self.kinds)}; finish {dict(self.finish)}",
            f"crashes {len(self.crashes)}, greedy outputs different from plain "
            f"{len(self.mismatches)} of {self.greedy_compared} compared, invariant violations "
            f"{len(self.violations)}, invalid requests refused {self.refused}",
            f"MLX peak {mib('mlx_peak_start')} -> {mib('mlx_peak_end')}, MLX active "
            f"{mib('mlx_active_start')} -> {mib('mlx_active_end')}, RSS {mib('rss_start')} -> "
            f"{mib('rss_end')}; RSS after each tenth (MiB): "
            + " ".join(f"{x / 2**20:.0f}" for x in self.rss_trace),
        ]
        for title, items in (("crash", self.crashes), ("mismatch", self.mismatches),
                             ("violation", self.violations)):
            lines += [f"  {title}: {x}" for x in items[:10]]
        return "\n".join(lines)


def _memory() -> dict[str, int]:
    import mlx.core as mx
    import psutil

    return {"mlx_peak": int(mx.get_peak_memory()), "mlx_active": int(mx.get_active_memory()),
            "mlx_cache": int(mx.get_cache_memory()),
            "rss": int(psutil.Process().memory_info().rss)}


def _invalid(rng: random.Random, base: GenerationRequest) -> GenerationRequest:
    s = base.sampling
    bad = rng.choice([
        lambda: replace(base, prompt="   "),
        lambda: replace(base, max_tokens=rng.choice([0, -5, 10**9])),
        lambda: replace(base, sampling=replace(s, temperature=float("nan"))),
        lambda: replace(base, sampling=replace(s, temperature=-1.0)),
        lambda: replace(base, sampling=replace(s, top_p=2.0)),
        lambda: replace(base, sampling=replace(s, top_k=-3)),
        lambda: replace(base, sampling=replace(s, min_p=1.5)),
        lambda: replace(base, sampling=replace(s, repetition_penalty=0.0)),
        lambda: replace(base, draft_width=0),
        lambda: replace(base, stop=("",)),
    ])
    return bad()


def _request(rng: random.Random, cfg: SoakConfig, kinds: list[str]) -> GenerationRequest:
    greedy = rng.random() < cfg.greedy_rate
    sampling = SamplingParams() if greedy else SamplingParams(
        temperature=rng.choice([0.3, 0.7, 1.0, 1.5]),
        top_p=rng.choice([1.0, 0.9, 0.5]),
        top_k=rng.choice([0, 0, 5, 40]),
        min_p=rng.choice([0.0, 0.0, 0.05]),
        repetition_penalty=rng.choice([1.0, 1.0, 1.1, 0.9]),
        seed=rng.randrange(2**31),
    )
    width = rng.choice([None, None, 1, 2, 4, 8, 16, 64])
    return GenerationRequest(
        prompt=rng.choice(PROMPTS), chat=rng.random() < 0.8,
        system_prompt=rng.choice([None, None, "Answer briefly."]),
        draft_kind=rng.choice(kinds), draft_width=width, sampling=sampling,
        max_tokens=rng.choice([1, 2, rng.randint(3, cfg.max_tokens), cfg.max_tokens]),
        ngram_min=rng.choice([1, 2]), ngram_max=rng.choice([2, 3, 4]),
        lookup_assist=rng.random() < 0.7,
    )


class _Runner:
    def __init__(self, session, result: SoakResult):
        self.session = session
        self.result = result
        self.plain: dict[tuple, DoneEvent | None] = {}

    def run(self, req: GenerationRequest, cancel_after: int | None = None, *,
            counted: bool = True) -> DoneEvent | None:
        cancel = threading.Event()
        if cancel_after is not None and cancel_after < 0:
            cancel.set()
        events = []
        tokens = 0
        try:
            for ev in self.session.generate(req, cancel=cancel):
                events.append(ev)
                if isinstance(ev, TokenEvent) and ev.token_id >= 0:
                    tokens += 1
                    if cancel_after is not None and tokens >= cancel_after:
                        cancel.set()
        except Exception as exc:  # noqa: BLE001 - the point: nothing may escape
            from app.errors import technical_detail

            self.result.crashes.append(f"{_describe(req)}: {technical_detail(exc)}")
            return None
        return self._check(req, events, cancel_after, counted)

    def _check(self, req, events, cancel_after, counted: bool) -> DoneEvent | None:
        done = [e for e in events if isinstance(e, DoneEvent)]
        what = _describe(req)
        if len(done) != 1 or events[-1] is not done[0]:
            self.result.violations.append(f"{what}: {len(done)} done events, not last")
            return done[-1] if done else None
        d = done[0]
        streamed = [e for e in events if isinstance(e, TokenEvent)]
        toks = [e for e in streamed if e.token_id >= 0]  # -1: the detokenizer's final flush
        if d.finish_reason == "error":
            self.result.crashes.append(f"{what}: {d.error}")
        elif len(d.token_ids) > req.max_tokens:
            self.result.violations.append(f"{what}: {len(d.token_ids)} > max {req.max_tokens}")
        elif [e.token_id for e in toks] != list(d.token_ids):
            self.result.violations.append(f"{what}: streamed tokens differ from the result")
        elif "".join(e.text for e in streamed) != d.text:
            self.result.violations.append(f"{what}: streamed text differs from the result")
        elif any(s in d.text for s in req.stop):
            self.result.violations.append(f"{what}: the output contains a stop string")
        elif cancel_after is None and d.finish_reason == "cancelled":
            self.result.violations.append(f"{what}: cancelled without a cancel")
        if counted:  # plain references and warm-ups are checked but not counted
            self.result.finish[d.finish_reason] += 1
            self.result.tokens += len(d.token_ids)
        return d

    def reference(self, req: GenerationRequest) -> DoneEvent | None:
        key = (req.prompt, req.chat, req.system_prompt, req.max_tokens, req.stop, req.sampling)
        if key not in self.plain:
            plain = replace(req, draft_kind=kinds.OFF, draft_width=None)
            self.plain[key] = self.run(plain, counted=False)
        return self.plain[key]


def _describe(req: GenerationRequest) -> str:
    s = req.sampling
    return (f"[{req.draft_kind} w={req.draft_width} T={s.temperature} top_p={s.top_p} "
            f"top_k={s.top_k} max={req.max_tokens} stop={list(req.stop)} "
            f"prompt={(req.prompt or '')[:24]!r}]")


def run_soak(session, config: SoakConfig,
             *, progress: Callable[[int, int, SoakResult], None] | None = None) -> SoakResult:
    """Run ``config.requests`` randomized requests through ``session`` (target loaded)."""
    rng = random.Random(config.seed)
    kinds = [k for k, why in session.available_kinds().items() if why is None]
    result = SoakResult()
    runner = _Runner(session, result)
    for kind in kinds:  # warm-up of every kind, greedy and sampled, not counted
        for t in (0.0, 0.7):
            runner.run(GenerationRequest(prompt="Hello", max_tokens=8, draft_kind=kind,
                                         sampling=SamplingParams(temperature=t, seed=0)),
                       counted=False)
    runner.plain.clear()
    start = _memory()
    result.memory.update({f"{k}_start": v for k, v in start.items()})
    t0 = time.perf_counter()
    try:
        _loop(runner, rng, config, kinds, result, progress)
    except KeyboardInterrupt:  # Ctrl-C: report what ran so far
        result.interrupted = True
    result.elapsed_s = time.perf_counter() - t0
    end = _memory()
    result.memory.update({f"{k}_end": v for k, v in end.items()})
    return result


def _loop(runner, rng, config, kinds, result, progress) -> None:
    for i in range(config.requests):
        req = _request(rng, config, kinds)
        if rng.random() < config.invalid_rate:
            bad = _invalid(rng, req)
            if problems(bad):
                result.refused += 1
            else:
                result.violations.append(f"{_describe(bad)}: validation let it through")
        else:
            _one(runner, rng, config, req, result)
        result.requests += 1
        if (i + 1) % max(config.requests // 10, 1) == 0:
            result.rss_trace.append(_memory()["rss"])
        if progress is not None:
            progress(i + 1, config.requests, result)


def _one(runner: _Runner, rng: random.Random, config: SoakConfig, req: GenerationRequest,
         result: SoakResult) -> None:
    greedy = req.sampling.greedy
    if rng.random() < 0.3:  # a stop string cut from the real output, across tokens
        ref = runner.reference(req)  # plain decoding of it (seeded when sampling)
        text = ref.text if ref is not None else ""
        if len(text) > 6:
            a = rng.randrange(1, len(text) - 4)
            cut = text[a: a + rng.randint(2, 5)]
            if cut.strip():
                req = replace(req, stop=(cut,))
    cancel_after = None
    if rng.random() < config.cancel_rate:
        cancel_after = rng.choice([-1, 1, 2, 5])
    result.kinds[req.draft_kind] += 1
    done = runner.run(req, cancel_after)
    if (done is not None and greedy and cancel_after is None and not kinds.is_off(req.draft_kind)
            and done.finish_reason in ("stop", "length")):
        ref = runner.reference(req)
        if ref is not None:
            result.greedy_compared += 1
            if list(ref.token_ids) != list(done.token_ids):
                result.mismatches.append(
                    f"{_describe(req)}: {len(done.token_ids)} tokens vs plain "
                    f"{len(ref.token_ids)}; first difference at "
                    f"{_first_difference(ref.token_ids, done.token_ids)}")


def _first_difference(a, b) -> int:
    for i, (x, y) in enumerate(zip(a, b, strict=False)):
        if x != y:
            return i
    return min(len(a), len(b))
