"""``draftpair models list|search|pull|import|rm|convert``: the local checkpoint store and the Hub."""

from __future__ import annotations

import argparse
import dataclasses
import json
import sys
import threading


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("models", help="list, search, download, import, remove, convert models")
    msub = p.add_subparsers(dest="models_command", metavar="ACTION")

    ls = msub.add_parser("list", help="local models (HF cache, DraftPair's folder, imported)")
    ls.add_argument("--json", action="store_true")
    ls.add_argument("-v", "--verbose", action="store_true", help="show where each model lives")
    ls.set_defaults(func=run_list)

    se = msub.add_parser("search", help="search the Hugging Face Hub")
    se.add_argument("query")
    se.add_argument("--limit", type=int, default=20)
    se.add_argument("--all", action="store_true", help="not only MLX-format models")
    se.add_argument("--json", action="store_true")
    se.set_defaults(func=run_search)

    pu = msub.add_parser("pull", help="download a model (resumable; no pickle files)")
    pu.add_argument("repo_id")
    pu.add_argument("--revision")
    pu.set_defaults(func=run_pull)

    im = msub.add_parser("import", help="add a local model folder")
    im.add_argument("path")
    im.add_argument("--name")
    im.add_argument("--copy", action="store_true", help="copy it into DraftPair's models folder")
    im.set_defaults(func=run_import)

    rm = msub.add_parser("rm", help="remove a local model")
    rm.add_argument("name")
    rm.add_argument("-y", "--yes", action="store_true", help="do not ask before deleting files")
    rm.set_defaults(func=run_rm)

    cv = msub.add_parser("convert", help="convert a Hugging Face model to MLX (safetensors only)")
    cv.add_argument("source", metavar="REPO_OR_PATH")
    cv.add_argument("-q", "--quantize", action="store_true")
    cv.add_argument("--bits", type=int, default=4, choices=(2, 3, 4, 5, 6, 8))
    cv.add_argument("--group-size", type=int, default=64, choices=(32, 64, 128))
    cv.add_argument("--dtype", choices=("float16", "bfloat16", "float32"))
    cv.add_argument("--out", help="output folder (default: DraftPair's models folder)")
    cv.set_defaults(func=run_convert)

    p.set_defaults(func=lambda args: _usage(p))


def _usage(parser: argparse.ArgumentParser) -> int:
    parser.print_help(sys.stderr)
    return 2


def _store():
    from app.checkpoints.store import Store

    return Store()


def _fail(exc: Exception):
    from app.cli import CliError
    from app.errors import user_message

    return CliError(user_message(exc))


def run_list(args: argparse.Namespace) -> int:
    from app.units import format_bytes, format_params

    entries = _store().list()
    if args.json:
        print(json.dumps([e.to_dict() for e in entries], indent=2))
        return 0
    if not entries:
        print(
            "No local models. Try `draftpair models search QUERY` and `draftpair models pull REPO_ID`."
        )
        return 0
    rows = [("NAME", "KIND", "SIZE", "PARAMS", "WEIGHTS", "VOCAB", "CONTEXT", "CHAT", "SOURCE")]
    for e in entries:
        rows.append((
            e.name,
            e.kind_label,
            format_bytes(e.size_bytes),
            format_params(e.param_count),
            e.quantization or e.dtype or "?",
            str(e.vocab_size or "?"),
            str(e.context_length or "?"),
            "yes" if e.has_chat_template else "no",
            e.source,
        ))  # fmt: skip
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    for i, r in enumerate(rows):
        print("  ".join(c.ljust(w) for c, w in zip(r, widths, strict=True)).rstrip())
        if i and (args.verbose or entries[i - 1].unsupported_reason):
            e = entries[i - 1]
            if e.unsupported_reason:
                print(f"    why unsupported: {e.unsupported_reason}")
            if args.verbose:
                print(f"    at {e.path}")
    return 0


def run_search(args: argparse.Namespace) -> int:
    from app.checkpoints.hub import HubError, search

    try:
        found = search(args.query, limit=args.limit, mlx_only=not args.all)
    except HubError as exc:
        raise _fail(exc) from None
    if args.json:
        print(json.dumps([dataclasses.asdict(m) for m in found], indent=2))
        return 0
    if not found:
        print(
            "No models found." + ("" if args.all else " (only MLX models were searched; try --all)")
        )
        return 0
    for m in found:
        gated = "  [gated]" if m.gated else ""
        print(f"{m.repo_id}  downloads {m.downloads or 0}{gated}")
    return 0


