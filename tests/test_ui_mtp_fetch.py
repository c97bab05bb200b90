"""The Models view puts back an MTP head a conversion dropped: the option says why MTP cannot
run, one button fetches only the head from the source model (the fake Hub over real HTTP),
and the check then passes."""

from __future__ import annotations

from PySide6.QtCore import Qt

from tests.test_mtp_source import SOURCE, _fresh_copy, _head_of_source, hub, models  # noqa: F401


def _mtp_item(tree):
    root = tree.invisibleRootItem()
    for i in range(root.childCount()):
        group = root.child(i)
        for j in range(group.childCount()):
            data = group.child(j).data(0, Qt.ItemDataRole.UserRole)
            if data and data[0] == "option" and data[1].kind == "mtp":
                return group.child(j)
    return None


def test_models_view_fetches_the_dropped_head(qtbot, tmp_path, models, hub):  # noqa: F811
    import mlx.core as mx

    from app.checkpoints.store import Store
    from app.ui.chat_store import ChatStore
    from app.ui.main_window import AppContext, MainWindow
    from app.ui.settings import Settings, SettingsStore

    conv = _fresh_copy(models, tmp_path)
    store = Store(data_dir=tmp_path / "data", hf_cache=tmp_path / "hf")
    entry = store.import_folder(conv, name="q35-converted")
    ctx = AppContext(SettingsStore(tmp_path / "settings.json"), Settings(),
                     ChatStore(tmp_path / "chat.sqlite3"), checkpoint_store=store,
                     autoload=False)  # fmt: skip
    w = MainWindow(ctx)
    qtbot.addWidget(w)
    w.show()
    m = w.models
    try:
        w.show_view("Models")
        with qtbot.waitSignal(m.listed, timeout=20_000):
            m.refresh()
        with qtbot.waitSignal(m.pairing_shown, timeout=20_000):
            m.select_entry(entry.name)
        item = _mtp_item(m.pair_tree)
        assert item is not None and "dropped" in item.text(1)
        assert m.pairing.fetch_mtp_btn.isHidden()
        m.pair_tree.setCurrentItem(item)
        assert not m.pairing.fetch_mtp_btn.isHidden()
        w.grab().save(str(tmp_path / "models-mtp-dropped.png"))
        with qtbot.waitSignal(m.pairing_shown, timeout=30_000):
            with qtbot.waitSignal(m.download_finished, timeout=30_000) as done:
                qtbot.mouseClick(m.pairing.fetch_mtp_btn, Qt.MouseButton.LeftButton)
        assert done.args[0] == conv / "mtp"
        got = mx.load(str(conv / "mtp" / "model.safetensors"))
        assert set(got) == set(_head_of_source(models))
        assert SOURCE in m.dl_title.text()
        item = _mtp_item(m.pair_tree)
        assert item is not None and "kept beside" in item.text(1)
        assert item.data(0, Qt.ItemDataRole.UserRole)[1].report.works
        m.pair_tree.setCurrentItem(item)
        assert m.pairing.fetch_mtp_btn.isHidden()
        w.grab().save(str(tmp_path / "models-mtp-fetched.png"))
    finally:
        w.close()
        ctx.chat_store.close()
