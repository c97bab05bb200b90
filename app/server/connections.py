"""Client connections, bounded in number and in time, so idle or slow clients cannot starve
the server of file handles or fill its log.

uvicorn times out a connection only between requests (``timeout_keep_alive``); one that never
sends a complete request head is held forever, and past the process's open-files limit every
``accept`` fails (and asyncio prints a traceback for each). Here:

- ``guarded_protocol(policy)``: uvicorn's h11 protocol plus a deadline for the request head
  (from the connection, or from the first byte of a later request: a client that trickles
  headers byte by byte is closed with 408 after ``head_timeout_s``), and a cap on open
  connections: at the cap a new client displaces the connection that has waited longest
  without sending a request; if every connection is busy, the new one hears 503. One log line
  per client closed or refused, never a traceback.
- ``connection_cap(requested)``: raises the soft open-files limit toward the hard one and
  returns a cap that leaves room below it for the files the server itself opens.
- ``quiet_accept_errors()``: should ``accept`` fail anyway (another part of the process holding
  files), one line every few seconds instead of a traceback per attempt.

The request body's own deadline is ``Limits.body_timeout_s`` (``app.server.app.read_body``).
"""

from __future__ import annotations

import json
import logging
import os
import sys
import time
from dataclasses import dataclass
from typing import Any

log = logging.getLogger("draftpair.server")

DEFAULT_MAX_CONNECTIONS = 1000
RESERVED_FILES = 64  # model files, logs, sockets the server opens besides its clients
WANTED_FILE_LIMIT = 65536


@dataclass(frozen=True)
class ConnectionPolicy:
    max_connections: int = DEFAULT_MAX_CONNECTIONS
    head_timeout_s: float = 20.0  # a request head (line and headers) must arrive within this


def _raw_response(status: int, reason: str, message: str, code: str) -> bytes:
    body = json.dumps({"error": {"message": message, "type": "server_error" if status >= 500
                                 else "invalid_request_error", "param": None, "code": code}})
    head = (f"HTTP/1.1 {status} {reason}\r\nContent-Type: application/json\r\n"
            f"Content-Length: {len(body)}\r\nConnection: close\r\n\r\n")
    return (head + body).encode()


def guarded_protocol(policy: ConnectionPolicy) -> type:
    """A uvicorn HTTP protocol class (pass as ``uvicorn.Config(http=...)``) enforcing
    ``policy``; one class per server, so its list of idle connections is that server's."""
    import h11
    from uvicorn.protocols.http.h11_impl import H11Protocol

    idle: dict[Any, float] = {}  # connections waiting for a request head -> since when
    full = _raw_response(503, "Service Unavailable", "The server has too many open "
                         "connections; try again shortly.", "too_many_connections")
    late = _raw_response(408, "Request Timeout", "The request did not arrive in time.",
                         "request_timeout")

    class GuardedH11Protocol(H11Protocol):
        _head_timer: Any = None
        _got_bytes = False

        def connection_made(self, transport: Any) -> None:
            super().connection_made(transport)
            if len(self.connections) > policy.max_connections and not self._make_room():
                log.warning("refused a connection from %s: %d connections are open (the "
                            "limit)", self._who(), len(self.connections) - 1)
                self._close(full)
                return
            self._await_head()

        def data_received(self, data: bytes) -> None:
            self._got_bytes = True
            super().data_received(data)
            if self.transport.is_closing():
                self._head_done()
            elif self.conn.their_state is h11.IDLE:
                self._await_head()  # a partial head: the deadline runs from its first byte
            else:
                self._head_done()

        def on_response_complete(self) -> None:
            super().on_response_complete()
            if not self.transport.is_closing() and self.conn.their_state is h11.IDLE:
                idle[self] = time.monotonic()  # keep-alive: uvicorn's own timer closes it
                self._got_bytes = False

        def connection_lost(self, exc: Exception | None) -> None:
            self._head_done()
            super().connection_lost(exc)

        # -- the head deadline -----------------------------------------------------------
        def _await_head(self) -> None:
            idle.setdefault(self, time.monotonic())
            if self._head_timer is None:
                self._head_timer = self.loop.call_later(policy.head_timeout_s, self._late)

        def _head_done(self) -> None:
            idle.pop(self, None)
            if self._head_timer is not None:
                self._head_timer.cancel()
                self._head_timer = None

        def _late(self) -> None:
            self._head_timer = None
            if self.transport.is_closing() or self.conn.their_state is not h11.IDLE:
                return
            if self._got_bytes:  # a slow or stalled client; a silent one is only idle
                log.warning("closed a slow connection from %s: no complete request within "
                            "%g s", self._who(), policy.head_timeout_s)
            else:
                log.info("closed an idle connection from %s after %g s", self._who(),
                         policy.head_timeout_s)
            self._close(late if self._got_bytes else b"")

        # -- the cap -----------------------------------------------------------------------
        def _make_room(self) -> bool:
            """Close the connection idle the longest (not this one); False if none is."""
            for other in list(idle):
                if other is not self and not other.transport.is_closing():
                    log.warning("closed an idle connection from %s to let %s in (%d "
                                "connections open, the limit)", other._who(), self._who(),
                                policy.max_connections)
                    other._close(full if other._got_bytes else b"")
                    return True
            return False

        def _close(self, response: bytes) -> None:
            self._head_done()
            if response:
                self.transport.write(response)
            self.transport.close()

        def _who(self) -> str:
            return f"{self.client[0]}:{self.client[1]}" if self.client else "a client"

    return GuardedH11Protocol


