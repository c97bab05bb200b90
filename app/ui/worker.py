"""The engine worker: one QObject in one QThread owns the Session and every MLX object.

Commands arrive as queued signals (``EngineClient`` -> worker slots); results leave as typed
signals; errors cross as data (a message string, or a ``DoneEvent`` with ``error``). Tokens,
rounds and memory samples do not go through signals at all: the worker writes them into the
job's ``LiveRun`` ring buffers and the GUI reads them on its own timer.

Stop is a ``threading.Event`` set directly from the GUI thread (the worker's event loop is
busy inside ``generate``), checked by the engine once per round and between prompt chunks.
"""

from __future__ import annotations

import itertools
import threading
import time
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from PySide6.QtCore import QObject, Qt, QThread, Signal, Slot

from app.remote.results import RemoteDone
from app.ui.live import LiveRun

_job_ids = itertools.count(1)
ENGINE = "engine"  # the loaded Session: a GenerationRequest, ending in a DoneEvent
REMOTE = "remote"  # an OpenAI-compatible endpoint: a RemoteRequest, ending in a RemoteDone


@dataclass
class Job:
    """One generate request on its way to the worker."""

    request: Any  # GenerationRequest (source ENGINE) or app.remote.client.RemoteRequest (REMOTE)
    live: LiveRun = field(default_factory=LiveRun)
    cancel: threading.Event = field(default_factory=threading.Event)
    id: int = field(default_factory=lambda: next(_job_ids))
    tag: str = ""  # who asked (chat, compare...): routing for the views
    source: str = ENGINE  # where the job's events come from: ENGINE or REMOTE
    # when the person pressed Send (perf_counter): the reported time to first token counts
    # from here, so it covers everything they waited for (queue, warm-up, prompt reading)
    sent_at: float | None = None
    first_token_at: float | None = None  # when the first token reached this thread

    def __post_init__(self) -> None:
        if self.source not in (ENGINE, REMOTE):
            raise ValueError(f"unknown event source {self.source!r}")


@dataclass(frozen=True)
class ModelState:
    """What is loaded, as plain data for the views."""

    target: str | None = None
    target_path: str | None = None
    draft: str | None = None
    draft_path: str | None = None
    precision: str = ""
    target_bytes: int = 0  # weights in memory
    draft_bytes: int = 0
    target_disk_bytes: int = 0  # the checkpoint folder on disk (what the Models table shows)
    draft_disk_bytes: int = 0
    kinds: dict[str, str | None] = field(default_factory=dict)  # kind -> None or reason
    load_seconds: float = 0.0
    has_chat_template: bool = True
    context_length: int | None = None  # tokens the target takes (prompt + reply)


def _disk_bytes(path: Any) -> int:
    from app.checkpoints.store import dir_size

    try:
        return dir_size(Path(path))
    except OSError:
        return 0


