"""Chat basics as a person meets them (real window offscreen, real engine, tiny checkpoint):
the window never asks for more than the screen, Enter sends, the transcript follows a
streaming reply unless scrolled up, a new chat starts empty, Chat puts the cursor in the box."""

from __future__ import annotations

import pytest
from PySide6.QtCore import Qt
from PySide6.QtWidgets import QAbstractSlider, QApplication

from tests.ui_window import TIMEOUT, close_window, open_window

LONG_LINE = ("12.3 tok/s · TTFT 812 ms (4,096 prompt tokens read, 12,345 reused) · "
             "accepted 1,234/5,678 (22%) · 345 of them copied from the context · ") * 4


@pytest.fixture
def window(qtbot, tmp_path, tiny_models):
    w = open_window(qtbot, tmp_path, tiny_models.target)
    yield w
    close_window(w)


def _reply(qtbot, chat, text: str, *, max_tokens: int = 8, key=Qt.Key.Key_Return, mods=None):
    chat.max_spin.setValue(max_tokens)
    chat.input.setPlainText(text)
    with qtbot.waitSignal(chat.reply_finished, timeout=TIMEOUT) as blocker:
        if mods is None:
            qtbot.keyClick(chat.input, key)
        else:
            qtbot.keyClick(chat.input, key, mods)
    return blocker.args[0]


def test_a_long_stats_line_never_makes_the_window_wider_than_the_screen(qtbot, window):
    chat = window.chat
    area = window.screen().availableGeometry()
    done = _reply(qtbot, chat, "Hello there")
    assert done.finish_reason in ("stop", "length")
    chat_min = chat.minimumSizeHint().width()
    assert len(LONG_LINE) >= 400
    # the line as a reply's stats show it: under the reply, in the status line
    msg = chat.store.messages(chat.conv_id)[-1]
    chat.store.update_message(msg.id, content=msg.content, segments=msg.segments,
                              status=msg.status, stats=dict(msg.stats, line=LONG_LINE))
    chat.refresh_transcript()
    chat.state_label.setText(LONG_LINE)
    window.status_model.setText("Target " + "/very/long/path" * 30)
    QApplication.processEvents()
    for _ in range(3):  # a resize by hand does not make it grow either
        window.resize(area.width(), area.height())
        QApplication.processEvents()
        assert window.minimumSizeHint().width() <= area.width()
        assert window.minimumSizeHint().height() <= area.height()
        assert window.width() <= area.width() and window.height() <= area.height()
    assert chat.minimumSizeHint().width() == chat_min  # no new horizontal scrolling either
    assert chat.minimumSizeHint().width() <= 1024 - 128  # fits a 1024-wide screen beside the nav
    assert chat.state_label.text() == LONG_LINE and chat.state_label.toolTip() == LONG_LINE
    assert LONG_LINE in chat.transcript.toPlainText()  # wrapped in full under the reply


def test_enter_sends_and_shift_enter_starts_a_new_line(qtbot, window):
    chat = window.chat
    window.show_view("Chat")
    chat.input.setPlainText("first line")
    chat.input.moveCursor(chat.input.textCursor().MoveOperation.End)
    qtbot.keyClick(chat.input, Qt.Key.Key_Return, Qt.KeyboardModifier.ShiftModifier)
    qtbot.keyClicks(chat.input, "second line")
    assert chat.input.toPlainText() == "first line\nsecond line"
    assert chat.job is None and not chat.store.messages(chat.conv_id)
    with qtbot.waitSignal(chat.reply_finished, timeout=TIMEOUT):
        qtbot.keyClick(chat.input, Qt.Key.Key_Return)
    msgs = chat.store.messages(chat.conv_id)
    assert [m.role for m in msgs] == ["user", "assistant"]
    assert msgs[0].content == "first line\nsecond line"
    assert chat.input.toPlainText() == ""


def test_the_ctrl_enter_setting_makes_enter_a_new_line(qtbot, window, tmp_path):
    import json

    chat = window.chat
    window.send_key_action.setChecked(True)
    assert window.ctx.settings.send_key == "ctrl-enter"
    assert "Ctrl+Enter to send" in chat.input.placeholderText()
    chat.input.setPlainText("one")
    chat.input.moveCursor(chat.input.textCursor().MoveOperation.End)
    qtbot.keyClick(chat.input, Qt.Key.Key_Return)
    assert chat.job is None and chat.input.toPlainText() == "one\n"
    done = _reply(qtbot, chat, "one\ntwo", mods=Qt.KeyboardModifier.ControlModifier)
    assert done.finish_reason in ("stop", "length")
    window.save_settings()
    assert json.loads((tmp_path / "settings.json").read_text())["send_key"] == "ctrl-enter"
    from app.ui.settings import Settings

    assert Settings.from_json({"send_key": "shout"}).send_key == "enter"


