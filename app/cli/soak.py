"""``draftpair soak``: many randomized requests through one engine session; reports crashes,
greedy outputs that differ from plain decoding, and memory at the start and the end.

``draftpair soak --server``: the same against a ``draftpair serve`` process on 127.0.0.1, with
hostile requests mixed in and idle and slow connections beside them; reports crashes, hangs,
5xx answers, valid requests answered and the server's memory."""

from __future__ import annotations

import argparse
import json
import sys


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("soak", help="stress the engine (or the server) with randomized requests",
                       description="Run N randomized requests (every kind the pair can run, "
                       "temperatures, stop strings, cancels, edge sizes) in one process; with "
                       "--server, against a local server process, valid requests mixed with "
                       "hostile ones (bad token ids, bad JSON, deep nesting, wrong types, huge "
                       "numbers, surrogates, bad keys) and idle and slow connections beside.")
    p.add_argument("--model", default="demo", help="target: folder, store name or 'demo'")
    p.add_argument("--draft-model", help="draft folder (default with --model demo: the demo draft)")
    p.add_argument("--requests", "-n", type=int, default=1000)
    p.add_argument("--max-tokens", type=int, default=None,
                   help="most tokens a request asks for (default 48; with --server 4)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--server", action="store_true",
                   help="soak a 'draftpair serve' process on 127.0.0.1 with valid and hostile "
                   "requests, idle and slow connections")
    p.add_argument("--hostile-rate", type=float, default=0.5,
                   help="with --server: share of hostile requests (default 0.5)")
    p.add_argument("--idle-connections", type=int, default=48,
                   help="with --server: idle or half-sent connections held open (default 48)")
    p.add_argument("--json", action="store_true", help="print the result as JSON")
    p.add_argument("--verbose", "-v", action="store_true", help="progress every 50 requests")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from app.cli import EXIT_USAGE, CliError

    if not 1 <= args.requests <= 1_000_000:
        raise CliError("--requests must be between 1 and 1000000", EXIT_USAGE)
    if args.max_tokens is None:
        args.max_tokens = 4 if args.server else 48
    if not 1 <= args.max_tokens <= 4096:
        raise CliError("--max-tokens must be between 1 and 4096", EXIT_USAGE)
    if args.server:
        return run_server(args)
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
    return _exit_code(result)


def _exit_code(result) -> int:
    """130 when stopped with Ctrl+C, 3 when the soak found a fault, else 0."""
    from app.cli import EXIT_FOUND_PROBLEMS, EXIT_INTERRUPTED

    if getattr(result, "interrupted", False):
        return EXIT_INTERRUPTED
    return 0 if result.ok else EXIT_FOUND_PROBLEMS


def run_server(args: argparse.Namespace) -> int:
    import tempfile
    from pathlib import Path

    from app.cli import EXIT_USAGE, CliError

    if not 0 <= args.hostile_rate <= 1:
        raise CliError("--hostile-rate must be between 0 and 1", EXIT_USAGE)
    if not 0 <= args.idle_connections <= 1000:
        raise CliError("--idle-connections must be between 0 and 1000", EXIT_USAGE)
    from app.bench.hostile_soak import ServerSoakConfig, run_server_soak

    config = ServerSoakConfig(requests=args.requests, seed=args.seed, max_tokens=args.max_tokens,
                              hostile_rate=args.hostile_rate,
                              idle_connections=args.idle_connections)

    def progress(i: int, n: int, r) -> None:
        if args.verbose and (i % 50 == 0 or i == n):
            print(f"[{i}/{n}] valid answered {r.valid_answered}/{r.valid}, crashes "
                  f"{len(r.crashes)}, hangs {len(r.hangs)}, 5xx {len(r.server_errors)}, wrong "
                  f"{len(r.wrong)}", file=sys.stderr, flush=True)

    with tempfile.TemporaryDirectory(prefix="draftpair-soak-") as tmp:
        log = Path(tmp) / "serve.log"
        try:
            result = run_server_soak(config, model=args.model, draft=args.draft_model,
                                     log_path=log, progress=progress)
        except RuntimeError as exc:  # the server did not start
            raise CliError(str(exc)) from None
        if not result.ok and args.verbose:
            print(log.read_text(errors="replace")[-4000:], file=sys.stderr)
    print(json.dumps(result.to_dict(), indent=2) if args.json else result.format_text())
    return _exit_code(result)
