"""``draftpair bench``: run the task suite and write report.json, runs.csv, report.md and
speedup.png. Progress goes to stderr; the last stdout line names the report folder."""

from __future__ import annotations

import argparse
import sys
import threading
from pathlib import Path

from app.cli import kind_args


def _width_arg(text: str) -> tuple[str, int]:
    kind, _, value = text.partition("=")
    if kind not in kind_args.drafting_choices() or not value.isdigit() or not 1 <= int(value) <= 64:
        raise argparse.ArgumentTypeError(f"expected KIND=N with N in 1..64, got {text!r}")
    return kind, int(value)


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("bench", help="benchmark drafters on a task suite",
                       description="Measure which drafter pays on which task, on this machine.")
    p.add_argument("--out", required=True, type=Path, help="folder for the report files")
    p.add_argument("--quick", action="store_true",
                   help="about a minute: quick tasks, T=0, one run, short outputs, no mlx-lm "
                        "rows (add --peers for them)")
    p.add_argument("--model", default="demo", help="target: folder, store name or 'demo'")
    p.add_argument("--draft-model", help="draft folder (default: the demo draft, if shipped)")
    p.add_argument("--kinds", nargs="+", choices=kind_args.choices(), metavar="KIND",
                   help=f"draft kinds to measure: {kind_args.listing()} (default: all the pair "
                   "supports; the off kind alone: plain decoding and the peer rows only)")
    p.add_argument("--runs", type=int, help="measured runs per condition (default 3; quick 1)")
    p.add_argument("--temps", nargs="+", type=float, metavar="T",
                   help="temperatures (default 0 1.0; quick 0)")
    p.add_argument("--tasks", nargs="+", metavar="ID", help="task ids of the suite to run")
    p.add_argument("--suite", type=Path, help="a suite folder (default: the shipped one)")
    p.add_argument("--max-tokens", type=int, help="cap every task's output length")
    p.add_argument("--width", action="append", type=_width_arg, default=[], metavar="KIND=N",
                   help=f"proposals per round for a kind (default {kind_args.widths()})")
    peers = p.add_mutually_exclusive_group()
    peers.add_argument("--no-peers", dest="peers", action="store_false", default=None,
                       help="skip the mlx-lm peer rows (--quick skips them already)")
    peers.add_argument("--peers", dest="peers", action="store_true", default=None,
                       help="measure the mlx-lm peer rows also with --quick")
    p.add_argument("--contention-threshold", type=float, default=0.5, metavar="CORES",
                   help="flag a run when other processes used more than this many cores")
    p.add_argument("--reruns", type=int, help="re-runs of a flagged run (default 1; quick 0)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--independent-draws", dest="shared_draws", action="store_false",
                   help="at temperature > 0, draw each kind's reply independently (model "
                        "drafters checked by rejection sampling) instead of drawing the same "
                        "reply from the same seed with every kind")
    p.add_argument("--no-lookup-assist", dest="lookup_assist", action="store_false",
                   help="measure the model drafters alone, without prompt lookup copying "
                        "the context beside them")
    p.add_argument("--trees", nargs="+", default=[], choices=["on", "flat"], metavar="MODE",
                   help="also measure each model drafter (and suffix decoding, whose index "
                        "offers several continuations) with trees of candidates: 'on' "
                        "(where this computer's verify costs say they pay) or 'flat' (as if a "
                        "verify of up to 64 tokens cost one step), one row each")
    p.add_argument("--rollback", action="store_true",
                   help="only measure what rewinding the target costs per round, as a "
                   "fraction of a plain step (writes rollback.json)")
    p.add_argument("--sequences", action="store_true",
                   help="run the multi-request tasks instead (a sequence of requests to one "
                   "session: an edited file, tool calls, a growing list); kinds that keep "
                   "earlier replies are reported first use and warmed, apart (writes "
                   "sequences.md and sequences.json)")
    p.add_argument("--remote", action="append", default=[], metavar="URL",
                   help="also measure an OpenAI-compatible endpoint (draftpair serve, "
                   "llama-server, vLLM, LM Studio) as a row; repeatable")
    p.add_argument("--remote-api-key", default=None, metavar="KEY",
                   help="Bearer key for the --remote endpoints")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from app.cli import EXIT_USAGE, CliError

    if args.runs is not None and not 1 <= args.runs <= 100:
        raise CliError("--runs must be between 1 and 100", EXIT_USAGE)
    if args.temps is not None and any(t < 0 for t in args.temps):
        raise CliError("--temps must be >= 0", EXIT_USAGE)
    if args.max_tokens is not None and args.max_tokens < 1:
        raise CliError("--max-tokens must be at least 1", EXIT_USAGE)
    if args.reruns is not None and args.reruns < 0:
        raise CliError("--reruns must be >= 0", EXIT_USAGE)
    for url in args.remote:
        from app.errors import DraftPairError as _Bad
        from app.remote.client import parse_url

        try:
            parse_url(url)
        except _Bad as exc:
            raise CliError(f"--remote: {exc}", EXIT_USAGE) from None
    if args.out.exists() and not args.out.is_dir():
        raise CliError(f"--out {args.out} is a file; give a folder", EXIT_USAGE)

    if args.rollback:
        return _run_rollback(args)
    if args.sequences:
        return _run_sequences(args)
    from app.bench.report import write_report
    from app.bench.runner import BenchConfig, Progress, default_widths, run_bench
    from app.errors import DraftPairError

    widths = default_widths()
    widths.update(dict(args.width))
    options = dict(
        model=args.model,
        draft_model=args.draft_model,
        kinds=tuple(args.kinds) if args.kinds else None,
        runs=args.runs,
        temperatures=tuple(args.temps) if args.temps else None,
        widths=widths,
        task_ids=tuple(args.tasks) if args.tasks else None,
        suite_path=str(args.suite) if args.suite else None,
        max_tokens=args.max_tokens,
        peers=args.peers,
        contention_threshold=args.contention_threshold,
        max_reruns=args.reruns,
        seed=args.seed,
        remotes=tuple(args.remote),
        remote_api_key=args.remote_api_key,
        lookup_assist=args.lookup_assist,
        trees=tuple(args.trees),
        shared_draws=args.shared_draws,
    )
    if args.quick:
        config = BenchConfig.quick_preset(**options)
    else:
        config = BenchConfig(**{k: v for k, v in options.items() if v is not None})

    def progress(p: Progress) -> None:
        print(f"[{p.done:>3}/{p.total}] {p.message}", file=sys.stderr, flush=True)

    from app.cli import EXIT_INTERRUPTED
    from app.cli.interrupt import stop_on_ctrl_c

    cancel = threading.Event()
    try:
        with stop_on_ctrl_c(cancel):  # Ctrl+C stops the run in progress within one step
            report = run_bench(config, progress=progress, cancel=cancel)
    except KeyboardInterrupt:
        cancel.set()
        raise
    except DraftPairError as exc:
        raise CliError(str(exc), detail=exc.detail) from None
    paths = write_report(report, args.out)
    _print_summary(report)
    print(f"report: {paths['md']}" + (" (stopped with Ctrl+C: what was measured so far)"
                                      if cancel.is_set() else ""))
    return EXIT_INTERRUPTED if cancel.is_set() else 0


