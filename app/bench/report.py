"""Write a report: report.json (raw runs + summary), runs.csv, report.md, speedup.png."""

from __future__ import annotations

import csv
import io
import json
from pathlib import Path
from typing import Any

from app.bench.records import BenchReport
from app.fileio import atomic_write_bytes
from app.kinds.shares import detail_line, shares_line

CSV_TIMINGS = (
    "prompt_n", "cache_n", "prompt_ms", "prompt_per_second", "predicted_n", "predicted_ms",
    "predicted_per_second", "ttft_ms", "draft_n", "draft_n_accepted", "draft_rounds",
    "accept_len_mean", "acceptance_rate", "tokens_per_verify", "verify_passes", "draft_ms",
    "verify_ms", "rollback_ms", "peak_memory_bytes", "acceptance_rule", "fallback",
)
CSV_RUN = (
    "task_id", "task_kind", "condition", "engine", "draft_kind", "width", "temperature",
    "repeat", "attempt", "seed", "finish_reason", "output_n", "superseded", "error",
)


def write_report(report: BenchReport, out_dir: str | Path) -> dict[str, Path]:
    """Write the four files into ``out_dir`` (created if needed); returns their paths."""
    from app.bench.chart import render_speedup_chart

    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    files = {
        "json": (out / "report.json", json.dumps(report.to_dict(), indent=1).encode()),
        "csv": (out / "runs.csv", runs_csv(report).encode()),
        "md": (out / "report.md", markdown(report).encode()),
        "png": (out / "speedup.png", render_speedup_chart(report.summary)),
    }
    for path, data in files.values():
        atomic_write_bytes(path, data)
    return {k: p for k, (p, _) in files.items()}


def runs_csv(report: BenchReport) -> str:
    buf = io.StringIO()
    w = csv.writer(buf, lineterminator="\n")
    w.writerow([*CSV_RUN, "decode_tps", "other_cores_mean", "other_cores_peak",
                "contention_flagged", *CSV_TIMINGS])
    for r in report.runs:
        d = r.to_dict()
        w.writerow([
            *(d[k] for k in CSV_RUN), _num(r.decode_tps),
            r.contention.get("mean_other_cores"), r.contention.get("peak_other_cores"),
            r.flagged, *(_num(r.timings.get(k)) for k in CSV_TIMINGS),
        ])
    return buf.getvalue()


def _num(v: Any) -> Any:
    return round(v, 4) if isinstance(v, float) else v


def _f(v: float | None, fmt: str = ".2f", suffix: str = "", missing: str = "-") -> str:
    return missing if v is None else f"{v:{fmt}}{suffix}"


def _identity(d: dict[str, Any] | None) -> str:
    if not d:
        return "-"
    if "seeds" in d:  # sampled: every seed's reply against plain's of the same seed
        n, m = d["seeds_identical"], d["seeds"]
        if n == m:
            return f"identical ({m} seed{'s' if m != 1 else ''})"
        return f"{n}/{m} seeds identical; diverges @{d['first_divergence']}"
    if d["identical"]:
        return f"identical ({d['len_a']})"
    return f"diverges @{d['first_divergence']} ({d['len_a']}/{d['len_b']})"


