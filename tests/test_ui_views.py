"""Compare, Bench and Models as a person meets them: real widgets offscreen, real engine on
tiny checkpoints (pytest-qt)."""

from __future__ import annotations

import pytest
from PySide6.QtCore import Qt

from app.ui.live import RATE_WINDOW_S
from tests.test_gguf_discovery import ggufs, home  # noqa: F401 - fixtures
from tests.test_ui import REPLY_TIMEOUT, make_window  # noqa: F401 - the window fixture


def test_compare_rate_plot_starts_at_the_first_measured_window(qtbot, make_window):  # noqa: F811
    """No spike at t=0: the first plotted rate is a windowed (or the whole run's) rate, and no
    point is far above what the run measured overall."""
    w = make_window(draft=True)
    cmp = w.compare
    w.show_view("Compare")
    cmp.kind_combo.set_kind("full-model")
    cmp.runs_spin.setValue(1)
    cmp.max_spin.setValue(64)
    with qtbot.waitSignal(cmp.compare_finished, timeout=REPLY_TIMEOUT * 2) as blocker:
        qtbot.mouseClick(cmp.run_btn, Qt.MouseButton.LeftButton)
    assert blocker.args[0] is not None
    final = {r.mode: r.tok_s for r in cmp.results if not getattr(r, "warmup", False)}
    assert len(cmp.panels._runs) == 2
    for rc in cmp.panels._runs:
        snap = rc.run.snapshot()
        rate = snap.rate
        assert len(rate), f"{rc.name}: nothing plotted"
        t_first, first = float(rate[0, 0]), float(rate[0, 1])
        overall = snap.tokens / snap.elapsed_s
        # the first point is a full window, or (a run shorter than one) the run's own rate
        assert t_first >= RATE_WINDOW_S or (len(rate) == 1 and first == pytest.approx(overall))
        assert float(rate[:, 1].max()) <= 4 * max(overall, final[rc.name]), rc.name
        # what the plot's y axis is scaled to
        assert cmp.panels._y_rate[1] <= 1.15 * 4 * max(overall, final[rc.name])


def _tiny_quick(monkeypatch):
    """The Quick preset cut to one quick task and a few tokens (the real preset otherwise)."""
    import dataclasses

    from app.bench import BenchConfig
    from app.bench.suite import load_suite

    real = BenchConfig.quick_preset

    def tiny_quick(**kw):
        cfg = real(**kw)
        first = next(t for t in load_suite(cfg.suite_path) if t.quick)
        return dataclasses.replace(cfg, task_ids=(first.id,), max_tokens=12, peers=False)

    monkeypatch.setattr(BenchConfig, "quick_preset", staticmethod(tiny_quick))


def test_bench_fills_its_table_run_by_run_and_speaks_of_the_runs_box(
        qtbot, make_window, monkeypatch):  # noqa: F811
    w = make_window(draft=True)
    bench = w.bench
    w.show_view("Bench")
    assert bench.preset.currentData() == "quick"
    assert bench.runs.value() == 1 and not bench.runs.isEnabled()  # what Quick measures
    bench.preset.setCurrentIndex(bench.preset.findData("full"))
    assert bench.runs.value() == 3 and bench.runs.isEnabled()
    bench.runs.setValue(4)
    bench.preset.setCurrentIndex(bench.preset.findData("quick"))
    assert bench.runs.value() == 1
    bench.preset.setCurrentIndex(bench.preset.findData("full"))
    assert bench.runs.value() == 4  # Full keeps the number chosen for it
    bench.preset.setCurrentIndex(bench.preset.findData("quick"))

    _tiny_quick(monkeypatch)
    rows_while_running: list[int] = []

    def seen(p):
        if bench._running:
            rows_while_running.append(bench.table.rowCount())

    w.client.bench_progress.connect(seen)
    with qtbot.waitSignal(bench.bench_done, timeout=120_000) as blocker:
        qtbot.mouseClick(bench.run_btn, Qt.MouseButton.LeftButton)
    report = blocker.args[0]
    assert report is not None and not report.cancelled
    n_conditions = len(report.conditions)
    # one row after the first measured run, then one more per condition, before the end
    assert 1 in rows_while_running and n_conditions in rows_while_running
    assert rows_while_running.index(1) < rows_while_running.index(n_conditions)
    text = bench.recs.text()
    assert "too few runs" in text and "Runs" in text
    assert "--" not in text  # never a command-line flag in the window


