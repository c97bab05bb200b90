"""Writes that must not be lost or half-done: temp file beside the target, fsync, rename.

A crash leaves either the old file or the new one, never a torn one; the temp file is
hidden (``.NAME-XXXX.SUFFIX.tmp``) and removed when the write fails.
"""

from __future__ import annotations

import json
import os
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
