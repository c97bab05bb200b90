"""The Chat view: conversations, sampling controls, speculation choice, streaming replies.

Its parts live beside it: ``chat_conversations`` (left), ``chat_toolbar`` (top bar),
``chat_transcript`` (centre), ``chat_input`` (message box), ``chat_reply_settings`` (right),
``chat_messages`` (editing, deleting, regenerating and refused messages); the live plots are
``panels.LivePanels``. Streaming a reply is ``chat_reply.ReplyStream``.
"""

from __future__ import annotations

from pathlib import Path

from PySide6.QtCore import Qt, QTimer, Signal
from PySide6.QtGui import QResizeEvent
from PySide6.QtWidgets import (
    QCheckBox,
    QFileDialog,
    QFrame,
    QHBoxLayout,
    QScrollArea,
    QVBoxLayout,
    QWidget,
)

from app import kinds
from app.ui.chat_conversations import ConversationsPanel
from app.ui.chat_draft import DraftSection, model_line, template_note
from app.ui.chat_input import InputArea
from app.ui.chat_messages import MessageActions
from app.ui.chat_reply import ReplyStream
from app.ui.chat_reply_settings import ReplySettingsPanel
from app.ui.chat_store import ChatStore, Message, to_markdown
from app.ui.chat_toolbar import ChatToolbar
from app.ui.chat_transcript import Transcript
from app.ui.context_meter import ContextMeter
from app.ui.elided import ElidedLabel
from app.ui.format import KIND_LABELS
from app.ui.panels import LivePanels
from app.ui.theme import Colors
from app.ui.view_deps import View, ViewDeps
from app.ui.widgets import add_shortcut, splitter
from app.ui.worker import ModelState


def scrolling(widget: QWidget) -> QScrollArea:
    """``widget`` in a frameless area that scrolls vertically when the window is short."""
    area = QScrollArea()
    area.setWidget(widget)
    area.setWidgetResizable(True)
    area.setFrameShape(QFrame.Shape.NoFrame)
    area.setHorizontalScrollBarPolicy(Qt.ScrollBarPolicy.ScrollBarAlwaysOff)
    area.setMinimumWidth(widget.minimumSizeHint().width() + area.verticalScrollBar().sizeHint().width())
    area.setMaximumWidth(widget.maximumWidth() + area.verticalScrollBar().sizeHint().width())
    return area


WIDE = 1000  # the view's width from which the settings column shows by itself


