"""``draftpair calibrate``: measure this computer's speed for speculation again and show it.

The table is what the first reply with speculation measures and keeps (the target's verify
pass by size and context, each drafter's step); this command measures it again, longer
contexts included, keeps it, and prints it in words and numbers (or ``--json``).
"""

from __future__ import annotations

import argparse
import json
import sys
from typing import TYPE_CHECKING, Any

from app import kinds as draft_kinds
from app.cli import kind_args

if TYPE_CHECKING:
    from app.engine.calibration import Calibration
    from app.engine.session import Session

SHOWN_SIZES = (1, 2, 3, 5, 9, 17)  # pass sizes in the printed table


def demo_drafts() -> dict[str, str]:
    """Kind -> the built-in draft folder it uses with the demo target."""
    return {p.name: p.demo_draft for p in draft_kinds.plugins() if p.demo_draft}


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("calibrate", help="measure this computer's speed for speculation again")
    p.add_argument("--model", default="demo", help="target: folder, store name or 'demo'")
    p.add_argument("--draft-kind", nargs="+", choices=kind_args.drafting_choices(),
                   help="drafters to measure (default: every one the pair offers)")
    p.add_argument("--draft-model", help="draft folder, for the kinds that read one")
    p.add_argument("--json", action="store_true", help="print the table as JSON")
    p.add_argument("--verbose", "-v", action="store_true", help="details of errors")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from app.cli import CliError
    from app.engine.events import StatusEvent
    from app.engine.session import Session
    from app.errors import DraftPairError

    session = Session()
    try:
        session.load_target(args.model)
        _load_drafts(session, args)
    except DraftPairError as exc:
        raise CliError(str(exc), detail=exc.detail) from None
    available = session.available_kinds()
    kinds = args.draft_kind or [k for k, why in available.items()
                                if draft_kinds.get(k).proposes and not why]
    for kind in kinds:
        if available.get(kind):
            raise CliError(f"{draft_kinds.label(kind)} cannot be measured: {available[kind]}.")
    import threading

    from app.cli.interrupt import stop_on_ctrl_c

    cancel = threading.Event()
    steps = session.recalibrate(kinds, cancel=cancel)
    cal = None
    with stop_on_ctrl_c(cancel):
        while True:
            try:
                ev = next(steps)
            except StopIteration as end:
                cal = end.value
                break
            if isinstance(ev, StatusEvent) and not args.json:
                _progress(ev.message, done=ev.progress == 1.0)
    if cal is None:  # Ctrl+C: the table kept before stays as it was
        print("draftpair: stopped; the kept table is unchanged", file=sys.stderr)
        return 130
    names = {k: session.drafter_key(k) for k in kinds if draft_kinds.get(k).proposes}
    if args.json:
        print(json.dumps(as_json(session, cal, names), indent=2))
    else:
        print(describe(session, cal, names))
    return 0


def _load_drafts(session: Session, args: argparse.Namespace) -> None:
    wanted = args.draft_kind or list(demo_drafts())
    if args.draft_model:
        session.load_draft(args.draft_model)
        return
    if str(args.model) != "demo":
        return
    for kind, name in demo_drafts().items():
        if kind in wanted:
            session.load_draft(name)


def _progress(message: str, *, done: bool) -> None:
    if sys.stderr.isatty():
        sys.stderr.write(f"\r{message}\033[K" + ("\n" if done else ""))
    else:
        sys.stderr.write(message + "\n")
    sys.stderr.flush()


def as_json(session: Session, cal: Calibration, names: dict[str, str]) -> dict[str, Any]:
    path = session.calibrations.path_for(cal.model_path)
    return {
        **cal.to_dict(),
        "file": str(path) if path else None,
        "verify_cost": {str(c): {str(n): round(cal.verify_cost(n, c), 3) for n in SHOWN_SIZES}
                        for c in cal.contexts},
        "draft_cost": {k: (round(v, 4) if (v := cal.draft_cost(key, cal.contexts[0]))
                           is not None else None) for k, key in names.items()},
    }


def describe(session: Session, cal: Calibration, names: dict[str, str]) -> str:
    """The table in plain words and numbers."""
    assert session.target is not None
    path = session.calibrations.path_for(cal.model_path)
    lines = [
        f"This computer's speed for speculation with {session.target.name} "
        f"({session.target.precision}, {cal.key.get('backend', '?')}, "
        f"{cal.key.get('blas', '?')}), measured in {cal.measured_s:.0f} s.",
        f"Kept in {path}" if path else "Kept for this run only (the data folder is not "
        "writable).",
        "",
        "One plain step (the model writing one token), by how much text it already holds:",
    ]
    for c in cal.contexts:
        lines.append(f"  {c:>6,} tokens of context: {cal.step_ms(c):7.1f} ms")
    lines += ["", "Checking drafted tokens in one pass, in plain steps "
              "(1.00 = the cost of writing one token):"]
    head = "  tokens checked      " + "".join(f"{n:>7}" for n in SHOWN_SIZES)
    lines.append(head)
    for c in cal.contexts:
        lines.append(f"  context {c:>6,}      "
                     + "".join(f"{cal.verify_cost(n, c):7.2f}" for n in SHOWN_SIZES))
    if cal.busy:
        lines += ["", f"Other programs were using the processor while it measured (load "
                  f"{cal.load:.1f} per CPU): the times may be high. Run draftpair calibrate "
                  "again when the computer is idle."]
    lines += ["", f"Drafters (one drafting step, in plain steps at {cal.contexts[0]} tokens "
              "of context):"]
    pad = max((len(draft_kinds.label(k)) for k in names), default=0)
    for kind, key in names.items():
        ms = cal.draft_ms(key)
        if ms is None:
            lines.append(f"  {draft_kinds.label(kind):<{pad}}  runs no model: no cost to measure")
        else:
            lines.append(f"  {draft_kinds.label(kind):<{pad}}  {ms:7.2f} ms  "
                         f"({cal.draft_cost(key, cal.contexts[0]):.3f} steps)")
    return "\n".join(lines)
