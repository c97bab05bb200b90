"""The Chat view: conversations, sampling controls, speculation choice, streaming replies.

Its panels live beside it: ``chat_conversations`` (left), ``chat_transcript`` (centre),
``chat_reply_settings`` (right); the live plots are ``panels.LivePanels``.
"""

from __future__ import annotations

from pathlib import Path

from PySide6.QtCore import QEvent, QObject, Qt, QTimer, Signal
from PySide6.QtWidgets import (
    QCheckBox,
    QFileDialog,
    QHBoxLayout,
    QLabel,
    QPlainTextEdit,
    QPushButton,
    QSpinBox,
    QVBoxLayout,
    QWidget,
)

from app import kinds
from app.ui.chat_conversations import ConversationsPanel
from app.ui.chat_draft import DraftSection, model_line, template_note
from app.ui.chat_reply_settings import ReplySettingsPanel
from app.ui.chat_store import ChatStore, Message, to_markdown
from app.ui.chat_transcript import Transcript
from app.ui.context_meter import ContextMeter, used_tokens
from app.ui.format import KIND_LABELS, reply_stats
from app.ui.live import Segment
from app.ui.panels import LivePanels
from app.ui.theme import Colors
from app.ui.view_deps import View, ViewDeps
from app.ui.widgets import SpecCombo, add_shortcut, splitter
from app.ui.worker import Job, ModelState

STREAM_HZ = 15
SAVE_EVERY_S = 1.0


