"""Live figures of one generation, written by the engine worker and read by the GUI.

Production is decoupled from painting (Friture ``ringbuffer.py``): the worker appends every
event to fixed-size numpy ring buffers and a text queue; a GUI timer at 10-20 Hz copies what
it needs (``snapshot``) and calls ``setData`` once per curve. No Qt here: plain Python + numpy,
guarded by one lock because writer and reader live on different threads.
"""

from __future__ import annotations

import threading
import time
from collections import deque
from dataclasses import dataclass, field

import numpy as np

RATE_WINDOW_S = 1.0  # tokens/s is the rate over the last second, plotted once a second has passed
CAPACITY = 4096


class RingBuffer:
    """Fixed-capacity rows of float64; ``values()`` returns them oldest first (a copy)."""

    def __init__(self, columns: int, capacity: int = CAPACITY):
        self._data = np.zeros((capacity, columns), dtype=np.float64)
        self._capacity = capacity
        self._count = 0  # rows ever written

    def append(self, row: tuple[float, ...]) -> None:
        self._data[self._count % self._capacity] = row
        self._count += 1

    def __len__(self) -> int:
        return min(self._count, self._capacity)

    @property
    def written(self) -> int:
        return self._count

    def values(self) -> np.ndarray:
        n = len(self)
        if self._count <= self._capacity:
            return self._data[:n].copy()
        start = self._count % self._capacity
        return np.concatenate([self._data[start:], self._data[:start]])

    def last(self) -> np.ndarray | None:
        if self._count == 0:
            return None
        return self._data[(self._count - 1) % self._capacity].copy()


@dataclass
class Segment:
    text: str
    from_draft: bool


@dataclass
class LiveSnapshot:
    """What the GUI reads at one tick (all copies; safe to keep)."""

    rate: np.ndarray  # columns: t_s, windowed tok/s, cumulative tok/s
    rounds: np.ndarray  # columns: round index, accepted, running mean accepted
    memory: np.ndarray  # columns: t_s, mlx active+cache MB, rss MB, system used %, swap MB
    tokens: int
    elapsed_s: float
    stage: str
    pressure: str | None
    peak_bytes: int
    done: bool
    version: int  # changes whenever anything was written (the painter skips idle ticks)
    counts: tuple[int, int, int] = (0, 0, 0)  # rows ever written: rate, rounds, memory
    prefill: tuple[int, int, float, int] | None = None  # read, to read, tok/s, reused
    context: tuple[int, int | None] = (0, None)  # tokens in the model's context, its length
    prompt_cache_bytes: int = 0  # kept conversation states
    # auto speculation: the sources of the rounds, by the code in ``rounds``' 4th column
    sources: tuple[str, ...] = ()
    trees: tuple[int, float] = (0, 0.0)  # rounds verified as trees, their mean path depth