class EngineWorker(QObject):
    loading = Signal(str)  # what is being loaded (plain words)
    model_state = Signal(object)  # ModelState
    load_failed = Signal(str)  # plain message
    job_started = Signal(int)
    job_status = Signal(int, str, str)  # job id, stage, message
    job_notice = Signal(int, str, str)  # job id, code, message
    job_finished = Signal(int, object)  # job id, DoneEvent (ENGINE) or RemoteDone (REMOTE)
    bench_progress = Signal(object)  # app.bench Progress
    bench_finished = Signal(object, str)  # BenchReport or None, error message

    def __init__(self) -> None:
        super().__init__()
        self._session: Any = None

    def _ensure_session(self) -> Any:
        if self._session is None:
            from app.engine.session import Session  # heavy: mlx, mlx_lm

            self._session = Session()
        return self._session

    def _state(self) -> ModelState:
        s = self._session
        if s is None or s.target is None:
            return ModelState()
        t, d = s.target, s.draft
        return ModelState(
            target=t.name,
            target_path=str(t.path),
            draft=d.name if d is not None else None,
            draft_path=str(d.path) if d is not None else None,
            precision=t.precision,
            target_bytes=t.weight_bytes(),
            draft_bytes=d.weight_bytes() if d is not None else 0,
            target_disk_bytes=_disk_bytes(t.path),
            draft_disk_bytes=_disk_bytes(d.path) if d is not None else 0,
            kinds=dict(s.available_kinds()),
            load_seconds=t.load_seconds + (d.load_seconds if d is not None else 0.0),
            has_chat_template=bool(getattr(t.tokenizer, "chat_template", None)),
            context_length=s.context_length(),
        )

    @Slot(str, str)
    def load(self, target: str, draft: str) -> None:
        """Load ``target`` (and ``draft`` when not empty); keeps the target if it is unchanged."""
        from app.errors import user_message

        try:
            s = self._ensure_session()
            if target and (s.target is None or not _same_model(s.target, target)):
                self.loading.emit(f"Loading {_short(target)}…")
                s.load_target(target)
            if draft:
                if s.draft is None or not _same_model(s.draft, draft):
                    self.loading.emit(f"Loading draft {_short(draft)}…")
                    s.load_draft(draft)
            elif s.draft is not None:
                s.unload_draft()
        except Exception as exc:  # errors cross as data
            self.load_failed.emit(user_message(exc))
        self.model_state.emit(self._state())

    @Slot()
    def unload_draft(self) -> None:
        if self._session is not None:
            self._session.unload_draft()
        self.model_state.emit(self._state())

    @Slot()
    def unload(self) -> None:
        if self._session is not None:
            self._session.unload()
        self.model_state.emit(self._state())

    @Slot(object)
    def generate(self, job: Job) -> None:
        from app.engine.events import (
            DoneEvent,
            MemoryEvent,
            NoticeEvent,
            PrefillEvent,
            RoundEvent,
            StatusEvent,
            TokenEvent,
        )
        from app.errors import user_message

        live = job.live
        self.job_started.emit(job.id)
        done = None
        try:
            if job.cancel.is_set():
                raise _Cancelled
            remote = job.source == REMOTE
            events: Any
            if remote:  # an endpoint's stream, read on this thread like a local run
                from app.remote.client import stream_remote

                events = stream_remote(job.request, cancel=job.cancel)
            else:
                events = self._ensure_session().generate(job.request, cancel=job.cancel)
            for ev in events:
                if isinstance(ev, TokenEvent):
                    if job.first_token_at is None and (ev.token_id >= 0 or remote):
                        job.first_token_at = time.perf_counter()
                    # a remote piece without a token id still is one streamed token
                    live.on_token(ev.text, ev.from_draft, counts=ev.token_id >= 0 or remote)
                elif isinstance(ev, RoundEvent):
                    live.on_round(ev.record.index, ev.record.accepted, ev.record.source,
                                  ev.record.tree_nodes)
                elif isinstance(ev, MemoryEvent):
                    m = ev.sample
                    live.on_memory(
                        mlx_bytes=m.mlx_active_bytes + m.mlx_cache_bytes,
                        rss_bytes=m.rss_bytes,
                        system_used_fraction=m.system_used_fraction,
                        swap_bytes=m.swap_used_bytes,
                        peak_bytes=m.mlx_peak_bytes,
                        pressure=m.pressure,
                        prompt_cache_bytes=m.prompt_cache_bytes,
                    )
                elif isinstance(ev, PrefillEvent):
                    live.on_prefill(ev.done, ev.total, ev.tokens_per_s, ev.cache_n, ev.context)
                    self.job_status.emit(job.id, "prefill", prefill_line(ev))
                elif isinstance(ev, StatusEvent):
                    live.on_stage(ev.stage)
                    self.job_status.emit(job.id, ev.stage, ev.message)
                elif isinstance(ev, NoticeEvent):
                    self.job_notice.emit(job.id, ev.code, ev.message)
                elif isinstance(ev, DoneEvent | RemoteDone):
                    done = ev
        except _Cancelled:
            done = _ended(job, "cancelled")
        except Exception as exc:  # the engine should not raise; never lose the thread if it does
            done = _ended(job, "error", user_message(exc))
        if done is None:
            done = _ended(job, "error", "The engine ended without a result.")
        live.on_done()
        self.job_finished.emit(job.id, ttft_from_send(done, job))

    @Slot(object, object)
    def bench(self, config: Any, cancel: threading.Event) -> None:
        """Run the benchmark on this thread, reusing the loaded pair."""
        from app.errors import user_message

        try:
            from app.bench import run_bench

            session = self._ensure_session()
            report = run_bench(
                config, progress=self.bench_progress.emit, cancel=cancel,
                session=session if session.target is not None else None,
            )
        except Exception as exc:  # errors cross as data
            self.bench_finished.emit(None, user_message(exc))
            return
        self.bench_finished.emit(report, "")

    @Slot()
    def shutdown(self) -> None:
        """Drop every MLX object on this thread, then stop the thread's event loop."""
        self._session = None
        from app.threads import release_mlx_streams

        release_mlx_streams()  # MLX does not free a thread's streams by itself
        QThread.currentThread().quit()


