"""``draftpair models list|search|pull|import|rm|convert|fetch-mtp``: the local checkpoint store and the Hub.

``list`` also shows the GGUF models found in LM Studio, Ollama, llama.cpp's cache and the HF
cache (``app.checkpoints.discovery``); ``import`` takes a folder, a ``.gguf`` file (or the first
file of a split set) or the id of a found model, e.g. ``ollama:qwen3:0.6b``.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import sys
import threading

from app.cli import CliError
from app.cli.download_progress import progress_printer


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("models", help="list, search, download, import, remove, convert models")
    msub = p.add_subparsers(dest="models_command", metavar="ACTION")

    ls = msub.add_parser(
        "list", help="local models, and GGUF models found in LM Studio, Ollama, llama.cpp, HF"
    )
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

    im = msub.add_parser(
        "import", help="add a model folder, convert a .gguf file, or import a found model by id"
    )
    im.add_argument("path", metavar="PATH_OR_ID")
    im.add_argument("--name")
    im.add_argument(
        "--copy", action="store_true", help="copy a folder into DraftPair's models folder"
    )
    im.add_argument(
        "--json",
        action="store_true",
        help="print the result as JSON; GGUF progress goes to stderr as JSON lines",
    )
    im.add_argument(
        "--precision",
        choices=("float32", "4bit"),
        help="GGUF conversion precision (default: float32 on the CPU, 4bit on Metal)",
    )
    im.add_argument("--force", action="store_true",
                    help="import it even if the load check says it will not load")
    im.add_argument("-v", "--verbose", action="store_true", help="show every problem found")
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

    from app.cli import models_mtp

    models_mtp.register(msub)

    p.set_defaults(func=lambda args: _usage(p))


def _usage(parser: argparse.ArgumentParser) -> int:
    parser.print_help(sys.stderr)
    return 2


def _store():
    from app.checkpoints.store import Store

    return Store()


def _found(entries) -> list[tuple]:
    """(FoundModel, name it was imported as or None) for every GGUF found outside the store."""
    from app.checkpoints.discovery import discover
    from app.checkpoints.gguf_import import converted_from

    imported = {}
    for e in entries:
        rec = converted_from(e.path)
        if rec and rec.get("source_files"):
            imported[str(rec["source_files"][0])] = e.name
    return [(f, imported.get(str(f.path.resolve())) or imported.get(str(f.path)))
            for f in discover()]  # fmt: skip


def _print_found(found: list[tuple], verbose: bool) -> None:
    from app.units import format_bytes

    print()
    print("Found elsewhere (GGUF; `draftpair models import ID` converts one, the file stays put):")
    rows = [("ID", "ARCH", "QUANT", "SIZE", "CHAT", "WHERE", "STATUS")]
    for f, imported_as in found:
        status = (
            f"imported as {imported_as}" if imported_as
            else "can import" if f.supported else "unsupported"
        )  # fmt: skip
        rows.append((
            f.id, f.architecture or "?", f.quantization or "?", format_bytes(f.size_bytes),
            "yes" if f.has_chat_template else "no (base model)", f.where, status,
        ))  # fmt: skip
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    for i, r in enumerate(rows):
        print("  ".join(c.ljust(w) for c, w in zip(r, widths, strict=True)).rstrip())
        if i:
            f = found[i - 1][0]
            if f.reason:
                print(f"    why unsupported: {f.reason}")
            if verbose:
                print(f"    at {f.path}")


def run_list(args: argparse.Namespace) -> int:
    from app.units import format_bytes, format_params

    entries = _store().list()
    found = _found(entries)
    if args.json:
        from app.checkpoints.gguf_import import converted_from

        out = []
        for e in entries:
            d = e.to_dict()
            rec = converted_from(e.path)
            if rec:
                d["converted_from"] = rec  # the GGUF it was made from, and where it was found
            out.append(d)
        for f, imported_as in found:
            out.append({**f.to_dict(), "source": "found", "imported_as": imported_as})
        print(json.dumps(out, indent=2))
        return 0
    if not entries and not found:
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
            _source_label(e),
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
                source = _gguf_source(e.path)
                if source:
                    print(f"    converted from {source}")
    if found:
        _print_found(found, args.verbose)
    return 0


def _source_label(entry) -> str:
    from app.checkpoints.gguf_import import converted_from

    rec = converted_from(entry.path)
    if not rec:
        return entry.source
    return f"gguf ({rec['found_in']})" if rec.get("found_in") else "gguf file"


def _gguf_source(path) -> str | None:
    from app.checkpoints.gguf_import import converted_from

    rec = converted_from(path)
    if not rec or not rec.get("source_files"):
        return None
    where = f" ({rec['found_in']})" if rec.get("found_in") else ""
    return (
        f"{rec['source_files'][0]}{where}, {rec.get('gguf_quantization')} -> {rec.get('precision')}"
    )


def run_search(args: argparse.Namespace) -> int:
    from app.checkpoints.hub import HubError, search

    try:
        found = search(args.query, limit=args.limit, mlx_only=not args.all)
    except HubError as exc:
        raise CliError.plain(exc) from None
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


def run_pull(args: argparse.Namespace) -> int:
    import logging

    from app.checkpoints.hub import HubError, download, repo_info
    from app.checkpoints.memory_estimate import format_bytes

    logging.getLogger("huggingface_hub").setLevel(logging.ERROR)  # retries: our message says it
    _refuse_local_path(args.repo_id)
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
                args.repo_id, revision=args.revision, progress=progress_printer(), cancel=cancel
            )
        except KeyboardInterrupt:
            cancel.set()
            print("\nCancelled; run the same command again to resume.", file=sys.stderr)
            return 130
    except HubError as exc:
        raise CliError.plain(exc) from None
    print(path)
    return 0


def _import_progress():
    is_tty = sys.stderr.isatty()
    last = {"message": None, "pct": -1}

    def show(p) -> None:
        if getattr(p, "plan", False):  # what the copy will be: a sentence of its own
            print(p.message, file=sys.stderr, flush=True)
            return
        pct = int(100 * p.fraction) if p.fraction is not None else None
        if p.message != last["message"]:
            if is_tty and last["message"] is not None:
                print(file=sys.stderr)
            last["message"], last["pct"] = p.message, -1
            if not is_tty or pct is None:
                print(p.message + ("..." if pct is None else ""), file=sys.stderr)
        if pct is not None and is_tty and pct != last["pct"]:
            print(f"\r{p.message}: {pct}%", end="", file=sys.stderr, flush=True)
        last["pct"] = pct if pct is not None else -1

    return show


def _json_progress(p) -> None:
    line = {"message": p.message, "done": p.done, "total": p.total}
    if getattr(p, "plan", False):
        line["plan"] = True
    print(json.dumps(line), file=sys.stderr, flush=True)


def _import_gguf(args: argparse.Namespace, path, found=None) -> int:
    from app.checkpoints.gguf_import import ImportCancelled, import_gguf
    from app.errors import DraftPairError

    name = args.name
    if name is None and found is not None and found.where == "Ollama":
        name = found.name.replace(":", "-").replace("/", "-")  # its blob has no useful name
    cancel = threading.Event()
    progress = _json_progress if args.json else _import_progress()
    try:
        entry = import_gguf(
            path,
            store=_store(),
            name=name,
            precision=args.precision,
            progress=progress,
            cancel=cancel,
            found_in=found.where if found is not None else None,
        )
    except KeyboardInterrupt:
        cancel.set()
        print("\nCancelled; nothing was kept.", file=sys.stderr)
        return 130
    except ImportCancelled:
        print("Cancelled; nothing was kept.", file=sys.stderr)
        return 130
    except (DraftPairError, OSError) as exc:
        raise CliError.plain(exc) from None
    if args.json:
        print(json.dumps({**entry.to_dict(), "imported_from": str(path)}))
        return 0
    if sys.stderr.isatty():
        print(file=sys.stderr)
    print(f"Imported {entry.name} ({entry.kind_label}) from {path}")
    print(f"  converted into {entry.path}; the GGUF was read in place, not copied")
    if not entry.has_chat_template:
        print(
            "  note: the file has no chat template, so this is a base model: chat joins the "
            "turns as plain text (plain completion)."
        )
    if entry.unsupported_reason:
        print(f"  note: DraftPair cannot use it yet: {entry.unsupported_reason}")
    return 0


def _refuse_local_path(text: str) -> None:
    """A path is never sent to the Hub as a repo id."""
    from pathlib import Path

    from app.cli import EXIT_USAGE

    p = Path(text).expanduser()
    if p.is_dir():
        raise CliError(f"{p} is a local folder; add it with `draftpair models import {text}`.",
                       EXIT_USAGE)
    if text.startswith((".", "~", "/")) or text.count("/") > 1 or "\\" in text or (
        "/" in text and p.parent.is_dir() and str(p.parent) not in ("", ".")
    ):
        raise CliError(f"There is no folder at {p} (no such folder), and it is not a Hub repo id "
                       "(those look like org/name).", EXIT_USAGE)


def run_import(args: argparse.Namespace) -> int:
    from pathlib import Path

    from app.checkpoints.gguf_header import is_gguf
    from app.checkpoints.store import StoreError
    from app.errors import DraftPairError

    if args.name is not None:
        from app.checkpoints.store import check_model_name
        from app.cli import EXIT_USAGE

        try:
            check_model_name(args.name)
        except StoreError as exc:
            raise CliError(str(exc), EXIT_USAGE) from None
    path = Path(args.path).expanduser()
    if path.is_file() and (path.suffix.lower() == ".gguf" or is_gguf(path)):
        return _import_gguf(args, path)
    if not path.exists() and ":" in args.path:
        from app.checkpoints.discovery import find_model

        found = find_model(args.path)
        if found is None:
            from app.cli import EXIT_USAGE

            raise CliError(
                f"No model found with id {args.path!r} (see `draftpair models list`).", EXIT_USAGE
            )
        if not found.supported:
            raise CliError.plain(StoreError(found.reason or "DraftPair cannot convert this model."))
        return _import_gguf(args, found.path, found)
    try:
        from app.checkpoints.pairing.load_check import refuse_unloadable

        entry = _store().import_folder(args.path, name=args.name, copy=args.copy,
                                       check=None if args.force else refuse_unloadable)
    except (DraftPairError, OSError) as exc:
        raise CliError.plain(exc) from None
    if args.json:
        print(json.dumps(entry.to_dict()))
        return 0
    print(f"Imported {entry.name} ({entry.kind_label}) from {entry.path}")
    if entry.unsupported_reason:
        print(f"  note: DraftPair cannot use it yet: {entry.unsupported_reason}")
    return 0


def run_rm(args: argparse.Namespace) -> int:
    from app.checkpoints.memory_estimate import format_bytes
    from app.checkpoints.store import SOURCE_IMPORTED, StoreError
    from app.cli import EXIT_USAGE

    store = _store()
    entry = store.get(args.name)
    if entry is None:
        raise CliError(
            f"No local model is named {args.name!r} (see `draftpair models list`).", EXIT_USAGE
        )
    if store.protected(entry):
        raise CliError(store.protected(entry), EXIT_USAGE)
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
        raise CliError.plain(exc) from None
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
            on_download=progress_printer(),
        )
    except (ConvertError, HubError) as exc:
        raise CliError.plain(exc) from None
    print(out)
    return 0
