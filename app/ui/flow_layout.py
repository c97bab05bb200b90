"""A layout that places its items in a row and wraps them onto more rows when narrow
(Qt's Flow Layout example): a tool row that never asks for more width than its widest item."""

from __future__ import annotations

from PySide6.QtCore import QMargins, QPoint, QRect, QSize, Qt
from PySide6.QtWidgets import QLayout, QLayoutItem, QSizePolicy, QWidget


class FlowLayout(QLayout):
    def __init__(self, parent: QWidget | None = None, *, spacing: int = 6):
        super().__init__(parent)
        self._items: list[QLayoutItem] = []
        self._gap = spacing
        self.setContentsMargins(QMargins(0, 0, 0, 0))

    def addItem(self, item: QLayoutItem) -> None:  # noqa: N802 (Qt override)
        self._items.append(item)

    def add_stretch(self) -> None:
        """A break point that pushes the following items to the right end of their row."""
        from PySide6.QtWidgets import QSpacerItem

        self.addItem(QSpacerItem(0, 0, QSizePolicy.Policy.Expanding, QSizePolicy.Policy.Minimum))

    def count(self) -> int:
        return len(self._items)

    def itemAt(self, index: int) -> QLayoutItem | None:  # noqa: N802 (Qt override)
        return self._items[index] if 0 <= index < len(self._items) else None

    def takeAt(self, index: int) -> QLayoutItem | None:  # noqa: N802 (Qt override)
        return self._items.pop(index) if 0 <= index < len(self._items) else None

    def expandingDirections(self) -> Qt.Orientation:  # noqa: N802 (Qt override)
        return Qt.Orientation.Horizontal

    def hasHeightForWidth(self) -> bool:  # noqa: N802 (Qt override)
        return True

    def heightForWidth(self, width: int) -> int:  # noqa: N802 (Qt override)
        return self._place(QRect(0, 0, width, 0), move=False)

    def setGeometry(self, rect: QRect) -> None:  # noqa: N802 (Qt override)
        super().setGeometry(rect)
        self._place(rect, move=True)

    def sizeHint(self) -> QSize:  # noqa: N802 (Qt override)
        w = sum(i.sizeHint().width() for i in self._items) + self._gap * max(0, len(self._items) - 1)
        h = max((i.sizeHint().height() for i in self._items), default=0)
        m = self.contentsMargins()
        return QSize(w + m.left() + m.right(), h + m.top() + m.bottom())

    def minimumSize(self) -> QSize:  # noqa: N802 (Qt override)
        size = QSize()
        for item in self._items:
            size = size.expandedTo(item.minimumSize())
        m = self.contentsMargins()
        return size + QSize(m.left() + m.right(), m.top() + m.bottom())

    def _place(self, rect: QRect, *, move: bool) -> int:
        m = self.contentsMargins()
        area = rect.adjusted(m.left(), m.top(), -m.right(), -m.bottom())
        rows: list[list[tuple[QLayoutItem, QSize]]] = [[]]
        x = 0
        for item in self._items:
            widget = item.widget()
            if widget is not None and widget.isHidden():
                continue
            if item.spacerItem() is not None:
                rows[-1].append((item, QSize(0, 0)))
                continue
            # the widget's own hint: an elided label (ignored size policy) still wants its text
            hint = widget.sizeHint() if widget is not None else item.sizeHint()
            width = max(min(hint.width(), area.width()), item.minimumSize().width())
            if x and x + width > area.width():
                rows.append([])
                x = 0
            rows[-1].append((item, QSize(width, max(hint.height(), item.minimumSize().height()))))
            x += width + self._gap
        y = area.y()
        for row in rows:
            items = [(i, s) for i, s in row if i.spacerItem() is None]
            if not items:
                continue
            height = max(s.height() for _, s in items)
            if move:
                used = sum(s.width() for _, s in items) + self._gap * (len(items) - 1)
                free = max(0, area.width() - used)
                xx = area.x()
                for item, s in row:
                    if item.spacerItem() is not None:
                        xx += free  # the stretch takes the row's free width
                        continue
                    item.setGeometry(QRect(QPoint(xx, y + (height - s.height()) // 2), s))
                    xx += s.width() + self._gap
            y += height + self._gap
        return y - self._gap - rect.y() + m.bottom()
