"""Long chats in the app (real engine, tiny checkpoint, offscreen): later turns reuse the kept
conversation state and say so, prompt-reading progress and the kept chats' size are shown."""

from __future__ import annotations

import pytest
from PySide6.QtCore import Qt

from app.ui.chat_store import ChatStore
from app.ui.main_window import AppContext, MainWindow
from app.ui.settings import Settings, SettingsStore

TIMEOUT = 60_000


@pytest.fixture
def window(qtbot, tmp_path, tiny_models):
    from app.checkpoints.store import Store

    settings = Settings(target=str(tiny_models.target), draft="")
    ctx = AppContext(SettingsStore(tmp_path / "settings.json"), settings,
                     ChatStore(tmp_path / "chat.sqlite3"),
                     checkpoint_store=Store(data_dir=tmp_path / "data", hf_cache=tmp_path / "hf"),
                     autoload=False)
    w = MainWindow(ctx)
    qtbot.addWidget(w)
    w.show()
    with qtbot.waitSignal(w.client.model_state, timeout=TIMEOUT):
        w.load_pair(str(tiny_models.target), "")
    yield w
    w.close()
    assert not w.client.engine_thread.isRunning()
    ctx.chat_store.close()


def _send(qtbot, w: MainWindow, text: str):
    chat = w.chat
    chat.spec_combo.set_kind("prompt-lookup")
    chat.max_spin.setValue(12)
    chat.input.setPlainText(text)
    statuses: list[str] = []
    w.client.job_status.connect(lambda _id, stage, msg: statuses.append(f"{stage}: {msg}"))
    with qtbot.waitSignal(chat.reply_finished, timeout=TIMEOUT) as blocker:
        qtbot.keyClick(chat.input, Qt.Key.Key_Return, Qt.KeyboardModifier.ControlModifier)
    return blocker.args[0], statuses


def test_second_turn_reuses_the_first_and_says_so(qtbot, window):
    first, statuses = _send(qtbot, window, "Hello! How can I help you today?")
    assert first.timings.cache_n == 0
    assert any(s.startswith("prefill: ") and " / " in s and "tok/s" in s for s in statuses)
    second, statuses = _send(qtbot, window, "The cat sat on the mat.")
    t = second.timings
    assert t.cache_n >= first.timings.prompt_n - 1 and t.prompt_n > 0
    assert any("reused" in s for s in statuses if s.startswith("prefill: "))
    reply = window.chat.store.messages(window.chat.conv_id)[-1]
    assert f"{t.prompt_n:,} prompt tokens read, {t.cache_n:,} reused" in reply.stats["line"]
    assert reply.stats["line"] in window.chat.transcript.toPlainText()
    # the kept state is counted in the memory line of the live panels
    run = window.chat.panels._runs[0].run.snapshot()
    assert run.prompt_cache_bytes > 0 and run.context[0] >= t.prompt_n + t.cache_n
    window.chat.panels.refresh(force_labels=True)
    assert "kept chats" in window.chat.panels.mem_label.text()


def test_context_meter_and_policy_choice(qtbot, window):
    chat = window.chat
    assert chat.context_meter.limit == 2048  # the tiny checkpoint's config
    done, _ = _send(qtbot, window, "Hello! How can I help you today?")
    t = done.timings
    assert chat.context_meter.used == t.prompt_n + t.cache_n + t.predicted_n
    assert f"{chat.context_meter.used:,} / 2,048" in chat.context_meter.text()
    combo = chat.reply_settings.policy_combo
    combo.setCurrentIndex(combo.findData("drop-oldest"))
    assert window.ctx.settings.context_policy == "drop-oldest"
    assert chat.build_request().context_policy == "drop-oldest"
    # a new chat shows no use yet; going back shows the last reply's
    first = chat.conv_id
    chat.new_conversation()
    assert chat.context_meter.used == 0
    chat._on_conv_selected(first)
    assert chat.context_meter.used == t.prompt_n + t.cache_n + t.predicted_n


def test_live_panels_show_prompt_progress_for_each_run(qtbot):
    """Compare and Chat share the live panels: every run shows its own reading progress."""
    from app.ui.live import LiveRun
    from app.ui.panels import LivePanels

    panels = LivePanels()
    qtbot.addWidget(panels)
    off, on = LiveRun(label="off"), LiveRun(label="on")
    panels.set_runs([(off, "off", "#888888"), (on, "on", "#3366cc")])
    off.on_stage("prefill")
    off.on_prefill(256, 5000, 812.0, 0, 8192)
    on.on_prefill(5000, 5000, 900.0, 0, 8192)
    on.on_token("Hi", False)
    panels.refresh(force_labels=True)
    text = panels.rate_label.text()
    assert "off: reading the prompt: 256 / 5,000 tokens · 812 tok/s" in text
    assert "on: 1 tokens" in text and "on: reading" not in text
    panels.stop()