def _window_with_store(qtbot, tmp_path, store):
    from app.ui.chat_store import ChatStore
    from app.ui.main_window import AppContext, MainWindow
    from app.ui.settings import Settings, SettingsStore

    ctx = AppContext(SettingsStore(tmp_path / "settings.json"), Settings(target="", draft=""),
                     ChatStore(tmp_path / "chat.sqlite3"), checkpoint_store=store,
                     autoload=False)  # fmt: skip
    w = MainWindow(ctx)
    qtbot.addWidget(w)
    w.show()
    return w


def _table_row(models, name: str) -> int:
    for r in range(models.table.rowCount()):
        if models.table.item(r, 0).data(Qt.ItemDataRole.UserRole) == name:
            return r
    raise AssertionError(f"{name} not listed")


def test_a_base_model_gguf_is_a_target_to_chat_with_and_a_draft_where_it_pairs(
        qtbot, tmp_path, tiny_models, monkeypatch):
    """A GGUF without a chat template imports as a base model: it loads as the target (plain
    text chat) and is offered as a draft for a larger model with the same tokens."""
    from app.checkpoints.gguf_import import import_gguf
    from app.checkpoints.store import Store
    from tests.gguf_files import write_gguf

    monkeypatch.setenv("DRAFTPAIR_NO_BLAS_FIX", "1")
    store = Store(data_dir=tmp_path / "data", hf_cache=tmp_path / "hf")
    small = dict(hidden_size=32, intermediate_size=64, num_attention_heads=2,
                 num_key_value_heads=1, num_hidden_layers=1)
    files, _, _ = write_gguf(tmp_path / "tiny-base.gguf", chat_template=None,
                             config_overrides=small)
    base = import_gguf(files[0], store=store, precision="float32")
    assert base.kind == "base" and base.kind_label == "base model (plain text)"
    store.import_folder(str(tiny_models.target))
    w = _window_with_store(qtbot, tmp_path, store)
    models = w.models
    try:
        w.show_view("Models")
        qtbot.waitUntil(lambda: bool(models.entries), timeout=30_000)
        row = _table_row(models, base.name)
        assert models.table.item(row, 1).text() == "base model (plain text)"
        assert "plain text" in models.table.item(row, 1).toolTip()
        # offered as a draft for the larger target with the same tokens
        with qtbot.waitSignal(models.pairing_shown, timeout=60_000):
            models.select_entry("tiny-target")
        drafts = [s.name for s in models.suggestions.ranked]
        excluded = models.excluded_reasons()
        assert base.name in drafts, excluded.get(base.name)
        # and a target of its own: both Load buttons work, and chat replies in plain text
        with qtbot.waitSignal(models.pairing_shown, timeout=60_000):
            models.select_entry(base.name)
        assert models.pairing.pair_title.text() == f"Drafts for {base.name}"
        assert models.load_target_btn.isEnabled()
        with qtbot.waitSignal(w.client.model_state, timeout=60_000):
            qtbot.mouseClick(models.load_target_btn, Qt.MouseButton.LeftButton)
        qtbot.waitUntil(lambda: w.client.state.target == base.name and not w.client.busy_loading,
                        timeout=60_000)
        assert not w.client.state.has_chat_template
        w.show_view("Chat")
        chat = w.chat
        chat.spec_combo.set_kind("none")
        chat.max_spin.setValue(6)
        chat.input.setPlainText("Hello there")
        with qtbot.waitSignal(chat.reply_finished, timeout=REPLY_TIMEOUT) as blocker:
            qtbot.keyClick(chat.input, Qt.Key.Key_Return, Qt.KeyboardModifier.ControlModifier)
        assert blocker.args[0] is not None
    finally:
        w.close()
        w.ctx.chat_store.close()


