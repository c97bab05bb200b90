"""Server soak: randomized valid and hostile requests against a real ``draftpair serve``
process on 127.0.0.1, with idle and slow connections held beside them.

Public API:
    ServerSoakConfig(requests=1000, seed=0, max_tokens=4, hostile_rate=0.5, ...)
    run_server_soak(config, *, model, draft, log_path, progress=None) -> ServerSoakResult
    ServerSoakResult: crashes, hangs, 5xx answers, wrong answers, valid requests answered,
                      server RSS at start/end/max; to_dict(), format_text(), ok

The server runs in its own process, so a request that kills it is seen as what it is (an exit
status such as 139). A request with no answer within ``request_timeout_s`` is a hang. Beside
the requests, ``idle_connections`` connections (a third silent, the rest holding half-sent
headers) and ``slow_clients`` clients trickling a request a byte at a time are kept open and
renewed each time the server closes one. Everything is bounded: the request count, each
request's time, the connections opened. Not a timed test: it reports counts and memory.
"""

from __future__ import annotations

import concurrent.futures as cf
import http.client
import json
import random
import socket
import threading
import time
import urllib.parse
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from app.bench.hostile_probes import Probe, Target, make_probe
from app.bench.server_process import ServerProcess, crashed

SOAK_KEY = "soak-clé"  # a non-ASCII key, so every authorised request exercises that path


@dataclass
class ServerSoakConfig:
    requests: int = 1000
    seed: int = 0
    max_tokens: int = 4
    hostile_rate: float = 0.5
    concurrency: int = 3  # requests in flight at once
    idle_connections: int = 48
    slow_clients: int = 4
    client_timeout_s: float = 2.0  # the server's --client-timeout
    request_timeout_s: float = 120.0  # no answer within this: a hang
    max_body: int = 256 * 1024
    # a small cap, so that keeping earlier replies per key and conversation must evict
    reply_memory_mb: float = 0.25


@dataclass
class ServerSoakResult:
    requests: int = 0
    families: Counter = field(default_factory=Counter)
    statuses: Counter = field(default_factory=Counter)
    valid: int = 0
    valid_answered: int = 0
    hostile_refused: int = 0  # hostile requests answered with a right 4xx
    crashes: list[str] = field(default_factory=list)  # the server process died
    hangs: list[str] = field(default_factory=list)
    server_errors: list[str] = field(default_factory=list)  # 5xx to any request
    wrong: list[str] = field(default_factory=list)  # unexpected status or body
    idle_opened: int = 0
    idle_closed_by_server: int = 0
    slow_opened: int = 0
    slow_closed_by_server: int = 0
    rss: dict[str, int] = field(default_factory=dict)
    rss_trace: list[int] = field(default_factory=list)
    log_tracebacks: int = 0
    log_lines: int = 0
    reply_memory: list[dict[str, int]] = field(default_factory=list)  # status, each tenth
    exit_code: int | None = None
    elapsed_s: float = 0.0
    interrupted: bool = False

    @property
    def reply_memory_over_cap(self) -> bool:
        return any(m.get("bytes", 0) > m.get("cap_bytes", 0) for m in self.reply_memory)

    @property
    def ok(self) -> bool:
        return not (self.crashes or self.hangs or self.server_errors or self.wrong
                    or self.log_tracebacks or self.reply_memory_over_cap
                    ) and self.valid_answered == self.valid

    def to_dict(self) -> dict:
        return {
            "requests": self.requests, "families": dict(self.families),
            "statuses": {str(k): v for k, v in sorted(self.statuses.items(), key=str)},
            "valid": self.valid, "valid_answered": self.valid_answered,
            "hostile_refused": self.hostile_refused, "crashes": self.crashes,
            "hangs": self.hangs, "server_errors": self.server_errors, "wrong": self.wrong,
            "idle_opened": self.idle_opened, "idle_closed_by_server": self.idle_closed_by_server,
            "slow_opened": self.slow_opened, "slow_closed_by_server": self.slow_closed_by_server,
            "rss_mib": {k: round(v / 2**20, 1) for k, v in self.rss.items()},
            "rss_trace_mib": [round(x / 2**20, 1) for x in self.rss_trace],
            "log_tracebacks": self.log_tracebacks, "log_lines": self.log_lines,
            "reply_memory": self.reply_memory,
            "exit_code": self.exit_code, "elapsed_s": round(self.elapsed_s, 1),
            "interrupted": self.interrupted, "ok": self.ok,
        }  # fmt: skip

    def format_text(self) -> str:
        mib = lambda k: f"{self.rss.get(k, 0) / 2**20:.1f} MiB"  # noqa: E731
        lines = [
            f"{self.requests} requests to the server" + (" (interrupted)" if self.interrupted
                                                         else "") + f" in {self.elapsed_s:.0f} s",
            f"valid {self.valid_answered} of {self.valid} answered; hostile "
            f"{self.hostile_refused} of {self.requests - self.valid} refused with the right 4xx",
            f"crashes {len(self.crashes)}, hangs {len(self.hangs)}, 5xx answers "
            f"{len(self.server_errors)}, wrong answers {len(self.wrong)}, tracebacks in the "
            f"server log {self.log_tracebacks} ({self.log_lines} log lines)",
            f"idle connections {self.idle_opened} opened, {self.idle_closed_by_server} closed "
            f"by the server; slow clients {self.slow_opened} opened, "
            f"{self.slow_closed_by_server} closed by the server",
            f"server RSS {mib('start')} -> {mib('end')}, max {mib('max')}; after each tenth "
            "(MiB): " + " ".join(f"{x / 2**20:.0f}" for x in self.rss_trace),
            self._reply_memory_line(),
            f"statuses {dict(sorted(self.statuses.items(), key=str))}; families "
            f"{dict(self.families)}",
        ]
        for title, items in (("crash", self.crashes), ("hang", self.hangs),
                             ("5xx", self.server_errors), ("wrong", self.wrong)):
            lines += [f"  {title}: {x}" for x in items[:10]]
        return "\n".join(lines)

    def _reply_memory_line(self) -> str:
        if not self.reply_memory:
            return "earlier replies kept: not reported"
        last = self.reply_memory[-1]
        peak = max(m.get("bytes", 0) for m in self.reply_memory)
        return (f"earlier replies kept: at most {peak / 1024:.0f} KiB of the "
                f"{last.get('cap_bytes', 0) / 1024:.0f} KiB cap"
                + (" (OVER THE CAP)" if self.reply_memory_over_cap else "")
                + f"; at the end {last.get('replies', 0)} replies in {last.get('scopes', 0)} "
                "scopes")


