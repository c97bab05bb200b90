"""Run the server: load the pair on the engine thread, bind the socket, start uvicorn.

``ServerHandle.start()`` runs uvicorn on a background thread (tests, the desktop app) and
returns the base URL; ``serve()`` blocks until Ctrl+C (the CLI). The socket is bound here, so
port 0 picks a free port and "port in use" is one plain sentence. Connections are bounded in
number (below the open-files limit) and in time (``app.server.connections``); the server's own
notes go to stderr as one ``draftpair:`` line each.
"""

from __future__ import annotations

import logging
import socket
import sys
import threading
import time
from dataclasses import dataclass, field
from typing import Any

from app.errors import DraftPairError
from app.server.engine_thread import EngineThread
from app.server.protocol import Limits

LOOPBACK = ("127.0.0.1", "localhost", "::1")


@dataclass(frozen=True)
class ServerConfig:
    model: str = "demo"
    draft: str | None = None
    default_kind: str | None = None  # None: full-model when a draft is loaded, else none
    default_width: int | None = None
    host: str = "127.0.0.1"
    port: int = 8080
    api_key: str | None = None
    max_queue: int = 8
    model_id: str | None = None
    limits: Limits = field(default_factory=Limits)
    log_level: str = "warning"
    max_connections: int | None = None  # None: 1000, or fewer to fit the open-files limit
    client_timeout_s: float = 20.0  # a request head must arrive within this (the body: limits)
    reply_memory_bytes: int | None = None  # earlier replies kept per API key (None: default)


def bind(host: str, port: int) -> socket.socket:
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        sock.bind((host, port))
    except OSError as exc:
        sock.close()
        if exc.errno in (98, 48):  # EADDRINUSE (Linux, macOS)
            raise DraftPairError(f"Port {port} on {host} is already in use; choose another "
                                 "with --port.") from None
        raise DraftPairError(f"Cannot listen on {host}:{port}: {exc.strerror}.") from None
    sock.set_inheritable(True)
    return sock


def url_for(sock: socket.socket) -> str:
    host, port = sock.getsockname()[:2]
    return f"http://[{host}]:{port}" if ":" in host else f"http://{host}:{port}"


class ServerHandle:
    """The engine thread plus uvicorn on its own thread; ``stop()`` ends both."""

    def __init__(self, config: ServerConfig):
        self.config = config
        self.engine = EngineThread(
            model=config.model, draft=config.draft, default_kind=config.default_kind,
            default_width=config.default_width, max_queue=config.max_queue,
            model_id=config.model_id, reply_memory_bytes=config.reply_memory_bytes,
        )
        self.url = ""
        self._server: Any = None
        self._thread: threading.Thread | None = None
        self._sock: socket.socket | None = None
        self.max_connections = 0  # the cap in force once started

    def start(self, timeout_s: float = 60.0) -> str:
        sock = bind(self.config.host, self.config.port)  # fail fast, before loading
        try:
            self.engine.start()
        except BaseException:
            sock.close()
            raise
        self._sock = sock
        self._server = self._make_server()
        self._thread = threading.Thread(target=self._server.run, kwargs={"sockets": [sock]},
                                        name="draftpair-http", daemon=True)
        self._thread.start()
        deadline = time.monotonic() + timeout_s
        while not self._server.started:
            if not self._thread.is_alive() or time.monotonic() > deadline:
                self.stop()
                raise DraftPairError("The HTTP server did not start.")
            time.sleep(0.02)
        self.url = url_for(sock)
        return self.url

    def _make_server(self) -> Any:
        import uvicorn

        from app.server.app import build_app
        from app.server.connections import (
            ConnectionPolicy,
            connection_cap,
            guarded_protocol,
            quiet_accept_errors,
        )

        server_log(self.config.log_level)
        quiet_accept_errors()
        self.max_connections = connection_cap(self.config.max_connections)
        policy = ConnectionPolicy(self.max_connections, self.config.client_timeout_s)
        app = build_app(self.engine, limits=self.config.limits, api_key=self.config.api_key)
        cfg = uvicorn.Config(app, log_level=self.config.log_level, access_log=False,
                             timeout_graceful_shutdown=5, lifespan="off",
                             http=guarded_protocol(policy), timeout_keep_alive=5)
        return uvicorn.Server(cfg)

    def stop(self, timeout_s: float = 30.0) -> None:
        self.engine.stop(timeout_s)  # running and waiting requests end within a round
        if self._server is not None:
            self._server.should_exit = True
        if self._thread is not None:
            self._thread.join(timeout_s)
        if self._sock is not None:
            self._sock.close()
            self._sock = None

    def __enter__(self) -> ServerHandle:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()


def server_log(level: str = "warning") -> logging.Logger:
    """The server's own notes (refused clients, failed requests): one ``draftpair:`` line
    each on stderr."""
    logger = logging.getLogger("draftpair.server")
    logger.setLevel(level.upper())
    if not any(getattr(h, "draftpair", False) for h in logger.handlers):
        handler = logging.StreamHandler(sys.stderr)
        handler.setFormatter(logging.Formatter("draftpair: %(message)s"))
        handler.draftpair = True  # type: ignore[attr-defined]
        logger.addHandler(handler)
        logger.propagate = False
    return logger


def serve(config: ServerConfig, *, on_ready: Any = None) -> None:
    """Run until interrupted (Ctrl+C): load, bind, announce the URL, serve."""
    handle = ServerHandle(config)
    handle.start()
    if on_ready is not None:
        on_ready(handle)
    try:
        while handle._thread is not None and handle._thread.is_alive():
            handle._thread.join(0.5)
    finally:
        handle.stop()
