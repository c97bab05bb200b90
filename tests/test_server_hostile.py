"""``draftpair serve`` against hostile and unlucky clients, over real HTTP on 127.0.0.1.

Most tests run a real ``draftpair serve`` process on a tiny model, so a request that kills the
server shows as an exit status (139 for a segfault): token ids past the vocabulary, values of
the wrong type or size, nesting bombs, surrogates, non-ASCII API keys, and hundreds of idle or
half-sent connections under a low open-files limit. The engine-thread tests run the server in
this process, where a request can be made to fail inside the engine.
"""

from __future__ import annotations

import http.client
import json
import socket
import time
import urllib.parse

import pytest

from app.bench.server_process import ServerProcess, limit_open_files
from app.server.protocol import Limits
from app.server.runner import ServerConfig, ServerHandle

KEY = "clé"  # not ASCII on purpose
TIMEOUT_S = 60.0  # for one request: a hang fails the test instead of stalling the suite


def call(url: str, path: str, body: bytes | dict | None = None, *, key: bytes | str | None = None,
         method: str | None = None, timeout: float = TIMEOUT_S) -> tuple[int, dict]:
    """One request; ``key`` as bytes goes on the wire as given (http.client would encode
    text as Latin-1)."""
    u = urllib.parse.urlsplit(url)
    conn = http.client.HTTPConnection(u.hostname, u.port, timeout=timeout)
    data = json.dumps(body).encode() if isinstance(body, dict) else body
    headers: dict[str, bytes | str] = {"Content-Type": "application/json"}
    if key is not None:
        headers["Authorization"] = b"Bearer " + (key.encode() if isinstance(key, str) else key)
    try:
        conn.request(method or ("POST" if data is not None else "GET"), path, body=data,
                     headers=headers)
        resp = conn.getresponse()
        raw = resp.read()
        return resp.status, json.loads(raw) if raw else {}
    finally:
        conn.close()


def tracebacks(server: ServerProcess) -> list[str]:
    return [line for line in server.log().splitlines() if "Traceback" in line]


@pytest.fixture(scope="module")
def keyed(tiny_models, tmp_path_factory):
    """A server with a non-ASCII API key, a short client timeout and room for 100 clients."""
    log = tmp_path_factory.mktemp("serve") / "keyed.log"
    srv = ServerProcess(["--model", str(tiny_models.target), "--draft-kind", "prompt-lookup",
                         "--api-key", KEY, "--client-timeout", "2", "--max-connections", "100"],
                        log)
    srv.start()
    yield srv
    srv.stop()


@pytest.fixture(scope="module")
def open_server(tiny_models, tmp_path_factory):
    """No API key, a draft model (full-model by default)."""
    log = tmp_path_factory.mktemp("serve") / "open.log"
    srv = ServerProcess(["--model", str(tiny_models.target), "--draft", str(tiny_models.draft)],
                        log)
    srv.start()
    yield srv
    srv.stop()


def _servers(keyed, open_server):
    return [(keyed, KEY), (open_server, None)]


# -- token ids ----------------------------------------------------------------------------------


def test_token_ids_past_the_vocabulary_are_refused_and_the_server_lives(keyed, open_server):
    from app.engine.models import load_model

    rows = load_model(keyed.args[1]).embedding_rows  # the tiny target's embedding table
    for server, key in _servers(keyed, open_server):
        for kind in (None, "none"):
            for ids in ([rows], [99_999_999], [5, 6, rows + 7], [-1], [2**70]):
                body: dict = {"prompt": ids, "max_tokens": 1}
                if kind:
                    body["draftpair"] = {"draft_kind": kind}
                status, data = call(server.url, "/v1/completions", body, key=key)
                assert status == 400, (ids, data)
                assert data["error"]["code"] == "invalid_token_id"
                assert data["error"]["param"] == f"prompt[{ids.index(max(ids, key=abs))}]"
                assert server.alive(), server.log()[-2000:]
        status, data = call(server.url, "/v1/completions", {"prompt": [5, rows - 1],
                                                            "max_tokens": 2}, key=key)
        assert status == 200 and data["usage"]["completion_tokens"] == 2
        assert not tracebacks(server)


