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

    if data_dir is not None:
        data_dir.mkdir(parents=True, exist_ok=True)
    settings_store = SettingsStore(data_dir / "settings.json" if data_dir else None)
    settings = settings_store.load()
    if theme:
        settings.theme = theme
    chat_store = ChatStore(data_dir / "conversations.sqlite3" if data_dir else None)
    app = QApplication.instance()
    assert isinstance(app, QApplication), "the window needs the QApplication made first"
    apply_palette(app, colors_for(settings.theme))
    ctx = AppContext(settings_store, settings, chat_store, autoload=autoload)
    return MainWindow(ctx)


def _smoke(window, prompt: str, timeout_s: float) -> None:
    """Drive the window once: wait for the pair, send ``prompt``, report, close (packaging)."""
    import json

    from PySide6.QtCore import QTimer
    from PySide6.QtWidgets import QApplication

    from app import kinds

    state = {"code": 2}

    def finish(code: int, payload: dict) -> None:
        state["code"] = code
        print("SMOKE-RESULT " + json.dumps(payload), flush=True)
        window.close()
        QApplication.exit(code)

    def on_state(s) -> None:
        if s.target and window.chat.job is None and not getattr(window, "_smoke_sent", False):
            window._smoke_sent = True
            window.chat.spec_combo.set_kind(kinds.default_choice())
            window.chat.max_spin.setValue(32)
            window.chat.input.setPlainText(prompt)
            window.chat.send()

    def on_reply(done) -> None:
        ok = done.finish_reason in ("stop", "length") and bool(done.text.strip())
        finish(0 if ok else 1, {"finish_reason": done.finish_reason, "error": done.error,
                                "tokens": done.timings.predicted_n,
                                "tok_s": round(done.timings.predicted_per_second, 2),
                                "target": window.client.state.target})

    window.client.model_state.connect(on_state)
    window.client.load_failed.connect(lambda m: finish(1, {"error": m}))
    window.chat.reply_finished.connect(on_reply)
    QTimer.singleShot(int(timeout_s * 1000), window, lambda: finish(2, {"error": "timeout"}))


def startup_failure_dialog(exc: BaseException):
    """A window that says why the app cannot start and what to do (a QApplication exists)."""
    from PySide6.QtWidgets import QMessageBox

    from app.errors import technical_detail, user_message

    box = QMessageBox(QMessageBox.Icon.Critical, "DraftPair cannot start", user_message(exc))
    box.setInformativeText(
        "DraftPair keeps its models, conversations and settings in a folder it must be able "
        "to write. Fix that folder's permissions or free some disk space, or start DraftPair "
        "with DRAFTPAIR_DATA_DIR and DRAFTPAIR_CONFIG_DIR set to folders you can write."
    )
    box.setDetailedText(technical_detail(exc))
    box.setStandardButtons(QMessageBox.StandardButton.Close)
    return box


def _startup_failed(exc: BaseException, *, smoke: bool) -> int:
    import json

    from app.errors import user_message

    message = user_message(exc)
    sys.stderr.write(f"draftpair: error: {message}\n")
    if smoke:  # packaging smoke test: report, no dialog to wait on
        print("SMOKE-RESULT " + json.dumps({"error": message}), flush=True)
        return 1
    startup_failure_dialog(exc).exec()
    return 1


def main(
    argv: list[str] | None = None,
    *,
    theme: str | None = None,
    profile_dir: Path | None = None,
    smoke_prompt: str | None = None,
    smoke_timeout_s: float = 300.0,
) -> int:
    from PySide6.QtCore import QCoreApplication
    from PySide6.QtGui import QIcon
    from PySide6.QtWidgets import QApplication

    from app.ui.compat import check_binding

    binding_warning = check_binding()
    if binding_warning:
        sys.stderr.write(f"draftpair: warning: {binding_warning}\n")
    QCoreApplication.setOrganizationName("DraftPair")
    QCoreApplication.setApplicationName("DraftPair")
    running = QApplication.instance()
    app = running if isinstance(running, QApplication) else QApplication(list(argv or sys.argv[:1]))
    icon = app_icon_path()
    if icon.exists():
        app.setWindowIcon(QIcon(str(icon)))
    try:
        window = build_window(theme=theme, data_dir=profile_dir)
    except Exception as exc:  # noqa: BLE001 - an unwritable data folder, a locked database...
        return _startup_failed(exc, smoke=smoke_prompt is not None)
    hook = ExceptHook(lambda text: window.banner.show_message(text, error=True))
    previous = sys.excepthook
    sys.excepthook = hook
    window.show()
    if smoke_prompt:
        _smoke(window, smoke_prompt, smoke_timeout_s)
    try:
        return int(app.exec())
    finally:
        sys.excepthook = previous
