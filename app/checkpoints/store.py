"""The local checkpoint store: HF cache + DraftPair's models folder + imported folders.

Public API:
    Store(*, data_dir=None, hf_cache=None)       build once at start-up and pass it around
        .list() -> list[StoreEntry]               every local checkpoint, with its kind
        .get(name) -> StoreEntry | None           by entry name (repo id, folder name)
        .import_folder(path, *, name=None, copy=False) -> StoreEntry
        .remove(name, *, delete_files=None) -> RemoveResult   frees bytes (imported: forget only)
        .models_dir, .hf_cache, .registry_path
    hf_cache_dir() -> Path                        honours HF_HUB_CACHE / HF_HOME at call time
    StoreEntry: name, path, source, size_bytes, info (CheckpointInfo) + shortcuts
                (kind, architecture, param_count, dtype, quantization, vocab_size,
                context_length, has_chat_template, unsupported_reason), to_dict()
    check_model_name(name) -> name     StoreError unless it is a name (never a path)

The registry of imported folders is a small JSON file written atomically (temp, fsync, rename).
"""

from __future__ import annotations

import json
import os
import shutil
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from app.checkpoints.inspect import CheckpointInfo, inspect_checkpoint
from app.errors import DraftPairError
from app.fileio import atomic_write_json

REGISTRY_VERSION = 1
SOURCE_HF = "hf-cache"
SOURCE_MODELS = "models-folder"
SOURCE_IMPORTED = "imported"
SOURCE_BUILTIN = "built-in"



def check_model_name(name: str) -> str:
    """``name`` when it can name a model (one folder name inside the models folder), else a
    StoreError saying so: a name is never a path."""
    bad = (not name or name != name.strip() or name in (".", "..") or name.startswith(".")
           or any(c in name for c in "/\\\0:") or len(name) > 120
           or any(ord(c) < 32 for c in name) or Path(name).is_absolute())
    if bad:
        raise StoreError(f"{name!r} cannot be a model's name: a name is one word or phrase "
                         "without slashes, colons or a leading dot, never a path.")
    return name

class StoreError(DraftPairError):
    pass


def hf_cache_dir() -> Path:
    """The Hugging Face hub cache, read from the environment at call time."""
    env = os.environ.get("HF_HUB_CACHE") or os.environ.get("HUGGINGFACE_HUB_CACHE")
    if env:
        return Path(os.path.expandvars(env)).expanduser()
    home = os.environ.get("HF_HOME")
    if home:
        return Path(os.path.expandvars(home)).expanduser() / "hub"
    xdg = os.environ.get("XDG_CACHE_HOME")
    base = Path(xdg).expanduser() if xdg else Path.home() / ".cache"
    return base / "huggingface" / "hub"


def dir_size(path: Path) -> int:
    """Bytes on disk under ``path`` (symlinks into the HF blob store are followed once)."""
    total = 0
    seen: set[tuple[int, int]] = set()
    for root, _dirs, files in os.walk(path):
        for f in files:
            try:
                st = os.stat(os.path.join(root, f))
            except OSError:
                continue
            key = (st.st_dev, st.st_ino)
            if key not in seen:
                seen.add(key)
                total += st.st_size
    return total


@dataclass
class StoreEntry:
    name: str
    path: Path
    source: str
    size_bytes: int
    info: CheckpointInfo
    repo_id: str | None = None
    revision: str | None = None

    kind = property(lambda self: self.info.kind)
    kind_label = property(lambda self: self.info.kind_label)
    kind_explain = property(lambda self: self.info.kind_explain)
    param_count = property(lambda self: self.info.param_count)
    dtype = property(lambda self: self.info.dtype)
    quantization = property(lambda self: self.info.quantization)
    vocab_size = property(lambda self: self.info.effective_vocab)
    context_length = property(lambda self: self.info.context_length)
    has_chat_template = property(lambda self: self.info.has_chat_template)
    unsupported_reason = property(lambda self: self.info.unsupported_reason)

    @property
    def architecture(self) -> str | None:
        if self.info.architectures:
            return self.info.architectures[0]
        return self.info.model_type

    def to_dict(self) -> dict:
        return {
            "name": self.name,
            "path": str(self.path),
            "source": self.source,
            "size_bytes": self.size_bytes,
            "kind": self.kind,
            "architecture": self.architecture,
            "model_type": self.info.model_type,
            "param_count": self.param_count,
            "dtype": self.dtype,
            "quantization": self.quantization,
            "vocab_size": self.vocab_size,
            "context_length": self.context_length,
            "has_chat_template": self.has_chat_template,
            "unsupported_reason": self.unsupported_reason,
            "repo_id": self.repo_id,
            "revision": self.revision,
        }


@dataclass(frozen=True)
class RemoveResult:
    name: str
    path: Path
    freed_bytes: int
    deleted: bool
    message: str


