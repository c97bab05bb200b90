"""Locate files shipped in ``resources/`` (source checkout, editable install or frozen app)."""

from __future__ import annotations

import sys
from pathlib import Path


def resources_dir() -> Path:
    frozen_root = getattr(sys, "_MEIPASS", None)
    if frozen_root:
        return Path(frozen_root) / "resources"
    return Path(__file__).resolve().parent.parent / "resources"


def resource_path(*parts: str) -> Path:
    return resources_dir().joinpath(*parts)


class DataFolderError(OSError):
    """The data folder cannot be created or written; ``plain_message`` says what to do."""

    def __init__(self, message: str, cause: OSError | None = None):
        super().__init__(getattr(cause, "errno", None) or 13, message)
        self.plain_message = message


def user_data_dir() -> Path:
    """DraftPair's own data folder (models, conversations, settings); DataFolderError when it
    cannot be created or written."""
    import os

    from platformdirs import user_data_path

    override = os.environ.get("DRAFTPAIR_DATA_DIR")
    path = Path(override) if override else user_data_path("DraftPair", appauthor=False)
    hint = "Fix its permissions, or set DRAFTPAIR_DATA_DIR to a folder you can write."
    try:
        path.mkdir(parents=True, exist_ok=True)
        writable = os.access(path, os.W_OK | os.X_OK)
    except OSError as exc:
        why = exc.strerror or "it cannot be created"
        raise DataFolderError(
            f"DraftPair's data folder {path} cannot be created ({why.lower()}). {hint}", exc
        ) from None
    if not writable:
        raise DataFolderError(f"DraftPair's data folder {path} is not writable. {hint}")
    return path
