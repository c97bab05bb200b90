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


def user_data_dir() -> Path:
    """DraftPair's own data folder (models, conversations, settings)."""
    import os

    from platformdirs import user_data_path

    from app.errors import DraftPairError, user_message

    override = os.environ.get("DRAFTPAIR_DATA_DIR")
    path = Path(override) if override else user_data_path("DraftPair", appauthor=False)
    try:
        path.mkdir(parents=True, exist_ok=True)
        writable = os.access(path, os.W_OK | os.X_OK)
    except OSError as exc:
        raise DraftPairError(
            f"DraftPair's data folder {path} cannot be created ({user_message(exc).rstrip('.')}). "
            "Fix its permissions, or set DRAFTPAIR_DATA_DIR to a folder you can write.",
            detail=str(exc),
        ) from None
    if not writable:
        raise DraftPairError(
            f"DraftPair's data folder {path} is not writable. Fix its permissions, or set "
            "DRAFTPAIR_DATA_DIR to a folder you can write."
        )
    return path
