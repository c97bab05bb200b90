"""Compare against a remote endpoint: a real ``draftpair serve`` on 127.0.0.1 as the
speculation-on side, the real app offscreen as the off side."""

from __future__ import annotations

import pytest
from PySide6.QtCore import Qt

from app.ui.chat_store import ChatStore
from app.ui.main_window import AppContext, MainWindow
from app.ui.settings import Settings, SettingsStore

TIMEOUT = 120_000


@pytest.fixture
def served(tiny_models):
    from app.server.runner import ServerConfig, ServerHandle

    handle = ServerHandle(ServerConfig(model=str(tiny_models.target),
                                       draft=str(tiny_models.draft), port=0))
    handle.start()
    yield handle
    handle.stop()


@pytest.fixture
def window(qtbot, tmp_path, tiny_models):
    from app.checkpoints.store import Store

    ctx = AppContext(
        SettingsStore(tmp_path / "settings.json"),
        Settings(target=str(tiny_models.target), draft=""),
        ChatStore(tmp_path / "chat.sqlite3"),
        checkpoint_store=Store(data_dir=tmp_path / "data", hf_cache=tmp_path / "hf"),
        autoload=False,
    )
    w = MainWindow(ctx)
    qtbot.addWidget(w)
    w.show()
    with qtbot.waitSignal(w.client.model_state, timeout=TIMEOUT):
        w.load_pair(str(tiny_models.target), "")
    yield w
    w.close()
    assert not w.client.engine_thread.isRunning()
    ctx.chat_store.close()


def test_compare_against_a_draftpair_server(qtbot, window, served):
    cmp = window.compare
    window.show_view("Compare")
    cmp.side.set_remote(served.url)
    assert not cmp.kind_combo.isEnabled()  # the endpoint speculates with its own settings
    assert served.url.split("//")[1] + " (remote)" in cmp.on_title.text()
    cmp.runs_spin.setValue(1)
    cmp.max_spin.setValue(24)
    with qtbot.waitSignal(cmp.compare_finished, timeout=TIMEOUT) as blocker:
        qtbot.mouseClick(cmp.run_btn, Qt.MouseButton.LeftButton)
    s = blocker.args[0]
    assert s is not None, window.banner.messages
    assert s.remote == served.url.split("//")[1] and s.rate_source == "server"
    # greedy on both sides, same target: the server's speculation keeps the text exact
    assert s.compared_by == "tokens" and s.identical and s.compared_tokens == 24
    assert s.kind == served.engine.info.default_kind and s.proposed is not None and s.proposed > 0
    assert s.extra_memory_bytes is None  # another process: not comparable, not zero
    card = cmp.card_body.text()
    assert "On: " + s.remote in card and "not comparable" in card
    assert cmp.off_text.toPlainText() == cmp.on_text.toPlainText()
    assert served.engine.records[-1].finish_reason == "length"


def test_unreachable_endpoint_is_one_sentence(qtbot, window):
    import socket

    with socket.socket() as sock:  # a port nobody listens on
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    cmp = window.compare
    cmp.side.set_remote(f"http://127.0.0.1:{port}")
    cmp.runs_spin.setValue(1)
    cmp.max_spin.setValue(8)
    with qtbot.waitSignal(cmp.compare_finished, timeout=TIMEOUT):
        qtbot.mouseClick(cmp.run_btn, Qt.MouseButton.LeftButton)
    message = window.banner.messages[-1]
    assert "Cannot reach 127.0.0.1" in message and "connection refused" in message
    assert "Traceback" not in message


def test_server_switch_serves_the_loaded_pair(qtbot, window):
    import json
    import urllib.request

    window.server.port = 0  # any free port
    with qtbot.waitSignal(window.server.url_changed, timeout=TIMEOUT) as blocker:
        window.server_action.setChecked(True)
    url = blocker.args[0]
    assert url.startswith("http://127.0.0.1:")
    assert window.status_server.text() == f"Server: {url}/v1"
    with urllib.request.urlopen(url + "/v1/models", timeout=10) as resp:
        card = json.loads(resp.read())["data"][0]
    assert card["id"] == "tiny-target" and card["draftpair"]["draft"] is None
    with qtbot.waitSignal(window.server.url_changed, timeout=TIMEOUT) as blocker:
        window.server_action.setChecked(False)
    assert blocker.args[0] == "" and window.status_server.text() == ""
    assert not window.server.running


def test_the_worker_ends_a_job_by_its_event_source(qtbot):
    from app.engine.events import DoneEvent, GenerationRequest
    from app.remote.client import RemoteRequest
    from app.remote.results import RemoteDone
    from app.ui.worker import REMOTE, EngineWorker, Job

    worker = EngineWorker()
    got = []
    worker.job_finished.connect(lambda _id, done: got.append(done))
    remote = Job(request=RemoteRequest(url="http://127.0.0.1:9"), source=REMOTE)
    remote.cancel.set()  # stopped before it started: nothing is contacted
    worker.generate(remote)
    assert isinstance(got[-1], RemoteDone) and got[-1].finish_reason == "cancelled"
    assert got[-1].timings.endpoint == "127.0.0.1:9" and got[-1].timings.predicted_n is None
    with pytest.raises(ValueError, match="source"):
        Job(request=None, source="elsewhere")
    local = Job(request=GenerationRequest(prompt="Hi"))  # the engine's, by default
    local.cancel.set()
    worker.generate(local)
    assert isinstance(got[-1], DoneEvent) and got[-1].finish_reason == "cancelled"