def test_the_engine_refuses_token_ids_past_its_embedding_table(tiny_models):
    """The engine's own check, for callers that skip the server's."""
    from app.engine.events import DoneEvent, GenerationRequest
    from app.engine.session import Session

    s = Session()
    target = s.load_target(tiny_models.target)
    s.load_draft(tiny_models.draft)
    rows = target.embedding_rows
    assert rows == target.model.model.embed_tokens.weight.shape[0]
    for kind in ("none", "full-model", "prompt-lookup"):
        for ids in ((rows,), (1, 2, 10**8)):
            done = list(s.generate(GenerationRequest(prompt_tokens=ids, max_tokens=1,
                                                     draft_kind=kind)))[-1]
            assert isinstance(done, DoneEvent) and done.finish_reason == "error"
            assert f"{max(ids):,}" in done.error and f"{rows - 1:,}" in done.error
        done = list(s.generate(GenerationRequest(prompt_tokens=(1, rows - 1), max_tokens=1,
                                                 draft_kind=kind)))[-1]
        assert done.finish_reason == "length", done.error


# -- client mistakes ----------------------------------------------------------------------------

HUGE = b"9" * 5000


@pytest.mark.parametrize("path, body, param", [
    ("/v1/completions", b"[" * 50_000 + b"]" * 50_000, None),
    ("/v1/completions", b'{"prompt": "hi", "x": ' + b"[" * 40 + b"]" * 40 + b"}", "x"),
    ("/v1/chat/completions", {"messages": [{"role": ["user"], "content": "hi"}]},
     "messages[0].role"),
    ("/v1/chat/completions", {"messages": [{"role": {"a": 1}, "content": "hi"}]},
     "messages[0].role"),
    ("/v1/completions", b'{"prompt": "hi", "max_tokens": ' + HUGE + b"}", "max_tokens"),
    ("/v1/completions", b'{"prompt": "hi", "n_predict": ' + HUGE[:400] + b"}", "n_predict"),
    ("/v1/completions", b'{"prompt": "hi", "max_tokens": -' + HUGE[:400] + b"}", "max_tokens"),
    ("/v1/completions", b'{"prompt": "hi", "top_k": ' + HUGE + b"}", "top_k"),
    ("/v1/completions", b'{"prompt": "hi", "seed": -' + HUGE + b"}", "seed"),
    ("/v1/completions", b'{"prompt": "hi", "temperature": 1e400}', "temperature"),
    ("/v1/completions", b'{"prompt": "hi", "temperature": NaN}', None),
    ("/v1/completions", b'{"prompt": "hi", "max_tokens": Infinity}', None),
    ("/v1/chat/completions", b'{"messages": [{"role": "user", "content": "a \\ud800 b"}]}',
     "messages[0].content"),
    ("/v1/completions", b'{"prompt": "\\udfff"}', "prompt"),
    ("/v1/completions", b'{"prompt": "hi", "stop": ["\\ud83d"]}', "stop[0]"),
    ("/v1/completions", b'{"prompt": "hi\\u0000there"}', "prompt"),
    ("/v1/completions", b'{"prompt": "hi", "\\udc00b": 1}', "\\udc00b"),
    ("/v1/completions", b'{"prompt": "hi", "draftpair": {"a\\u0000": 1}}', "draftpair.a\\x00"),
    ("/v1/completions", b'{"prompt": "caf\xe9"}', None),  # Latin-1, not UTF-8
    ("/v1/completions", {"prompt": "hi", "draftpair": {"draft_kind": ["none"]}},
     "draftpair.draft_kind"),
    ("/v1/completions", {"prompt": "hi", "model": ["x"] * 1000}, "model"),
    ("/v1/completions", {"prompt": "hi", "draftpair": {"x" * 5000: 1}}, None),
    ("/v1/completions", {"prompt": ["a", "b"]}, "prompt"),
    ("/v1/completions", {"prompt": "hi", "stream": "yes"}, "stream"),
])
def test_client_mistakes_get_a_400_naming_the_field(keyed, path, body, param):
    status, data = call(keyed.url, path, body, key=KEY)
    assert status in (400, 404), data
    err = data["error"]
    assert err["type"] == "invalid_request_error" and err["message"]
    assert "Traceback" not in err["message"] and "config.json" not in err["message"]
    assert len(err["message"]) < 400
    if param is not None:
        assert err["param"] == param, err
    assert keyed.alive() and not tracebacks(keyed)
    status, _ = call(keyed.url, "/v1/completions", {"prompt": "hi", "max_tokens": 1}, key=KEY)
    assert status == 200


