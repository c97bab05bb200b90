"""Guard against a known-bad binding: PySide6/shiboken6 6.12.0 on Python < 3.12.

That release returns ``None`` (and ``True``/``False`` from some calls) without taking a
reference. On Python 3.12+ those objects are immortal and nothing happens; on 3.11 every
void Qt call (``setEnabled``, ``setText``…) drops one reference of ``None`` and the process
aborts with "none_dealloc"/"bool_dealloc" after a few thousand calls. Measured here:
-1000 references of None per 1000 ``setValue`` calls with 6.12.0, 0 with 6.11.3.

``check_binding()`` measures it (cheap, no QApplication needed) and, if present, makes the
three singletons effectively immortal (as 3.12 does) so the app keeps running, and returns
a warning for the log. The real fix is a binding without the bug (PySide6 < 6.12 here).
"""

from __future__ import annotations

import sys

_BIG = 1 << 40


def refcount_leak_per_call(calls: int = 200) -> float:
    from PySide6.QtCore import QObject

    obj = QObject()
    before = sys.getrefcount(None)
    for _ in range(calls):
        obj.setObjectName("x")
    return (before - sys.getrefcount(None)) / calls


def _immortalize(obj: object) -> None:
    import ctypes

    ctypes.c_ssize_t.from_address(id(obj)).value += _BIG  # ob_refcnt is the first field


def check_binding() -> str | None:
    if sys.version_info >= (3, 12):
        return None
    if refcount_leak_per_call() < 0.5:
        return None
    for obj in (None, True, False):
        _immortalize(obj)
    import PySide6

    return (
        f"PySide6 {PySide6.__version__} loses references to None/True/False on Python "
        f"{sys.version_info.major}.{sys.version_info.minor}; DraftPair worked around it, but "
        'install a fixed binding: pip install "PySide6-Essentials<6.12"'
    )
