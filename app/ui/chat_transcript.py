"""The chat transcript: messages rendered from the store, replies appended as they stream."""

from __future__ import annotations

from PySide6.QtGui import QColor, QFont, QTextCharFormat, QTextCursor
from PySide6.QtWidgets import QTextBrowser, QWidget

from app.ui.chat_store import Message
from app.ui.format import fallback_line
from app.ui.text_runs import append_run
from app.ui.theme import Colors

HINT = (
    "Ask anything. Replies stream here; with speculation on, accepted draft tokens "
    "are highlighted and the numbers under each reply show what it bought."
)


class Transcript(QTextBrowser):
    def __init__(self, colors: Colors, *, highlight: bool, parent: QWidget | None = None):
        super().__init__(parent)
        self.colors = colors
        self.highlight = highlight  # show accepted draft tokens on their own colour
        self.setObjectName("transcript")
        self.setOpenLinks(False)
        self.document().setDocumentMargin(12)

    def show_messages(self, msgs: list[Message]) -> None:
        """Rebuild from ``msgs`` (conversation switch, theme, highlighting)."""
        self.clear()
        if not msgs:
            self.insert_hint()
        for m in msgs:
            self.insert_header(m.role)
            if m.role == "assistant" and m.segments:
                for text, draft in m.segments:
                    self.insert_text(text, draft)
            else:
                self.insert_text(m.content, False)
            if m.role == "assistant":
                self.insert_footer(m)
        self.scroll_to_end()

    def _cursor(self) -> QTextCursor:
        cur = self.textCursor()
        cur.movePosition(QTextCursor.MoveOperation.End)
        return cur

    def insert_hint(self) -> None:
        fmt = QTextCharFormat()
        fmt.setForeground(QColor(self.colors.muted))
        self._cursor().insertText(HINT, fmt)

    def insert_header(self, role: str) -> None:
        cur = self._cursor()
        if not self.document().isEmpty():
            cur.insertBlock()
            cur.insertBlock()
        fmt = QTextCharFormat()
        fmt.setFontWeight(QFont.Weight.Bold)
        fmt.setForeground(QColor(self.colors.accent if role == "user" else self.colors.text))
        cur.insertText("You" if role == "user" else "Assistant", fmt)
        cur.insertBlock()

    def insert_text(self, text: str, draft: bool) -> None:
        append_run(self, text, self.colors, highlight=draft and self.highlight)

    def insert_footer(self, m: Message) -> None:
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

    def at_end(self) -> bool:
        bar = self.verticalScrollBar()
        return bar.value() >= bar.maximum() - 4

    def scroll_to_end(self) -> None:
        bar = self.verticalScrollBar()
        bar.setValue(bar.maximum())
