"""The desktop app on the real engine with tiny checkpoints (pytest-qt, offscreen)."""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest
from PySide6.QtCore import Qt

from app.ui.chat_store import ChatStore
from app.ui.live import RATE_WINDOW_S
from app.ui.main_window import AppContext, MainWindow
from app.ui.settings import Settings, SettingsStore

LOAD_TIMEOUT = 60_000
REPLY_TIMEOUT = 60_000


@pytest.fixture
def make_window(qtbot, tmp_path, tiny_models):
    windows: list[MainWindow] = []

    def make(*, draft: bool = True, store=None, **settings_kw) -> MainWindow:
        from app.checkpoints.store import Store

        settings = Settings(target=str(tiny_models.target), draft="", **settings_kw)
        if store is None:
            store = Store(data_dir=tmp_path / "data", hf_cache=tmp_path / "hf")
        ctx = AppContext(
            SettingsStore(tmp_path / "settings.json"), settings,
            ChatStore(tmp_path / "chat.sqlite3"), checkpoint_store=store, autoload=False,
        )
        w = MainWindow(ctx)
        qtbot.addWidget(w)
        w.show()
        with qtbot.waitSignal(w.client.model_state, timeout=LOAD_TIMEOUT):
            w.load_pair(str(tiny_models.target), str(tiny_models.draft) if draft else "")
        windows.append(w)
        return w

    yield make
    for w in windows:
        w.close()
        assert not w.client.engine_thread.isRunning()
        w.ctx.chat_store.close()


def _send(qtbot, w: MainWindow, text: str, *, kind: str, max_tokens: int) -> object:
    chat = w.chat
    chat.spec_combo.set_kind(kind)
    chat.max_spin.setValue(max_tokens)
    chat.input.setPlainText(text)
    with qtbot.waitSignal(chat.reply_finished, timeout=REPLY_TIMEOUT) as blocker:
        qtbot.keyClick(chat.input, Qt.Key.Key_Return, Qt.KeyboardModifier.ControlModifier)
    return blocker.args[0]


def test_chat_streams_a_reply_with_stats(qtbot, make_window):
    w = make_window()
    assert w.client.state.draft == "tiny-draft"
    assert w.chat.spec_combo.unavailable_reason() is None
    done = _send(qtbot, w, "Hello! How can I help you today?", kind="full-model", max_tokens=24)
    assert done.finish_reason in ("stop", "length")
    assert done.timings.draft_kind == "full-model"
    text = w.chat.transcript.toPlainText()
    assert "You\nHello! How can I help you today?" in text
    assert "Assistant" in text and done.text.strip()[:10] in text
    msgs = w.chat.store.messages(w.chat.conv_id)
    assert [m.role for m in msgs] == ["user", "assistant"]
    reply = msgs[-1]
    assert reply.status == "complete" and reply.content == done.text
    line = reply.stats["line"]
    assert "tok/s" in line and "TTFT" in line and "accepted" in line and "Draft model" in line
    assert line in text
    # highlighted spans are stored and sum up to the reply
    assert "".join(t for t, _ in reply.segments) == reply.content
    # the live panels were fed by the worker and painted by the timer
    snap = w.chat.job.live.snapshot() if w.chat.job else None
    assert snap is None
    live = w.chat.panels._runs[0].run.snapshot()
    assert live.tokens == done.timings.predicted_n
    # the rate is plotted from the first full window on, once per token; a reply shorter than
    # one window plots its own overall rate once
    assert 1 <= len(live.rate) <= done.timings.predicted_n
    if live.elapsed_s < RATE_WINDOW_S:
        assert len(live.rate) == 1
    assert w.chat.panels._runs[0].run.snapshot().rounds.shape[0] == done.timings.draft_rounds
    # conversation title taken from the first message; Markdown export
    assert w.chat.conv_list.currentItem().text().startswith("Hello!")
    md = Path(w.chat.export_markdown(str(Path(w.ctx.chat_store.path).parent / "c.md")))
    assert "**Assistant:**" in md.read_text() and line in md.read_text()


