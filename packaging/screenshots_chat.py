"""Chat screenshots at one screen size, light and dark, with the demo pair doing real work.

    python packaging/screenshots_chat.py --size 1600x1000 [--out resources/screenshots]

Runs offscreen on a virtual screen of that size (the window fills the screen's available
area, as a maximised window does), so the pictures show what a person sees on such a screen.
Chats and settings go to a temporary folder. PNGs are reduced to 256 colours with ImageMagick
when it is installed.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

FIRST = (
    "Fix the typos and return the text otherwise unchanged: The libary opens at nine and "
    "closes at six. Visitors can borow five books at a time."
)
SECOND = "Thanks! Now explain in two sentences why libraries matter."


def _screen(width: int, height: int) -> None:
    """A virtual screen of this size for Qt's offscreen platform (set before QApplication)."""
    if os.environ.get("QT_QPA_PLATFORM", "offscreen").startswith("offscreen"):
        cfg = Path(tempfile.mkdtemp()) / "screen.json"
        cfg.write_text(json.dumps({"screens": [{
            "name": "screen", "x": 0, "y": 0, "width": width, "height": height,
            "logicalDpiX": 96, "logicalDpiY": 96, "dpr": 1}]}))
        os.environ["QT_QPA_PLATFORM"] = f"offscreen:configfile={cfg}"


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--size", default="1600x1000")
    ap.add_argument("--out", type=Path, default=ROOT / "resources" / "screenshots")
    ap.add_argument("--suffix", default=None, help="file name suffix (default: -WxH)")
    ap.add_argument("--kind", default="", help="speculation for the second reply")
    ap.add_argument("--refused", action="store_true",
                    help="end with a refused over-long message and an edit under way")
    args = ap.parse_args()
    width, height = (int(v) for v in args.size.lower().split("x"))
    suffix = f"-{width}x{height}" if args.suffix is None else args.suffix
    args.out.mkdir(parents=True, exist_ok=True)
    _screen(width, height)

    from PySide6.QtCore import QEventLoop, QTimer
    from PySide6.QtWidgets import QApplication

    from app.ui.chat_store import ChatStore
    from app.ui.main_window import AppContext, MainWindow
    from app.ui.settings import Settings, SettingsStore
    from app.ui.theme import apply_palette, colors_for

    app = QApplication(sys.argv[:1])
    tmp = Path(tempfile.mkdtemp())
    settings = Settings(theme="light", max_tokens=72)
    apply_palette(app, colors_for("light"))
    ctx = AppContext(SettingsStore(tmp / "s.json"), settings, ChatStore(tmp / "c.db"),
                     autoload=True)
    w = MainWindow(ctx)
    w.setGeometry(app.primaryScreen().availableGeometry())
    w.show()

    def wait(signal, timeout_ms: int = 600_000):
        loop = QEventLoop()
        got: list = []
        signal.connect(lambda *a: (got.append(a), loop.quit()))
        QTimer.singleShot(timeout_ms, loop.quit)
        loop.exec()
        return got[0] if got else None

    def pause(ms: int) -> None:
        loop = QEventLoop()
        QTimer.singleShot(ms, loop.quit)
        loop.exec()

    wait(w.client.model_state)
    chat = w.chat
    chat.spec_combo.set_kind("prompt-lookup")
    chat.input.setPlainText(FIRST)
    chat.send()
    wait(chat.reply_finished)
    kind = args.kind or _second_kind(w.client.state.kinds)
    chat.spec_combo.set_kind(kind)
    chat.input.setPlainText(SECOND)
    chat.send()
    wait(chat.reply_finished)
    if args.refused:  # what a refused message and an edit look like
        chat.input.setPlainText(" ".join(["a very long paste"] * 3000))
        chat.send()
        wait(chat.reply_finished)
        refused = chat.store.messages(chat.conv_id)[-1]
        chat.messages_ui.edit(refused.id)
        chat.input.setPlainText("A shorter version of the long paste.")
    pause(800)
    print("window", w.width(), "x", w.height(), "minimum", w.minimumSizeHint().width(), "x",
          w.minimumSizeHint().height(), "screen", width, "x", height)
    for theme in ("light", "dark"):
        w.set_theme(theme)
        pause(600)
        path = args.out / f"chat-{theme}{suffix}.png"
        w.grab().save(str(path))
        if shutil.which("convert"):
            subprocess.run(["convert", str(path), "-colors", "256", "PNG8:" + str(path)],
                           check=False)
        print(path, path.stat().st_size // 1024, "KB")
    w.close()
    return 0


def _second_kind(kinds: dict) -> str:
    for kind in ("dflash", "full-model", "prompt-lookup"):
        if kinds.get(kind) is None:
            return kind
    return "none"


if __name__ == "__main__":
    raise SystemExit(main())