def test_the_transcript_follows_a_streaming_reply_unless_scrolled_up(qtbot, window):
    chat = window.chat
    window.resize(700, 560)
    chat.panels_box.setChecked(False)
    bar = chat.transcript.verticalScrollBar()
    long_message = "\n".join(f"line {i}: the cat sat on the mat" for i in range(60))
    _reply(qtbot, chat, long_message, max_tokens=8)
    assert bar.maximum() > 0 and bar.value() == bar.maximum()
    # a second reply streams while the view keeps the end in sight
    chat.max_spin.setValue(300)
    chat.input.setPlainText("Tell me more")
    with qtbot.waitSignal(chat.reply_finished, timeout=TIMEOUT):
        chat.send()
        qtbot.waitUntil(lambda: chat.job is None or chat.job.live.snapshot().tokens >= 40,
                        timeout=TIMEOUT)
        qtbot.waitUntil(lambda: bar.value() == bar.maximum(), timeout=5_000)
    assert bar.value() == bar.maximum()
    # scrolled up by the person: the view stays where they put it
    chat.input.setPlainText("And more")
    with qtbot.waitSignal(chat.reply_finished, timeout=TIMEOUT):
        chat.send()
        qtbot.waitUntil(lambda: chat.job is None or chat.job.live.snapshot().tokens >= 5,
                        timeout=TIMEOUT)
        bar.triggerAction(QAbstractSlider.SliderAction.SliderToMinimum)
        assert not chat.transcript.follow
    assert bar.value() == 0 < bar.maximum()
    # back at the end, it follows again
    bar.triggerAction(QAbstractSlider.SliderAction.SliderToMaximum)
    assert chat.transcript.follow


def test_a_new_chat_starts_with_empty_stats_and_plots(qtbot, window):
    chat = window.chat
    _reply(qtbot, chat, "Hello there", max_tokens=12)
    assert "tok/s" in chat.state_label.text() and chat.panels._runs
    first = chat.conv_id
    chat.new_conversation()
    assert chat.conv_id != first
    assert "tok/s" not in chat.state_label.text()
    assert chat.panels._runs == [] and chat.panels.rate_label.text() == "–"
    assert chat.context_meter.used == 0
    # going back shows that chat's last figures again
    chat._on_conv_selected(first)
    assert "tok/s" in chat.state_label.text()


def test_switching_to_chat_puts_the_cursor_in_the_message_box(qtbot, window):
    window.activateWindow()
    window.show_view("Models")
    window.models.setFocus()
    window.show_view("Chat")
    qtbot.waitUntil(lambda: window.chat.input.hasFocus(), timeout=5_000)
    window.show_view("Compare")
    window.chat.new_conversation()
    window.show_view("Chat")
    qtbot.waitUntil(lambda: window.chat.input.hasFocus(), timeout=5_000)


def test_the_panels_labels_never_cover_the_plots_on_a_narrow_window(qtbot):
    from PySide6.QtWidgets import QSplitter, QTextEdit

    from app.ui.live import LiveRun
    from app.ui.panels import LivePanels

    panels = LivePanels()
    split = QSplitter(Qt.Orientation.Vertical)  # as in the chat: below the transcript
    split.addWidget(QTextEdit())
    split.addWidget(panels)
    split.setChildrenCollapsible(False)
    qtbot.addWidget(split)
    split.resize(660, 420)
    split.show()
    run = LiveRun()
    panels.set_runs([(run, "reply", "#3366cc")])
    run.on_memory(mlx_bytes=685 << 20, rss_bytes=1092 << 20, system_used_fraction=0.24,
                  swap_bytes=0, peak_bytes=0, pressure="warn", prompt_cache_bytes=13 << 20)
    run.on_done()
    panels.refresh(force_labels=True)
    split.setSizes([400, 20])  # dragged as low as it goes
    qtbot.waitUntil(lambda: panels.mem_label.geometry().top() >= panels.mem_plot.geometry().bottom(),
                    timeout=3_000)
    for plot, label in ((panels.rate_plot, panels.rate_label), (panels.mem_plot, panels.mem_label)):
        assert label.geometry().top() > plot.geometry().bottom()
        assert label.height() >= label.heightForWidth(label.width())
    panels.stop()