def connection_cap(requested: int | None = None) -> int:
    """Connections the server may hold: ``requested`` (default ``DEFAULT_MAX_CONNECTIONS``),
    lowered to fit under the open-files limit (raised to the hard limit first)."""
    soft = raise_file_limit()
    if soft is None:  # no limit to respect (or none readable)
        return max(1, requested or DEFAULT_MAX_CONNECTIONS)
    room = soft - _open_files() - max(RESERVED_FILES, soft // 10)
    return max(1, min(requested or DEFAULT_MAX_CONNECTIONS, room))


def raise_file_limit(wanted: int = WANTED_FILE_LIMIT) -> int | None:
    """Raise the soft open-files limit toward the hard one (at most ``wanted``); returns the
    soft limit now in force (None where there is none or it cannot be read)."""
    try:
        import resource
    except ImportError:  # Windows
        return None
    try:
        soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    except (OSError, ValueError):
        return None
    target = wanted if hard == resource.RLIM_INFINITY else min(hard, wanted)
    if sys.platform == "darwin":
        target = min(target, 10240)  # macOS refuses more than OPEN_MAX for a process
    if soft == resource.RLIM_INFINITY:
        return None
    if soft < target:
        try:
            resource.setrlimit(resource.RLIMIT_NOFILE, (target, hard))
            soft = target
        except (OSError, ValueError):
            pass
    return int(soft)


def _open_files() -> int:
    for folder in ("/proc/self/fd", "/dev/fd"):
        try:
            return len(os.listdir(folder))
        except OSError:
            continue
    return 32


class _AcceptErrorFilter(logging.Filter):
    """asyncio logs a traceback for every failed ``accept`` (out of file handles): keep one
    plain line every ``every_s`` seconds."""

    def __init__(self, every_s: float = 5.0):
        super().__init__()
        self.every_s = every_s
        self.last = -1e9
        self.dropped = 0

    def filter(self, record: logging.LogRecord) -> bool:
        if not record.getMessage().startswith("socket.accept() out of system resource"):
            return True
        now = time.monotonic()
        if now - self.last < self.every_s:
            self.dropped += 1
            return False
        exc = record.exc_info[1] if record.exc_info else None
        more = f" ({self.dropped} more since the last note)" if self.dropped else ""
        record.msg = ("cannot accept new connections: the process is out of file handles "
                      f"({getattr(exc, 'strerror', None) or exc}){more}")
        record.args = ()
        record.exc_info = None
        record.exc_text = None
        self.last, self.dropped = now, 0
        return True


def quiet_accept_errors() -> None:
    """Install the accept-error filter on asyncio's logger (once per process)."""
    logger = logging.getLogger("asyncio")
    if not any(isinstance(f, _AcceptErrorFilter) for f in logger.filters):
        logger.addFilter(_AcceptErrorFilter())
