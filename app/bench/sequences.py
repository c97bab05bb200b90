"""Multi-request tasks: a sequence of requests sent one after another to the same session, the
way an agent or an editor sends them (a file edited over five requests, ten tool calls of one
schema, a JSON list extended item by item).

Conditions, per request of a sequence and interleaved (the order reversed every other request):
- ``off``: plain decoding;
- prompt lookup: n-grams of this request only;
- suffix decoding, **first use**: its store of earlier replies emptied before every request, so
  it sees this request's text only;
- suffix decoding, **warmed**: its store kept across the sequence's requests (empty at the
  start of each sequence), so request 5 may copy from replies 1-4.
First use and warmed are reported side by side, never mixed: a kept store makes later requests
look fast and says nothing about a first use. Each request of every condition starts from the
same prompt (the sequence's scripted request, not an earlier reply), so outputs can be compared.

The file (``resources/bench/sequences.json``, format 1)::

    {"format": 1, "sequences": [{"id": "tool-calls-10", "kind": "chat", "title": "...",
      "max_tokens": 64, "requests": [[{"role": "user", "content": "..."}], ...]}]}
"""

from __future__ import annotations

import json
import statistics
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from app.bench.suite import MAX_TOKENS_LIMIT, ROLES, TASK_KINDS, SuiteError
from app.errors import DraftPairError

OFF = "off"
FIRST_USE = "first use"
WARMED = "warmed"


@dataclass(frozen=True)
class SequenceTask:
    id: str
    kind: str
    title: str
    max_tokens: int
    requests: tuple[tuple[dict[str, str], ...], ...]


@dataclass(frozen=True)
class SeqCondition:
    name: str  # what the report calls it
    draft_kind: str
    store: str | None = None  # FIRST_USE | WARMED for suffix decoding, else None


@dataclass
class SequenceReport:
    config: dict[str, Any]
    conditions: list[SeqCondition]
    runs: list[dict[str, Any]] = field(default_factory=list)
    summary: list[dict[str, Any]] = field(default_factory=list)
    duration_s: float = 0.0
    cancelled: bool = False

    def to_dict(self) -> dict[str, Any]:
        return {"config": self.config, "conditions": [c.__dict__ for c in self.conditions],
                "runs": self.runs, "summary": self.summary, "duration_s": self.duration_s,
                "cancelled": self.cancelled}


def default_sequences_file() -> Path:
    from app.resources import resource_path

    return resource_path("bench") / "sequences.json"


