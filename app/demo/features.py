"""Cached target states over the teacher data, for training heads that read them (MTP).

One teacher-forced pass of the demo target over prompt + reply gives, for every position,
the output of its last decoder layer before the final norm (``prenorm``); the post-norm state
is ``norm(prenorm)`` and is recomputed when needed, so one cache serves both settings.
Stored as float16 under ``WORKDIR/features/`` (``feat-NNNN.safetensors`` plus
``index.jsonl``, one line per record: key, file, tokens, prompt length), appended in
chunks, so an interrupted extraction resumes where it stopped.

A record restored without soft labels (``teacher-restore --no-soft-labels``) gets them from
the same pass: the target's top-k log-probs at every reply position, read off the stored
states through the final norm and the output layer, kept beside the states
(``KEY.topk_ids`` / ``KEY.topk_lp``). One pass instead of two halves the CPU time of
bringing archived teacher data back for a head that reads the target's states.
"""

from __future__ import annotations

import json
import os
import time
from collections.abc import Callable, Iterable
from pathlib import Path

import mlx.core as mx

from app.demo import teacher
from app.engine.mlx_types import load_arrays

Log = Callable[[str], None]
CHUNK_RECORDS = 64
SOFT_TOPK = 8


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


def reply_topk(model, prenorm: mx.array, prompt_len: int, k: int = SOFT_TOPK
               ) -> tuple[mx.array, mx.array]:
    """Top-``k`` ids of the target at every reply token of a record (the row before each
    reply token predicts it), from the states of one pass, with their log-probs renormalised
    over those ``k`` (what the trainers use; a log-sum-exp over the whole vocabulary would
    cost more than the top-k itself on this CPU)."""
    rows = prenorm[max(prompt_len - 1, 0) : prenorm.shape[0] - 1]
    from app.engine.drafters.mtp_head import target_head

    logits = target_head(model)(final_norm(model, rows)).astype(mx.float32)
    ids = top_ids(logits, k)
    top = mx.take_along_axis(logits, ids, axis=-1)
    lp = top - mx.logsumexp(top, axis=-1, keepdims=True)
    return ids.astype(mx.int32), lp.astype(mx.float16)


def top_ids(logits: mx.array, k: int, block: int = 1024) -> mx.array:
    """Ids of the ``k`` largest logits of each row (unordered). The vocabulary is cut into
    blocks and only the ``k`` blocks with the largest maxima are searched: the top ``k``
    lie in them, and a partition over ``k * block`` values is several times cheaper than
    over the whole vocabulary on this CPU."""
    n, v = logits.shape
    if v <= 2 * k * block:
        return mx.argpartition(-logits, kth=k - 1, axis=-1)[:, :k]
    pad = -v % block
    if pad:
        logits = mx.pad(logits, [(0, 0), (0, pad)], constant_values=-mx.inf)
    blocks = logits.reshape(n, -1, block)
    best = mx.argpartition(-blocks.max(axis=-1), kth=k - 1, axis=-1)[:, :k]  # (n, k)
    cand = mx.take_along_axis(blocks, best[..., None], axis=1).reshape(n, k * block)
    j = mx.argpartition(-cand, kth=k - 1, axis=-1)[:, :k]
    return mx.take_along_axis(best, j // block, axis=-1) * block + j % block


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
            h = target_prenorm(model, tokens)
            arrays[key] = h.astype(mx.float16)
            if not rec.get("topk_ids") and len(tokens) > len(rec["prompt_ids"]):
                ids, lp = reply_topk(model, h, len(rec["prompt_ids"]))
                arrays[f"{key}.topk_ids"], arrays[f"{key}.topk_lp"] = ids, lp
            mx.eval(list(arrays.values()))
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
        """Records with their states: dicts with key, tokens, prompt_len, hidden (n, H), and
        the soft labels computed with them when the record had none (topk_ids, topk_lp)."""
        index = [e for e in self.index() if split is None or e["key"].startswith(split + ":")]
        by_file: dict[str, list[dict]] = {}
        for e in index:
            by_file.setdefault(e["file"], []).append(e)
        out: list[dict] = []
        for name, entries in sorted(by_file.items()):
            arrays = load_arrays(self.dir / name)
            for e in entries:
                if e["key"] in arrays:
                    item = {**e, "hidden": arrays[e["key"]]}
                    if f"{e['key']}.topk_ids" in arrays:
                        item["topk_ids"] = arrays[f"{e['key']}.topk_ids"]
                        item["topk_lp"] = arrays[f"{e['key']}.topk_lp"]
                    out.append(item)
        return out


def teacher_items(teacher_dir: Path) -> tuple[list[tuple[str, dict]], list[tuple[str, dict]]]:
    """(held-out, training) records of a teacher workdir as ``(key, record)`` pairs."""
    held = [(record_key(r, "heldout"), r)
            for r in teacher.load_heldout(teacher_dir, with_self=True)]
    train = [(record_key(r, "train"), r) for r in teacher.load_records(teacher_dir)]
    return held, train
