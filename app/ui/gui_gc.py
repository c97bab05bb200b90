"""Garbage collection on the GUI thread only, while the window (and its engine thread) lives.

Python's cycle collector runs on whichever thread happens to allocate; when that is the engine
worker or a pool thread and the garbage holds Qt wrappers, Qt objects are destroyed off their
thread ("Timers cannot be started from another thread", or worse). pyqtgraph's
``GarbageCollector`` turns automatic collection off and collects from a GUI-thread timer; this
wraps it so the timer belongs to the window and automatic collection comes back when it closes.
"""

from __future__ import annotations

import gc

from pyqtgraph.util.garbage_collector import GarbageCollector
from PySide6.QtCore import QObject


class GuiThreadCollection:
    def __init__(self, owner: QObject, interval_s: float = 1.0):
        self._was_enabled = gc.isenabled()
        self._collector = GarbageCollector(interval=interval_s)  # disables automatic gc
        self._collector.timer.setParent(owner)

    def stop(self) -> None:
        """Stop the timer, collect once here, and hand collection back to Python."""
        self._collector.timer.stop()
        gc.collect()
        if self._was_enabled:
            gc.enable()
