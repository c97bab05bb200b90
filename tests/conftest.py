"""Shared test set-up: Qt strictness, no dangling QThreads/QTimers, tiny checkpoints, a data
folder of the run's own for what tests measure.

Generic on purpose: engine and checkpoint tests use the checkpoint fixtures and never import
Qt; the thread/timer guard only arms itself when PySide6 is already imported.
"""

from __future__ import annotations

import gc
import os
import shutil
import sys
import tempfile
from pathlib import Path

import pytest

# Qt prints this for every shown window on the offscreen platform; it is not our warning.
QT_LOG_IGNORE = (
    "This plugin does not support propagateSizeHints",
    "This plugin does not support raise",
    "This plugin does not support grabbing the keyboard",
)


DATA_ENV = "DRAFTPAIR_DATA_DIR"
_data_before: dict[str, str | None] = {}


def _data_folder_of_the_suite() -> Path:
    """A data folder for this run: every entry of the real one (the prepared demo target under
    ``models``, the demo trainers' folders...) linked in, except ``calibration`` and
    ``auto-record``, so the speed tables and auto records of the tests' tiny models stay out
    of this machine's. A test that sets
    DRAFTPAIR_DATA_DIR itself still gets a folder of its own."""
    from platformdirs import user_data_path

    real = Path(os.environ.get(DATA_ENV) or user_data_path("DraftPair", appauthor=False))
    suite = Path(tempfile.mkdtemp(prefix="draftpair-test-data-"))
    try:  # the demo target is prepared (and kept) in the real folder's models
        (real / "models").mkdir(parents=True, exist_ok=True)
    except OSError:
        pass
    if real.is_dir():
        for entry in real.iterdir():
            if entry.name not in ("calibration", "auto-record"):
                (suite / entry.name).symlink_to(entry, target_is_directory=entry.is_dir())
    return suite


def pytest_configure(config: pytest.Config) -> None:
    from app.demo.builtins import register_demo_models

    _data_before["value"] = os.environ.get(DATA_ENV)
    suite = _data_folder_of_the_suite()
    _data_before["suite"] = str(suite)
    os.environ[DATA_ENV] = str(suite)
    register_demo_models()  # what the CLI and the app do at start-up
    for pattern in QT_LOG_IGNORE:
        config.addinivalue_line("qt_log_ignore", pattern)
    # No automatic cycle collection in the test process: it would run on whichever thread
    # allocates (an engine or pool thread) and free Qt wrappers of an earlier test there, which
    # deadlocks PySide. Each test ends with a collection on the main thread instead, and the
    # main window collects on its own GUI-thread timer (app.ui.gui_gc), as the app does.
    gc.disable()


def pytest_unconfigure(config: pytest.Config) -> None:
    suite = _data_before.pop("suite", None)
    if suite is None:
        return
    before = _data_before.pop("value", None)
    if before is None:
        os.environ.pop(DATA_ENV, None)
    else:
        os.environ[DATA_ENV] = before
    for entry in Path(suite).iterdir():
        if entry.is_symlink():
            entry.unlink()  # the real folder's entries: only the links go
    shutil.rmtree(suite, ignore_errors=True)


def pytest_runtest_setup(item: pytest.Item) -> None:
    # a demo test whose demo is missing where it must run (tests/demo_gate.py): a failure
    for mark in item.iter_markers("demo_missing"):
        pytest.fail(mark.args[0], pytrace=False)


def pytest_collection_finish(session: pytest.Session) -> None:
    gc.collect()
    gc.freeze()  # what imports and collection built stays: each test's collection stays cheap


# -- Qt: fail a test that leaves threads or timers running (napari conftest) -------------------
@pytest.fixture(autouse=True)
def _no_dangling_qt(request: pytest.FixtureRequest):
    if "PySide6.QtCore" not in sys.modules:
        yield
        gc.collect()
        return
    from PySide6.QtCore import QThread, QThreadPool, QTimer
    from shiboken6 import isValid

    threads: list = []
    timers: list = []
    pools: list = []
    orig_thread_start = QThread.start
    orig_timer_start = QTimer.start
    orig_pool_start = QThreadPool.start

    def thread_start(self, *a, **kw):
        threads.append(self)
        return orig_thread_start(self, *a, **kw)

    def timer_start(self, *a, **kw):
        timers.append(self)
        return orig_timer_start(self, *a, **kw)

    def pool_start(self, *a, **kw):
        pools.append(self)
        return orig_pool_start(self, *a, **kw)

    mp = pytest.MonkeyPatch()
    mp.setattr(QThread, "start", thread_start)
    mp.setattr(QTimer, "start", timer_start)
    mp.setattr(QThreadPool, "start", pool_start)
    try:
        yield
    finally:
        mp.undo()
    # Qt wrappers left in reference cycles are freed now, on the GUI thread, not by a later
    # collection that happens to run on an engine or pool thread of another test.
    gc.collect()
    problems = []
    for t in threads:
        if isValid(t) and t.isRunning():
            t.wait(5000)
            if t.isRunning():
                problems.append(f"QThread {t.objectName() or t!r} still running")
    for tm in timers:
        if isValid(tm) and tm.isActive():
            problems.append(f"QTimer (interval {tm.interval()} ms, parent {tm.parent()!r}) still active")
    for p in pools:
        if isValid(p) and not p.waitForDone(5000):
            problems.append("QThreadPool still has running tasks")
    if problems and not getattr(request.node, "_dangling_allowed", False):
        pytest.fail("; ".join(problems), pytrace=False)


# -- tiny checkpoints (real mlx-lm llama + real tokenizer), built once per session -------------
@pytest.fixture(scope="session")
def tiny_models(tmp_path_factory: pytest.TempPathFactory):
    """target, draft (same tokenizer, smaller) and permuted_draft (same size, permuted ids)."""
    from types import SimpleNamespace

    from tests.builders import make_checkpoint

    root = tmp_path_factory.mktemp("tiny-models")
    small = dict(hidden_size=32, num_layers=1, num_heads=2, num_kv_heads=1, intermediate_size=64)
    return SimpleNamespace(
        root=root,
        target=make_checkpoint(root / "tiny-target", seed=0),
        draft=make_checkpoint(root / "tiny-draft", seed=1, **small),
        permuted_draft=make_checkpoint(
            root / "tiny-permuted-draft", seed=2, tokenizer_kwargs={"permute_seed": 7}, **small
        ),
    )


@pytest.fixture(scope="session")
def tiny_target(tiny_models) -> Path:
    return tiny_models.target


@pytest.fixture(scope="session")
def tiny_draft(tiny_models) -> Path:
    return tiny_models.draft
