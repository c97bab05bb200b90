"""Compare's chooser for the compared side: this machine, or a remote endpoint by URL."""

from __future__ import annotations

from PySide6.QtCore import Signal
from PySide6.QtWidgets import QComboBox, QHBoxLayout, QLineEdit, QWidget

DEFAULT_URL = "http://127.0.0.1:8080"


class RemoteSide(QWidget):
    changed = Signal()

    def __init__(self, parent: QWidget | None = None):
        super().__init__(parent)
        self.combo = QComboBox()
        self.combo.setObjectName("compare_side")
        self.combo.addItem("This machine", "local")
        self.combo.addItem("Remote endpoint…", "remote")
        self.combo.setToolTip("Where the speculation-on side runs: the loaded pair here, or any "
                              "OpenAI-compatible server (draftpair serve, llama-server, vLLM, "
                              "LM Studio) with its own settings")
        self.url = QLineEdit(DEFAULT_URL)
        self.url.setObjectName("compare_remote_url")
        self.url.setPlaceholderText("http://host:port")
        self.url.setMinimumWidth(220)
        self.key = QLineEdit()
        self.key.setPlaceholderText("API key (optional)")
        self.key.setEchoMode(QLineEdit.EchoMode.Password)
        self.key.setMaximumWidth(160)
        row = QHBoxLayout(self)
        row.setContentsMargins(0, 0, 0, 0)
        row.addWidget(self.combo)
        row.addWidget(self.url, 1)
        row.addWidget(self.key)
        self.combo.currentIndexChanged.connect(self._on_change)
        self.url.textChanged.connect(lambda _t: self.changed.emit())
        self._on_change()

    def _on_change(self, *_args: object) -> None:
        self.url.setVisible(self.is_remote())
        self.key.setVisible(self.is_remote())
        self.changed.emit()

    def is_remote(self) -> bool:
        return self.combo.currentData() == "remote"

    def set_remote(self, url: str | None) -> None:
        """``None``: this machine; else the endpoint's URL."""
        if url is not None:
            self.url.setText(url)
        self.combo.setCurrentIndex(1 if url is not None else 0)

    def endpoint(self) -> str:
        return self.url.text().strip()

    def api_key(self) -> str | None:
        return self.key.text().strip() or None