def test_speculation_that_cannot_run_says_why(qtbot, make_window):
    w = make_window(draft=False)
    w.chat.spec_combo.set_kind("full-model")
    assert "no draft model" in (w.chat.spec_combo.unavailable_reason() or "")
    done = _send(qtbot, w, "The quick brown fox", kind="full-model", max_tokens=8)
    assert done.timings.fallback
    assert "Speculation did not run" in w.chat.transcript.toPlainText()


def test_stop_mid_reply_and_partial_text_is_kept(qtbot, make_window):
    w = make_window(draft=False)
    chat = w.chat
    chat.spec_combo.set_kind("prompt-lookup")
    chat.max_spin.setValue(20000)
    chat.input.setPlainText("Numbers: 0 1 2 3 4 5 6 7 8 9 10")
    chat.send()
    qtbot.waitUntil(lambda: chat.job is not None and chat.job.live.snapshot().tokens >= 20,
                    timeout=REPLY_TIMEOUT)
    assert chat.stop_btn.isEnabled() and not chat.send_btn.isEnabled()
    t0 = time.perf_counter()
    with qtbot.waitSignal(chat.reply_finished, timeout=10_000) as blocker:
        qtbot.keyClick(chat.input, Qt.Key.Key_Escape)
    assert time.perf_counter() - t0 < 5.0
    done = blocker.args[0]
    assert done.finish_reason == "cancelled"
    assert 20 <= done.timings.predicted_n < 20000
    reply = chat.store.messages(chat.conv_id)[-1]
    assert reply.status == "cancelled" and reply.content == done.text and reply.content
    assert "stopped by you" in reply.stats["line"]
    assert chat.send_btn.isEnabled() and chat.regen_btn.isEnabled()
    # Regenerate replaces the last reply
    chat.max_spin.setValue(6)
    with qtbot.waitSignal(chat.reply_finished, timeout=REPLY_TIMEOUT):
        chat.regenerate()
    msgs = chat.store.messages(chat.conv_id)
    assert [m.role for m in msgs] == ["user", "assistant"] and msgs[-1].status == "complete"


def test_close_while_generating_shuts_down_cleanly(qtbot, make_window, tmp_path):
    w = make_window(draft=False)
    chat = w.chat
    chat.max_spin.setValue(20000)
    chat.input.setPlainText("Once upon a time")
    chat.send()
    qtbot.waitUntil(lambda: chat.job is not None and chat.job.live.snapshot().tokens >= 5,
                    timeout=REPLY_TIMEOUT)
    t0 = time.perf_counter()
    w.close()
    assert time.perf_counter() - t0 < 10
    assert not w.client.engine_thread.isRunning()
    # the partial reply was saved, and a fresh store marks nothing as still streaming
    store = ChatStore(tmp_path / "chat.sqlite3")
    conv = store.conversations()[0]
    reply = store.messages(conv.id)[-1]
    assert reply.role == "assistant" and reply.status in ("cancelled", "complete")
    assert reply.content
    store.close()
    saved = json.loads((tmp_path / "settings.json").read_text())
    assert saved["schema_version"] >= 2


