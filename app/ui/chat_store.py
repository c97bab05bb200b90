"""Conversations in SQLite under ``user_data_dir()`` (plain Python; used on the GUI thread).

Every write commits at once: a user message is stored when sent, an assistant reply is
created when its stream starts, updated with the partial text about once a second while it
streams, and written in full when it ends. A reply interrupted by a crash is found on the next
start with ``status='streaming'`` and shown as interrupted (its text up to the last update).
"""

from __future__ import annotations

import json
import os
import sqlite3
import time
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


def default_db_path() -> Path:
    from app.resources import user_data_dir

    return user_data_dir() / "conversations.sqlite3"


class ChatStore:
    """``problem`` is set (a plain sentence) when a damaged database was set aside."""

    def __init__(self, path: Path | None = None):
        self.path = path or default_db_path()
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self.problem: str | None = None
        try:
            self.db = self._open()
        except sqlite3.DatabaseError as exc:  # not a database, or damaged pages
            backup = self._set_aside()
            self.problem = (f"The conversation database {self.path} was damaged ({exc}); it was "
                            f"kept as {backup} and a new, empty one was started.")
            self.db = self._open()

    def _open(self) -> sqlite3.Connection:
        db = sqlite3.connect(str(self.path), isolation_level=None)  # autocommit
        try:
            db.execute("PRAGMA journal_mode=WAL")
            db.execute("PRAGMA synchronous=NORMAL")
            db.execute("PRAGMA foreign_keys=ON")
            check = db.execute("PRAGMA quick_check").fetchone()
            if check is None or check[0] != "ok":
                raise sqlite3.DatabaseError(f"integrity check: {check[0] if check else '?'}")
            db.executescript(SCHEMA)
            db.execute(f"PRAGMA user_version={USER_VERSION}")
            # replies cut off by a crash or a kill: keep their text, mark them
            db.execute("UPDATE messages SET status='interrupted' WHERE status='streaming'")
        except BaseException:
            db.close()
            raise
        return db

    def _set_aside(self) -> Path:
        backup = self.path.with_name(f"{self.path.name}.damaged-{time.strftime('%Y%m%d-%H%M%S')}")
        for suffix in ("", "-wal", "-shm"):
            src = Path(str(self.path) + suffix)
            if src.exists():
                os.replace(src, Path(str(backup) + suffix))
        return backup

    def close(self) -> None:
        self.db.close()

    # conversations
    def conversations(self) -> list[Conversation]:
        rows = self.db.execute(
            "SELECT id, title, system_prompt, updated FROM conversations ORDER BY updated DESC"
        ).fetchall()
        return [Conversation(*r) for r in rows]

    def create_conversation(self, title: str = "New chat", system_prompt: str = "") -> int:
        now = time.time()
        cur = self.db.execute(
            "INSERT INTO conversations(title, system_prompt, created, updated) VALUES (?,?,?,?)",
            (title, system_prompt, now, now),
        )
        return int(cur.lastrowid)

    def conversation(self, conv_id: int) -> Conversation | None:
        row = self.db.execute(
            "SELECT id, title, system_prompt, updated FROM conversations WHERE id=?", (conv_id,)
        ).fetchone()
        return Conversation(*row) if row else None

    def rename(self, conv_id: int, title: str) -> None:
        self.db.execute("UPDATE conversations SET title=? WHERE id=?", (title, conv_id))

    def set_system_prompt(self, conv_id: int, text: str) -> None:
        self.db.execute("UPDATE conversations SET system_prompt=? WHERE id=?", (text, conv_id))

    def delete_conversation(self, conv_id: int) -> None:
        self.db.execute("DELETE FROM conversations WHERE id=?", (conv_id,))

    def _touch(self, conv_id: int) -> None:
        self.db.execute("UPDATE conversations SET updated=? WHERE id=?", (time.time(), conv_id))

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
        cur = self.db.execute(
            "INSERT INTO messages(conversation_id, role, content, segments, stats, status, created)"
            " VALUES (?,?,?,?,?,?,?)",
            (
                conv_id, role, content, json.dumps(segments or []), json.dumps(stats or {}),
                status, time.time(),
            ),
        )
        self._touch(conv_id)
        return int(cur.lastrowid)

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
            self.db.execute(
                "UPDATE messages SET content=?, segments=?, status=? WHERE id=?",
                (content, json.dumps(segments), status, msg_id),
            )
        else:
            self.db.execute(
                "UPDATE messages SET content=?, segments=?, status=?, stats=? WHERE id=?",
                (content, json.dumps(segments), status, json.dumps(stats), msg_id),
            )

    def delete_message(self, msg_id: int) -> None:
        self.db.execute("DELETE FROM messages WHERE id=?", (msg_id,))


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
