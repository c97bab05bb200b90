"""How much of the model's context a chat uses (prompt and reply), as LM Studio shows it."""

from __future__ import annotations

from typing import Any

from PySide6.QtCore import QSize
from PySide6.QtWidgets import QProgressBar, QSizePolicy, QWidget


def used_tokens(stats: dict[str, Any]) -> int:
    """Tokens in the context after a stored reply: its prompt (read + reused) and its output."""
    return int(stats.get("prompt_n", 0)) + int(stats.get("cache_n", 0)) + int(stats.get("tokens", 0))


class ContextMeter(QProgressBar):
    def __init__(self, parent: QWidget | None = None):
        super().__init__(parent)
        self.setObjectName("context_meter")
        self.setTextVisible(True)
        self.setSizePolicy(QSizePolicy.Policy.Fixed, QSizePolicy.Policy.Fixed)
        self.limit: int | None = None
        self.used = 0
        self._show()

    def set_limit(self, limit: int | None) -> None:
        self.limit = limit
        self._show()

    def set_used(self, used: int) -> None:
        self.used = max(0, int(used))
        self._show()

    def sizeHint(self) -> QSize:  # noqa: N802 (Qt override)
        # the widest text this limit can show, so the bar keeps one width while a chat grows
        total = f"{self.limit:,}" if self.limit else "?"
        widest = f"context {total} / {total} tokens"
        fm = self.fontMetrics()
        return QSize(fm.horizontalAdvance(widest) + 24, max(fm.height() + 6, 20))

    def minimumSizeHint(self) -> QSize:  # noqa: N802 (Qt override)
        return self.sizeHint()

    def show_messages(self, messages: list[Any]) -> None:
        """The last reply's figures, or nothing yet for a chat without one."""
        replies = [m for m in messages if m.role == "assistant" and m.stats.get("prompt_n")]
        self.set_used(used_tokens(replies[-1].stats) if replies else 0)

    def _show(self) -> None:
        limit = self.limit
        self.setRange(0, limit or 1)
        self.setValue(min(self.used, limit) if limit else 0)
        total = f"{limit:,}" if limit else "?"
        self.setFormat(f"context {self.used:,} / {total} tokens")
        self.updateGeometry()  # the text's width changed: room for all of it, never clipped
        self.setToolTip(
            "Tokens this chat takes in the model's context (prompt and reply). When it is full, "
            "a new message is refused or the oldest turns are left out, as chosen in Reply "
            "settings." if limit else "This model does not say how long its context is.")
