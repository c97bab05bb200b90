"""The demo's teacher replies as a small archive kept with the project.

Generating teacher replies is the slow part of training the demo drafters (about 60 tok/s on
a 2-core CPU), and a training work folder does not travel with the project. ``pack`` writes
the token ids of every reply, training and held-out, to one xz-compressed JSONL file — without
the per-position top-k soft labels, which are forty times larger. ``restore`` writes the
replies back into a work folder and recomputes the soft labels with one teacher-forced pass of
the target per reply: the same model on the same prefix, so the same distribution as at
generation time up to float rounding. Restoring is resumable (replies already in the work
folder are skipped) and much faster than generating.

Public API:
    DEFAULT_ARCHIVE                      training/demo-teacher.jsonl.xz in the project
    pack(workdir, out) -> (replies, tokens)
    restore(archive, workdir, model, *, log=print, seconds=None) -> (replies, tokens) added
"""

from __future__ import annotations

import json
import lzma
import os
import time
from collections.abc import Callable, Iterator
from pathlib import Path

from app.demo import teacher

DEFAULT_ARCHIVE = Path(__file__).resolve().parents[2] / "training" / "demo-teacher.jsonl.xz"
KEPT = ("index", "id", "kind", "prompt_ids", "reply_ids", "finish")
TOPK = 8


def _records(workdir: Path) -> Iterator[dict]:
    seen: set[tuple[str, int]] = set()
    for split, recs in (("heldout", teacher.load_heldout(workdir, with_self=True)),
                        ("train", teacher.load_records(workdir))):
        for r in sorted(recs, key=lambda r: int(r["index"])):
            key = (split, int(r["index"]))
            if key not in seen:
                seen.add(key)
                yield {"split": split, **{k: r[k] for k in KEPT if k in r}}


def pack(workdir: Path, out: Path) -> tuple[int, int]:
    """Write every reply of ``workdir`` (ids only) to ``out``; returns (replies, tokens)."""
    out = Path(out)
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = out.with_name(out.name + ".tmp")
    n = tokens = 0
    with lzma.open(tmp, "wt", encoding="utf-8", preset=9) as fh:
        for rec in _records(Path(workdir)):
            fh.write(json.dumps(rec, separators=(",", ":")) + "\n")
            n += 1
            tokens += len(rec["reply_ids"])
    os.replace(tmp, out)
    return n, tokens


def read_archive(archive: Path) -> Iterator[dict]:
    with lzma.open(archive, "rt", encoding="utf-8") as fh:
        for line in fh:
            line = line.strip()
            if line:
                yield json.loads(line)


def soft_labels(model, record: dict) -> tuple[list[list[int]], list[list[float]]]:
    """The target's top-k log-probs at every reply position, from one teacher-forced pass."""
    import mlx.core as mx

    from app.engine.mlx_types import float_rows, int_rows

    prompt, reply = list(record["prompt_ids"]), list(record["reply_ids"])
    tokens = prompt + reply
    logits = model(mx.array(tokens[:-1], dtype=mx.uint32)[None])[0, len(prompt) - 1:]
    lp = logits.astype(mx.float32) - mx.logsumexp(logits.astype(mx.float32), axis=-1,
                                                   keepdims=True)
    ids = mx.argpartition(-lp, kth=TOPK - 1, axis=-1)[:, :TOPK]
    vals = mx.take_along_axis(lp, ids, axis=-1)
    return int_rows(ids), [[round(v, 3) for v in row] for row in float_rows(vals)]


def restore(archive: Path, workdir: Path, model, *, log: Callable[[str], None] = print,
            seconds: float | None = None) -> tuple[int, int]:
    """Write the archive's replies missing from ``workdir`` back, with their soft labels
    computed by ``model`` (``model=None``: without them, in seconds; a head trained on the
    target's states computes them in the same pass as the states, ``features.py``)."""
    workdir = Path(workdir)
    (workdir / "shards").mkdir(parents=True, exist_ok=True)
    have = {("heldout", int(r["index"]))
            for r in teacher.load_heldout(workdir, with_self=True)}
    have |= {("train", int(r["index"])) for r in teacher.load_records(workdir)}
    todo = [r for r in read_archive(Path(archive))
            if (r.get("split"), int(r["index"])) not in have and r.get("reply_ids")]
    if not todo:
        log(f"restore: nothing to do, {len(have)} replies already in {workdir}")
        return 0, 0
    log(f"restore: {len(todo)} replies from {archive}")
    shard = workdir / "shards" / f"restored-{time.strftime('%Y%m%d-%H%M%S')}.jsonl"
    started = last = time.monotonic()
    n = tokens = 0
    with open(workdir / "heldout.jsonl", "a", encoding="utf-8") as held, \
            open(shard, "a", encoding="utf-8") as train:
        for rec in todo:
            if seconds is not None and time.monotonic() - started > seconds:
                break
            out = {k: rec[k] for k in KEPT if k in rec}
            if model is not None:
                out["topk_ids"], out["topk_lp"] = soft_labels(model, rec)
            fh = held if rec["split"] == "heldout" else train
            fh.write(json.dumps(out, separators=(",", ":")) + "\n")
            fh.flush()
            n += 1
            tokens += len(rec["reply_ids"])
            if time.monotonic() - last > 60:
                last = time.monotonic()
                log(f"restore: +{n} replies, +{tokens} tokens "
                    f"({tokens / (last - started):.0f} tok/s)")
    log(f"restore: +{n} replies, +{tokens} tokens in {(time.monotonic() - started) / 60:.1f} min")
    return n, tokens