# -- one request ---------------------------------------------------------------------------------


def send(url: str, probe: Probe, timeout_s: float) -> tuple[int, bytes]:
    """Send ``probe``; returns (status, body). Raises OSError (timeouts included)."""
    u = urllib.parse.urlsplit(url)
    conn = http.client.HTTPConnection(u.hostname or "127.0.0.1", u.port, timeout=timeout_s)
    headers: dict[str, str | bytes] = {"Content-Type": "application/json"}
    if probe.key is not None:
        headers["Authorization"] = b"Bearer " + probe.key
    try:
        conn.request(probe.method, probe.path, body=probe.body, headers=headers)
        resp = conn.getresponse()
        return resp.status, resp.read()
    finally:
        conn.close()


def _answer_problem(probe: Probe, status: int, body: bytes) -> str | None:
    """Why a 200 to a valid probe, or a 4xx, is not a proper answer (None: it is)."""
    text = body.decode("utf-8", "replace")
    if status == 200 and probe.stream:
        if not text.rstrip().endswith("data: [DONE]") or '"error"' in text:
            return "the stream did not end with [DONE], or carried an error"
        return None
    try:
        data = json.loads(text)
    except ValueError:
        return "the body is not JSON"
    if status == 200:
        return None if isinstance(data, dict) and data.get("choices") else "no choices"
    err = data.get("error") if isinstance(data, dict) else None
    if not (isinstance(err, dict) and isinstance(err.get("message"), str)):
        return "not OpenAI's error shape"
    if "Traceback" in err["message"] or len(err["message"]) > 600:
        return "the error message is not one plain sentence"
    return None


def _describe(probe: Probe) -> str:
    body = (probe.body or b"")[:80].decode("utf-8", "replace")
    return f"[{probe.family} {probe.method} {probe.path[:40]} {body!r}]"


# -- idle and slow connections beside the requests ----------------------------------------------