def _print_summary(report: object) -> None:
    summary = getattr(report, "summary", {})
    for g in summary.get("goals", []):
        if g["figure"] is None:
            continue
        status = ("too few runs to judge" if g.get("too_few_runs")
                  else "met" if g["met"] else "NOT met")
        print(f"goal {g['name']}: {g['figure']:.2f}x (target {g['target']:.2f}x) {status}",
              file=sys.stderr)
    flagged = summary.get("contention", {}).get("flagged_measured", 0)
    if flagged:
        print(f"note: {flagged} measured run(s) overlapped other work (see report.md)",
              file=sys.stderr)


def _run_rollback(args: argparse.Namespace) -> int:
    import json

    from app.bench.rollback_cost import measure
    from app.cli import CliError
    from app.engine.models import load_model
    from app.errors import DraftPairError

    width = next(iter(dict(args.width).values()), 4)  # the first --width KIND=N given
    try:
        target = load_model(args.model)
        cost = measure(target, width=width, seed=args.seed)
    except DraftPairError as exc:
        raise CliError(str(exc)) from None
    for line in cost.lines():
        print(line, file=sys.stderr)
    args.out.mkdir(parents=True, exist_ok=True)
    path = args.out / "rollback.json"
    path.write_text(json.dumps(cost.to_dict(), indent=2))
    print(f"report: {path}")
    return 0


def _run_sequences(args: argparse.Namespace) -> int:
    import json

    from app.bench.runner import BenchConfig, load_session
    from app.bench.sequences import (
        default_kinds,
        load_sequences,
        plan,
        render_markdown,
        run_sequences,
    )
    from app.cli import EXIT_INTERRUPTED, CliError
    from app.cli.interrupt import stop_on_ctrl_c
    from app.errors import DraftPairError

    kind_names = list(args.kinds) if args.kinds else default_kinds()
    cancel = threading.Event()
    try:
        tasks = load_sequences()
        if args.tasks:
            unknown = sorted(set(args.tasks) - {t.id for t in tasks})
            if unknown:
                raise CliError(f"--tasks: no multi-request task {unknown[0]!r}; choose from "
                               f"{', '.join(t.id for t in tasks)}")
            tasks = [t for t in tasks if t.id in args.tasks]
        session = load_session(BenchConfig(model=args.model, kinds=tuple(kind_names)))
        with stop_on_ctrl_c(cancel):
            report = run_sequences(
                session, tasks, plan(kind_names), temperatures=tuple(args.temps or (0.0,)),
                runs=args.runs or 1, max_tokens=args.max_tokens, seed=args.seed,
                progress=lambda msg: print(msg, file=sys.stderr, flush=True), cancel=cancel)
    except DraftPairError as exc:
        raise CliError(str(exc)) from None
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "sequences.json").write_text(json.dumps(report.to_dict(), indent=1))
    md = args.out / "sequences.md"
    md.write_text(render_markdown(report))
    print(render_markdown(report), file=sys.stderr)
    print(f"report: {md}")
    return EXIT_INTERRUPTED if report.cancelled else 0
