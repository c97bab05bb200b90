"""``draftpair models fetch-mtp MODEL [--from REPO]``: put back the multi-token-prediction head
a conversion dropped, fetching only the head's bytes from the source repository."""

from __future__ import annotations

import argparse
import sys
import threading


def register(msub: argparse._SubParsersAction) -> None:
    fm = msub.add_parser(
        "fetch-mtp",
        help="fetch only the MTP head a conversion dropped, from the source model on the Hub",
    )
    fm.add_argument("model", help="the converted model (name or folder)")
    fm.add_argument("--from", dest="source", metavar="REPO",
                    help="source repository (default: the base_model its model card names)")
    fm.add_argument("--revision")
    fm.set_defaults(func=run_fetch_mtp)


def run_fetch_mtp(args: argparse.Namespace) -> int:
    import logging
    from pathlib import Path

    from app.checkpoints import mtp_source
    from app.checkpoints.hub import HubError
    from app.checkpoints.memory_estimate import format_bytes
    from app.checkpoints.resolve import resolve_model
    from app.cli import CliError
    from app.cli.download_progress import progress_printer
    from app.errors import DraftPairError

    logging.getLogger("huggingface_hub").setLevel(logging.ERROR)
    try:
        folder = Path(resolve_model(args.model))
    except DraftPairError as exc:
        raise CliError.plain(exc) from None
    have = mtp_source.beside(folder)
    if have:
        print(f"{folder.name} already has its MTP head beside it ({len(have)} tensors) in "
              f"{folder / mtp_source.HEAD_DIR}.", file=sys.stderr)
        return 0
    repo = args.source or mtp_source.base_model(folder)
    if not repo:
        raise CliError(f"{folder.name} does not say which model it was converted from; name "
                       "the source with --from ORG/NAME.")
    print(f"Fetching the MTP head of {repo} into {folder / mtp_source.HEAD_DIR}", file=sys.stderr)
    cancel = threading.Event()
    try:
        out = mtp_source.fetch(repo, folder, revision=args.revision,
                               progress=progress_printer(), cancel=cancel)
    except KeyboardInterrupt:
        cancel.set()
        print("\nCancelled; run the same command again to resume.", file=sys.stderr)
        return 130
    except (HubError, mtp_source.MTPSourceError) as exc:
        raise CliError.plain(exc) from None
    size = (out / mtp_source.HEAD_FILE).stat().st_size
    print(f"Saved the MTP head ({format_bytes(size)}) in {out}", file=sys.stderr)
    print(out)
    return 0
