"""What every view is built with: the engine client, the settings, the banner, the colours.

Built once by the main window and passed in, so each view's constructor says only what is
particular to it.
"""

from __future__ import annotations

from dataclasses import dataclass

from PySide6.QtGui import QHideEvent
from PySide6.QtWidgets import QVBoxLayout, QWidget

from app.ui.settings import Settings
from app.ui.theme import Colors
from app.ui.widgets import Banner
from app.ui.worker import EngineClient


@dataclass(frozen=True)
class ViewDeps:
    client: EngineClient
    settings: Settings
    banner: Banner
    colors: Colors  # at start-up; a theme change reaches each view through apply_colors


class View(QWidget):
    """Base of the main views: keeps the shared objects under the names the views use."""

    def __init__(self, deps: ViewDeps, parent: QWidget | None = None):
        super().__init__(parent)
        self.deps = deps
        self.client = deps.client
        self.settings = deps.settings
        self.banner = deps.banner
        self.colors = deps.colors
        self._errors: list[QWidget] = []  # this view's error messages in the shared banner

    def show_error(self, text: str) -> None:
        """An error that belongs to this view: it goes when the person leaves the view, or
        when ``clear_errors`` says the thing it was about has since worked."""
        self._errors.append(self.banner.show_message(text, error=True))

    def clear_errors(self) -> None:
        for box in self._errors:
            self.banner.dismiss(box)
        self._errors = []

    def hideEvent(self, event: QHideEvent) -> None:  # noqa: N802 (Qt override)
        if not event.spontaneous():  # another view was chosen (not the window minimized)
            self.clear_errors()
        super().hideEvent(event)

    def body_layout(self) -> QVBoxLayout:
        """The view's outer layout, with the margins every view uses."""
        outer = QVBoxLayout(self)
        outer.setContentsMargins(10, 8, 10, 8)
        return outer
