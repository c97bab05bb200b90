"""``draftpair check TARGET [DRAFT] [--kind K] [--context N] [--json]``: the pairing check.

Exit codes: 0 works (warnings allowed), 3 will not work, 2 usage error (unknown model name,
bad option). Reads only config, tokenizer files and safetensors headers.
"""

from __future__ import annotations

import argparse
import json

from app import kinds
from app.cli import kind_args

EXIT_WILL_NOT_WORK = 3  # app.cli.EXIT_FOUND_PROBLEMS: the table in ``draftpair --help``


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "check",
        help="will this target + draft pair work, and why (no weights loaded)",
        description="Check a target model and an optional draft before loading anything.",
    )
    p.add_argument("target", help="model folder, store name, HF repo id in the cache, or 'demo'")
    p.add_argument("draft", nargs="?", help="draft model (folder, name, repo id or 'demo-draft')")
    p.add_argument("--kind", choices=kind_args.choices(), help="drafting kind (default: from the draft)")
    p.add_argument(
        "--context", type=int, help="context length in tokens (default: min(4096, the target's))"
    )
    p.add_argument("--json", action="store_true", help="print the report as JSON")
    p.set_defaults(func=run)


def _resolve(name: str):
    from app.checkpoints.resolve import resolve_model
    from app.cli import EXIT_USAGE, CliError
    from app.errors import ModelLoadError

    try:
        return resolve_model(name)
    except ModelLoadError as exc:
        raise CliError(str(exc), EXIT_USAGE, detail=exc.detail) from None


def run(args: argparse.Namespace) -> int:
    from app.cli import EXIT_USAGE, CliError

    if args.context is not None and args.context <= 0:
        raise CliError("--context must be a positive number of tokens.", EXIT_USAGE)
    needs_draft = args.kind is not None and kinds.get(args.kind).needs_draft_folder
    if args.draft and args.kind is not None and not needs_draft:
        raise CliError(f"--kind {args.kind} uses no draft model; leave DRAFT out.", EXIT_USAGE)
    if not args.draft and needs_draft:
        raise CliError(f"--kind {args.kind} needs a DRAFT model.", EXIT_USAGE)
    from app.checkpoints.pairing import check

    target = _resolve(args.target)
    draft = _resolve(args.draft) if args.draft else None
    from app.checkpoints.pairing.load_check import with_load_check

    report = with_load_check(check(target, draft, kind=args.kind, context=args.context))
    if args.json:
        data = report.to_dict()
        data["summary"] = report.summary()
        print(json.dumps(data, indent=2))
    else:
        print(report.format_text())
    return 0 if report.works else EXIT_WILL_NOT_WORK
