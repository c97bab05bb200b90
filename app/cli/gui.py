"""``draftpair gui`` (also ``draftpair`` with no command): the desktop app."""

from __future__ import annotations

import argparse


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("gui", help="open the desktop app (default)")
    p.add_argument("--theme", choices=("system", "light", "dark"), default=None,
                   help="colour scheme (default: the saved setting, which follows the system)")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from app.ui.app import main  # Qt only now: `draftpair --help` stays instant

    return main(theme=args.theme)
