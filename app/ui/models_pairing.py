"""The Models view's pairing panel: which local drafts pair with the chosen target, and why.

The checks run on the view's background pool (``app.checkpoints.pairing``); this panel shows
the ranked drafts, the no-draft options and the exclusions, and every finding of the one
selected.
"""

from __future__ import annotations

import html
from collections.abc import Callable
from types import SimpleNamespace
from typing import Any

from PySide6.QtCore import QObject, Qt, Signal
from PySide6.QtGui import QBrush, QColor
from PySide6.QtWidgets import (
    QHBoxLayout,
    QHeaderView,
    QLabel,
    QPushButton,
    QTextBrowser,
    QTreeWidget,
    QTreeWidgetItem,
    QVBoxLayout,
)

from app.ui.background import Background
from app.ui.settings import Settings
from app.ui.theme import Colors

ROLE_ENTRY = Qt.ItemDataRole.UserRole


class PairingPanel(QObject):
    """Owns the pairing widgets; ``add_to`` puts them into the view's column, where the tree
    and the details share the column's stretch with the table above them."""

    shown = Signal()  # suggestions shown
    selection_changed = Signal()
    use_selected = Signal()  # load the target with the selected draft (double-click, button)
    use_target_only = Signal()
    fetch_mtp = Signal()  # put back the prediction head a conversion dropped

    def __init__(self, bg: Background, settings: Settings, colors: Colors,
                 entry: Callable[[str | None], Any], parent: QObject | None = None):
        super().__init__(parent)
        self.bg = bg
        self.settings = settings
        self.colors = colors
        self._entry = entry  # store entry by name (the view's listing)
        self.suggestions: Any = None
        self.target: str | None = None  # the entry name the pairing is shown for
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
        self.pair_tree.header().resizeSection(0, 300)
        self.pair_tree.header().setStretchLastSection(True)
        self.pair_tree.itemSelectionChanged.connect(self._on_pair_selected)
        self.pair_tree.itemDoubleClicked.connect(lambda _i, _c: self.use_selected.emit())
        self.details = QTextBrowser()
        self.details.setObjectName("pairing_details")
        self.details.setMaximumHeight(150)
        self.details.setPlaceholderText("Select a draft or an excluded model to see every check.")
        self.load_btn = QPushButton("Load target + selected draft")
        self.load_btn.setProperty("role", "primary")
        self.load_btn.clicked.connect(lambda: self.use_selected.emit())
        self.load_target_btn = QPushButton("Load target only")
        self.load_target_btn.clicked.connect(lambda: self.use_target_only.emit())
        self.fetch_mtp_btn = QPushButton("Fetch MTP head…")
        self.fetch_mtp_btn.setToolTip("Download only the multi-token-prediction head this "
                                      "conversion dropped, from the model it was made from")
        self.fetch_mtp_btn.clicked.connect(lambda: self.fetch_mtp.emit())
        self.fetch_mtp_btn.setVisible(False)

    def add_to(self, column: QVBoxLayout) -> None:
        brow = QHBoxLayout()
        brow.addWidget(self.load_btn)
        brow.addWidget(self.load_target_btn)
        brow.addWidget(self.fetch_mtp_btn)
        brow.addStretch(1)
        column.addWidget(self.pair_title)
        column.addWidget(self.pair_hint)
        column.addWidget(self.pair_tree, 3)
        column.addWidget(self.details, 1)
        column.addLayout(brow)

    def apply_colors(self, c: Colors) -> None:
        self.colors = c
        if self.suggestions is not None:
            self.show_suggestions(self.suggestions)

    def update_buttons(self) -> None:
        target_ok = self.target is not None
        self.load_target_btn.setEnabled(target_ok)
        self.load_btn.setEnabled(target_ok and self.selected_draft() is not None)
        self.fetch_mtp_btn.setVisible(target_ok and self.mtp_dropped())

    def mtp_dropped(self) -> bool:
        """The selected option is the target's MTP head, which its conversion dropped."""
        data = self.selected()
        return bool(data and data[0] == "option" and "mtp.dropped" in data[1].report.codes())

    def show_not_a_target(self, e: Any) -> None:
        """A model that cannot be chatted with is selected: no list under its name (and none
        of the previous target's either, not even after a theme change)."""
        self.pair_title.setText("Pairing")
        if e.unsupported_reason:
            why = f"DraftPair cannot use {e.name}: {e.unsupported_reason}"
        else:
            why = (f"{e.name} is a {e.kind_label}. {e.kind_explain} Select a chat model above "
                   "to see the drafts that pair with it.")
        self.pair_hint.setText(why)
        self.suggestions = None
        self.pair_tree.clear()
        self.details.clear()
        self.target = None
        self.update_buttons()

    def show_pairing(self, entry: Any, entries: list[Any]) -> None:
        self.target = entry.name
        self.pair_title.setText(f"Drafts for {entry.name}")
        self.pair_hint.setText("Checking tokenizers, vocabularies, cache rollback and memory…")
        self.pair_tree.clear()
        # Store entries carry no tokenizer data (listing stays fast); with info=None the
        # pairing check reads each folder's tokenizer files itself.
        candidates: list[Any] = [SimpleNamespace(name=e.name, path=e.path, info=None)
                                 for e in entries]
        context = self.settings.context_length
        target_path = entry.path

        def work() -> Any:
            from app.checkpoints.pairing import suggest_drafts

            return suggest_drafts(target_path, entries=candidates, context=context)

        name = entry.name

        def done(s: Any) -> None:
            if self.target == name:
                self.show_suggestions(s)

        self.bg.run(work, done, lambda m: self.pair_hint.setText(f"Pairing check failed: {m}"))

    def show_suggestions(self, s: Any) -> None:
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
            good.addChild(_row(f"✔ {sug.name}", sug.reason, ("draft", sug), c.ok))
        if not s.ranked:
            it = QTreeWidgetItem(["–", "None found locally: see Excluded, or download a small model of the same family."])
            it.setFlags(it.flags() & ~Qt.ItemFlag.ItemIsSelectable)
            good.addChild(it)
        for sug in s.no_model_options:
            opts.addChild(_row(f"• {sug.name}", sug.reason, ("option", sug), None))
        for ex in s.excluded:
            bad.addChild(_row(f"✘ {ex.name}", ex.reason, ("excluded", ex), c.bad))
        self.pair_tree.expandAll()
        if keep_key is not None:  # a re-render (theme change) keeps the selection
            for top in (good, opts, bad):
                for j in range(top.childCount()):
                    child = top.child(j)
                    d = child.data(0, ROLE_ENTRY) if child is not None else None
                    if child is not None and d and (d[0], d[1].name) == keep_key:
                        self.pair_tree.setCurrentItem(child)
        self.pair_hint.setText(
            "Select a draft to see the full check; double-click to load the pair. "
            "Prompt lookup works with any target and needs no draft model."
        )
        self.selection_changed.emit()
        self.shown.emit()

    def excluded_reasons(self) -> dict[str, str]:
        if self.suggestions is None:
            return {}
        return {ex.name: ex.reason for ex in self.suggestions.excluded}

    def selected(self) -> tuple[str, Any] | None:
        """("draft" | "option" | "excluded", the suggestion or exclusion) under the cursor."""
        item = self.pair_tree.currentItem()
        data = item.data(0, ROLE_ENTRY) if item is not None else None
        return data or None

    def selected_draft(self) -> Any:
        data = self.selected()
        return data[1] if data and data[0] == "draft" else None

    def _on_pair_selected(self) -> None:
        self.selection_changed.emit()
        data = self.selected()
        if not data:
            self.details.clear()
            return
        what, obj = data
        if what in ("draft", "option"):
            self.details.setHtml(report_html(obj.report, self.colors))
            return
        target = self._entry(self.target)
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
            data = self.selected()
            if data and data[0] == "excluded" and data[1].name == name:
                self.details.setHtml(report_html(report, self.colors))

        def failed(message: str) -> None:
            self.details.append(f"The detailed check failed: {html.escape(message)}")

        self.bg.run(work, done, failed)


def _row(name: str, reason: str, data: tuple[str, Any], color: str | None) -> QTreeWidgetItem:
    """A selectable tree row: name (coloured), the one-sentence reason; ``data`` behind it."""
    it = QTreeWidgetItem([name, reason])
    if color is not None:
        it.setForeground(0, QBrush(QColor(color)))
        it.setToolTip(1, reason)
    it.setData(0, ROLE_ENTRY, data)
    return it


def report_html(report: Any, c: Colors) -> str:
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
