"""Measuring this machine for a ``Session``: the speed tables speculation sizes its rounds by.

The first request of a drafter on a target measures what no kept table holds yet (the
target's passes, the drafter's step) and keeps it for every later process; ``recalibrate``
measures everything again on request. Progress arrives as ``StatusEvent``s in plain words.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Generator
from pathlib import Path
from typing import TYPE_CHECKING, Any

from app import kinds
from app.engine.calibration import Calibration, drafter_key
from app.engine.calibration_measure import (
    BUDGET_S,
    CALIBRATE_BUDGET_S,
    CALIBRATE_REPEATS,
    MAX_PASS,
    REPEATS,
    measure_drafter,
    measure_row,
    measure_target,
    needs_measuring,
    with_row,
)
from app.engine.drafters.base import Drafter
from app.engine.events import GenerationRequest, StatusEvent
from app.engine.width import DEFAULT_VERIFY_SLOPE

if TYPE_CHECKING:
    from app.engine.session import Session

WARMUP_WORDS = ("Measuring this computer's speed for speculation, only the first time "
                "({done} of {total})")
MEASURE_WORDS = "Measuring this computer's speed for speculation ({done} of {total})"
REACH_WORDS = ("Measuring this computer's speed at {context:,} tokens of text, only the first "
               "time ({done} of {total})")


def warm_up(
    session: Session, kind: str, drafter: Drafter, width: int, *, context: int,
    cancel: threading.Event | None = None,
) -> Generator[StatusEvent, None, dict[str, float]]:
    """The width policy's costs at ``context`` (``verify_slope``, ``draft_cost`` in plain
    steps) from this machine's calibration. What no kept table holds yet (the target's
    passes, this drafter's step) is measured now, with progress in plain words, and kept
    for every later process; with a kept table nothing is run. Sets the session's
    ``calibration`` and ``last_warmup_s``."""
    assert session.target is not None
    started = time.perf_counter()
    session.last_warmup_s = 0.0
    measured = False
    cal = session.calibration
    if cal is None:
        cal = yield from _measure_target(session, cancel)
        if cal is None:  # stopped: the round loop ends the request at once
            return {"verify_slope": DEFAULT_VERIFY_SLOPE, "draft_cost": drafter.step_cost}
        session.calibrations.save(cal)
        measured = True
    dkey = loaded_drafter_key(session, kind)
    if needs_measuring(drafter) and cal.draft_ms(dkey) is None:
        label = kinds.get(kind).label
        yield StatusEvent("warmup", f"Measuring the drafter's speed on this computer, only "
                          f"the first time: {label}", None)
        ms = measure_drafter(drafter, list(range(1, max(width, 1) + 1)))
        if ms is not None:
            cal = cal.with_drafter(dkey, ms, label)
            session.calibrations.save(cal)
        measured = True
    session.calibration = cal
    if measured:
        session.last_warmup_s = time.perf_counter() - started
    drafter.set_verify_costs(cal.verify_costs(max(MAX_PASS, width + 1), context))
    draft_cost = cal.draft_cost(dkey, context)
    return {"verify_slope": cal.verify_slope(width, context),
            "draft_cost": drafter.step_cost if draft_cost is None else draft_cost}


def recalibrate(
    session: Session, kind_names: list[str], *, budget_s: float = CALIBRATE_BUDGET_S,
    cancel: threading.Event | None = None,
) -> Generator[StatusEvent, None, Calibration | None]:
    """Measure this machine again for the session's target and the drafters of
    ``kind_names`` (those that run a model), keep the table and return it (None when
    stopped)."""
    assert session.target is not None
    cal = yield from _measure_target(session, cancel, budget_s=budget_s, words=MEASURE_WORDS,
                                     repeats=CALIBRATE_REPEATS)
    if cal is None:
        return None
    for kind in kind_names:
        if cancel is not None and cancel.is_set():
            return None  # nothing kept: the table kept before stays as it was
        plugin = kinds.get(kind)
        drafter = session.make_drafter(GenerationRequest(draft_kind=kind))
        if drafter is None or not needs_measuring(drafter):
            continue
        label = plugin.label
        yield StatusEvent("warmup", f"Measuring the drafter's speed: {label}", None)
        ms = measure_drafter(drafter, list(range(1, plugin.default_width + 1)))
        if ms is not None:
            cal = cal.with_drafter(loaded_drafter_key(session, kind), ms, label)
    session.calibrations.save(cal)
    session.calibration = cal
    return cal


def reach(session: Session, cache: list[Any], context: int,
          cancel: threading.Event | None = None) -> Generator[StatusEvent, None, None]:
    """Where the kept table stops well short of a reply's ``context`` (its prompt read into
    ``cache``), time a row there on that cache, each pass undone after it, and keep it: how a
    wide pass's cost grows with the context is measured, not carried past the table's longest
    row (a guess that falls short and sends wide rounds where they cost more than they give).
    Once per target and context reach; nothing kept when stopped."""
    cal = session.calibration
    if cal is None or session.target is None or cal.reaches(context):
        return
    sweep = measure_row(session.target, cache)
    yield StatusEvent("warmup", REACH_WORDS.format(context=context, done=0, total="…"), 0.0)
    while True:
        if cancel is not None and cancel.is_set():
            sweep.close()
            return
        try:
            step = next(sweep)
        except StopIteration as end:
            sizes, row = end.value
            break
        yield StatusEvent("warmup", REACH_WORDS.format(context=context, done=step.done,
                                                       total=step.total), step.fraction)
    cal = with_row(cal, context, sizes, row)
    session.calibrations.save(cal)
    session.calibration = cal


def loaded_drafter_key(session: Session, kind: str) -> str:
    """The calibration's name for the drafter of ``kind`` the session holds now."""
    return drafter_key(kind, _drafter_folder(session, kind))


def _measure_target(
    session: Session, cancel: threading.Event | None, *, budget_s: float = BUDGET_S,
    words: str | None = None, repeats: int = REPEATS,
) -> Generator[StatusEvent, None, Calibration | None]:
    """The target's table, measured now (None when stopped)."""
    assert session.target is not None
    sweep = measure_target(session.target, context_limit=session.context_length(),
                           budget_s=budget_s, repeats=repeats)
    words = words or WARMUP_WORDS
    yield StatusEvent("warmup", words.format(done=0, total="…"), 0.0)
    while True:
        if cancel is not None and cancel.is_set():
            sweep.close()
            return None
        try:
            step = next(sweep)
        except StopIteration as end:
            cal: Calibration = end.value
            break
        yield StatusEvent("warmup", words.format(done=step.done, total=step.total),
                          step.fraction)
    return cal


def _drafter_folder(session: Session, kind: str) -> Path | None:
    """The files a kind's drafter runs (None: the target's own, or none)."""
    path = getattr(session.assets.get(kind), "path", None)
    return Path(path) if path is not None else None
