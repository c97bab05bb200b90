"""Tokens/s inside the app vs the headless CLI on the same prompt, plus event-loop lateness.

    QT_QPA_PLATFORM=offscreen python packaging/measure_app_vs_cli.py [--runs 3] [--max-tokens 64]

Alternates CLI and app runs (CLI, app, CLI, app…) so background load hits both alike, and
reports medians. The app runs the real window offscreen (chat view, live panels on) with a
10 ms timer measuring its own lateness.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

PROMPT = "Write a short poem about the sea."


def cli_run(max_tokens: int, kind: str) -> float:
    out = subprocess.run(
        [sys.executable, "-m", "app", "generate", "--prompt", PROMPT, "--max-tokens",
         str(max_tokens), "--draft-kind", kind, "--json"],
        capture_output=True, text=True, cwd=ROOT, check=True,
    ).stdout
    return float(json.loads(out)["timings"]["predicted_per_second"])


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--max-tokens", type=int, default=64)
    ap.add_argument("--kind", default="none")
    ap.add_argument("--no-panels", action="store_true", help="hide the live panels")
    ap.add_argument("--no-probe", action="store_true", help="no lateness timer")
    ap.add_argument("--no-cli", action="store_true")
    args = ap.parse_args()

    from PySide6.QtCore import QEventLoop, QTimer
    from PySide6.QtWidgets import QApplication

    from app.ui.chat_store import ChatStore
    from app.ui.main_window import AppContext, MainWindow
    from app.ui.probe import LatenessProbe
    from app.ui.settings import Settings, SettingsStore

    _app = QApplication(sys.argv[:1])  # noqa: F841 (kept alive for the run)
    tmp = Path(tempfile.mkdtemp())
    ctx = AppContext(SettingsStore(tmp / "s.json"), Settings(), ChatStore(tmp / "c.db"),
                     autoload=False)
    w = MainWindow(ctx)
    w.show()

    def wait(signal, timeout_ms=300_000):
        loop = QEventLoop()
        result = []
        signal.connect(lambda *a: (result.append(a), loop.quit()))
        QTimer.singleShot(timeout_ms, loop.quit)
        loop.exec()
        return result[0] if result else None

    w.load_pair("demo", "")
    wait(w.client.model_state)
    chat = w.chat
    chat.spec_combo.set_kind(args.kind)
    chat.max_spin.setValue(args.max_tokens)
    if args.no_panels:
        chat.panels_box.setChecked(False)
    cli, gui, late = [], [], []
    for i in range(args.runs):
        cli.append(cli_run(args.max_tokens, args.kind) if not args.no_cli else 1.0)
        chat.new_conversation()
        chat.input.setPlainText(PROMPT)
        probe = LatenessProbe(10)
        if not args.no_probe:
            probe.start()
        chat.send()
        (done,) = wait(chat.reply_finished)
        probe.stop()
        gui.append(done.timings.predicted_per_second)
        late += probe.samples
        print(f"run {i + 1}: cli {cli[-1]:.2f} tok/s, app {gui[-1]:.2f} tok/s", flush=True)
    w.close()
    import numpy as np

    a = np.asarray(late or [0.0])
    print(json.dumps({
        "cli_tok_s_median": statistics.median(cli), "app_tok_s_median": statistics.median(gui),
        "app_over_cli": statistics.median(gui) / statistics.median(cli),
        "lateness_ms": {"n": int(a.size), "p50": float(np.percentile(a, 50)),
                        "p99": float(np.percentile(a, 99)), "max": float(a.max())},
        "load_avg": os.getloadavg(),
    }, indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
