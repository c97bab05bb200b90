"""Draft-kind arguments for the sub-commands, read from the kind registry when the parser is
built (so a kind registered at run time is a valid choice everywhere)."""

from __future__ import annotations

from app import kinds


def choices() -> tuple[str, ...]:
    return kinds.names()


def drafting_choices() -> tuple[str, ...]:
    return tuple(p.name for p in kinds.drafting())


def listing() -> str:
    """``a | b | c``, for help texts."""
    return " | ".join(kinds.names())


def widths() -> str:
    """Each drafting kind's default proposals per round, for help texts."""
    return ", ".join(f"{p.name}={p.default_width}" for p in kinds.drafting())


def folder_kind(name: str) -> str:
    """The kind that reads the draft folder ``name`` (resolved as a model name or path),
    from its config.json; the catch-all folder kind when it cannot be read."""
    import json

    from app.checkpoints.resolve import resolve_model

    config: dict = {}
    try:
        raw = json.loads((resolve_model(name) / "config.json").read_text())
        config = raw if isinstance(raw, dict) else {}
    except Exception:  # noqa: BLE001 - unreadable: the loader says so plainly later
        pass
    plugin = kinds.for_folder(config) or kinds.for_folder({})
    assert plugin is not None, "no draft kind takes a draft folder"
    return plugin.name
