"""The Chat view: conversations, sampling controls, speculation choice, streaming replies."""

from __future__ import annotations

import html
from pathlib import Path

from PySide6.QtCore import QEvent, QObject, Qt, QTimer, Signal
from PySide6.QtGui import QColor, QFont, QTextCharFormat, QTextCursor
from PySide6.QtWidgets import (
    QCheckBox,
    QComboBox,
    QDoubleSpinBox,
    QFileDialog,
    QFormLayout,
    QHBoxLayout,
    QInputDialog,
    QLabel,
    QListWidget,
    QListWidgetItem,
    QPlainTextEdit,
    QPushButton,
    QSpinBox,
    QSplitter,
    QTextBrowser,
    QVBoxLayout,
    QWidget,
)

from app.ui.chat_store import ChatStore, Message, to_markdown
from app.ui.format import KIND_LABELS, fallback_line, reply_stats
from app.ui.live import Segment
from app.ui.panels import LivePanels
from app.ui.settings import Preset, Settings
from app.ui.theme import LIGHT, Colors
from app.ui.widgets import Banner, SpecCombo, add_shortcut
from app.ui.worker import EngineClient, Job, ModelState

STREAM_HZ = 15
SAVE_EVERY_S = 1.0


class ChatView(QWidget):
    settings_changed = Signal()
    reply_finished = Signal(object)  # DoneEvent (tests, status bar)
    go_to_models = Signal()

    def __init__(
        self,
        client: EngineClient,
        store: ChatStore,
        settings: Settings,
        banner: Banner,
        parent: QWidget | None = None,
        *,
        colors: Colors = LIGHT,
    ):
        super().__init__(parent)
        self.client = client
        self.store = store
        self.settings = settings
        self.banner = banner
        self.colors = colors
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
        # conversations column
        self.conv_list = QListWidget()
        self.conv_list.setObjectName("conversations")
        self.conv_list.setHorizontalScrollBarPolicy(Qt.ScrollBarPolicy.ScrollBarAlwaysOff)
        self.conv_list.setTextElideMode(Qt.TextElideMode.ElideRight)
        self.conv_list.setUniformItemSizes(True)
        self.conv_list.itemSelectionChanged.connect(self._on_conv_selected)
        self.conv_list.itemChanged.connect(self._on_conv_renamed)
        new_btn = QPushButton("New chat")
        new_btn.clicked.connect(lambda: self.new_conversation())
        del_btn = QPushButton("Delete")
        del_btn.setProperty("role", "danger")
        del_btn.clicked.connect(self.delete_conversation)
        export_btn = QPushButton("Export Markdown…")
        export_btn.clicked.connect(self.export_markdown)
        left = QWidget()
        lv = QVBoxLayout(left)
        lv.setContentsMargins(0, 0, 0, 0)
        title = QLabel("Conversations")
        title.setProperty("role", "title")
        lv.addWidget(title)
        lv.addWidget(self.conv_list, 1)
        row = QHBoxLayout()
        row.addWidget(new_btn)
        row.addWidget(del_btn)
        lv.addLayout(row)
        lv.addWidget(export_btn)

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

        self.transcript = QTextBrowser()
        self.transcript.setObjectName("transcript")
        self.transcript.setOpenLinks(False)
        self.transcript.document().setDocumentMargin(12)
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
        status_row = QHBoxLayout()
        status_row.addWidget(self.state_label, 1)
        status_row.addWidget(self.panels_box)

        chat_col = QWidget()
        cv = QVBoxLayout(chat_col)
        cv.setContentsMargins(0, 0, 0, 0)
        cv.addLayout(top)
        cv.addWidget(self.transcript, 1)
        cv.addLayout(status_row)
        cv.addLayout(input_row)
        centre = QSplitter(Qt.Orientation.Vertical)
        centre.addWidget(chat_col)
        centre.addWidget(self.panels)
        centre.setStretchFactor(0, 3)
        centre.setStretchFactor(1, 1)
        centre.setChildrenCollapsible(False)

        # right: generation settings
        self.system_edit = QPlainTextEdit(s.system_prompt)
        self.system_edit.setObjectName("system_prompt")
        self.system_edit.setPlaceholderText("Optional instructions for the model")
        self.system_edit.setFixedHeight(110)
        self.system_edit.textChanged.connect(self._on_system_changed)
        self.preset_combo = QComboBox()
        self._fill_presets()
        self.preset_combo.activated.connect(self._apply_preset)
        save_preset = QPushButton("Save as preset…")
        save_preset.clicked.connect(self.save_preset)
        self.temp_spin = QDoubleSpinBox()
        self.temp_spin.setRange(0.0, 2.0)
        self.temp_spin.setSingleStep(0.1)
        self.temp_spin.setDecimals(2)
        self.temp_spin.setValue(s.temperature)
        self.temp_spin.setToolTip("0 = greedy (always the most likely token)")
        self.top_p_spin = QDoubleSpinBox()
        self.top_p_spin.setRange(0.05, 1.0)
        self.top_p_spin.setSingleStep(0.05)
        self.top_p_spin.setValue(s.top_p)
        self.max_spin = QSpinBox()
        self.max_spin.setRange(1, 32768)
        self.max_spin.setValue(s.max_tokens)
        for w in (self.temp_spin, self.top_p_spin, self.max_spin):
            w.valueChanged.connect(self._on_sampling_changed)
        self.template_label = QLabel("")
        self.template_label.setProperty("role", "muted")
        self.template_label.setWordWrap(True)
        right = QWidget()
        right_v = QVBoxLayout(right)
        right_v.setContentsMargins(0, 0, 0, 0)
        form = QFormLayout()
        right_v.addLayout(form)
        right_v.addStretch(1)
        hdr = QLabel("Reply settings")
        hdr.setProperty("role", "title")
        form.addRow(hdr)
        form.addRow(QLabel("System prompt"))
        form.addRow(self.system_edit)
        form.addRow("Preset", self.preset_combo)
        form.addRow("", save_preset)
        form.addRow("Temperature", self.temp_spin)
        form.addRow("Top-p", self.top_p_spin)
        form.addRow("Max tokens", self.max_spin)
        form.addRow(self.template_label)
        right.setMinimumWidth(230)
        right.setMaximumWidth(300)
        left.setMinimumWidth(170)
        left.setMaximumWidth(260)

        split = QSplitter(Qt.Orientation.Horizontal)
        split.addWidget(left)
        split.addWidget(centre)
        split.addWidget(right)
        split.setStretchFactor(1, 1)
        split.setChildrenCollapsible(False)
        split.setSizes([200, 900, 260])
        outer = QVBoxLayout(self)
        outer.setContentsMargins(10, 8, 10, 8)
        outer.addWidget(split)

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

    def _fill_presets(self) -> None:
        self.preset_combo.clear()
        self.preset_combo.addItem("Custom", None)
        for p in self.settings.presets:
            self.preset_combo.addItem(
                f"{p.name} (T {p.temperature:g}, top-p {p.top_p:g}, {p.max_tokens} tok)", p
            )

    # -- theme ------------------------------------------------------------------------------
    def apply_colors(self, c: Colors) -> None:
        self.colors = c
        self.panels.apply_colors(c)
        if self.job is None:
            self.render()

    # -- engine state -------------------------------------------------------------------------
    def on_model_state(self, state: ModelState) -> None:
        if state.target:
            draft = f" + draft {state.draft}" if state.draft else " (no draft model)"
            self.model_label.setText(f"<b>{html.escape(state.target)}</b>{html.escape(draft)}")
            self.template_label.setText(
                "Prompts use the model's own chat template."
                if state.has_chat_template
                else "This model has no chat template: turns are joined as plain text."
            )
        else:
            self.model_label.setText("No model loaded")
            self.template_label.setText("")
        self.spec_combo.set_reasons(state.kinds)
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
        self.width_spin.setEnabled(not busy and self.spec_combo.kind() != "none")
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
        self.conv_list.blockSignals(True)
        self.conv_list.clear()
        for c in convs:
            item = QListWidgetItem(c.title)
            item.setData(Qt.ItemDataRole.UserRole, c.id)
            item.setFlags(item.flags() | Qt.ItemFlag.ItemIsEditable)
            self.conv_list.addItem(item)
        self.conv_list.blockSignals(False)
        target = select if select is not None else (self.conv_id or convs[0].id)
        for i in range(self.conv_list.count()):
            if self.conv_list.item(i).data(Qt.ItemDataRole.UserRole) == target:
                self.conv_list.setCurrentRow(i)
                break
        else:
            self.conv_list.setCurrentRow(0)

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

    def _on_conv_selected(self) -> None:
        item = self.conv_list.currentItem()
        if item is None:
            return
        conv_id = int(item.data(Qt.ItemDataRole.UserRole))
        if conv_id == self.conv_id:
            return
        if self.job is not None:  # a reply streams into its own conversation: finish it first
            self.stop()
        self.conv_id = conv_id
        conv = self.store.conversation(conv_id)
        if conv is not None:
            self.system_edit.blockSignals(True)
            self.system_edit.setPlainText(conv.system_prompt)
            self.system_edit.blockSignals(False)
        self.render()
        self._update_buttons()

    def _on_conv_renamed(self, item: QListWidgetItem) -> None:
        title = item.text().strip() or "Untitled"
        self.store.rename(int(item.data(Qt.ItemDataRole.UserRole)), title)

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
        self.transcript.clear()
        msgs = self._messages()
        if not msgs:
            self._insert_hint()
        for m in msgs:
            self._insert_header(m.role)
            if m.role == "assistant" and m.segments:
                for text, draft in m.segments:
                    self._insert_text(text, draft)
            else:
                self._insert_text(m.content, False)
            if m.role == "assistant":
                self._insert_footer(m)
        self._scroll_to_end()

    def _cursor(self) -> QTextCursor:
        cur = self.transcript.textCursor()
        cur.movePosition(QTextCursor.MoveOperation.End)
        return cur

    def _insert_hint(self) -> None:
        cur = self._cursor()
        fmt = QTextCharFormat()
        fmt.setForeground(QColor(self.colors.muted))
        cur.insertText(
            "Ask anything. Replies stream here; with speculation on, accepted draft tokens "
            "are highlighted and the numbers under each reply show what it bought.",
            fmt,
        )

    def _insert_header(self, role: str) -> None:
        cur = self._cursor()
        if not self.transcript.document().isEmpty():
            cur.insertBlock()
            cur.insertBlock()
        fmt = QTextCharFormat()
        fmt.setFontWeight(QFont.Weight.Bold)
        fmt.setForeground(QColor(self.colors.accent if role == "user" else self.colors.text))
        cur.insertText("You" if role == "user" else "Assistant", fmt)
        cur.insertBlock()

    def _insert_text(self, text: str, draft: bool) -> None:
        if not text:
            return
        cur = self._cursor()
        fmt = QTextCharFormat()
        fmt.setForeground(QColor(self.colors.text))
        if draft and self.highlight_box.isChecked():
            fmt.setBackground(QColor(self.colors.draft_bg))
        cur.insertText(text, fmt)

    def _insert_footer(self, m: Message) -> None:
        cur = self._cursor()
        small = QTextCharFormat()
        small.setForeground(QColor(self.colors.muted))
        small.setFontPointSize(max(self.font().pointSizeF() - 1, 7))
        lines = []
        if m.stats.get("line"):
            lines.append(("stats", m.stats["line"]))
        fb = fallback_line(m.stats) if m.stats else None
        if fb:
            lines.append(("warn", fb))
        if m.status == "interrupted":
            lines.append(("warn", "This reply was interrupted (the app closed while it streamed)."))
        if m.stats.get("error"):
            lines.append(("error", f"Error: {m.stats['error']}"))
        for kind, text in lines:
            cur.insertBlock()
            f = QTextCharFormat(small)
            if kind == "warn":
                f.setForeground(QColor(self.colors.warn))
            elif kind == "error":
                f.setForeground(QColor(self.colors.bad))
            cur.insertText(text, f)

    def _scroll_to_end(self) -> None:
        bar = self.transcript.verticalScrollBar()
        bar.setValue(bar.maximum())

    def _on_highlight(self, on: bool) -> None:
        self.settings.highlight_drafts = on
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
            item = self.conv_list.currentItem()
            if item is not None:
                self.conv_list.blockSignals(True)
                item.setText(title)
                self.conv_list.blockSignals(False)
        self.input.clear()
        if self.transcript.document().characterCount() > 1 and not self._messages()[:-1]:
            self.transcript.clear()
        self._insert_header("user")
        self._insert_text(text, False)
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
        self._insert_header("assistant")
        self.job = Job(request=request, tag="chat")
        self.job.live.label = "reply"
        self.panels.set_runs([(self.job.live, "reply", self.colors.accent)])
        self.client.submit(self.job)
        self._since_save = 0
        self._stream_timer.start()
        self.state_label.setText("Waiting for the engine…")
        self._update_buttons()
        self._scroll_to_end()

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
        bar = self.transcript.verticalScrollBar()
        at_end = bar.value() >= bar.maximum() - 4
        visible = self.conv_id == self._reply_conv  # the user may have switched conversations
        for seg in segments:
            if visible:
                self._insert_text(seg.text, seg.from_draft)
            if self._reply_segments and self._reply_segments[-1][1] == seg.from_draft:
                self._reply_segments[-1] = (self._reply_segments[-1][0] + seg.text, seg.from_draft)
            else:
                self._reply_segments.append((seg.text, seg.from_draft))
        if at_end:
            self._scroll_to_end()
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
                self._insert_footer(msg)
        self._reply_id = None
        if done.finish_reason == "error":
            self.banner.show_message(done.error or "The reply failed.", error=True)
            self.state_label.setText("The reply failed.")
        else:
            self.state_label.setText(stats["line"])
        self._scroll_to_end()
        self._update_buttons()
        self.reply_finished.emit(done)

    # -- settings ----------------------------------------------------------------------------
    def _on_kind_changed(self, kind: str) -> None:
        self.settings.draft_kind = kind
        self.width_spin.setEnabled(kind != "none" and self.job is None)
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

    def _on_system_changed(self) -> None:
        text = self.system_edit.toPlainText()
        self.settings.system_prompt = text
        if self.conv_id is not None:
            self.store.set_system_prompt(self.conv_id, text)
        self.settings_changed.emit()

    def _on_sampling_changed(self) -> None:
        self.settings.temperature = self.temp_spin.value()
        self.settings.top_p = self.top_p_spin.value()
        self.settings.max_tokens = self.max_spin.value()
        p = self.preset_combo.currentData()
        if p is not None and (p.temperature, p.top_p, p.max_tokens) != (
            self.settings.temperature, self.settings.top_p, self.settings.max_tokens
        ):
            self.preset_combo.setCurrentIndex(0)
        self.settings_changed.emit()

    def _apply_preset(self, index: int) -> None:
        p = self.preset_combo.itemData(index)
        if p is None:
            return
        for w, v in ((self.temp_spin, p.temperature), (self.top_p_spin, p.top_p),
                     (self.max_spin, p.max_tokens)):
            w.blockSignals(True)
            w.setValue(v)
            w.blockSignals(False)
        self._on_sampling_changed()
        self.preset_combo.setCurrentIndex(index)

    def save_preset(self, name: str | None = None) -> None:
        if name is None:
            name, ok = QInputDialog.getText(self, "Save preset", "Preset name:")
            if not ok:
                return
        name = name.strip()
        if not name:
            return
        preset = Preset(name, self.temp_spin.value(), self.top_p_spin.value(), self.max_spin.value())
        self.settings.presets = [p for p in self.settings.presets if p.name != name] + [preset]
        self._fill_presets()
        self.preset_combo.setCurrentIndex(self.preset_combo.count() - 1)
        self.settings_changed.emit()

    def shutdown(self) -> None:
        """Window closing: stop streaming; the partial reply is already saved on finish/next start."""
        self._stream_timer.stop()
        self.panels.stop()
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

