"""The Chat sidebar's draft section: pick how replies are drafted, where you chat; and the
chat bar's model line and chat-template note.

Lists, for the loaded target, the no-model kinds and only the draft checkpoints the pairing
check says work with it (each with its one-line reason; ``draft_picker``). The suggestions are
computed from files on a background pool whenever the target changes. Choosing a draft that
is not loaded asks for the pair to be loaded (``use_pair``); choosing a kind tells the chat bar
(``kind_chosen``).
"""

from __future__ import annotations

from typing import Any

from PySide6.QtCore import Signal
from PySide6.QtWidgets import QLabel, QVBoxLayout, QWidget

from app.ui.background import Background
from app.ui.draft_picker import DraftPicker, options_from, runs_draft_model, uses_draft_model
from app.ui.settings import Settings
from app.ui.worker import ModelState


def model_line(state: ModelState, kind: str) -> str:
    """The chat bar's model line: the target, plus the draft only while ``kind`` runs it."""
    if not state.target:
        return "No model loaded"
    draft = f" + draft {state.draft}" if state.draft and runs_draft_model(kind) else ""
    return f"{state.target}{draft}"


def template_note(state: ModelState) -> str:
    if not state.target:
        return ""
    if state.has_chat_template:
        return "Prompts use the model's own chat template."
    return (
        "This model has no chat template (a base model): chat falls back to plain completion, "
        "the turns joined as plain text."
    )


class DraftSection(QWidget):
    use_pair = Signal(str, str)  # target path, draft path to load
    kind_chosen = Signal(str)
    options_shown = Signal()  # suggestions listed (tests)

    def __init__(self, settings: Settings, parent: QWidget | None = None):
        super().__init__(parent)
        self.settings = settings
        self.bg = Background(self, max_threads=1)
        self.state = ModelState()
        self.suggestions: Any = None
        self._for: str | None = None
        self.store_of: Any = None  # () -> the app's checkpoint Store (None: the default one)
        title = QLabel("Draft")
        title.setProperty("role", "title")
        self.picker = DraftPicker()
        self.picker.chosen.connect(self._on_chosen)
        self.reason = QLabel("Load a model to see which drafts pair with it.")
        self.reason.setProperty("role", "muted")
        self.reason.setWordWrap(True)
        lay = QVBoxLayout(self)
        lay.setContentsMargins(0, 0, 0, 8)
        lay.addWidget(title)
        lay.addWidget(self.picker)
        lay.addWidget(self.reason)

    def on_model_state(self, state: ModelState) -> None:
        self.state = state
        if not state.target_path:
            self._for, self.suggestions = None, None
            self._show()
            return
        if state.target_path == self._for:
            self._show()  # same target: new kind reasons or another draft loaded
            return
        self._for = target = state.target_path
        context = self.settings.context_length
        store = self.store_of() if self.store_of is not None else None
        self.reason.setText("Checking which drafts pair with this model…")

        def work() -> Any:
            from app.checkpoints.pairing import suggest_drafts

            return suggest_drafts(target, store=store, context=context)

        def done(sugg: Any) -> None:
            if self._for == target:
                self.suggestions = sugg
                self._show()

        def failed(message: str) -> None:
            if self._for == target:
                self.suggestions = None
                self._show()
                self.reason.setText(f"Could not check the drafts: {message}")

        self.bg.run(work, done, failed)

    def _show(self) -> None:
        kinds = dict(self.state.kinds) if self.state.target else {}
        opts = options_from(self.suggestions, kinds) if self.state.target else []
        kind = self.settings.draft_kind
        if opts:
            self.picker.set_options(opts, kind=kind, path=self.state.draft_path or "",
                                    any_path=True)
        else:
            self.picker.set_options(self.picker.options[:1])
        self.reason.setText(self.picker.current().reason if self.state.target else
                            "Load a model to see which drafts pair with it.")  # fmt: skip
        self.options_shown.emit()

    def sync_kind(self, kind: str) -> None:
        """The kind was changed elsewhere (the chat bar): show it without re-emitting."""
        self.picker.blockSignals(True)
        self.picker.select(kind, self.state.draft_path or "", any_path=True)
        self.picker.blockSignals(False)
        self.picker.setToolTip(self.picker.current().reason)
        self.reason.setText(self.picker.current().reason)

    def _on_chosen(self, kind: str, path: str) -> None:
        self.reason.setText(self.picker.current().reason)
        if uses_draft_model(kind) and path and path != self.state.draft_path:
            self.use_pair.emit(self.state.target_path or "", path)
        self.kind_chosen.emit(kind)

    def shutdown(self) -> None:
        self.bg.shutdown()
