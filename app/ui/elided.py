"""A one-line label that never asks for more width than it is given.

Long texts (a reply's stats line, a model's path) are elided to the width the layout gives;
the full text is the tooltip. Its minimum width is a few characters, so a long line can never
raise a window's minimum size.
"""

from __future__ import annotations

from PySide6.QtCore import QSize, Qt
from PySide6.QtGui import QResizeEvent
from PySide6.QtWidgets import QLabel, QSizePolicy, QWidget

MIN_CHARS = 8  # the narrowest it gets: about this many characters and the ellipsis


class ElidedLabel(QLabel):
    def __init__(self, text: str = "", parent: QWidget | None = None, *,
                 mode: Qt.TextElideMode = Qt.TextElideMode.ElideRight):
        super().__init__(parent)
        self._full = ""
        self._mode = mode
        self._tip = ""
        self.setTextFormat(Qt.TextFormat.PlainText)
        self.setWordWrap(False)
        self.setSizePolicy(QSizePolicy.Policy.Ignored, QSizePolicy.Policy.Preferred)
        self.setText(text)

    def setText(self, text: str) -> None:  # noqa: N802 (Qt override)
        self._full = text or ""
        self._elide()

    def text(self) -> str:
        return self._full

    def setToolTip(self, tip: str) -> None:  # noqa: N802 (Qt override)
        """A tooltip of its own (shown under the full text when the text is elided)."""
        self._tip = tip or ""
        self._elide()

    def sizeHint(self) -> QSize:  # noqa: N802 (Qt override)
        fm = self.fontMetrics()
        return QSize(fm.horizontalAdvance(self._full) + 4, super().sizeHint().height())

    def minimumSizeHint(self) -> QSize:  # noqa: N802 (Qt override)
        fm = self.fontMetrics()
        return QSize(fm.horizontalAdvance("x" * MIN_CHARS + "…"), super().minimumSizeHint().height())

    def resizeEvent(self, event: QResizeEvent) -> None:  # noqa: N802 (Qt override)
        super().resizeEvent(event)
        self._elide()

    def _elide(self) -> None:
        shown = self.fontMetrics().elidedText(self._full, self._mode, max(self.width(), 1))
        super().setText(shown)
        elided = shown != self._full
        tip = "\n".join(t for t in (self._full if elided else "", self._tip) if t)
        QLabel.setToolTip(self, tip)
