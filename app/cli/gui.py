"""``draftpair gui`` (also ``draftpair`` with no command): the desktop app."""

from __future__ import annotations

import argparse
from pathlib import Path


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("gui", help="open the desktop app (default)")
    p.add_argument("--theme", choices=("system", "light", "dark"), default=None,
                   help="colour scheme (default: the saved setting, which follows the system)")
    p.add_argument("--profile-dir", type=Path, default=None,
                   help="keep settings and conversations in this folder (default: the user's)")
    p.add_argument("--smoke-test", metavar="PROMPT", default=None,
                   help=argparse.SUPPRESS)  # packaging: send PROMPT to the demo pair, then exit
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from app.ui.app import main  # Qt only now: `draftpair --help` stays instant

    return main(theme=args.theme, profile_dir=args.profile_dir, smoke_prompt=args.smoke_test)