class ChatView(View):
    settings_changed = Signal()
    reply_finished = Signal(object)  # DoneEvent (tests, status bar)
    go_to_models = Signal()

    def __init__(self, deps: ViewDeps, store: ChatStore, parent: QWidget | None = None):
        super().__init__(deps, parent)
        client = self.client
        self.store = store
        self._save_retry = QTimer(self)  # while chats wait in memory for a writable disk
        self._save_retry.setInterval(5000)
        self._save_retry.timeout.connect(store.retry)
        store.on_saving = self._on_saving
        if store.unsaved:
            self._save_retry.start()
        self.conv_id: int | None = None
        self._build()
        self.reply = ReplyStream(self)
        self.messages_ui = MessageActions(self)
        client.job_started.connect(lambda _id: self._update_buttons())
        client.job_finished.connect(lambda _id, _d: self._update_buttons())
        client.bench_finished.connect(lambda _r, _e: self._update_buttons())
        self._load_conversations()
        self.on_model_state(client.state)

    def _on_saving(self, problem: str | None) -> None:
        """The chats stopped being written to disk (``problem`` says why), or are saved again."""
        if problem:
            self.banner.show_message(problem, error=True)
            self._save_retry.start()
        else:
            self._save_retry.stop()
            self.banner.show_message("Chats are saved again: nothing typed was lost.",
                                     timeout_ms=8000)

    @property
    def job(self):  # -> Job | None: the reply streaming now
        return self.reply.job

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

        # centre: top bar, transcript, status line, input, panels
        self.toolbar = bar = ChatToolbar(kind=s.draft_kind, width=s.draft_width,
                                         highlight=s.highlight_drafts)
        self.model_label, self.spec_combo = bar.model_label, bar.spec_combo
        self.width_spin, self.highlight_box = bar.width_spin, bar.highlight_box
        bar.change_btn.clicked.connect(self.go_to_models.emit)
        self.spec_combo.kind_changed.connect(self._on_kind_changed)
        self.width_spin.valueChanged.connect(self._on_width_changed)
        self.highlight_box.toggled.connect(self._on_highlight)

        self.transcript = Transcript(self.colors, highlight=s.highlight_drafts)
        self.input_area = area = InputArea(send_key=s.send_key)
        self.input = area.box
        self.send_btn, self.stop_btn, self.regen_btn = area.send_btn, area.stop_btn, area.regen_btn
        self.input.send_requested.connect(self.send)
        self.input.escape_pressed.connect(self._on_escape)
        self.send_btn.clicked.connect(self.send)
        self.stop_btn.clicked.connect(self.stop)
        self.regen_btn.clicked.connect(self.regenerate)
        area.cancel_edit.connect(lambda: self.messages_ui.cancel_edit())

        self.state_label = ElidedLabel("")
        self.state_label.setObjectName("chat_state")
        self.state_label.setProperty("role", "muted")
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
        cv.addWidget(bar)
        cv.addWidget(self.transcript, 1)
        cv.addLayout(status_row)
        cv.addWidget(area)
        centre = splitter(Qt.Orientation.Vertical, (chat_col, 3), (self.panels, 1))

        # right: the draft picker and the reply settings, scrolling when the window is short
        self.draft_section = DraftSection(s)
        self.draft_section.kind_chosen.connect(self.spec_combo.set_kind)
        self.reply_settings = ReplySettingsPanel(s, top=self.draft_section)
        self.reply_settings.changed.connect(self.settings_changed.emit)
        self.reply_settings.system_changed.connect(self._on_system_changed)
        rs = self.reply_settings
        self.system_edit = rs.system_edit
        self.temp_spin, self.top_p_spin, self.max_spin = rs.temp_spin, rs.top_p_spin, rs.max_spin
        self.template_label = rs.template_label
        self.right = right = scrolling(rs)
        self._right_auto = True  # shown by width until the person toggles it
        bar.settings_btn.toggled.connect(self._on_right_toggled)

        self.split = split = splitter(Qt.Orientation.Horizontal, (left, 0), (centre, 1),
                                      (right, 0), sizes=[190, 900, 270])
        for i in (0, 2):  # the side columns can be dragged shut on a small screen
            split.setCollapsible(i, True)
        self.body_layout().addWidget(split)

        add_shortcut(self, "Ctrl+Return", self.send)
        add_shortcut(self, "Ctrl+Enter", self.send)
        add_shortcut(self, Qt.Key.Key_Escape, self._on_escape)  # stop a reply, or leave an edit

    def resizeEvent(self, event: QResizeEvent) -> None:  # noqa: N802 (Qt override)
        super().resizeEvent(event)
        if self._right_auto:  # narrow: the transcript and plots keep the room
            self._show_right(self.width() >= WIDE)

    def _show_right(self, on: bool) -> None:
        self.right.setVisible(on)
        btn = self.toolbar.settings_btn
        btn.blockSignals(True)
        btn.setChecked(on)
        btn.blockSignals(False)

    def _on_right_toggled(self, on: bool) -> None:
        self._right_auto = False
        self._show_right(on)

    def focus_input(self) -> None:
        self.input.setFocus(Qt.FocusReason.OtherFocusReason)

    def set_send_key(self, send_key: str) -> None:
        self.settings.send_key = send_key
        self.input.set_send_key(send_key)
        self._update_buttons()

    def _on_escape(self) -> None:
        if self.job is not None:
            self.stop()
        elif self.messages_ui.editing is not None:
            self.messages_ui.cancel_edit()

    # -- theme ------------------------------------------------------------------------------
    def apply_colors(self, c: Colors) -> None:
        self.colors = c
        self.transcript.colors = c
        self.panels.apply_colors(c)
        if self.job is None:
            self.refresh_transcript()

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
        editing = self.messages_ui.editing is not None if hasattr(self, "messages_ui") else False
        self.send_btn.setEnabled((ready or editing) and not busy and not elsewhere)
        self.send_btn.setToolTip(
            "Wait: Compare or Bench is using the engine" if elsewhere else self.input_area.send_tip()
        )
        self.stop_btn.setEnabled(busy)
        msgs = self._messages()
        has_reply = bool(msgs) and msgs[-1].role == "assistant"  # the last reply can be redone
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
        self.focus_input()
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
        self.messages_ui.cancel_edit()
        self.conv_id = conv_id
        conv = self.store.conversation(conv_id)
        if conv is not None:
            self.reply_settings.set_system_prompt(conv.system_prompt)
        msgs = self._messages()
        self.context_meter.show_messages(msgs)
        # another chat: no stats or plots of the previous one
        self.panels.clear()
        replies = [m for m in msgs if m.role == "assistant" and m.stats.get("line")]
        self.state_label.setText(replies[-1].stats["line"] if replies else "")
        self.refresh_transcript()
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
    def refresh_transcript(self) -> None:
        """Rebuild the transcript from the store (conversation switch, theme, highlighting)."""
        self.transcript.show_messages(self._messages())

    def _on_highlight(self, on: bool) -> None:
        self.settings.highlight_drafts = on
        self.transcript.highlight = on
        self.settings_changed.emit()
        if self.job is None:
            self.refresh_transcript()

    # -- sending ---------------------------------------------------------------------------
    def send(self) -> None:
        if self.messages_ui.editing is not None:
            self.messages_ui.save_edit()
            return
        text = self.input.toPlainText().strip()
        if not text or not self.send_btn.isEnabled():
            return
        if self.conv_id is None:
            self.new_conversation()
        assert self.conv_id is not None
        msg_id = self.store.add_message(self.conv_id, "user", text)
        if len([m for m in self._messages() if m.role == "user"]) == 1:
            title = text.splitlines()[0][:48]
            self.store.rename(self.conv_id, title)
            self.conversations.set_current_title(title)
        self.input.clear()
        if self.transcript.document().characterCount() > 1 and not self._messages()[:-1]:
            self.transcript.clear()
        self.transcript.insert_header("user")
        self.transcript.insert_text(text, False)
        self.transcript.insert_actions(msg_id, "user")
        self.reply.start(msg_id)

    def regenerate(self) -> None:
        if self.job is not None or self.conv_id is None:
            return
        msgs = self._messages()
        if not msgs or msgs[-1].role != "assistant":
            return  # nothing to replace (the last message may be a refused one)
        while msgs and msgs[-1].role == "assistant":
            self.store.delete_message(msgs.pop().id)
        if not msgs:
            return
        self.refresh_transcript()
        self.reply.start(msgs[-1].id)

    def build_request(self):  # -> GenerationRequest
        from app.engine.events import GenerationRequest, SamplingParams

        kind = self.spec_combo.kind()
        return GenerationRequest(
            messages=prompt_turns(self._messages()),
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
            # drafting from earlier replies reads this chat's (rebuilt from its messages after
            # a restart), never another chat's
            reply_scope=f"chat-{self.conv_id}",
            context_policy=self.settings.context_policy,
        )

    def stop(self) -> None:
        if self.job is not None:
            self.job.cancel.set()
            self.state_label.setText("Stopping…")

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
        self.reply.shutdown()
        self.panels.stop()
        self.draft_section.shutdown()


def prompt_turns(messages: list[Message]) -> tuple[dict[str, str], ...]:
    """The turns sent to the model: refused messages, failed replies and empty ones are left
    out, and turns of the same role in a row are joined (chat templates expect them to
    alternate; that happens after a deletion)."""
    turns: list[dict[str, str]] = []
    for m in messages:
        if not m.content.strip() or m.status == "refused" or m.stats.get("error"):
            continue
        if turns and turns[-1]["role"] == m.role:
            turns[-1] = {"role": m.role, "content": turns[-1]["content"] + "\n\n" + m.content}
        else:
            turns.append({"role": m.role, "content": m.content})
    return tuple(turns)
