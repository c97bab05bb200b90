"""The "Found on this computer" panel: real discovery on fake LM Studio / Ollama trees, real
imports through the `draftpair models import` child process, cancel, drag and drop."""

from __future__ import annotations

import json

import pytest
from PySide6.QtCore import QMimeData, QPointF, Qt, QUrl
from PySide6.QtGui import QDropEvent

from app.ui.background import Background
from app.ui.gguf_panel import FoundModelsPanel
from tests.gguf_files import write_gguf
from tests.test_gguf_discovery import build_library, ggufs, home  # noqa: F401 - fixtures

IMPORT_TIMEOUT = 120_000


@pytest.fixture
def panel(qtbot, home):  # noqa: F811 - fixture from the discovery tests
    bg = Background()
    p = FoundModelsPanel(bg)
    bg.setParent(p)
    qtbot.addWidget(p)
    yield p
    p.shutdown()
    bg.shutdown()


def _row(panel, text: str):
    for i in range(panel.tree.topLevelItemCount()):
        item = panel.tree.topLevelItem(i)
        if item.text(0) == text:
            return item
    raise AssertionError(f"{text!r} not listed: {[f.name for f in panel.found]}")


def test_found_models_import_in_one_action(qtbot, panel, home, ggufs):  # noqa: F811
    from app.checkpoints.gguf_import import converted_from
    from app.checkpoints.store import Store

    build_library(home, ggufs)
    with qtbot.waitSignal(panel.found_listed, timeout=20_000):
        panel.refresh(entries=[])
    assert "6 GGUF models found" in panel.status.text()
    gone = _row(panel, "gone:1b")
    assert gone.isDisabled() and "missing" in gone.text(5)
    base = _row(panel, "someone_tiny-base-GGUF_tiny-base")
    assert "base model" in base.text(5) and base.text(1) == "llama.cpp cache"
    panel.tree.setCurrentItem(_row(panel, "tiny:latest"))
    assert panel.import_btn.isEnabled()
    with qtbot.waitSignal(panel.imported, timeout=IMPORT_TIMEOUT) as got:
        panel.import_selected()
        assert not panel.bar.isHidden() and not panel.import_btn.isEnabled()
    assert got.args == ["tiny-latest"] and "Imported tiny-latest" in panel.status.text()
    entry = Store().get("tiny-latest")
    assert converted_from(entry.path)["found_in"] == "Ollama"
    with qtbot.waitSignal(panel.found_listed, timeout=20_000):
        panel.refresh(entries=Store().list())
    assert _row(panel, "tiny:latest").text(5) == "imported as tiny-latest"


def test_dropped_gguf_is_imported_and_errors_are_plain(qtbot, panel, tmp_path):
    files, _, _ = write_gguf(tmp_path / "dropped.gguf", chat_template=None)
    mime = QMimeData()
    mime.setUrls([QUrl.fromLocalFile(str(files[0]))])
    drop = QDropEvent(QPointF(5, 5), Qt.DropAction.CopyAction, mime,
                      Qt.MouseButton.NoButton, Qt.KeyboardModifier.NoModifier)  # fmt: skip
    with qtbot.waitSignal(panel.imported, timeout=IMPORT_TIMEOUT) as got:
        panel.dropEvent(drop)
    assert got.args == ["dropped"] and "base model" in panel.status.text()
    with qtbot.waitSignal(panel.import_failed, timeout=IMPORT_TIMEOUT) as failed:
        panel.import_file(str(files[0]))  # the same file again
    assert failed.args[0] == "dropped.gguf is already imported as dropped."
    assert "Traceback" not in panel.status.text()


def test_cancel_removes_the_partial_import(qtbot, panel, tmp_path, monkeypatch):
    from app.checkpoints.store import Store

    big = write_gguf(tmp_path / "slow.gguf", config_overrides={"num_hidden_layers": 32,
                     "hidden_size": 256, "intermediate_size": 1024})[0][0]  # fmt: skip
    panel.import_file(str(big))
    qtbot.waitUntil(lambda: panel.bar.value() > 0, timeout=IMPORT_TIMEOUT)
    with qtbot.waitSignal(panel.import_failed, timeout=IMPORT_TIMEOUT) as failed:
        panel.cancel_import()
    assert "cancelled" in failed.args[0]
    models = Store().models_dir
    assert not models.exists() or not any(models.iterdir())
    assert json.dumps(failed.args)  # a plain string crosses the signal


