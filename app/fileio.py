"""Writes that must not be lost or half-done: temp file beside the target, fsync, rename.

A crash leaves either the old file or the new one, never a torn one; the temp file is
hidden (``.NAME-XXXX.SUFFIX.tmp``) and removed when the write fails.
"""

from __future__ import annotations

import errno
import json
import os
import stat
import tempfile
from pathlib import Path


def atomic_write_bytes(path: str | os.PathLike[str], data: bytes) -> None:
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.stem}-", suffix=f"{path.suffix}.tmp",
                               dir=path.parent)
    try:
        with os.fdopen(fd, "wb") as fh:
            fh.write(data)
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def atomic_write_text(path: str | os.PathLike[str], text: str) -> None:
    atomic_write_bytes(path, text.encode("utf-8"))


def atomic_write_json(path: str | os.PathLike[str], obj: object) -> None:
    atomic_write_text(path, json.dumps(obj, indent=2) + "\n")


def commit_file(tmp: str | os.PathLike[str], path: str | os.PathLike[str]) -> None:
    """Make a finished temp file (written by a library) durable, then rename it over ``path``."""
    with open(tmp, "rb+") as fh:
        os.fsync(fh.fileno())
    os.replace(tmp, path)


# -- reading files that came from elsewhere (model folders): ordinary files only -------------

JSON_LIMIT = 1 << 30  # no settings or tokenizer file of a real model comes near 1 GB

_KINDS = ((stat.S_ISFIFO, "a pipe"), (stat.S_ISCHR, "a device"), (stat.S_ISBLK, "a device"),
          (stat.S_ISSOCK, "a socket"), (stat.S_ISDIR, "a folder"))


class NotAFileError(OSError):
    """A path that is not an ordinary file (a pipe, a device, a socket, a folder): reading it
    could block forever or never end, so it is refused. The message is one plain sentence."""

    plain_sentence = True

    def __init__(self, path: Path, kind: str):
        super().__init__(f"{path.name} is {kind}, not an ordinary file, so DraftPair does not "
                         "read it.")
        self.filename = str(path)

    def __str__(self) -> str:
        return str(self.args[0])


def special_kind(path: str | os.PathLike[str]) -> str | None:
    """"a pipe" / "a device" / "a socket" for such a path (links followed), else None."""
    try:
        mode = os.stat(path).st_mode
    except OSError:
        return None
    return next((kind for test, kind in _KINDS[:4] if test(mode)), None)


def special_files(folder: str | os.PathLike[str]) -> list[tuple[str, str]]:
    """(name, kind) of each pipe, device or socket directly in ``folder``."""
    try:
        names = sorted(os.listdir(folder))
    except OSError:
        return []
    found = ((n, special_kind(Path(folder) / n)) for n in names)
    return [(n, k) for n, k in found if k is not None]


def open_regular(path: str | os.PathLike[str]):
    """A binary file object for ``path``, opened without blocking and refused (NotAFileError)
    unless it is an ordinary file, so a pipe named config.json cannot hang a reader."""
    path = Path(path)
    fd = os.open(path, os.O_RDONLY | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_NOCTTY", 0))
    try:
        mode = os.fstat(fd).st_mode
        for test, kind in _KINDS:
            if test(mode):
                raise NotAFileError(path, kind)
        if hasattr(os, "set_blocking"):
            os.set_blocking(fd, True)
        return os.fdopen(fd, "rb")
    except BaseException:
        os.close(fd)
        raise


def read_regular_bytes(path: str | os.PathLike[str], *, limit: int | None = None) -> bytes:
    """The bytes of an ordinary file; OSError (NotAFileError, or too large past ``limit``)."""
    with open_regular(path) as fh:
        if limit is not None:
            size = os.fstat(fh.fileno()).st_size
            if size > limit:
                raise OSError(errno.EFBIG, f"{Path(path).name} is {size:,} bytes, more than the "
                              f"{limit:,} such a file can sensibly hold")
            return fh.read(limit + 1)[: limit + 1]
        return fh.read()


def read_regular_text(path: str | os.PathLike[str], *, limit: int | None = None) -> str:
    return read_regular_bytes(path, limit=limit).decode("utf-8")
