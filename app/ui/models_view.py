"""The Models view: local checkpoints, pairing for the chosen target, Hub search and download.

Everything here reads files or the network only (``app.checkpoints``), on a background pool;
loading weights is the engine worker's job (``use_pair`` -> MainWindow -> EngineClient.load).
"""

from __future__ import annotations

import html
import threading
import time
from types import SimpleNamespace
from typing import Any

from PySide6.QtCore import Qt, Signal
from PySide6.QtGui import QBrush, QColor
from PySide6.QtWidgets import (
    QAbstractItemView,
    QFileDialog,
    QFrame,
    QGridLayout,
    QHBoxLayout,
    QHeaderView,
    QLabel,
    QLineEdit,
    QListWidget,
    QListWidgetItem,
    QMessageBox,
    QProgressBar,
    QPushButton,
    QSplitter,
    QTableWidget,
    QTableWidgetItem,
    QTextBrowser,
    QTreeWidget,
    QTreeWidgetItem,
    QVBoxLayout,
    QWidget,
)

from app.ui.background import Background
from app.ui.format import format_bytes
from app.ui.settings import Settings
from app.ui.theme import LIGHT, Colors
from app.ui.widgets import Banner
from app.ui.worker import EngineClient, ModelState

COLUMNS = ("Name", "Kind", "Size", "Parameters", "Memory", "Source")
ROLE_ENTRY = Qt.ItemDataRole.UserRole


def _params(n: int | None) -> str:
    if not n:
        return "?"
    if n >= 1e9:
        return f"{n / 1e9:.1f} B"
    if n >= 1e6:
        return f"{n / 1e6:.0f} M"
    return f"{n / 1e3:.0f} K"


def _duration(s: float | None) -> str:
    if s is None or s != s or s < 0:
        return "–"
    s = int(s)
    if s >= 3600:
        return f"{s // 3600} h {s % 3600 // 60:02d} min"
    if s >= 60:
        return f"{s // 60} min {s % 60:02d} s"
    return f"{s} s"


