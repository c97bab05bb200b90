"""Putting back a multi-token-prediction head that a conversion dropped.

mlx-lm removes ``mtp.*`` (and DeepSeek/GLM NextN layers) when it converts a model, so most MLX
conversions of Qwen3.5 / Qwen3-Next / DeepSeek-V3 lack the head their source ships. The head is
restored into ``<model>/mtp/``: the source's ``config.json`` and one ``model.safetensors``
holding only the head's tensors, under the source's own names and dtypes. The MTP drafter
finds it there, and the pairing check counts it.

Public API:
    HEAD_DIR                                   "mtp"
    head_names(names, config) -> list[str]     the head's tensors among ``names``
    declared_layers(config) -> int             MTP layers a config declares (0: none)
    beside(model) -> dict[str, TensorInfo]     tensors of a head restored beside a model
    base_model(model) -> str | None            the source repository a conversion names
    copy_local(source, model, on_message=None) -> Path     from a local source folder
    fetch(repo_id, model, *, revision=None, progress=None, cancel=None) -> Path
        from the source repository on the Hub: the index says which shard holds the head,
        that shard's safetensors header says where, and only those bytes are fetched with
        HTTP range requests. An interrupted fetch resumes (``<model>/mtp/.partial``).
Errors are MTPSourceError or HubError, each one plain sentence.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import struct
import threading
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import BinaryIO

from app.checkpoints.hub_progress import DownloadProgress
from app.checkpoints.inspect import mtp_weights, text_config
from app.checkpoints.safetensors_header import (
    MAX_HEADER_BYTES,
    HeaderError,
    TensorInfo,
    parse_header,
    read_header,
)
from app.errors import DraftPairError
from app.fileio import JSON_LIMIT, atomic_write_json, read_regular_text

HEAD_DIR = "mtp"
HEAD_FILE = "model.safetensors"
# the NextN layer's copies of the embedding and the output head: the target's own are used
_SHARED = (".embed_tokens.", ".shared_head.head.")


class MTPSourceError(DraftPairError):
    pass


def head_names(names, config: dict) -> list[str]:
    return sorted(n for n in mtp_weights(list(names), config) if not any(s in n for s in _SHARED))


def declared_layers(config: dict | None) -> int:
    cfg = text_config(config or {})
    n = cfg.get("mtp_num_hidden_layers") or cfg.get("num_nextn_predict_layers") or 0
    return n if isinstance(n, int) and not isinstance(n, bool) and n > 0 else 0


def beside(model: Path) -> dict[str, TensorInfo]:
    """The head tensors in ``<model>/mtp/*.safetensors`` (headers only; empty if none)."""
    folder = Path(model) / HEAD_DIR
    try:
        config = json.loads(read_regular_text(folder / "config.json", limit=JSON_LIMIT))
    except (OSError, ValueError):
        return {}
    tensors: dict[str, TensorInfo] = {}
    for f in sorted(folder.glob("*.safetensors")):
        try:
            tensors.update(read_header(f).tensors)
        except HeaderError:
            return {}
    names = head_names(tensors, config if isinstance(config, dict) else {})
    return {n: tensors[n] for n in names}


def base_model(model: Path) -> str | None:
    """The ``base_model`` a model card names (mlx-lm writes it when it converts)."""
    try:
        text = (Path(model) / "README.md").read_text(encoding="utf-8", errors="replace")
    except OSError:
        return None
    if not text.startswith("---"):
        return None
    end = text.find("\n---", 3)
    if end < 0:
        return None
    import yaml

    try:
        meta = yaml.safe_load(text[3:end])
    except yaml.YAMLError:
        return None
    value = meta.get("base_model") if isinstance(meta, dict) else None
    if isinstance(value, list):
        value = value[0] if value else None
    return value if isinstance(value, str) and value.count("/") == 1 else None


@dataclass(frozen=True)
class _Piece:
    shard: str
    info: TensorInfo
    data_start: int  # file offset where the shard's tensor data begins


def _write_head(model: Path, config: dict, pieces: list[_Piece],
                locate: Callable[[_Piece], tuple[Path, int]], source: dict) -> Path:
    """``<model>/mtp/``: config.json, the head's tensors in one safetensors file, source.json.
    ``locate`` says which local file holds a piece's bytes, and at which offset."""
    folder = Path(model) / HEAD_DIR
    folder.mkdir(parents=True, exist_ok=True)
    header: dict = {"__metadata__": {"format": "pt"}}
    offset = 0
    for p in pieces:
        header[p.info.name] = {"dtype": p.info.dtype, "shape": list(p.info.shape),
                               "data_offsets": [offset, offset + p.info.nbytes]}
        offset += p.info.nbytes
    raw = json.dumps(header, separators=(",", ":")).encode()
    raw += b" " * (-len(raw) % 8)
    tmp = folder / f".{HEAD_FILE}.tmp"
    try:
        with open(tmp, "wb") as out, contextlib.ExitStack() as files:
            opened: dict[Path, BinaryIO] = {}
            out.write(struct.pack("<Q", len(raw)) + raw)
            for p in pieces:
                path, at = locate(p)
                if path not in opened:
                    opened[path] = files.enter_context(open(path, "rb"))
                opened[path].seek(at)
                data = opened[path].read(p.info.nbytes)
                if len(data) != p.info.nbytes:
                    raise MTPSourceError(f"{p.info.name} arrived with the wrong size; "
                                         "try again.")
                out.write(data)
            out.flush()
            os.fsync(out.fileno())
        os.replace(tmp, folder / HEAD_FILE)
    except BaseException:
        tmp.unlink(missing_ok=True)  # never a half-written head
        raise
    atomic_write_json(folder / "config.json", config)
    atomic_write_json(folder / "source.json", source)
    return folder


def copy_local(source: Path, model: Path, on_message: Callable[[str], None] | None = None
               ) -> Path | None:
    """Copy the head of a local source checkpoint beside ``model``; None if it has none."""
    source = Path(source)
    try:
        config = json.loads(read_regular_text(source / "config.json", limit=JSON_LIMIT))
    except (OSError, ValueError) as exc:
        raise MTPSourceError(f"{source} has no readable config.json ({exc}).") from None
    pieces: list[_Piece] = []
    for f in sorted(source.glob("*.safetensors")):
        head = read_header(f)
        pieces += [_Piece(f.name, head.tensors[n], head.data_start)
                   for n in head_names(head.tensors, config)]
    if not pieces:
        return None
    folder = _write_head(model, config, pieces,
                         lambda p: (source / p.shard, p.data_start + p.info.start),
                         {"source": str(source), "tensors": len(pieces)})
    if on_message:
        on_message(f"Kept the multi-token-prediction head ({len(pieces)} tensors) in {folder}")
    return folder


# --- from the Hub ---------------------------------------------------------------------------

class _Remote:
    """Byte ranges of one repository's files at one commit."""

    def __init__(self, repo_id: str, sha: str):
        from huggingface_hub.utils import build_hf_headers

        self.repo_id = repo_id
        self.sha = sha
        self.headers = build_hf_headers()

    def _location(self, name: str) -> tuple[str, dict]:
        from huggingface_hub import get_hf_file_metadata, hf_hub_url

        from app.checkpoints.hub import hub_endpoint, urlsplit_host

        url = hf_hub_url(self.repo_id, name, revision=self.sha, endpoint=hub_endpoint())
        meta = get_hf_file_metadata(url, headers=self.headers, endpoint=hub_endpoint())
        location = meta.location or url
        headers = dict(self.headers)
        if urlsplit_host(location) != urlsplit_host(url):
            headers.pop("authorization", None)  # a signed CDN link takes no token
        return location, headers

    def stream(self, name: str, first: int, last: int, on_chunk: Callable[[bytes], None]) -> None:
        """Bytes ``first..last`` (inclusive) of ``name``, chunk by chunk."""
        from huggingface_hub.utils import get_session, hf_raise_for_status

        location, headers = self._location(name)
        headers["Range"] = f"bytes={first}-{last}"
        with get_session().stream("GET", location, headers=headers,
                                  follow_redirects=True) as r:
            hf_raise_for_status(r)
            if r.status_code != 206:
                raise MTPSourceError(
                    "The Hub sent the whole file instead of the part asked for, so only the "
                    "head cannot be fetched; download the full source model instead.")
            for chunk in r.iter_bytes():
                on_chunk(chunk)

    def read(self, name: str, first: int, last: int) -> bytes:
        parts: list[bytes] = []
        self.stream(name, first, last, parts.append)
        return b"".join(parts)

    def json(self, name: str) -> dict:
        """A small JSON file of the repository (kept in the HF cache like any download)."""
        from huggingface_hub import hf_hub_download

        from app.checkpoints.hub import hub_endpoint
        from app.checkpoints.store import hf_cache_dir

        path = hf_hub_download(self.repo_id, name, revision=self.sha,
                               cache_dir=str(hf_cache_dir()), endpoint=hub_endpoint())
        try:
            data = json.loads(read_regular_text(path, limit=JSON_LIMIT))
        except ValueError:
            raise MTPSourceError(f"{name} in {self.repo_id} is not valid JSON.") from None
        if not isinstance(data, dict):
            raise MTPSourceError(f"{name} in {self.repo_id} is not a JSON object.")
        return data


def _shards_with_head(remote: _Remote, files: set[str], config: dict) -> dict[str, list[str]]:
    """Shard -> head tensor names, from the index (or the one weights file)."""
    if "model.safetensors.index.json" in files:
        wm = remote.json("model.safetensors.index.json").get("weight_map") or {}
        out: dict[str, list[str]] = {}
        for name in head_names(wm, config):
            out.setdefault(str(wm[name]), []).append(name)
        return out
    singles = sorted(f for f in files if f.endswith(".safetensors") and "/" not in f)
    return {f: [] for f in singles}  # names come from the header


def _plan(remote: _Remote, shards: dict[str, list[str]], config: dict) -> list[_Piece]:
    pieces: list[_Piece] = []
    for shard, wanted in sorted(shards.items()):
        (n,) = struct.unpack("<Q", remote.read(shard, 0, 7))
        if n == 0 or n > MAX_HEADER_BYTES:
            raise MTPSourceError(f"{shard} in {remote.repo_id} is not a safetensors file.")
        head = parse_header(remote.read(shard, 8, 8 + n - 1), shard)
        names = wanted or head_names(head.tensors, config)
        missing = [w for w in names if w not in head.tensors]
        if missing:
            raise MTPSourceError(f"{shard} in {remote.repo_id} does not hold {missing[0]}, "
                                 "although its index says so.")
        pieces += [_Piece(shard, head.tensors[w], head.data_start) for w in names]
    return pieces


def fetch(repo_id: str, model: Path, *, revision: str | None = None,
          progress: Callable[[DownloadProgress], None] | None = None,
          cancel: threading.Event | None = None) -> Path:
    """Fetch only the head's bytes from ``repo_id`` into ``<model>/mtp/``."""
    from app.checkpoints.hub import repo_info
    from app.checkpoints.hub_errors import DownloadCancelled, is_network_error, plain_error
    from app.checkpoints.hub_progress import ProgressMeter

    info = repo_info(repo_id, revision=revision)
    if not info.sha:
        raise MTPSourceError(f"The Hub did not say which version of {repo_id} to read.")
    files = {f.name for f in info.files}
    if "config.json" not in files:
        raise MTPSourceError(f"{repo_id} has no config.json, so it is not a model repository.")
    remote = _Remote(info.repo_id, info.sha)
    partial = Path(model) / HEAD_DIR / ".partial"
    try:
        config = remote.json("config.json")
        pieces = _plan(remote, _shards_with_head(remote, files, config), config)
        if not pieces:
            raise MTPSourceError(f"{repo_id} has no multi-token-prediction head either.")
        spans = _spans(pieces)
        total = sum(sp.hi - sp.lo for sp in spans)
        _check_space(Path(model), 2 * total)  # the fetched ranges, then the head file
        meter = ProgressMeter(repo_id, total, len(spans), progress, cancel)
        meter.emit()
        _check_partial(partial, info.sha)
        for sp in spans:
            meter.current = sp.shard
            _fetch_span(remote, sp, partial / sp.part_name, meter)
            meter.files_done += 1
        def locate(p: _Piece) -> tuple[Path, int]:
            sp = _span_of(spans, p)
            return partial / sp.part_name, p.data_start + p.info.start - sp.lo

        folder = _write_head(model, config, pieces, locate,
                             {"repo": info.repo_id, "revision": info.sha,
                              "shards": sorted({sp.shard for sp in spans}),
                              "tensors": len(pieces)})
    except (MTPSourceError, DownloadCancelled):
        raise
    except Exception as exc:  # noqa: BLE001 - one plain sentence for the user
        if is_network_error(exc):
            raise MTPSourceError(
                f"The connection to the Hub was lost while fetching the head from {repo_id}; "
                "run it again to resume.") from None
        raise plain_error(exc, repo_id) from None
    shutil.rmtree(partial, ignore_errors=True)
    meter.current = None
    meter.emit(finished=True)
    return folder


# head tensors closer than this in a shard are fetched as one range (fewer requests)
MERGE_GAP = 4 * 1024 * 1024


@dataclass(frozen=True)
class _Span:
    shard: str
    lo: int  # file offsets, [lo, hi)
    hi: int

    @property
    def part_name(self) -> str:
        return f"{self.shard}.{self.lo}-{self.hi}.part"


def _spans(pieces: list[_Piece]) -> list[_Span]:
    """The byte ranges to fetch: each piece's bytes, neighbours within MERGE_GAP merged."""
    ranges = sorted((p.shard, p.data_start + p.info.start,
                     p.data_start + p.info.start + p.info.nbytes) for p in pieces)
    out: list[_Span] = []
    for shard, lo, hi in ranges:
        last = out[-1] if out else None
        if last is not None and last.shard == shard and lo - last.hi <= MERGE_GAP:
            out[-1] = _Span(shard, last.lo, max(hi, last.hi))
        else:
            out.append(_Span(shard, lo, hi))
    return out


def _span_of(spans: list[_Span], p: _Piece) -> _Span:
    at = p.data_start + p.info.start
    return next(s for s in spans
                if s.shard == p.shard and s.lo <= at and at + p.info.nbytes <= s.hi)


def _check_space(folder: Path, need: int) -> None:
    from app.checkpoints.memory_estimate import format_bytes

    free = shutil.disk_usage(folder).free
    if need + 64 * 1024 * 1024 > free:
        raise MTPSourceError(f"Not enough free disk space: the head needs {format_bytes(need)} "
                             f"and {format_bytes(free)} is free in {folder}.")


def _check_partial(partial: Path, sha: str) -> None:
    """Keep bytes of an earlier attempt only if they came from the same commit."""
    mark = partial / "revision"
    try:
        same = mark.read_text().strip() == sha
    except OSError:
        same = False
    if not same:
        shutil.rmtree(partial, ignore_errors=True)
        partial.mkdir(parents=True, exist_ok=True)
        mark.write_text(sha)


def _fetch_span(remote: _Remote, sp: _Span, part: Path, meter) -> None:
    want = sp.hi - sp.lo
    have = part.stat().st_size if part.exists() else 0
    if have > want:
        part.unlink()
        have = 0
    meter.credit(have)
    if have < want:
        with open(part, "ab") as fh:
            def write(chunk: bytes) -> None:
                fh.write(chunk)
                meter.add(len(chunk))  # raises DownloadCancelled; the bytes so far stay

            remote.stream(sp.shard, sp.lo + have, sp.hi - 1, write)
    if part.stat().st_size != want:
        raise MTPSourceError(f"The head's bytes of {sp.shard} arrived with the wrong size; "
                             "run it again.")
