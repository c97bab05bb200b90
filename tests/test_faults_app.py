"""App and store faults: SIGKILL while a reply streams, damaged databases and settings, an
unwritable data folder, broken imports, the built-in target, failed selections, geometry."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from app.cli import main
from app.ui.chat_store import ChatStore
from app.ui.settings import Settings, SettingsStore

ROOT = Path(__file__).resolve().parent.parent

WRITER = """
import sys, time
from pathlib import Path
from app.ui.chat_store import ChatStore
store = ChatStore(Path(sys.argv[1]))
conv = store.create_conversation("soak", "be brief")
for i in range(5):
    store.add_message(conv, "user", f"question {i}")
    store.add_message(conv, "assistant", f"answer {i}", segments=[(f"answer {i}", False)])
store.add_message(conv, "user", "tell me a long story")
reply = store.add_message(conv, "assistant", "", status="streaming")
text = ""
for n in range(100000):
    text += f"word{n} "
    store.update_message(reply, content=text, segments=[(text, False)], status="streaming")
    print(n, flush=True)  # after the commit: this much is on disk
    time.sleep(0.005)
"""


def test_kill_9_while_a_reply_streams(tmp_path):
    db = tmp_path / "chat.sqlite3"
    proc = subprocess.Popen([sys.executable, "-c", WRITER, str(db)], cwd=str(ROOT),
                            env=dict(os.environ, PYTHONPATH=str(ROOT)),
                            stdout=subprocess.PIPE, text=True)
    acked = -1
    try:
        for line in proc.stdout:
            acked = int(line)
            if acked >= 40:
                break
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait(timeout=10)
    finally:
        if proc.poll() is None:
            proc.kill()
        proc.stdout.close()
    assert proc.returncode == -signal.SIGKILL and acked >= 40
    store = ChatStore(db)  # the restart
    (conv,) = store.conversations()
    msgs = store.messages(conv.id)
    assert [m.content for m in msgs[:10]] == [
        t for i in range(5) for t in (f"question {i}", f"answer {i}")]
    assert all(m.status == "complete" for m in msgs[:11])
    reply = msgs[-1]
    assert len(msgs) == 12 and reply.status == "interrupted" and store.problem is None
    words = reply.content.split()
    assert len(words) >= acked + 1  # nothing acknowledged was lost
    assert words == [f"word{n}" for n in range(len(words))]  # and nothing garbled
    store.close()


@pytest.mark.parametrize("damage", ["garbage", "truncated"])
def test_damaged_chat_database_is_set_aside(tmp_path, damage):
    db = tmp_path / "chat.sqlite3"
    store = ChatStore(db)
    conv = store.create_conversation("x")
    for i in range(200):
        store.add_message(conv, "user", "hello " * 50 + str(i))
    store.db.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    store.close()
    data = db.read_bytes()
    if damage == "garbage":
        db.write_bytes(b"this is not a database" + data[22:])
    else:
        db.write_bytes(data[:4096] + b"\x00" * 4096 + data[8192: len(data) // 2])
    store = ChatStore(db)
    assert store.problem and "damaged" in store.problem and "kept as" in store.problem
    backups = list(tmp_path.glob("chat.sqlite3.damaged-*"))
    assert backups and backups[0].stat().st_size > 0
    assert store.conversations() == []
    store.add_message(store.create_conversation("new"), "user", "works again")
    store.close()


def test_damaged_settings_file_is_kept_and_defaults_used(tmp_path):
    path = tmp_path / "settings.json"
    path.write_bytes(b'{"theme": "dark", "temperature": 0.3,,,\xff')
    store = SettingsStore(path)
    settings = store.load()
    assert settings == Settings() and store.problem and "default" in store.problem
    assert "JSONDecodeError" not in store.problem and "Errno" not in store.problem
    (backup,) = tmp_path.glob("settings.json.damaged-*")
    assert backup.read_bytes().startswith(b'{"theme": "dark"')
    store.save(settings)
    assert json.loads(path.read_text())["theme"] == "system"
    path.write_text("[1, 2]")
    assert SettingsStore(path).load() == Settings()


@pytest.fixture
def env(tmp_path, monkeypatch):
    monkeypatch.setenv("DRAFTPAIR_DATA_DIR", str(tmp_path / "data"))
    monkeypatch.setenv("HF_HOME", str(tmp_path / "hf"))
    monkeypatch.delenv("HF_HUB_CACHE", raising=False)
    monkeypatch.setenv("DRAFTPAIR_NO_BLAS_FIX", "1")
    return tmp_path


def test_import_of_a_broken_folder_fails_with_the_reason(tiny_target, env, capsys):
    broken = env / "broken model"
    shutil.copytree(tiny_target, broken)
    cfg = json.loads((broken / "config.json").read_text())
    cfg["num_hidden_layers"] = 7
    (broken / "config.json").write_text(json.dumps(cfg))
    assert main(["models", "import", str(broken)]) == 1
    err = capsys.readouterr().err
    assert "would not load" in err and "7 layers" in err and "Traceback" not in err
    assert main(["models", "list", "--json"]) == 0
    assert "broken model" not in capsys.readouterr().out


def test_missing_local_path_is_not_a_repo_id(env, capsys, monkeypatch):
    monkeypatch.chdir(env)
    (env / "models").mkdir()
    for argv in (["check", "models/tiny"], ["check", "./tiny"], ["models", "pull", "models/tiny"],
                 ["models", "pull", "./tiny"], ["models", "import", "models/tiny"]):
        assert main(argv) != 0
        err = capsys.readouterr().err
        assert "no such folder" in err and "pull" not in err.split("error:")[1][:60], (argv, err)


def test_rm_demo_refuses_the_built_in_target(env, capsys):
    from app.demo.target import demo_target_dir

    demo = demo_target_dir()
    demo.mkdir(parents=True)
    (demo / "config.json").write_text('{"model_type": "llama"}')
    assert main(["models", "rm", "demo", "--yes"]) == 2
    assert "built-in demo model" in capsys.readouterr().err and demo.exists()
    from app.checkpoints.store import Store, StoreError

    with pytest.raises(StoreError, match="built-in"):
        Store().remove("demo")


@pytest.fixture
def read_only_dir(tmp_path):
    """A folder even root cannot write: a read-only tmpfs (chmod for other users)."""
    mnt = tmp_path / "ro"
    mnt.mkdir()
    if os.geteuid() == 0:
        proc = subprocess.run(["mount", "-t", "tmpfs", "-o", "ro,size=64k", "tmpfs", str(mnt)],
                              capture_output=True, text=True)
        if proc.returncode != 0:
            pytest.skip(f"cannot mount a read-only tmpfs: {proc.stderr.strip()}")
        yield mnt
        subprocess.run(["umount", "-l", str(mnt)], capture_output=True)
    else:
        mnt.chmod(0o500)
        yield mnt
        mnt.chmod(0o700)


def test_unwritable_data_folder_cli_and_gui(read_only_dir, env):
    data = read_only_dir / "DraftPair"
    child_env = dict(os.environ, DRAFTPAIR_DATA_DIR=str(data), PYTHONPATH=str(ROOT),
                     DRAFTPAIR_NO_BLAS_FIX="1", QT_QPA_PLATFORM="offscreen",
                     DRAFTPAIR_CONFIG_DIR=str(env / "config"))
    cli = subprocess.run([sys.executable, "-m", "app", "models", "list"], env=child_env,
                         capture_output=True, text=True, timeout=120, cwd=str(ROOT))
    assert cli.returncode == 1 and "Traceback" not in cli.stderr
    assert str(data) in cli.stderr and "DRAFTPAIR_DATA_DIR" in cli.stderr
    gui = subprocess.run([sys.executable, "-m", "app", "gui", "--smoke-test", "hi"],
                         env=child_env, capture_output=True, text=True, timeout=120,
                         cwd=str(ROOT))
    assert gui.returncode == 1 and "Traceback" not in gui.stderr, gui.stderr
    assert "SMOKE-RESULT" in gui.stdout and str(data) in gui.stdout


def test_startup_failure_window_says_what_to_do(qtbot, read_only_dir, monkeypatch):
    monkeypatch.setenv("DRAFTPAIR_DATA_DIR", str(read_only_dir / "DraftPair"))
    from app.resources import user_data_dir
    from app.ui.app import startup_failure_dialog

    with pytest.raises(Exception) as err:
        user_data_dir()
    box = startup_failure_dialog(err.value)
    qtbot.addWidget(box)
    box.show()
    assert str(read_only_dir) in box.text() and "DRAFTPAIR_DATA_DIR" in box.informativeText()
    assert box.detailedText()
    box.close()


def test_failed_selection_is_never_saved(qtbot, tmp_path, tiny_models):
    from app.checkpoints.store import Store
    from app.ui.main_window import AppContext, MainWindow

    settings_path = tmp_path / "cfg" / "settings.json"
    good = str(tiny_models.target)
    broken = tmp_path / "broken"
    shutil.copytree(tiny_models.target, broken)
    (broken / "model.safetensors").write_bytes(b"")
    ctx = AppContext(SettingsStore(settings_path), Settings(target=good, draft=""),
                     ChatStore(tmp_path / "chat.sqlite3"),
                     checkpoint_store=Store(data_dir=tmp_path / "data", hf_cache=tmp_path / "hf"),
                     autoload=False)
    w = MainWindow(ctx)
    qtbot.addWidget(w)
    try:
        with qtbot.waitSignal(w.client.load_failed, timeout=60_000) as failed:
            w._use_pair(str(broken), "")
        assert "truncated" in failed.args[0]
        qtbot.wait(50)
        w.save_settings()
        assert json.loads(settings_path.read_text())["target"] == good
        with qtbot.waitSignal(w.client.model_state, timeout=60_000):
            w._use_pair(str(tiny_models.draft), "")
        w.save_settings()
        assert json.loads(settings_path.read_text())["target"] == str(tiny_models.draft)
        # the window geometry lives next to the settings file (config-folder override)
        w._qsettings().setValue("window/geometry", w.saveGeometry())
        w._qsettings().sync()
        assert (settings_path.parent / "window.ini").is_file()
    finally:
        w.close()
        ctx.chat_store.close()


def test_window_opens_on_damaged_profile_with_a_message(qtbot, tmp_path):
    """Garbage in both the chat database and the settings file: the window opens, says so,
    and keeps copies of both."""
    from app.ui.app import build_window

    profile = tmp_path / "profile"
    profile.mkdir()
    (profile / "settings.json").write_text("{ not json")
    (profile / "conversations.sqlite3").write_bytes(b"garbage" * 500)
    w = build_window(autoload=False, data_dir=profile)
    qtbot.addWidget(w)
    try:
        text = " ".join(w.banner.messages)
        assert "settings file" in text and "conversation database" in text and "kept" in text
        assert list(profile.glob("settings.json.damaged-*"))
        assert list(profile.glob("conversations.sqlite3.damaged-*"))
    finally:
        w.close()
        w.ctx.chat_store.close()
