"""Small shared widgets: the non-modal message banner, the speculation chooser."""

from __future__ import annotations

from collections.abc import Callable

from PySide6.QtCore import Qt, QTimer, Signal
from PySide6.QtGui import QStandardItemModel
from PySide6.QtWidgets import (
    QComboBox,
    QFrame,
    QHBoxLayout,
    QLabel,
    QSplitter,
    QToolButton,
    QVBoxLayout,
    QWidget,
)

from app import kinds as draft_kinds
from app.ui.format import KIND_LABELS, kind_tooltip


class Banner(QFrame):
    """Non-modal messages stacked at the top of a window; each closes by itself or by click."""

    def __init__(self, parent: QWidget | None = None):
        super().__init__(parent)
        self._layout = QVBoxLayout(self)
        self._layout.setContentsMargins(8, 4, 8, 0)
        self._layout.setSpacing(4)
        self.messages: list[str] = []  # everything shown, for tests and the log
        self.hide()

    def show_message(self, text: str, *, error: bool = False, timeout_ms: int = 0) -> QFrame:
        self.messages.append(text)
        box = QFrame(self)
        box.setProperty("role", "banner-error" if error else "banner-info")
        row = QHBoxLayout(box)
        row.setContentsMargins(10, 6, 6, 6)
        label = QLabel(("⚠  " if error else "ℹ  ") + text)
        label.setWordWrap(True)
        label.setTextInteractionFlags(Qt.TextInteractionFlag.TextSelectableByMouse)
        close = QToolButton()
        close.setText("✕")
        close.setAutoRaise(True)
        close.setToolTip("Dismiss")
        close.clicked.connect(lambda: self._remove(box))
        row.addWidget(label, 1)
        row.addWidget(close, 0, Qt.AlignmentFlag.AlignTop)
        # keep at most 3 messages on screen
        while self._layout.count() >= 3:
            self._remove_first()
        self._layout.addWidget(box)
        self.show()
        if timeout_ms:
            QTimer.singleShot(timeout_ms, box, lambda: self._remove(box))
        return box

    def _remove(self, box: QWidget) -> None:
        self._layout.removeWidget(box)
        box.hide()
        box.deleteLater()
        if self._layout.count() == 0:
            self.hide()

    def _remove_first(self) -> None:
        item = self._layout.itemAt(0)
        widget = item.widget() if item is not None else None
        if widget is None:  # not one of our message boxes: drop the item itself
            self._layout.takeAt(0)
            return
        self._remove(widget)

    def clear(self) -> None:
        while self._layout.count():
            self._remove_first()

    def dismiss(self, box: QWidget) -> None:
        """Take one message away (nothing happens when it is already gone)."""
        from shiboken6 import isValid

        if isValid(box) and self._layout.indexOf(box) >= 0:
            self._remove(box)


class SpecCombo(QComboBox):
    """Every registered draft kind by its label (Off first); unavailable kinds disabled with
    why, each kind's plain explanation as its tooltip."""

    kind_changed = Signal(str)

    def __init__(self, parent: QWidget | None = None, *, include_off: bool = True):
        super().__init__(parent)
        for plugin in draft_kinds.plugins():
            if plugin.proposes or include_off:
                self.addItem(plugin.label, plugin.name)
                self.setItemData(self.count() - 1, kind_tooltip(plugin.name),
                                 Qt.ItemDataRole.ToolTipRole)
        self.currentIndexChanged.connect(lambda _i: self.kind_changed.emit(self.kind()))
        self._reasons: dict[str, str | None] = {}

    def kind(self) -> str:
        return str(self.currentData())

    def set_kind(self, kind: str) -> None:
        i = self.findData(kind)
        if i >= 0:
            self.setCurrentIndex(i)

    def set_reasons(self, reasons: dict[str, str | None]) -> None:
        """kind -> None when it can run, else a plain reason (shown as tooltip, item disabled)."""
        self._reasons = dict(reasons)
        model = self.model()
        assert isinstance(model, QStandardItemModel)
        for i in range(self.count()):
            kind = self.itemData(i)
            item = model.item(i)
            reason = reasons.get(kind) if not draft_kinds.is_off(kind) else None
            item.setEnabled(reason is None)
            label = KIND_LABELS[kind]
            item.setText(label if reason is None else f"{label} — unavailable")
            why = reason[0].upper() + reason[1:] + "." if reason else ""
            item.setToolTip(f"{why}\n{kind_tooltip(kind)}" if why else kind_tooltip(kind))
        self.setToolTip(self.reason_text())

    def reason_text(self) -> str:
        reason = self._reasons.get(self.kind())
        if reason and not draft_kinds.is_off(self.kind()):
            return f"{KIND_LABELS[self.kind()]} cannot run: {reason.rstrip('.')}."
        return (f"How the reply is sped up. {_explain(self.kind())}\n"
                "Unavailable choices say why in their tooltip.")

    def unavailable_reason(self) -> str | None:
        return self._reasons.get(self.kind()) if not draft_kinds.is_off(self.kind()) else None


def _explain(kind: str) -> str:
    plugin = draft_kinds.find(kind)
    return plugin.explanation if plugin is not None else ""


def add_shortcut(parent: QWidget, key: str | Qt.Key, slot: Callable[[], object]) -> None:
    """A shortcut active while focus is anywhere inside ``parent``."""
    from PySide6.QtGui import QKeySequence, QShortcut

    sc = QShortcut(QKeySequence(key), parent)
    sc.setContext(Qt.ShortcutContext.WidgetWithChildrenShortcut)
    sc.activated.connect(slot)


def splitter(orientation: Qt.Orientation, *panes: tuple[QWidget, int],
             sizes: list[int] | None = None) -> QSplitter:
    """Panes side by side that never collapse; each pane is (widget, stretch factor)."""
    split = QSplitter(orientation)
    for i, (widget, stretch) in enumerate(panes):
        split.addWidget(widget)
        if stretch:
            split.setStretchFactor(i, stretch)
    split.setChildrenCollapsible(False)
    if sizes:
        split.setSizes(sizes)
    return split