@dataclass
class LiveRun:
    """The live state of one request. Worker calls ``on_*``; GUI calls ``snapshot``/``drain_text``."""

    label: str = ""
    started: float = field(default_factory=time.perf_counter)
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False)

    def __post_init__(self) -> None:
        self.rate = RingBuffer(3)
        self.rounds = RingBuffer(4)  # + the round's source (its index in _sources, or -1)
        self._sources: list[str] = []
        self.memory = RingBuffer(5)
        self._text: list[Segment] = []
        self._token_times: deque[float] = deque()
        self._decode_t0: float | None = None
        self._tokens = 0
        self._accepted_sum = 0
        self._tree_rounds = 0
        self._tree_depth_sum = 0
        self._stage = "waiting"
        self._pressure: str | None = None
        self._peak = 0
        self._done = False
        self._finished_at: float | None = None
        self._version = 0
        self._prefill: tuple[int, int, float, int] | None = None
        self._context: tuple[int, int | None] = (0, None)
        self._cache_bytes = 0

    def version(self) -> int:
        return self._version  # an int read is atomic; no lock needed for a change check

    # -- writer side (engine worker thread) -----------------------------------------------
    def on_stage(self, stage: str) -> None:
        with self._lock:
            self._version += 1
            self._stage = stage
            if stage == "decoding" and self._decode_t0 is None:
                self._decode_t0 = time.perf_counter()

    def on_prefill(self, done: int, total: int, tokens_per_s: float, cache_n: int,
                   context: int | None) -> None:
        with self._lock:
            self._version += 1
            self._prefill = (done, total, tokens_per_s, cache_n)
            self._context = (cache_n + done, context)

    def on_token(self, text: str, from_draft: bool, counts: bool = True) -> None:
        now = time.perf_counter()
        with self._lock:
            self._version += 1
            if text:
                if self._text and self._text[-1].from_draft == from_draft:
                    self._text[-1] = Segment(self._text[-1].text + text, from_draft)
                else:
                    self._text.append(Segment(text, from_draft))
            if not counts:
                return
            if self._decode_t0 is None:
                self._decode_t0 = now
            self._tokens += 1
            self._context = (self._context[0] + 1, self._context[1])
            t = now - self._decode_t0
            self._token_times.append(now)
            while self._token_times and now - self._token_times[0] > RATE_WINDOW_S:
                self._token_times.popleft()
            if t < RATE_WINDOW_S:
                # no measured window yet: a burst of accepted tokens over a few milliseconds
                # would plot as a rate of thousands (``on_done`` plots a short run's overall rate)
                return
            cumulative = self._tokens / t
            windowed = len(self._token_times) / RATE_WINDOW_S
            self.rate.append((t, windowed, cumulative))

    def on_round(self, index: int, accepted: int, source: str = "",
                 tree_nodes: int = 0) -> None:
        """A round's accepted tokens (a tree round: ``tree_nodes`` > 0, ``accepted`` is how
        deep its accepted path went)."""
        with self._lock:
            self._version += 1
            self._accepted_sum += accepted
            if tree_nodes:
                self._tree_rounds += 1
                self._tree_depth_sum += accepted
            n = self.rounds.written + 1
            code = -1
            if source:
                if source not in self._sources:
                    self._sources.append(source)
                code = self._sources.index(source)
            self.rounds.append((index, accepted, self._accepted_sum / n, code))

    def on_memory(
        self,
        *,
        mlx_bytes: int,
        rss_bytes: int,
        system_used_fraction: float,
        swap_bytes: int,
        peak_bytes: int,
        pressure: str | None,
        prompt_cache_bytes: int = 0,
    ) -> None:
        now = time.perf_counter()
        with self._lock:
            self._version += 1
            t0 = self._decode_t0 if self._decode_t0 is not None else self.started
            mb = 1024.0 * 1024.0
            self.memory.append(
                (now - t0, mlx_bytes / mb, rss_bytes / mb, system_used_fraction * 100, swap_bytes / mb)
            )
            self._pressure = pressure
            self._cache_bytes = prompt_cache_bytes
            self._peak = max(self._peak, peak_bytes)

    def on_done(self) -> None:
        with self._lock:
            self._version += 1
            self._done = True
            self._stage = "done"
            self._finished_at = time.perf_counter()
            t0 = self._decode_t0
            if self.rate.written == 0 and self._tokens and t0 is not None:
                # a run shorter than one window: its one measured rate is the whole run's
                t = self._finished_at - t0
                if t > 0:
                    rate = self._tokens / t
                    self.rate.append((t, rate, rate))

    # -- reader side (GUI thread) ------------------------------------------------------------
    def drain_text(self) -> list[Segment]:
        with self._lock:
            out, self._text = self._text, []
        return out

    def snapshot(self) -> LiveSnapshot:
        with self._lock:
            end = self._finished_at or time.perf_counter()
            t0 = self._decode_t0
            return LiveSnapshot(
                rate=self.rate.values(),
                rounds=self.rounds.values(),
                memory=self.memory.values(),
                tokens=self._tokens,
                elapsed_s=(end - t0) if t0 is not None else 0.0,
                stage=self._stage,
                pressure=self._pressure,
                peak_bytes=self._peak,
                done=self._done,
                version=self._version,
                counts=(self.rate.written, self.rounds.written, self.memory.written),
                prefill=self._prefill,
                context=self._context,
                prompt_cache_bytes=self._cache_bytes,
                sources=tuple(self._sources),
                trees=(self._tree_rounds,
                       self._tree_depth_sum / self._tree_rounds if self._tree_rounds else 0.0),
            )
