"""This machine's calibration table: measured once per model and kept, read by a new session
without measuring, invalidated when the model or the versions change; warm-up progress in
plain words; time to first token counted from the submission, every wait included."""

from __future__ import annotations

import json
import os
import re
import threading
import time
from pathlib import Path

import pytest

from app.engine.calibration import Calibration, CalibrationStore, new_table, target_key
from app.engine.events import DoneEvent, GenerationRequest, StatusEvent, TokenEvent
from app.engine.session import Session
from tests.builders import make_checkpoint


@pytest.fixture(scope="module")
def models(tmp_path_factory) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("calibration_models")
    return {
        "target": make_checkpoint(root / "target", seed=11, max_position_embeddings=1024),
        "draft": make_checkpoint(root / "draft", seed=12, hidden_size=32, num_layers=1),
    }


def _run(session: Session, prompt: str = "The cat sat on", max_tokens: int = 12,
         **kw) -> tuple[list[StatusEvent], DoneEvent]:
    statuses, done = [], None
    for ev in session.generate(GenerationRequest(prompt=prompt, max_tokens=max_tokens, **kw)):
        if isinstance(ev, StatusEvent):
            statuses.append(ev)
        elif isinstance(ev, DoneEvent):
            done = ev
    assert done is not None and done.finish_reason != "error", done and done.error
    return statuses, done


def _table(contexts=(16, 512), sizes=((1, 2, 5, 17), (1, 17)),
           rows=((10.0, 12.0, 15.0, 30.0), (20.0, 50.0))) -> Calibration:
    return Calibration(key={"k": "v"}, model_path="/nowhere", contexts=contexts, sizes=sizes,
                       verify_ms=rows)


# -- the table ----------------------------------------------------------------------------
def test_costs_interpolate_between_measured_sizes_and_contexts():
    cal = _table()
    assert cal.step_ms(16) == 10.0 and cal.verify_ms_at(2, 16) == 12.0
    assert cal.verify_ms_at(3, 16) == pytest.approx(13.0)  # between sizes 2 and 5
    assert cal.verify_cost(17, 16) == pytest.approx(3.0)
    assert cal.verify_cost(1, 16) == 1.0 and cal.verify_cost(0, 16) == 1.0
    # halfway between the contexts: the plain step and the widest pass halfway too
    mid = (16 + 512) // 2
    assert cal.step_ms(mid) == pytest.approx(15.0, rel=0.01)
    assert cal.verify_ms_at(17, mid) == pytest.approx(40.0, rel=0.01)
    # past the longest context the cost keeps growing linearly, never falling
    assert cal.step_ms(1008) > cal.step_ms(512)
    assert cal.step_ms(0) == cal.step_ms(16)  # before the first: flat
    # the policy's linear model: extra cost per proposal at that context
    assert cal.verify_slope(4, 16) == pytest.approx((cal.verify_cost(5, 16) - 1) / 4)
    assert cal.verify_slope(0, 16) == 0.0


def test_drafter_costs_are_relative_to_a_plain_step_at_the_context():
    cal = _table().with_drafter("mtp", 2.0, "MTP head")
    assert cal.draft_ms("mtp") == 2.0 and cal.draft_ms("dflash") is None
    assert cal.draft_cost("mtp", 16) == pytest.approx(0.2)
    assert cal.draft_cost("mtp", 512) == pytest.approx(0.1)  # the target's step grew
    assert cal.draft_cost("dflash") is None


def test_table_round_trips_through_json_and_refuses_malformed_rows():
    cal = _table().with_drafter("mtp", 2.0)
    again = Calibration.from_dict(json.loads(json.dumps(cal.to_dict())))
    assert again == cal
    bad = cal.to_dict()
    bad["sizes"][0] = [2, 1, 5, 17]
    with pytest.raises(ValueError):
        Calibration.from_dict(bad)
    bad = cal.to_dict()
    bad["verify_ms"] = bad["verify_ms"][:1]
    with pytest.raises(ValueError):
        Calibration.from_dict(bad)


