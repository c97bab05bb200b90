"""A full disk is not a damaged database: on a real, tiny tmpfs that fills up, the chats are
never renamed or replaced, what is typed is kept in memory and written back once space is
freed, the app says so in one sentence, and a window started on a full disk opens read-only
with every chat in it."""

from __future__ import annotations

import errno
import sqlite3
import subprocess
from pathlib import Path

import pytest

from app.ui import chat_store as cs
from app.ui.chat_store import ChatStore


@pytest.fixture
def small_disk(tmp_path):
    mount = tmp_path / "disk"
    mount.mkdir()
    done = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=1m", "tmpfs", str(mount)],
                          capture_output=True)
    if done.returncode != 0:
        pytest.skip("a tmpfs cannot be mounted here (needs root)")
    try:
        yield mount
    finally:
        subprocess.run(["umount", "-l", str(mount)], check=False)


def fill(folder: Path) -> Path:
    """Fills the disk to the last byte; returns the filler to delete."""
    filler = folder / "filler"
    with open(filler, "wb", buffering=0) as fh:
        for chunk in (4096, 1):  # whole pages, then the last bytes
            try:
                while True:
                    fh.write(b"\1" * chunk)
            except OSError as exc:
                assert exc.errno == errno.ENOSPC
    return filler


def _chat(db: Path, n: int = 16) -> int:
    store = ChatStore(db)
    conv = store.create_conversation("kept")
    for i in range(n):
        store.add_message(conv, "user" if i % 2 == 0 else "assistant", f"message {i}")
    store.close()
    return conv


def _integrity(db: Path) -> str:
    """SQLite's integrity check, read-only (on a full disk too)."""
    for mode in ("?mode=ro", "?immutable=1"):
        try:
            con = sqlite3.connect(db.resolve().as_uri() + mode, uri=True)
            try:
                return con.execute("PRAGMA integrity_check").fetchone()[0]
            finally:
                con.close()
        except sqlite3.OperationalError:
            continue
    raise AssertionError(f"{db} cannot be opened at all")


def test_start_on_a_full_disk_keeps_the_database_and_loses_nothing(small_disk):
    db = small_disk / "conversations.sqlite3"
    conv = _chat(db)
    filler = fill(small_disk)
    store = ChatStore(db)
    assert store.unsaved and "the disk holding" in store.problem and " is full" in store.problem
    assert store.problem.startswith("Chats opened read-only because ")
    assert not list(small_disk.glob("*.damaged-*")) and db.exists()
    assert [m.content for m in store.messages(conv)] == [f"message {i}" for i in range(16)]
    store.add_message(conv, "user", "typed while the disk was full")  # no error, not lost
    new = store.create_conversation("new while full")
    store.add_message(new, "user", "also kept")
    assert not store.retry()  # still full: stays in memory, the disk copy untouched
    assert _integrity(db) == "ok"
    filler.unlink()
    assert store.retry() and not store.unsaved and store.problem is None
    store.close()
    again = ChatStore(db)
    assert again.problem is None
    texts = [m.content for m in again.messages(conv)]
    assert len(texts) == 17 and texts[-1] == "typed while the disk was full"
    assert [m.content for m in again.messages(new)] == ["also kept"]
    again.close()
    assert _integrity(db) == "ok"


def test_disk_filling_while_chatting_keeps_every_word(small_disk, monkeypatch):
    db = small_disk / "conversations.sqlite3"
    conv = _chat(db, 4)
    heard: list[str | None] = []
    store = ChatStore(db, on_saving=heard.append)
    assert not store.unsaved
    filler = fill(small_disk)
    reply = None
    for i in range(40):  # a long reply streaming while nothing can be written
        if reply is None:
            reply = store.add_message(conv, "assistant", "", status="streaming")
        store.update_message(reply, content="word " * (i * 200), segments=[], status="streaming")
    store.update_message(reply, content="the end " * 2000, segments=[], status="complete")
    assert store.unsaved and heard and heard[0].startswith("Chats are not being saved because ")
    assert not list(small_disk.glob("*.damaged-*"))
    monkeypatch.setattr(cs, "RETRY_SECONDS", 0.0)
    filler.unlink()
    store.rename(conv, "renamed after space came back")  # the next write saves everything
    assert not store.unsaved and heard[-1] is None
    store.close()
    again = ChatStore(db)
    msgs = again.messages(conv)
    assert msgs[-1].content == "the end " * 2000 and msgs[-1].status == "complete"
    assert again.conversation(conv).title == "renamed after space came back"
    again.close()


def test_a_read_only_disk_is_not_damage(small_disk):
    db = small_disk / "conversations.sqlite3"
    conv = _chat(db)
    subprocess.run(["mount", "-o", "remount,ro", str(small_disk)], check=True)
    try:
        store = ChatStore(db)
        assert store.unsaved and "cannot be written (a read-only disk or folder)" in store.problem
        assert len(store.messages(conv)) == 16 and not list(small_disk.glob("*.damaged-*"))
        store.add_message(conv, "user", "kept in memory")
        assert len(store.messages(conv)) == 17 and not store.retry()
        store.close()
        assert _integrity(db) == "ok"
    finally:
        subprocess.run(["mount", "-o", "remount,rw", str(small_disk)], check=False)


def test_the_window_opens_read_only_on_a_full_disk_and_says_so(qtbot, small_disk):
    from app.ui.app import build_window

    profile = small_disk / "profile"
    profile.mkdir()
    conv = _chat(profile / "conversations.sqlite3")
    filler = fill(small_disk)
    w = build_window(autoload=False, data_dir=profile)
    qtbot.addWidget(w)
    try:
        text = " ".join(w.banner.messages)
        assert "Chats opened read-only because the disk holding" in text, text
        assert [c.title for c in w.ctx.chat_store.conversations()] == ["kept"]
        assert len(w.ctx.chat_store.messages(conv)) == 16
        assert not list(profile.glob("*.damaged-*"))
        filler.unlink()
        assert w.ctx.chat_store.retry()
        qtbot.waitUntil(lambda: "Chats are saved again" in " ".join(w.banner.messages))
    finally:
        w.close()
        w.ctx.chat_store.close()
