"""Turn what a user typed into a local checkpoint folder.

Public API:
    resolve_model(name_or_path, *, store=None, progress=None) -> Path
        accepts a local folder path, a built-in model registered at start-up ("demo" is
        prepared on first use, see app.checkpoints.builtins), a store entry name, or a Hugging Face repo id already in the HF cache.
        Raises app.errors.ModelLoadError with a plain message otherwise.
    hf_cached_snapshot(repo_id, revision="main") -> Path | None
"""

from __future__ import annotations

import os
import re
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING

from app.errors import ModelLoadError

if TYPE_CHECKING:
    from app.checkpoints.store import Store

_REPO_ID = re.compile(r"^[A-Za-z0-9][\w.-]*/[\w.-]+$")


def hf_cached_snapshot(repo_id: str, revision: str = "main") -> Path | None:
    """The snapshot folder of ``repo_id`` in the HF cache (no network), or None."""
    from app.checkpoints.store import hf_cache_dir

    repo_dir = hf_cache_dir() / ("models--" + repo_id.replace("/", "--"))
    snaps = repo_dir / "snapshots"
    if not snaps.is_dir():
        return None
    ref = repo_dir / "refs" / revision
    if ref.is_file():
        sha = ref.read_text(encoding="utf-8").strip()
        if (snaps / sha / "config.json").exists():
            return snaps / sha
    if (snaps / revision / "config.json").exists():  # a commit hash
        return snaps / revision
    candidates = [p for p in snaps.iterdir() if (p / "config.json").exists()]
    if not candidates:
        return None
    return max(candidates, key=lambda p: p.stat().st_mtime)


def _builtin(name: str, progress: Callable[[str], None] | None) -> Path | None:
    from app.checkpoints import builtins

    builtin = builtins.get(name)
    return None if builtin is None else Path(builtin.prepare(progress))


def resolve_model(
    name_or_path: str | os.PathLike[str],
    *,
    store: Store | None = None,
    progress: Callable[[str], None] | None = None,
) -> Path:
    text = str(name_or_path).strip()
    if not text:
        raise ModelLoadError("No model was named.")
    builtin = _builtin(text, progress)
    if builtin is not None:
        return builtin
    if text in ("demo", "demo-draft"):
        raise ModelLoadError("The built-in demo model is not part of this DraftPair build.")
    path = Path(text).expanduser()
    if path.exists():
        if not path.is_dir():
            raise ModelLoadError(f"{path} is a file; a model is a folder with config.json in it.")
        return path
    looks_like_path = (
        text.startswith((".", "~", os.sep)) or os.sep in text and not _REPO_ID.match(text)
    )
    if not looks_like_path:
        if store is None:
            from app.checkpoints.store import Store

            store = Store()
        entry = store.get(text)
        if entry is not None:
            return Path(entry.path)
        if _REPO_ID.match(text):
            snap = hf_cached_snapshot(text)
            if snap is not None:
                return snap
            raise ModelLoadError(
                f"{text} is not downloaded yet; get it with `draftpair models pull {text}`."
            )
        raise ModelLoadError(
            f"No model named {text!r}: it is not a folder, not in DraftPair's models and not in "
            "the Hugging Face cache (see `draftpair models list`)."
        )
    raise ModelLoadError(f"No model folder at {path}.")
