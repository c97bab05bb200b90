"""The one list of draft kinds: every layer asks it, none names a kind itself.

The built-in kinds are the plugin modules named in ``BUILTIN`` (one per kind, in
``app/plugins/``), imported the first time anyone asks, in this order (the pickers' order).
They are named by module path, as entry points are, because this module sits in the lowest
layer and the plugins use checkpoint code; nothing here imports them statically.
``register``/``unregister`` add and remove kinds at run time (tests add a throwaway kind).
"""

from __future__ import annotations

import importlib
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from app.kinds.plugin import KindPlugin

OFF = "none"  # the kind that turns speculation off: the default of every request and result

BUILTIN: tuple[str, ...] = (
    "app.plugins.off",
    "app.plugins.auto",
    "app.plugins.prompt_lookup",
    "app.plugins.suffix",
    "app.plugins.full_model",
    "app.plugins.mtp",
    "app.plugins.dflash",
    "app.plugins.dflash2",
    "app.plugins.dspark",
    "app.plugins.eagle3",
    "app.plugins.gemma4_assistant",
    "app.plugins.medusa",
)

_lock = threading.RLock()
_plugins: dict[str, KindPlugin] = {}
_loaded = False


class UnknownKind(ValueError):
    """A kind name nobody registered (the message is one plain sentence)."""

    def __init__(self, name: str):
        self.plain_message = (f"Unknown draft kind {name!r}; choose one of "
                              f"{', '.join(names())}.")
        super().__init__(self.plain_message)


def _ensure() -> dict[str, KindPlugin]:
    global _loaded
    if not _loaded:
        with _lock:
            if not _loaded:
                for path in BUILTIN:
                    plugin = importlib.import_module(path).PLUGIN
                    _plugins.setdefault(plugin.name, plugin)
                _loaded = True
    return _plugins


def register(plugin: KindPlugin) -> KindPlugin:
    """Add a kind (after the built-in ones); its name must be new."""
    if not plugin.name or not plugin.label:
        raise ValueError("a draft kind needs a name and a label")
    with _lock:
        plugins = _ensure()
        if plugin.name in plugins:
            raise ValueError(f"the draft kind {plugin.name!r} is already registered")
        plugins[plugin.name] = plugin
    return plugin


def unregister(name: str) -> None:
    """Remove a kind added with ``register`` (the built-in ones stay)."""
    with _lock:
        plugins = _ensure()
        if name in plugins and not _is_builtin(plugins[name]):
            del plugins[name]


def _is_builtin(plugin: KindPlugin) -> bool:
    return type(plugin).__module__ in BUILTIN


@contextmanager
def registered(plugin: KindPlugin) -> Iterator[KindPlugin]:
    """``register`` for the duration of a ``with`` block."""
    register(plugin)
    try:
        yield plugin
    finally:
        unregister(plugin.name)


def plugins() -> tuple[KindPlugin, ...]:
    return tuple(_ensure().values())


def names() -> tuple[str, ...]:
    return tuple(_ensure())


def drafting() -> tuple[KindPlugin, ...]:
    """The kinds that propose (all but the one that turns speculation off)."""
    return tuple(p for p in plugins() if p.proposes)


def default_choice() -> str:
    """The kind a new user starts with: the first that says it suits every target."""
    return next((p.name for p in plugins() if p.default_choice), OFF)


def get(name: str) -> KindPlugin:
    try:
        return _ensure()[name]
    except KeyError:
        raise UnknownKind(name) from None


def find(name: str | None) -> KindPlugin | None:
    return _ensure().get(name) if name is not None else None


def label(name: str) -> str:
    p = find(name)
    return p.label if p is not None else name


def is_off(name: str) -> bool:
    p = find(name)
    return p is not None and not p.proposes


def normalize(name: str) -> str:
    """A kind name from user text: case, spaces and the plugins' aliases forgiven."""
    k = name.strip().lower()
    for p in plugins():
        if k == p.name or k in p.aliases:
            return p.name
    raise UnknownKind(name)


def for_folder(config: dict[str, Any]) -> KindPlugin | None:
    """The kind a draft folder with this ``config.json`` is for: a kind that recognises it
    before the catch-all one (a folder any causal LM can be)."""
    folder_kinds = [p for p in plugins() if p.needs_draft_folder and p.recognises(config)]
    folder_kinds.sort(key=lambda p: p.folder_fallback)
    return folder_kinds[0] if folder_kinds else None
