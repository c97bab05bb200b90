"""How fast this machine runs a model: the calibration table speculation plans with.

A ``Calibration`` holds, for one target on one machine:

- the target's verify pass by size and context: wall time of one pass over ``n`` tokens
  (``n = 1`` is a plain step; ``n = k + 1`` verifies ``k`` proposals) after ``context`` tokens
  already in the cache, measured at a few context lengths;
- each drafter's proposal cost: one drafting step (sequential drafters) or one drafter pass
  (block drafters), in milliseconds.

Readers ask in plain steps, at the context they are at: ``verify_cost(n, context)`` is a pass
of ``n`` tokens relative to one plain step at that context; ``draft_cost(drafter)`` is a
drafting step relative to a plain step. Between the measured sizes and contexts the costs are
interpolated linearly; past the longest context they grow linearly (attention reads every
cached token), never falling. A reply much longer than the longest context measured has a row
measured at its own context, on its own cache, before its first token (``reaches``).

The table is measured once per model, backend, precision and versions and kept in the user
data folder (``CalibrationStore``); any change to those makes it stale and it is measured
again. Measuring lives in ``app.engine.calibration_measure``.
"""

from __future__ import annotations

import hashlib
import json
import platform
import time
from bisect import bisect_right
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

# Bump when what is measured or how changes: every kept table is then measured again.
METHOD_VERSION = 2
# a context up to this many times the longest measured one is read from the table; past it,
# how much more a wide pass costs is a guess that falls short (from 512 tokens to 2,048 a pass
# over 17 went from 2.5 to 3.3 plain steps on a two-core CPU, where the two first rows' line
# said 2.1): a reply that long has a row measured at its own context (``reaches``)
REACH = 1.5
# up to this context a pass's cost is mostly the weights, read once whatever the context: the
# first row describes it well enough, and no row is measured for a context this short
SHORT_CONTEXT = 512
FILE_SUFFIX = ".json"


