"""The real main window on the tiny target, for the chat tests (offscreen, real engine)."""

from __future__ import annotations

from pathlib import Path

TIMEOUT = 60_000


def open_window(qtbot, tmp_path: Path, target: Path, **settings_kw):
    from app.checkpoints.store import Store
    from app.ui.chat_store import ChatStore
    from app.ui.main_window import AppContext, MainWindow
    from app.ui.settings import Settings, SettingsStore

    settings = Settings(target=str(target), draft="", **settings_kw)
    ctx = AppContext(SettingsStore(tmp_path / "settings.json"), settings,
                     ChatStore(tmp_path / "chat.sqlite3"),
                     checkpoint_store=Store(data_dir=tmp_path / "data", hf_cache=tmp_path / "hf"),
                     autoload=False)
    w = MainWindow(ctx)
    qtbot.addWidget(w)
    w.show()
    with qtbot.waitSignal(w.client.model_state, timeout=TIMEOUT):
        w.load_pair(str(target), "")
    return w


def close_window(w) -> None:
    w.close()
    assert not w.client.engine_thread.isRunning()
    w.ctx.chat_store.close()
