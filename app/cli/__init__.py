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
import json
import os
import sys
from typing import NoReturn

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

EXIT_OK = 0
EXIT_ERROR = 1
EXIT_USAGE = 2
EXIT_FOUND_PROBLEMS = 3  # the command ran and found a fault: check "will not work", soak
EXIT_INTERRUPTED = 130  # Ctrl+C (128 + SIGINT, as shells report it)


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


EXIT_CODES = f"""exit codes (every command):
  {EXIT_OK:<4} done
  {EXIT_ERROR:<4} failed: one plain sentence on stderr says why
  {EXIT_USAGE:<4} usage: an unknown option, value, command or model name
  {EXIT_FOUND_PROBLEMS:<4} ran and found a fault: check says the pair will not work, soak found
       a crash, a hang or a wrong reply
  {EXIT_INTERRUPTED:<4} stopped with Ctrl+C (generate, bench and serve stop within one prompt step;
       a second Ctrl+C quits at once)
with --json, an error is also printed on stdout as {{"error": {{"message": ..., "exit_code": ...}}}}"""


def error_json(message: str, code: int) -> str:
    return json.dumps({"error": {"message": message, "exit_code": code}})


def build_parser(*, json_errors: bool = False) -> argparse.ArgumentParser:
    from app import __version__

    class Parser(argparse.ArgumentParser):
        def error(self, message: str) -> NoReturn:
            if json_errors:  # the caller reads stdout: the usage error as JSON there too
                raise CliError(f"{self.prog}: {message}", EXIT_USAGE)
            super().error(message)

    parser = Parser(
        prog="draftpair",
        description="Speculative decoding of local language models on MLX.",
        epilog=EXIT_CODES,
        formatter_class=argparse.RawDescriptionHelpFormatter,
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
    from app.cli.interrupt import listen_for_ctrl_c

    listen_for_ctrl_c()
    command = argv[0] if argv and not argv[0].startswith("-") else "gui"
    needs_mlx = COMMANDS.get(command, ("", True))[1] or (command == "models" and "convert" in argv)
    if not _wants_help(argv) and needs_mlx:
        from app.engine.platform import maybe_reexec_with_blas

        maybe_reexec_with_blas(argv)
    from app.demo.builtins import register_demo_models

    register_demo_models()
    wants_json = "--json" in argv
    try:
        return _run(argv, wants_json)
    except CliError as exc:  # a usage error found while parsing, with --json
        _report(str(exc), exc.code, wants_json)
        return exc.code


def _report(message: str, code: int, wants_json: bool) -> None:
    print(f"draftpair: error: {message}", file=sys.stderr)
    if wants_json:
        print(error_json(message, code), flush=True)


def _run(argv: list[str], wants_json: bool) -> int:
    parser = build_parser(json_errors=wants_json)
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
        _report(str(exc), exc.code, wants_json)
        if verbose and (exc.detail or exc.__context__ is not None):
            cause = exc.__context__
            detail = exc.detail or (technical_detail(cause) if cause is not None else "")
            print(f"draftpair: details: {detail}", file=sys.stderr)
        return exc.code
    except KeyboardInterrupt:
        print("draftpair: interrupted", file=sys.stderr)
        if wants_json:
            print(error_json("Stopped with Ctrl+C.", EXIT_INTERRUPTED), flush=True)
        return EXIT_INTERRUPTED
    except BrokenPipeError:
        return 0
    except Exception as exc:  # last resort: one line, never a traceback
        _report(user_message(exc), EXIT_ERROR, wants_json)
        if verbose:
            print(f"draftpair: details: {technical_detail(exc)}", file=sys.stderr)
        return EXIT_ERROR
