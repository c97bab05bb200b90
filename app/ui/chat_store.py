"""Conversations in SQLite under ``user_data_dir()`` (plain Python; used on the GUI thread).

Every write commits at once: a user message is stored when sent, an assistant reply is
created when its stream starts, updated with the partial text about once a second while it
streams, and written in full when it ends. A reply interrupted by a crash is found on the next
start with ``status='streaming'`` and shown as interrupted (its text up to the last update).
"""

from __future__ import annotations

import errno
import json
import os
import sqlite3
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

SCHEMA = """
CREATE TABLE IF NOT EXISTS conversations (
    id INTEGER PRIMARY KEY,
    title TEXT NOT NULL,
    system_prompt TEXT NOT NULL DEFAULT '',
    created REAL NOT NULL,
    updated REAL NOT NULL
);
CREATE TABLE IF NOT EXISTS messages (
    id INTEGER PRIMARY KEY,
    conversation_id INTEGER NOT NULL REFERENCES conversations(id) ON DELETE CASCADE,
    role TEXT NOT NULL,
    content TEXT NOT NULL,
    segments TEXT NOT NULL DEFAULT '[]',
    stats TEXT NOT NULL DEFAULT '{}',
    status TEXT NOT NULL DEFAULT 'complete',
    created REAL NOT NULL
);
CREATE INDEX IF NOT EXISTS messages_by_conversation ON messages(conversation_id, id);
"""

USER_VERSION = 1


@dataclass
class Message:
    id: int
    role: str  # user | assistant
    content: str
    segments: list[tuple[str, bool]] = field(default_factory=list)  # (text, from_draft)
    stats: dict[str, Any] = field(default_factory=dict)
    # complete | streaming | cancelled | error | interrupted | refused (a message of the person
    # the model could not take: left out of later prompts until edited or sent again)
    status: str = "complete"


@dataclass
class Conversation:
    id: int
    title: str
    system_prompt: str
    updated: float


class _Done:
    """What a write returns after the chats moved back to disk (its row id kept)."""

    def __init__(self, lastrowid: int | None):
        self.lastrowid = lastrowid


def _row_id(cur: sqlite3.Cursor | _Done) -> int:
    """The id of the row an INSERT just wrote."""
    if cur.lastrowid is None:
        raise sqlite3.OperationalError("the insert wrote no row")
    return int(cur.lastrowid)


def default_db_path() -> Path:
    from app.resources import user_data_dir

    return user_data_dir() / "conversations.sqlite3"


# SQLite's primary result codes (``sqlite_errorcode & 0xff``): only these mean the file is
# damaged; a full disk (13), an I/O error (10), a read-only file (8), a file that cannot be
# opened (14) or a lock (5, 6) leave an intact database that must be kept as it is.
_DAMAGED_CODES = {11, 26}  # SQLITE_CORRUPT, SQLITE_NOTADB
RETRY_SECONDS = 5.0


class DamagedDatabase(sqlite3.DatabaseError):
    """The integrity check failed: the file is damaged (not merely unwritable)."""


def is_damaged(exc: BaseException) -> bool:
    if isinstance(exc, DamagedDatabase):
        return True
    code = getattr(exc, "sqlite_errorcode", None)
    if isinstance(code, int):
        return (code & 0xFF) in _DAMAGED_CODES
    text = str(exc).lower()
    return "malformed" in text or "not a database" in text


def _why_unwritable(path: Path, exc: BaseException) -> str:
    code = getattr(exc, "sqlite_errorcode", None)
    primary = code & 0xFF if isinstance(code, int) else None
    if primary == 13 or getattr(exc, "errno", None) == errno.ENOSPC or "full" in str(exc).lower():
        return f"the disk holding {path} is full"
    if primary in (8, 3) or getattr(exc, "errno", None) in (errno.EROFS, errno.EACCES,
                                                             errno.EPERM):
        return f"{path} cannot be written (a read-only disk or folder)"
    if primary in (5, 6):
        return f"{path} is locked by another program"
    return f"{path} cannot be written right now"


def _probe_write(folder: Path, size: int = 256 << 10) -> None:
    """OSError when ``size`` bytes cannot be written in ``folder`` (a full or read-only disk);
    the probe file is removed either way."""
    fd, name = tempfile.mkstemp(prefix=".draftpair-space-", dir=folder)
    try:
        with os.fdopen(fd, "wb") as fh:
            fh.write(b"\0" * size)
            fh.flush()
            os.fsync(fh.fileno())
    finally:
        Path(name).unlink(missing_ok=True)