def test_compare_run_produces_a_result_card(qtbot, make_window, tmp_path):
    w = make_window(draft=True)
    cmp = w.compare
    w.show_view("Compare")
    cmp.kind_combo.set_kind("full-model")
    cmp.runs_spin.setValue(2)
    cmp.max_spin.setValue(24)
    with qtbot.waitSignal(cmp.compare_finished, timeout=REPLY_TIMEOUT * 2) as blocker:
        qtbot.mouseClick(cmp.run_btn, Qt.MouseButton.LeftButton)
    s = blocker.args[0]
    assert s is not None and s.pairs == 2
    # the benchmark's plan (app.bench.measure): the second pair runs in the other order
    assert [(r.mode, r.repeat) for r in cmp.results] == [("off", 0), ("on", 0), ("on", 1),
                                                         ("off", 1)]
    assert s.speedup_min <= s.speedup_median <= s.speedup_max
    card = cmp.card_body.text()
    assert "median speedup" in card and "×" in card and "Extra memory" in card
    assert ("Identical outputs" in card) == s.identical
    if s.identical:  # greedy + exact verification: same text off and on
        assert cmp.off_text.toPlainText() == cmp.on_text.toPlainText()
    assert len(cmp.panels._runs) == 2  # off and on overlaid
    out = cmp.export(str(tmp_path / "cmp.json"))
    assert out is not None
    data = json.loads(Path(out[0]).read_text())
    assert data["summary"]["pairs"] == 2 and len(data["runs"]) == 4
    assert Path(out[1]).stat().st_size > 1000
    assert cmp.repeat_btn.isEnabled()


REPEATING = "The cat sat on the mat. The dog sat on the log. The cat sat on the mat. The cat sat"


def test_copies_from_the_context_are_counted_in_chat_and_compare(qtbot, make_window):
    """Prompt lookup beside the draft model: the reply's stats line and the Compare card say
    how many accepted tokens were copies of the context, the same count the rounds carry."""
    from app.ui.format import copied_accepted

    w = make_window(draft=True)
    done = _send(qtbot, w, REPEATING, kind="full-model", max_tokens=32)
    copied = copied_accepted(done)
    assert copied > 0 and copied <= done.timings.draft_n_accepted
    line = w.chat.store.messages(w.chat.conv_id)[-1].stats["line"]
    assert f"accepted {done.timings.draft_n_accepted}/" in line
    assert f"{copied} of them copied from the context" in line

    cmp = w.compare
    w.show_view("Compare")
    cmp.kind_combo.set_kind("full-model")
    cmp.prompt.setPlainText(REPEATING)
    cmp.runs_spin.setValue(1)
    cmp.max_spin.setValue(32)
    with qtbot.waitSignal(cmp.compare_finished, timeout=REPLY_TIMEOUT * 2) as blocker:
        qtbot.mouseClick(cmp.run_btn, Qt.MouseButton.LeftButton)
    s = blocker.args[0]
    on = [r.done for r in cmp.results if r.mode == "on"]
    assert s.copied == sum(copied_accepted(d) for d in on) > 0
    assert f"{s.copied} of them copied from the context" in cmp.card_body.text()


def test_pairing_view_explains_an_incompatible_draft(qtbot, make_window, tmp_path, tiny_models):
    from app.checkpoints.store import Store

    store = Store(data_dir=tmp_path / "data", hf_cache=tmp_path / "hf")
    for p in (tiny_models.target, tiny_models.draft, tiny_models.permuted_draft):
        store.import_folder(p)
    w = make_window(draft=False, store=store)
    models = w.models
    w.show_view("Models")
    with qtbot.waitSignal(models.listed, timeout=20_000):
        models.refresh()
    names = {models.table.item(r, 0).data(Qt.ItemDataRole.UserRole) for r in range(models.table.rowCount())}
    assert {"tiny-target", "tiny-draft", "tiny-permuted-draft"} <= names
    badges = {models.table.item(r, 4).text() for r in range(models.table.rowCount())}
    assert "✔ fits" in badges
    with qtbot.waitSignal(models.pairing_shown, timeout=20_000):
        models.select_entry("tiny-target")
    ranked = [s.name for s in models.suggestions.ranked]
    assert "tiny-draft" in ranked
    reasons = models.excluded_reasons()
    assert "tiny-permuted-draft" in reasons
    why = reasons["tiny-permuted-draft"].lower()
    assert "token" in why and why.endswith(".")
    # the tree shows that sentence next to the draft, and loading the pair goes to Chat
    texts = []
    root = models.pair_tree.invisibleRootItem()
    for i in range(root.childCount()):
        group = root.child(i)
        texts += [(group.child(j).text(0), group.child(j).text(1)) for j in range(group.childCount())]
    assert any("tiny-permuted-draft" in a and b == reasons["tiny-permuted-draft"] for a, b in texts)
    assert any("Prompt lookup (no draft model)" in a for a, _ in texts)  # the pickers' name


