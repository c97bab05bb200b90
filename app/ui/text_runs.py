"""Text appended to a transcript in runs, accepted draft tokens highlighted."""

from __future__ import annotations

from PySide6.QtGui import QColor, QTextCharFormat, QTextCursor
from PySide6.QtWidgets import QTextEdit

from app.ui.theme import Colors


def append_run(view: QTextEdit, text: str, colors: Colors, *, highlight: bool) -> None:
    """Append ``text`` at the end of ``view``; ``highlight``: on the accepted-draft colour."""
    if not text:
        return
    cur = view.textCursor()
    cur.movePosition(QTextCursor.MoveOperation.End)
    fmt = QTextCharFormat()
    fmt.setForeground(QColor(colors.text))
    if highlight:
        fmt.setBackground(QColor(colors.draft_bg))
    cur.insertText(text, fmt)
