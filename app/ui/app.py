"""Start the desktop app: QApplication, theme, context objects, the window, the excepthook."""

from __future__ import annotations

import sys
import time
import traceback
from pathlib import Path
from types import TracebackType

FLOOD_WINDOW_S = 10.0
FLOOD_MAX = 3


class ExceptHook:
    """Last resort for exceptions in Qt slots: log, show one line non-modally, flood guard."""

    def __init__(self, show, log=None):
        self.show = show
        self.log = log or (lambda text: sys.stderr.write(text))
        self._times: list[float] = []
        self.count = 0

    def __call__(self, etype: type[BaseException], value: BaseException, tb: TracebackType | None):
        from app.errors import user_message

        self.count += 1
        self.log("".join(traceback.format_exception(etype, value, tb)))
        now = time.monotonic()
        self._times = [t for t in self._times if now - t < FLOOD_WINDOW_S] + [now]
        if len(self._times) <= FLOOD_MAX:
            self.show(f"Unexpected error: {user_message(value)} (details in the log)")
        elif len(self._times) == FLOOD_MAX + 1:
            self.show("More unexpected errors followed; see the log.")


def app_icon_path() -> Path:
    from app.resources import resource_path

    return resource_path("icons", "draftpair.png")


def build_window(*, theme: str | None = None, autoload: bool = True, data_dir: Path | None = None):
    """Create the context and the main window (a QApplication must exist)."""
    from PySide6.QtWidgets import QApplication

    from app.ui.chat_store import ChatStore
    from app.ui.main_window import AppContext, MainWindow
    from app.ui.settings import SettingsStore
    from app.ui.theme import apply_palette, colors_for

    settings_store = SettingsStore(data_dir / "settings.json" if data_dir else None)
    settings = settings_store.load()
    if theme:
        settings.theme = theme
    chat_store = ChatStore(data_dir / "conversations.sqlite3" if data_dir else None)
    app = QApplication.instance()
    apply_palette(app, colors_for(settings.theme))
    ctx = AppContext(settings_store, settings, chat_store, autoload=autoload)
    return MainWindow(ctx)


def main(argv: list[str] | None = None, *, theme: str | None = None) -> int:
    from PySide6.QtCore import QCoreApplication
    from PySide6.QtGui import QIcon
    from PySide6.QtWidgets import QApplication

    from app.ui.compat import check_binding

    binding_warning = check_binding()
    if binding_warning:
        sys.stderr.write(f"draftpair: warning: {binding_warning}\n")
    QCoreApplication.setOrganizationName("DraftPair")
    QCoreApplication.setApplicationName("DraftPair")
    app = QApplication.instance() or QApplication(list(argv or sys.argv[:1]))
    icon = app_icon_path()
    if icon.exists():
        app.setWindowIcon(QIcon(str(icon)))
    window = build_window(theme=theme)
    hook = ExceptHook(lambda text: window.banner.show_message(text, error=True))
    previous = sys.excepthook
    sys.excepthook = hook
    window.show()
    try:
        return int(app.exec())
    finally:
        sys.excepthook = previous
