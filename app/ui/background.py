"""File and network work off the GUI thread (store listing, pairing checks, Hub, downloads).

Never MLX: that belongs to the engine worker. Each task runs a plain function on a pool
thread; its result or its error (as a plain message) comes back as a queued signal.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from PySide6.QtCore import QObject, QRunnable, Qt, QThreadPool, Signal, Slot

QUEUED = Qt.ConnectionType.QueuedConnection


class _Relay(QObject):
    """Lives on the GUI thread; pool threads emit, its slots run the callbacks there.

    Connections are explicitly queued: a plain Python callable as receiver would otherwise
    run on the emitting (pool) thread.
    """

    done = Signal(object)
    failed = Signal(str)
    progress = Signal(object)

    def __init__(self, owner: Background, on_done, on_error, on_progress):
        super().__init__(owner)
        self.owner = owner
        self.on_done, self.on_error, self.on_progress = on_done, on_error, on_progress
        self.done.connect(self._done, QUEUED)
        self.failed.connect(self._failed, QUEUED)
        self.progress.connect(self._progress, QUEUED)

    @Slot(object)
    def _done(self, result: object) -> None:
        self._release()
        self.on_done(result)

    @Slot(str)
    def _failed(self, message: str) -> None:
        self._release()
        self.on_error(message)

    @Slot(object)
    def _progress(self, value: object) -> None:
        if self.on_progress is not None:
            self.on_progress(value)

    def _release(self) -> None:
        self.owner._relays.discard(self)
        self.deleteLater()


class _Task(QRunnable):
    def __init__(self, fn: Callable[..., Any], relay: _Relay, with_progress: bool):
        super().__init__()
        self.fn = fn
        self.relay = relay
        self.with_progress = with_progress
        self.setAutoDelete(True)

    def run(self) -> None:
        from app.errors import user_message

        try:
            result = self.fn(self.relay.progress.emit) if self.with_progress else self.fn()
        except BaseException as exc:  # errors cross as data
            self.relay.failed.emit(user_message(exc))
            return
        self.relay.done.emit(result)


class Background(QObject):
    """A small pool owned by a view; ``shutdown`` waits for running tasks."""

    def __init__(self, parent: QObject | None = None, max_threads: int = 3):
        super().__init__(parent)
        self.pool = QThreadPool(self)
        self.pool.setMaxThreadCount(max_threads)
        self._relays: set[_Relay] = set()

    def run(
        self,
        fn: Callable[..., Any],
        on_done: Callable[[Any], None],
        on_error: Callable[[str], None],
        on_progress: Callable[[Any], None] | None = None,
    ) -> None:
        relay = _Relay(self, on_done, on_error, on_progress)
        self._relays.add(relay)
        self.pool.start(_Task(fn, relay, on_progress is not None))

    def shutdown(self, timeout_ms: int = 10000) -> bool:
        self.pool.clear()
        return self.pool.waitForDone(timeout_ms)
