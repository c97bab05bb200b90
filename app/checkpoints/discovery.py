"""Find the GGUF models people already have: LM Studio, Ollama, llama.cpp's cache, the HF cache.

Public API:
    discovery_roots() -> dict[str, list[Path]]      where each app keeps its models (env aware)
    discover(roots=None) -> list[FoundModel]        every GGUF found, headers only (quick)
    find_model(ref, roots=None) -> FoundModel | None    by id ("ollama:qwen3:0.6b") or path
    FoundModel: id, name, where, path (the GGUF, first part of a split set), files,
                size_bytes, architecture, quantization, context_length, has_chat_template,
                supported, reason, to_dict()

Roots (each overridable, for tests and unusual set-ups):
    LM Studio   $DRAFTPAIR_LMSTUDIO_MODELS, else ~/.lmstudio/models and ~/.cache/lm-studio/models
    Ollama      $OLLAMA_MODELS (Ollama's own variable), else ~/.ollama/models; manifests under
                manifests/<registry>/<namespace>/<model>/<tag> list layers, the one with media type
                application/vnd.ollama.image.model is a GGUF blob (blobs/sha256-<digest>)
    llama.cpp   $LLAMA_CACHE (llama.cpp's own variable), else ~/.cache/llama.cpp
                (~/Library/Caches/llama.cpp on macOS)
    HF cache    the Hugging Face hub cache (.gguf files in model snapshots)
Nothing is copied or converted here; importing reads the GGUF where it is.
"""

from __future__ import annotations

import json
import os
import sys
from dataclasses import asdict, dataclass
from pathlib import Path

from app.checkpoints.gguf_arch import SUPPORTED
from app.checkpoints.gguf_header import SPLIT_RE, GGUFHeaderError, read_header, split_files

LMSTUDIO = "LM Studio"
OLLAMA = "Ollama"
LLAMA_CPP = "llama.cpp cache"
HF_CACHE = "Hugging Face cache"
OLLAMA_MODEL_LAYER = "application/vnd.ollama.image.model"
MAX_DEPTH = 5


@dataclass
class FoundModel:
    id: str
    name: str
    where: str
    path: Path
    files: list[Path]
    size_bytes: int
    architecture: str | None = None
    quantization: str | None = None
    context_length: int | None = None
    has_chat_template: bool = False
    supported: bool = False
    reason: str | None = None

    def to_dict(self) -> dict:
        d = asdict(self)
        d["path"] = str(self.path)
        d["files"] = [str(f) for f in self.files]
        return d


def _home() -> Path:
    return Path(os.environ.get("HOME") or Path.home())


def _env_path(name: str) -> Path | None:
    v = os.environ.get(name)
    return Path(os.path.expandvars(v)).expanduser() if v else None


def discovery_roots() -> dict[str, list[Path]]:
    home = _home()
    lm = _env_path("DRAFTPAIR_LMSTUDIO_MODELS")
    xdg = _env_path("XDG_CACHE_HOME") or home / ".cache"
    llama = _env_path("LLAMA_CACHE")
    if llama is None:
        mac = home / "Library" / "Caches" / "llama.cpp"
        llama = mac if sys.platform == "darwin" else xdg / "llama.cpp"
    from app.checkpoints.store import hf_cache_dir

    return {
        LMSTUDIO: [lm] if lm else [home / ".lmstudio" / "models", xdg / "lm-studio" / "models"],
        OLLAMA: [_env_path("OLLAMA_MODELS") or home / ".ollama" / "models"],
        LLAMA_CPP: [llama],
        HF_CACHE: [hf_cache_dir()],
    }


def _quant_name(meta: dict) -> str | None:
    ft = meta.get("general.file_type")
    if not isinstance(ft, int):
        return None
    try:
        from gguf import LlamaFileType

        return LlamaFileType(ft).name.removeprefix("MOSTLY_")
    except (ImportError, ValueError):
        return None


def _describe(id_: str, name: str, where: str, path: Path) -> FoundModel | None:
    """A FoundModel for one GGUF (None for files that are not models, e.g. vision projectors)."""
    reason: str | None = None
    try:
        files = split_files(path)
    except GGUFHeaderError as exc:
        files, reason = [path], str(exc)
    size = 0
    for f in files:
        try:
            size += f.stat().st_size
        except OSError:
            pass
    found = FoundModel(id=id_, name=name, where=where, path=path, files=files, size_bytes=size)
    try:
        head = read_header(path)
    except GGUFHeaderError as exc:
        found.reason = str(exc)
        return found
    if head.meta.get("general.type") in ("mmproj", "adapter") or path.name.startswith("mmproj"):
        return None
    found.architecture = head.architecture
    found.quantization = _quant_name(head.meta)
    found.context_length = head.context_length
    found.has_chat_template = head.has_chat_template
    found.supported = head.architecture in SUPPORTED and reason is None
    if reason:
        found.reason = reason
    elif not found.supported:
        found.reason = f"DraftPair cannot convert {head.architecture or 'this kind of'} models yet."
    return found