# -- API keys -----------------------------------------------------------------------------------


def test_non_ascii_api_keys_compare_as_utf8(keyed):
    good = {"prompt": "hi", "max_tokens": 1}
    assert call(keyed.url, "/v1/completions", good, key=KEY.encode("utf-8"))[0] == 200
    for wrong in (b"cl\xe9", b"cl\xff", "clê".encode(), b"cle", "é".encode(), b"\x80" * 64, b""):
        status, data = call(keyed.url, "/v1/completions", good, key=wrong)
        assert status == 401, (wrong, data)
        assert data["error"]["type"] == "authentication_error"
    assert call(keyed.url, "/v1/models", key=b"\xc3")[0] == 401
    assert call(keyed.url, "/v1/models", key=KEY)[0] == 200
    assert not tracebacks(keyed)


# -- idle and slow connections ------------------------------------------------------------------


def _closed_by_server(sock: socket.socket) -> bool:
    sock.settimeout(0.01)
    try:
        while sock.recv(4096):
            pass  # a 408/503 answer, then the end
        return True
    except (TimeoutError, BlockingIOError):
        return False
    except OSError:
        return True


def test_idle_and_half_sent_connections_cannot_lock_clients_out(keyed):
    """300 clients holding half-sent headers, three times the server's connection cap: the
    server stays reachable, closes every one of them (the longest waiting when a new client
    comes at the cap, the others after the client timeout) with one log line each, and
    prints no traceback."""
    from app.server.connections import raise_file_limit

    raise_file_limit()  # this process holds 300+ sockets too (macOS starts at 256)
    u = urllib.parse.urlsplit(keyed.url)
    host, port = u.hostname, u.port
    before = keyed.log().count("\n")
    socks = []
    try:
        for _ in range(300):
            s = socket.create_connection((host, port), timeout=10)
            s.sendall(b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Le")
            socks.append(s)
        ports = [s.getsockname()[1] for s in socks]
        silent = [socket.create_connection((host, port), timeout=10) for _ in range(3)]
        status, health = call(keyed.url, "/health", timeout=10)
        assert status == 200 and health["status"] == "ok"
        # a body that stops half-way is answered 408 after the client timeout
        slow = socket.create_connection((host, port), timeout=10)
        slow.sendall(f"POST /v1/completions HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer "
                     f"{KEY}\r\nContent-Length: 100\r\n\r\n{{\"pro".encode())
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline and not all(map(_closed_by_server, socks + silent)):
            time.sleep(0.2)
        assert all(map(_closed_by_server, socks + silent))
        slow.settimeout(10)
        assert slow.recv(4096).startswith(b"HTTP/1.1 408")
        slow.close()
    finally:
        for s in socks:
            s.close()
    assert keyed.alive()
    lines = keyed.log().splitlines()[before:]
    closed = [x for x in lines if "connection from 127.0.0.1" in x]
    for port in ports:  # one line per half-sent client (silent ones are only idle)
        mine = [x for x in closed if f"connection from 127.0.0.1:{port}:" in x
                or f"connection from 127.0.0.1:{port} " in x]
        assert len(mine) == 1, (port, mine, lines[-5:])
    assert all(x.startswith("draftpair: ") for x in closed)
    assert any("slow client" in x for x in lines)  # the half-sent body
    assert not tracebacks(keyed)
    assert call(keyed.url, "/v1/completions", {"prompt": "hi", "max_tokens": 1}, key=KEY)[0] == 200


def test_the_connection_cap_stays_under_the_open_files_limit():
    """In a process whose open-files limit is 256 (soft and hard), the cap leaves room for the
    server's own files; with a higher hard limit the soft one is raised to it first."""
    import subprocess
    import sys

    code = ("from app.server.connections import connection_cap, _open_files; import resource; "
            "print(connection_cap(), connection_cap(50), _open_files(), "
            "resource.getrlimit(resource.RLIMIT_NOFILE)[0])")
    for limits, expect_soft in (((256, 256), 256), ((256, 1024), 1024)):
        out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                             preexec_fn=limit_open_files(*limits), timeout=60, check=True)
        cap, cap50, open_files, soft = map(int, out.stdout.split())
        assert soft == expect_soft
        assert soft // 2 < cap <= soft - open_files - 64 and cap50 == 50


