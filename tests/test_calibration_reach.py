"""A reply longer than this machine's table reaches has a row measured at its own context, on
its own cache, before its first token: how much more a wide pass costs there is measured, not
carried past the table's longest row."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest

from app.engine.calibration import REACH, SHORT_CONTEXT, Calibration, CalibrationStore
from app.engine.calibration_measure import with_row
from app.engine.events import DoneEvent, StatusEvent
from app.engine.session import Session
from tests.builders import make_checkpoint
from tests.test_calibration import _run as run_request

LONG_PROMPT = " ".join(f"item {i} is on shelf {i % 7}," for i in range(40))  # about 660 tokens


@pytest.fixture(scope="module")
def target(tmp_path_factory) -> Path:
    return make_checkpoint(tmp_path_factory.mktemp("reach") / "target", seed=21,
                           max_position_embeddings=1024)


def _run(session: Session, kind: str, prompt: str) -> tuple[list[StatusEvent], DoneEvent]:
    return run_request(session, prompt=prompt, max_tokens=10, draft_kind=kind)


def test_a_row_joins_the_table_in_context_order_and_never_costs_less_than_a_longer_one():
    cal = Calibration(key={"k": "v"}, model_path="/nowhere", contexts=(16, 512),
                      sizes=((1, 2, 17), (1, 17)), verify_ms=((10.0, 12.0, 30.0), (20.0, 50.0)))
    assert cal.reaches(int(REACH * 512)) and not cal.reaches(int(REACH * 512) + 1)
    # a short context is read from the first row whatever the table holds
    first_only = dataclasses.replace(cal, contexts=(16,), sizes=cal.sizes[:1],
                                     verify_ms=cal.verify_ms[:1])
    assert first_only.reaches(SHORT_CONTEXT) and not first_only.reaches(SHORT_CONTEXT + 1)
    longer = with_row(cal, 2048, (1, 9, 17), (40.0, 90.0, 140.0))
    assert longer.contexts == (16, 512, 2048)
    assert longer.verify_ms_at(17, 2048) == 140.0
    # the lines through the two first rows said a pass over 17 at 2,048 costs 2.2 steps; it
    # was measured at 3.5
    assert cal.verify_cost(17, 2048) == pytest.approx(2.2, abs=0.01)
    assert longer.verify_cost(17, 2048) == pytest.approx(3.5)
    # a row measured while the machine was quieter holds the shorter contexts to it
    quiet = with_row(cal, 1024, (1, 17), (15.0, 40.0))
    assert quiet.contexts == (16, 512, 1024)
    assert quiet.verify_ms[1] == (15.0, 40.0)
    # measured again at a context it holds: the new row replaces the old one
    again = with_row(longer, 2048, (1, 17), (42.0, 150.0))
    assert again.contexts == (16, 512, 2048) and again.verify_ms_at(17, 2048) == 150.0


def test_a_reply_past_the_tables_reach_measures_a_row_at_its_context_once(target, tmp_path):
    folder = tmp_path / "cal"
    session = Session(calibrations=CalibrationStore(folder))
    session.load_target(target)
    _run(session, "prompt-lookup", "The cat sat on")  # the first table
    first = session.calibration
    assert first is not None
    # a table that reaches only a short context (a slow machine's warm-up)
    short = dataclasses.replace(first, contexts=first.contexts[:1], sizes=first.sizes[:1],
                                verify_ms=first.verify_ms[:1])
    session.calibrations.save(short)
    session.calibration = short
    _, plain = _run(session, "none", LONG_PROMPT)
    context = plain.timings.prompt_n
    assert not short.reaches(context)

    statuses, done = _run(session, "prompt-lookup", LONG_PROMPT)
    words = [s.message for s in statuses if s.stage == "warmup"]
    assert words and f"{context:,} tokens of text" in words[-1] and "first time" in words[-1]
    cal = session.calibration
    assert cal is not None and cal.contexts == (short.contexts[0], context)
    assert cal.reaches(context)
    kept = CalibrationStore(folder).load(target, cal.key)  # what a later process reads
    assert kept is not None and kept.contexts == cal.contexts
    assert done.timings.warmup_ms > 0 and done.timings.ttft_ms >= done.timings.warmup_ms
    # the passes timed on the reply's own cache were undone: the reply is plain decoding's
    assert done.token_ids == plain.token_ids

    again, done_again = _run(session, "prompt-lookup", LONG_PROMPT)
    assert not [s for s in again if s.stage == "warmup"] and done_again.timings.warmup_ms == 0
    assert done_again.token_ids == plain.token_ids
