"""Headless entry point: ``draftpair [gui|generate|check|models|bench|doctor|calibrate|demo|
serve|soak]``.

Each sub-command lives in its own module exposing ``register(subparsers)``; modules import
nothing heavy at module level so ``--help`` is instant. Errors reach the user as one line on
stderr and a non-zero exit code, never as a traceback; ``-v`` (or DRAFTPAIR_DEBUG=1) adds a
``details:`` line with the technical text.
"""

from __future__ import annotations

import argparse
import importlib
import os
import sys

# (module, needs_mlx): sub-commands that run MLX get the Linux BLAS fix (re-exec) first.
COMMANDS: dict[str, tuple[str, bool]] = {
    "gui": ("app.cli.gui", True),
    "generate": ("app.cli.generate", True),
    "check": ("app.cli.check", False),
    "models": ("app.cli.models", False),  # only `models convert` runs MLX
    "bench": ("app.cli.bench", True),
    "doctor": ("app.cli.doctor", True),
    "calibrate": ("app.cli.calibrate", True),
    "demo": ("app.cli.demo", True),
    "serve": ("app.cli.serve", True),
    "long-chat": ("app.cli.long_chat", True),
    "soak": ("app.cli.soak", True),
}

EXIT_ERROR = 1
EXIT_USAGE = 2


class CliError(Exception):
    """A user-facing error: printed as one line, exit code attached."""

    def __init__(self, message: str, code: int = EXIT_ERROR, detail: str = ""):
        super().__init__(message)
        self.code = code
        self.detail = detail

    @classmethod
    def plain(cls, exc: Exception) -> CliError:
        """An exception as the user's one line, its technical text kept for ``-v``."""
        from app.errors import technical_detail, user_message

        return cls(user_message(exc), detail=getattr(exc, "detail", "") or technical_detail(exc))


def build_parser() -> argparse.ArgumentParser:
    from app import __version__

    parser = argparse.ArgumentParser(
        prog="draftpair",
        description="Speculative decoding of local language models on MLX.",
    )
    parser.add_argument("--version", action="version", version=f"draftpair {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    for module_name, _ in COMMANDS.values():
        try:
            module = importlib.import_module(module_name)
        except ModuleNotFoundError as exc:
            if exc.name != module_name:
                raise
            continue  # command not built yet
        module.register(sub)
    return parser


def _wants_help(argv: list[str]) -> bool:
    return any(a in ("-h", "--help", "--version") for a in argv)


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    command = argv[0] if argv and not argv[0].startswith("-") else "gui"
    needs_mlx = COMMANDS.get(command, ("", True))[1] or (command == "models" and "convert" in argv)
    if not _wants_help(argv) and needs_mlx:
        from app.engine.platform import maybe_reexec_with_blas

        maybe_reexec_with_blas(argv)
    from app.demo.builtins import register_demo_models

    register_demo_models()
    parser = build_parser()
    if argv and not argv[0].startswith("-") and argv[0] not in COMMANDS:
        parser.error(f"unknown command {argv[0]!r}")
    if (not argv or argv[0].startswith("-")) and not _wants_help(argv):
        argv = ["gui", *argv]  # no command: the desktop app
    args = parser.parse_args(argv)
    func = getattr(args, "func", None)
    if func is None:
        parser.print_help()
        return EXIT_USAGE
    from app.errors import technical_detail, user_message

    verbose = bool(getattr(args, "verbose", False)) or os.environ.get("DRAFTPAIR_DEBUG") == "1"
    try:
        return int(func(args) or 0)
    except CliError as exc:
        print(f"draftpair: error: {exc}", file=sys.stderr)
        if verbose and (exc.detail or exc.__context__ is not None):
            detail = exc.detail or technical_detail(exc.__context__)
            print(f"draftpair: details: {detail}", file=sys.stderr)
        return exc.code
    except KeyboardInterrupt:
        print("draftpair: interrupted", file=sys.stderr)
        return 130
    except BrokenPipeError:
        return 0
    except Exception as exc:  # last resort: one line, never a traceback
        print(f"draftpair: error: {user_message(exc)}", file=sys.stderr)
        if verbose:
            print(f"draftpair: details: {technical_detail(exc)}", file=sys.stderr)
        return EXIT_ERROR
