"""One reply on its way into the chat: submit, stream into the transcript, finish.

Text is drained from the job's ``LiveRun`` on a 15 Hz timer and saved about once a second.
The job carries the moment of Send, so the reply's time to first token counts everything the
person waited for (a warm-up, the queue, reading the prompt). A turn that fails before its
first token refuses the message that caused it: the message is marked, left out of the next
prompts, and the person is told what to do; the chat goes on.
"""

from __future__ import annotations

import dataclasses
import time
from typing import TYPE_CHECKING

from PySide6.QtCore import QTimer

from app.ui.chat_store import Message
from app.ui.context_meter import used_tokens
from app.ui.format import reply_stats, status_words
from app.ui.live import Segment
from app.ui.worker import Job

if TYPE_CHECKING:
    from app.ui.chat_view import ChatView

STREAM_HZ = 15
SAVE_EVERY_S = 1.0


class ReplyStream:
    def __init__(self, view: ChatView):
        self.view = view
        self.job: Job | None = None
        self.reply_id: int | None = None
        self.user_id: int | None = None  # the message this reply answers
        self.conv: int | None = None
        self.segments: list[tuple[str, bool]] = []
        self.notices: list[str] = []
        self._since_save = 0
        self.timer = QTimer(view)
        self.timer.setInterval(int(1000 / STREAM_HZ))
        self.timer.timeout.connect(self.drain)
        client = view.client
        client.job_finished.connect(self._on_finished)
        client.job_notice.connect(self._on_notice)
        client.job_status.connect(self._on_status)

    def start(self, user_id: int | None) -> None:
        v = self.view
        assert v.conv_id is not None
        sent_at = time.perf_counter()  # Send: the time to first token counts from here
        request = v.build_request()
        # the engine counts the time to first token from Send itself (warm-up and queue included)
        request = dataclasses.replace(request, submitted_at=sent_at)
        self.segments, self.notices = [], []
        self.user_id = user_id
        self.reply_id = v.store.add_message(v.conv_id, "assistant", "", status="streaming")
        self.conv = v.conv_id
        v.transcript.insert_header("assistant")
        v.transcript.follow = True
        self.job = Job(request=request, tag="chat", sent_at=sent_at)
        self.job.live.label = "reply"
        v.panels.set_runs([(self.job.live, "reply", v.colors.accent)])
        v.client.submit(self.job)
        self._since_save = 0
        self.timer.start()
        v.state_label.setText("Waiting for the engine…")
        v._update_buttons()
        v.transcript.scroll_to_end()

    # -- streaming -------------------------------------------------------------------------
    def drain(self) -> None:
        if self.job is None:
            self.timer.stop()
            return
        segments: list[Segment] = self.job.live.drain_text()
        if not segments:
            return
        v = self.view
        visible = v.conv_id == self.conv  # the person may have switched conversations
        for seg in segments:
            if visible:
                v.transcript.insert_text(seg.text, seg.from_draft)
            if self.segments and self.segments[-1][1] == seg.from_draft:
                self.segments[-1] = (self.segments[-1][0] + seg.text, seg.from_draft)
            else:
                self.segments.append((seg.text, seg.from_draft))
        if visible and v.transcript.follow:
            v.transcript.scroll_to_end()
        self._since_save += 1
        if self._since_save >= int(SAVE_EVERY_S * STREAM_HZ) and self.reply_id is not None:
            self._since_save = 0
            v.store.update_message(self.reply_id, content=self._text(), segments=self.segments,
                                   status="streaming")

    def _text(self) -> str:
        return "".join(t for t, _ in self.segments)

    def _on_status(self, job_id: int, stage: str, message: str) -> None:
        if self.job is None or job_id != self.job.id:
            return
        v = self.view
        v.state_label.setText(status_words(stage, message, self.job.request.draft_kind))
        if stage == "prefill":
            v.context_meter.set_used(self.job.live.snapshot().context[0])

    def _on_notice(self, job_id: int, code: str, message: str) -> None:
        if self.job is None or job_id != self.job.id:
            return
        self.notices.append(message)
        self.view.state_label.setText(message)

    def _on_finished(self, job_id: int, done) -> None:
        if self.job is None or job_id != self.job.id:
            return
        v = self.view
        job = self.job
        self.drain()
        self.timer.stop()
        self.job = None
        visible = v.conv_id == self.conv
        content = self._text()
        if done.finish_reason == "error" and not content:
            self._refuse(done)
        else:
            self._keep(done, job, content, visible)
        self.reply_id = None
        v._update_buttons()
        v.reply_finished.emit(done)

    def _keep(self, done, job: Job, content: str, visible: bool) -> None:
        v = self.view
        stats = reply_stats(done, job.request.draft_kind)
        if self.notices:
            stats["notices"] = self.notices
        if done.finish_reason in ("stop", "length") and done.text and done.text != content:
            content = done.text  # stop-string trimming: the engine's final text wins
            self.segments = [(content, False)] if not self.segments else self.segments
        status = {"cancelled": "cancelled", "error": "error"}.get(done.finish_reason, "complete")
        if self.reply_id is not None:
            v.store.update_message(self.reply_id, content=content, segments=self.segments,
                                   status=status, stats=stats)
            msg = Message(self.reply_id, "assistant", content, self.segments, stats, status)
            if visible:
                v.transcript.insert_footer(msg)
        if done.finish_reason == "error":
            v.banner.show_message(done.error or "The reply failed.", error=True)
            v.state_label.setText("The reply failed: " + (done.error or "no reason given."))
        else:
            v.state_label.setText(stats["line"])
            v.context_meter.set_used(used_tokens(stats))
        if visible and v.transcript.follow:
            v.transcript.scroll_to_end()

    def _refuse(self, done) -> None:
        """Nothing came back: the empty reply goes, the message it answered is marked refused."""
        v = self.view
        error = done.error or "The model could not answer this message."
        if self.reply_id is not None:
            v.store.delete_message(self.reply_id)
        if self.user_id is not None:
            msg = next((m for m in v.store.messages(self.conv) if m.id == self.user_id), None) \
                if self.conv is not None else None
            if msg is not None:
                v.store.update_message(msg.id, content=msg.content, segments=msg.segments,
                                       status="refused", stats={"error": error})
        if v.conv_id == self.conv:
            v.refresh_transcript()
        v.state_label.setText("Not sent: " + error)

    def shutdown(self) -> None:
        """Window closing: stop streaming and keep what arrived."""
        self.timer.stop()
        if self.job is None:
            return
        self.job.cancel.set()
        for seg in self.job.live.drain_text():
            self.segments.append((seg.text, seg.from_draft))
        if self.reply_id is not None:
            self.view.store.update_message(self.reply_id, content=self._text(),
                                           segments=self.segments, status="cancelled")
        self.job = None
        self.reply_id = None

