"""The server's engine thread: one dedicated thread owns the Session (load, generate, unload).

Requests wait in a FIFO queue in front of it. ``submit`` refuses a request (``QueueFull``)
when ``max_queue`` requests are already waiting behind the running one, so a client hears
"busy" at once instead of waiting for minutes. Every job carries its own ``threading.Event``;
the engine checks it once per round, so a client that disconnects stops its reply within a
round, and a job cancelled while it waits never reaches the engine.

Results cross back as data through the job's ``emit`` callable (called on the engine thread):
engine events (``TokenEvent``, ``NoticeEvent``, ``DoneEvent``) or a ``RequestError`` when the
request itself is unusable (e.g. longer than the model's context).

No request can take the thread down: whatever one raises (even a ``BaseException`` such as a
Rust panic from a tokenizer) fails that request, is logged in one line, and the next request
runs. ``health()`` reports the thread's real state (alive, busy or idle, the loaded model); if
the thread ends anyway, waiting requests are failed and new ones refused (``EngineDown``)
instead of waiting forever.
"""

from __future__ import annotations

import collections
import itertools
import logging
import queue
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from typing import Any

from app.errors import DraftPairError, technical_detail, user_message
from app.threads import release_mlx_streams

RECORDS_KEPT = 64
_ids = itertools.count(1)
log = logging.getLogger("draftpair.server")


class QueueFull(DraftPairError):
    pass


class EngineDown(DraftPairError):
    """The engine thread is not running (it failed to load, stopped or ended)."""


@dataclass(frozen=True)
class RequestError:
    """The request cannot run as asked (sent to the client as a 4xx JSON error)."""

    status: int
    message: str
    code: str | None = None
    param: str | None = None


@dataclass(frozen=True)
class ModelInfo:
    """What the server has loaded, as plain data (read by the HTTP side without locks)."""

    id: str
    target: str
    target_path: str
    draft: str | None
    draft_path: str | None
    kinds: dict[str, str | None]  # draft kind -> None if it can run, else why not
    default_kind: str
    default_width: int | None
    context_length: int | None
    created: int
    vocab_rows: int | None = None  # token ids 0..vocab_rows-1 are readable by the target


@dataclass(eq=False)  # identity: jobs live in a set
class ServerJob:
    request: Any  # app.engine.events.GenerationRequest
    emit: Callable[[object], None]
    endpoint: str = ""
    fit_context: bool = False  # max_tokens was the server's default: shorten it to fit
    cancel: threading.Event = field(default_factory=threading.Event)
    id: str = field(default_factory=lambda: f"{next(_ids):06d}")
    submitted: float = field(default_factory=time.monotonic)
    answered: bool = False  # a final DoneEvent or RequestError was emitted


@dataclass(frozen=True)
class RequestRecord:
    """One finished request, kept for the status endpoint and for tests."""

    id: str
    endpoint: str
    finish_reason: str  # stop | length | cancelled | error | rejected
    predicted_n: int
    max_tokens: int
    draft_kind: str
    queued_ms: float
    error: str | None = None