class ModelsView(QWidget):
    use_pair = Signal(str, str)  # target, draft ("" = none)
    listed = Signal()  # store listing shown (tests)
    pairing_shown = Signal()  # suggestions shown (tests)
    download_finished = Signal(object)  # Path or error message

    def __init__(
        self,
        client: EngineClient,
        settings: Settings,
        banner: Banner,
        ctx: Any,
        parent: QWidget | None = None,
        *,
        colors: Colors = LIGHT,
    ):
        super().__init__(parent)
        self.client = client
        self.settings = settings
        self.banner = banner
        self.ctx = ctx
        self.colors = colors
        self.bg = Background(self)
        self.entries: list[Any] = []
        self.fits: dict[str, Any] = {}
        self.suggestions: Any = None
        self._pairing_for: str | None = None
        self._download_cancel: threading.Event | None = None
        self._download_repo: str | None = None
        self._last_progress_ui = 0.0
        self._build()
        self.refresh()

    def _store(self) -> Any:
        if self.ctx.checkpoint_store is None:
            from app.checkpoints.store import Store

            self.ctx.checkpoint_store = Store()
        return self.ctx.checkpoint_store

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
        row = QHBoxLayout()
        row.addWidget(refresh)
        row.addWidget(imp)
        row.addWidget(self.remove_btn)
        row.addStretch(1)
        row.addWidget(self.list_status)

        self.pair_title = QLabel("Pairing")
        self.pair_title.setProperty("role", "title")
        self.pair_hint = QLabel("Select a chat model above to see which drafts pair with it.")
        self.pair_hint.setProperty("role", "muted")
        self.pair_hint.setWordWrap(True)
        self.pair_tree = QTreeWidget()
        self.pair_tree.setObjectName("pairing_tree")
        self.pair_tree.setColumnCount(2)
        self.pair_tree.setHeaderLabels(["Draft", "Why"])
        self.pair_tree.setWordWrap(True)
        self.pair_tree.setUniformRowHeights(False)
        self.pair_tree.header().setSectionResizeMode(0, QHeaderView.ResizeMode.Interactive)
        self.pair_tree.header().resizeSection(0, 250)
        self.pair_tree.header().setStretchLastSection(True)
        self.pair_tree.itemSelectionChanged.connect(self._on_pair_selected)
        self.pair_tree.itemDoubleClicked.connect(lambda _i, _c: self._use_selected_pair())
        self.details = QTextBrowser()
        self.details.setObjectName("pairing_details")
        self.details.setMaximumHeight(150)
        self.details.setPlaceholderText("Select a draft or an excluded model to see every check.")
        self.load_btn = QPushButton("Load target + selected draft")
        self.load_btn.setProperty("role", "primary")
        self.load_btn.clicked.connect(self._use_selected_pair)
        self.load_target_btn = QPushButton("Load target only")
        self.load_target_btn.clicked.connect(self._use_target_only)
        brow = QHBoxLayout()
        brow.addWidget(self.load_btn)
        brow.addWidget(self.load_target_btn)
        brow.addStretch(1)

        left = QWidget()
        lv = QVBoxLayout(left)
        lv.setContentsMargins(0, 0, 0, 0)
        lv.addWidget(title)
        lv.addWidget(self.table, 3)
        lv.addLayout(row)
        lv.addSpacing(6)
        lv.addWidget(self.pair_title)
        lv.addWidget(self.pair_hint)
        lv.addWidget(self.pair_tree, 3)
        lv.addWidget(self.details, 1)
        lv.addLayout(brow)

        # Hub panel
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
        self.results.itemDoubleClicked.connect(lambda _i: self.download_selected())
        self.repo_edit = QLineEdit()
        self.repo_edit.setPlaceholderText("or type a repo id: owner/name")
        self.results.currentItemChanged.connect(
            lambda cur, _p: self.repo_edit.setText(cur.data(ROLE_ENTRY))
            if cur is not None and cur.data(ROLE_ENTRY) else None
        )
        self.download_btn = QPushButton("Download")
        self.download_btn.setProperty("role", "primary")
        self.download_btn.clicked.connect(lambda: self.download_selected())
        drow = QHBoxLayout()
        drow.addWidget(self.repo_edit, 1)
        drow.addWidget(self.download_btn)

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
        self.cancel_btn.clicked.connect(self.cancel_download)
        self.resume_btn = QPushButton("Resume")
        self.resume_btn.setToolTip("Continue where it stopped: finished files are not fetched again")
        self.resume_btn.clicked.connect(self.resume_download)
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
        note = QLabel("Only safetensors weights and tokenizer/config files are downloaded — never "
                      "pickles or code. Files go to the Hugging Face cache, shared with other tools.")
        note.setProperty("role", "muted")
        note.setWordWrap(True)

        right = QWidget()
        rv = QVBoxLayout(right)
        rv.setContentsMargins(0, 0, 0, 0)
        rv.addWidget(hub_title)
        rv.addLayout(srow)
        rv.addWidget(self.results, 1)
        rv.addLayout(drow)
        rv.addWidget(self.dl_frame)
        rv.addWidget(note)

        split = QSplitter(Qt.Orientation.Horizontal)
        split.addWidget(left)
        split.addWidget(right)
        split.setStretchFactor(0, 3)
        split.setStretchFactor(1, 2)
        split.setChildrenCollapsible(False)
        outer = QVBoxLayout(self)
        outer.setContentsMargins(10, 8, 10, 8)
        outer.addWidget(split)
        self._set_download_idle()
        self._update_buttons()

    def apply_colors(self, c: Colors) -> None:
        self.colors = c
        self._fill_table()
        if self.suggestions is not None:
            self._show_suggestions(self.suggestions)

    def on_model_state(self, state: ModelState) -> None:
        self._fill_table()

    # -- listing -----------------------------------------------------------------------------
    def refresh(self) -> None:
        self.list_status.setText("Reading local models…")
        store = self._store()
        context = self.settings.context_length

        def work() -> tuple[list[Any], dict[str, Any]]:
            from app.checkpoints.memory import estimate_memory, memory_budget

            entries = store.list()
            budget = memory_budget()
            fits = {}
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
        self.list_status.setText(f"{n} model{'s' if n != 1 else ''} · context {self.settings.context_length} tokens for memory estimates")
        self._fill_table()
        if self._pairing_for is None:
            current = self.settings.target or "demo"
            self.select_entry(current)
        self.listed.emit()

    def _on_list_failed(self, message: str) -> None:
        self.list_status.setText("")
        self.banner.show_message(f"Could not list local models: {message}", error=True)

    def _fill_table(self) -> None:
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
            cells = (name, kind, format_bytes(e.size_bytes), _params(e.param_count), badge,
                     e.source.replace("-", " "))
            for col, text in enumerate(cells):
                item = QTableWidgetItem(text)
                item.setData(ROLE_ENTRY, e.name)
                if col == 4:
                    item.setForeground(QBrush(QColor(color)))
                    item.setToolTip(tip)
                if col == 1 and e.unsupported_reason:
                    item.setForeground(QBrush(QColor(c.bad)))
                    item.setToolTip(e.unsupported_reason)
                if col == 0:
                    item.setToolTip(str(e.path))
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
        target_ok = self._pairing_for is not None
        self.load_target_btn.setEnabled(target_ok)
        draft = self._selected_draft()
        self.load_btn.setEnabled(target_ok and draft is not None)

    # -- pairing -----------------------------------------------------------------------------
    def _on_selected(self) -> None:
        name = self.selected_name()
        self._update_buttons()
        e = self._entry(name)
        if e is None:
            return
        if e.kind not in ("chat", "mtp-target"):
            self.pair_title.setText(f"Pairing: {e.name}")
            why = e.unsupported_reason or (
                "It is a draft/drafter checkpoint, not a chat model; choose a chat model as the "
                "target to see the drafts that pair with it."
            )
            self.pair_hint.setText(why)
            self.pair_tree.clear()
            self.details.clear()
            self._pairing_for = None
            self._update_buttons()
            return
        self.show_pairing(e)

    def show_pairing(self, entry: Any) -> None:
        self._pairing_for = entry.name
        self.pair_title.setText(f"Drafts for {entry.name}")
        self.pair_hint.setText("Checking tokenizers, vocabularies, cache rollback and memory…")
        self.pair_tree.clear()
        # Store entries carry no tokenizer data (listing stays fast); with info=None the
        # pairing check reads each folder's tokenizer files itself.
        entries = [SimpleNamespace(name=e.name, path=e.path, info=None) for e in self.entries]
        context = self.settings.context_length
        target_path = entry.path

        def work() -> Any:
            from app.checkpoints.pairing import suggest_drafts

            return suggest_drafts(target_path, entries=entries, context=context)

        name = entry.name

        def done(s: Any) -> None:
            if self._pairing_for == name:
                self._show_suggestions(s)

        self.bg.run(work, done, lambda m: self.pair_hint.setText(f"Pairing check failed: {m}"))

    def _show_suggestions(self, s: Any) -> None:
        self.suggestions = s
        c = self.colors
        cur = self.pair_tree.currentItem()
        keep = cur.data(0, ROLE_ENTRY) if cur is not None else None
        keep_key = (keep[0], keep[1].name) if keep else None
        self.pair_tree.clear()
        good = QTreeWidgetItem([f"Pairs with this target ({len(s.ranked)})", ""])
        opts = QTreeWidgetItem([f"No draft model needed ({len(s.no_model_options)})", ""])
        bad = QTreeWidgetItem([f"Excluded ({len(s.excluded)})", ""])
        for top in (good, opts, bad):
            f = top.font(0)
            f.setBold(True)
            top.setFont(0, f)
            top.setFlags(top.flags() & ~Qt.ItemFlag.ItemIsSelectable)
            self.pair_tree.addTopLevelItem(top)
        for sug in s.ranked:
            it = QTreeWidgetItem([f"✔ {sug.name}", sug.reason])
            it.setForeground(0, QBrush(QColor(c.ok)))
            it.setData(0, ROLE_ENTRY, ("draft", sug))
            it.setToolTip(1, sug.reason)
            good.addChild(it)
        if not s.ranked:
            it = QTreeWidgetItem(["–", "None found locally: see Excluded, or download a small model of the same family."])
            it.setFlags(it.flags() & ~Qt.ItemFlag.ItemIsSelectable)
            good.addChild(it)
        for sug in s.no_model_options:
            it = QTreeWidgetItem([f"• {sug.name}", sug.reason])
            it.setData(0, ROLE_ENTRY, ("option", sug))
            opts.addChild(it)
        for ex in s.excluded:
            it = QTreeWidgetItem([f"✘ {ex.name}", ex.reason])
            it.setForeground(0, QBrush(QColor(c.bad)))
            it.setData(0, ROLE_ENTRY, ("excluded", ex))
            it.setToolTip(1, ex.reason)
            bad.addChild(it)
        self.pair_tree.expandAll()
        if keep_key is not None:  # a re-render (theme change) keeps the selection
            for top in (good, opts, bad):
                for j in range(top.childCount()):
                    d = top.child(j).data(0, ROLE_ENTRY)
                    if d and (d[0], d[1].name) == keep_key:
                        self.pair_tree.setCurrentItem(top.child(j))
        self.pair_hint.setText(
            "Select a draft to see the full check; double-click to load the pair. "
            "Prompt lookup works with any target and needs no draft model."
        )
        self._update_buttons()
        self.pairing_shown.emit()

    def excluded_reasons(self) -> dict[str, str]:
        if self.suggestions is None:
            return {}
        return {ex.name: ex.reason for ex in self.suggestions.excluded}

    def _selected_draft(self) -> Any:
        item = self.pair_tree.currentItem()
        if item is None:
            return None
        data = item.data(0, ROLE_ENTRY)
        if data and data[0] == "draft":
            return data[1]
        return None

    def _on_pair_selected(self) -> None:
        self._update_buttons()
        item = self.pair_tree.currentItem()
        data = item.data(0, ROLE_ENTRY) if item else None
        if not data:
            self.details.clear()
            return
        what, obj = data
        if what in ("draft", "option"):
            self.details.setHtml(_report_html(obj.report, self.colors))
        else:
            target = self._entry(self._pairing_for)
            self.details.setHtml(f"<b>{html.escape(obj.name)}</b>: {html.escape(obj.reason)}"
                                 "<br><i>Checking the details…</i>")
            if target is None:
                return
            t_path = target.path
            path = obj.path
            context = self.settings.context_length

            def work() -> Any:
                from app.checkpoints.pairing import check

                return check(t_path, path, context=context)

            name = obj.name

            def done(report: Any) -> None:
                cur = self.pair_tree.currentItem()
                data = cur.data(0, ROLE_ENTRY) if cur is not None else None
                if data and data[0] == "excluded" and data[1].name == name:
                    self.details.setHtml(_report_html(report, self.colors))

            def failed(message: str) -> None:
                self.details.append(f"The detailed check failed: {html.escape(message)}")

            self.bg.run(work, done, failed)

    def _use_selected_pair(self) -> None:
        target = self._entry(self._pairing_for)
        if target is None:
            return
        draft = self._selected_draft()
        item = self.pair_tree.currentItem()
        data = item.data(0, ROLE_ENTRY) if item else None
        if draft is None and data and data[0] == "excluded":
            self.banner.show_message(f"{data[1].name} cannot draft for {target.name}: {data[1].reason}",
                                     error=True)
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
            self.banner.show_message(f"Imported {entry.name} ({entry.kind_label}).", timeout_ms=6000)
            self.refresh()

        self.bg.run(lambda: store.import_folder(path), done,
                    lambda m: self.banner.show_message(f"Import failed: {m}", error=True))

    def remove_selected(self, *, confirm: bool = True) -> None:
        e = self._entry(self.selected_name())
        if e is None:
            return
        if str(e.path) in {self.client.state.target_path, self.client.state.draft_path}:
            self.banner.show_message(f"{e.name} is loaded; load another model before removing it.",
                                     error=True)
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
            self._pairing_for = None
            self.refresh()

        self.bg.run(lambda: store.remove(e.name), done,
                    lambda m: self.banner.show_message(f"Could not remove {e.name}: {m}", error=True))

    # -- hub -------------------------------------------------------------------------------------
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
            item.setData(ROLE_ENTRY, m.repo_id)
            self.results.addItem(item)

    def _on_search_failed(self, message: str) -> None:
        self.search_btn.setEnabled(True)
        self.results.clear()
        self.banner.show_message(f"Search failed: {message}", error=True)

    def download_selected(self, repo_id: str | None = None) -> None:
        repo = (repo_id or self.repo_edit.text()).strip()
        if not repo or "/" not in repo:
            self.banner.show_message("Choose a search result or type a repo id like owner/name.",
                                     error=True)
            return
        if self._download_cancel is not None:
            self.banner.show_message("A download is already running.", error=True)
            return
        self._start_download(repo)

    def _start_download(self, repo: str) -> None:
        cancel = threading.Event()
        self._download_cancel = cancel
        self._download_repo = repo
        self.dl_title.setText(f"Downloading <b>{html.escape(repo)}</b>…")
        self.dl_bar.setValue(0)
        self.dl_bytes.setText("starting…")
        self.dl_rate.setText("–")
        self.dl_eta.setText("–")
        self.dl_file.setText("")
        self.cancel_btn.setEnabled(True)
        self.resume_btn.setEnabled(False)
        self.download_btn.setEnabled(False)

        def work(progress: Any) -> Any:
            from app.checkpoints.hub import download

            return download(repo, progress=progress, cancel=cancel)

        self.bg.run(work, self._on_downloaded, self._on_download_failed, self._on_progress)

    def _on_progress(self, p: Any) -> None:
        now = time.monotonic()
        if now - self._last_progress_ui < 0.1 and not p.finished:  # throttle bursts
            return
        self._last_progress_ui = now
        self.dl_bar.setValue(int(1000 * p.fraction))
        self.dl_bytes.setText(f"{format_bytes(p.done_bytes)} of {format_bytes(p.total_bytes)}")
        self.dl_rate.setText(f"{format_bytes(p.rate_bps)}/s" if p.rate_bps else "–")
        self.dl_eta.setText(_duration(p.eta_s))
        self.dl_file.setText(
            f"File {min(p.files_done + 1, p.files_total)} of {p.files_total}: {p.current_file or ''}"
        )

    def _on_downloaded(self, path: Any) -> None:
        repo = self._download_repo
        self._download_cancel = None
        self.dl_bar.setValue(1000)
        self.dl_title.setText(f"<b>{html.escape(repo or '')}</b> is ready.")
        self.dl_eta.setText("done")
        self._set_download_idle(keep_text=True)
        self.banner.show_message(f"Downloaded {repo}.", timeout_ms=6000)
        self.download_finished.emit(path)
        self.refresh()

    def _on_download_failed(self, message: str) -> None:
        cancelled = self._download_cancel is not None and self._download_cancel.is_set()
        self._download_cancel = None
        self.dl_title.setText(
            f"{'Cancelled' if cancelled else 'Stopped'}: <b>{html.escape(self._download_repo or '')}</b>"
            + ("" if cancelled else f" — {html.escape(message)}")
        )
        self.dl_eta.setText("–")
        self.dl_rate.setText("–")
        self._set_download_idle(keep_text=True)
        self.resume_btn.setEnabled(True)
        if not cancelled:
            self.banner.show_message(f"Download failed: {message} Press Resume to continue.",
                                     error=True)
        self.download_finished.emit(message)

    def cancel_download(self) -> None:
        if self._download_cancel is not None:
            self._download_cancel.set()
            self.dl_title.setText("Cancelling…")

    def resume_download(self) -> None:
        if self._download_repo and self._download_cancel is None:
            self._start_download(self._download_repo)

    def _set_download_idle(self, keep_text: bool = False) -> None:
        self.cancel_btn.setEnabled(False)
        self.resume_btn.setEnabled(False)
        self.download_btn.setEnabled(True)
        if not keep_text:
            self.dl_title.setText("No download running")

    def shutdown(self) -> None:
        if self._download_cancel is not None:
            self._download_cancel.set()
        self.bg.shutdown()


def _ref(entry: Any) -> str:
    """What the engine should load for a store entry (a folder path, or the demo aliases)."""
    if getattr(entry, "name", None) in ("demo", "demo-draft") and getattr(entry, "source", "") != "imported":
        return entry.name
    return str(entry.path)


def _report_html(report: Any, c: Colors) -> str:
    from app.checkpoints.pairing import VERDICT_LABELS

    color = {"works": c.ok, "works-with-warnings": c.warn}.get(report.verdict, c.bad)
    out = [f"<b style='color:{color}'>{VERDICT_LABELS.get(report.verdict, report.verdict)}</b>"
           f" — {html.escape(report.draft or report.kind)}"]
    sev_color = {"blocker": c.bad, "warning": c.warn, "note": c.muted}
    for f in report.findings:
        detail = f"<br><span style='color:{c.muted}; font-size:11px'>{html.escape(f.detail)}</span>" if f.detail else ""
        out.append(f"<span style='color:{sev_color.get(f.severity, c.muted)}'>{f.severity}</span>: "
                   f"{html.escape(f.message)}{detail}")
    return "<br>".join(out)