# -- kept tables --------------------------------------------------------------------------
def test_store_keeps_a_table_per_model_and_drops_it_when_the_model_or_versions_change(
        models, tmp_path):
    target = models["target"]
    store = CalibrationStore(tmp_path / "cal")
    key = target_key(target, "float32")
    cal = new_table(target, key, [16], [[1, 2]], [[1.0, 1.5]], 0.1)
    store.save(cal)
    assert CalibrationStore(tmp_path / "cal").load(target, key) == cal  # a new process reads it
    assert CalibrationStore(tmp_path / "cal").load(target, {**key, "mlx": "0.0.0"}) is None
    assert CalibrationStore(tmp_path / "cal").load(target, {**key, "precision": "bf16"}) is None
    weights = next(target.glob("*.safetensors"))
    st = weights.stat()
    os.utime(weights, ns=(st.st_atime_ns, st.st_mtime_ns + 10**9))
    try:
        assert target_key(target, "float32") != key  # the weights changed: measured again
    finally:
        os.utime(weights, ns=(st.st_atime_ns, st.st_mtime_ns))
    path = store.path_for(target)
    path.write_text("{ torn")
    assert CalibrationStore(tmp_path / "cal").load(target, key) is None


def test_tables_of_models_that_are_gone_are_removed(models, tmp_path):
    store = CalibrationStore(tmp_path / "cal")
    gone = new_table(tmp_path / "deleted-model", {"k": "v"}, [16], [[1]], [[1.0]], 0.1)
    store.save(gone)
    assert store.path_for(gone.model_path).is_file()
    store.save(new_table(models["target"], {"k": "v"}, [16], [[1]], [[1.0]], 0.1))
    assert not store.path_for(gone.model_path).exists()


# -- the session ---------------------------------------------------------------------------
def test_first_request_measures_with_progress_and_a_new_session_does_not(models, tmp_path):
    folder = tmp_path / "cal"
    first = Session(calibrations=CalibrationStore(folder))
    first.load_target(models["target"])
    statuses, done = _run(first, draft_kind="prompt-lookup")
    warm = [s for s in statuses if s.stage == "warmup"]
    assert warm, "the first request with speculation measures this machine"
    fractions = [s.progress for s in warm if s.progress is not None]
    assert fractions[0] == 0.0 and fractions[-1] == 1.0 and fractions == sorted(fractions)
    assert all("speed for speculation" in s.message for s in warm)
    assert "of" in warm[-1].message and "verify" not in " ".join(s.message for s in warm)
    assert done.timings.warmup_ms > 0
    assert done.timings.ttft_ms >= done.timings.warmup_ms  # the wait is in the TTFT
    cal = first.calibration
    assert cal is not None and cal.contexts[0] == 16 and cal.contexts[-1] <= 1024
    assert all(cal.verify_ms_at(n + 1, 16) >= cal.verify_ms_at(n, 16) for n in range(1, 17))

    again, done_again = _run(first, draft_kind="prompt-lookup")  # same process: nothing more
    assert not [s for s in again if s.stage == "warmup"] and done_again.timings.warmup_ms == 0

    second = Session(calibrations=CalibrationStore(folder))  # a new process, same machine
    second.load_target(models["target"])
    statuses2, done2 = _run(second, draft_kind="prompt-lookup")
    assert not [s for s in statuses2 if s.stage == "warmup"]
    assert done2.timings.warmup_ms == 0.0
    assert second.calibration == cal
    assert done2.token_ids == done.token_ids


def test_a_drafter_step_is_measured_once_and_kept_beside_the_target_table(models, tmp_path):
    folder = tmp_path / "cal"
    s = Session(calibrations=CalibrationStore(folder))
    s.load_target(models["target"])
    _run(s, draft_kind="prompt-lookup")  # the target's table only: lookup runs no model
    assert s.calibration is not None and s.calibration.drafters == {}
    s.load_draft(models["draft"])
    statuses, done = _run(s, draft_kind="full-model")
    warm = [x for x in statuses if x.stage == "warmup"]
    assert len(warm) == 1 and "Draft model" in warm[0].message and done.timings.warmup_ms > 0
    (name,) = s.calibration.drafters
    assert name.startswith("full-model:") and s.calibration.draft_ms(name) > 0

    fresh = Session(calibrations=CalibrationStore(folder))
    fresh.load_target(models["target"])
    fresh.load_draft(models["draft"])
    statuses, done = _run(fresh, draft_kind="full-model")
    assert not [x for x in statuses if x.stage == "warmup"] and done.timings.warmup_ms == 0