def test_download_progress_cancel_and_resume_against_the_fake_hub(
    qtbot, make_window, tmp_path, tiny_models, monkeypatch
):
    from tests.fakehub import FakeHub

    hub = FakeHub()
    hub.add_repo("tiny/draft-mlx", folder=tiny_models.draft)
    url = hub.start()
    monkeypatch.setenv("HF_ENDPOINT", url)
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path / "hf"))
    monkeypatch.setenv("HF_HUB_DISABLE_TELEMETRY", "1")
    try:
        w = make_window(draft=False)
        m = w.models
        hub.throttle_bps = 200_000
        updates: list = []
        real = m._on_progress
        monkeypatch.setattr(m, "_on_progress", lambda p: (updates.append(p), real(p)))
        m.repo_edit.setText("tiny/draft-mlx")
        m.download_selected()
        qtbot.waitUntil(lambda: any(p.done_bytes > 0 for p in updates), timeout=20_000)
        assert m.cancel_btn.isEnabled()
        with qtbot.waitSignal(m.download_finished, timeout=20_000):
            m.cancel_download()
        assert m.resume_btn.isEnabled() and "Cancelled" in m.dl_title.text()
        hub.throttle_bps = None
        with qtbot.waitSignal(m.download_finished, timeout=30_000) as blocker:
            m.resume_download()
        path = Path(blocker.args[0])
        assert (path / "config.json").exists() and (path / "model.safetensors").exists()
        assert m.dl_bar.value() == 1000
        assert " of " in m.dl_bytes.text()
        assert updates[-1].total_bytes > 0 and updates[-1].files_total >= 3
    finally:
        hub.stop()


def test_bench_view_runs_the_quick_suite_on_the_loaded_pair(qtbot, make_window, monkeypatch):
    from app.bench import BenchConfig

    w = make_window(draft=True)
    bench = w.bench
    assert bench is not None
    w.show_view("Bench")
    real = BenchConfig.quick_preset

    def tiny_quick(**kw):  # the quick suite, cut to one task and few tokens for the test
        import dataclasses

        from app.bench.suite import load_suite

        cfg = real(**kw)
        first = next(t for t in load_suite(cfg.suite_path) if t.quick)
        return dataclasses.replace(cfg, task_ids=(first.id,), max_tokens=12, peers=False)

    monkeypatch.setattr(BenchConfig, "quick_preset", staticmethod(tiny_quick))
    with qtbot.waitSignal(bench.bench_done, timeout=120_000) as blocker:
        qtbot.mouseClick(bench.run_btn, Qt.MouseButton.LeftButton)
    report = blocker.args[0]
    assert report is not None and not report.cancelled
    assert bench.table.rowCount() >= 2
    conditions = {bench.table.item(r, 3).text() for r in range(bench.table.rowCount())}
    assert "Off" in conditions and len(conditions) >= 2
    assert len(bench._bars) >= 2  # one bar per speculative row + the 1.0x line
    assert bench.progress.value() == 1000


def test_cycles_are_collected_on_the_gui_thread_while_a_window_lives(qtbot):
    import gc

    from PySide6.QtWidgets import QWidget

    from app.ui.gui_gc import GuiThreadCollection

    gc.enable()  # as in the app before the window opens (the test process runs with it off)
    owner = QWidget()
    qtbot.addWidget(owner)
    try:
        collection = GuiThreadCollection(owner, interval_s=0.05)
        timer = collection._collector.timer
        assert not gc.isenabled()  # no collection may start on the engine or a pool thread
        assert timer.isActive() and timer.parent() is owner
        assert timer.thread() is owner.thread()  # collections run on the GUI thread
        collection.stop()
        assert gc.isenabled() and not timer.isActive()
    finally:
        gc.disable()