@dataclass(frozen=True)
class Calibration:
    """One target's costs on this machine (plain data: JSON in, JSON out)."""

    key: dict[str, str]  # what it is valid for: model, backend, precision, versions
    model_path: str
    contexts: tuple[int, ...]  # context lengths measured, ascending
    sizes: tuple[tuple[int, ...], ...]  # per context: pass sizes measured, ascending (from 1)
    verify_ms: tuple[tuple[float, ...], ...]  # per context: ms per pass, never falling with size
    drafters: dict[str, float] = field(default_factory=dict)  # drafter key -> ms per step/pass
    drafter_names: dict[str, str] = field(default_factory=dict)  # drafter key -> words
    measured_s: float = 0.0  # how long the target's sweep took
    created: float = 0.0  # time.time() of the sweep
    load: float = 0.0  # runnable programs per CPU while measuring (above 1: it was busy)
    # passes already read at one context (the auto kind asks every size at every step)
    _read: dict[tuple[int, int], float] = field(default_factory=dict, init=False, compare=False,
                                                repr=False)

    def reaches(self, context: int) -> bool:
        """Whether costs at ``context`` are read from measured rows rather than guessed past
        them (at most ``REACH`` times the longest context measured, or a short context)."""
        return context <= max(REACH * self.contexts[-1], SHORT_CONTEXT)

    @property
    def busy(self) -> bool:
        """Other programs competed for the processor while it was measured."""
        return self.load > 1.0

    # -- the target ---------------------------------------------------------------------
    def verify_ms_at(self, n: int, context: int = 0) -> float:
        """Milliseconds of one target pass over ``n`` tokens after ``context`` cached ones."""
        n = max(1, int(n))
        context = max(0, int(context))
        got = self._read.get((n, context))
        if got is None:
            if len(self._read) > 4096:
                self._read.clear()
            # never less than a narrower pass at the same context: rows measured at different
            # sizes, each carried to this context on its own, could otherwise cross
            got = self._read[(n, context)] = max(
                self._pass_ms(m, context)
                for m in {n, *(m for row in self.sizes for m in row if m < n)})
        return got

    def _pass_ms(self, n: int, context: int) -> float:
        rows = [_along(n, s, v) for s, v in zip(self.sizes, self.verify_ms, strict=True)]
        return max(_along(context, self.contexts, rows), 1e-6)

    def step_ms(self, context: int = 0) -> float:
        """One plain step (a pass over one token) at ``context``."""
        return self.verify_ms_at(1, context)

    def verify_cost(self, n: int, context: int = 0) -> float:
        """A pass over ``n`` tokens in plain steps at the same context (1.0 for ``n <= 1``)."""
        if n <= 1:
            return 1.0
        return max(1.0, self.verify_ms_at(n, context) / self.step_ms(context))

    def verify_slope(self, width: int, context: int = 0) -> float:
        """Extra cost per proposal of a ``width``-proposal round, in plain steps (the width
        policy's linear model)."""
        if width <= 0:
            return 0.0
        return (self.verify_cost(width + 1, context) - 1.0) / width

    def verify_costs(self, widest: int, context: int = 0) -> dict[int, float]:
        """``verify_cost`` for every pass size ``1..widest``."""
        return {n: self.verify_cost(n, context) for n in range(1, max(1, widest) + 1)}

    # -- drafters -----------------------------------------------------------------------
    def draft_ms(self, drafter: str) -> float | None:
        """Milliseconds of one drafting step of ``drafter`` (a ``drafter_key``), if measured."""
        return self.drafters.get(drafter)

    def draft_cost(self, drafter: str, context: int = 0) -> float | None:
        """One drafting step in plain steps at ``context`` (None until measured)."""
        ms = self.draft_ms(drafter)
        return None if ms is None else ms / self.step_ms(context)

    def with_drafter(self, drafter: str, ms: float, name: str = "") -> Calibration:
        return replace(self, drafters={**self.drafters, drafter: round(float(ms), 4)},
                       drafter_names={**self.drafter_names, drafter: name or drafter})

    # -- JSON ---------------------------------------------------------------------------
    def to_dict(self) -> dict[str, Any]:
        return {
            "key": dict(self.key),
            "model_path": self.model_path,
            "contexts": list(self.contexts),
            "sizes": [list(s) for s in self.sizes],
            "verify_ms": [[round(x, 4) for x in row] for row in self.verify_ms],
            "drafters": {k: round(v, 4) for k, v in self.drafters.items()},
            "drafter_names": dict(self.drafter_names),
            "measured_s": round(self.measured_s, 3),
            "created": self.created,
            "load": round(self.load, 2),
        }

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> Calibration:
        """Raises ValueError/TypeError/KeyError on a malformed table."""
        contexts = tuple(int(c) for c in d["contexts"])
        sizes = tuple(tuple(int(n) for n in row) for row in d["sizes"])
        verify = tuple(tuple(float(x) for x in row) for row in d["verify_ms"])
        if not contexts or len(sizes) != len(contexts) or len(verify) != len(contexts):
            raise ValueError("the table's rows do not match its contexts")
        if list(contexts) != sorted(set(contexts)):
            raise ValueError("contexts are not ascending")
        for s, v in zip(sizes, verify, strict=True):
            if not s or s[0] != 1 or len(s) != len(v) or list(s) != sorted(set(s)):
                raise ValueError("a row's pass sizes are malformed")
            if any(not x > 0 for x in v):
                raise ValueError("a pass time is not positive")
        drafters = {str(k): float(v) for k, v in dict(d.get("drafters") or {}).items()}
        return cls(
            key={str(k): str(v) for k, v in dict(d["key"]).items()},
            model_path=str(d.get("model_path", "")),
            contexts=contexts, sizes=sizes, verify_ms=verify, drafters=drafters,
            drafter_names={str(k): str(v) for k, v in dict(d.get("drafter_names") or {}).items()},
            measured_s=float(d.get("measured_s", 0.0)), created=float(d.get("created", 0.0)),
            load=float(d.get("load", 0.0)),
        )


def _along(x: int, xs: tuple[int, ...], ys: list[float] | tuple[float, ...]) -> float:
    """``ys`` at ``x``: linear between the points, flat before the first, linear (never
    falling) past the last."""
    if len(xs) == 1 or x <= xs[0]:
        return float(ys[0])
    i = bisect_right(xs, x) - 1
    if i >= len(xs) - 1:
        i = len(xs) - 2
        slope = max(0.0, (ys[i + 1] - ys[i]) / (xs[i + 1] - xs[i]))
        return float(ys[-1] + slope * (x - xs[-1]))
    t = (x - xs[i]) / (xs[i + 1] - xs[i])
    return float(ys[i] + t * (ys[i + 1] - ys[i]))


