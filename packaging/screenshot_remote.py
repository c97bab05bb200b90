"""Screenshot of Compare against a remote endpoint: a ``draftpair serve`` on this machine.

    QT_QPA_PLATFORM=offscreen python packaging/screenshot_remote.py \
        [--out resources/screenshots/compare-remote.png] [--pairs 2] [--max-tokens 48]

Starts ``python -m app serve --model demo`` (the demo pair, full-model speculation) on a free
loopback port, opens the app on the demo target, runs Compare with the speculation-on side
set to that endpoint (off side: plain decoding here) and saves the window. Prints the card.
"""

from __future__ import annotations

import argparse
import re
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

PROMPT = "Explain in a short paragraph how a rainbow forms."


def start_server() -> tuple[subprocess.Popen, str]:
    proc = subprocess.Popen([sys.executable, "-m", "app", "serve", "--model", "demo",
                             "--port", "0"], cwd=ROOT, stderr=subprocess.PIPE, text=True)
    assert proc.stderr is not None
    deadline = time.monotonic() + 600
    while time.monotonic() < deadline:
        line = proc.stderr.readline()
        if not line:
            break
        print(line, end="", file=sys.stderr)
        m = re.search(r"at (http://127\.0\.0\.1:\d+)/v1", line)
        if m:
            return proc, m.group(1)
    proc.kill()
    raise SystemExit("draftpair serve did not start")


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", type=Path,
                    default=ROOT / "resources" / "screenshots" / "compare-remote.png")
    ap.add_argument("--pairs", type=int, default=2)
    ap.add_argument("--max-tokens", type=int, default=48)
    args = ap.parse_args()

    from PySide6.QtCore import QEventLoop, QTimer
    from PySide6.QtWidgets import QApplication

    from app.ui.chat_store import ChatStore
    from app.ui.main_window import AppContext, MainWindow
    from app.ui.settings import Settings, SettingsStore
    from app.ui.theme import apply_palette, colors_for

    server, url = start_server()
    try:
        app = QApplication(sys.argv[:1])
        tmp = Path(tempfile.mkdtemp())
        settings = Settings(theme="light", target="demo", draft="")
        apply_palette(app, colors_for("light"))
        ctx = AppContext(SettingsStore(tmp / "s.json"), settings, ChatStore(tmp / "c.db"),
                         autoload=False)
        w = MainWindow(ctx)
        w.resize(1360, 860)
        w.show()

        def wait(signal, timeout_ms=1_800_000):
            loop = QEventLoop()
            got = []
            signal.connect(lambda *a: (got.append(a), loop.quit()))
            QTimer.singleShot(timeout_ms, loop.quit)
            loop.exec()
            return got[0] if got else None

        w.load_pair("demo", "")
        wait(w.client.model_state)
        cmp = w.compare
        w.show_view("Compare")
        cmp.prompt.setPlainText(PROMPT)
        cmp.side.set_remote(url)
        cmp.runs_spin.setValue(args.pairs)
        cmp.max_spin.setValue(args.max_tokens)
        cmp.run()
        got = wait(cmp.compare_finished)
        loop = QEventLoop()
        QTimer.singleShot(1500, loop.quit)  # let the plots and labels catch up
        loop.exec()
        args.out.parent.mkdir(parents=True, exist_ok=True)
        w.grab().save(str(args.out))
        if shutil.which("convert"):
            subprocess.run(["convert", str(args.out), "-colors", "256", "PNG8:" + str(args.out)],
                           check=False)
        s = got[0] if got else None
        print("banner:", w.banner.messages)
        print("summary:", s.to_dict() if s is not None else None)
        print("card:", re.sub(r"<[^>]+>", "", cmp.card_body.text().replace("<br>", "\n")))
        w.close()
        ctx.chat_store.close()
    finally:
        server.terminate()
        server.wait(30)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