def _walk_gguf(root: Path, depth: int = MAX_DEPTH):
    """*.gguf under root (first parts of split sets only), following symlinked files."""
    try:
        entries = sorted(os.scandir(root), key=lambda e: e.name)
    except OSError:
        return
    for e in entries:
        if e.name.startswith("."):
            continue
        p = Path(e.path)
        if e.is_dir(follow_symlinks=False) and depth > 0:
            yield from _walk_gguf(p, depth - 1)
        elif e.name.lower().endswith(".gguf") and e.is_file():
            m = SPLIT_RE.match(e.name)
            if m is None or int(m["no"]) == 1:
                yield p


def _lmstudio(root: Path) -> list[FoundModel]:
    out = []
    for p in _walk_gguf(root):
        rel = p.relative_to(root).as_posix()
        f = _describe(f"lmstudio:{rel}", rel.removesuffix(".gguf"), LMSTUDIO, p)
        if f:
            out.append(f)
    return out


def _llamacpp(root: Path) -> list[FoundModel]:
    out = []
    for p in _walk_gguf(root):
        rel = p.relative_to(root).as_posix()
        f = _describe(f"llama.cpp:{rel}", p.stem, LLAMA_CPP, p)
        if f:
            out.append(f)
    return out


def _ollama(root: Path) -> list[FoundModel]:
    manifests = root / "manifests"
    out: list[FoundModel] = []
    if not manifests.is_dir():
        return out
    for tag_file in sorted(manifests.glob("*/*/*/*")):
        if not tag_file.is_file():
            continue
        registry, namespace, model, tag = tag_file.relative_to(manifests).parts
        try:
            manifest = json.loads(tag_file.read_text(encoding="utf-8"))
        except (OSError, ValueError):
            continue
        layers = manifest.get("layers") if isinstance(manifest, dict) else None
        layer = next(
            (x for x in layers or [] if isinstance(x, dict)
             and x.get("mediaType") == OLLAMA_MODEL_LAYER), None,
        )  # fmt: skip
        if layer is None or not str(layer.get("digest", "")).startswith("sha256:"):
            continue
        blob = root / "blobs" / str(layer["digest"]).replace(":", "-", 1)
        short = model if namespace == "library" else f"{namespace}/{model}"
        if registry != "registry.ollama.ai":
            short = f"{registry}/{short}"
        name = f"{short}:{tag}"
        if not blob.is_file():
            out.append(
                FoundModel(f"ollama:{name}", name, OLLAMA, blob, [blob], 0,
                           reason="Its model blob is missing (an unfinished `ollama pull`?).")
            )  # fmt: skip
            continue
        f = _describe(f"ollama:{name}", name, OLLAMA, blob)
        if f:
            out.append(f)
    return out


def _hf(root: Path) -> list[FoundModel]:
    out: list[FoundModel] = []
    if not root.is_dir():
        return out
    for repo in sorted(root.glob("models--*")):
        snaps = repo / "snapshots"
        if not snaps.is_dir():
            continue
        repo_id = repo.name.removeprefix("models--").replace("--", "/")
        ref = repo / "refs" / "main"
        snap = snaps / ref.read_text().strip() if ref.is_file() else None
        if snap is None or not snap.is_dir():
            dirs = [d for d in snaps.iterdir() if d.is_dir()]
            if not dirs:
                continue
            snap = max(dirs, key=lambda d: d.stat().st_mtime)
        for p in _walk_gguf(snap):
            rel = p.relative_to(snap).as_posix()
            f = _describe(f"hf:{repo_id}/{rel}", f"{repo_id}/{rel.removesuffix('.gguf')}",
                          HF_CACHE, p)  # fmt: skip
            if f:
                out.append(f)
    return out


_SCANNERS = {LMSTUDIO: _lmstudio, OLLAMA: _ollama, LLAMA_CPP: _llamacpp, HF_CACHE: _hf}


def discover(roots: dict[str, list[Path]] | None = None) -> list[FoundModel]:
    roots = discovery_roots() if roots is None else roots
    out: list[FoundModel] = []
    seen: set[str] = set()
    for where, paths in roots.items():
        scan = _SCANNERS[where]
        for root in paths:
            if not Path(root).is_dir():
                continue
            for f in scan(Path(root)):
                if f.id not in seen:
                    seen.add(f.id)
                    out.append(f)
    return out


def find_model(ref: str, roots: dict[str, list[Path]] | None = None) -> FoundModel | None:
    """A found model by its id, or by the path of its GGUF."""
    found = discover(roots)
    for f in found:
        if f.id == ref:
            return f
    try:
        target = Path(ref).expanduser().resolve()
    except OSError:
        return None
    return next((f for f in found if f.path.resolve() == target), None)
