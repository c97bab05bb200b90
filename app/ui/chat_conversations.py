"""The Chat view's left column: the list of conversations and its buttons."""

from __future__ import annotations

from PySide6.QtCore import Qt, Signal
from PySide6.QtWidgets import (
    QHBoxLayout,
    QLabel,
    QListWidget,
    QListWidgetItem,
    QPushButton,
    QVBoxLayout,
    QWidget,
)

from app.ui.chat_store import Conversation

ROLE_ID = Qt.ItemDataRole.UserRole


class ConversationsPanel(QWidget):
    selected = Signal(int)  # conversation id
    renamed = Signal(int, str)  # conversation id, new title
    new_requested = Signal()
    delete_requested = Signal()
    export_requested = Signal()

    def __init__(self, parent: QWidget | None = None):
        super().__init__(parent)
        self.conv_list = QListWidget()
        self.conv_list.setObjectName("conversations")
        self.conv_list.setHorizontalScrollBarPolicy(Qt.ScrollBarPolicy.ScrollBarAlwaysOff)
        self.conv_list.setTextElideMode(Qt.TextElideMode.ElideRight)
        self.conv_list.setUniformItemSizes(True)
        self.conv_list.itemSelectionChanged.connect(self._on_selected)
        self.conv_list.itemChanged.connect(self._on_renamed)
        new_btn = QPushButton("New chat")
        new_btn.clicked.connect(lambda: self.new_requested.emit())
        del_btn = QPushButton("Delete")
        del_btn.setProperty("role", "danger")
        del_btn.clicked.connect(lambda: self.delete_requested.emit())
        export_btn = QPushButton("Export Markdown…")
        export_btn.clicked.connect(lambda: self.export_requested.emit())
        lv = QVBoxLayout(self)
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
        self.setMinimumWidth(170)
        self.setMaximumWidth(260)

    def fill(self, convs: list[Conversation], select: int) -> None:
        """List ``convs`` and make ``select`` current (the first one if it is not listed)."""
        self.conv_list.blockSignals(True)
        self.conv_list.clear()
        for c in convs:
            item = QListWidgetItem(c.title)
            item.setData(ROLE_ID, c.id)
            item.setFlags(item.flags() | Qt.ItemFlag.ItemIsEditable)
            self.conv_list.addItem(item)
        self.conv_list.blockSignals(False)
        for i in range(self.conv_list.count()):
            if self.conv_list.item(i).data(ROLE_ID) == select:
                self.conv_list.setCurrentRow(i)
                break
        else:
            self.conv_list.setCurrentRow(0)

    def set_current_title(self, title: str) -> None:
        item = self.conv_list.currentItem()
        if item is not None:
            self.conv_list.blockSignals(True)
            item.setText(title)
            self.conv_list.blockSignals(False)

    def _on_selected(self) -> None:
        item = self.conv_list.currentItem()
        if item is not None:
            self.selected.emit(int(item.data(ROLE_ID)))

    def _on_renamed(self, item: QListWidgetItem) -> None:
        self.renamed.emit(int(item.data(ROLE_ID)), item.text().strip() or "Untitled")
