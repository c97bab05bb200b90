"""The draft picker of the Chat settings (LM Studio's "Draft Model" dropdown, with reasons).

``DraftPicker`` lists only what works with the loaded target: the kinds with no draft folder
(off, and each one the pairing check offers for this target, e.g. prompt lookup, MTP when the
target has heads) and every draft checkpoint the pairing check ranked,
each with its one-line reason (shown under the name and as tooltip). Kinds the engine says
cannot run are listed disabled with their reason. Choosing emits ``chosen(kind, path)``
(path "" for no-model kinds). ``uses_draft_model(kind)`` tells the chat bar whether to show
the draft's name.

It is fed plain data (``DraftOption``), built by ``options_from(suggestions, kinds)`` from the
pairing check's suggestions (duck-typed: ``ranked`` / ``no_model_options`` items with ``name``,
``path``, ``kind``, ``reason``) and the engine's per-kind reasons.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from PySide6.QtCore import Qt, Signal
from PySide6.QtGui import QStandardItemModel
from PySide6.QtWidgets import QComboBox, QWidget

from app import kinds
from app.ui.format import KIND_LABELS

ROLE_OPTION = Qt.ItemDataRole.UserRole


def _norm(path: Any) -> str:
    from pathlib import Path

    return str(Path(path).expanduser().resolve()) if path else ""


def uses_draft_model(kind: str) -> bool:
    """Whether the kind runs a separate draft checkpoint (a draft folder)."""
    plugin = kinds.find(kind)
    return plugin is not None and plugin.needs_draft_folder


def runs_draft_model(kind: str) -> bool:
    """Whether the kind runs the loaded draft model itself (a causal LM of its own; a drafter
    network such as DFlash's is not shown as "the draft model")."""
    plugin = kinds.find(kind)
    return plugin is not None and plugin.draft_is_lm


def _off_option(reason: str) -> DraftOption:
    return DraftOption(kinds.OFF, "", KIND_LABELS[kinds.OFF], reason)


@dataclass(frozen=True)
class DraftOption:
    kind: str
    path: str  # "" for the no-model kinds
    title: str
    reason: str  # one line: why it is offered (or why it cannot run)
    enabled: bool = True


def options_from(suggestions: Any | None, reasons: dict[str, str | None]) -> list[DraftOption]:
    """Off + no-model kinds + ranked drafts; ``reasons``: the engine's per kind (None = can
    run)."""
    out = [_off_option(kinds.get(kinds.OFF).explanation)]
    # the kinds that need nothing from the target's files are always offered
    no_model = {p.name: p.explanation for p in kinds.drafting()
                if not p.needs_draft_folder and not p.needs_taps}
    for s in getattr(suggestions, "no_model_options", ()) or ():
        no_model[s.kind] = s.reason
    for kind, why in no_model.items():
        blocked = reasons.get(kind)
        out.append(DraftOption(kind, "", KIND_LABELS.get(kind, kind), blocked or why,
                               enabled=blocked is None))  # fmt: skip
    for s in getattr(suggestions, "ranked", ()) or ():
        plugin = kinds.find(s.kind)
        if plugin is None or not plugin.needs_draft_folder or s.path is None:
            continue
        # the catch-all folder kind's engine reason only says no draft is loaded yet, which
        # choosing this option does; the pairing check has judged the folder itself
        blocked = reasons.get(s.kind) if not plugin.folder_fallback else None
        label = f"{s.name} ({KIND_LABELS.get(s.kind, s.kind)})"
        out.append(DraftOption(s.kind, _norm(s.path), label, blocked or s.reason,
                               enabled=blocked is None))  # fmt: skip
    return out


class DraftPicker(QComboBox):
    chosen = Signal(str, str)  # kind, draft path ("" for no-model kinds)

    def __init__(self, parent: QWidget | None = None):
        super().__init__(parent)
        self.setObjectName("draft_picker")
        self.options: list[DraftOption] = []
        self._quiet = False
        self.currentIndexChanged.connect(self._on_index)
        self.set_options([_off_option("No model loaded.")])

    def set_options(
        self, options: list[DraftOption], *, kind: str = kinds.OFF, path: str = "",
        any_path: bool = False,
    ) -> None:
        """Replace the list, keeping (kind, path) selected when it is still offered."""
        self._quiet = True
        try:
            self.clear()
            self.options = list(options)
            model = self.model()
            assert isinstance(model, QStandardItemModel)
            for i, o in enumerate(self.options):
                text = o.title if o.enabled else f"{o.title} — unavailable"
                self.addItem(text, i)
                item = model.item(i)
                item.setToolTip(o.reason)
                item.setEnabled(o.enabled)
                self.setItemData(
                    i, f"{text}\n{o.reason}", Qt.ItemDataRole.AccessibleDescriptionRole
                )
            self.select(kind, path, any_path=any_path)
        finally:
            self._quiet = False
        self._sync_tooltip()

    def select(self, kind: str, path: str = "", *, any_path: bool = False) -> bool:
        """Select (kind, path); with ``any_path``, a kind whose drafter is not the loaded
        draft (e.g. the demo's built-in DFlash drafter beside its draft model) shows its
        first offered drafter instead of falling back to Off."""
        path = _norm(path)
        usable = [(i, o) for i, o in enumerate(self.options) if o.kind == kind and o.enabled]
        exact = [i for i, o in usable if not uses_draft_model(kind) or o.path == path]
        pick = exact or ([i for i, _ in usable] if any_path else [])
        self.setCurrentIndex(pick[0] if pick else 0)
        return bool(pick)

    def current(self) -> DraftOption:
        i = self.currentIndex()
        return self.options[i] if 0 <= i < len(self.options) else self.options[0]

    def _on_index(self, _i: int) -> None:
        self._sync_tooltip()
        if not self._quiet:
            o = self.current()
            self.chosen.emit(o.kind, o.path)

    def _sync_tooltip(self) -> None:
        if self.options:
            self.setToolTip(self.current().reason)
