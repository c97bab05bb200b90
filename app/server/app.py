"""The HTTP side: Starlette routes on top of the engine thread.

Every error a client can cause is an OpenAI-style JSON body with a 4xx status (malformed JSON
or a bad value 400, missing or wrong API key 401, unknown model 404, body too slow 408, body
over the limit 413, engine queue full 429); an engine failure is a 500 with a one-line
message, never a traceback, and so is anything unforeseen (one log line, no traceback). A
client that disconnects, while its request waits or runs, sets that request's cancel flag.
``/health`` is the engine's real state: 200 while its thread runs with the model loaded, 503
(and why) when it does not.
"""

from __future__ import annotations

import asyncio
import hmac
import json
import logging
import time
from dataclasses import asdict, replace
from typing import Any

from starlette.applications import Starlette
from starlette.exceptions import HTTPException
from starlette.requests import Request
from starlette.responses import JSONResponse, Response, StreamingResponse
from starlette.routing import Route

from app.engine.suffix_memory import scope_for_key
from app.server.bodies import parse_json
from app.server.engine_thread import (
    EngineDown,
    EngineThread,
    QueueFull,
    RequestError,
    ServerJob,
)
from app.server.errors import ApiError
from app.server.protocol import Limits, Parsed, parse_chat, parse_completion
from app.server.responses import Shaper, sse, timings_dict

_GONE = object()  # the client disconnected
log = logging.getLogger("draftpair.server")


def build_app(engine: EngineThread, *, limits: Limits | None = None,
              api_key: str | None = None) -> Any:
    limits = limits or Limits()
    assert engine.info is not None, "start the engine thread before building the app"
    info = engine.info
    key = api_key.encode("utf-8") if api_key else None

    def authorized(request: Request) -> bool:
        if key is None:
            return True
        # the header's raw bytes (Starlette decodes them as Latin-1), so a key with non-ASCII
        # characters compares as the UTF-8 the client sent; compare_digest takes any bytes
        header = request.headers.get("authorization", "").encode("latin-1")
        scheme, _, token = header.partition(b" ")
        return scheme.lower() == b"bearer" and hmac.compare_digest(token.strip(), key)

    def authorize(request: Request) -> None:
        if not authorized(request):
            raise ApiError(401, "Missing or wrong API key: send 'Authorization: Bearer KEY'.",
                           type="authentication_error", code="invalid_api_key",
                           headers={"WWW-Authenticate": "Bearer"})

    def model_card() -> dict[str, Any]:
        return {
            "id": info.id, "object": "model", "created": info.created, "owned_by": "draftpair",
            "draftpair": {
                "target": info.target, "draft": info.draft, "default_kind": info.default_kind,
                "default_width": info.default_width, "context_length": info.context_length,
                "draft_kinds": {k: (r is None) for k, r in info.kinds.items()},
                "vocab_size": info.vocab_rows,  # prompt token ids run 0 .. vocab_size-1
                "max_tokens_cap": limits.max_tokens_cap,
            },
        }

    async def models(request: Request) -> Response:
        authorize(request)
        return JSONResponse({"object": "list", "data": [model_card()]})

    async def model(request: Request) -> Response:
        authorize(request)
        if request.path_params["model_id"] not in (info.id, info.target):
            raise ApiError(404, f"The model {request.path_params['model_id']!r} does not exist "
                           "here.", code="model_not_found", param="model")
        return JSONResponse(model_card())

    async def health(request: Request) -> Response:
        state = engine.health()
        if authorized(request):  # which model is loaded is for clients with the key
            state["engine"]["model"] = info.id
        return JSONResponse(state, status_code=200 if state["status"] == "ok" else 503)

    async def status(request: Request) -> Response:
        authorize(request)
        records = [asdict(r) for r in engine.recent()]
        return JSONResponse({"model": model_card(), "queue": engine.status(),
                             "reply_memory": engine.reply_memory(), "recent": records})

    async def chat_completions(request: Request) -> Response:
        return await complete(request, chat=True)

    async def completions(request: Request) -> Response:
        return await complete(request, chat=False)

    async def complete(request: Request, *, chat: bool) -> Response:
        arrived = time.perf_counter()  # time to first token counts from the request's arrival
        authorize(request)
        body = parse_json(await read_body(request, limits.max_body_bytes,
                                          limits.body_timeout_s))
        parsed = (parse_chat if chat else parse_completion)(body, info, limits)
        # earlier replies are kept per API key (and per conversation the client names), so
        # one key's text is never proposed to another
        scope = scope_for_key(api_key, parsed.conversation)
        parsed = replace(parsed, request=replace(parsed.request, submitted_at=arrived,
                                                 reply_scope=scope))
        loop = asyncio.get_running_loop()
        items: asyncio.Queue[object] = asyncio.Queue()

        def emit(item: object) -> None:  # called on the engine thread
            try:
                loop.call_soon_threadsafe(items.put_nowait, item)
            except RuntimeError:  # the event loop is gone (server shutting down)
                job.cancel.set()

        job = ServerJob(request=parsed.request, emit=emit,
                        endpoint="chat" if chat else "completions",
                        fit_context=not parsed.max_tokens_given)
        try:
            engine.submit(job)
        except QueueFull as exc:
            raise ApiError(429, str(exc), type="rate_limit_error", code="queue_full",
                           headers={"Retry-After": "1"}) from None
        except EngineDown as exc:
            raise ApiError(503, str(exc), code="engine_down") from None
        watcher = asyncio.create_task(watch_disconnect(request, job, items))
        try:
            if parsed.stream:
                return await stream(job, parsed, items, watcher, chat=chat)
            return await whole(parsed, items, chat=chat)
        finally:
            if not parsed.stream:
                watcher.cancel()
                job.cancel.set()  # a no-op when the job has finished

    routes = [
        Route("/v1/models", guarded(models), methods=["GET"]),
        Route("/v1/models/{model_id:path}", guarded(model), methods=["GET"]),
        Route("/v1/chat/completions", guarded(chat_completions), methods=["POST"]),
        Route("/v1/completions", guarded(completions), methods=["POST"]),
        Route("/v1/draftpair/status", guarded(status), methods=["GET"]),
        Route("/health", guarded(health), methods=["GET"]),
    ]
    handlers = {ApiError: _api_error, HTTPException: _http_error, Exception: _server_error}
    app = Starlette(routes=routes, exception_handlers=handlers)
    return OneLineErrors(app)


