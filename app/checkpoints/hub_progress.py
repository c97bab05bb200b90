"""Download progress: byte counts of one or more files turned into ``DownloadProgress``
(bytes done and total, rate over the last seconds, ETA, current file), and cancel.

``ProgressMeter.add`` raises ``DownloadCancelled`` once the cancel event is set, so a download
stops within one chunk; ``bar_class`` is the tqdm stand-in huggingface_hub drives.
"""

from __future__ import annotations

import threading
import time
from collections import deque
from dataclasses import dataclass

from app.checkpoints.hub_errors import DownloadCancelled


@dataclass(frozen=True)
class DownloadProgress:
    repo_id: str
    done_bytes: int
    total_bytes: int
    rate_bps: float  # bytes per second over the last few seconds
    eta_s: float | None
    current_file: str | None
    files_done: int
    files_total: int
    finished: bool = False

    @property
    def fraction(self) -> float:
        return self.done_bytes / self.total_bytes if self.total_bytes else 0.0


class ProgressMeter:
    """Aggregates per-file byte counts into DownloadProgress; raises on cancel."""

    def __init__(
        self, repo_id: str, total: int, files_total: int, callback, cancel: threading.Event | None
    ):
        self.repo_id = repo_id
        self.total = total
        self.files_total = files_total
        self.callback = callback
        self.cancel = cancel
        self.done = 0
        self.files_done = 0
        self.current: str | None = None
        self.window: deque[tuple[float, int]] = deque()
        self.last_emit = 0.0
        self.lock = threading.Lock()

    def check_cancel(self) -> None:
        if self.cancel is not None and self.cancel.is_set():
            raise DownloadCancelled("Download cancelled; run it again to resume.")

    def add(self, n: int) -> None:
        with self.lock:
            self.done += n
            now = time.monotonic()
            self.window.append((now, self.done))
            while len(self.window) > 2 and now - self.window[0][0] > 5.0:
                self.window.popleft()
            if now - self.last_emit >= 0.1:
                self.emit()
        self.check_cancel()

    def credit(self, n: int) -> None:
        """Count bytes that did not arrive now (kept from an earlier attempt): no rate spike."""
        with self.lock:
            self.done += n
            self.window = deque((t, b + n) for t, b in self.window)

    def rate(self) -> float:
        if len(self.window) < 2:
            return 0.0
        (t0, b0), (t1, b1) = self.window[0], self.window[-1]
        return (b1 - b0) / (t1 - t0) if t1 > t0 else 0.0

    def emit(self, finished: bool = False) -> None:
        self.last_emit = time.monotonic()
        if self.callback is None:
            return
        rate = self.rate()
        remaining = max(self.total - self.done, 0)
        eta = remaining / rate if rate > 0 else (0.0 if finished else None)
        self.callback(
            DownloadProgress(
                repo_id=self.repo_id,
                done_bytes=self.done,
                total_bytes=self.total,
                rate_bps=rate,
                eta_s=eta,
                current_file=self.current,
                files_done=self.files_done,
                files_total=self.files_total,
                finished=finished,
            )
        )

    def bar_class(self):
        meter = self

        class _Bar:
            """The tqdm-like object huggingface_hub drives while streaming one file."""

            def __init__(self, *args, **kwargs):
                self.n = int(kwargs.get("initial") or 0)
                self.total = kwargs.get("total")

            def update(self, n: int = 1) -> None:
                self.n += n
                meter.add(n)

            def __enter__(self):
                return self

            def __exit__(self, *exc: object) -> None:
                return None

            def close(self) -> None:
                pass

            def set_description(self, *a, **k) -> None:
                pass

        return _Bar