class Loiterers:
    """Idle connections and slow clients, renewed as the server closes them, on one thread."""

    HALF_SENT = b"POST /v1/chat/completions HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Ty"

    def __init__(self, url: str, config: ServerSoakConfig, result: ServerSoakResult,
                 server: ServerProcess, max_opens: int = 50_000):
        u = urllib.parse.urlsplit(url)
        self.addr = (u.hostname or "127.0.0.1", u.port or 80)
        self.config = config
        self.result = result
        self.server = server
        self.max_opens = max_opens
        self.stop = threading.Event()
        self.rss_max = 0
        self.idle: list[socket.socket] = []
        self.slow: list[tuple[socket.socket, bytes, int]] = []  # socket, request, bytes sent
        self.thread = threading.Thread(target=self._run, name="soak-loiterers", daemon=True)

    def start(self) -> None:
        self.thread.start()

    def close(self) -> None:
        self.stop.set()
        self.thread.join(30)
        for s in self.idle + [s for s, _, _ in self.slow]:
            s.close()

    def _open(self, first: bytes) -> socket.socket | None:
        opened = self.result.idle_opened + self.result.slow_opened
        if opened >= self.max_opens or not self.server.alive():
            return None
        try:
            s = socket.create_connection(self.addr, timeout=5)
            if first:
                s.sendall(first)
            s.setblocking(False)
            return s
        except OSError:
            return None

    def _closed(self, s: socket.socket) -> bool:
        try:
            while True:
                if not s.recv(65536):
                    return True
        except BlockingIOError:
            return False
        except OSError:
            return True

    def _run(self) -> None:
        body = b'{"prompt": "hi", "max_tokens": 1}'
        slow_request = (b"POST /v1/completions HTTP/1.1\r\nHost: 127.0.0.1\r\n"
                        b"Content-Type: application/json\r\nContent-Length: "
                        + str(len(body)).encode() + b"\r\n\r\n" + body)
        tick = 0
        while not self.stop.wait(0.1):
            tick += 1
            kept = []
            for s in self.idle:
                if self._closed(s):
                    s.close()
                    self.result.idle_closed_by_server += 1
                else:
                    kept.append(s)
            self.idle = kept
            while len(self.idle) < self.config.idle_connections:
                opened = self._open(b"" if len(self.idle) % 3 == 0 else self.HALF_SENT)
                if opened is None:
                    break
                self.idle.append(opened)
                self.result.idle_opened += 1
            moving = []
            for s, data, sent in self.slow:
                if self._closed(s):
                    s.close()
                    self.result.slow_closed_by_server += 1
                    continue
                if tick % 5 == 0 and sent < len(data):  # a byte every half second
                    try:
                        s.send(data[sent: sent + 1])
                        sent += 1
                    except OSError:
                        pass
                moving.append((s, data, sent))
            self.slow = moving
            while len(self.slow) < self.config.slow_clients:
                opened = self._open(b"")
                if opened is None:
                    break
                self.slow.append((opened, slow_request, 0))
                self.result.slow_opened += 1
            if tick % 5 == 0:
                self.rss_max = max(self.rss_max, self.server.rss())


# -- the run -------------------------------------------------------------------------------------


def _target(url: str, config: ServerSoakConfig, key: bytes) -> Target:
    status, body = send(url, Probe("valid", "GET", "/v1/models", None, key, (200,)), 60)
    if status != 200:
        raise RuntimeError(f"the server's model list answered {status}")
    card = json.loads(body)["data"][0]
    ext = card["draftpair"]
    kinds = tuple(k for k, ok in ext["draft_kinds"].items() if ok)
    return Target(key=key, model=card["id"], vocab=int(ext["vocab_size"]), kinds=kinds,
                  max_tokens=config.max_tokens, max_body=config.max_body,
                  max_tokens_cap=int(ext["max_tokens_cap"]))


def server_args(config: ServerSoakConfig, *, model: str, draft: str | None) -> list[str]:
    # room for the requests in flight; the loiterers fill the rest, so the cap is exercised
    cap = config.idle_connections + config.slow_clients + config.concurrency + 2
    args = ["--model", model, "--api-key", SOAK_KEY, "--max-body", str(config.max_body),
            "--client-timeout", str(config.client_timeout_s), "--max-connections", str(cap),
            "--max-queue", str(config.concurrency + 2),
            "--suffix-memory-mb", str(config.reply_memory_mb)]
    if draft:
        args += ["--draft", draft]
    return args


