"""A small fake Hugging Face Hub for tests: a real HTTP server on 127.0.0.1.

Speaks what huggingface_hub uses for DraftPair: model search (/api/models), model info with
file sizes (/api/models/{repo}[/revision/{rev}]) and file resolve (HEAD/GET + Range, ETag,
X-Repo-Commit). Point huggingface_hub at it with HF_ENDPOINT=hub.url. It counts requests,
can gate a repo (401 without a token), throttle, and die mid-file.
"""

from __future__ import annotations

import hashlib
import json
import socket
import threading
import time
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from urllib.parse import parse_qs, unquote, urlsplit


@dataclass
class FakeRepo:
    repo_id: str
    files: dict[str, bytes]
    gated: bool = False
    forbidden: bool = False  # 403 on files (a token without access)
    tags: list[str] = field(default_factory=lambda: ["mlx", "safetensors"])
    downloads: int = 0
    library: str = "mlx"

    @property
    def sha(self) -> str:
        h = hashlib.sha1(self.repo_id.encode())
        for name in sorted(self.files):
            h.update(name.encode())
            h.update(hashlib.sha256(self.files[name]).digest())
        return h.hexdigest()


class FakeHub:
    def __init__(self) -> None:
        self.repos: dict[str, FakeRepo] = {}
        self.requests: list[tuple[str, str]] = []  # (method, path)
        self.ranges: list[tuple[str, str]] = []  # (path, Range header) of ranged GETs
        self.lock = threading.Lock()
        self.die_on: tuple[str, int] | None = None  # (file name, bytes to send before dying,
        # on the first answer longer than that)
        self.throttle_bps: int | None = None
        self.server: ThreadingHTTPServer | None = None
        self.thread: threading.Thread | None = None
        self.port = 0

    # --- content ----------------------------------------------------------------------------
    def add_repo(
        self, repo_id: str, folder: Path | None = None, files: dict[str, bytes] | None = None, **kw
    ) -> FakeRepo:
        data = dict(files or {})
        if folder is not None:
            for p in sorted(Path(folder).rglob("*")):
                if p.is_file():
                    data[p.relative_to(folder).as_posix()] = p.read_bytes()
        repo = FakeRepo(repo_id, data, **kw)
        self.repos[repo_id] = repo
        return repo

    def count(self, method: str, filename: str | None = None) -> int:
        with self.lock:
            return sum(
                1 for m, p in self.requests
                if m == method and (filename is None or p.endswith("/" + filename))
            )  # fmt: skip

    # --- life cycle -------------------------------------------------------------------------
    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def start(self, port: int = 0) -> str:
        dying = getattr(self, "_dying", None)
        if dying is not None:  # a previous death must finish before the port is free
            dying.join(timeout=10)
            self._dying = None
        hub = self

        class Handler(_Handler):
            fake = hub

        deadline = time.monotonic() + 10
        while True:  # the dying server may still hold the port for a moment
            try:
                server = ThreadingHTTPServer(("127.0.0.1", port), Handler)
                break
            except OSError:
                if not port or time.monotonic() > deadline:
                    raise
                time.sleep(0.05)
        server.daemon_threads = True
        self.server = server
        self.port = server.server_address[1]
        self.thread = threading.Thread(
            target=server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True
        )
        self.thread.start()
        return self.url

    def use(self, monkeypatch, tmp_path: Path) -> None:
        """Point huggingface_hub and DraftPair at this hub, with empty caches under
        ``tmp_path`` and no token."""
        monkeypatch.setenv("HF_ENDPOINT", self.url)
        monkeypatch.setenv("HF_HOME", str(tmp_path / "hf"))
        monkeypatch.delenv("HF_HUB_CACHE", raising=False)
        monkeypatch.delenv("HF_TOKEN", raising=False)
        monkeypatch.setenv("DRAFTPAIR_DATA_DIR", str(tmp_path / "data"))
        monkeypatch.setenv("DRAFTPAIR_NO_BLAS_FIX", "1")

    def stop(self) -> None:
        server, self.server = self.server, None
        if server is not None:
            server.shutdown()
            server.server_close()
        if self.thread is not None:
            self.thread.join(timeout=5)
            self.thread = None

    def _die(self) -> None:
        dying = threading.Thread(target=self.stop, daemon=True)
        dying.start()  # start before publishing: start() may join it at once
        self._dying = dying


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    fake: FakeHub

    def log_message(self, *args) -> None:  # keep test output quiet
        pass

    def _json(self, status: int, data, headers: dict[str, str] | None = None) -> None:
        body = json.dumps(data).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        for k, v in (headers or {}).items():
            self.send_header(k, v)
        self.end_headers()
        if self.command != "HEAD":
            self.wfile.write(body)

    def _error(self, status: int, code: str, message: str) -> None:
        self._json(status, {"error": message}, {"X-Error-Code": code, "X-Error-Message": message})

    def do_HEAD(self) -> None:
        self._route()

    def do_GET(self) -> None:
        self._route()

    def _route(self) -> None:
        parts = urlsplit(self.path)
        path = unquote(parts.path)
        with self.fake.lock:
            self.fake.requests.append((self.command, path))
        query = parse_qs(parts.query)
        if path == "/api/models":
            return self._search(query)
        if path.startswith("/api/models/"):
            rest = path[len("/api/models/") :].split("/")
            repo_id = "/".join(rest[:2])
            return self._info(repo_id, query)
        segs = path.lstrip("/").split("/")
        if len(segs) >= 5 and segs[2] == "resolve":
            return self._resolve("/".join(segs[:2]), "/".join(segs[4:]))
        self._error(404, "NotFound", "unknown endpoint")

    def _search(self, query) -> None:
        term = (query.get("search") or [""])[0].lower()
        filters = query.get("filter") or []
        limit = int((query.get("limit") or ["1000"])[0])
        found = [
            r for r in self.fake.repos.values()
            if term in r.repo_id.lower() and all(f in r.tags or f == r.library for f in filters)
        ]  # fmt: skip
        found.sort(key=lambda r: -r.downloads)
        self._json(200, [self._model_json(r, siblings=False) for r in found[:limit]])

    def _model_json(self, repo: FakeRepo, siblings: bool = True, blobs: bool = False) -> dict:
        data = {
            "id": repo.repo_id,
            "modelId": repo.repo_id,
            "sha": repo.sha,
            "private": False,
            "gated": "manual" if repo.gated else False,
            "downloads": repo.downloads,
            "likes": 0,
            "tags": repo.tags,
            "library_name": repo.library,
            "lastModified": "2026-01-01T00:00:00.000Z",
        }
        if siblings:
            sib = []
            for name, content in sorted(repo.files.items()):
                entry = {"rfilename": name}
                if blobs:
                    entry["size"] = len(content)
                    entry["blobId"] = hashlib.sha1(content).hexdigest()
                    if name.endswith(".safetensors"):
                        entry["lfs"] = {
                            "size": len(content),
                            "sha256": hashlib.sha256(content).hexdigest(),
                            "pointerSize": 134,
                        }
                sib.append(entry)
            data["siblings"] = sib
        return data

    def _info(self, repo_id: str, query) -> None:
        repo = self.fake.repos.get(repo_id)
        if repo is None:
            return self._error(401, "RepoNotFound", "Repository not found")
        blobs = (query.get("blobs") or ["false"])[0].lower() == "true"
        self._json(200, self._model_json(repo, blobs=blobs))

    def _resolve(self, repo_id: str, filename: str) -> None:
        repo = self.fake.repos.get(repo_id)
        if repo is None:
            return self._error(401, "RepoNotFound", "Repository not found")
        if repo.gated and not self.headers.get("authorization"):
            return self._error(
                401, "GatedRepo", "Access to this model is restricted: you must be authenticated."
            )
        if repo.forbidden:
            return self._json(403, {"error": "Forbidden"})
        content = repo.files.get(filename)
        if content is None:
            self.send_response(404)
            self.send_header("X-Error-Code", "EntryNotFound")
            self.send_header("X-Repo-Commit", repo.sha)
            self.send_header("Content-Length", "0")
            self.end_headers()
            return
        start, end = 0, len(content) - 1
        rng = self.headers.get("Range")
        if rng and rng.startswith("bytes="):
            first, _, last = rng[len("bytes=") :].partition("-")
            start = int(first or 0)
            end = min(int(last), end) if last else end
            with self.fake.lock:
                self.fake.ranges.append((filename, rng))
        body = content[start : end + 1]
        ranged = bool(rng and rng.startswith("bytes="))
        self.send_response(206 if ranged else 200)
        self.send_header("Content-Type", "application/octet-stream")
        self.send_header("Content-Length", str(len(body)))
        self.send_header("Accept-Ranges", "bytes")
        if ranged:
            self.send_header("Content-Range", f"bytes {start}-{end}/{len(content)}")
        self.send_header("ETag", '"' + hashlib.sha256(content).hexdigest() + '"')
        self.send_header("X-Repo-Commit", repo.sha)
        self.end_headers()
        if self.command == "HEAD":
            return
        die = self.fake.die_on
        if die is not None and die[0] == filename and len(body) > die[1]:
            self.wfile.write(body[: die[1]])
            self.wfile.flush()
            self.fake.die_on = None
            self.close_connection = True
            try:
                self.connection.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass
            self.fake._die()
            return
        step = 64 * 1024
        for i in range(0, len(body), step):
            try:
                self.wfile.write(body[i : i + step])
            except (BrokenPipeError, ConnectionResetError):
                return
            if self.fake.throttle_bps:
                time.sleep(step / self.fake.throttle_bps)