def _progress_printer():
    from app.checkpoints.memory_estimate import format_bytes

    is_tty = sys.stderr.isatty()
    last = {"line": ""}

    def show(p) -> None:
        eta = f"{p.eta_s:.0f}s" if p.eta_s is not None else "?"
        line = (
            f"{format_bytes(p.done_bytes)} / {format_bytes(p.total_bytes)}  "
            f"{format_bytes(p.rate_bps)}/s  ETA {eta}  files {p.files_done}/{p.files_total}"
        )
        if is_tty:
            print("\r" + line.ljust(len(last["line"])), end="", file=sys.stderr, flush=True)
            if p.finished:
                print(file=sys.stderr)
        elif p.finished or p.files_done != last.get("files"):
            print(line, file=sys.stderr)
        last["line"] = line
        last["files"] = p.files_done

    return show


def run_pull(args: argparse.Namespace) -> int:
    import logging

    from app.checkpoints.hub import HubError, download, repo_info
    from app.checkpoints.memory_estimate import format_bytes

    logging.getLogger("huggingface_hub").setLevel(logging.ERROR)  # retries: our message says it
    try:
        info = repo_info(args.repo_id, revision=args.revision)
        print(f"{info.repo_id}: {format_bytes(info.download_bytes)} to download", file=sys.stderr)
        if info.skipped:
            print(
                f"  skipping {len(info.skipped)} file(s): {', '.join(info.skipped[:5])}",
                file=sys.stderr,
            )
        if not info.is_mlx:
            print(
                "  note: not an MLX-format repo; `draftpair models convert` may be needed.",
                file=sys.stderr,
            )
        cancel = threading.Event()
        try:
            path = download(
                args.repo_id, revision=args.revision, progress=_progress_printer(), cancel=cancel
            )
        except KeyboardInterrupt:
            cancel.set()
            print("\nCancelled; run the same command again to resume.", file=sys.stderr)
            return 130
    except HubError as exc:
        raise _fail(exc) from None
    print(path)
    return 0


def run_import(args: argparse.Namespace) -> int:
    from app.checkpoints.store import StoreError

    try:
        entry = _store().import_folder(args.path, name=args.name, copy=args.copy)
    except (StoreError, OSError) as exc:
        raise _fail(exc) from None
    print(f"Imported {entry.name} ({entry.kind_label}) from {entry.path}")
    if entry.unsupported_reason:
        print(f"  note: DraftPair cannot use it yet: {entry.unsupported_reason}")
    return 0


def run_rm(args: argparse.Namespace) -> int:
    from app.checkpoints.memory_estimate import format_bytes
    from app.checkpoints.store import SOURCE_IMPORTED, StoreError
    from app.cli import EXIT_USAGE, CliError

    store = _store()
    entry = store.get(args.name)
    if entry is None:
        raise CliError(
            f"No local model is named {args.name!r} (see `draftpair models list`).", EXIT_USAGE
        )
    deletes = entry.source != SOURCE_IMPORTED
    if deletes and not args.yes:
        if not sys.stdin.isatty():
            raise CliError(
                f"This deletes {entry.path} ({format_bytes(entry.size_bytes)}); add --yes.",
                EXIT_USAGE,
            )
        answer = input(
            f"Delete {entry.name} at {entry.path} ({format_bytes(entry.size_bytes)})? [y/N] "
        )
        if answer.strip().lower() not in ("y", "yes"):
            print("Nothing removed.")
            return 0
    try:
        result = store.remove(args.name)
    except (StoreError, OSError) as exc:
        raise _fail(exc) from None
    print(f"{result.message} Freed {format_bytes(result.freed_bytes)}.")
    return 0


def run_convert(args: argparse.Namespace) -> int:
    from pathlib import Path

    from app.checkpoints.convert import ConvertError, convert
    from app.checkpoints.hub import HubError

    try:
        out = convert(
            args.source,
            quantize=args.quantize,
            bits=args.bits,
            group_size=args.group_size,
            dtype=args.dtype,
            dest=Path(args.out) if args.out else None,
            on_message=lambda m: print(m, file=sys.stderr),
            on_download=_progress_printer(),
        )
    except (ConvertError, HubError) as exc:
        raise _fail(exc) from None
    print(out)
    return 0