def test_stop_during_the_measurement_keeps_nothing(models, tmp_path):
    folder = tmp_path / "cal"
    s = Session(calibrations=CalibrationStore(folder))
    s.load_target(models["target"])
    cancel = threading.Event()
    done = None
    for ev in s.generate(GenerationRequest(prompt="Hi", draft_kind="prompt-lookup",
                                           max_tokens=8), cancel=cancel):
        if isinstance(ev, StatusEvent) and ev.stage == "warmup" and (ev.progress or 0) > 0:
            cancel.set()
        if isinstance(ev, DoneEvent):
            done = ev
    assert done is not None and done.finish_reason == "cancelled"
    assert s.calibration is None and not list(folder.glob("*.json"))


def test_reported_ttft_covers_the_wait_from_submission_to_the_first_token(models, tmp_path):
    s = Session(calibrations=CalibrationStore(tmp_path / "cal"))
    s.load_target(models["target"])
    for kind in ("prompt-lookup", "prompt-lookup", "none"):  # with a warm-up, then without
        submitted = time.perf_counter()
        first = None
        request = GenerationRequest(prompt="The cat sat on", max_tokens=8, draft_kind=kind,
                                    submitted_at=submitted)
        time.sleep(0.05)  # the request waited before the engine took it (a queue, a load)
        for ev in s.generate(request):
            if isinstance(ev, TokenEvent) and first is None:
                first = time.perf_counter()
            if isinstance(ev, DoneEvent):
                done = ev
        assert first is not None
        assert done.timings.ttft_ms >= (first - submitted) * 1e3


def test_a_shorter_context_never_measures_dearer_than_a_longer_one():
    from app.engine.calibration_measure import _never_cheaper_later

    # the first row was measured while another program held the processor
    rows = _never_cheaper_later([[1, 2, 3, 17], [1, 17]], [[90.0, 95.0, 9.0, 99.0], [20.0, 52.0]])
    assert rows[1] == [20.0, 52.0]
    assert rows[0] == [20.0, 22.0, 9.0, 52.0]  # bounded by the longer context, interpolated


# -- the command -----------------------------------------------------------------------------
def test_calibrate_command_measures_again_and_prints_the_table(models, tmp_path, monkeypatch,
                                                               capsys):
    from app.cli import main

    monkeypatch.setenv("DRAFTPAIR_DATA_DIR", str(tmp_path / "data"))
    args = ["calibrate", "--model", str(models["target"]), "--draft-model", str(models["draft"])]
    assert main(args) == 0
    out = capsys.readouterr()
    assert "One plain step" in out.out and "tokens checked" in out.out
    assert "Draft model" in out.out and re.search(r"Prompt lookup +runs no model", out.out)
    assert str(tmp_path / "data" / "calibration") in out.out
    assert "speed for speculation" in out.err  # progress while it measures
    assert main([*args, "--json", "--draft-kind", "full-model"]) == 0
    table = json.loads(capsys.readouterr().out)
    assert table["verify_cost"][str(table["contexts"][0])]["1"] == 1.0
    assert table["draft_cost"]["full-model"] > 0 and len(table["drafters"]) == 1
    kept = CalibrationStore(tmp_path / "data" / "calibration").load(
        models["target"], table["key"])
    assert kept is not None and kept.to_dict()["verify_ms"] == table["verify_ms"]
    assert main(["calibrate", "--model", str(models["target"]), "--draft-kind", "mtp"]) == 1
    assert "cannot be measured" in capsys.readouterr().err