def test_selecting_a_draft_model_never_shows_another_models_drafts(
        qtbot, make_window, tmp_path, tiny_models):  # noqa: F811
    from app.checkpoints.store import Store
    from app.ui.theme import colors_for

    store = Store(data_dir=tmp_path / "data", hf_cache=tmp_path / "hf")
    store.import_folder(str(tiny_models.target))
    w = make_window(draft=True, store=store)
    models = w.models
    w.show_view("Models")
    qtbot.waitUntil(lambda: bool(models.entries), timeout=30_000)
    if models.pairing.target != "tiny-target":
        with qtbot.waitSignal(models.pairing_shown, timeout=60_000):
            models.select_entry("tiny-target")
    qtbot.waitUntil(lambda: models.pair_tree.topLevelItemCount() == 3, timeout=60_000)
    assert models.pairing.pair_title.text() == "Drafts for tiny-target"
    models.select_entry("demo-draft")
    title, hint = models.pairing.pair_title.text(), models.pairing.pair_hint.text()
    assert "demo-draft is a draft model" in hint and "tiny-target" not in title
    assert "full-model" not in hint and "candidate" not in hint
    assert models.pair_tree.topLevelItemCount() == 0
    models.apply_colors(colors_for("dark"))  # a theme change re-renders the panel
    assert models.pair_tree.topLevelItemCount() == 0
    assert not models.load_btn.isEnabled() and not models.load_target_btn.isEnabled()


def test_the_import_says_how_big_the_copy_will_be_before_it_starts(qtbot, home, ggufs):  # noqa: F811
    from app.checkpoints.store import Store
    from app.ui.background import Background
    from app.ui.gguf_panel import FoundModelsPanel
    from tests.test_gguf_discovery import build_library

    build_library(home, ggufs)
    bg = Background()
    panel = FoundModelsPanel(bg)
    bg.setParent(panel)
    qtbot.addWidget(panel)
    try:
        with qtbot.waitSignal(panel.found_listed, timeout=20_000):
            panel.refresh(entries=[])
        item = next(panel.tree.topLevelItem(i) for i in range(panel.tree.topLevelItemCount())
                    if panel.tree.topLevelItem(i).text(0) == "tiny:latest")
        with qtbot.waitSignal(panel.plan_shown, timeout=30_000):
            panel.tree.setCurrentItem(item)
        plan = panel.plans[str(item.data(0, Qt.ItemDataRole.UserRole).path)]
        said = panel.status.text()
        assert said == plan.describe() and "MLX copy in float32" in said
        assert panel.import_btn.isEnabled()
        shown: list[str] = []
        set_text = panel.status.setText
        panel.status.setText = lambda text: (shown.append(text), set_text(text))
        with qtbot.waitSignal(panel.imported, timeout=120_000):
            panel.import_selected()
        # the plan stays above the conversion's steps while it runs
        assert any(t.startswith(said + "\nConverting") for t in shown), shown
        entry = Store().get("tiny-latest")
        written = sum(p.stat().st_size for p in entry.path.glob("*.safetensors"))
        assert abs(written - plan.out_bytes) <= 0.02 * plan.out_bytes  # the figure said is the copy
    finally:
        panel.shutdown()
        bg.shutdown()


def test_a_copy_that_does_not_fit_is_refused_in_one_sentence(tmp_path, capsys, monkeypatch):
    from app.checkpoints import gguf_plan
    from app.cli import main
    from tests.gguf_files import write_gguf

    said = gguf_plan.refusal(10 << 30, 1 << 30, 64 << 30)
    assert "disk has only 1.0 GB free" in said and said.endswith(".") and ". " not in said
    said = gguf_plan.refusal(10 << 30, 100 << 30, 8 << 30, "75% of RAM")
    assert "would not fit" in said and "8.0 GB" in said and ". " not in said
    assert gguf_plan.refusal(1 << 30, 100 << 30, 8 << 30) is None

    monkeypatch.setenv("DRAFTPAIR_DATA_DIR", str(tmp_path / "data"))
    monkeypatch.setenv("DRAFTPAIR_NO_BLAS_FIX", "1")
    files, _, _ = write_gguf(tmp_path / "tiny.gguf")
    monkeypatch.setattr(gguf_plan, "free_disk", lambda folder: 1000)  # a full disk
    assert main(["models", "import", str(files[0]), "--precision", "float32"]) != 0
    err = [line for line in capsys.readouterr().err.splitlines() if line.strip()]
    assert len(err) == 1 and "disk has only 1000 B free" in err[0]
    assert not any((tmp_path / "data").rglob("*.safetensors"))  # nothing written


