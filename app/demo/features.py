"""Cached target states over the teacher data, for training heads that read them (MTP).

One teacher-forced pass of the demo target over prompt + reply gives, for every position,
the output of its last decoder layer before the final norm (``prenorm``); the post-norm state
is ``norm(prenorm)`` and is recomputed when needed, so one cache serves both settings.
Stored as float16 under ``WORKDIR/features/`` (``feat-NNNN.safetensors`` plus
``index.jsonl``, one line per record: key, file, tokens, prompt length), appended in
chunks, so an interrupted extraction resumes where it stopped.
"""

from __future__ import annotations

import json
import os
import time
from collections.abc import Callable, Iterable
from pathlib import Path

import mlx.core as mx

from app.demo import teacher

Log = Callable[[str], None]
CHUNK_RECORDS = 64


def record_key(rec: dict, split: str) -> str:
    return f"{split}:{rec['index']}"


def target_prenorm(model, tokens: list[int]) -> mx.array:
    """Last decoder layer's output for every position of ``tokens`` (one causal pass)."""
    from app.engine.drafters.mtp_head import inner_model

    inner = inner_model(model)
    h = inner.embed_tokens(mx.array(tokens, dtype=mx.uint32)[None])
    for layer in inner.layers:
        h = layer(h, mask="causal" if h.shape[1] > 1 else None, cache=None)
    return h[0]


def final_norm(model, prenorm: mx.array) -> mx.array:
    from app.engine.drafters.mtp_head import inner_model

    return inner_model(model).norm(prenorm.astype(mx.float32))


class FeatureStore:
    def __init__(self, workdir: Path):
        self.dir = workdir / "features"
        self.dir.mkdir(parents=True, exist_ok=True)
        self.index_path = self.dir / "index.jsonl"

    def index(self) -> list[dict]:
        return list(teacher.read_jsonl(self.index_path))

    def keys(self) -> set[str]:
        return {e["key"] for e in self.index()}

    def _next_file(self) -> Path:
        n = len(list(self.dir.glob("feat-*.safetensors")))
        while (self.dir / f"feat-{n:04d}.safetensors").exists():
            n += 1
        return self.dir / f"feat-{n:04d}.safetensors"

    def extract(self, model, items: Iterable[tuple[str, dict]], *, log: Log = print,
                seconds: float | None = None, max_len: int = 512) -> int:
        """Target states for ``(key, record)`` pairs not yet stored. Returns records added."""
        have = self.keys()
        todo = [(k, r) for k, r in items if k not in have]
        if not todo:
            return 0
        started = time.monotonic()
        added = n_tok = 0
        arrays: dict[str, mx.array] = {}
        entries: list[dict] = []
        for key, rec in todo:
            tokens = (list(rec["prompt_ids"]) + list(rec["reply_ids"]))[:max_len]
            h = target_prenorm(model, tokens).astype(mx.float16)
            mx.eval(h)
            arrays[key] = h
            entries.append({"key": key, "n": len(tokens), "prompt_len": len(rec["prompt_ids"]),
                            "tokens": tokens})
            added += 1
            n_tok += len(tokens)
            out_of_time = seconds is not None and time.monotonic() - started > seconds
            if len(entries) >= CHUNK_RECORDS or out_of_time:
                self._flush(arrays, entries)
                arrays, entries = {}, []
                dt = time.monotonic() - started
                log(f"features: +{added} records, +{n_tok} tokens ({n_tok / dt:.0f} tok/s)")
            if out_of_time:
                break
        if entries:
            self._flush(arrays, entries)
        return added

    def _flush(self, arrays: dict[str, mx.array], entries: list[dict]) -> None:
        path = self._next_file()
        tmp = path.with_name(path.stem + ".tmp.safetensors")
        mx.save_safetensors(str(tmp), arrays)
        os.replace(tmp, path)
        with open(self.index_path, "a", encoding="utf-8") as fh:
            for e in entries:
                fh.write(json.dumps({**e, "file": path.name}, separators=(",", ":")) + "\n")

    def load(self, split: str | None = None) -> list[dict]:
        """Records with their states: dicts with key, tokens, prompt_len, hidden (n, H)."""
        index = [e for e in self.index() if split is None or e["key"].startswith(split + ":")]
        by_file: dict[str, list[dict]] = {}
        for e in index:
            by_file.setdefault(e["file"], []).append(e)
        out: list[dict] = []
        for name, entries in sorted(by_file.items()):
            arrays = mx.load(str(self.dir / name))
            for e in entries:
                if e["key"] in arrays:
                    out.append({**e, "hidden": arrays[e["key"]]})
        return out


def teacher_items(teacher_dir: Path) -> tuple[list[tuple[str, dict]], list[tuple[str, dict]]]:
    """(held-out, training) records of a teacher workdir as ``(key, record)`` pairs."""
    held = [(record_key(r, "heldout"), r) for r in teacher.load_heldout(teacher_dir)]
    train = [(record_key(r, "train"), r) for r in teacher.load_records(teacher_dir)]
    return held, train
