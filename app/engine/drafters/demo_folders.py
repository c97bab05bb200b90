"""The drafters shipped for the built-in demo target (``resources/demo-*``): a target gets
one with no folder chosen only when it *is* the demo target."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from app.engine.models import LoadedModel


def shipped_for_demo(target: LoadedModel, name: str) -> Path | None:
    """The shipped drafter folder ``name`` when ``target`` is the demo target (reads no
    weights), else None."""
    from app.resources import resource_path

    folder = resource_path(name)
    if not (folder / "config.json").exists() or not is_demo_target(target):
        return None
    return folder


def is_demo_target(target: LoadedModel) -> bool:
    try:
        from app.checkpoints.builtins import get

        demo = get("demo")
        folder = demo.present() if demo is not None else None
        return folder is not None and Path(target.path).resolve() == Path(folder).resolve()
    except Exception:  # noqa: BLE001 - no demo target prepared: not the demo target
        return False