class OneLineErrors:
    """The outermost layer: Starlette answers an unforeseen error with a 500 and then re-raises
    it, and uvicorn prints the traceback; here it ends as one log line."""

    def __init__(self, app: Any):
        self.app = app

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        try:
            await self.app(scope, receive, send)
        except Exception as exc:  # noqa: BLE001 - answered already (500) where it could be
            from app.errors import technical_detail

            log.warning("%s %s failed: %s", scope.get("method", ""), scope.get("path", ""),
                        technical_detail(exc))


class ErrorResponse(JSONResponse):
    """An error body as ASCII JSON: it renders whatever a message echoes back (even a lone
    surrogate), where UTF-8 encoding would fail."""

    def render(self, content: Any) -> bytes:
        return json.dumps(content, ensure_ascii=True, separators=(",", ":")).encode("ascii")


def guarded(endpoint: Any) -> Any:
    """``endpoint`` with anything unforeseen turned into a 500 and one log line (Starlette's
    last-resort handler answers too, but then prints the traceback)."""

    async def run(request: Request) -> Response:
        try:
            return await endpoint(request)
        except (ApiError, HTTPException):
            raise
        except Exception as exc:  # noqa: BLE001 - a request never prints a traceback
            raise _unforeseen(request, exc) from None

    return run


def _unforeseen(request: Request, exc: Exception) -> ApiError:
    from app.errors import technical_detail, user_message

    log.warning("%s %s failed: %s", request.method, request.url.path, technical_detail(exc))
    return ApiError(500, f"The server failed on this request: {user_message(exc)}",
                    code="internal_error")


async def read_body(request: Request, limit: int, timeout_s: float | None = None) -> bytes:
    """The body, at most ``limit`` bytes, arrived within ``timeout_s`` (a client that trickles
    it byte by byte would otherwise hold a connection for as long as it likes)."""
    too_big = ApiError(413, f"The request body is larger than this server accepts "
                       f"({limit} bytes).", code="request_too_large")
    length = request.headers.get("content-length", "")
    if length.isdigit() and (len(length) > 18 or int(length) > limit):
        raise too_big

    async def read() -> bytes:
        chunks, total = [], 0
        async for chunk in request.stream():
            total += len(chunk)
            if total > limit:
                raise too_big
            chunks.append(chunk)
        return b"".join(chunks)

    try:
        return await asyncio.wait_for(read(), timeout_s)
    except asyncio.TimeoutError:  # not the builtin one before Python 3.11
        client = request.client
        log.warning("closed a slow client %s: its request body took over %g s",
                    f"{client.host}:{client.port}" if client else "?", timeout_s)
        raise ApiError(408, f"The request body did not arrive within {timeout_s:g} seconds.",
                       code="request_timeout", headers={"Connection": "close"}) from None