class ChatView(View):
    settings_changed = Signal()
    reply_finished = Signal(object)  # DoneEvent (tests, status bar)
    go_to_models = Signal()

    def __init__(self, deps: ViewDeps, store: ChatStore, parent: QWidget | None = None):
        super().__init__(deps, parent)
        client = self.client
        self.store = store
        self.conv_id: int | None = None
        self._reply_conv: int | None = None
        self.job: Job | None = None
        self._reply_id: int | None = None
        self._reply_segments: list[tuple[str, bool]] = []
        self._reply_notices: list[str] = []
        self._since_save = 0
        self._build()
        self._stream_timer = QTimer(self)
        self._stream_timer.setInterval(int(1000 / STREAM_HZ))
        self._stream_timer.timeout.connect(self._drain)
        client.job_finished.connect(self._on_finished)
        client.job_started.connect(lambda _id: self._update_buttons())
        client.job_finished.connect(lambda _id, _d: self._update_buttons())
        client.bench_finished.connect(lambda _r, _e: self._update_buttons())
        client.job_notice.connect(self._on_notice)
        client.job_status.connect(self._on_status)
        self._load_conversations()
        self.on_model_state(client.state)

    # -- layout ---------------------------------------------------------------------------
    def _build(self) -> None:
        s = self.settings
        self.conversations = left = ConversationsPanel()
        self.conv_list = left.conv_list
        left.selected.connect(self._on_conv_selected)
        left.renamed.connect(self.store.rename)
        left.new_requested.connect(lambda: self.new_conversation())
        left.delete_requested.connect(self.delete_conversation)
        left.export_requested.connect(lambda: self.export_markdown())

        # centre: model line, transcript, input, panels
        self.model_label = QLabel("No model loaded")
        self.model_label.setProperty("role", "muted")
        change = QPushButton("Change models…")
        change.setFlat(True)
        change.clicked.connect(self.go_to_models.emit)
        self.spec_combo = SpecCombo()
        self.spec_combo.set_kind(s.draft_kind)
        self.spec_combo.kind_changed.connect(self._on_kind_changed)
        self.width_spin = QSpinBox()
        self.width_spin.setRange(0, 64)
        self.width_spin.setSpecialValueText("auto")
        self.width_spin.setValue(s.draft_width)
        self.width_spin.setToolTip(
            "Draft width: tokens proposed per round (auto: 4 for a draft model, 7 for prompt lookup)"
        )
        self.width_spin.valueChanged.connect(self._on_width_changed)
        self.highlight_box = QCheckBox("Highlight accepted draft tokens")
        self.highlight_box.setChecked(s.highlight_drafts)
        self.highlight_box.toggled.connect(self._on_highlight)
        top = QHBoxLayout()
        top.addWidget(self.model_label)
        top.addWidget(change)
        top.addStretch(1)
        top.addWidget(QLabel("Speculation"))
        top.addWidget(self.spec_combo)
        top.addWidget(QLabel("Width"))
        top.addWidget(self.width_spin)
        top.addWidget(self.highlight_box)

        self.transcript = Transcript(self.colors, highlight=s.highlight_drafts)
        self.input = QPlainTextEdit()
        self.input.setObjectName("input")
        self.input.setPlaceholderText("Write a message…  (Ctrl+Enter to send, Esc to stop)")
        self.input.setFixedHeight(84)
        self.input.installEventFilter(self)
        self.send_btn = QPushButton("Send")
        self.send_btn.setProperty("role", "primary")
        self.send_btn.setToolTip("Send (Ctrl+Enter)")
        self.send_btn.clicked.connect(self.send)
        self.stop_btn = QPushButton("Stop")
        self.stop_btn.setToolTip("Stop the reply (Esc)")
        self.stop_btn.clicked.connect(self.stop)
        self.regen_btn = QPushButton("Regenerate")
        self.regen_btn.setToolTip("Replace the last reply with a new one")
        self.regen_btn.clicked.connect(self.regenerate)
        self.state_label = QLabel("")
        self.state_label.setProperty("role", "muted")
        buttons = QVBoxLayout()
        buttons.addWidget(self.send_btn)
        buttons.addWidget(self.stop_btn)
        buttons.addWidget(self.regen_btn)
        buttons.addStretch(1)
        input_row = QHBoxLayout()
        input_row.addWidget(self.input, 1)
        input_row.addLayout(buttons)

        self.panels = LivePanels(colors=self.colors)
        self.panels.setVisible(s.show_panels)
        self.panels_box = QCheckBox("Live panels")
        self.panels_box.setChecked(s.show_panels)
        self.panels_box.toggled.connect(self._on_panels_toggled)
        self.context_meter = ContextMeter()
        status_row = QHBoxLayout()
        status_row.addWidget(self.state_label, 1)
        status_row.addWidget(self.context_meter)
        status_row.addWidget(self.panels_box)

        chat_col = QWidget()
        cv = QVBoxLayout(chat_col)
        cv.setContentsMargins(0, 0, 0, 0)
        cv.addLayout(top)
        cv.addWidget(self.transcript, 1)
        cv.addLayout(status_row)
        cv.addLayout(input_row)
        centre = splitter(Qt.Orientation.Vertical, (chat_col, 3), (self.panels, 1))

        # right: generation settings
        self.draft_section = DraftSection(s)
        self.draft_section.kind_chosen.connect(self.spec_combo.set_kind)
        self.reply_settings = right = ReplySettingsPanel(s, top=self.draft_section)
        right.changed.connect(self.settings_changed.emit)
        right.system_changed.connect(self._on_system_changed)
        self.system_edit = right.system_edit
        self.temp_spin, self.top_p_spin, self.max_spin = right.temp_spin, right.top_p_spin, right.max_spin
        self.template_label = right.template_label

        split = splitter(Qt.Orientation.Horizontal, (left, 0), (centre, 1), (right, 0),
                         sizes=[200, 900, 260])
        self.body_layout().addWidget(split)

        add_shortcut(self, "Ctrl+Return", self.send)
        add_shortcut(self, "Ctrl+Enter", self.send)
        add_shortcut(self, Qt.Key.Key_Escape, self.stop)
        self._update_buttons()

    def eventFilter(self, obj: QObject, event: QEvent) -> bool:  # noqa: N802 (Qt override)
        # Keys on the input itself: reliable even where window shortcuts are not delivered.
        if obj is self.input and event.type() == QEvent.Type.KeyPress:
            key = event.key()
            if key in (Qt.Key.Key_Return, Qt.Key.Key_Enter) and (
                event.modifiers() & Qt.KeyboardModifier.ControlModifier
            ):
                self.send()
                return True
            if key == Qt.Key.Key_Escape and self.job is not None:
                self.stop()
                return True
        return super().eventFilter(obj, event)

    # -- theme ------------------------------------------------------------------------------
    def apply_colors(self, c: Colors) -> None:
        self.colors = c
        self.transcript.colors = c
        self.panels.apply_colors(c)
        if self.job is None:
            self.render()

    # -- engine state -------------------------------------------------------------------------
    def on_model_state(self, state: ModelState) -> None:
        self.model_label.setText(model_line(state, self.spec_combo.kind()))
        self.draft_section.on_model_state(state)
        self.template_label.setText(template_note(state))
        self.spec_combo.set_reasons(state.kinds)
        self.context_meter.set_limit(state.context_length)
        self._update_buttons()

    def on_loading(self, text: str) -> None:
        self.state_label.setText(text)
        self._update_buttons()

    def _update_buttons(self) -> None:
        busy = self.job is not None
        ready = bool(self.client.state.target) and not self.client.busy_loading
        elsewhere = self.client.busy and not busy  # Compare or Bench is measuring
        self.send_btn.setEnabled(ready and not busy and not elsewhere)
        self.send_btn.setToolTip(
            "Wait: Compare or Bench is using the engine" if elsewhere else "Send (Ctrl+Enter)"
        )
        self.stop_btn.setEnabled(busy)
        has_reply = any(m.role == "assistant" for m in self._messages()) if self.conv_id else False
        self.regen_btn.setEnabled(ready and not busy and not elsewhere and has_reply)
        self.spec_combo.setEnabled(not busy)
        self.width_spin.setEnabled(not busy and not kinds.is_off(self.spec_combo.kind()))
        if not busy and not self.client.busy_loading:
            if not self.client.state.target:
                self.state_label.setText("No model loaded: choose one in Models.")
            elif self.state_label.text().startswith("Loading"):
                self.state_label.setText("Ready.")

    # -- conversations ------------------------------------------------------------------------
    def _messages(self) -> list[Message]:
        return self.store.messages(self.conv_id) if self.conv_id is not None else []

    def _load_conversations(self, select: int | None = None) -> None:
        convs = self.store.conversations()
        if not convs:
            self.new_conversation()
            return
        self.conversations.fill(convs, select if select is not None else (self.conv_id or convs[0].id))

    def new_conversation(self) -> int:
        conv_id = self.store.create_conversation("New chat", self.system_edit.toPlainText())
        self._load_conversations(select=conv_id)
        return conv_id

    def delete_conversation(self) -> None:
        if self.conv_id is None or self.job is not None:
            return
        self.store.delete_conversation(self.conv_id)
        self.conv_id = None
        self._load_conversations()

    def _on_conv_selected(self, conv_id: int) -> None:
        if conv_id == self.conv_id:
            return
        if self.job is not None:  # a reply streams into its own conversation: finish it first
            self.stop()
        self.conv_id = conv_id
        conv = self.store.conversation(conv_id)
        if conv is not None:
            self.reply_settings.set_system_prompt(conv.system_prompt)
        self.context_meter.show_messages(self._messages())
        self.render()
        self._update_buttons()

    def export_markdown(self, path: str | None = None) -> str | None:
        if self.conv_id is None:
            return None
        conv = self.store.conversation(self.conv_id)
        if conv is None:
            return None
        if path is None:
            safe = "".join(ch if ch.isalnum() or ch in " -_" else "_" for ch in conv.title)
            path, _ = QFileDialog.getSaveFileName(
                self, "Export conversation", str(Path.home() / f"{safe.strip() or 'chat'}.md"),
                "Markdown (*.md)",
            )
            if not path:
                return None
        try:
            Path(path).write_text(to_markdown(conv, self._messages()), encoding="utf-8")
        except OSError as exc:
            self.banner.show_message(f"Could not export to {path}: {exc.strerror}.", error=True)
            return None
        self.banner.show_message(f"Conversation exported to {path}.", timeout_ms=6000)
        return path

    # -- rendering -----------------------------------------------------------------------------
    def render(self) -> None:
        """Rebuild the transcript from the store (conversation switch, theme, highlighting)."""
        self.transcript.show_messages(self._messages())

    def _on_highlight(self, on: bool) -> None:
        self.settings.highlight_drafts = on
        self.transcript.highlight = on
        self.settings_changed.emit()
        if self.job is None:
            self.render()

    # -- sending ---------------------------------------------------------------------------
    def send(self) -> None:
        text = self.input.toPlainText().strip()
        if not text or not self.send_btn.isEnabled():
            return
        if self.conv_id is None:
            self.new_conversation()
        assert self.conv_id is not None
        self.store.add_message(self.conv_id, "user", text)
        if len([m for m in self._messages() if m.role == "user"]) == 1:
            title = text.splitlines()[0][:48]
            self.store.rename(self.conv_id, title)
            self.conversations.set_current_title(title)
        self.input.clear()
        if self.transcript.document().characterCount() > 1 and not self._messages()[:-1]:
            self.transcript.clear()
        self.transcript.insert_header("user")
        self.transcript.insert_text(text, False)
        self._start_reply()

    def regenerate(self) -> None:
        if self.job is not None or self.conv_id is None:
            return
        msgs = self._messages()
        while msgs and msgs[-1].role == "assistant":
            self.store.delete_message(msgs.pop().id)
        if not msgs:
            return
        self.render()
        self._start_reply()

    def build_request(self):  # -> GenerationRequest
        from app.engine.events import GenerationRequest, SamplingParams

        turns = [
            {"role": m.role, "content": m.content}
            for m in self._messages()
            if m.content.strip() and not m.stats.get("error")
        ]
        kind = self.spec_combo.kind()
        return GenerationRequest(
            messages=tuple(turns),
            system_prompt=self.system_edit.toPlainText().strip() or None,
            draft_kind=kind,
            draft_width=self.width_spin.value() or None,
            sampling=SamplingParams(
                temperature=self.temp_spin.value(), top_p=self.top_p_spin.value()
            ),
            max_tokens=self.max_spin.value(),
            # later turns continue from the kept state of this chat (only new tokens are read)
            reuse_cache=True,
            conversation=f"chat-{self.conv_id}",
            context_policy=self.settings.context_policy,
        )

    def _start_reply(self) -> None:
        assert self.conv_id is not None
        request = self.build_request()
        self._reply_segments = []
        self._reply_notices = []
        self._reply_id = self.store.add_message(self.conv_id, "assistant", "", status="streaming")
        self._reply_conv = self.conv_id
        self.transcript.insert_header("assistant")
        self.job = Job(request=request, tag="chat")
        self.job.live.label = "reply"
        self.panels.set_runs([(self.job.live, "reply", self.colors.accent)])
        self.client.submit(self.job)
        self._since_save = 0
        self._stream_timer.start()
        self.state_label.setText("Waiting for the engine…")
        self._update_buttons()
        self.transcript.scroll_to_end()

    def stop(self) -> None:
        if self.job is not None:
            self.job.cancel.set()
            self.state_label.setText("Stopping…")

    # -- streaming -------------------------------------------------------------------------
    def _drain(self) -> None:
        if self.job is None:
            self._stream_timer.stop()
            return
        segments: list[Segment] = self.job.live.drain_text()
        if not segments:
            return
        at_end = self.transcript.at_end()
        visible = self.conv_id == self._reply_conv  # the user may have switched conversations
        for seg in segments:
            if visible:
                self.transcript.insert_text(seg.text, seg.from_draft)
            if self._reply_segments and self._reply_segments[-1][1] == seg.from_draft:
                self._reply_segments[-1] = (self._reply_segments[-1][0] + seg.text, seg.from_draft)
            else:
                self._reply_segments.append((seg.text, seg.from_draft))
        if at_end:
            self.transcript.scroll_to_end()
        self._since_save += 1
        if self._since_save >= int(SAVE_EVERY_S * STREAM_HZ) and self._reply_id is not None:
            self._since_save = 0
            self.store.update_message(
                self._reply_id,
                content="".join(t for t, _ in self._reply_segments),
                segments=self._reply_segments,
                status="streaming",
            )

    def _on_status(self, job_id: int, stage: str, message: str) -> None:
        if self.job is None or job_id != self.job.id:
            return
        words = {"prefill": "Reading the prompt", "warmup": "Preparing speculation",
                 "decoding": "Generating"}
        self.state_label.setText(words.get(stage, stage) + (f" ({message})" if message else "") + "…")
        if stage == "prefill":
            self.context_meter.set_used(self.job.live.snapshot().context[0])

    def _on_notice(self, job_id: int, code: str, message: str) -> None:
        if self.job is None or job_id != self.job.id:
            return
        self._reply_notices.append(message)
        self.state_label.setText(message)

    def _on_finished(self, job_id: int, done) -> None:
        if self.job is None or job_id != self.job.id:
            return
        job = self.job
        self._drain()
        self._stream_timer.stop()
        self.job = None
        stats = reply_stats(done, job.request.draft_kind)
        if self._reply_notices:
            stats["notices"] = self._reply_notices
        content = "".join(t for t, _ in self._reply_segments)
        if done.finish_reason in ("stop", "length") and done.text and done.text != content:
            content = done.text  # stop-string trimming: the engine's final text wins
            self._reply_segments = [(content, False)] if not self._reply_segments else self._reply_segments
        status = {"cancelled": "cancelled", "error": "error"}.get(done.finish_reason, "complete")
        if self._reply_id is not None:
            self.store.update_message(
                self._reply_id, content=content, segments=self._reply_segments, status=status,
                stats=stats,
            )
            msg = Message(self._reply_id, "assistant", content, self._reply_segments, stats, status)
            if self.conv_id == self._reply_conv:
                self.transcript.insert_footer(msg)
        self._reply_id = None
        if done.finish_reason == "error":
            self.banner.show_message(done.error or "The reply failed.", error=True)
            self.state_label.setText("The reply failed.")
        else:
            self.state_label.setText(stats["line"])
            self.context_meter.set_used(used_tokens(stats))
        self.transcript.scroll_to_end()
        self._update_buttons()
        self.reply_finished.emit(done)

    # -- settings ----------------------------------------------------------------------------
    def _on_kind_changed(self, kind: str) -> None:
        self.settings.draft_kind = kind
        self.draft_section.sync_kind(kind)
        self.model_label.setText(model_line(self.client.state, kind))
        self.width_spin.setEnabled(not kinds.is_off(kind) and self.job is None)
        reason = self.spec_combo.unavailable_reason()
        if reason:
            self.state_label.setText(
                f"{KIND_LABELS[kind]} cannot run now ({reason}); replies will say so and run plainly."
            )
        self.settings_changed.emit()

    def _on_width_changed(self, v: int) -> None:
        self.settings.draft_width = v
        self.settings_changed.emit()

    def _on_panels_toggled(self, on: bool) -> None:
        self.panels.setVisible(on)
        self.settings.show_panels = on
        self.settings_changed.emit()

    def _on_system_changed(self, text: str) -> None:
        if self.conv_id is not None:
            self.store.set_system_prompt(self.conv_id, text)

    def shutdown(self) -> None:
        """Window closing: stop streaming; the partial reply is already saved on finish/next start."""
        self._stream_timer.stop()
        self.panels.stop()
        self.draft_section.shutdown()
        if self.job is not None:
            self.job.cancel.set()
            if self._reply_id is not None:
                self._drain_into_store()
            self.job = None
            self._reply_id = None

    def _drain_into_store(self) -> None:
        if self.job is not None:
            for seg in self.job.live.drain_text():
                self._reply_segments.append((seg.text, seg.from_draft))
        if self._reply_id is not None:
            self.store.update_message(
                self._reply_id,
                content="".join(t for t, _ in self._reply_segments),
                segments=self._reply_segments,
                status="cancelled",
            )

