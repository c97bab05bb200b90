"""Hugging Face Hub: search, file sizes, and resumable downloads into the HF cache.

Public API (all callable from a worker thread; errors are HubError with a plain message):
    search(query, *, limit=20, mlx_only=True) -> list[HubModel]     sorted by downloads
    repo_info(repo_id, *, revision=None) -> HubRepoInfo              file sizes before download
    download(repo_id, *, revision=None, progress=None, cancel=None, allow_patterns=None)
        -> Path (the snapshot folder in the HF cache)
        progress(DownloadProgress) gets bytes done/total, rate, ETA and the current file;
        cancel is a threading.Event (raises DownloadCancelled); a later call resumes, and
        files already finished are not fetched again.
    hub_endpoint() -> str    HF_ENDPOINT read at call time (tests point it at a fake hub)

Never downloads pickle weights (.bin/.pt/...) or Python files. Uses the token that
huggingface_hub already stores (or HF_TOKEN).
"""

from __future__ import annotations

import fnmatch
import os
import shutil
import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from app.checkpoints.hub_errors import (
    DownloadCancelled,
    HubError,
    is_network_error,
    plain_error,
)
from app.checkpoints.hub_progress import DownloadProgress, ProgressMeter
from app.checkpoints.store import hf_cache_dir

DEFAULT_ENDPOINT = "https://huggingface.co"
ALLOW_PATTERNS = (
    "*.safetensors", "*.safetensors.index.json", "*.json", "*.jinja", "tokenizer.model",
    "*.tiktoken", "tiktoken.model", "*.txt", "*.md",
)  # fmt: skip
NEVER_PATTERNS = (
    "*.bin",
    "*.pt",
    "*.pth",
    "*.ckpt",
    "*.pkl",
    "*.pickle",
    "*.py",
    "*.msgpack",
    "*.h5",
    "*.gguf",
    "*.onnx",
)
DISK_MARGIN = 256 * 1024 * 1024


def hub_endpoint() -> str:
    return (os.environ.get("HF_ENDPOINT") or DEFAULT_ENDPOINT).rstrip("/")


def _api():
    from huggingface_hub import HfApi

    _check_reachable()
    return HfApi(endpoint=hub_endpoint())


def _check_reachable(timeout: float = 5.0) -> None:
    """Fail fast when offline: huggingface_hub itself retries a refused connection for ~20 s."""
    if os.environ.get("HF_HUB_OFFLINE", "").lower() in ("1", "true", "yes", "on"):
        raise HubError(
            "Hugging Face offline mode is on (HF_HUB_OFFLINE), so the Hub cannot be used."
        )
    if any(
        os.environ.get(k)
        for k in (
            "HTTPS_PROXY",
            "https_proxy",
            "HTTP_PROXY",
            "http_proxy",
            "ALL_PROXY",
            "all_proxy",
        )
    ):
        return  # only the proxy knows whether the Hub is reachable
    import socket
    from urllib.parse import urlsplit

    url = urlsplit(hub_endpoint())
    port = url.port or (443 if url.scheme == "https" else 80)
    try:
        socket.create_connection((url.hostname or "", port), timeout=timeout).close()
    except OSError:
        raise HubError(
            f"The Hugging Face Hub ({url.hostname}) cannot be reached: check your internet connection and try again."
        ) from None


@dataclass(frozen=True)
class HubModel:
    repo_id: str
    downloads: int | None
    likes: int | None
    last_modified: str | None
    tags: tuple[str, ...]
    gated: bool
    library: str | None


@dataclass(frozen=True)
class HubFile:
    name: str
    size: int | None
    allowed: bool


@dataclass(frozen=True)
class HubRepoInfo:
    repo_id: str
    sha: str | None
    files: tuple[HubFile, ...]
    gated: bool
    private: bool
    tags: tuple[str, ...]
    library: str | None

    @property
    def download_bytes(self) -> int:
        return sum(f.size or 0 for f in self.files if f.allowed)

    @property
    def skipped(self) -> list[str]:
        return [f.name for f in self.files if not f.allowed]

    @property
    def is_mlx(self) -> bool:
        return self.library == "mlx" or "mlx" in self.tags

    @property
    def has_safetensors(self) -> bool:
        return any(f.name.endswith(".safetensors") for f in self.files)


def is_allowed(name: str, allow_patterns: tuple[str, ...] | list[str] = ALLOW_PATTERNS) -> bool:
    base = name.rsplit("/", 1)[-1]
    if any(fnmatch.fnmatch(base, p) for p in NEVER_PATTERNS):
        return False
    return any(fnmatch.fnmatch(name, p) or fnmatch.fnmatch(base, p) for p in allow_patterns)