def test_status_bar_names_the_drafter_in_use_with_the_tables_size(
        qtbot, make_window, tmp_path, tiny_models):  # noqa: F811
    from app.checkpoints.store import Store
    from app.ui.format import format_bytes

    store = Store(data_dir=tmp_path / "data", hf_cache=tmp_path / "hf")
    store.import_folder(str(tiny_models.draft))
    w = make_window(draft=True, store=store)
    models = w.models
    qtbot.waitUntil(lambda: bool(models.entries), timeout=30_000)
    w.chat.spec_combo.set_kind("full-model")
    line = w.status_model.text()
    size_in_table = models.table.item(_table_row(models, "tiny-draft"), 2).text()
    assert f"draft model tiny-draft ({size_in_table})" in line  # one figure in both views
    assert format_bytes(w.client.state.draft_bytes) in w.status_model.toolTip()  # in memory
    w.chat.spec_combo.set_kind("prompt-lookup")
    line = w.status_model.text()
    assert "tiny-draft" not in line and "Prompt lookup" in line  # the drafter actually used
    w.chat.spec_combo.set_kind("dflash")  # its own drafter, never the loaded draft model
    assert "tiny-draft" not in w.status_model.text() and "DFlash" in w.status_model.text()
    assert "tiny-draft" not in w.chat.model_label.text()
    w.chat.spec_combo.set_kind("none")
    assert "no speculation" in w.status_model.text()


def test_kinds_have_plain_names_and_the_technical_name_in_a_tooltip(qtbot):
    from app.ui.widgets import SpecCombo

    combo = SpecCombo()
    qtbot.addWidget(combo)
    for i in range(combo.count()):
        kind, label = combo.itemData(i), combo.itemText(i)
        tip = combo.itemData(i, Qt.ItemDataRole.ToolTipRole)
        assert f"(technical name: {kind})" in tip and len(tip.splitlines()[0]) > 20
        assert kind not in label  # "full-model", "prompt-lookup", "dflash", "mtp"
    combo.set_reasons({"dflash": "the target has no DFlash drafter"})
    i = combo.findData("dflash")
    tip = combo.itemData(i, Qt.ItemDataRole.ToolTipRole)
    assert tip.startswith("The target has no DFlash drafter.") and "technical name" in tip


def test_an_import_error_leaves_with_the_view_and_after_a_good_import(
        qtbot, make_window, tmp_path, tiny_models):  # noqa: F811
    w = make_window(draft=True)
    models = w.models
    w.show_view("Models")
    qtbot.waitUntil(lambda: bool(models.entries), timeout=30_000)
    models.import_folder(str(tmp_path / "no-such-folder"))
    qtbot.waitUntil(lambda: any("Import failed" in m for m in w.banner.messages), timeout=30_000)
    assert w.banner.isVisible()
    w.show_view("Compare")
    assert not w.banner.isVisible()  # the Models view's error went with it
    w.show_view("Models")
    models.import_folder(str(tmp_path / "still-missing"))
    qtbot.waitUntil(lambda: w.banner.isVisible(), timeout=30_000)
    with qtbot.waitSignal(models.listed, timeout=30_000):
        models.import_folder(str(tiny_models.target))
    from PySide6.QtWidgets import QFrame

    errors = [b for b in w.banner.findChildren(QFrame)
              if b.property("role") == "banner-error" and not b.isHidden()]
    assert errors == [] and "Imported tiny-target" in w.banner.messages[-1]


def test_compare_models_and_bench_fit_a_1024_by_700_window(
        qtbot, make_window, tmp_path, tiny_models):  # noqa: F811
    """No sideways scrolling in the smallest window the app is made for, in either theme."""
    from app.checkpoints.store import Store

    store = Store(data_dir=tmp_path / "data", hf_cache=tmp_path / "hf")
    store.import_folder(str(tiny_models.target))
    store.import_folder(str(tiny_models.draft))
    w = make_window(draft=True, store=store)
    qtbot.waitUntil(lambda: bool(w.models.entries), timeout=30_000)
    w.compare.kind_combo.set_kind("dflash")  # the longest kind name in the titles
    w.resize(1024, 700)
    for theme in ("light", "dark"):
        w.set_theme(theme)
        for name in ("Compare", "Models", "Bench"):
            w.show_view(name)
            qtbot.wait(50)
            page = w.stack.currentWidget()
            assert w.width() == 1024, name
            assert page.horizontalScrollBar().maximum() == 0, (
                f"{name} needs {w.views[name].minimumSizeHint().width()} px, "
                f"the window gives it {page.viewport().width()}")
