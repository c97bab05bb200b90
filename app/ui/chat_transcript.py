"""The chat transcript: messages rendered from the store, replies appended as they stream.

Each message ends with small links (Edit · Delete, and Regenerate under a reply); a click
emits ``action(name, message id)``. While a reply streams, the view follows it unless the
person scrolled up: following stops on a scroll away from the end and resumes at the end.
"""

from __future__ import annotations

from PySide6.QtCore import QUrl, Signal
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
REFUSED_HINT = ("This message is left out of the chat: edit it to make it shorter (or split it "
                "in parts), delete it, or send it again. When the chat itself has grown too long, "
                "start a new chat or choose “drop the oldest turns” in Reply settings.")
REFUSED_SHOWN = 600  # characters of a refused message shown (Edit holds all of it)
ACTIONS = {
    "user": (("edit", "Edit"), ("delete", "Delete")),
    "refused": (("edit", "Edit"), ("delete", "Delete"), ("resend", "Send again")),
    "assistant": (("edit", "Edit"), ("delete", "Delete"), ("regenerate", "Regenerate")),
}
END_SLACK = 4  # pixels from the end that still count as "at the end"


class Transcript(QTextBrowser):
    action = Signal(str, int)  # edit | delete | regenerate | resend, message id

    def __init__(self, colors: Colors, *, highlight: bool, parent: QWidget | None = None):
        super().__init__(parent)
        self.colors = colors
        self.highlight = highlight  # show accepted draft tokens on their own colour
        self.follow = True  # keep the end in view as text arrives
        self._scrolling = False
        self.setObjectName("transcript")
        self.setOpenLinks(False)
        self.document().setDocumentMargin(12)
        self.anchorClicked.connect(self._on_anchor)
        bar = self.verticalScrollBar()
        bar.rangeChanged.connect(self._on_range)
        bar.valueChanged.connect(self._on_value)

    def show_messages(self, msgs: list[Message]) -> None:
        """Rebuild from ``msgs`` (conversation switch, theme, highlighting, edits)."""
        self.clear()
        if not msgs:
            self.insert_hint()
        for m in msgs:
            self.insert_header(m.role)
            if m.role == "assistant" and m.segments:
                for text, draft in m.segments:
                    self.insert_text(text, draft)
            elif m.status == "refused" and len(m.content) > REFUSED_SHOWN:
                self.insert_text(m.content[:REFUSED_SHOWN], False)
                more = len(m.content) - REFUSED_SHOWN
                self._cursor().insertText(f"… ({more:,} more characters: Edit shows them all)",
                                          self._small(self.colors.muted))
            else:
                self.insert_text(m.content, False)
            if m.role == "assistant":
                self.insert_footer(m)
            else:
                self.insert_user_footer(m)
        self.follow = True
        self.scroll_to_end()

    def _cursor(self) -> QTextCursor:
        cur = self.textCursor()
        cur.movePosition(QTextCursor.MoveOperation.End)
        return cur

    def _small(self, color: str) -> QTextCharFormat:
        fmt = QTextCharFormat()
        fmt.setForeground(QColor(color))
        fmt.setFontPointSize(max(self.font().pointSizeF() - 1, 7))
        return fmt

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

    def insert_user_footer(self, m: Message) -> None:
        """Under a message of the person: why it was refused (if it was), then its actions."""
        if m.status == "refused":
            cur = self._cursor()
            cur.insertBlock()
            error = refusal(m.stats.get("error") or "")
            cur.insertText(f"{error} {REFUSED_HINT}", self._small(self.colors.bad))
        self.insert_actions(m.id, "refused" if m.status == "refused" else "user")

    def insert_footer(self, m: Message) -> None:
        cur = self._cursor()
        lines = []
        if m.stats.get("line"):
            lines.append(("stats", m.stats["line"] + (" · edited" if m.stats.get("edited") else "")))
        fb = fallback_line(m.stats) if m.stats else None
        if fb:
            lines.append(("warn", fb))
        if m.status == "interrupted":
            lines.append(("warn", "This reply was interrupted (the app closed while it streamed)."))
        if m.stats.get("error"):
            lines.append(("error", f"Error: {m.stats['error']}"))
        for kind, text in lines:
            cur.insertBlock()
            color = {"warn": self.colors.warn, "error": self.colors.bad}.get(kind, self.colors.muted)
            cur.insertText(text, self._small(color))
        self.insert_actions(m.id, "assistant")

    def insert_actions(self, msg_id: int, kind: str) -> None:
        cur = self._cursor()
        cur.insertBlock()
        sep = self._small(self.colors.muted)
        for i, (name, label) in enumerate(ACTIONS[kind]):
            if i:
                cur.insertText(" · ", sep)
            link = self._small(self.colors.accent)
            link.setAnchor(True)
            link.setAnchorHref(f"msg:{name}/{msg_id}")
            cur.insertText(label, link)
        cur.insertText(" ", sep)  # typing after the link never extends it

    def _on_anchor(self, url: QUrl) -> None:
        if url.scheme() != "msg":
            return
        name, _, ident = url.path().partition("/")
        if ident.isdigit():
            self.action.emit(name, int(ident))

    # -- following the end -------------------------------------------------------------------
    def at_end(self) -> bool:
        bar = self.verticalScrollBar()
        return bar.value() >= bar.maximum() - END_SLACK

    def scroll_to_end(self) -> None:
        bar = self.verticalScrollBar()
        self._scrolling = True
        try:
            bar.setValue(bar.maximum())
        finally:
            self._scrolling = False

    def _on_range(self, _lo: int, _hi: int) -> None:
        if self.follow:  # the document grew (laid out later than the insert): keep the end shown
            self.scroll_to_end()

    def _on_value(self, _value: int) -> None:
        if not self._scrolling:  # the person scrolled: follow again only once back at the end
            self.follow = self.at_end()


def refusal(error: str) -> str:
    """Why a message was refused, without the engine's general advice (the chat gives its own,
    with the links that act on it)."""
    if not error:
        return "The model could not take this message."
    return error.split(" Shorten it,")[0].strip()
