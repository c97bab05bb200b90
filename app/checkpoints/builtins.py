"""Models that come with the app (the demo pair), registered at start-up by the entry points.

The checkpoint layer only knows names and how to ask for a folder; what a built-in model is
(and how it is prepared) belongs to the layer that ships it (``app.demo.builtins``), so the
lower layers never import it.

Public API:
    Builtin(name, prepare, present, listed=True, default_draft=None, note=None)
    register(builtin) -> None          idempotent: the same name replaces the older entry
    get(name) -> Builtin | None
    registered() -> list[Builtin]      in registration order
    shipped_as(path) -> Builtin | None  the built-in whose folder ``path`` is
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

Progress = Callable[[str], None] | None


@dataclass(frozen=True)
class Builtin:
    name: str
    # The folder, prepared first if needed (may download); raises ModelLoadError.
    prepare: Callable[[Progress], Path]
    # The folder when it is present and loadable now (cheap, never downloads), else None.
    present: Callable[[], Path | None]
    listed: bool = True  # shown among the local models
    default_draft: str | None = None  # the built-in draft that pairs with this target
    note: str | None = None  # one honest line on what it is, shown where it is offered


_REGISTERED: dict[str, Builtin] = {}


def register(builtin: Builtin) -> None:
    _REGISTERED[builtin.name] = builtin


def get(name: str) -> Builtin | None:
    return _REGISTERED.get(name)


def registered() -> list[Builtin]:
    return list(_REGISTERED.values())


def shipped_as(path: str | Path) -> Builtin | None:
    """The built-in model whose present folder is ``path`` (never prepares anything)."""
    want = Path(path).resolve()
    for b in _REGISTERED.values():
        try:
            folder = b.present()
        except Exception:  # noqa: BLE001 - a missing built-in is simply not this one
            continue
        if folder is not None and Path(folder).resolve() == want:
            return b
    return None