def ttft_from_send(done: Any, job: Job) -> Any:
    """``done`` with its time to first token counted from Send, when the job knows that moment
    (never less than what the engine measured)."""
    if job.sent_at is None or job.first_token_at is None:
        return done
    waited_ms = (job.first_token_at - job.sent_at) * 1e3
    if waited_ms <= (getattr(done.timings, "ttft_ms", None) or 0.0):
        return done
    import dataclasses

    return dataclasses.replace(done, timings=dataclasses.replace(done.timings, ttft_ms=waited_ms))


def prefill_line(ev: Any) -> str:
    """``1,024 / 5,000 tokens · 812 tok/s · 3,000 reused`` for a PrefillEvent."""
    text = f"{ev.done:,} / {ev.total:,} tokens · {ev.tokens_per_s:,.0f} tok/s"
    return text + (f" · {ev.cache_n:,} reused" if ev.cache_n else "")


class _Cancelled(Exception):
    pass


def _ended(job: Job, finish_reason: str, error: str | None = None) -> Any:
    """The end of a job that produced none itself, of its source's type."""
    if job.source == REMOTE:
        from app.remote.client import ended

        return ended(job.request, finish_reason, error)
    from app.engine.events import DoneEvent, Timings

    return DoneEvent("", (), finish_reason, Timings(draft_kind=job.request.draft_kind),
                     error=error)


def _short(name: str) -> str:
    from pathlib import Path

    return Path(name).name or name


def _same_model(loaded: Any, name: str) -> bool:
    from pathlib import Path

    try:
        from app.checkpoints.resolve import resolve_model

        return resolve_model(name).resolve() == Path(loaded.path).resolve()
    except Exception:
        return False


