"""The pair's record, kept on disk: what auto speculation's sources did on this target before.

A fresh start of DraftPair would otherwise begin every source from the bare prior and spend
the first requests learning again that one drafter seldom agrees with this target and another
mostly does. The record (``auto_memory.History``, one per way of sampling) is kept per target
in the user data folder, beside the calibration table, one small JSON file per target folder.

Sources are kept under their drafter's own name (``Session.drafter_key``: the kind and the
fingerprint of the folder it was loaded from), so a record is read back only for the same
drafter: another draft folder starts from the prior, and the record of the old one stays
for when it is loaded again. A copy's match classes go with their source (``name#class``).
Only the evidence is kept, never measured costs (those are learnt again from the request's own
rounds, see ``auto_memory``). A missing, unreadable or foreign file is a record of nothing.
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import Any

from app.engine.auto_evidence import Evidence

FORMAT = 2
# a record of the format before: its copy classes were by the copy's length, not its match
# (read without them; each source's own evidence is kept)
OLD_FORMATS = (1,)
FOLDER = "auto-record"
FIELDS = ("prior", "reached", "hits", "seen", "seen_hits", "misses", "runner")


def evidence_to_dict(ev: Evidence) -> dict[str, Any]:
    return {name: getattr(ev, name) for name in FIELDS}


def evidence_from_dict(d: dict[str, Any]) -> Evidence:
    """An ``Evidence`` from its JSON; ValueError/TypeError when it is not one."""
    def number(x: Any) -> float:
        if isinstance(x, bool) or not isinstance(x, (int, float)) or not x >= 0:
            raise ValueError("not a count")
        return float(x)

    def counts(x: Any) -> list[float]:
        if not isinstance(x, list):
            raise ValueError("not a list of counts")
        return [number(v) for v in x[:64]]

    ev = Evidence(prior=min(number(d["prior"]), 0.999), reached=counts(d["reached"]),
                  hits=counts(d["hits"]), seen=number(d["seen"]),
                  seen_hits=number(d["seen_hits"]), misses=number(d["misses"]),
                  runner=counts(d["runner"]))
    if len(ev.hits) != len(ev.reached):
        raise ValueError("hits and rounds differ in depth")
    return ev


def split_key(key: str) -> tuple[str, str]:
    """A record key's source and its copy class suffix (``"prompt-lookup#2"``)."""
    source, sep, rest = key.partition("#")
    return source, sep + rest


class RecordStore:
    """Records kept as one JSON file per target under ``folder`` (None: nothing is kept)."""

    def __init__(self, folder: Path | None):
        self.folder = folder

    @classmethod
    def beside(cls, calibration_folder: Path | None) -> RecordStore:
        """The store beside a calibration store's folder (kept where tables are kept)."""
        return cls(None if calibration_folder is None else calibration_folder.parent / FOLDER)

    def path_for(self, target: str) -> Path | None:
        if self.folder is None:
            return None
        return self.folder / f"{hashlib.sha1(target.encode()).hexdigest()[:16]}.json"

    def load(self, target: str) -> dict[str, dict[str, Evidence]]:
        """The kept record for ``target`` (its fingerprint): per way of sampling, evidence per
        drafter key; empty when there is none or it cannot be read."""
        path = self.path_for(target)
        if path is None:
            return {}
        try:
            raw = json.loads(path.read_text())
            old = raw.get("format") in OLD_FORMATS
            if (raw.get("format") != FORMAT and not old) or raw.get("target") != target:
                return {}
            out: dict[str, dict[str, Evidence]] = {}
            for regime, sources in raw["regimes"].items():
                out[str(regime)] = {str(k): evidence_from_dict(v) for k, v in sources.items()
                                    if not (old and split_key(str(k))[1])}
            return out
        except (OSError, ValueError, TypeError, KeyError, AttributeError):
            return {}  # unreadable: the record starts again

    def save(self, target: str, record: dict[str, dict[str, Evidence]]) -> None:
        """Keep ``record`` for ``target``, merged into what is kept for drafters not in it (a
        draft folder loaded before keeps its record); a write that fails keeps nothing."""
        path = self.path_for(target)
        if path is None or not record:
            return
        merged = self.load(target)
        for regime, sources in record.items():
            merged.setdefault(regime, {}).update(sources)
        from app.fileio import atomic_write_json

        try:
            atomic_write_json(path, {
                "format": FORMAT, "target": target,
                "regimes": {regime: {k: evidence_to_dict(v) for k, v in sources.items()}
                            for regime, sources in merged.items()}})
        except OSError:
            return  # kept for this process only