def test_generate_says_when_it_measures_and_counts_the_wait_in_its_ttft(models, tmp_path,
                                                                        monkeypatch, capsys):
    from app.cli import main

    monkeypatch.setenv("DRAFTPAIR_DATA_DIR", str(tmp_path / "data"))
    args = ["generate", "--model", str(models["target"]), "--draft-kind", "prompt-lookup",
            "--prompt", "The cat sat on", "--max-tokens", "6", "--json"]
    started = time.perf_counter()
    assert main(args) == 0
    took_ms = (time.perf_counter() - started) * 1e3
    out = capsys.readouterr()
    timings = json.loads(out.out)["timings"]
    assert "note: Measuring this computer's speed for speculation" in out.err
    assert timings["warmup_ms"] > 0 and took_ms >= timings["ttft_ms"] >= timings["warmup_ms"]
    assert main(args) == 0  # the next command reads the kept table
    out = capsys.readouterr()
    assert "speed for speculation" not in out.err
    assert json.loads(out.out)["timings"]["warmup_ms"] == 0


def test_measuring_again_can_be_stopped_and_keeps_the_earlier_table(models, tmp_path):
    folder = tmp_path / "cal"
    s = Session(calibrations=CalibrationStore(folder))
    s.load_target(models["target"])
    s.load_draft(models["draft"])
    _run(s, draft_kind="full-model")
    (kept,) = folder.glob("*.json")
    before = kept.read_bytes()
    cancel = threading.Event()
    steps = s.recalibrate(["prompt-lookup", "full-model"], cancel=cancel)
    for ev in steps:
        if ev.progress and ev.progress > 0.5:
            cancel.set()
    assert kept.read_bytes() == before
    again = s.recalibrate(["full-model"])
    statuses = list(again)
    assert statuses[-1].message.startswith("Measuring the drafter's speed: Draft model")
    assert kept.read_bytes() != before and "only the first time" not in statuses[1].message


def test_a_slow_machine_keeps_the_main_pass_sizes_within_the_time_budget(models):
    from app.engine.calibration_measure import WIDE_SIZES, measure_target
    from app.engine.models import load_model

    target = load_model(models["target"])
    sweep = measure_target(target, budget_s=0.0)  # every optional pass is over budget
    steps = []
    while True:
        try:
            steps.append(next(sweep))
        except StopIteration as end:
            cal = end.value
            break
    assert cal.contexts == (16,) and cal.sizes == (WIDE_SIZES,)
    assert steps[-1].fraction == 1.0 and cal.verify_cost(4, 16) >= 1.0


def test_a_short_budget_measures_the_longer_context_before_the_sizes_between(
        models, monkeypatch):
    """A warm-up's few seconds go first to how a pass grows with the context (a reply of a
    long prompt is priced from it), then to the in-between sizes at the shortest one. The
    clock is simulated: every reading of it takes 50 ms, as on a slow machine."""
    from app.engine import calibration_measure
    from app.engine.calibration_measure import FIRST_SIZES, WIDE_SIZES, measure_target
    from app.engine.models import load_model

    class SlowClock:
        now = 0.0

        def perf_counter(self) -> float:
            self.now += 0.05
            return self.now

    monkeypatch.setattr(calibration_measure, "time", SlowClock())
    target = load_model(models["target"])
    sweep = measure_target(target, budget_s=3.5, contexts=[16, 512, 2048])
    while True:
        try:
            next(sweep)
        except StopIteration as end:
            cal = end.value
            break
    assert cal.contexts == (16, 512)  # the longer context fitted; the longest did not
    assert all(set(WIDE_SIZES) <= set(row) for row in cal.sizes)
    assert set(cal.sizes[1]) == set(WIDE_SIZES)
    assert set(WIDE_SIZES) < set(cal.sizes[0]) < set(FIRST_SIZES)  # some between, as time left


def test_a_table_measured_while_busy_is_measured_again_once_the_computer_is_idle(
        models, tmp_path, monkeypatch):
    from app.engine import session as session_mod

    store = CalibrationStore(tmp_path / "cal")
    key = target_key(models["target"], "float32")
    store.save(new_table(models["target"], key, [16], [[1, 2]], [[1.0, 3.0]], 0.1, load=4.0))
    assert store.load(models["target"], key).busy
    s = Session(calibrations=CalibrationStore(tmp_path / "cal"))
    monkeypatch.setattr(session_mod, "current_load", lambda: 3.0)  # still busy: keep it
    s.load_target(models["target"])
    assert s.calibration is not None and s.calibration.busy
    monkeypatch.setattr(session_mod, "current_load", lambda: 0.1)  # idle now: measure again
    s.load_target(models["target"])
    assert s.calibration is None