class ChatStore:
    """Conversations on disk; ``problem`` is one plain sentence when something needs saying.

    A damaged database (SQLite says corrupt, or the integrity check fails) is set aside and a
    new one started. A database that merely cannot be written (a full disk, a read-only
    folder, a lock) is never renamed or replaced: the chats are copied into memory, writing
    goes on there (``unsaved`` is True, ``problem`` says why) and every few seconds, and at
    ``retry()``, they are written back, so nothing typed is lost once space is freed.
    ``on_saving(problem_or_None)`` is called when that state changes."""

    def __init__(self, path: Path | None = None,
                 on_saving: Callable[[str | None], None] | None = None):
        self.path = path or default_db_path()
        self.problem: str | None = None
        self.unsaved = False
        self.on_saving = on_saving
        self._may_overwrite = True  # False when the disk copy could not be read at all
        self._last_try = 0.0
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            _probe_write(self.path.parent)  # a full disk is found now, not at the first Send
            self.db = self._open()
        except (sqlite3.Error, OSError) as exc:
            if not is_damaged(exc):
                self._start_in_memory(exc)
                return
            backup = self._set_aside()
            self.problem = (f"The conversation database {self.path} was damaged; it was kept "
                            f"as {backup} and a new, empty one was started.")
            try:
                self.db = self._open()
            except (sqlite3.Error, OSError) as again:
                self._start_in_memory(again)

    def _open(self) -> sqlite3.Connection:
        db = sqlite3.connect(str(self.path), isolation_level=None)  # autocommit
        try:
            check = db.execute("PRAGMA quick_check").fetchone()  # reads only
            if check is None or check[0] != "ok":
                raise DamagedDatabase(f"integrity check: {check[0] if check else '?'}")
            db.execute("PRAGMA journal_mode=WAL")
            db.execute("PRAGMA synchronous=NORMAL")
            db.execute("PRAGMA foreign_keys=ON")
            db.executescript(SCHEMA)
            if db.execute("PRAGMA user_version").fetchone()[0] != USER_VERSION:
                db.execute(f"PRAGMA user_version={USER_VERSION}")
            # replies cut off by a crash or a kill: keep their text, mark them
            db.execute("UPDATE messages SET status='interrupted' WHERE status='streaming'")
        except BaseException:
            db.close()
            raise
        return db

    def _read_only_copy(self, into: sqlite3.Connection) -> bool:
        """Copies the database on disk into ``into`` without writing anything; False when it
        cannot be read (then it must never be overwritten from memory)."""
        if not self.path.exists():
            return True
        uri = self.path.resolve().as_uri()
        for mode in ("?mode=ro", "?immutable=1"):
            try:
                src = sqlite3.connect(uri + mode, uri=True)
                try:
                    src.backup(into)
                finally:
                    src.close()
                return True
            except sqlite3.Error:
                continue
        return False

    def _start_in_memory(self, exc: BaseException) -> None:
        mem = sqlite3.connect(":memory:", isolation_level=None)
        self._may_overwrite = self._read_only_copy(mem)
        mem.execute("PRAGMA foreign_keys=ON")
        mem.executescript(SCHEMA)
        mem.execute("UPDATE messages SET status='interrupted' WHERE status='streaming'")
        self.db = mem
        self._went_unsaved(exc, starting=True)

    def _went_unsaved(self, exc: BaseException, *, starting: bool = False) -> None:
        self.unsaved = True
        self._last_try = time.monotonic()
        why = _why_unwritable(self.path, exc)
        if not self._may_overwrite:
            self.problem = (f"The conversations cannot be read or saved ({why}): chats in this "
                            "session are kept in memory only, and the file was left as it is.")
        elif starting:
            self.problem = (f"Chats opened read-only because {why}: new messages are kept in "
                            "memory and saved as soon as it can be written.")
        else:
            self.problem = (f"Chats are not being saved because {why}: new messages are kept in "
                            "memory and saved as soon as it can be written.")
        if self.on_saving is not None:
            self.on_saving(self.problem)

    def retry(self) -> bool:
        """Writes the chats kept in memory back to disk; True when everything is saved."""
        if not self.unsaved:
            return True
        self._last_try = time.monotonic()
        if not self._may_overwrite:
            return False
        try:
            disk = self._open()
        except (sqlite3.Error, OSError) as exc:
            if not is_damaged(exc):
                return False
            self._set_aside()
            try:
                disk = self._open()
            except (sqlite3.Error, OSError):
                return False
        try:
            self.db.backup(disk)
        except sqlite3.Error:
            disk.close()
            return False
        self.db.close()
        self.db = disk
        self.unsaved = False
        self.problem = None
        if self.on_saving is not None:
            self.on_saving(None)
        return True

    def _write(self, sql: str, params: tuple[Any, ...] = ()) -> sqlite3.Cursor | _Done:
        """One write; a write the disk refuses moves the chats into memory (never lost)."""
        try:
            cur = self.db.execute(sql, params)
        except sqlite3.Error as exc:
            if self.unsaved or is_damaged(exc) or isinstance(exc, sqlite3.IntegrityError):
                raise
            mem = sqlite3.connect(":memory:", isolation_level=None)
            self.db.backup(mem)  # reading is fine on a full disk
            self.db.close()
            mem.execute("PRAGMA foreign_keys=ON")
            self.db = mem
            self._went_unsaved(exc)
            return self.db.execute(sql, params)
        if self.unsaved and time.monotonic() - self._last_try > RETRY_SECONDS:
            last = cur.lastrowid
            self.retry()
            return _Done(last)
        return cur

    def _set_aside(self) -> Path:
        backup = self.path.with_name(f"{self.path.name}.damaged-{time.strftime('%Y%m%d-%H%M%S')}")
        for suffix in ("", "-wal", "-shm"):
            src = Path(str(self.path) + suffix)
            if src.exists():
                os.replace(src, Path(str(backup) + suffix))
        return backup

    def close(self) -> None:
        if self.unsaved:
            self.retry()
        self.db.close()

    # conversations
    def conversations(self) -> list[Conversation]:
        rows = self.db.execute(
            "SELECT id, title, system_prompt, updated FROM conversations ORDER BY updated DESC"
        ).fetchall()
        return [Conversation(*r) for r in rows]

    def create_conversation(self, title: str = "New chat", system_prompt: str = "") -> int:
        now = time.time()
        cur = self._write(
            "INSERT INTO conversations(title, system_prompt, created, updated) VALUES (?,?,?,?)",
            (title, system_prompt, now, now),
        )
        return _row_id(cur)

    def conversation(self, conv_id: int) -> Conversation | None:
        row = self.db.execute(
            "SELECT id, title, system_prompt, updated FROM conversations WHERE id=?", (conv_id,)
        ).fetchone()
        return Conversation(*row) if row else None

    def rename(self, conv_id: int, title: str) -> None:
        self._write("UPDATE conversations SET title=? WHERE id=?", (title, conv_id))

    def set_system_prompt(self, conv_id: int, text: str) -> None:
        self._write("UPDATE conversations SET system_prompt=? WHERE id=?", (text, conv_id))

    def delete_conversation(self, conv_id: int) -> None:
        self._write("DELETE FROM conversations WHERE id=?", (conv_id,))

    def _touch(self, conv_id: int) -> None:
        self._write("UPDATE conversations SET updated=? WHERE id=?", (time.time(), conv_id))

    # messages
    def messages(self, conv_id: int) -> list[Message]:
        rows = self.db.execute(
            "SELECT id, role, content, segments, stats, status FROM messages "
            "WHERE conversation_id=? ORDER BY id",
            (conv_id,),
        ).fetchall()
        return [
            Message(r[0], r[1], r[2], [tuple(s) for s in json.loads(r[3])], json.loads(r[4]), r[5])
            for r in rows
        ]

    def add_message(
        self,
        conv_id: int,
        role: str,
        content: str,
        *,
        status: str = "complete",
        segments: list[tuple[str, bool]] | None = None,
        stats: dict[str, Any] | None = None,
    ) -> int:
        cur = self._write(
            "INSERT INTO messages(conversation_id, role, content, segments, stats, status, created)"
            " VALUES (?,?,?,?,?,?,?)",
            (
                conv_id, role, content, json.dumps(segments or []), json.dumps(stats or {}),
                status, time.time(),
            ),
        )
        self._touch(conv_id)
        return _row_id(cur)

    def update_message(
        self,
        msg_id: int,
        *,
        content: str,
        segments: list[tuple[str, bool]],
        status: str,
        stats: dict[str, Any] | None = None,
    ) -> None:
        if stats is None:
            self._write(
                "UPDATE messages SET content=?, segments=?, status=? WHERE id=?",
                (content, json.dumps(segments), status, msg_id),
            )
        else:
            self._write(
                "UPDATE messages SET content=?, segments=?, status=?, stats=? WHERE id=?",
                (content, json.dumps(segments), status, json.dumps(stats), msg_id),
            )

    def delete_message(self, msg_id: int) -> None:
        self._write("DELETE FROM messages WHERE id=?", (msg_id,))


def to_markdown(conv: Conversation, messages: list[Message]) -> str:
    """A conversation as Markdown (stats as a small italic line under each reply)."""
    lines = [f"# {conv.title}", ""]
    if conv.system_prompt:
        lines += ["> **System:** " + conv.system_prompt.replace("\n", "\n> "), ""]
    for m in messages:
        who = "You" if m.role == "user" else "Assistant"
        lines += [f"**{who}:**", "", m.content.rstrip(), ""]
        line = m.stats.get("line")
        if m.role == "assistant" and line:
            lines += [f"*{line}*", ""]
    return "\n".join(lines).rstrip() + "\n"