def search(query: str, *, limit: int = 20, mlx_only: bool = True) -> list[HubModel]:
    try:
        api = _api()
        models = api.list_models(
            search=query or None,
            filter="mlx" if mlx_only else None,
            sort="downloads",
            limit=limit,
        )
        out = []
        for m in models:
            out.append(
                HubModel(
                    repo_id=m.id,
                    downloads=m.downloads,
                    likes=m.likes,
                    last_modified=m.last_modified.isoformat() if m.last_modified else None,
                    tags=tuple(m.tags or ()),
                    gated=bool(m.gated),
                    library=m.library_name,
                )
            )
        return out
    except Exception as exc:  # noqa: BLE001 - every failure becomes one plain sentence
        raise plain_error(exc, "the search") from None


def repo_info(
    repo_id: str, *, revision: str | None = None, allow_patterns=ALLOW_PATTERNS
) -> HubRepoInfo:
    try:
        info = _api().model_info(repo_id, revision=revision, files_metadata=True)
    except Exception as exc:  # noqa: BLE001
        raise plain_error(exc, repo_id) from None
    files = tuple(
        HubFile(
            s.rfilename,
            s.size if s.size is not None else (s.lfs.size if s.lfs else None),
            is_allowed(s.rfilename, allow_patterns),
        )
        for s in (info.siblings or [])
    )
    return HubRepoInfo(
        repo_id=info.id,
        sha=info.sha,
        files=files,
        gated=bool(info.gated),
        private=bool(info.private),
        tags=tuple(info.tags or ()),
        library=info.library_name,
    )


# Files at least this big are fetched with byte-range resume: an interrupted 5 GB shard
# continues where it stopped (huggingface_hub restarts a file from zero).
RESUMABLE_MIN_BYTES = 64 * 1024 * 1024


def _fetch_resumable(
    repo_id: str, name: str, sha: str, size: int, cache: Path, meter: ProgressMeter
) -> None:
    """Download one file into the HF cache layout, keeping ``blobs/<etag>.incomplete`` between
    attempts and continuing it with an HTTP Range request."""
    from huggingface_hub import get_hf_file_metadata, hf_hub_url
    from huggingface_hub.utils import (
        WeakFileLock,
        build_hf_headers,
        get_session,
        hf_raise_for_status,
    )

    url = hf_hub_url(repo_id, name, revision=sha, endpoint=hub_endpoint())
    headers = build_hf_headers()
    meta = get_hf_file_metadata(url, headers=headers, endpoint=hub_endpoint())
    if not meta.etag:
        raise HubError(f"The Hub gave no checksum for {name}, so it cannot be resumed safely.")
    expected = meta.size or size
    repo_dir = cache / ("models--" + repo_id.replace("/", "--"))
    blob = repo_dir / "blobs" / meta.etag
    pointer = repo_dir / "snapshots" / sha / name
    partial = blob.with_name(meta.etag + ".incomplete")
    lock = cache / ".locks" / repo_dir.name / f"{meta.etag}.lock"
    for d in (blob.parent, pointer.parent, lock.parent):
        d.mkdir(parents=True, exist_ok=True)
    location = meta.location or url
    get_headers = dict(headers)
    if urlsplit_host(location) != urlsplit_host(url):
        get_headers.pop("authorization", None)  # signed CDN link: no token
    with WeakFileLock(lock):
        if not blob.exists():
            have = partial.stat().st_size if partial.exists() else 0
            resumed = have > 0
            if have > expected:
                partial.unlink()
                have = 0
            meter.credit(have)  # bytes kept from an earlier attempt
            if have < expected:
                if have:
                    get_headers["Range"] = f"bytes={have}-"
                with get_session().stream(
                    "GET", location, headers=get_headers, follow_redirects=True
                ) as r:
                    hf_raise_for_status(r)
                    mode = "ab"
                    if have and r.status_code == 200:  # the server ignored the range: start over
                        meter.credit(-have)
                        have, mode = 0, "wb"
                    with partial.open(mode) as f:
                        for chunk in r.iter_bytes():  # as it arrives: prompt cancel, no lost tail
                            f.write(chunk)
                            have += len(chunk)
                            meter.add(
                                len(chunk)
                            )  # raises DownloadCancelled; the partial file stays
            if partial.stat().st_size != expected:
                raise HubError(f"{name} arrived with the wrong size; run the download again.")
            if resumed and not _matches_etag(partial, meta.etag):
                partial.unlink()  # spliced bytes that do not add up: never keep them
                raise HubError(
                    f"{name} did not match the Hub's checksum after resuming, so it was "
                    "discarded; run the download again."
                )
            os.replace(partial, blob)
        if not pointer.exists():
            try:
                pointer.symlink_to(os.path.relpath(blob, pointer.parent))
            except OSError:  # no symlinks here (e.g. Windows without developer mode)
                shutil.copyfile(blob, pointer)


