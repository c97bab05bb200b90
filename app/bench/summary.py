"""Turn raw runs into the summary: speedups, verdicts, peer ratios, identity, goals."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from app import kinds as draft_kinds
from app.bench.measure import paired_speedup
from app.bench.records import OFF, PEER_PLAIN, PEER_SPEC, BenchReport, RunRecord
from app.bench.relative import relative_rows
from app.bench.stats import MIN_RUNS, TOO_FEW, compare_tokens, median, verdict

# (name, what, baseline condition, compared condition, task kinds or None for all, target)
PLAIN_GOAL = ("plain-vs-mlx-lm", "plain decoding through DraftPair vs mlx_lm.stream_generate",
              PEER_PLAIN, OFF, None, 0.98)
_BASELINES = {"off": OFF, "peer": PEER_SPEC}  # a kind's goal is against plain or the peer


Goal = tuple[str, str, str, str, tuple[str, ...] | None, float]


def goals() -> tuple[Goal, ...]:
    """The plain goal, then each draft kind's own (``KindPlugin.bench_goals``)."""
    out: list[Goal] = [PLAIN_GOAL]
    for p in draft_kinds.drafting():
        for suffix, what, base, task_kinds, target in p.bench_goals:
            out.append((f"{p.name}-{suffix}", what, _BASELINES[base], p.name, task_kinds,
                        target))
    return tuple(out)


def _cells(runs: Sequence[RunRecord]) -> dict[tuple[str, float, str], list[RunRecord]]:
    cells: dict[tuple[str, float, str], list[RunRecord]] = {}
    for r in runs:
        cells.setdefault((r.task_id, r.temperature, r.condition), []).append(r)
    for lst in cells.values():
        lst.sort(key=lambda r: r.repeat)
    return cells


def _timing(runs: Sequence[RunRecord], key: str) -> float | None:
    return median([float(r.timings[key]) for r in runs if r.timings.get(key) is not None])


MATCH_TOLERANCE_CORES = 0.1


def matched_ratios(on: Sequence[RunRecord], off: Sequence[RunRecord]) -> list[float]:
    """Per-repeat ratios of the repeats where both runs met about the same background load
    (mean other-process load within MATCH_TOLERANCE_CORES): a diagnostic for busy machines,
    never used by the verdict."""
    base = {r.repeat: r for r in off}
    out = []
    for r in on:
        b = base.get(r.repeat)
        if b is None or b.decode_tps <= 0:
            continue
        la = r.contention.get("mean_other_cores")
        lb = b.contention.get("mean_other_cores")
        if la is not None and lb is not None and abs(la - lb) < MATCH_TOLERANCE_CORES:
            out.append(r.decode_tps / b.decode_tps)
    return out


def compare(on: Sequence[RunRecord], off: Sequence[RunRecord]) -> dict[str, Any]:
    """Speedup (median of paired decode-rate ratios) and verdict of ``on`` against ``off``."""
    a = [r.decode_tps for r in on]
    b = [r.decode_tps for r in off]
    matched = matched_ratios(on, off)
    return {"speedup": paired_speedup(a, b), "verdict": verdict(a, b),
            "runs": len(a), "baseline_runs": len(b),
            "matched_ratios": [round(x, 4) for x in matched]}


def _sources(runs: list[RunRecord]) -> dict[str, dict[str, int]]:
    """Per source, summed over the runs: what auto speculation chose ({} for other kinds)."""
    out: dict[str, dict[str, int]] = {}
    for r in runs:
        for name, counts in (r.timings.get("sources") or {}).items():
            row = out.setdefault(name, {})
            for key, n in counts.items():
                row[key] = row.get(key, 0) + int(n)
    return out


