"""Download progress on stderr: one updating line on a terminal, a line per file otherwise."""

from __future__ import annotations

import sys


def progress_printer():
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
