"""The benchmark task suite: chat requests labelled with the kind of work they ask for.

A suite is a folder with ``suite.json`` (format 1) and the files its messages include::

    {"format": 1, "tasks": [{"id": "fix-typos", "kind": "rewrite", "max_tokens": 200,
      "quick": true, "messages": [{"role": "user", "content": "...{{file:typos.txt}}"}]}]}

``{{file:NAME}}`` is replaced by the text of ``NAME`` in the suite folder (no sub-folders, so a
suite cannot read files outside itself). Loading validates everything and raises ``SuiteError``
with one sentence naming the task and the problem.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from pathlib import Path

from app.errors import DraftPairError

TASK_KINDS = ("rewrite", "code", "math", "prose", "chat")
ROLES = ("system", "user", "assistant")
MAX_TOKENS_LIMIT = 8192
_ID = re.compile(r"^[a-z0-9][a-z0-9-]{0,47}$")
_INCLUDE = re.compile(r"\{\{file:([^}]*)\}\}")


class SuiteError(DraftPairError):
    pass


@dataclass(frozen=True)
class Task:
    id: str
    kind: str  # one of TASK_KINDS
    title: str
    messages: tuple[dict[str, str], ...]
    max_tokens: int
    quick: bool = False


def default_suite_dir() -> Path:
    from app.resources import resource_path

    return resource_path("bench")


def load_suite(path: str | Path | None = None) -> list[Task]:
    """Tasks of the suite at ``path`` (a folder or its suite.json; default: the shipped one)."""
    path = Path(path) if path is not None else default_suite_dir()
    file = path / "suite.json" if path.is_dir() else path
    try:
        data = json.loads(file.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise SuiteError(f"No benchmark suite at {file}.") from None
    except (OSError, ValueError) as exc:
        raise SuiteError(f"The benchmark suite {file} cannot be read: {exc}") from None
    if not isinstance(data, dict) or data.get("format") != 1:
        raise SuiteError(f"{file} is not a format-1 benchmark suite.")
    raw_tasks = data.get("tasks")
    if not isinstance(raw_tasks, list) or not raw_tasks:
        raise SuiteError(f"{file} lists no tasks.")
    tasks: list[Task] = []
    seen: set[str] = set()
    for i, raw in enumerate(raw_tasks):
        task = _parse_task(raw, i, file.parent)
        if task.id in seen:
            raise SuiteError(f"Task id {task.id!r} appears twice in {file.name}.")
        seen.add(task.id)
        tasks.append(task)
    return tasks


def select_tasks(
    tasks: list[Task], *, ids: list[str] | None = None, quick: bool = False
) -> list[Task]:
    """Tasks by id (in suite order), or the quick subset, or all."""
    if ids:
        known = {t.id for t in tasks}
        unknown = [i for i in ids if i not in known]
        if unknown:
            raise SuiteError(
                f"Unknown task {unknown[0]!r}; the suite has {', '.join(t.id for t in tasks)}."
            )
        return [t for t in tasks if t.id in ids]
    if quick:
        chosen = [t for t in tasks if t.quick]
        return chosen or tasks[:1]
    return list(tasks)


def _parse_task(raw: object, index: int, folder: Path) -> Task:
    if not isinstance(raw, dict):
        raise SuiteError(f"Task #{index + 1} is not an object.")
    tid = raw.get("id")
    if not isinstance(tid, str) or not _ID.match(tid):
        raise SuiteError(
            f"Task #{index + 1} needs an id of lowercase letters, digits and dashes (got {tid!r})."
        )
    kind = raw.get("kind")
    if kind not in TASK_KINDS:
        raise SuiteError(f"Task {tid!r} has kind {kind!r}; use one of {', '.join(TASK_KINDS)}.")
    max_tokens = raw.get("max_tokens", 256)
    if not isinstance(max_tokens, int) or isinstance(max_tokens, bool) or not (
        1 <= max_tokens <= MAX_TOKENS_LIMIT
    ):
        raise SuiteError(f"Task {tid!r}: max_tokens must be an integer from 1 to {MAX_TOKENS_LIMIT}.")
    messages = raw.get("messages")
    if not isinstance(messages, list) or not messages:
        raise SuiteError(f"Task {tid!r} has no messages.")
    parsed: list[dict[str, str]] = []
    for m in messages:
        if not isinstance(m, dict) or m.get("role") not in ROLES:
            raise SuiteError(f"Task {tid!r}: each message needs a role ({', '.join(ROLES)}).")
        content = m.get("content")
        if not isinstance(content, str) or not content.strip():
            raise SuiteError(f"Task {tid!r}: a {m['role']} message has no content.")
        parsed.append({"role": m["role"], "content": _expand(content, folder, tid)})
    if parsed[-1]["role"] != "user":
        raise SuiteError(f"Task {tid!r}: the last message must be the user's.")
    title = raw.get("title", tid)
    return Task(
        id=tid,
        kind=kind,
        title=str(title),
        messages=tuple(parsed),
        max_tokens=max_tokens,
        quick=bool(raw.get("quick", False)),
    )


def _expand(content: str, folder: Path, tid: str) -> str:
    def include(match: re.Match[str]) -> str:
        name = match.group(1).strip()
        if not name or "/" in name or "\\" in name or name.startswith("."):
            raise SuiteError(f"Task {tid!r}: {{{{file:{name}}}}} must name a file of the suite folder.")
        try:
            return (folder / name).read_text(encoding="utf-8")
        except OSError:
            raise SuiteError(f"Task {tid!r} includes {name}, which is not in {folder}.") from None

    return _INCLUDE.sub(include, content)
