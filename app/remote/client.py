"""Stream a chat completion from an OpenAI-compatible endpoint as engine events.

``stream_remote(request, cancel=...)`` yields ``TokenEvent`` per streamed piece and one
``RemoteDone`` at the end (also after cancellation or an error: never raises), as
``Session.generate`` ends with a ``DoneEvent``. Its timings are ``RemoteTimings``: what the
server reported, ``None`` for what it did not. Token ids are known only from a
``draftpair serve`` endpoint (asked for through its ``draftpair.return_tokens`` extension);
elsewhere ``token_id`` is -1 and the ``RemoteDone`` has no ids, so comparisons fall back to the
text.

Plain stdlib HTTP (http.client), no extra dependency. Cancelling closes the connection, which
a ``draftpair serve`` (or llama-server) takes as "stop generating".
"""

from __future__ import annotations

import http.client
import json
import socket
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlsplit

from app.engine.events import TokenEvent
from app.errors import DraftPairError
from app.remote.results import RemoteDone, RemoteTimings, from_server

RemoteEvent = TokenEvent | RemoteDone


@dataclass(frozen=True)
class RemoteRequest:
    """One chat completion on an endpoint."""

    url: str  # http://host:port or http://host:port/v1
    messages: tuple[dict[str, str], ...] | None = None
    prompt: str | None = None  # shorthand for one user message
    model: str | None = None  # None: the first model the endpoint lists
    max_tokens: int = 256
    temperature: float = 0.0
    seed: int | None = None
    stop: tuple[str, ...] = ()
    api_key: str | None = None
    extension: dict[str, Any] | None = None  # sent as "draftpair" to a draftpair endpoint
    timeout_s: float = 600.0


@dataclass(frozen=True)
class Endpoint:
    scheme: str
    host: str
    port: int
    base: str  # path prefix ending in /v1

    @property
    def label(self) -> str:
        return f"{self.host}:{self.port}"


def parse_url(url: str) -> Endpoint:
    text = url.strip()
    if "://" not in text:
        text = "http://" + text
    parts = urlsplit(text)
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise DraftPairError(f"{url!r} is not an http(s) address such as http://127.0.0.1:8080.")
    path = parts.path.rstrip("/")
    for tail in ("/chat/completions", "/completions", "/models"):
        if path.endswith(tail):
            path = path[: -len(tail)]
    if not path.endswith("/v1"):
        path += "/v1"
    try:
        port = parts.port or (443 if parts.scheme == "https" else 80)
    except ValueError:
        raise DraftPairError(f"{url!r} has an invalid port.") from None
    return Endpoint(parts.scheme, parts.hostname, port, path)


def _connect(ep: Endpoint, timeout_s: float) -> http.client.HTTPConnection:
    cls = http.client.HTTPSConnection if ep.scheme == "https" else http.client.HTTPConnection
    return cls(ep.host, ep.port, timeout=timeout_s)


def _headers(api_key: str | None) -> dict[str, str]:
    h = {"Content-Type": "application/json", "Accept": "application/json, text/event-stream"}
    if api_key:
        h["Authorization"] = f"Bearer {api_key}"
    return h


def _error_text(status: int, raw: bytes) -> str:
    try:
        err = json.loads(raw).get("error")
        message = err.get("message") if isinstance(err, dict) else str(err)
    except (ValueError, AttributeError):
        message = raw.decode("utf-8", "replace").strip()[:200]
    return f"the endpoint answered {status}" + (f": {message}" if message else "")


def list_models(url: str, *, api_key: str | None = None, timeout_s: float = 10.0
                ) -> list[dict[str, Any]]:
    """The endpoint's ``/v1/models`` entries. Raises DraftPairError (one sentence)."""
    ep = parse_url(url)
    conn = _connect(ep, timeout_s)
    try:
        conn.request("GET", f"{ep.base}/models", headers=_headers(api_key))
        resp = conn.getresponse()
        raw = resp.read()
        if resp.status >= 400:
            raise DraftPairError(f"Listing models failed: {_error_text(resp.status, raw)}.")
        data = json.loads(raw).get("data")
    except (OSError, http.client.HTTPException, ValueError, AttributeError) as exc:
        raise DraftPairError(f"Cannot reach {ep.label}: {_reason(exc)}.") from None
    finally:
        conn.close()
    return [m for m in data if isinstance(m, dict)] if isinstance(data, list) else []


def _reason(exc: BaseException) -> str:
    if isinstance(exc, ConnectionRefusedError):
        return "connection refused (is the server running?)"
    if isinstance(exc, socket.timeout | TimeoutError):
        return "no answer in time"
    return str(exc) or type(exc).__name__


def stream_remote(request: RemoteRequest, *, cancel: threading.Event | None = None
                  ) -> Iterator[RemoteEvent]:
    """Events of one streamed chat completion; see the module docstring."""
    cancel = cancel or threading.Event()
    state = _Stream(request)
    try:
        yield from state.run(cancel)
    except DraftPairError as exc:
        state.error = str(exc)
    except (OSError, http.client.HTTPException) as exc:
        if not cancel.is_set():
            state.error = f"The connection to {state.label} failed: {_reason(exc)}."
    if cancel.is_set() and state.error is None:
        state.finish = "cancelled"
    yield state.done()


