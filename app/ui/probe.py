"""Event-loop responsiveness probe: a timer that measures its own lateness (GUI thread)."""

from __future__ import annotations

import time

import numpy as np
from PySide6.QtCore import QObject, Qt, QTimer


class LatenessProbe(QObject):
    """Fires every ``interval_ms``; records how late each tick ran (ms)."""

    def __init__(self, interval_ms: int = 10, parent: QObject | None = None):
        super().__init__(parent)
        self.interval_ms = interval_ms
        self.samples: list[float] = []
        self._timer = QTimer(self)
        self._timer.setTimerType(Qt.TimerType.PreciseTimer)
        self._timer.setInterval(interval_ms)
        self._timer.timeout.connect(self._tick)
        self._last = 0.0

    def start(self) -> None:
        self.samples.clear()
        self._last = time.perf_counter()
        self._timer.start()

    def stop(self) -> None:
        self._timer.stop()

    def _tick(self) -> None:
        now = time.perf_counter()
        self.samples.append(max(0.0, (now - self._last) * 1e3 - self.interval_ms))
        self._last = now

    def percentiles(self) -> dict[str, float]:
        if not self.samples:
            return {"n": 0, "p50": 0.0, "p99": 0.0, "max": 0.0}
        a = np.asarray(self.samples)
        return {
            "n": int(a.size),
            "p50": float(np.percentile(a, 50)),
            "p99": float(np.percentile(a, 99)),
            "max": float(a.max()),
        }
