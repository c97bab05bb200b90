"""The Models view's Hub panel: search the Hugging Face Hub, pick a repo, follow a download.

Searching runs on the view's background pool; the download itself is driven by the view
(``ModelsView.download_selected``), which this panel only shows.
"""

from __future__ import annotations

import html
from typing import Any

from PySide6.QtCore import Qt, Signal
from PySide6.QtWidgets import (
    QFrame,
    QGridLayout,
    QHBoxLayout,
    QLabel,
    QLineEdit,
    QListWidget,
    QListWidgetItem,
    QProgressBar,
    QPushButton,
    QVBoxLayout,
    QWidget,
)

from app.ui.background import Background
from app.ui.format import format_bytes
from app.ui.widgets import Banner

ROLE_REPO = Qt.ItemDataRole.UserRole


def duration_text(s: float | None) -> str:
    if s is None or s != s or s < 0:
        return "–"
    s = int(s)
    if s >= 3600:
        return f"{s // 3600} h {s % 3600 // 60:02d} min"
    if s >= 60:
        return f"{s // 60} min {s % 60:02d} s"
    return f"{s} s"


class HubPanel(QWidget):
    download_requested = Signal()  # double-click on a result, or the Download button
    cancel_requested = Signal()
    resume_requested = Signal()

    def __init__(self, bg: Background, banner: Banner, parent: QWidget | None = None):
        super().__init__(parent)
        self.bg = bg
        self.banner = banner
        hub_title = QLabel("Download from the Hugging Face Hub")
        hub_title.setProperty("role", "title")
        self.search_edit = QLineEdit()
        self.search_edit.setPlaceholderText("Search MLX models, e.g. Qwen3 4bit")
        self.search_edit.returnPressed.connect(self.search)
        self.search_btn = QPushButton("Search")
        self.search_btn.clicked.connect(self.search)
        srow = QHBoxLayout()
        srow.addWidget(self.search_edit, 1)
        srow.addWidget(self.search_btn)
        self.results = QListWidget()
        self.results.setObjectName("hub_results")
        self.results.addItem("Search the Hub for MLX models, then pick one to download.")
        self.results.itemDoubleClicked.connect(lambda _i: self.download_requested.emit())
        self.repo_edit = QLineEdit()
        self.repo_edit.setPlaceholderText("or type a repo id: owner/name")
        self.results.currentItemChanged.connect(
            lambda cur, _p: self.repo_edit.setText(cur.data(ROLE_REPO))
            if cur is not None and cur.data(ROLE_REPO) else None
        )
        self.download_btn = QPushButton("Download")
        self.download_btn.setProperty("role", "primary")
        self.download_btn.clicked.connect(lambda: self.download_requested.emit())
        drow = QHBoxLayout()
        drow.addWidget(self.repo_edit, 1)
        drow.addWidget(self.download_btn)
        rv = QVBoxLayout(self)
        rv.setContentsMargins(0, 0, 0, 0)
        rv.addWidget(hub_title)
        rv.addLayout(srow)
        rv.addWidget(self.results, 1)
        rv.addLayout(drow)
        rv.addWidget(self._build_download_card())
        note = QLabel("Only safetensors weights and tokenizer/config files are downloaded — never "
                      "pickles or code. Files go to the Hugging Face cache, shared with other tools.")
        note.setProperty("role", "muted")
        note.setWordWrap(True)
        rv.addWidget(note)
        self.set_idle()

    def _build_download_card(self) -> QFrame:
        self.dl_frame = QFrame()
        self.dl_frame.setProperty("role", "card")
        dl = QGridLayout(self.dl_frame)
        dl.setContentsMargins(12, 10, 12, 10)
        self.dl_title = QLabel("No download running")
        self.dl_title.setWordWrap(True)
        self.dl_bar = QProgressBar()
        self.dl_bar.setRange(0, 1000)
        self.dl_bytes = QLabel("–")
        self.dl_rate = QLabel("–")
        self.dl_eta = QLabel("–")
        self.dl_file = QLabel("")
        self.dl_file.setProperty("role", "muted")
        self.dl_file.setWordWrap(True)
        self.cancel_btn = QPushButton("Cancel")
        self.cancel_btn.clicked.connect(lambda: self.cancel_requested.emit())
        self.resume_btn = QPushButton("Resume")
        self.resume_btn.setToolTip("Continue where it stopped: finished files are not fetched again")
        self.resume_btn.clicked.connect(lambda: self.resume_requested.emit())
        dl.addWidget(self.dl_title, 0, 0, 1, 4)
        dl.addWidget(self.dl_bar, 1, 0, 1, 4)
        for col, (name, lab) in enumerate((("Downloaded", self.dl_bytes), ("Speed", self.dl_rate),
                                           ("Time left", self.dl_eta))):
            cap = QLabel(name)
            cap.setProperty("role", "muted")
            dl.addWidget(cap, 2, col)
            dl.addWidget(lab, 3, col)
        dl.addWidget(self.dl_file, 4, 0, 1, 4)
        brow2 = QHBoxLayout()
        brow2.addStretch(1)
        brow2.addWidget(self.resume_btn)
        brow2.addWidget(self.cancel_btn)
        dl.addLayout(brow2, 5, 0, 1, 4)
        return self.dl_frame

    # -- search ----------------------------------------------------------------------------------
    def search(self) -> None:
        query = self.search_edit.text().strip()
        self.search_btn.setEnabled(False)
        self.results.clear()
        self.results.addItem("Searching…")

        def work() -> Any:
            from app.checkpoints.hub import search

            return search(query, limit=30)

        self.bg.run(work, self._on_results, self._on_search_failed)

    def _on_results(self, models: list[Any]) -> None:
        self.search_btn.setEnabled(True)
        self.results.clear()
        if not models:
            self.results.addItem("No MLX models found for this search.")
            return
        for m in models:
            extra = " · gated (needs a token)" if m.gated else ""
            dl = f"{m.downloads:,} downloads" if m.downloads is not None else ""
            item = QListWidgetItem(f"{m.repo_id}    {dl}{extra}")
            item.setData(ROLE_REPO, m.repo_id)
            self.results.addItem(item)

    def _on_search_failed(self, message: str) -> None:
        self.search_btn.setEnabled(True)
        self.results.clear()
        self.banner.show_message(f"Search failed: {message}", error=True)

    # -- the download card -------------------------------------------------------------------
    def show_started(self, repo: str) -> None:
        self.dl_title.setText(f"Downloading <b>{html.escape(repo)}</b>…")
        self.dl_bar.setValue(0)
        self.dl_bytes.setText("starting…")
        self.dl_rate.setText("–")
        self.dl_eta.setText("–")
        self.dl_file.setText("")
        self.cancel_btn.setEnabled(True)
        self.resume_btn.setEnabled(False)
        self.download_btn.setEnabled(False)

    def show_progress(self, p: Any) -> None:
        self.dl_bar.setValue(int(1000 * p.fraction))
        self.dl_bytes.setText(f"{format_bytes(p.done_bytes)} of {format_bytes(p.total_bytes)}")
        self.dl_rate.setText(f"{format_bytes(p.rate_bps)}/s" if p.rate_bps else "–")
        self.dl_eta.setText(duration_text(p.eta_s))
        self.dl_file.setText(
            f"File {min(p.files_done + 1, p.files_total)} of {p.files_total}: {p.current_file or ''}"
        )

    def show_done(self, repo: str) -> None:
        self.dl_bar.setValue(1000)
        self.dl_title.setText(f"<b>{html.escape(repo)}</b> is ready.")
        self.dl_eta.setText("done")
        self.set_idle(keep_text=True)

    def show_stopped(self, repo: str, message: str, *, cancelled: bool) -> None:
        self.dl_title.setText(
            f"{'Cancelled' if cancelled else 'Stopped'}: <b>{html.escape(repo)}</b>"
            + ("" if cancelled else f" — {html.escape(message)}")
        )
        self.dl_eta.setText("–")
        self.dl_rate.setText("–")
        self.set_idle(keep_text=True)
        self.resume_btn.setEnabled(True)

    def set_idle(self, keep_text: bool = False) -> None:
        self.cancel_btn.setEnabled(False)
        self.resume_btn.setEnabled(False)
        self.download_btn.setEnabled(True)
        if not keep_text:
            self.dl_title.setText("No download running")