def summarize(report: BenchReport) -> dict[str, Any]:
    runs = report.measured()
    cells = _cells(runs)
    shared = bool(report.config.get("shared_draws", False))  # same seed, same reply
    task_kind = {t["id"]: t["kind"] for t in report.tasks}
    rows: list[dict[str, Any]] = []
    identity: list[dict[str, Any]] = []
    peer_rows: list[dict[str, Any]] = []
    names = [c.name for c in report.conditions]
    keys = sorted({(k[0], k[1]) for k in cells}, key=lambda k: ([t["id"] for t in report.tasks]
                                                               .index(k[0]), k[1]))
    for task_id, temp in keys:
        off = cells.get((task_id, temp, OFF), [])
        for name in names:
            mine = cells.get((task_id, temp, name), [])
            if not mine:
                continue
            row = {
                "task_id": task_id, "task_kind": task_kind.get(task_id, "?"),
                "temperature": temp, "condition": name, "engine": mine[0].engine,
                "width": mine[0].width,
                "decode_tps": median([r.decode_tps for r in mine]),
                "prompt_per_second": _timing(mine, "prompt_per_second"),
                "ttft_ms": _timing(mine, "ttft_ms"),
                "output_n": median([r.output_n for r in mine]),
                "accept_len_mean": _timing(mine, "accept_len_mean") if name != OFF else None,
                "acceptance_rate": _timing(mine, "acceptance_rate") if name != OFF else None,
                "tokens_per_verify": _timing(mine, "tokens_per_verify"),
                "flagged_runs": sum(r.flagged for r in mine),
                "finish_reasons": sorted({r.finish_reason for r in mine}),
                "identity_vs_off": None,
                "sources": _sources(mine),  # auto: per source rounds / drafted / accepted
            }
            row.update(compare(mine, off) if name != OFF else
                       {"speedup": 1.0, "verdict": "baseline", "runs": len(mine),
                        "baseline_runs": len(mine)})
            # a sampled reply is compared only where the seed decides it (shared draws,
            # DraftPair's own engine on both sides): each run against plain's of its seed
            sampled = temp > 0.0
            comparable = bool(off) and (not sampled or (
                shared and mine[0].engine == off[0].engine == "draftpair"))
            if comparable:
                if sampled:
                    plain = {r.seed: r for r in off}
                    pairs = [(r, plain[r.seed]) for r in mine if r.seed in plain]
                    if name != OFF and pairs:
                        first = next(((a, b) for a, b in pairs if a.tokens != b.tokens),
                                     pairs[0])  # the first that differs, if one does
                        ident = compare_tokens(first[0].tokens, first[1].tokens)
                        same = sum(a.tokens == b.tokens for a, b in pairs)
                        extra = {"compared_by": "tokens", "seeds_identical": same,
                                 "seeds": len(pairs)}
                        identity.append({"task_id": task_id, "condition": name,
                                         "compared_to": OFF, **ident.to_dict(), **extra})
                        row["identity_vs_off"] = {**ident.to_dict(), **extra}
                elif name == OFF:
                    if len(off) >= 2:
                        ident = compare_tokens(off[0].tokens, off[1].tokens)
                        identity.append({"task_id": task_id, "condition": OFF,
                                         "compared_to": "off (second run)", **ident.to_dict()})
                        row["identity_vs_off"] = ident.to_dict()
                else:
                    # an endpoint that returns no token ids is compared by its text
                    by_text = not mine[0].tokens and mine[0].engine == "remote"
                    ident = (compare_tokens(mine[0].text, off[0].text) if by_text
                             else compare_tokens(mine[0].tokens, off[0].tokens))
                    extra = {"compared_by": "text" if by_text else "tokens"}
                    identity.append({"task_id": task_id, "condition": name,
                                     "compared_to": OFF, **ident.to_dict(), **extra})
                    row["identity_vs_off"] = {**ident.to_dict(), **extra}
            rows.append(row)
        peers = [(p.name, PEER_SPEC) for p in draft_kinds.plugins() if p.mlx_lm_peer]
        for ours, theirs in ((OFF, PEER_PLAIN), *peers):
            a = cells.get((task_id, temp, ours), [])
            b = cells.get((task_id, temp, theirs), [])
            if a and b:
                peer_rows.append({"task_id": task_id, "task_kind": task_kind.get(task_id, "?"),
                                  "temperature": temp, "draftpair": ours, "peer": theirs,
                                  "draftpair_tps": median([r.decode_tps for r in a]),
                                  "peer_tps": median([r.decode_tps for r in b]),
                                  **compare(a, b)})
    return {
        "rows": rows,
        "relative": relative_rows(cells, report.conditions, rows, compare),
        "peer_rows": peer_rows,
        "identity": identity,
        "goals": _goals(cells, task_kind),
        "contention": {
            "threshold_cores": report.config.get("contention_threshold"),
            "runs": len(report.runs),
            "flagged_measured": sum(r.flagged for r in runs),
            "superseded": sum(r.superseded for r in report.runs),
            "persistent": report.persistent_contention,
            "errors": [{"task_id": r.task_id, "condition": r.condition, "error": r.error}
                       for r in report.runs if r.error],
        },
        "method": {
            "speedup": "median over repeats of decode tok/s ratios (predicted_per_second), "
                       "each repeat's runs back to back; prefill excluded",
            "verdict": "faster if every run beats every baseline run, slower if every run "
                       "loses, else no clear difference; too few runs below "
                       f"{MIN_RUNS} runs a side",
            "matched": "diagnostic only: median ratio over repeats whose two runs met the "
                       f"same background load (within {MATCH_TOLERANCE_CORES} cores)",
        },
    }


def _goals(cells: dict[tuple[str, float, str], list[RunRecord]],
           task_kind: dict[str, str]) -> list[dict[str, Any]]:
    out = []
    for name, what, base, cond, kinds, target in goals():
        per_task = []
        for (task_id, temp, c), mine in cells.items():
            if c != cond or (kinds and task_kind.get(task_id) not in kinds):
                continue
            other = cells.get((task_id, temp, base), [])
            if not other:
                continue
            cmp = compare(mine, other)
            if cmp["speedup"] is not None:
                per_task.append({"task_id": task_id, "temperature": temp, **cmp})
        figure = median([p["speedup"] for p in per_task])
        too_few = any(p["verdict"] == TOO_FEW for p in per_task)
        matched = [x for p in per_task for x in p["matched_ratios"]]
        out.append({
            "name": name, "what": what, "target": target, "figure": figure,
            "matched_figure": median(matched), "matched_n": len(matched),
            "met": None if figure is None or too_few else figure >= target,
            "too_few_runs": too_few,
            "per_task": sorted(per_task, key=lambda p: (p["task_id"], p["temperature"])),
        })
    return out
