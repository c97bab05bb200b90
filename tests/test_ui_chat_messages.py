"""Messages a person can change, and turns that fail without breaking the chat (real window
offscreen, real engine through the real worker, tiny checkpoints): a refused message is marked
and left out, edit / delete / regenerate are kept in the chat store, the reply's time to first
token counts from Send, the warm-up is shown in plain words."""

from __future__ import annotations

import time

import pytest
from PySide6.QtCore import Qt
from PySide6.QtGui import QTextCursor

from app.ui.chat_store import ChatStore
from tests.ui_window import TIMEOUT, close_window, open_window


@pytest.fixture
def window(qtbot, tmp_path, tiny_models):
    w = open_window(qtbot, tmp_path, tiny_models.target)
    yield w
    close_window(w)


def _say(qtbot, chat, text: str, *, max_tokens: int = 8):
    chat.max_spin.setValue(max_tokens)
    chat.input.setPlainText(text)
    with qtbot.waitSignal(chat.reply_finished, timeout=TIMEOUT) as blocker:
        qtbot.keyClick(chat.input, Qt.Key.Key_Return)
    return blocker.args[0]


def _click_link(qtbot, transcript, href: str) -> None:
    """Click the link ``href`` in the transcript with the mouse, as a person does."""
    doc = transcript.document()
    block = doc.begin()
    while block.isValid():
        it = block.begin()
        while not it.atEnd():
            frag = it.fragment()
            if frag.charFormat().anchorHref() == href:
                cur = QTextCursor(doc)
                cur.setPosition(frag.position() + 1)
                transcript.setTextCursor(cur)
                transcript.ensureCursorVisible()
                rect = transcript.cursorRect(cur)
                qtbot.mouseClick(transcript.viewport(), Qt.MouseButton.LeftButton,
                                 pos=rect.center())
                return
            it += 1
        block = block.next()
    raise AssertionError(f"no link {href} in the transcript")


def test_an_over_long_message_is_refused_and_the_chat_goes_on(qtbot, window):
    chat = window.chat
    long_text = " ".join(f"word{i}" for i in range(3000))
    done = _say(qtbot, chat, long_text)
    assert done.finish_reason == "error" and "at most 2,048" in done.error
    msgs = chat.store.messages(chat.conv_id)
    assert [(m.role, m.status) for m in msgs] == [("user", "refused")]  # no empty reply kept
    text = chat.transcript.toPlainText()
    assert "left out of the chat" in text and "edit it to make it shorter" in text
    assert "Send again" in text
    assert long_text not in text and "more characters: Edit shows them all" in text
    assert "0.0 tok/s" not in text and "TTFT 0 ms" not in text and "accepted 0/0" not in text
    assert chat.state_label.text().startswith("Not sent: ")
    # the next message is answered: the refused one is left out of the prompt
    assert chat.build_request().messages == ()
    done = _say(qtbot, chat, "hi")
    assert done.finish_reason in ("stop", "length") and done.error is None
    assert chat.build_request().messages[0] == {"role": "user", "content": "hi"}
    assert long_text not in [t["content"] for t in chat.build_request().messages]
    roles = [(m.role, m.status) for m in chat.store.messages(chat.conv_id)]
    assert roles == [("user", "refused"), ("user", "complete"), ("assistant", "complete")]
    # refused again after a reply: Regenerate does not answer the older turns instead
    assert chat.regen_btn.isEnabled()
    _say(qtbot, chat, long_text)
    assert chat.store.messages(chat.conv_id)[-1].status == "refused"
    assert not chat.regen_btn.isEnabled()
    chat.regenerate()
    assert chat.job is None and len(chat.store.messages(chat.conv_id)) == 4