def test_draft_picker_offers_only_working_pairs_with_reasons(qtbot, tmp_path, tiny_models):
    """Real pairing suggestions for the tiny target: the same-tokenizer draft is offered with
    its reason, the permuted one is not; kinds the engine cannot run are disabled with why."""
    from app.checkpoints.pairing import suggest_drafts
    from app.checkpoints.store import Store
    from app.ui.draft_picker import DraftPicker, options_from, uses_draft_model

    store = Store(data_dir=tmp_path / "data", hf_cache=tmp_path / "hf")
    store.import_folder(tiny_models.draft, name="good-draft")
    store.import_folder(tiny_models.permuted_draft, name="other-tokenizer")
    sugg = suggest_drafts(tiny_models.target, store=store)
    picker = DraftPicker()
    qtbot.addWidget(picker)
    kinds = {"prompt-lookup": None, "mtp": "the target has no MTP head", "full-model": None}
    picker.set_options(options_from(sugg, kinds), kind="prompt-lookup")
    titles = [o.title for o in picker.options]
    assert any(t.startswith("good-draft") for t in titles)
    assert not any("other-tokenizer" in t for t in titles)
    assert picker.current().kind == "prompt-lookup"
    good = next(o for o in picker.options if o.title.startswith("good-draft"))
    assert good.enabled and good.reason and good.path == str(tiny_models.draft.resolve())
    with qtbot.waitSignal(picker.chosen) as got:
        picker.select("full-model", good.path)
    assert got.args == ["full-model", good.path] and uses_draft_model(got.args[0])
    assert picker.toolTip() == good.reason
    assert not any(o.kind == "mtp" and o.enabled for o in picker.options)  # no heads here
    assert not uses_draft_model("prompt-lookup")
    blocked = {"prompt-lookup": "it is switched off for this test"}
    picker.set_options(options_from(sugg, blocked), kind="prompt-lookup")
    pl = next(o for o in picker.options if o.kind == "prompt-lookup")
    assert not pl.enabled and pl.reason == "it is switched off for this test"
    assert picker.current().kind == "none"  # a kind that cannot run is never selected


def test_chat_sidebar_picks_the_draft_and_the_bar_follows_the_kind(qtbot, tmp_path, tiny_models):
    from app.checkpoints.store import Store
    from app.ui.chat_store import ChatStore
    from app.ui.main_window import AppContext, MainWindow
    from app.ui.settings import Settings, SettingsStore

    store = Store(data_dir=tmp_path / "data", hf_cache=tmp_path / "hf")
    store.import_folder(tiny_models.draft, name="good-draft")
    store.import_folder(tiny_models.permuted_draft, name="other-tokenizer")
    settings = Settings(target=str(tiny_models.target), draft="", draft_kind="prompt-lookup")
    ctx = AppContext(SettingsStore(tmp_path / "settings.json"), settings,
                     ChatStore(tmp_path / "chat.sqlite3"), checkpoint_store=store,
                     autoload=False)  # fmt: skip
    w = MainWindow(ctx)
    qtbot.addWidget(w)
    w.show()
    section = w.chat.draft_section
    try:
        with qtbot.waitSignal(section.options_shown, timeout=60_000,
                              check_params_cb=lambda: section.suggestions is not None):  # fmt: skip
            w.load_pair(str(tiny_models.target), "")
        titles = [o.title for o in section.picker.options]
        assert any(t.startswith("good-draft") for t in titles)
        assert not any("other-tokenizer" in t for t in titles)
        assert section.picker.current().kind == "prompt-lookup"
        assert "draft" not in w.chat.model_label.text()
        good = next(i for i, o in enumerate(section.picker.options) if o.title.startswith("good"))
        with qtbot.waitSignal(w.client.model_state, timeout=60_000):
            section.picker.setCurrentIndex(good)  # loads target + this draft
        qtbot.waitUntil(lambda: "+ draft" in w.chat.model_label.text(), timeout=5_000)
        assert w.chat.spec_combo.kind() == "full-model" and settings.draft_kind == "full-model"
        assert section.reason.text() == section.picker.options[good].reason
        w.chat.spec_combo.set_kind("prompt-lookup")  # the bar drops the draft it no longer uses
        assert "+ draft" not in w.chat.model_label.text()
        assert section.picker.current().kind == "prompt-lookup"
    finally:
        w.close()
        ctx.chat_store.close()


def test_models_view_imports_a_found_gguf_and_lists_it(qtbot, tmp_path, home, ggufs):  # noqa: F811
    from app.checkpoints.store import Store
    from app.ui.chat_store import ChatStore
    from app.ui.main_window import AppContext, MainWindow
    from app.ui.settings import Settings, SettingsStore

    build_library(home, ggufs)
    store = Store(data_dir=tmp_path / "data", hf_cache=home / ".cache" / "huggingface" / "hub")
    ctx = AppContext(SettingsStore(tmp_path / "settings.json"), Settings(),
                     ChatStore(tmp_path / "chat.sqlite3"), checkpoint_store=store,
                     autoload=False)  # fmt: skip
    w = MainWindow(ctx)
    qtbot.addWidget(w)
    w.show()
    models = w.models
    try:
        w.show_view("Models")
        qtbot.waitUntil(lambda: len(models.found.found) == 6, timeout=30_000)
        models.found.tree.setCurrentItem(_row(models.found, "someone/Tiny-GGUF/Tiny-Chat-Q8_0"))
        with qtbot.waitSignal(models.listed, timeout=IMPORT_TIMEOUT):  # listed again after
            with qtbot.waitSignal(models.found.imported, timeout=IMPORT_TIMEOUT):
                models.found.import_selected()
        assert models.selected_name() == "Tiny-Chat-Q8_0"
        row = next(
            r
            for r in range(models.table.rowCount())
            if models.table.item(r, 0).data(Qt.ItemDataRole.UserRole) == "Tiny-Chat-Q8_0"
        )
        assert models.table.item(row, 5).text() == "GGUF · LM Studio"
        assert models.table.item(row, 1).text() == "chat model"
        qtbot.waitUntil(lambda: _row(models.found, "someone/Tiny-GGUF/Tiny-Chat-Q8_0").text(5)
                        == "imported as Tiny-Chat-Q8_0", timeout=30_000)  # fmt: skip
    finally:
        w.close()
        ctx.chat_store.close()