def markdown(report: BenchReport) -> str:
    s = report.summary
    env = report.environment
    cfg = report.config
    lines = ["# DraftPair benchmark", ""]
    if report.cancelled:
        lines += ["**Cancelled before the end: partial results.**", ""]
    ck = env.get("checkpoints", {})
    pair = ck.get("target", {}).get("name", "?")
    if "draft" in ck:
        pair += f" + draft {ck['draft']['name']}"
    lines += [
        f"Pair: {pair}. Started {report.started_at}, {report.duration_s:.0f} s. "
        f"Runs per condition: {cfg['runs']}; temperatures: "
        f"{', '.join(f'{t:g}' for t in cfg['temperatures'])}"
        + ("; quick mode (short outputs)." if cfg.get("quick") else "."),
        "",
        "Speedup = median over repeats of the decode-rate ratio to DraftPair's plain decoding "
        "(tokens after prefill / time from end of prompt processing to the last token). "
        "Verdict (fixed in advance): *faster* if every run beat every plain run, *slower* if "
        "every run lost, else *no clear difference*; with fewer than two runs per condition "
        "it is *too few runs* (no verdict and no recommendation). Accepted/round = accepted draft tokens "
        "per verify round (bonus excluded). "
        + ("Model drafters (draft model, MTP, DFlash) ran with prompt lookup beside them: where "
           "the reply repeats the context, the lookup's copy is proposed instead."
           if cfg.get("lookup_assist", True) else
           "Model drafters ran alone (no prompt lookup beside them)."),
        "",
    ]
    kept = report.environment.get("auto_record_rounds")
    if kept is not None:
        lines += ["Auto speculation started from the pair's record kept by earlier runs on "
                  "this machine: " + (", ".join(f"{rounds:g} recent rounds ({regime})"
                                                for regime, rounds in sorted(kept.items()))
                                      or "none (every source began from the prior)")
                  + "; it learns on through the bench, as it does in use.", ""]
    ct = s.get("contention", {})
    if ct.get("flagged_measured") or ct.get("superseded"):
        lines += [
            f"> Contention: {ct['flagged_measured']} measured run(s) overlapped other work "
            f"(> {ct['threshold_cores']} cores used by other processes); "
            f"{ct['superseded']} flagged run(s) were re-run"
            + ("; the load was persistent, so re-runs stopped" if ct.get("persistent") else "")
            + ". Ratios come from interleaved runs that met the same load; absolute tok/s "
            "are lower than on a quiet machine.",
            "",
        ]
    if report.skipped:
        lines += ["Not measured: " + "; ".join(f"{k} ({v})" for k, v in report.skipped.items()),
                  ""]
    for temp in cfg["temperatures"]:
        rows = [r for r in s["rows"] if r["temperature"] == temp]
        if not rows:
            continue
        lines += [f"## Temperature {temp:g}", "",
                  "| task | kind | condition | tok/s | speedup | verdict | accepted/round | "
                  "tokens/verify | prefill tok/s | TTFT ms | identity vs off |",
                  "|---|---|---|---:|---:|---|---:|---:|---:|---:|---|"]
        for r in rows:
            verdict = r["verdict"] + (f" (n={r['runs']})" if r["condition"] != "off" else "")
            if r["verdict"] == "too few runs" and r["speedup"] is not None:
                verdict = f"too few runs (n={r['runs']}; one measurement)"
            flag = " ⚠" if r["flagged_runs"] else ""
            na = "unknown" if r["engine"] == "remote" else "-"  # not reported by the endpoint
            lines.append(
                f"| {r['task_id']} | {r['task_kind']} | {r['condition']}{flag} | "
                f"{_f(r['decode_tps'], '.1f')} | {_f(r['speedup'], '.2f', 'x')} | {verdict} | "
                f"{_f(r['accept_len_mean'], missing=na)} | {_f(r['tokens_per_verify'], missing=na)} | "
                f"{_f(r['prompt_per_second'], '.0f', missing=na)} | {_f(r['ttft_ms'], '.0f')} | "
                f"{_identity(r['identity_vs_off'])} |"
            )
        lines.append("")
    mixed = [r for r in s["rows"] if r.get("sources")]
    if mixed:
        lines += ["## What auto speculation chose", "",
                  "Share of the steps each source took (rounds of its proposals, or plain "
                  "steps), and its accepted/drafted tokens, summed over the runs.", "",
                  "| task | T | shares | per source |", "|---|---:|---|---|"]
        for r in mixed:
            lines.append(f"| {r['task_id']} | {r['temperature']:g} | "
                         f"{shares_line(r['sources'])} | {detail_line(r['sources'])} |")
        lines.append("")
    if s.get("relative"):
        lines += ["## Against what it replaces", "",
                  "Trees against the same drafter's chains; auto against the single kind that "
                  "was fastest on that task and temperature in this run. Ratio = median of the "
                  "per-repeat ratios of decode rates; verdict as above.", "",
                  "| task | T | condition | against | ratio | verdict |",
                  "|---|---:|---|---|---:|---|"]
        for p in s["relative"]:
            lines.append(f"| {p['task_id']} | {p['temperature']:g} | {p['condition']} | "
                         f"{p['against']} | {_f(p['speedup'], '.2f', 'x')} | "
                         f"{p['verdict']} (n={p['runs']}) |")
        lines.append("")
    if s.get("peer_rows"):
        lines += ["## DraftPair vs mlx-lm (same pair, prompts and width)", "",
                  "| task | T | DraftPair | mlx-lm | DraftPair tok/s | mlx-lm tok/s | ratio | "
                  "verdict |", "|---|---:|---|---|---:|---:|---:|---|"]
        for p in s["peer_rows"]:
            lines.append(
                f"| {p['task_id']} | {p['temperature']:g} | {p['draftpair']} | {p['peer']} | "
                f"{_f(p['draftpair_tps'], '.1f')} | {_f(p['peer_tps'], '.1f')} | "
                f"{_f(p['speedup'], '.2f', 'x')} | {p['verdict']} |"
            )
        lines.append("")
    lines += ["## Goals", "",
              "Measured = median over tasks and temperatures of the speedups above. "
              "Load-matched = median ratio over the repeats whose two runs met the same "
              "background load (diagnostic for busy machines)."
              + (" The full-model row had prompt lookup beside the draft, mlx-lm's speculative "
                 "row has not: `--no-lookup-assist` compares the draft alone."
                 if cfg.get("lookup_assist", True) and cfg.get("peers") else ""), "",
              "| goal | target | measured | met | load-matched (pairs) |",
              "|---|---:|---:|---|---:|"]
    for g in s.get("goals", []):
        met = ("too few runs" if g.get("too_few_runs") else "-") if g["met"] is None else (
            "yes" if g["met"] else "**no**")
        lines.append(f"| {g['what']} | {g['target']:.2f}x | {_f(g['figure'], '.2f', 'x')} | {met} "
                     f"| {_f(g.get('matched_figure'), '.2f', 'x')} ({g.get('matched_n', 0)}) |")
    lines.append("")
    try:
        from app.bench.recommend import recommend_drafters

        recs = recommend_drafters(report, temperature=cfg["temperatures"][0])
    except Exception:  # a recommendation must never block writing the report
        recs = {}
    if recs:
        lines += ["## Recommended drafter per task kind", ""]
        for kind, rec in sorted(recs.items()):
            lines.append(f"- **{kind}**: {rec.draft_kind} — {rec.reason}")
        lines.append("")
    lines += ["## Environment", "", "```", json.dumps(env, indent=1), "```", ""]
    return "\n".join(lines)