async def watch_disconnect(request: Request, job: ServerJob, items: asyncio.Queue) -> None:
    while True:
        message = await request.receive()
        if message["type"] == "http.disconnect":
            job.cancel.set()
            items.put_nowait(_GONE)
            return


async def whole(parsed: Parsed, items: asyncio.Queue, *, chat: bool) -> Response:
    from app.engine.events import DoneEvent

    while True:
        item = await items.get()
        if item is _GONE:
            return Response(status_code=499)  # nobody is listening any more
        if isinstance(item, RequestError):
            raise ApiError(item.status, item.message, code=item.code, param=item.param)
        if isinstance(item, DoneEvent):
            if item.finish_reason == "error":
                raise ApiError(500, item.error or "Generation failed.", code="engine_error")
            shaper = Shaper(chat=chat, model=parsed.model, return_tokens=parsed.return_tokens)
            return JSONResponse(shaper.response(item))


async def stream(job: ServerJob, parsed: Parsed, items: asyncio.Queue,
                 watcher: asyncio.Task, *, chat: bool) -> Response:
    """SSE once the first token (or the end) is there, so a request the engine refuses still
    gets a proper 4xx/5xx status instead of an error inside a 200 stream."""
    from app.engine.events import DoneEvent, TokenEvent

    first = await items.get()
    while not isinstance(first, TokenEvent | DoneEvent | RequestError) and first is not _GONE:
        first = await items.get()  # notices: the fallback is reported in the final timings
    if first is _GONE or isinstance(first, RequestError) or (
        isinstance(first, DoneEvent) and first.finish_reason == "error"
    ):
        watcher.cancel()
        job.cancel.set()
        if first is _GONE:
            return Response(status_code=499)
        if isinstance(first, RequestError):
            raise ApiError(first.status, first.message, code=first.code, param=first.param)
        assert isinstance(first, DoneEvent)
        raise ApiError(500, first.error or "Generation failed.", code="engine_error")
    shaper = Shaper(chat=chat, model=parsed.model, return_tokens=parsed.return_tokens)

    async def events() -> Any:
        try:
            head = shaper.first_chunk()
            if head is not None:
                yield sse(head)
            item: object = first
            while True:
                if item is _GONE:
                    return
                if isinstance(item, TokenEvent):
                    ids = [item.token_id] if item.token_id >= 0 else []
                    if item.text or (ids and parsed.return_tokens):
                        yield sse(shaper.token_chunk(item.text, ids,
                                                     [item.from_draft] * len(ids)))
                elif isinstance(item, DoneEvent):
                    if item.finish_reason == "error":
                        yield sse({"error": {"message": item.error or "Generation failed.",
                                             "type": "server_error", "code": "engine_error",
                                             "param": None},
                                   "timings": timings_dict(item.timings)})
                    else:
                        yield sse(shaper.final_chunk(item))
                        if parsed.include_usage:
                            yield sse(shaper.usage_chunk(item))
                    yield sse("[DONE]")
                    return
                item = await items.get()
        except Exception as exc:  # noqa: BLE001 - the stream ends with an error, no traceback
            from app.errors import technical_detail

            log.warning("a stream failed: %s", technical_detail(exc))
            yield sse({"error": {"message": "The server failed while streaming this reply.",
                                 "type": "server_error", "code": "internal_error",
                                 "param": None}})
            yield sse("[DONE]")
        finally:
            watcher.cancel()
            job.cancel.set()  # a no-op when the job has finished

    return StreamingResponse(events(), media_type="text/event-stream",
                             headers={"Cache-Control": "no-cache", "X-Accel-Buffering": "no"})


async def _api_error(request: Request, exc: Exception) -> Response:
    assert isinstance(exc, ApiError)
    return ErrorResponse(exc.body(), status_code=exc.status, headers=exc.headers)


async def _http_error(request: Request, exc: Exception) -> Response:
    assert isinstance(exc, HTTPException)
    message = {404: "No such endpoint.", 405: "This endpoint does not take that method."}.get(
        exc.status_code, str(exc.detail))
    err = ApiError(exc.status_code, message, code="not_found" if exc.status_code == 404 else None)
    return ErrorResponse(err.body(), status_code=exc.status_code, headers=exc.headers)


async def _server_error(request: Request, exc: Exception) -> Response:
    err = _unforeseen(request, exc)
    return ErrorResponse(err.body(), status_code=500)
