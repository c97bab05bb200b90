"""Screenshots of every view, light and dark, with the demo model doing real work.

    QT_QPA_PLATFORM=offscreen python packaging/screenshots.py [--out resources/screenshots]

Chats and settings go to a temporary folder; the Models view shows the real local store.
PNGs are reduced to 256 colours with ImageMagick when available (each < 300 KB).
"""

from __future__ import annotations

import argparse
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

CHAT_PROMPT = (
    "Fix the typos and return the text otherwise unchanged: The libary opens at nine and "
    "closes at six. Visitors can borow five books at a time."
)

COMPARE_PROMPT = "Write a message to a neighbor asking them to water my plants while I am away."


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", type=Path, default=ROOT / "resources" / "screenshots")
    ap.add_argument("--pairs", type=int, default=2)
    ap.add_argument("--no-bench", action="store_true")
    ap.add_argument("--views", nargs="+", metavar="VIEW",
                    help="only these views (Chat Compare Models Bench); the chat replies are "
                         "skipped when Chat is not among them")
    ap.add_argument("--sizes", nargs="+", default=["1360x860"], metavar="WxH",
                    help="window sizes; the first is saved as VIEW-THEME.png, the others as "
                         "VIEW-THEME-WxH.png")
    args = ap.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)

    from PySide6.QtCore import QEventLoop, QTimer
    from PySide6.QtWidgets import QApplication

    from app.ui.chat_store import ChatStore
    from app.ui.main_window import AppContext, MainWindow
    from app.ui.settings import Settings, SettingsStore
    from app.ui.theme import apply_palette, colors_for

    app = QApplication(sys.argv[:1])
    tmp = Path(tempfile.mkdtemp())
    settings = Settings(theme="light", max_tokens=72, compare_max_tokens=64)
    apply_palette(app, colors_for("light"))
    # A store with the demo target, the demo draft when shipped, and a tiny model with another
    # tokenizer, so the pairing panel has something to explain.
    from app.checkpoints.store import Store
    from app.demo.mtp_paths import shipped_head_available
    from app.demo.target import demo_draft_available, demo_draft_path, demo_target_dir
    from tests.builders import make_checkpoint

    store = Store(data_dir=tmp / "data", hf_cache=tmp / "hf")
    store.import_folder(demo_target_dir(), name="demo")
    if demo_draft_available():
        store.import_folder(demo_draft_path(), name="demo-draft-copy")
    other = make_checkpoint(tmp / "tiny-llama-other-tokenizer", tokenizer_kwargs={"permute_seed": 1})
    store.import_folder(other)
    ctx = AppContext(SettingsStore(tmp / "s.json"), settings, ChatStore(tmp / "c.db"),
                     checkpoint_store=store, autoload=True)
    w = MainWindow(ctx)
    w.resize(1360, 860)
    w.show()

    def wait(signal, timeout_ms=600_000):
        loop = QEventLoop()
        got = []
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
    dflash = _demo_dflash_available()
    wanted = args.views or list(w.views)
    if "Chat" in wanted:
        chat.spec_combo.set_kind("prompt-lookup")
        chat.input.setPlainText(CHAT_PROMPT)
        chat.send()
        wait(chat.reply_finished)
        if dflash or demo_draft_available():  # a trained drafter on an ordinary answer
            chat.spec_combo.set_kind("dflash" if dflash else "full-model")
        chat.input.setPlainText("Thanks! Now explain in two sentences why libraries matter.")
        chat.send()
        wait(chat.reply_finished)
    cmp = w.compare
    w.show_view("Compare")
    cmp.runs_spin.setValue(args.pairs)
    if shipped_head_available():  # the target's own head, with prompt lookup beside it
        cmp.kind_combo.set_kind("mtp")
        cmp.prompt.setPlainText(COMPARE_PROMPT)
    elif dflash or demo_draft_available():
        cmp.kind_combo.set_kind("dflash" if dflash else "full-model")
        cmp.prompt.setPlainText(COMPARE_PROMPT)
    cmp.run()
    wait(cmp.compare_finished)
    bench = w.views.get("Bench")
    if bench is not None and not args.no_bench and "Bench" in wanted:
        import dataclasses

        from app.bench import BenchConfig
        from app.bench.suite import load_suite

        real = BenchConfig.quick_preset
        quick_ids = tuple(t.id for t in load_suite() if t.quick)[:3]
        BenchConfig.quick_preset = staticmethod(  # a shorter quick run for the picture
            lambda **kw: dataclasses.replace(real(**kw), task_ids=quick_ids, max_tokens=48)
        )
        w.show_view("Bench")
        bench.run()
        wait(bench.bench_done)
    w.show_view("Models")
    models = w.models
    pause(3000)
    root = models.pair_tree.invisibleRootItem()
    for i in range(root.childCount()):
        group = root.child(i)
        for j in range(group.childCount()):
            if "other-tokenizer" in group.child(j).text(0):
                models.pair_tree.setCurrentItem(group.child(j))
    pause(2000)
    for n, size in enumerate(args.sizes):
        width, height = (int(x) for x in size.lower().split("x"))
        w.resize(width, height)
        for theme in ("light", "dark"):
            w.set_theme(theme)
            for view in w.views:
                if view not in wanted:
                    continue
                w.show_view(view)
                pause(600)
                got = w.size()
                if (got.width(), got.height()) != (width, height):  # the window must fit
                    print(f"{view}: the window is {got.width()}x{got.height()}, "
                          f"not {width}x{height}", file=sys.stderr)
                suffix = "" if n == 0 else f"-{width}x{height}"
                path = args.out / f"{view.lower()}-{theme}{suffix}.png"
                w.grab().save(str(path))
                if shutil.which("convert"):
                    subprocess.run(["convert", str(path), "-colors", "256", "PNG8:" + str(path)],
                                   check=False)
                print(path, path.stat().st_size // 1024, "KB")
    _ = models
    w.close()
    return 0


def _demo_dflash_available() -> bool:
    from app.demo.builtins import _present_dflash

    return _present_dflash() is not None


if __name__ == "__main__":
    raise SystemExit(main())
