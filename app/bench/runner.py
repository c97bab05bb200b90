"""Run the suite: every task x temperature x condition, N repeats, interleaved, judged.

Method:
- conditions: ``off`` (DraftPair plain), each draft kind the pair supports at its width, the
  peer rows ``mlx-lm plain`` / ``mlx-lm speculative`` on the same loaded weights, and a
  ``remote HOST:PORT`` row per endpoint given (any OpenAI-compatible server, fed the task's
  chat messages; its figures are what it reports, unknown ones stay None);
- the measurement rules of ``app.bench.measure`` (Compare follows them too): one warm-up
  request per condition and temperature before measuring (not recorded); for each task and
  temperature the repeats run back to back, conditions interleaved and the order reversed
  every other repeat (A B C, C B A, ...), so drift of the machine hits every condition alike
  and each repeat's ratio compares neighbours in time;
- each measured request starts with fresh drafter state (the engine builds the drafter per
  request) and the same seed for every condition of a repeat;
- the contention sampler flags runs that overlapped other work; a flagged run is re-run (up to
  ``max_reruns`` times) and the flagged original is kept in the raw data as ``superseded``.
  After ``PERSISTENT_RUNS`` flagged runs in a row the load is persistent (a re-run would meet
  it again): re-runs stop, runs stay flagged and the report says so.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from typing import Any

from app import kinds
from app.bench.measure import WARMUP_TOKENS, ContentionMeter, plan
from app.bench.records import OFF, PEER_PLAIN, PEER_SPEC, BenchReport, Condition, RunRecord
from app.bench.suite import Task, load_suite, select_tasks
from app.errors import DraftPairError


def draft_kinds() -> tuple[str, ...]:
    """The kinds the bench measures by default: every registered kind that proposes."""
    return tuple(p.name for p in kinds.drafting())


def default_widths() -> dict[str, int]:
    return {p.name: p.default_width for p in kinds.drafting()}


QUICK_MAX_TOKENS = 32
PERSISTENT_RUNS = 3  # flagged runs in a row after which re-runs stop


@dataclass(frozen=True)
class BenchConfig:
    model: str = "demo"
    draft_model: str | None = None  # None: the shipped demo draft when model is "demo"
    kinds: tuple[str, ...] | None = None  # None: every kind the pair supports
    runs: int = 3
    temperatures: tuple[float, ...] = (0.0, 1.0)
    widths: dict[str, int] = field(default_factory=default_widths)
    task_ids: tuple[str, ...] | None = None
    suite_path: str | None = None
    quick: bool = False
    max_tokens: int | None = None  # overrides every task's max_tokens
    peers: bool = True
    contention_threshold: float = 0.5  # cores used by other processes
    contention_interval_s: float = 2.0
    max_reruns: int = 1
    seed: int = 0
    remotes: tuple[str, ...] = ()  # OpenAI-compatible endpoints, one bench row each
    remote_api_key: str | None = None
    lookup_assist: bool = True  # model drafters: prompt lookup copies the context beside them
    # each model drafter also as trees in these modes ("on", "flat"), one row each
    trees: tuple[str, ...] = ()
    # temperature > 0: the same seed draws the same reply with every kind (False: independent
    # draws, model drafters checked by rejection sampling)
    shared_draws: bool = True

    @classmethod
    def quick_preset(cls, **overrides: Any) -> BenchConfig:
        """About a minute on the demo pair: the quick tasks, T=0, one run, short outputs,
        DraftPair's own rows only (the mlx-lm peer rows are the Full bench's).

        Flagged runs are reported but not re-run (a re-run would double the time)."""
        base: dict[str, Any] = dict(
            quick=True, runs=1, temperatures=(0.0,), max_tokens=QUICK_MAX_TOKENS, max_reruns=0,
            peers=False,
        )
        base.update({k: v for k, v in overrides.items() if v is not None})
        return cls(**base)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


@dataclass(frozen=True)
class Progress:
    done: int
    total: int
    message: str
    # after each measured run: the summary rows of what is measured so far (fresh copies, so
    # another thread may keep them), which a view shows while the bench goes on
    rows: tuple[dict[str, Any], ...] | None = None

    @property
    def fraction(self) -> float:
        return self.done / self.total if self.total else 1.0


ProgressFn = Callable[[Progress], None]


def run_bench(
    config: BenchConfig,
    *,
    progress: ProgressFn | None = None,
    cancel: threading.Event | None = None,
    session: Any = None,
) -> BenchReport:
    """Run the benchmark and return its report (summary included).

    Call it on the thread that owns MLX. ``session``: an ``app.engine.session.Session``
    with the target (and draft) already loaded; otherwise one is built from
    ``config.model`` / ``config.draft_model``. ``cancel`` is checked between runs and inside
    DraftPair requests; a cancelled bench returns what it measured with ``cancelled=True``.
    Raises ``DraftPairError`` (one sentence) for a bad suite, model or option.
    """
    from app.bench.contention import ContentionSampler
    from app.bench.environment import collect_environment
    from app.bench.summary import summarize

    cancel = cancel or threading.Event()
    say = progress or (lambda p: None)
    if config.runs < 1:
        raise DraftPairError("The number of runs must be at least 1.")
    if not config.temperatures or any(t < 0 for t in config.temperatures):
        raise DraftPairError("Temperatures must be zero or positive.")
    tasks = select_tasks(
        load_suite(config.suite_path), ids=list(config.task_ids or []), quick=config.quick
    )
    started_at = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
    t0 = time.perf_counter()
    if session is None:
        say(Progress(0, 1, f"loading {config.model}"))
        session = load_session(config)
    conditions, skipped = plan_conditions(session, config)
    prompts = {t.id: _encode(session, t) for t in tasks}
    chats = {t.id: t.messages for t in tasks}
    environment = collect_environment({"target": session.target, "draft": session.draft})
    if any(c.engine == "draftpair" and kinds.get(c.draft_kind).combines for c in conditions):
        # auto starts from the pair's record kept by earlier runs: said, so a reader knows
        environment["auto_record_rounds"] = session.kept_auto_rounds()
    report = BenchReport(
        config=config.to_dict(),
        environment=environment,
        tasks=[
            {"id": t.id, "kind": t.kind, "title": t.title, "prompt_n": len(prompts[t.id]),
             "max_tokens": _max_tokens(config, t)}
            for t in tasks
        ],
        conditions=conditions,
        runs=[],
        skipped=skipped,
        started_at=started_at,
    )
    n_warm = len(conditions) * len(config.temperatures)
    total = n_warm + len(tasks) * len(config.temperatures) * config.runs * len(conditions)
    done = 0
    with ContentionSampler(
        interval_s=config.contention_interval_s, threshold_cores=config.contention_threshold
    ) as sampler:
        meter = ContentionMeter(sampler=sampler)
        # warm-up: first-use costs (allocations, verify widths) are not measured
        warm_id = min(prompts, key=lambda i: len(prompts[i]))
        warm_prompt = prompts[warm_id]
        streak = 0  # measured runs in a row flagged for contention
        for temp in config.temperatures:
            for warm in plan(conditions, 0):
                cond = warm.condition
                if cancel.is_set():
                    break
                say(Progress(done, total, f"warm-up {cond.name} T={temp:g}"))
                _execute(session, cond, warm_prompt, WARMUP_TOKENS, temp, config.seed, cancel,
                         chats[warm_id], config.remote_api_key, shared=config.shared_draws)
                done += 1
        for task in tasks:
            for temp in config.temperatures:
                for planned in plan(conditions, config.runs, warmup=False):
                    cond, rep = planned.condition, planned.repeat
                    if cancel.is_set():
                        report.cancelled = True
                        break
                    say(Progress(done, total, f"{task.id} T={temp:g} run {rep + 1}/"
                                 f"{config.runs}: {cond.name}"))
                    # under persistent background load a re-run only doubles the time
                    reruns = 0 if streak >= PERSISTENT_RUNS else config.max_reruns
                    for attempt in range(reruns + 1):
                        meter.start()
                        out = _execute(session, cond, prompts[task.id],
                                       _max_tokens(config, task), temp,
                                       config.seed + rep, cancel, chats[task.id],
                                       config.remote_api_key, shared=config.shared_draws)
                        verdict = meter.stop()
                        last = attempt == reruns or cancel.is_set()
                        record = RunRecord(
                            task_id=task.id, task_kind=task.kind, condition=cond.name,
                            engine=cond.engine, draft_kind=cond.draft_kind,
                            width=cond.width, temperature=temp, repeat=rep,
                            seed=config.seed + rep, contention=verdict.to_dict(),
                            superseded=verdict.flagged and not last, attempt=attempt,
                            **out,
                        )
                        report.runs.append(record)
                        if not record.superseded:
                            break
                        report.reruns += 1
                        say(Progress(done, total, f"{task.id}: {cond.name} overlapped "
                                     f"other work ({verdict.peak_other_cores:.1f} cores), "
                                     "re-running"))
                    streak = streak + 1 if report.runs[-1].flagged else 0
                    if streak == PERSISTENT_RUNS and config.max_reruns:
                        report.persistent_contention = True
                        say(Progress(done, total, "other processes keep the CPU busy: "
                                     "flagged runs are no longer re-run"))
                    if out["finish_reason"] == "cancelled":
                        report.cancelled = True
                    done += 1
                    measured = report.runs[-1]
                    say(Progress(done, total, f"{task.id} T={temp:g}: {cond.name} "
                                 f"{measured.decode_tps:.1f} tok/s",
                                 rows=tuple(summarize(report)["rows"])))
        report.contention_timeline = [
            {**w, "t0": round(w["t0"] - t0, 2), "t1": round(w["t1"] - t0, 2)}
            for w in sampler.timeline()
        ]
    report.cancelled = report.cancelled or cancel.is_set()
    report.duration_s = time.perf_counter() - t0
    report.summary = summarize(report)
    say(Progress(total, total, "done"))
    return report


def _max_tokens(config: BenchConfig, task: Task) -> int:
    return config.max_tokens or task.max_tokens


def load_session(config: BenchConfig) -> Any:
    """A Session with ``config``'s target loaded, and its draft folder when a kind measured
    needs one (call it on the thread that owns MLX)."""
    from app.engine.session import Session

    session = Session()
    session.load_target(config.model)
    draft = resolve_draft(config)
    wanted = config.kinds if config.kinds is not None else draft_kinds()
    # (a kind that combines the others, auto, uses the draft folder too)
    wants_draft = any(kinds.get(k).needs_draft_folder or kinds.get(k).combines
                      for k in wanted if k in kinds.names())
    if draft is not None and wants_draft:
        session.load_draft(draft)
    return session


def resolve_draft(config: BenchConfig) -> str | None:
    if config.draft_model:
        return config.draft_model
    from app.checkpoints import builtins

    target = builtins.get(config.model)
    draft = builtins.get(target.default_draft) if target and target.default_draft else None
    path = draft.present() if draft is not None else None
    return str(path) if path is not None else None


def plan_conditions(session: Any, config: BenchConfig) -> tuple[list[Condition], dict[str, str]]:
    """The conditions to measure, and the kinds left out with the reason."""
    available = session.available_kinds()
    wanted = config.kinds if config.kinds is not None else draft_kinds()
    unknown = [k for k in wanted if k not in available]
    if unknown:
        raise DraftPairError(
            f"Unknown draft kind {unknown[0]!r}; choose from {', '.join(draft_kinds())}."
        )
    conditions = [Condition(OFF, "draftpair", kinds.OFF, 0)]
    skipped: dict[str, str] = {}
    for kind in wanted:
        plugin = kinds.get(kind)
        if not plugin.proposes:
            continue
        reason = available.get(kind)
        if reason:
            skipped[kind] = reason
            continue
        width = int(config.widths.get(kind, plugin.default_width))
        conditions.append(Condition(kind, "draftpair", kind, width,
                                    lookup_assist=config.lookup_assist))
        if plugin.grows_trees or plugin.shapes_trees:
            conditions.extend(Condition(f"{kind} trees {mode}", "draftpair", kind, width,
                                        lookup_assist=config.lookup_assist, trees=mode)
                              for mode in config.trees if mode != "off")
    if config.peers:
        conditions.append(Condition(PEER_PLAIN, "mlx-lm", kinds.OFF, 0))
        for peer in [c for c in conditions if kinds.get(c.draft_kind).mlx_lm_peer][:1]:
            conditions.append(Condition(PEER_SPEC, "mlx-lm", peer.draft_kind, peer.width))
    for url in config.remotes:
        from app.remote.client import parse_url

        conditions.append(Condition(f"remote {parse_url(url).label}", "remote", "remote", 0,
                                    url=url))
    return conditions, skipped


def _encode(session: Any, task: Task) -> list[int]:
    from app.engine.events import GenerationRequest

    return session.encode(GenerationRequest(messages=task.messages))


def _execute(
    session: Any,
    cond: Condition,
    prompt: list[int],
    max_tokens: int,
    temperature: float,
    seed: int,
    cancel: threading.Event,
    messages: Any = None,
    api_key: str | None = None,
    *,
    shared: bool = True,
) -> dict[str, Any]:
    """One request; returns the RunRecord fields that describe its outcome (``shared``:
    shared draws at temperature > 0)."""
    if cond.engine == "mlx-lm":
        return _execute_peer(session, cond, prompt, max_tokens, temperature, seed)
    if cond.engine == "remote":
        return _execute_remote(cond, messages, max_tokens, temperature, seed, cancel, api_key)
    from app.engine.events import DoneEvent, GenerationRequest, SamplingParams

    request = GenerationRequest(
        prompt_tokens=tuple(prompt),
        draft_kind=cond.draft_kind,
        draft_width=cond.width or None,
        sampling=SamplingParams(temperature=temperature, seed=seed, shared_draws=shared),
        max_tokens=max_tokens,
        allow_fallback=False,
        memory_interval_s=3600.0,
        lookup_assist=cond.lookup_assist,
        trees=cond.trees,
    )
    done: DoneEvent | None = None
    for ev in session.generate(request, cancel=cancel):
        if isinstance(ev, DoneEvent):
            done = ev
    assert done is not None
    return {
        "finish_reason": done.finish_reason,
        "output_n": len(done.token_ids),
        "tokens": tuple(done.token_ids),
        "text": done.text,
        "timings": done.timings.to_dict(),
        "error": done.error,
        "rounds_n": len(done.rounds),
        "round_profile": round_profile(done),
    }


def round_profile(done: Any) -> dict[str, Any]:
    """Where the decode time went: rounds by proposal size (median draft/verify/rollback ms,
    mean accepted) and the plain steps (their mean includes detokenizing and event overhead)."""
    import statistics

    t = done.timings
    by_k: dict[int, list[Any]] = {}
    for r in done.rounds:
        by_k.setdefault(r.proposed, []).append(r)
    spec_ms = sum(r.draft_ms + r.verify_ms + r.rollback_ms for r in done.rounds)
    plain_steps = max(t.verify_passes - len(done.rounds), 0)
    return {
        "rounds": {
            str(k): {
                "n": len(rs),
                "draft_ms": round(statistics.median(r.draft_ms for r in rs), 2),
                "verify_ms": round(statistics.median(r.verify_ms for r in rs), 2),
                "rollback_ms": round(statistics.median(r.rollback_ms for r in rs), 3),
                "accepted_mean": round(statistics.mean(r.accepted for r in rs), 3),
            }
            for k, rs in sorted(by_k.items())
        },
        "plain_steps": plain_steps,
        "plain_step_ms": round((t.predicted_ms - spec_ms) / plain_steps, 2) if plain_steps else None,
    }


def _execute_peer(
    session: Any, cond: Condition, prompt: list[int], max_tokens: int, temperature: float,
    seed: int,
) -> dict[str, Any]:
    from app.bench.peers import run_mlx_lm

    target = session.target
    draft = session.draft.model if kinds.get(cond.draft_kind).mlx_lm_peer else None
    try:
        res = run_mlx_lm(
            model=target.model, tokenizer=target.tokenizer, prompt=prompt,
            max_tokens=max_tokens, temperature=temperature, seed=seed,
            draft_model=draft, num_draft_tokens=cond.width or 1,
        )
    except Exception as exc:  # a peer failing must not sink the whole bench
        from app.errors import user_message

        return {"finish_reason": "error", "output_n": 0, "tokens": (), "text": "",
                "timings": {}, "error": user_message(exc), "rounds_n": 0}
    text = target.tokenizer.decode(list(res.tokens))
    return {
        "finish_reason": res.finish_reason,
        "output_n": res.predicted_n,
        "tokens": res.tokens,
        "text": text,
        "timings": res.timings(draft_kind=cond.draft_kind, width=cond.width),
        "error": None,
        "rounds_n": 0,
    }


def _execute_remote(
    cond: Condition, messages: Any, max_tokens: int, temperature: float, seed: int,
    cancel: threading.Event, api_key: str | None,
) -> dict[str, Any]:
    """One request to an endpoint (the task's chat messages; the server applies its template)."""
    from app.remote.client import RemoteRequest, stream_remote
    from app.remote.results import RemoteDone

    request = RemoteRequest(url=cond.url, messages=tuple(messages), max_tokens=max_tokens,
                            temperature=temperature, seed=seed, api_key=api_key)
    done: RemoteDone | None = None
    for ev in stream_remote(request, cancel=cancel):
        if isinstance(ev, RemoteDone):
            done = ev
    assert done is not None
    return {
        "finish_reason": done.finish_reason,
        "output_n": done.timings.predicted_n or len(done.token_ids),
        "tokens": tuple(done.token_ids),
        "text": done.text,
        "timings": done.timings.to_dict(),
        "error": done.error,
        "rounds_n": 0,
    }