class EngineThread:
    """Owns the Session on one thread; ``start`` loads the pair there and returns its info."""

    def __init__(
        self,
        *,
        model: str,
        draft: str | None = None,
        default_kind: str | None = None,
        default_width: int | None = None,
        max_queue: int = 8,
        precision: str = "auto",
        model_id: str | None = None,
        reply_memory_bytes: int | None = None,
    ):
        self.model = model
        self.draft = draft
        self.default_kind = default_kind
        self.default_width = default_width
        self.max_queue = max_queue
        self.precision = precision
        self.model_id = model_id
        self.reply_memory_bytes = reply_memory_bytes
        self._reply_stats: dict[str, int] = {}  # the session's kept replies, after each request
        self.info: ModelInfo | None = None
        self.records: collections.deque[RequestRecord] = collections.deque(maxlen=RECORDS_KEPT)
        self._queue: queue.Queue[ServerJob | None] = queue.Queue()
        self._lock = threading.Lock()
        self._waiting = 0
        self._running: ServerJob | None = None
        self._jobs: set[ServerJob] = set()
        self._thread: threading.Thread | None = None
        self._loaded = threading.Event()
        self._load_error: str | None = None
        self._stopping = False
        self.session: Any = None  # owned by the engine thread; read elsewhere only by tests
        self.served = 0  # requests that ended (any finish)
        self.failed = 0  # requests the engine failed on (finish "error")
        self.last_error: str | None = None

    # -- life cycle ---------------------------------------------------------------------
    def start(self, timeout_s: float = 600.0) -> ModelInfo:
        self._thread = threading.Thread(target=self._main, name="draftpair-engine", daemon=True)
        self._thread.start()
        if not self._loaded.wait(timeout_s):
            raise DraftPairError("Loading the model took too long.")
        if self._load_error is not None:
            raise DraftPairError(self._load_error)
        assert self.info is not None
        return self.info

    def stop(self, timeout_s: float = 30.0) -> None:
        """Cancel every job (running or waiting), end the thread and free the session."""
        with self._lock:
            for job in self._jobs:
                job.cancel.set()
        self._queue.put(None)
        if self._thread is not None:
            self._thread.join(timeout_s)

    # -- requests -----------------------------------------------------------------------
    def submit(self, job: ServerJob) -> None:
        with self._lock:
            if not self.alive():
                raise EngineDown("The server's engine is not running; restart the server.")
            if self._running is not None and self._waiting >= self.max_queue:
                raise QueueFull(
                    f"The server is busy: {self._waiting} request(s) are already waiting "
                    "for the engine. Try again shortly."
                )
            self._waiting += 1
            self._jobs.add(job)
            self._queue.put(job)  # under the lock: a thread that is ending drains after it

    def recent(self) -> list[RequestRecord]:
        with self._lock:
            return list(self.records)

    def status(self) -> dict[str, Any]:
        with self._lock:
            running = self._running.id if self._running is not None else None
            waiting = self._waiting
        return {"running": running, "waiting": waiting, "max_queue": self.max_queue}

    def reply_memory(self) -> dict[str, int]:
        """The earlier replies kept for drafters that propose from them: scopes, replies,
        tokens, bytes and the cap (as of the last request)."""
        return dict(self._reply_stats)

    def alive(self) -> bool:
        """The thread runs with a loaded model and takes requests."""
        return (self._thread is not None and self._thread.is_alive() and self.info is not None
                and not self._stopping)

    def health(self) -> dict[str, Any]:
        """The engine's real state: ``ok`` (thread alive, model loaded), ``loading`` or
        ``down``, whether it is busy, and how many requests it served and failed."""
        alive = self.alive()
        if alive:
            state = "ok"
        elif not self._loaded.is_set() and self._thread is not None:
            state = "loading"
        else:
            state = "down"
        with self._lock:
            busy = self._running is not None
            waiting = self._waiting
        return {"status": state, "engine": {
            "alive": alive, "busy": busy, "waiting": waiting,
            "model_loaded": self.info is not None and alive,
            "served": self.served, "failed": self.failed, "last_error": self.last_error}}

    # -- the thread ---------------------------------------------------------------------
    def _main(self) -> None:
        session = None
        try:
            session = self._load()
        except Exception as exc:  # errors cross as data
            self._load_error = user_message(exc)
        finally:
            self._loaded.set()
        if session is None:
            release_mlx_streams()
            return
        self.session = session
        try:
            self._serve(session)
        finally:
            with self._lock:
                self._stopping = True
            self._fail_waiting()
            try:
                session.unload()
            finally:
                self.session = None
                release_mlx_streams()  # before the thread ends, or exit may abort

    def _serve(self, session: Any) -> None:
        while True:
            job = self._queue.get()
            if job is None:
                break
            with self._lock:
                self._waiting -= 1
                self._running = job
            try:
                self._run(session, job)
            except (KeyboardInterrupt, SystemExit):
                self._fail(job, "The server is stopping.")
                raise
            except BaseException as exc:  # noqa: BLE001 - one request never ends the thread
                self._fail(job, f"The engine failed on this request: {_plain(exc)}",
                           detail=technical_detail(exc))
            finally:
                with self._lock:
                    self._running = None
                    self._jobs.discard(job)

    def _fail(self, job: ServerJob, message: str, detail: str = "") -> None:
        """End ``job`` with an error (unless it was answered) and note it in one log line."""
        from app.engine.events import DoneEvent, Timings

        log.warning("request %s failed: %s", job.id, detail or message)
        if job.answered:
            return
        self._record(job, "error", 0, (time.monotonic() - job.submitted) * 1e3, message)
        self._answer(job, DoneEvent("", (), "error", Timings(draft_kind=job.request.draft_kind),
                                    error=message))

    def _fail_waiting(self) -> None:
        """The thread is ending: every job still queued hears so instead of waiting forever."""
        while True:
            try:
                job = self._queue.get_nowait()
            except queue.Empty:
                return
            if job is None:
                continue
            with self._lock:
                self._waiting -= 1
                self._jobs.discard(job)
            self._answer(job, RequestError(503, "The server is stopping.", code="engine_down"))

    def _answer(self, job: ServerJob, item: object) -> None:
        job.answered = True
        try:
            job.emit(item)
        except Exception as exc:  # noqa: BLE001 - the client side is gone; nothing to tell
            log.warning("request %s: the answer could not be delivered (%s)", job.id,
                        technical_detail(exc))

    def _load(self) -> Any:
        from app.engine.session import Session
        from app.engine.suffix_memory import DEFAULT_CAP_BYTES

        memory = self.reply_memory_bytes
        session = Session(precision=self.precision,
                          reply_memory_bytes=DEFAULT_CAP_BYTES if memory is None else memory)
        self._reply_stats = session.replies.stats().to_dict()
        target = session.load_target(self.model)
        if self.draft:
            session.load_draft(self.draft)
        from app.kinds import OFF, default_choice

        kinds = dict(session.available_kinds())
        choice = default_choice()  # auto speculation, wherever the pair can run it
        default = (self.default_kind or (choice if kinds.get(choice, "") is None else None)
                   or session.draft_kind or OFF)
        reason = kinds.get(default)
        if reason:
            raise DraftPairError(f"Speculation ({default}) cannot run: {reason.rstrip('.')}.")
        self.info = ModelInfo(
            id=self.model_id or target.name,
            target=target.name,
            target_path=str(target.path),
            draft=session.draft.name if session.draft is not None else None,
            draft_path=str(session.draft.path) if session.draft is not None else None,
            kinds=kinds,
            default_kind=default,
            default_width=self.default_width,
            context_length=session.context_length(),  # the limit ``Session.admit`` checks
            created=int(time.time()),
            vocab_rows=target.embedding_rows,
        )
        return session

    def _run(self, session: Any, job: ServerJob) -> None:
        from app.engine.events import DoneEvent, NoticeEvent, Timings, TokenEvent

        req = job.request
        queued_ms = (time.monotonic() - job.submitted) * 1e3
        if job.cancel.is_set():
            self._record(job, "cancelled", 0, queued_ms)
            self._answer(job, DoneEvent("", (), "cancelled", Timings(draft_kind=req.draft_kind)))
            return
        try:
            admission = session.admit(req)  # the limit and the tokens generate will use
        except Exception as exc:
            param = "messages" if req.messages is not None else "prompt"
            self._reject(job, RequestError(400, user_message(exc), param=param), queued_ms)
            return
        room, limit = admission.reply_room, admission.limit
        if room is not None and job.fit_context:
            req = replace(req, max_tokens=min(req.max_tokens, room))
        if room is not None and req.max_tokens > room:
            msg = (f"This model's context is {limit} tokens; the prompt has "
                   f"{len(admission.tokens)} and max_tokens asks for {req.max_tokens} more. "
                   "Shorten the prompt or lower max_tokens.")
            self._reject(job, RequestError(400, msg, code="context_length_exceeded",
                                           param="max_tokens"), queued_ms)
            return
        # the admitted tokens are the prompt (a request holds exactly one form of it)
        request = replace(req, prompt_tokens=admission.tokens, prompt=None, messages=None,
                          memory_interval_s=3600.0)
        done = None
        try:
            for ev in session.generate(request, cancel=job.cancel):
                if isinstance(ev, TokenEvent | NoticeEvent):
                    job.emit(ev)
                elif isinstance(ev, DoneEvent):
                    done = ev
        except Exception as exc:  # the engine should not raise; never lose the thread
            done = DoneEvent("", (), "error", Timings(draft_kind=req.draft_kind),
                             error=user_message(exc))
        if done is None:
            done = DoneEvent("", (), "error", Timings(), error="The engine ended without a result.")
        self._record(job, done.finish_reason, len(done.token_ids), queued_ms, done.error)
        self._reply_stats = session.replies.stats().to_dict()  # read by the status endpoint
        if done.finish_reason == "error":
            log.warning("request %s failed: %s", job.id, done.error)
        self._answer(job, done)

    def _reject(self, job: ServerJob, error: RequestError, queued_ms: float) -> None:
        self._record(job, "rejected", 0, queued_ms, error.message)
        self._answer(job, error)

    def _record(self, job: ServerJob, finish: str, n: int, queued_ms: float,
                error: str | None = None) -> None:
        record = RequestRecord(
            id=job.id, endpoint=job.endpoint, finish_reason=finish, predicted_n=n,
            max_tokens=job.request.max_tokens, draft_kind=job.request.draft_kind,
            queued_ms=round(queued_ms, 1), error=error,
        )
        with self._lock:
            self.records.append(record)
            self.served += 1
            if finish == "error":
                self.failed += 1
                self.last_error = error


def _plain(exc: BaseException) -> str:
    """One plain sentence for anything a request raised (Rust panics are BaseExceptions)."""
    if isinstance(exc, Exception):
        return user_message(exc)
    first = (str(exc).strip().splitlines() or [""])[0][:200]
    return f"an internal error ({type(exc).__name__}{': ' + first if first else ''})."