# -- what a table is valid for -------------------------------------------------------------
def _folder_fingerprint(path: Path) -> str:
    """config.json's bytes and every weight file's name, size and modification time."""
    h = hashlib.sha256()
    try:
        h.update((path / "config.json").read_bytes())
    except OSError:
        pass
    for f in sorted(path.glob("*.safetensors")):
        try:
            st = f.stat()
        except OSError:
            continue
        h.update(f"{f.name}:{st.st_size}:{st.st_mtime_ns}".encode())
    return h.hexdigest()[:20]


def _version(pkg: str) -> str:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version(pkg)
    except PackageNotFoundError:
        return "?"


def machine_key() -> dict[str, str]:
    """Backend, device, BLAS, processor and versions: a change in any means new timings."""
    import os

    import mlx.core as mx

    from app import __version__
    from app.engine.platform import blas_status

    status = blas_status()
    return {
        "backend": status.backend,
        "device": str(mx.default_device()),
        "blas": status.blas,
        "machine": f"{platform.system()} {platform.machine()} {platform.processor()}".strip(),
        "cpus": str(os.cpu_count() or 0),
        "mlx": _version("mlx"),
        "mlx-lm": _version("mlx-lm"),
        "draftpair": __version__,
        "method": str(METHOD_VERSION),
    }


def target_key(path: Path, precision: str) -> dict[str, str]:
    """What a table measured on the model at ``path`` is valid for."""
    return {"model": _folder_fingerprint(path), "precision": precision, **machine_key()}


def drafter_key(kind: str, folder: Path | None) -> str:
    """One drafter: its kind and, when it has its own files, their fingerprint."""
    if folder is None:
        return kind
    return f"{kind}:{_folder_fingerprint(Path(folder))}"


# -- kept tables ---------------------------------------------------------------------------
class CalibrationStore:
    """Tables kept as one small JSON file per model folder under ``folder`` (None: kept in
    memory only, for this process)."""

    def __init__(self, folder: Path | None):
        self.folder = folder
        self._memory: dict[str, Calibration] = {}

    @classmethod
    def default(cls) -> CalibrationStore:
        """The user data folder's ``calibration``; in memory when that cannot be written."""
        from app.resources import DataFolderError, user_data_dir

        try:
            return cls(user_data_dir() / "calibration")
        except DataFolderError:
            return cls(None)

    def path_for(self, model_path: Path | str) -> Path | None:
        if self.folder is None:
            return None
        name = hashlib.sha1(str(Path(model_path).resolve()).encode()).hexdigest()[:16]
        return self.folder / f"{name}{FILE_SUFFIX}"

    def load(self, model_path: Path | str, key: dict[str, str]) -> Calibration | None:
        """The kept table for this model if it was measured for exactly ``key``, else None."""
        mem = self._memory.get(str(Path(model_path).resolve()))
        if mem is not None and mem.key == key:
            return mem
        path = self.path_for(model_path)
        if path is None:
            return None
        try:
            cal = Calibration.from_dict(json.loads(path.read_text()))
        except (OSError, ValueError, TypeError, KeyError, AttributeError):
            return None  # missing or unreadable: measured again
        return cal if cal.key == key else None

    def save(self, cal: Calibration) -> None:
        """Keep ``cal`` (atomically); tables of model folders that are gone are removed."""
        self._memory[str(Path(cal.model_path).resolve())] = cal
        path = self.path_for(cal.model_path)
        if path is None:
            return
        from app.fileio import atomic_write_json

        try:
            atomic_write_json(path, cal.to_dict())
        except OSError:
            return  # kept for this process; measured again by the next
        self._prune(keep=path)

    def _prune(self, keep: Path) -> None:
        assert self.folder is not None
        for f in self.folder.glob(f"*{FILE_SUFFIX}"):
            if f == keep:
                continue
            try:
                model = json.loads(f.read_text()).get("model_path")
            except (OSError, ValueError, AttributeError):
                continue
            if isinstance(model, str) and model and not Path(model).exists():
                f.unlink(missing_ok=True)


def new_table(model_path: Path, key: dict[str, str], contexts: list[int],
              sizes: list[list[int]], verify_ms: list[list[float]], seconds: float,
              load: float = 0.0) -> Calibration:
    return Calibration(key=key, model_path=str(Path(model_path).resolve()),
                       contexts=tuple(contexts), sizes=tuple(tuple(s) for s in sizes),
                       verify_ms=tuple(tuple(round(x, 4) for x in v) for v in verify_ms),
                       measured_s=round(seconds, 3), created=time.time(),
                       load=round(load, 2))