def load_sequences(path: str | Path | None = None) -> list[SequenceTask]:
    """The sequences in ``path`` (default: the shipped file); ``SuiteError`` names a problem."""
    file = Path(path) if path is not None else default_sequences_file()
    try:
        data = json.loads(file.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise SuiteError(f"No multi-request tasks at {file}.") from None
    except (OSError, ValueError) as exc:
        raise SuiteError(f"The multi-request tasks in {file} cannot be read: {exc}") from None
    raw = data.get("sequences") if isinstance(data, dict) and data.get("format") == 1 else None
    if not isinstance(raw, list) or not raw:
        raise SuiteError(f"{file} is not a format-1 file of multi-request tasks.")
    return [_parse(item, i, file) for i, item in enumerate(raw)]


def _parse(item: Any, i: int, file: Path) -> SequenceTask:
    where = f"sequence {i + 1} of {file.name}"
    if not isinstance(item, dict):
        raise SuiteError(f"The {where} is not an object.")
    sid, kind = item.get("id"), item.get("kind")
    if not isinstance(sid, str) or not sid:
        raise SuiteError(f"The {where} has no id.")
    if kind not in TASK_KINDS:
        raise SuiteError(f"Sequence {sid!r}: kind must be one of {', '.join(TASK_KINDS)}.")
    max_tokens = item.get("max_tokens")
    if not isinstance(max_tokens, int) or not 1 <= max_tokens <= MAX_TOKENS_LIMIT:
        raise SuiteError(f"Sequence {sid!r}: max_tokens must be 1..{MAX_TOKENS_LIMIT}.")
    requests = item.get("requests")
    if not isinstance(requests, list) or len(requests) < 2:
        raise SuiteError(f"Sequence {sid!r} needs at least two requests.")
    parsed = []
    for j, messages in enumerate(requests):
        ok = isinstance(messages, list) and messages and all(
            isinstance(m, dict) and m.get("role") in ROLES and isinstance(m.get("content"), str)
            for m in messages)
        if not ok:
            raise SuiteError(f"Sequence {sid!r}, request {j + 1}: a list of messages with a "
                             f"role ({', '.join(ROLES)}) and text content is needed.")
        parsed.append(tuple({"role": m["role"], "content": m["content"]} for m in messages))
    return SequenceTask(sid, kind, str(item.get("title") or sid), max_tokens, tuple(parsed))


def default_kinds() -> list[str]:
    """The kinds that need no model of their own (they all copy text): prompt lookup, suffix
    decoding, and whatever else proposes without weights."""
    from app import kinds

    return [p.name for p in kinds.drafting() if not p.needs_draft_folder and not p.needs_taps]


def plan(kind_names: list[str]) -> list[SeqCondition]:
    """Plain decoding, then each kind; a kind that keeps earlier replies twice, first use and
    warmed."""
    from app import kinds

    conditions = [SeqCondition(OFF, kinds.OFF)]
    for name in kind_names:
        p = kinds.get(name)
        if not p.proposes:
            continue
        if p.keeps_replies:
            conditions.append(SeqCondition(f"{p.label}, {FIRST_USE}", p.name, FIRST_USE))
            conditions.append(SeqCondition(f"{p.label}, {WARMED}", p.name, WARMED))
        else:
            conditions.append(SeqCondition(p.label, p.name))
    return conditions


def run_sequences(
    session: Any,
    tasks: list[SequenceTask],
    conditions: list[SeqCondition],
    *,
    temperatures: tuple[float, ...] = (0.0,),
    runs: int = 1,
    max_tokens: int | None = None,
    seed: int = 0,
    progress: Callable[[str], None] | None = None,
    cancel: threading.Event | None = None,
) -> SequenceReport:
    """Every sequence x temperature x run, its requests in order, conditions interleaved."""
    from app.engine.events import DoneEvent, GenerationRequest, SamplingParams

    say = progress or (lambda msg: None)
    cancel = cancel or threading.Event()
    memory = session.replies
    report = SequenceReport(
        config={"tasks": [t.id for t in tasks], "temperatures": list(temperatures),
                "runs": runs, "max_tokens": max_tokens, "seed": seed},
        conditions=conditions)
    t0 = time.perf_counter()
    for task in tasks:
        for temp in temperatures:
            for rep in range(runs):
                scope = f"bench/{task.id}/{temp:g}/{rep}"
                scopes = {c.name: f"{scope}/{c.name}" for c in conditions if c.store}
                for s in scopes.values():
                    memory.forget(s)
                for i, messages in enumerate(task.requests):
                    order = conditions if i % 2 == 0 else list(reversed(conditions))
                    for cond in order:
                        if cancel.is_set():
                            report.cancelled = True
                            break
                        say(f"{task.id} request {i + 1}/{len(task.requests)} T={temp:g}: "
                            f"{cond.name}")
                        if cond.store == FIRST_USE:
                            memory.forget(scopes[cond.name])
                        request = GenerationRequest(
                            messages=messages, draft_kind=cond.draft_kind,
                            sampling=SamplingParams(temperature=temp, seed=seed + rep),
                            max_tokens=max_tokens or task.max_tokens, allow_fallback=False,
                            memory_interval_s=3600.0, reply_scope=scopes.get(cond.name))
                        done = None
                        for ev in session.generate(request, cancel=cancel):
                            if isinstance(ev, DoneEvent):
                                done = ev
                        if done is None or done.finish_reason == "error":
                            raise DraftPairError(
                                f"{task.id} request {i + 1} ({cond.name}) failed: "
                                f"{done.error if done else 'no result'}")
                        t = done.timings
                        report.runs.append({
                            "task": task.id, "temperature": temp, "repeat": rep, "request": i,
                            "condition": cond.name, "tokens": list(done.token_ids),
                            "predicted_n": t.predicted_n, "predicted_ms": t.predicted_ms,
                            "draft_n": t.draft_n, "draft_n_accepted": t.draft_n_accepted,
                            "tokens_per_verify": t.tokens_per_verify,
                        })
    report.duration_s = time.perf_counter() - t0
    report.summary = summarize(report)
    return report


def summarize(report: SequenceReport) -> list[dict[str, Any]]:
    """Per sequence, temperature and condition: tokens/s over the whole sequence (its tokens
    over its decoding time), the speedup over plain in the same run (median over runs), and
    how many requests gave exactly plain's tokens."""
    rows: list[dict[str, Any]] = []
    keys = sorted({(r["task"], r["temperature"]) for r in report.runs},
                  key=lambda k: (report.config["tasks"].index(k[0]), k[1]))
    for task, temp in keys:
        runs = [r for r in report.runs if r["task"] == task and r["temperature"] == temp]
        reps = sorted({r["repeat"] for r in runs})

        def tps(cond: str, rep: int, runs: list[dict[str, Any]] = runs) -> float:
            sel = [r for r in runs if r["condition"] == cond and r["repeat"] == rep]
            ms = sum(r["predicted_ms"] for r in sel)
            return sum(r["predicted_n"] for r in sel) / (ms / 1e3) if ms > 0 else 0.0

        plain = {(r["repeat"], r["request"]): r["tokens"] for r in runs if r["condition"] == OFF}
        for cond in report.conditions:
            sel = [r for r in runs if r["condition"] == cond.name]
            if not sel:
                continue
            speedups = [tps(cond.name, rep) / tps(OFF, rep) for rep in reps if tps(OFF, rep)]
            rows.append({
                "task": task, "temperature": temp, "condition": cond.name,
                "tokens_per_s": round(statistics.median(tps(cond.name, rep) for rep in reps), 2),
                "speedup": round(statistics.median(speedups), 3) if speedups else None,
                "identical": sum(r["tokens"] == plain.get((r["repeat"], r["request"]))
                                 for r in sel),
                "requests": len(sel),
                "accepted": sum(r["draft_n_accepted"] for r in sel),
                "drafted": sum(r["draft_n"] for r in sel),
            })
    return rows


def render_markdown(report: SequenceReport) -> str:
    lines = ["# Multi-request tasks", "",
             "Each sequence's requests sent in order to one session. Suffix decoding *first use*: "
             "its store of earlier replies emptied before every request; *warmed*: kept across "
             "the sequence's requests (empty at its start). Speedup: tokens/s over the whole "
             "sequence against plain decoding in the same run.", "",
             "| task | T | condition | tok/s | speedup | identical to plain | accepted/drafted |",
             "|---|---|---|---|---|---|---|"]
    for r in report.summary:
        speed = f"{r['speedup']:.2f}x" if r["speedup"] is not None else "-"
        same = f"{r['identical']}/{r['requests']}" if r["temperature"] == 0 else "(sampled)"
        lines.append(f"| {r['task']} | {r['temperature']:g} | {r['condition']} | "
                     f"{r['tokens_per_s']:.1f} | {speed} | {same} | "
                     f"{r['accepted']}/{r['drafted']} |")
    lines += ["", f"Duration: {report.duration_s:.0f} s."]
    return "\n".join(lines) + "\n"
