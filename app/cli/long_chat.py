"""``draftpair long-chat``: time to first token per chat turn with and without prompt-cache
reuse, and how long a Stop takes during a long prompt (a benchmark, not a test)."""

from __future__ import annotations

import argparse


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "long-chat",
        help="measure TTFT over a scripted conversation (reuse off/on) and Stop during a long prompt",
    )
    p.add_argument("--model", default="demo")
    p.add_argument("--turns", type=int, default=6)
    p.add_argument("--repeats", type=int, default=2)
    p.add_argument("--max-tokens", type=int, default=32)
    p.add_argument("--stop-tokens", type=int, default=5000)
    p.add_argument("--stop-delays", type=float, nargs="+", default=[1.0, 3.0])
    p.add_argument("--read-tokens", type=int, default=2000,
                   help="prompt length for the chunked vs one-pass reading time")
    p.add_argument("--parts", nargs="+", choices=("chat", "stop", "read"),
                   default=["chat", "stop", "read"])
    p.add_argument("--json", action="store_true")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from app.bench.long_chat import run as run_long_chat

    return run_long_chat(args)