def test_a_refused_message_edited_shorter_gets_its_reply(qtbot, window):
    chat = window.chat
    _say(qtbot, chat, " ".join(f"word{i}" for i in range(3000)))
    refused = chat.store.messages(chat.conv_id)[-1]
    _click_link(qtbot, chat.transcript, f"msg:edit/{refused.id}")
    assert chat.input.toPlainText() == refused.content and chat.send_btn.text() == "Save"
    chat.input.setPlainText("word1 word2 word3")
    with qtbot.waitSignal(chat.reply_finished, timeout=TIMEOUT) as blocker:
        qtbot.keyClick(chat.input, Qt.Key.Key_Return)
    assert blocker.args[0].finish_reason in ("stop", "length")
    msgs = chat.store.messages(chat.conv_id)
    assert [(m.role, m.status) for m in msgs] == [("user", "complete"), ("assistant", "complete")]
    assert msgs[0].id == refused.id and msgs[0].content == "word1 word2 word3"
    assert chat.send_btn.text() == "Send" and not chat.input_area.edit_strip.isVisible()


def test_edit_and_delete_are_kept_in_the_chat_store(qtbot, window, tmp_path):
    chat = window.chat
    _say(qtbot, chat, "First question")
    _say(qtbot, chat, "Second question")
    first_q, first_a, second_q, second_a = chat.store.messages(chat.conv_id)
    # edit a message of the person in place (Esc leaves an edit untouched first)
    chat.input.setPlainText("half-written")
    _click_link(qtbot, chat.transcript, f"msg:edit/{first_q.id}")
    assert chat.input_area.edit_strip.isVisible()
    qtbot.keyClick(chat.input, Qt.Key.Key_Escape)
    assert chat.input.toPlainText() == "half-written"
    _click_link(qtbot, chat.transcript, f"msg:edit/{first_q.id}")
    chat.input.setPlainText("First question, better put")
    qtbot.keyClick(chat.input, Qt.Key.Key_Return)
    assert chat.job is None  # saved in place: no new reply
    assert chat.input.toPlainText() == "half-written"
    # edit a reply
    _click_link(qtbot, chat.transcript, f"msg:edit/{first_a.id}")
    chat.input.setPlainText("A corrected answer.")
    qtbot.mouseClick(chat.send_btn, Qt.MouseButton.LeftButton)
    # delete the second question: its reply goes with it
    _click_link(qtbot, chat.transcript, f"msg:delete/{second_q.id}")
    text = chat.transcript.toPlainText()
    assert "Second question" not in text and "First question, better put" in text
    assert "A corrected answer." in text and "edited" in text
    conv = chat.conv_id
    other = ChatStore(tmp_path / "chat.sqlite3")  # what the next start reads
    try:
        msgs = other.messages(conv)
        assert [(m.id, m.content) for m in msgs] == [(first_q.id, "First question, better put"),
                                                     (first_a.id, "A corrected answer.")]
        assert msgs[1].stats.get("edited") and msgs[1].stats.get("line")
    finally:
        other.close()
    # the edited turns are what the model reads next
    assert [t["content"] for t in chat.build_request().messages] == [
        "First question, better put", "A corrected answer."]


def test_regenerate_from_a_reply_replaces_it_and_what_follows(qtbot, window):
    chat = window.chat
    _say(qtbot, chat, "One")
    _say(qtbot, chat, "Two")
    one_q, one_a, _, _ = chat.store.messages(chat.conv_id)
    with qtbot.waitSignal(chat.reply_finished, timeout=TIMEOUT):
        _click_link(qtbot, chat.transcript, f"msg:regenerate/{one_a.id}")
    msgs = chat.store.messages(chat.conv_id)
    assert [(m.id, m.role) for m in msgs] == [(one_q.id, "user"), (msgs[1].id, "assistant")]
    assert msgs[1].status == "complete" and msgs[1].stats["line"]
    assert "Two" not in chat.transcript.toPlainText()


