"""Draft kinds as plugins: ``KindPlugin`` (what a kind is) and the one registry of them.

Plain Python with no MLX import, so every layer (pairing check, CLI, GUI, bench, server,
session) reads the one list. Usage::

    from app import kinds
    kinds.names()                 # CLI choices, pickers
    kinds.get(name).label         # UI words; .make(ctx) etc. for the engine
    with kinds.registered(MyKind()):   # a kind added at run time
        ...
"""

from app.kinds.plugin import KindPlugin, KindRefused
from app.kinds.registry import (
    OFF,
    UnknownKind,
    default_choice,
    drafting,
    find,
    for_folder,
    get,
    is_off,
    label,
    names,
    normalize,
    plugins,
    register,
    registered,
    unregister,
)

__all__ = [
    "OFF", "KindPlugin", "KindRefused", "UnknownKind", "default_choice", "drafting", "find", "for_folder", "get", "is_off",
    "label", "names", "normalize", "plugins", "register", "registered", "unregister",
]
