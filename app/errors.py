"""User-facing errors shared by every layer (no heavy imports)."""

from __future__ import annotations


class DraftPairError(Exception):
    """An error whose message is written for the user (one plain sentence)."""


class ModelLoadError(DraftPairError):
    pass


def user_message(exc: BaseException) -> str:
    """One line for a user, whatever the exception."""
    if isinstance(exc, DraftPairError):
        return str(exc)
    text = str(exc).strip().splitlines()[0] if str(exc).strip() else ""
    name = type(exc).__name__
    return f"{name}: {text}" if text else name
