"""The Models view: local checkpoints, pairing for the chosen target, Hub search and download.

Everything here reads files or the network only (``app.checkpoints``), on a background pool;
loading weights is the engine worker's job (``use_pair`` -> MainWindow -> EngineClient.load).
Its panels live beside it: ``models_pairing`` (the drafts for the selected target) and
``models_hub`` (search and the download card).
"""

from __future__ import annotations

import threading
import time
from pathlib import Path
from typing import Any

from PySide6.QtCore import Qt, Signal
from PySide6.QtGui import QBrush, QColor
from PySide6.QtWidgets import (
    QAbstractItemView,
    QFileDialog,
    QHBoxLayout,
    QHeaderView,
    QInputDialog,
    QLabel,
    QMessageBox,
    QPushButton,
    QTableWidget,
    QTableWidgetItem,
    QVBoxLayout,
    QWidget,
)

from app.ui.background import Background
from app.ui.format import format_bytes, format_params
from app.ui.gguf_panel import FoundModelsPanel, is_gguf_drop
from app.ui.models_hub import HubPanel
from app.ui.models_pairing import PairingPanel
from app.ui.theme import Colors
from app.ui.view_deps import View, ViewDeps
from app.ui.widgets import splitter
from app.ui.worker import ModelState

COLUMNS = ("Name", "Kind", "Size", "Parameters", "Memory", "Source")
ROLE_ENTRY = Qt.ItemDataRole.UserRole


