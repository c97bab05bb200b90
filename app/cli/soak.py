"""``draftpair soak``: many randomized requests through one engine session; reports crashes,
greedy outputs that differ from plain decoding, and memory at the start and the end."""

from __future__ import annotations

import argparse
import json
import sys


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("soak", help="stress the engine with randomized requests",
                       description="Run N randomized requests (every kind the pair can run, "
                       "temperatures, stop strings, cancels, edge sizes) in one process.")
    p.add_argument("--model", default="demo", help="target: folder, store name or 'demo'")
    p.add_argument("--draft-model", help="draft folder (default with --model demo: the demo draft)")
    p.add_argument("--requests", "-n", type=int, default=1000)
    p.add_argument("--max-tokens", type=int, default=48)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--json", action="store_true", help="print the result as JSON")
    p.add_argument("--verbose", "-v", action="store_true", help="progress every 50 requests")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from app.cli import EXIT_USAGE, CliError

    if not 1 <= args.requests <= 1_000_000:
        raise CliError("--requests must be between 1 and 1000000", EXIT_USAGE)
    if not 1 <= args.max_tokens <= 4096:
        raise CliError("--max-tokens must be between 1 and 4096", EXIT_USAGE)
    from app.bench.soak import SoakConfig, run_soak
    from app.engine.session import Session
    from app.errors import DraftPairError

    session = Session()
    try:
        session.load_target(args.model)
        draft = args.draft_model or ("demo-draft" if args.model == "demo" else None)
        if draft:
            session.load_draft(draft)
    except DraftPairError as exc:
        raise CliError(str(exc), detail=exc.detail) from None

    def progress(i: int, n: int, r) -> None:
        if args.verbose and (i % 50 == 0 or i == n):
            print(f"[{i}/{n}] crashes {len(r.crashes)}, mismatches {len(r.mismatches)}, "
                  f"violations {len(r.violations)}", file=sys.stderr, flush=True)

    result = run_soak(session, SoakConfig(requests=args.requests, seed=args.seed,
                                          max_tokens=args.max_tokens), progress=progress)
    print(json.dumps(result.to_dict(), indent=2) if args.json else result.format_text())
    return 0 if result.ok else 1
