"""The environment block of a report: machine, backend, BLAS, versions, checkpoint hashes."""

from __future__ import annotations

import hashlib
import platform
import struct
import sys
from pathlib import Path
from typing import Any

PACKAGES = ("mlx", "mlx-lm", "numpy", "transformers", "psutil")


def checkpoint_hash(folder: str | Path) -> str:
    """sha256 of config.json and every safetensors header (names, dtypes, shapes, offsets).

    Cheap (no weight bytes are read) and changes whenever the architecture, the tensor
    layout or the precision changes; two conversions with identical headers but different
    weight values hash the same, which is what the size of the file would also tell.
    """
    folder = Path(folder)
    h = hashlib.sha256()
    cfg = folder / "config.json"
    if cfg.is_file():
        h.update(cfg.read_bytes())
    for f in sorted(folder.glob("*.safetensors")):
        h.update(f.name.encode())
        with f.open("rb") as fh:
            head = fh.read(8)
            if len(head) == 8:
                (n,) = struct.unpack("<Q", head)
                h.update(fh.read(min(n, 100_000_000)))
        h.update(str(f.stat().st_size).encode())
    for extra in ("tokenizer.json", "draft_head.json"):
        p = folder / extra
        if p.is_file():
            h.update(p.read_bytes())
    return h.hexdigest()


def collect_environment(models: dict[str, Any]) -> dict[str, Any]:
    """``models``: role -> LoadedModel (``target``, ``draft``)."""
    from importlib.metadata import PackageNotFoundError, version

    import psutil

    from app import __version__
    from app.engine.platform import blas_status

    versions: dict[str, str | None] = {"draftpair": __version__, "python": sys.version.split()[0]}
    for pkg in PACKAGES:
        try:
            versions[pkg] = version(pkg)
        except PackageNotFoundError:
            versions[pkg] = None
    blas = blas_status()
    checkpoints = {}
    for role, m in models.items():
        if m is None:
            continue
        checkpoints[role] = {
            "name": m.name,
            "path": str(m.path),
            "model_type": m.model_type,
            "precision": m.precision,
            "hash": checkpoint_hash(m.path),
        }
    freq = psutil.cpu_freq()
    return {
        "machine": platform.machine(),
        "platform": platform.platform(),
        "processor": platform.processor() or None,
        "cpu_count_logical": psutil.cpu_count(),
        "cpu_count_physical": psutil.cpu_count(logical=False),
        "cpu_max_mhz": round(freq.max, 0) if freq else None,
        "memory_total_bytes": psutil.virtual_memory().total,
        "backend": blas.backend,
        "blas": blas.to_dict(),
        "versions": versions,
        "checkpoints": checkpoints,
    }