class Store:
    def __init__(self, *, data_dir: Path | None = None, hf_cache: Path | None = None):
        if data_dir is None:
            from app.resources import user_data_dir

            data_dir = user_data_dir()
        self.data_dir = Path(data_dir)
        self.models_dir = self.data_dir / "models"
        self.registry_path = self.data_dir / "models.json"
        self._hf_cache = Path(hf_cache) if hf_cache else None

    @property
    def hf_cache(self) -> Path:
        return self._hf_cache or hf_cache_dir()

    # --- registry ---------------------------------------------------------------------------
    def _read_registry(self) -> dict:
        try:
            data = json.loads(self.registry_path.read_text(encoding="utf-8"))
            if isinstance(data, dict) and isinstance(data.get("imported"), list):
                return data
        except (OSError, ValueError):
            pass
        return {"version": REGISTRY_VERSION, "imported": []}

    def _write_registry(self, data: dict) -> None:
        data["version"] = REGISTRY_VERSION
        atomic_write_json(self.registry_path, data)

    # --- listing ----------------------------------------------------------------------------
    def _hf_entries(self) -> list[StoreEntry]:
        cache = self.hf_cache
        if not cache.is_dir():
            return []
        from huggingface_hub import scan_cache_dir

        try:
            scanned = scan_cache_dir(cache)
        except Exception:  # noqa: BLE001 - a broken cache must not break the listing
            return []
        out = []
        for repo in sorted(scanned.repos, key=lambda r: r.repo_id):
            if repo.repo_type != "model" or not repo.revisions:
                continue
            refs = repo.refs
            rev = refs.get("main") or max(repo.revisions, key=lambda r: r.last_modified)
            if not (rev.snapshot_path / "config.json").exists():
                continue
            info = inspect_checkpoint(rev.snapshot_path, read_tokenizer_files=False)
            if info.weights is not None and (not info.weights.files or info.weights.errors):
                if not info.weights.pickle_files:
                    info.unsupported_reason = (
                        "Its download is incomplete; pull it again to resume "
                        f"(`draftpair models pull {repo.repo_id}`)."
                    )
            out.append(
                StoreEntry(
                    name=repo.repo_id,
                    path=rev.snapshot_path,
                    source=SOURCE_HF,
                    size_bytes=repo.size_on_disk,
                    info=info,
                    repo_id=repo.repo_id,
                    revision=rev.commit_hash,
                )
            )
        return out

    def _folder_entries(self) -> list[StoreEntry]:
        out = []
        if self.models_dir.is_dir():
            for p in sorted(self.models_dir.iterdir()):
                if p.is_dir() and not p.name.startswith(".") and (p / "config.json").exists():
                    info = inspect_checkpoint(p, read_tokenizer_files=False)
                    out.append(StoreEntry(p.name, p, SOURCE_MODELS, dir_size(p), info))
        for item in self._read_registry()["imported"]:
            if not isinstance(item, dict) or "path" not in item:
                continue
            p = Path(item["path"])
            info = inspect_checkpoint(p, read_tokenizer_files=False)
            if not p.exists():
                info.unsupported_reason = "The imported folder no longer exists."
            out.append(
                StoreEntry(
                    str(item.get("name") or p.name),
                    p,
                    SOURCE_IMPORTED,
                    dir_size(p) if p.exists() else 0,
                    info,
                )
            )
        return out

    def _builtin_entries(self) -> list[StoreEntry]:
        from app.checkpoints import builtins

        out = []
        for builtin in builtins.registered():
            if not builtin.listed:
                continue
            try:
                p = builtin.present()
            except Exception:  # noqa: BLE001 - a missing demo must not break the listing
                continue
            if p is None or not (p / "config.json").exists():
                continue
            info = inspect_checkpoint(p, read_tokenizer_files=False)
            out.append(StoreEntry(builtin.name, p, SOURCE_BUILTIN, dir_size(p), info))
        return out

    def list(self) -> list[StoreEntry]:
        entries = self._builtin_entries() + self._folder_entries() + self._hf_entries()
        seen: set[str] = set()
        out = []
        for e in entries:
            name = e.name
            n = 2
            while name in seen:
                name = f"{e.name} ({n})"
                n += 1
            e.name = name
            seen.add(name)
            out.append(e)
        return out

    def get(self, name: str) -> StoreEntry | None:
        for e in self.list():
            if e.name == name:
                return e
        return None

    # --- changes ----------------------------------------------------------------------------
    def import_folder(
        self,
        path: str | os.PathLike[str],
        *,
        name: str | None = None,
        copy: bool = False,
        check: Callable[[Path], None] | None = None,
    ) -> StoreEntry:
        """Add a folder. ``check`` (e.g. ``pairing.load_check.refuse_unloadable``) runs first
        and raises to refuse a folder that would not load; nothing is registered then."""
        src = Path(path).expanduser().resolve()
        if not src.exists():
            raise StoreError(f"{src} is not a folder (no such folder).")
        if not src.is_dir():
            raise StoreError(f"{src} is not a folder.")
        if not (src / "config.json").is_file():
            raise StoreError(f"{src} has no config.json, so it is not a model folder.")
        if name is not None:
            check_model_name(name)
        if check is not None:
            check(src)
        name = name or src.name
        existing = {e.name for e in self.list()}
        if copy:
            dest = self.models_dir / name
            if dest.exists():
                raise StoreError(f"A model named {name!r} already exists in {self.models_dir}.")
            self.models_dir.mkdir(parents=True, exist_ok=True)
            ignore = shutil.ignore_patterns("*.bin", "*.pt", "*.pth", "*.ckpt", "*.pkl", ".git")
            shutil.copytree(src, dest, ignore=ignore)
            info = inspect_checkpoint(dest, read_tokenizer_files=False)
            return StoreEntry(name, dest, SOURCE_MODELS, dir_size(dest), info)
        reg = self._read_registry()
        if any(Path(i.get("path", "")) == src for i in reg["imported"] if isinstance(i, dict)):
            raise StoreError(f"{src} is already imported.")
        if name in existing:
            raise StoreError(f"A model named {name!r} already exists; choose another name.")
        reg["imported"].append({"name": name, "path": str(src)})
        self._write_registry(reg)
        info = inspect_checkpoint(src, read_tokenizer_files=False)
        return StoreEntry(name, src, SOURCE_IMPORTED, dir_size(src), info)

    def protected(self, entry: StoreEntry) -> str | None:
        """Why ``entry`` may not be removed (the built-in demo pair), or None."""
        if entry.source == SOURCE_BUILTIN or _is_builtin_folder(entry, self.models_dir):
            return (
                f"{entry.name} is DraftPair's built-in demo model; it cannot be removed "
                "(it would be prepared again on the next start anyway)."
            )
        return None

    def remove(self, name: str, *, delete_files: bool | None = None) -> RemoveResult:
        """Remove an entry. HF cache and models-folder entries are deleted from disk; imported
        folders are only forgotten unless ``delete_files=True``."""
        entry = self.get(name)
        if entry is None:
            raise StoreError(f"No local model is named {name!r}.")
        reason = self.protected(entry)
        if reason:
            raise StoreError(reason)
        if entry.source == SOURCE_IMPORTED:
            reg = self._read_registry()
            reg["imported"] = [
                i
                for i in reg["imported"]
                if not (isinstance(i, dict) and i.get("name") == entry.name)
            ]
            self._write_registry(reg)
            if delete_files and entry.path.exists():
                freed = dir_size(entry.path)
                shutil.rmtree(entry.path)
                return RemoveResult(entry.name, entry.path, freed, True, f"Deleted {entry.path}.")
            return RemoveResult(
                entry.name,
                entry.path,
                0,
                False,
                f"Forgot {entry.name}; the folder {entry.path} was left in place.",
            )
        if delete_files is False:
            raise StoreError(
                f"{entry.name} lives in {entry.source}; removing it deletes its files."
            )
        if entry.source == SOURCE_HF:
            from huggingface_hub import scan_cache_dir

            scanned = scan_cache_dir(self.hf_cache)
            repo = next(
                r for r in scanned.repos if r.repo_id == entry.repo_id and r.repo_type == "model"
            )
            strategy = scanned.delete_revisions(*(r.commit_hash for r in repo.revisions))
            strategy.execute()
            if repo.repo_path.exists():  # leftovers (refs, locks, .no_exist) of a now empty repo
                shutil.rmtree(repo.repo_path, ignore_errors=True)
            return RemoveResult(
                entry.name,
                repo.repo_path,
                strategy.expected_freed_size,
                True,
                f"Deleted {entry.repo_id} from the Hugging Face cache.",
            )
        freed = entry.size_bytes
        if self.models_dir.resolve() not in entry.path.resolve().parents:
            raise StoreError(f"Refusing to delete {entry.path}: it is outside {self.models_dir}.")
        shutil.rmtree(entry.path)
        return RemoveResult(entry.name, entry.path, freed, True, f"Deleted {entry.path}.")


def _is_builtin_folder(entry: StoreEntry, models_dir: Path) -> bool:
    """Whether ``entry`` is the folder of a built-in model: the one its registration reports,
    or ``models/<name>`` under a built-in's name (the demo target lives there, prepared or
    half-prepared)."""
    from app.checkpoints import builtins

    for builtin in builtins.registered():
        if entry.source == SOURCE_MODELS and entry.path.name == builtin.name and (
            entry.path.parent.resolve() == models_dir.resolve()
        ):
            return True
        try:
            folder = builtin.present()
            if folder is not None and Path(folder).resolve() == entry.path.resolve():
                return True
        except Exception:  # noqa: BLE001 - a missing demo must not break removal checks
            continue
    return False
