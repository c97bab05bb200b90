"""Target layer features for training the demo DFlash drafter, cached on disk.

A teacher-forced pass of the demo target over prompt + reply keeps the outputs of the
drafter's ``target_layer_ids`` (row i = the state after token i, what predicts token i+1) and
stores them as float16: ``WORKDIR/features/feat_NNNNN.npy`` (rows of many sequences) plus one
line per sequence in ``index.jsonl`` (record id, file, first row, length, prompt length,
tokens). Chunks are written whole before their index lines, so an interrupted run loses at
most the chunk in flight; a restart skips every record id already indexed. Held-out records
go to ``WORKDIR/heldout/`` the same way.
"""

from __future__ import annotations

import json
import os
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path

import numpy as np

Log = Callable[[str], None]


@dataclass
class Sequence:
    rid: str
    tokens: np.ndarray  # (T,) int32, prompt + reply
    prompt_len: int
    features: np.ndarray  # (T, n*H) float16 (a view into the chunk array)


def layer_features(model, tokens: list[int], layer_ids: Iterable[int]):
    """Outputs of the given decoder layers over ``tokens`` (no cache), concatenated -> (T, n*H).

    Walks the decoder stack of an mlx-lm model (``model.model.{embed_tokens,layers}``) and
    stops after the deepest requested layer."""
    import mlx.core as mx
    from mlx_lm.models.base import create_attention_mask

    inner = model.model
    ids = sorted(set(int(i) for i in layer_ids))
    h = inner.embed_tokens(mx.array(tokens)[None])
    mask = create_attention_mask(h, None)
    keep = {}
    for i, layer in enumerate(inner.layers[: max(ids) + 1]):
        h = layer(h, mask, None)
        if i in ids:
            keep[i] = h[0]
    return mx.concatenate([keep[i] for i in ids], axis=-1)


class FeatureStore:
    def __init__(self, root: Path):
        self.root = Path(root)
        self.root.mkdir(parents=True, exist_ok=True)
        self.index_path = self.root / "index.jsonl"
        self._arrays: dict[str, np.ndarray] = {}

    def entries(self) -> list[dict]:
        from app.demo.teacher import read_jsonl

        return list(read_jsonl(self.index_path))

    def done_ids(self) -> set[str]:
        return {e["rid"] for e in self.entries()}

    def n_tokens(self) -> int:
        return sum(e["n"] for e in self.entries())

    def write_chunk(self, items: list[tuple[str, list[int], int, np.ndarray]]) -> None:
        """Append one chunk: (record id, tokens, prompt length, features) per sequence."""
        if not items:
            return
        k = len(list(self.root.glob("feat_*.npy")))
        name = f"feat_{k:05d}.npy"
        while (self.root / name).exists():
            k += 1
            name = f"feat_{k:05d}.npy"
        arr = np.concatenate([f for *_, f in items], axis=0).astype(np.float16)
        tmp = self.root / (name + ".tmp")
        with open(tmp, "wb") as fh:
            np.save(fh, arr)
        os.replace(tmp, self.root / name)
        row = 0
        with open(self.index_path, "a", encoding="utf-8") as out:
            for rid, tokens, plen, _f in items:
                out.write(json.dumps({"rid": rid, "file": name, "row": row, "n": len(tokens),
                                      "prompt_len": plen, "tokens": tokens},
                                     separators=(",", ":")) + "\n")
                row += len(tokens)

    def load(self, limit_tokens: int | None = None) -> list[Sequence]:
        out: list[Sequence] = []
        total = 0
        for e in self.entries():
            arr = self._arrays.get(e["file"])
            if arr is None:
                path = self.root / e["file"]
                if not path.exists():
                    continue
                arr = self._arrays[e["file"]] = np.load(path, mmap_mode="r")
            out.append(Sequence(e["rid"], np.asarray(e["tokens"], dtype=np.int32),
                                int(e["prompt_len"]), arr[e["row"]: e["row"] + e["n"]]))
            total += e["n"]
            if limit_tokens is not None and total >= limit_tokens:
                break
        return out


def record_id(r: dict) -> str:
    return str(r.get("id", r.get("index")))


def extract(model, records: list[dict], store: FeatureStore, layer_ids, *, seconds: float,
            max_len: int = 768, chunk_tokens: int = 16384, log: Log = print) -> int:
    """Features for records not yet in ``store``, for up to ``seconds``. Returns tokens done."""
    import mlx.core as mx

    done = store.done_ids()
    todo = [r for r in records if record_id(r) not in done and r.get("reply_ids")]
    start = time.monotonic()
    items: list = []
    pending = total = 0
    for r in todo:
        if time.monotonic() - start > seconds:
            break
        tokens = [int(t) for t in (r["prompt_ids"] + r["reply_ids"])][:max_len]
        plen = min(len(r["prompt_ids"]), len(tokens))
        if len(tokens) - plen < 2:
            continue
        f = layer_features(model, tokens, layer_ids).astype(mx.float16)
        mx.eval(f)
        items.append((record_id(r), tokens, plen, np.array(f)))
        pending += len(tokens)
        total += len(tokens)
        if pending >= chunk_tokens:
            store.write_chunk(items)
            items, pending = [], 0
    store.write_chunk(items)
    dt = time.monotonic() - start
    if total:
        log(f"features: {total} tokens in {dt:.0f}s ({total / max(dt, 1e-9):.0f} tok/s), "
            f"{len(todo)} records were pending")
    return total
