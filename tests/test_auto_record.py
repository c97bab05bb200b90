"""The pair's record kept on disk: a new start of the app begins where the last one ended."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

from app.engine.auto_evidence import Evidence
from app.engine.auto_memory import Memory
from app.engine.auto_record import RecordStore, evidence_to_dict
from app.engine.calibration import CalibrationStore, new_table
from app.engine.events import DoneEvent, GenerationRequest, SamplingParams
from app.engine.session import Session
from tests.test_auto import AUTO, pair  # noqa: F401 - the module's tiny pair

GREEDY = SamplingParams()


def _evidence(rounds: int, hits: int) -> Evidence:
    ev = Evidence()
    for i in range(rounds):
        ev.observe(2, 2 if i < hits else 0)
    return ev


def test_a_record_reads_back_as_it_was_kept_and_a_bad_file_is_a_record_of_nothing(tmp_path):
    store = RecordStore(tmp_path / "auto-record")
    mtp = _evidence(10, 7)
    store.save("target-a", {"greedy": {"mtp": mtp}})
    back = RecordStore(tmp_path / "auto-record").load("target-a")
    assert back["greedy"]["mtp"] == mtp
    assert RecordStore(tmp_path / "auto-record").load("target-b") == {}
    store.save("target-a", {"temperature 0.7": {"dflash:abc": _evidence(3, 0)}})
    merged = store.load("target-a")  # a later save keeps what it did not hold
    assert merged["greedy"]["mtp"] == mtp and merged["temperature 0.7"]["dflash:abc"].rounds > 0
    path = store.path_for("target-a")
    assert path is not None
    for bad in ("{not json", json.dumps({"format": 1, "target": "target-a",
                                         "regimes": {"greedy": {"mtp": {"prior": "x"}}}})):
        path.write_text(bad)
        assert store.load("target-a") == {}
    assert RecordStore(None).load("target-a") == {}


def test_a_record_of_the_format_before_is_read_without_its_copy_classes(tmp_path):
    """Copy classes were once by a copy's length, now by its match: a record kept before
    keeps each source's own evidence and drops its classes, which meant something else."""
    store = RecordStore(tmp_path / "auto-record")
    path = store.path_for("target-a")
    assert path is not None
    path.parent.mkdir(parents=True)
    mtp, copies = _evidence(10, 7), _evidence(6, 6)
    path.write_text(json.dumps({"format": 1, "target": "target-a", "regimes": {"greedy": {
        "mtp": evidence_to_dict(mtp), "prompt-lookup": evidence_to_dict(copies),
        "prompt-lookup#3": evidence_to_dict(copies)}}}))
    back = store.load("target-a")
    assert back == {"greedy": {"mtp": mtp, "prompt-lookup": copies}}
    store.save("target-a", {"greedy": {"prompt-lookup#3": _evidence(2, 0)}})
    assert json.loads(path.read_text())["format"] == 2  # written again in today's format
    assert set(store.load("target-a")["greedy"]) == {"mtp", "prompt-lookup", "prompt-lookup#3"}


def test_sources_are_read_back_only_for_the_same_drafter_and_never_over_what_ran_since():
    kept = {"greedy": {"full-model:aaa": _evidence(12, 2), "prompt-lookup#2": _evidence(8, 8)}}
    memory = Memory()
    memory.restore(kept, {"full-model": "full-model:bbb", "prompt-lookup": "prompt-lookup"})
    record = memory.history(GREEDY).evidence
    assert "full-model" not in record  # another draft folder: its record says nothing here
    assert record["prompt-lookup#2"] == kept["greedy"]["prompt-lookup#2"]  # a copy class
    memory.history(GREEDY).observe("prompt-lookup", 2, 0)
    seen = record["prompt-lookup"].rounds
    memory.restore({"greedy": {"prompt-lookup": _evidence(30, 30)}}, {"prompt-lookup": "prompt-lookup"})
    assert record["prompt-lookup"].rounds == seen  # read once per drafter: this run's stays
    out = memory.export({"prompt-lookup": "prompt-lookup", "full-model": "full-model:bbb"})
    assert set(out["greedy"]) == {"prompt-lookup", "prompt-lookup#2"}


def _session(folder: Path, models: dict[str, Path], draft: Path | None = None) -> Session:
    s = Session(calibrations=CalibrationStore(folder))
    s.load_target(models["target"])
    s.load_draft(draft or models["weak"])
    assert s.target is not None
    s.calibration = new_table(s.target.path, {}, [0], [[1, 17]], [[10.0, 10.0]], 0.0)
    return s


def _auto(s: Session) -> DoneEvent:
    done = list(s.generate(GenerationRequest(prompt="The cat sat on", max_tokens=16,
                                             draft_kind=AUTO, chat=False)))[-1]
    assert isinstance(done, DoneEvent) and done.finish_reason != "error", done.error
    return done


def test_the_next_start_of_the_app_begins_from_the_pairs_record(pair, tmp_path):  # noqa: F811
    folder = tmp_path / "calibration"
    first = _session(folder, pair)
    _auto(first)
    kept = first.auto_memory.history(GREEDY).evidence["full-model"]
    assert kept.rounds > 0
    second = _session(folder, pair)  # a new process, the same pair
    assert second.auto_memory.history(GREEDY).evidence == {}
    done = _auto(second)
    ran = done.timings.sources["full-model"]["rounds"]
    now = second.auto_memory.history(GREEDY).evidence["full-model"]
    assert now.rounds > ran  # its first request started from the record, not from nothing
    # the same weights from another folder are another drafter: it starts from the prior
    other = tmp_path / "other-draft"
    shutil.copytree(pair["weak"], other, copy_function=shutil.copy)
    third = _session(folder, pair, draft=other)
    third.restore_auto_record(["full-model"])
    assert "full-model" not in third.auto_memory.history(GREEDY).evidence
    _auto(third)
    assert third._record_target is not None
    path = third.auto_records.path_for(third._record_target)
    assert path is not None
    kept_keys = json.loads(path.read_text())["regimes"]["greedy"]
    assert len([k for k in kept_keys if k.startswith("full-model:")]) == 2  # one per folder


def test_a_damaged_record_does_not_stop_a_request_and_is_written_again(pair, tmp_path):  # noqa: F811
    folder = tmp_path / "calibration"
    s = _session(folder, pair)
    assert s._record_target is not None
    path = s.auto_records.path_for(s._record_target)
    assert path is not None
    path.parent.mkdir(parents=True)
    path.write_text("\0\0 not a record")
    _auto(s)
    kept = json.loads(path.read_text())["regimes"]["greedy"]
    assert [v["seen"] > 0 for k, v in kept.items() if k.startswith("full-model:")] == [True]


def test_nothing_is_kept_where_the_tables_are_not(pair):  # noqa: F811
    s = Session(calibrations=CalibrationStore(None))
    assert s.auto_records.folder is None
    s.load_target(pair["target"])
    s.keep_auto_record(["prompt-lookup"])  # no folder: nothing written, nothing raised
