"""The chat's message box and its buttons.

Enter sends and Shift+Enter starts a new line; with the ``ctrl-enter`` setting, Enter starts a
new line and Ctrl+Enter sends (Ctrl+Enter sends in both). Esc stops a running reply, or leaves
an edit. While a message is edited the box holds its text and a strip above it says so.
"""

from __future__ import annotations

from PySide6.QtCore import Qt, Signal
from PySide6.QtGui import QKeyEvent
from PySide6.QtWidgets import (
    QHBoxLayout,
    QLabel,
    QPlainTextEdit,
    QPushButton,
    QVBoxLayout,
    QWidget,
)

SEND_KEYS = ("enter", "ctrl-enter")
ENTER_KEYS = (Qt.Key.Key_Return, Qt.Key.Key_Enter)


def key_hint(send_key: str) -> str:
    if send_key == "ctrl-enter":
        return "Ctrl+Enter to send, Enter for a new line, Esc to stop"
    return "Enter to send, Shift+Enter for a new line, Esc to stop"


class MessageBox(QPlainTextEdit):
    send_requested = Signal()
    escape_pressed = Signal()

    def __init__(self, parent: QWidget | None = None, *, send_key: str = "enter"):
        super().__init__(parent)
        self.setObjectName("input")
        self.send_key = "enter"
        self.set_send_key(send_key)

    def set_send_key(self, send_key: str) -> None:
        self.send_key = send_key if send_key in SEND_KEYS else "enter"
        self.setPlaceholderText(f"Write a message…  ({key_hint(self.send_key)})")

    def keyPressEvent(self, event: QKeyEvent) -> None:  # noqa: N802 (Qt override)
        key, mods = event.key(), event.modifiers()
        if key in ENTER_KEYS:
            ctrl = bool(mods & (Qt.KeyboardModifier.ControlModifier | Qt.KeyboardModifier.MetaModifier))
            shift = bool(mods & Qt.KeyboardModifier.ShiftModifier)
            if ctrl or (self.send_key == "enter" and not shift):
                self.send_requested.emit()
                return
            self.insertPlainText("\n")  # a real new line (not Qt's soft line break)
            return
        if key == Qt.Key.Key_Escape:
            self.escape_pressed.emit()
            return
        super().keyPressEvent(event)


class InputArea(QWidget):
    """The edit strip, the message box and Send / Stop / Regenerate."""

    cancel_edit = Signal()

    def __init__(self, parent: QWidget | None = None, *, send_key: str = "enter"):
        super().__init__(parent)
        self.box = MessageBox(send_key=send_key)
        self.box.setMinimumHeight(48)
        self.box.setMaximumHeight(84)
        self.edit_label = QLabel("")
        self.edit_label.setProperty("role", "muted")
        self.edit_label.setWordWrap(True)
        cancel = QPushButton("Cancel edit")
        cancel.setFlat(True)
        cancel.clicked.connect(self.cancel_edit.emit)
        self.edit_strip = QWidget()
        strip = QHBoxLayout(self.edit_strip)
        strip.setContentsMargins(0, 0, 0, 0)
        strip.addWidget(self.edit_label, 1)
        strip.addWidget(cancel)
        self.edit_strip.hide()
        self.send_btn = QPushButton("Send")
        self.send_btn.setProperty("role", "primary")
        self.stop_btn = QPushButton("Stop")
        self.stop_btn.setToolTip("Stop the reply (Esc)")
        self.regen_btn = QPushButton("Regenerate")
        self.regen_btn.setToolTip("Replace the last reply with a new one")
        buttons = QVBoxLayout()
        buttons.setSpacing(4)
        for b in (self.send_btn, self.stop_btn, self.regen_btn):
            buttons.addWidget(b)
        buttons.addStretch(1)
        row = QHBoxLayout()
        row.addWidget(self.box, 1)
        row.addLayout(buttons)
        lay = QVBoxLayout(self)
        lay.setContentsMargins(0, 0, 0, 0)
        lay.setSpacing(2)
        lay.addWidget(self.edit_strip)
        lay.addLayout(row)

    def send_tip(self) -> str:
        return "Send (Ctrl+Enter)" if self.box.send_key == "ctrl-enter" else "Send (Enter)"

    def show_edit(self, role: str | None) -> None:
        """Show (``role``: whose message is edited) or hide the edit strip."""
        if role is None:
            self.edit_strip.hide()
            self.send_btn.setText("Send")
            return
        whose = "your message" if role == "user" else "the reply"
        self.edit_label.setText(f"Editing {whose}: Send saves it, Esc or Cancel edit leaves it "
                                "as it was.")
        self.send_btn.setText("Save")
        self.edit_strip.show()