def _matches_etag(path: Path, etag: str) -> bool:
    """A resumed file against the Hub's ETag, which for LFS files is the SHA-256 of the
    content (other ETags cannot be checked and pass)."""
    import hashlib
    import re

    tag = etag.strip('"').lower()
    if not re.fullmatch(r"[0-9a-f]{64}", tag):
        return True
    h = hashlib.sha256()
    with path.open("rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest() == tag


def urlsplit_host(url: str) -> str:
    from urllib.parse import urlsplit

    return urlsplit(url).netloc


@dataclass
class _Plan:
    sha: str
    files: list[tuple[str, int]] = field(default_factory=list)  # (name, size) to fetch
    cached: list[str] = field(default_factory=list)


def _snapshot_dir(cache: Path, repo_id: str, sha: str) -> Path:
    return cache / ("models--" + repo_id.replace("/", "--")) / "snapshots" / sha


def download(
    repo_id: str,
    *,
    revision: str | None = None,
    progress: Callable[[DownloadProgress], None] | None = None,
    cancel: threading.Event | None = None,
    allow_patterns: tuple[str, ...] | list[str] = ALLOW_PATTERNS,
    cache_dir: Path | None = None,
) -> Path:
    """Download the allowed files of ``repo_id`` into the HF cache; return the snapshot folder."""
    from huggingface_hub import hf_hub_download

    cache = Path(cache_dir) if cache_dir else hf_cache_dir()
    info = repo_info(repo_id, revision=revision, allow_patterns=allow_patterns)
    if not info.sha:
        raise HubError(f"The Hub did not say which version of {repo_id} to download.")
    wanted = [f for f in info.files if f.allowed]
    if not any(f.name.endswith(".safetensors") for f in wanted):
        if any(not f.allowed and f.name.endswith((".bin", ".pt", ".pth")) for f in info.files):
            raise HubError(
                f"{repo_id} has only pickle weights (.bin/.pt), which DraftPair never downloads."
            )
        raise HubError(f"{repo_id} has no safetensors weights to download.")
    snap = _snapshot_dir(cache, repo_id, info.sha)
    plan = _Plan(sha=info.sha)
    for f in wanted:
        if (snap / f.name).exists():
            plan.cached.append(f.name)
        else:
            plan.files.append((f.name, f.size or 0))
    need = sum(size for _, size in plan.files)
    cache.mkdir(parents=True, exist_ok=True)
    free = shutil.disk_usage(cache).free
    if need + DISK_MARGIN > free and need > 0:
        from app.checkpoints.memory_estimate import format_bytes

        raise HubError(
            f"Not enough free disk space: {repo_id} needs {format_bytes(need)} more, "
            f"and {format_bytes(free)} is free in {cache}."
        )
    total = info.download_bytes
    meter = ProgressMeter(repo_id, total, len(wanted), progress, cancel)
    meter.done = total - need
    meter.files_done = len(plan.cached)
    meter.emit()
    bar = meter.bar_class()
    for name, size in plan.files:
        meter.check_cancel()
        meter.current = name
        meter.emit()  # announce the file (a UI shows its name; cancel can act mid-file)
        before = meter.done
        try:
            if size >= RESUMABLE_MIN_BYTES:
                _fetch_resumable(repo_id, name, info.sha, size, cache, meter)
            else:
                hf_hub_download(
                    repo_id,
                    name,
                    revision=info.sha,
                    cache_dir=str(cache),
                    endpoint=hub_endpoint(),
                    tqdm_class=bar,
                )
        except DownloadCancelled:
            raise
        except Exception as exc:  # noqa: BLE001
            if is_network_error(exc):  # the Hub answered a moment ago: the link dropped
                raise HubError(
                    f"The connection to the Hub was lost while downloading {name}; run the "
                    "download again to resume (finished files are kept)."
                ) from None
            raise plain_error(exc, repo_id) from None
        # keep totals exact even when the server's sizes differ from the listing
        meter.done = before + size if meter.done - before != size else meter.done
        meter.files_done += 1
        meter.emit()
    ref = revision or "main"
    if ref != info.sha:  # like huggingface_hub: a branch/tag name points at the commit
        ref_path = snap.parent.parent / "refs" / ref
        ref_path.parent.mkdir(parents=True, exist_ok=True)
        ref_path.write_text(info.sha)
    meter.current = None
    meter.emit(finished=True)
    return snap