def test_failed_accepts_are_one_line_every_few_seconds_not_a_traceback_each():
    """Should accept() fail anyway (the process out of file handles for another reason),
    asyncio logs a traceback per attempt; the server's filter keeps one plain line."""
    import io
    import logging

    from app.server.connections import quiet_accept_errors

    quiet_accept_errors()
    quiet_accept_errors()  # once per process, however often it is called
    out = io.StringIO()
    handler = logging.StreamHandler(out)
    logger = logging.getLogger("asyncio")
    logger.addHandler(handler)
    try:
        for _ in range(50):
            try:
                raise OSError(24, "Too many open files")
            except OSError:
                logger.error("socket.accept() out of system resource\nsocket: <socket>",
                             exc_info=True)
        logger.error("something else")
    finally:
        logger.removeHandler(handler)
    lines = out.getvalue().splitlines()
    assert lines == ["cannot accept new connections: the process is out of file handles "
                     "(Too many open files)", "something else"]


# -- the engine thread --------------------------------------------------------------------------


class Panic(BaseException):
    """What a Rust panic inside a tokenizer looks like to Python: pyo3's PanicException
    derives from BaseException, so ``except Exception`` does not stop it."""


@pytest.fixture()
def served(tiny_models):
    handle = ServerHandle(ServerConfig(model=str(tiny_models.target), port=0,
                                       default_kind="prompt-lookup",
                                       limits=Limits(max_tokens_cap=64)))
    handle.start()
    yield handle
    handle.stop()


def _stream(url: str, body: dict) -> tuple[int, list]:
    u = urllib.parse.urlsplit(url)
    conn = http.client.HTTPConnection(u.hostname, u.port, timeout=TIMEOUT_S)
    try:
        conn.request("POST", "/v1/completions", body=json.dumps({**body, "stream": True}),
                     headers={"Content-Type": "application/json"})
        resp = conn.getresponse()
        chunks = [line[6:] for line in resp.read().decode().splitlines()
                  if line.startswith("data: ")]
        return resp.status, [c if c == "[DONE]" else json.loads(c) for c in chunks]
    finally:
        conn.close()


def test_a_request_the_engine_fails_on_is_failed_and_the_next_one_runs(served, monkeypatch):
    session = served.engine.session
    real = session.generate

    def panics_at_once(request, *, cancel=None):
        raise Panic("index out of bounds: the len is 3 but the index is 7")
        yield  # a generator, as the real one

    def panics_mid_reply(request, *, cancel=None):
        for ev in real(request, cancel=cancel):
            yield ev
            if type(ev).__name__ == "TokenEvent":
                raise Panic("called `Option::unwrap()` on a `None` value")

    body = {"prompt": "The cat sat on the mat.", "max_tokens": 6}
    monkeypatch.setattr(session, "generate", panics_at_once)
    status, data = call(served.url, "/v1/completions", body)
    assert status == 500 and data["error"]["code"] == "engine_error"
    assert "Panic" in data["error"]["message"]
    monkeypatch.setattr(session, "generate", panics_mid_reply)
    status, chunks = _stream(served.url, body)
    assert status == 200 and chunks[-1] == "[DONE]" and "error" in chunks[-2]
    monkeypatch.undo()
    status, data = call(served.url, "/v1/completions", body)  # the thread survived both
    assert status == 200 and data["usage"]["completion_tokens"] == 6
    status, health = call(served.url, "/health")
    assert status == 200 and health["status"] == "ok"
    assert health["engine"]["alive"] and not health["engine"]["busy"]
    assert health["engine"]["failed"] == 2 and "Panic" in health["engine"]["last_error"]
    assert [r.finish_reason for r in served.engine.recent()][-3:] == ["error", "error", "length"]


def test_health_says_so_when_the_engine_is_down(served):
    served.engine.stop()  # the engine thread ends; HTTP still runs
    status, health = call(served.url, "/health", timeout=10)
    assert status == 503 and health["status"] == "down" and not health["engine"]["alive"]
    status, data = call(served.url, "/v1/completions", {"prompt": "hi", "max_tokens": 2},
                        timeout=10)  # refused at once, never left waiting
    assert status == 503 and data["error"]["code"] == "engine_down"