def run_server_soak(config: ServerSoakConfig, *, model: str, draft: str | None,
                    log_path: str | Path,
                    progress: Callable[[int, int, ServerSoakResult], None] | None = None
                    ) -> ServerSoakResult:
    """Start ``draftpair serve`` on ``model`` (and ``draft``), run the soak, stop it."""
    result = ServerSoakResult()
    server = ServerProcess(server_args(config, model=model, draft=draft), log_path)
    server.start()
    try:
        _soak(server, config, result, progress)
    except KeyboardInterrupt:  # Ctrl-C: report what ran so far
        result.interrupted = True
    finally:
        result.exit_code = server.stop()
        if crashed(result.exit_code) and not result.crashes:
            result.crashes.append(f"the server ended with exit status {result.exit_code}")
        log = server.log()
        result.log_tracebacks = log.count("Traceback")
        result.log_lines = log.count("\n")
    return result


def _soak(server: ServerProcess, config: ServerSoakConfig, result: ServerSoakResult,
          progress) -> None:
    key = SOAK_KEY.encode()
    target = _target(server.url, config, key)
    rng = random.Random(config.seed)
    for kind in target.kinds:  # warm-up of every kind, not counted
        body = json.dumps({"prompt": "Hello", "max_tokens": 2, "draftpair": {"draft_kind": kind}})
        send(server.url, Probe("valid", "POST", "/v1/completions", body.encode(), key, (200,)),
             config.request_timeout_s)
    probes = [make_probe(rng, target, rng.random() < config.hostile_rate)
              for _ in range(config.requests)]
    result.rss["start"] = server.rss()
    loiterers = Loiterers(server.url, config, result, server)
    loiterers.start()
    started = time.perf_counter()
    try:
        with cf.ThreadPoolExecutor(config.concurrency, thread_name_prefix="soak") as pool:
            futures = [pool.submit(_one, server.url, p, config) for p in probes]
            try:
                for i, fut in enumerate(futures):
                    _record(result, *fut.result(), server)
                    if (i + 1) % max(config.requests // 10, 1) == 0:
                        result.rss_trace.append(server.rss())
                        result.reply_memory.append(_reply_memory(server.url, config, key))
                    if progress is not None:
                        progress(i + 1, config.requests, result)
                    if result.crashes:
                        break
            finally:
                for fut in futures:
                    fut.cancel()
        # the loiterers stay long enough for the server to time some of them out
        until = started + 3 * config.client_timeout_s
        while time.perf_counter() < until and server.alive():
            time.sleep(0.1)
    finally:
        loiterers.close()
        result.elapsed_s = time.perf_counter() - started
        result.rss["end"] = server.rss()
        result.rss["max"] = max([loiterers.rss_max, result.rss["start"], result.rss["end"],
                                 *result.rss_trace])


def _reply_memory(url: str, config: ServerSoakConfig, key: bytes) -> dict[str, int]:
    """What the server keeps of earlier replies (its status endpoint's figures)."""
    try:
        status, body = send(url, Probe("valid", "GET", "/v1/draftpair/status", None, key,
                                       (200,)), config.request_timeout_s)
        return dict(json.loads(body)["reply_memory"]) if status == 200 else {}
    except (OSError, ValueError, KeyError, TypeError):
        return {}


def _one(url: str, probe: Probe, config: ServerSoakConfig
         ) -> tuple[Probe, int | None, bytes, str | None]:
    try:
        status, body = send(url, probe, config.request_timeout_s)
        return probe, status, body, None
    except TimeoutError:
        return probe, None, b"", "hang"
    except (OSError, http.client.HTTPException) as exc:
        return probe, None, b"", f"{type(exc).__name__}: {exc}"


def _record(result: ServerSoakResult, probe: Probe, status: int | None, body: bytes,
            error: str | None, server: ServerProcess) -> None:
    result.requests += 1
    result.families[probe.family] += 1
    result.statuses[status if status is not None else (error or "?").split(":")[0]] += 1
    what = _describe(probe)
    if probe.valid:
        result.valid += 1
    if error is not None:
        if not server.alive():
            result.crashes.append(f"{what}: the server died (exit status {server.exit_code})")
        elif error == "hang":
            result.hangs.append(f"{what}: no answer in time")
        else:
            result.wrong.append(f"{what}: {error}")
        return
    assert status is not None
    if status >= 500:
        result.server_errors.append(f"{what}: {status} {body[:200]!r}")
        return
    problem = _answer_problem(probe, status, body)
    if status not in probe.expect or problem:
        result.wrong.append(f"{what}: {status} {problem or body[:200]!r}")
        return
    if probe.valid:
        result.valid_answered += 1
    else:
        result.hostile_refused += 1