def test_time_to_first_token_counts_from_send(qtbot, tmp_path, tiny_models, monkeypatch):
    """The reported TTFT covers at least what the test measures from Send (just after the key
    press) to the engine's first token, on a first speculative reply that warms up."""
    from app.engine.events import TokenEvent
    from app.engine.session import Session

    first: list[float] = []
    real = Session.generate

    def timed(self, request, **kw):  # the real engine; the test only reads its clock
        for ev in real(self, request, **kw):
            if isinstance(ev, TokenEvent) and not first:
                first.append(time.perf_counter())
            yield ev

    monkeypatch.setattr(Session, "generate", timed)
    # a data folder of its own: no speed measured by an earlier test is kept, so it warms up
    monkeypatch.setenv("DRAFTPAIR_DATA_DIR", str(tmp_path / "user-data"))
    w = open_window(qtbot, tmp_path, tiny_models.target)
    try:
        with qtbot.waitSignal(w.client.model_state, timeout=TIMEOUT):
            w.load_pair(str(tiny_models.target), str(tiny_models.draft))
        chat = w.chat
        chat.spec_combo.set_kind("full-model")
        chat.max_spin.setValue(12)
        chat.input.setPlainText("Hello! How can I help you today?")
        shown: list[str] = []
        w.client.job_status.connect(lambda *_: shown.append(chat.state_label.text()))
        with qtbot.waitSignal(chat.reply_finished, timeout=TIMEOUT) as blocker:
            qtbot.keyClick(chat.input, Qt.Key.Key_Return)
            sent = time.perf_counter()  # Send has happened by now
        done = blocker.args[0]
        assert first and done.finish_reason in ("stop", "length")
        measured_ms = (first[0] - sent) * 1e3
        reply = chat.store.messages(chat.conv_id)[-1]
        print(f"[ttft] reported {done.timings.ttft_ms:.1f} ms, measured from Send "
              f"{measured_ms:.1f} ms")
        assert done.timings.ttft_ms >= measured_ms
        assert reply.stats["ttft_ms"] >= round(measured_ms, 1) - 0.1
        # the warm-up and the prompt reading were shown in plain words
        from app.ui.format import KIND_LABELS

        label = KIND_LABELS["full-model"]
        assert any(s.startswith(f"Measuring this computer's speed for {label}") for s in shown), shown
        assert any(s.startswith("Reading the prompt") for s in shown), shown
        assert not any("verify" in s or "widths" in s for s in shown)
    finally:
        close_window(w)


def test_the_stats_line_says_read_and_reused_and_failed_turns_show_no_zeros():
    from types import SimpleNamespace

    from app.engine.events import Timings
    from app.ui.format import KIND_LABELS, reply_stats, stats_line, status_words

    def done(reason: str, **t):
        return SimpleNamespace(finish_reason=reason, timings=Timings(**t), error=None, text="")

    line = reply_stats(done("stop", predicted_n=9, predicted_per_second=4.0, ttft_ms=2500,
                            prompt_n=221, cache_n=0, draft_kind="dflash", draft_n=8,
                            draft_n_accepted=4, draft_rounds=2, accept_len_mean=2.0),
                       "dflash")["line"]
    assert "TTFT 2.5 s (221 prompt tokens read, 0 reused)" in line and KIND_LABELS["dflash"] in line
    stats = reply_stats(done("stop", predicted_n=3, ttft_ms=9100, prompt_n=20), "none")
    stats["warmup_ms"] = 8000.0  # an engine that reports the first-time warm-up inside TTFT
    assert "TTFT 9.1 s (8.0 s first-time warm-up, 20 prompt tokens read, 0 reused)" in stats_line(stats)
    assert reply_stats(done("error", draft_kind="dflash"), "dflash")["line"] == ""
    stopped = reply_stats(done("cancelled", draft_kind="mtp"), "mtp")["line"]
    assert stopped == "stopped by you before the first token"
    for line in (stopped,):
        assert "tok/s" not in line and "TTFT" not in line and "accepted 0/0" not in line
    words = status_words("warmup", "preparing verify widths 1..17", "dflash")
    assert words == (f"Measuring this computer's speed for {KIND_LABELS['dflash']} "
                     "(only the first time)…")
    assert status_words("warmup", "3/17", "mtp").endswith(": step 3 of 17…")