class ModelsView(View):
    use_pair = Signal(str, str)  # target, draft ("" = none)
    listed = Signal()  # store listing shown (tests)
    pairing_shown = Signal()  # suggestions shown (tests)
    download_finished = Signal(object)  # Path or error message

    def __init__(self, deps: ViewDeps, ctx: Any, parent: QWidget | None = None):
        super().__init__(deps, parent)
        self.ctx = ctx
        self.bg = Background(self)
        self.entries: list[Any] = []
        self.fits: dict[str, Any] = {}
        self._download_cancel: threading.Event | None = None
        self._download_repo: str | None = None
        self._download_mtp_for: Path | None = None  # a target whose MTP head is being fetched
        self._last_progress_ui = 0.0
        self._just_imported: str | None = None
        self._build()
        self.refresh()

    def _store(self) -> Any:
        if self.ctx.checkpoint_store is None:
            from app.checkpoints.store import Store

            self.ctx.checkpoint_store = Store()
        return self.ctx.checkpoint_store

    @property
    def suggestions(self) -> Any:
        return self.pairing.suggestions

    @property
    def _pairing_for(self) -> str | None:
        return self.pairing.target

    # -- layout ------------------------------------------------------------------------------
    def _build(self) -> None:
        title = QLabel("Local models")
        title.setProperty("role", "title")
        self.table = QTableWidget(0, len(COLUMNS))
        self.table.setObjectName("models_table")
        self.table.setHorizontalHeaderLabels(COLUMNS)
        self.table.setSelectionBehavior(QAbstractItemView.SelectionBehavior.SelectRows)
        self.table.setSelectionMode(QAbstractItemView.SelectionMode.SingleSelection)
        self.table.setEditTriggers(QAbstractItemView.EditTrigger.NoEditTriggers)
        self.table.verticalHeader().hide()
        self.table.setAlternatingRowColors(True)
        self.table.setShowGrid(False)
        hdr = self.table.horizontalHeader()
        hdr.setSectionResizeMode(0, QHeaderView.ResizeMode.Stretch)
        for i in range(1, len(COLUMNS)):
            hdr.setSectionResizeMode(i, QHeaderView.ResizeMode.ResizeToContents)
        self.table.itemSelectionChanged.connect(self._on_selected)
        self.table.itemDoubleClicked.connect(lambda _i: self._use_selected_pair())
        refresh = QPushButton("Refresh")
        refresh.clicked.connect(self.refresh)
        imp = QPushButton("Import folder…")
        imp.clicked.connect(lambda: self.import_folder())
        self.remove_btn = QPushButton("Remove…")
        self.remove_btn.setProperty("role", "danger")
        self.remove_btn.clicked.connect(lambda: self.remove_selected())
        self.list_status = QLabel("")
        self.list_status.setProperty("role", "muted")
        self.list_status.setWordWrap(True)  # never what sets the view's width
        self.list_status.setAlignment(Qt.AlignmentFlag.AlignRight | Qt.AlignmentFlag.AlignVCenter)
        row = QHBoxLayout()
        row.addWidget(refresh)
        row.addWidget(imp)
        row.addWidget(self.remove_btn)
        row.addWidget(self.list_status, 1)

        self.pairing = PairingPanel(self.bg, self.settings, self.colors, self._entry, self)
        self.pairing.shown.connect(self.pairing_shown.emit)
        self.pairing.selection_changed.connect(self._update_buttons)
        self.pairing.use_selected.connect(self._use_selected_pair)
        self.pairing.use_target_only.connect(self._use_target_only)
        self.pairing.fetch_mtp.connect(lambda: self.fetch_mtp_head())
        self.pair_tree = self.pairing.pair_tree
        self.details = self.pairing.details
        self.load_btn, self.load_target_btn = self.pairing.load_btn, self.pairing.load_target_btn

        left = QWidget()
        lv = QVBoxLayout(left)
        lv.setContentsMargins(0, 0, 0, 0)
        lv.addWidget(title)
        lv.addWidget(self.table, 3)
        lv.addLayout(row)
        lv.addSpacing(6)
        self.pairing.add_to(lv)

        self.hub = right = HubPanel(self.bg, self.banner)
        right.download_requested.connect(lambda: self.download_selected())
        right.cancel_requested.connect(self.cancel_download)
        right.resume_requested.connect(self.resume_download)
        self.repo_edit, self.search_edit = right.repo_edit, right.search_edit
        self.cancel_btn, self.resume_btn = right.cancel_btn, right.resume_btn
        self.dl_title, self.dl_bar, self.dl_bytes = right.dl_title, right.dl_bar, right.dl_bytes
        self.found = FoundModelsPanel(self.bg)  # GGUFs from LM Studio, Ollama, llama.cpp, HF
        self.found.models_dir_of = lambda: self._store().models_dir
        self.found.imported.connect(self._on_gguf_imported)
        self.found.import_failed.connect(lambda m: self.show_error(m))
        side = splitter(Qt.Orientation.Vertical, (self.found, 2), (right, 3))
        self.setAcceptDrops(True)  # a .gguf dropped anywhere on the view is imported

        self.body_layout().addWidget(splitter(Qt.Orientation.Horizontal, (left, 3), (side, 2)))
        self._update_buttons()

    def apply_colors(self, c: Colors) -> None:
        self.colors = c
        self._fill_table()
        self.pairing.apply_colors(c)

    def on_model_state(self, state: ModelState) -> None:
        self._fill_table()

    # -- listing -----------------------------------------------------------------------------
    def refresh(self) -> None:
        self.list_status.setText("Reading local models…")
        store = self._store()
        context = self.settings.context_length

        def work() -> tuple[list[Any], dict[str, Any]]:
            from app.checkpoints.memory_estimate import estimate_memory, memory_budget

            entries = store.list()
            budget = memory_budget()
            fits: dict[str, Any] = {}  # name -> MemoryEstimate, None for an odd config
            for e in entries:
                try:
                    fits[e.name] = estimate_memory(e.info, context=context, budget=budget)
                except Exception:  # an odd config: no badge rather than no list
                    fits[e.name] = None
            return entries, fits

        self.bg.run(work, self._on_listed, self._on_list_failed)

    def _on_listed(self, result: tuple[list[Any], dict[str, Any]]) -> None:
        self.entries, self.fits = result
        n = len(self.entries)
        self.list_status.setText(f"{n} model{'s' if n != 1 else ''} · memory for "
                                 f"{self.settings.context_length:,} tokens of context")
        self._fill_table()
        if self._pairing_for is None:
            current = self.settings.target or "demo"
            self.select_entry(current)
        if self._just_imported:
            self.select_entry(self._just_imported)
            self._just_imported = None
        self.found.refresh(self.entries)  # marks what is already imported
        self.listed.emit()

    def _on_gguf_imported(self, name: str) -> None:
        self.clear_errors()  # an earlier failed import is no longer the news
        self.banner.show_message(f"Imported {name}; it is listed under Local models.", timeout_ms=6000)
        self._just_imported = name
        self.refresh()

    def dragEnterEvent(self, event: Any) -> None:  # noqa: N802 (Qt override)
        if is_gguf_drop(event) and self.found.proc is None:
            event.acceptProposedAction()

    def dropEvent(self, event: Any) -> None:  # noqa: N802 (Qt override)
        self.found.dropEvent(event)

    def _on_list_failed(self, message: str) -> None:
        self.list_status.setText("")
        self.show_error(f"Could not list local models: {message}")

    def _fill_table(self) -> None:
        from app.checkpoints.gguf_import import converted_from

        c = self.colors
        selected = self.selected_name()
        loaded = {self.client.state.target_path, self.client.state.draft_path}
        self.table.blockSignals(True)
        self.table.setRowCount(len(self.entries))
        for r, e in enumerate(self.entries):
            est = self.fits.get(e.name)
            name = e.name + ("   ● loaded" if str(e.path) in loaded else "")
            if est is None:
                badge, tip, color = "?", "No estimate (config incomplete).", c.muted
            elif est.fits:
                badge, color = "✔ fits", c.ok
                tip = "\n".join(est.lines())
            else:
                badge, color = "✘ too big", c.bad
                tip = "\n".join(est.lines())
            kind = e.kind_label if not e.unsupported_reason else "unsupported"
            origin = converted_from(e.path)  # a GGUF import says where its file was found
            source = f"GGUF · {origin.get('found_in') or 'file'}" if origin else e.source
            cells = (name, kind, format_bytes(e.size_bytes), format_params(e.param_count), badge,
                     source.replace("-", " "))
            for col, text in enumerate(cells):
                item = QTableWidgetItem(text)
                item.setData(ROLE_ENTRY, e.name)
                if col == 4:
                    item.setForeground(QBrush(QColor(color)))
                    item.setToolTip(tip)
                if col == 1 and e.unsupported_reason:
                    item.setForeground(QBrush(QColor(c.bad)))
                    item.setToolTip(e.unsupported_reason)
                elif col == 1:
                    item.setToolTip(f"{e.kind_explain}\n(kind: {e.kind})")
                if col == 0:
                    item.setToolTip(str(e.path))
                if col == 5 and origin:
                    item.setToolTip("Converted from " + ", ".join(origin.get("source_files", [])))
                self.table.setItem(r, col, item)
        self.table.blockSignals(False)
        if selected:
            self.select_entry(selected, show=False)
        self._update_buttons()

    def selected_name(self) -> str | None:
        rows = self.table.selectionModel().selectedRows() if self.table.selectionModel() else []
        if not rows:
            return None
        item = self.table.item(rows[0].row(), 0)
        return item.data(ROLE_ENTRY) if item else None

    def _entry(self, name: str | None) -> Any:
        return next((e for e in self.entries if e.name == name), None)

    def select_entry(self, name: str, *, show: bool = True) -> bool:
        for r in range(self.table.rowCount()):
            item = self.table.item(r, 0)
            if item is not None and item.data(ROLE_ENTRY) == name:
                if not show:
                    self.table.blockSignals(True)
                self.table.selectRow(r)
                self.table.blockSignals(False)
                return True
        return False

    def _update_buttons(self) -> None:
        e = self._entry(self.selected_name())
        self.remove_btn.setEnabled(e is not None and e.source != "built-in")
        self.pairing.update_buttons()

    # -- pairing -----------------------------------------------------------------------------
    def _on_selected(self) -> None:
        self._update_buttons()
        e = self._entry(self.selected_name())
        if e is None:
            return
        from app.checkpoints.inspect import TARGET_KINDS

        if e.kind not in TARGET_KINDS:
            self.pairing.show_not_a_target(e)
            return
        self.show_pairing(e)

    def show_pairing(self, entry: Any) -> None:
        self.pairing.show_pairing(entry, self.entries)

    def excluded_reasons(self) -> dict[str, str]:
        return self.pairing.excluded_reasons()

    def _use_selected_pair(self) -> None:
        target = self._entry(self._pairing_for)
        if target is None:
            return
        draft = self.pairing.selected_draft()
        data = self.pairing.selected()
        if draft is None and data and data[0] == "excluded":
            self.show_error(f"{data[1].name} cannot draft for {target.name}: {data[1].reason}")
            return
        self.use_pair.emit(_ref(target), _ref(draft) if draft is not None else "")

    def _use_target_only(self) -> None:
        target = self._entry(self._pairing_for)
        if target is not None:
            self.use_pair.emit(_ref(target), "")

    # -- import / remove -------------------------------------------------------------------------
    def import_folder(self, path: str | None = None) -> None:
        if path is None:
            path = QFileDialog.getExistingDirectory(self, "Import a model folder")
            if not path:
                return
        store = self._store()

        def done(entry: Any) -> None:
            self.clear_errors()
            self.banner.show_message(f"Imported {entry.name} ({entry.kind_label}).", timeout_ms=6000)
            self.refresh()

        from app.checkpoints.pairing.load_check import refuse_unloadable

        self.bg.run(lambda: store.import_folder(path, check=refuse_unloadable), done,
                    lambda m: self.show_error(f"Import failed: {m}"))

    def remove_selected(self, *, confirm: bool = True) -> None:
        e = self._entry(self.selected_name())
        if e is None:
            return
        if str(e.path) in {self.client.state.target_path, self.client.state.draft_path}:
            self.show_error(f"{e.name} is loaded; load another model before removing it.")
            return
        if confirm:
            what = (
                f"Forget {e.name}? The folder {e.path} stays on disk."
                if e.source == "imported"
                else f"Delete {e.name} and its files ({format_bytes(e.size_bytes)})?"
            )
            box = QMessageBox(QMessageBox.Icon.Question, "Remove model", what,
                              QMessageBox.StandardButton.Yes | QMessageBox.StandardButton.Cancel, self)
            if box.exec() != QMessageBox.StandardButton.Yes:
                return
        store = self._store()

        def done(res: Any) -> None:
            self.banner.show_message(res.message, timeout_ms=6000)
            self.pairing.target = None
            self.refresh()

        self.bg.run(lambda: store.remove(e.name), done,
                    lambda m: self.show_error(f"Could not remove {e.name}: {m}"))

    # -- hub -------------------------------------------------------------------------------------
    def search(self) -> None:
        self.hub.search()

    def download_selected(self, repo_id: str | None = None) -> None:
        repo = (repo_id or self.repo_edit.text()).strip()
        if not repo or "/" not in repo:
            self.show_error("Choose a search result or type a repo id like owner/name.")
            return
        if self._download_cancel is not None:
            self.show_error("A download is already running.")
            return
        self._start_download(repo)

    def fetch_mtp_head(self) -> None:
        """Put back the pairing target's MTP head: only its bytes, from the source model."""
        target = self._entry(self._pairing_for)
        if target is None:
            return
        if self._download_cancel is not None:
            self.show_error("A download is already running.")
            return
        from app.checkpoints.mtp_source import base_model

        repo = base_model(Path(target.path))
        if not repo:
            repo, ok = QInputDialog.getText(
                self, "Fetch MTP head",
                f"{target.name} does not say which model it was converted from.\n"
                "Source repository on the Hugging Face Hub (owner/name):")
            repo = repo.strip() if ok else ""
            if "/" not in repo:
                return
        self._start_download(repo, mtp_for=Path(target.path))

    def _start_download(self, repo: str, mtp_for: Path | None = None) -> None:
        cancel = threading.Event()
        self._download_cancel = cancel
        self._download_repo = repo
        self._download_mtp_for = mtp_for
        self.hub.show_started(self._download_label())

        def work(progress: Any) -> Any:
            if mtp_for is not None:
                from app.checkpoints.mtp_source import fetch

                return fetch(repo, mtp_for, progress=progress, cancel=cancel)
            from app.checkpoints.hub import download

            return download(repo, progress=progress, cancel=cancel)

        self.bg.run(work, self._on_downloaded, self._on_download_failed, self._on_progress)

    def _on_progress(self, p: Any) -> None:
        now = time.monotonic()
        if now - self._last_progress_ui < 0.1 and not p.finished:  # throttle bursts
            return
        self._last_progress_ui = now
        self.hub.show_progress(p)

    def _on_downloaded(self, path: Any) -> None:
        repo = self._download_repo
        self._download_cancel = None
        self.hub.show_done(self._download_label())
        if self._download_mtp_for is not None:
            self.banner.show_message(f"Fetched the MTP head of {repo} into {path}.",
                                     timeout_ms=6000)
            target = self._entry(self._pairing_for)
            if target is not None:
                self.show_pairing(target)
            self.download_finished.emit(path)
            return
        self.banner.show_message(f"Downloaded {repo}.", timeout_ms=6000)
        self.download_finished.emit(path)
        self.refresh()

    def _on_download_failed(self, message: str) -> None:
        cancelled = self._download_cancel is not None and self._download_cancel.is_set()
        self._download_cancel = None
        self.hub.show_stopped(self._download_label(), message, cancelled=cancelled)
        if not cancelled:
            self.show_error(f"Download failed: {message} Press Resume to continue.")
        self.download_finished.emit(message)

    def cancel_download(self) -> None:
        if self._download_cancel is not None:
            self._download_cancel.set()
            self.dl_title.setText("Cancelling…")

    def _download_label(self) -> str:
        repo = self._download_repo or ""
        return f"the MTP head of {repo}" if self._download_mtp_for is not None else repo

    def resume_download(self) -> None:
        if self._download_repo and self._download_cancel is None:
            self._start_download(self._download_repo, self._download_mtp_for)

    def shutdown(self) -> None:
        if self._download_cancel is not None:
            self._download_cancel.set()
        self.found.shutdown()
        self.bg.shutdown()


def _ref(entry: Any) -> str:
    """What the engine should load for a store entry (a folder path, or the demo aliases)."""
    if getattr(entry, "name", None) in ("demo", "demo-draft") and getattr(entry, "source", "") != "imported":
        return entry.name
    return str(entry.path)