class EngineClient(QObject):
    """GUI-side handle: owns the worker thread, forwards commands, tracks the running job.

    Create and use on the GUI thread only; views connect to *its* signals, which re-emit the
    worker's on the GUI thread (explicitly queued: a plain callable connected to a worker
    signal would run on the worker thread). ``shutdown()`` stops the job (within one round),
    frees MLX state on the worker thread and joins it.
    """

    loading = Signal(str)
    model_state = Signal(object)
    load_failed = Signal(str)
    job_started = Signal(int)
    job_status = Signal(int, str, str)
    job_notice = Signal(int, str, str)
    job_finished = Signal(int, object)
    bench_progress = Signal(object)
    bench_finished = Signal(object, str)

    _load = Signal(str, str)
    _bench = Signal(object, object)
    _unload_draft = Signal()
    _generate = Signal(object)
    _shutdown = Signal()

    def __init__(self, parent: QObject | None = None):
        super().__init__(parent)
        self.engine_thread = QThread()
        self.engine_thread.setObjectName("EngineWorker")
        self.worker = EngineWorker()
        self.worker.moveToThread(self.engine_thread)
        self._load.connect(self.worker.load, Qt.ConnectionType.QueuedConnection)
        self._unload_draft.connect(self.worker.unload_draft, Qt.ConnectionType.QueuedConnection)
        self._generate.connect(self.worker.generate, Qt.ConnectionType.QueuedConnection)
        self._shutdown.connect(self.worker.shutdown, Qt.ConnectionType.QueuedConnection)
        q = Qt.ConnectionType.QueuedConnection
        w = self.worker
        w.loading.connect(self._relay_loading, q)
        w.model_state.connect(self._relay_state, q)
        w.load_failed.connect(self._relay_load_failed, q)
        w.job_started.connect(self._relay_started, q)
        w.job_status.connect(self._relay_status, q)
        w.job_notice.connect(self._relay_notice, q)
        w.job_finished.connect(self._relay_finished, q)
        w.bench_progress.connect(self._relay_bench_progress, q)
        w.bench_finished.connect(self._relay_bench_finished, q)
        self._bench.connect(self.worker.bench, q)
        self.bench_cancel: threading.Event | None = None
        self.jobs: dict[int, Job] = {}
        self.state = ModelState()
        self.busy_loading = False
        self.engine_thread.start()

    # commands
    def load(self, target: str, draft: str = "") -> None:
        self.busy_loading = True
        self._load.emit(target, draft)

    def unload_draft(self) -> None:
        self._unload_draft.emit()

    def submit(self, job: Job) -> Job:
        if getattr(job.request, "submitted_at", 0.0) is None:  # Send: TTFT counts from here
            job.request = replace(job.request, submitted_at=time.perf_counter())
        self.jobs[job.id] = job
        self._generate.emit(job)
        return job

    def bench(self, config: Any) -> threading.Event:
        self.bench_cancel = threading.Event()
        self._bench.emit(config, self.bench_cancel)
        return self.bench_cancel

    def stop(self, job_id: int | None = None) -> None:
        for jid, job in list(self.jobs.items()):
            if job_id is None or jid == job_id:
                job.cancel.set()

    @property
    def generating(self) -> bool:
        return bool(self.jobs)

    @property
    def busy(self) -> bool:
        """A reply, a comparison run or the bench is using the engine."""
        return bool(self.jobs) or self.bench_cancel is not None

    # relays (GUI thread)
    @Slot(str)
    def _relay_loading(self, text: str) -> None:
        self.loading.emit(text)

    @Slot(object)
    def _relay_state(self, state: ModelState) -> None:
        self.state = state
        self.busy_loading = False
        self.model_state.emit(state)

    @Slot(str)
    def _relay_load_failed(self, message: str) -> None:
        self.load_failed.emit(message)

    @Slot(int)
    def _relay_started(self, job_id: int) -> None:
        self.job_started.emit(job_id)

    @Slot(int, str, str)
    def _relay_status(self, job_id: int, stage: str, message: str) -> None:
        self.job_status.emit(job_id, stage, message)

    @Slot(int, str, str)
    def _relay_notice(self, job_id: int, code: str, message: str) -> None:
        self.job_notice.emit(job_id, code, message)

    @Slot(object)
    def _relay_bench_progress(self, p: object) -> None:
        self.bench_progress.emit(p)

    @Slot(object, str)
    def _relay_bench_finished(self, report: object, error: str) -> None:
        self.bench_cancel = None
        self.bench_finished.emit(report, error)

    @Slot(int, object)
    def _relay_finished(self, job_id: int, done: object) -> None:
        self.jobs.pop(job_id, None)
        self.job_finished.emit(job_id, done)

    def shutdown(self, timeout_s: float = 30.0) -> bool:
        """Cancel running jobs, free the session on its thread, join. True when joined."""
        if not self.engine_thread.isRunning():
            return True
        self.stop()
        if self.bench_cancel is not None:
            self.bench_cancel.set()
        self._shutdown.emit()
        deadline = time.monotonic() + timeout_s
        while self.engine_thread.isRunning() and time.monotonic() < deadline:
            self.stop()  # jobs queued behind the running one see their cancel flag at once
            self.engine_thread.wait(50)
        ok = not self.engine_thread.isRunning()
        if not ok:  # last resort: never leave the process hanging on exit
            self.engine_thread.terminate()
            self.engine_thread.wait(1000)
        return ok