class _Stream:
    def __init__(self, request: RemoteRequest):
        self.req = request
        self.ep = parse_url(request.url)
        self.label = self.ep.label
        self.model = request.model or ""
        self.texts: list[str] = []
        self.ids: list[int] = []
        self.ids_known = True
        self.finish = "stop"
        self.error: str | None = None
        self.timings: dict[str, Any] | None = None
        self.usage: dict[str, Any] | None = None
        self.t0 = time.perf_counter()
        self.arrivals: list[float] = []

    def run(self, cancel: threading.Event) -> Iterator[TokenEvent]:
        req = self.req
        draftpair = False
        if not self.model or req.extension is not None:
            models = list_models(req.url, api_key=req.api_key, timeout_s=min(req.timeout_s, 10))
            if not models:
                raise DraftPairError(f"{self.label} lists no models.")
            chosen = next((m for m in models if m.get("id") == self.model), None)
            if chosen is None and self.model:
                raise DraftPairError(f"{self.label} has no model {self.model!r}.")
            chosen = chosen or models[0]
            self.model = str(chosen.get("id", ""))
            draftpair = chosen.get("owned_by") == "draftpair"
        messages = list(req.messages or [{"role": "user", "content": req.prompt or ""}])
        body: dict[str, Any] = {
            "model": self.model, "messages": messages, "max_tokens": req.max_tokens,
            "temperature": req.temperature, "stream": True,
            "stream_options": {"include_usage": True},
        }
        if req.seed is not None:
            body["seed"] = req.seed
        if req.stop:
            body["stop"] = list(req.stop)
        if draftpair:
            body["draftpair"] = {**(req.extension or {}), "return_tokens": True}
        self.ids_known = draftpair
        conn = _connect(self.ep, req.timeout_s)
        watcher_done = threading.Event()
        threading.Thread(target=_close_on_cancel, args=(conn, cancel, watcher_done),
                         daemon=True, name="remote-cancel").start()
        self.t0 = time.perf_counter()
        try:
            conn.request("POST", f"{self.ep.base}/chat/completions",
                         body=json.dumps(body).encode(), headers=_headers(req.api_key))
            resp = conn.getresponse()
            if resp.status >= 400:
                raise DraftPairError(_capital(_error_text(resp.status, resp.read())))
            yield from self._read(resp, cancel)
        finally:
            watcher_done.set()
            conn.close()

    def _read(self, resp: http.client.HTTPResponse, cancel: threading.Event
              ) -> Iterator[TokenEvent]:
        for raw in resp:
            if cancel.is_set():
                return
            line = raw.decode("utf-8", "replace").strip()
            if not line.startswith("data:"):
                continue
            data = line[5:].strip()
            if data == "[DONE]":
                return
            try:
                chunk = json.loads(data)
            except ValueError:
                continue
            if chunk.get("error"):
                err = chunk["error"]
                msg = err.get("message") if isinstance(err, dict) else str(err)
                raise DraftPairError(f"The endpoint stopped with an error: {msg}.")
            yield from self._chunk(chunk)

    def _chunk(self, chunk: dict[str, Any]) -> Iterator[TokenEvent]:
        if isinstance(chunk.get("timings"), dict):
            self.timings = chunk["timings"]
        if isinstance(chunk.get("usage"), dict):
            self.usage = chunk["usage"]
        ext: dict[str, Any] = chunk["draftpair"] if isinstance(chunk.get("draftpair"), dict) else {}
        choices = chunk.get("choices") or []
        if not choices:
            return
        choice = choices[0]
        delta = choice.get("delta") or {}
        text = delta.get("content") or choice.get("text") or ""
        ids = [int(t) for t in ext.get("token_ids", [])]
        flags = list(ext.get("from_draft", [])) + [False] * len(ids)
        if text or ids:
            self.arrivals.append(time.perf_counter())
        if ids:
            for i, tok in enumerate(ids):
                self.ids.append(tok)
                yield TokenEvent(index=len(self.ids) - 1, token_id=tok,
                                 text=text if i == len(ids) - 1 else "",
                                 from_draft=bool(flags[i]), round_index=-1)
            self.texts.append(text)
        elif text:
            self.texts.append(text)
            yield TokenEvent(index=len(self.texts) - 1, token_id=-1, text=text,
                             from_draft=False, round_index=-1)
        reason = choice.get("finish_reason")
        if reason:
            self.finish = "length" if reason == "length" else "stop"

    def done(self) -> RemoteDone:
        ttft = (self.arrivals[0] - self.t0) * 1e3 if self.arrivals else None
        rate = None
        if len(self.arrivals) >= 2 and self.arrivals[-1] > self.arrivals[0]:
            n = len(self.ids) if self.ids_known else len(self.arrivals)
            rate = (n - 1) / (self.arrivals[-1] - self.arrivals[0])
        timings: RemoteTimings = from_server(
            timings=self.timings, usage=self.usage, endpoint=self.label, model=self.model,
            ttft_ms=ttft, client_rate=rate,
        )
        finish = "error" if self.error else self.finish
        return RemoteDone(
            text="".join(self.texts),
            token_ids=tuple(self.ids) if self.ids_known else (),
            finish_reason=finish,
            timings=timings,
            error=self.error,
        )


def ended(request: RemoteRequest, finish_reason: str, error: str | None = None) -> RemoteDone:
    """The end of a request that never streamed (stopped before it started, or failed)."""
    try:
        endpoint = parse_url(request.url).label
    except DraftPairError:
        endpoint = request.url
    return RemoteDone("", (), finish_reason, RemoteTimings(endpoint=endpoint, model=request.model
                                                           or ""), error=error)


def _capital(text: str) -> str:
    return (text[:1].upper() + text[1:]).rstrip(".") + "."


def _close_on_cancel(conn: http.client.HTTPConnection, cancel: threading.Event,
                     finished: threading.Event) -> None:
    """Closing the socket unblocks a read that waits for the server and tells the server."""
    while not finished.wait(0.05):
        if cancel.is_set():
            sock = conn.sock
            if sock is not None:
                try:
                    sock.shutdown(socket.SHUT_RDWR)
                except OSError:
                    pass
            return
