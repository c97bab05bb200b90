"""Did another process compete for the CPU during a run?

"Other load" is the CPU time the whole machine spent busy minus what this process spent,
per second of wall time, in cores (2.0 = two cores fully used by others). A background thread
samples it every ``interval_s`` (2 s); the runner takes a reading at the start and end of each
run too, so a run shorter than the interval still gets its own mean. A run is flagged when the
mean over the run, or any sampled window overlapping it, exceeds ``threshold_cores``.
GPU load of other processes (Metal) is not sampled: macOS offers no unprivileged API for it.
"""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass

DEFAULT_THRESHOLD_CORES = 0.5
DEFAULT_INTERVAL_S = 2.0


@dataclass(frozen=True)
class Reading:
    t: float  # perf_counter seconds
    machine_busy_s: float  # all CPUs, cumulative
    own_s: float  # this process (all threads), cumulative


@dataclass(frozen=True)
class Window:
    t0: float
    t1: float
    other_cores: float


@dataclass(frozen=True)
class RunContention:
    mean_other_cores: float
    peak_other_cores: float
    flagged: bool

    def to_dict(self) -> dict[str, float | bool]:
        return {
            "mean_other_cores": round(self.mean_other_cores, 3),
            "peak_other_cores": round(self.peak_other_cores, 3),
            "flagged": self.flagged,
        }


def read_now() -> Reading:
    import psutil

    c = psutil.cpu_times()
    # on Linux guest time is already inside user; idle and iowait are not busy
    busy = sum(
        getattr(c, name, 0.0) for name in ("user", "nice", "system", "irq", "softirq", "steal")
    )
    own = psutil.Process().cpu_times()
    return Reading(time.perf_counter(), busy, own.user + own.system)


def other_load(a: Reading, b: Reading) -> float:
    """Cores used by other processes between two readings (never negative)."""
    dt = b.t - a.t
    if dt <= 0:
        return 0.0
    return max(0.0, ((b.machine_busy_s - a.machine_busy_s) - (b.own_s - a.own_s)) / dt)


def judge(
    run_mean: float, windows: list[Window], t0: float, t1: float, threshold: float
) -> RunContention:
    """Flag a run [t0, t1] whose mean other load, or any window overlapping it, is too high."""
    overlapping = [w.other_cores for w in windows if w.t1 > t0 and w.t0 < t1]
    peak = max([run_mean, *overlapping])
    return RunContention(run_mean, peak, peak > threshold)


class ContentionSampler:
    """Samples other processes' CPU load in a daemon thread; use as a context manager."""

    def __init__(
        self,
        *,
        interval_s: float = DEFAULT_INTERVAL_S,
        threshold_cores: float = DEFAULT_THRESHOLD_CORES,
    ):
        self.interval_s = interval_s
        self.threshold = threshold_cores
        self.windows: list[Window] = []
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._lock = threading.Lock()

    def __enter__(self) -> ContentionSampler:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def start(self) -> None:
        if self._thread is not None:
            return
        self._stop.clear()
        self._thread = threading.Thread(target=self._loop, name="bench-contention", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=self.interval_s + 1.0)
            self._thread = None

    def _loop(self) -> None:
        prev = read_now()
        while not self._stop.wait(self.interval_s):
            cur = read_now()
            with self._lock:
                self.windows.append(Window(prev.t, cur.t, other_load(prev, cur)))
            prev = cur

    def assess(self, start: Reading, end: Reading) -> RunContention:
        with self._lock:
            windows = list(self.windows)
        return judge(other_load(start, end), windows, start.t, end.t, self.threshold)

    def timeline(self) -> list[dict[str, float]]:
        with self._lock:
            return [
                {"t0": w.t0, "t1": w.t1, "other_cores": round(w.other_cores, 3)}
                for w in self.windows
            ]
