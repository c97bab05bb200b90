"""Training examples for the demo MTP head: teacher replies with the target's states, as
padded batches.

A record of ``n`` tokens gives ``n - 2`` rows: row ``i`` reads token ``t_{i+1}`` and the
target's state ``h_i`` and is labelled ``t_{i+2}`` (a row of the reduced output layer), with
the target's top-k probabilities there as soft labels; only reply positions count.
"""

from __future__ import annotations

import random
from collections.abc import Callable, Iterator

import mlx.core as mx
import numpy as np

from app.demo.batching import length_batches, round_up
from app.demo.self_requests import is_self_key as is_chat
from app.demo.train.workdir import SOFT_K


def pad(n: int) -> int:
    return round_up(n, 64)


def make_examples(feats: list[dict], lut: np.ndarray, soft: dict[str, dict],
                  soft_weight: float) -> list[dict]:
    """One example per record: inputs, labels (rows of the reduced head, ``lut``), the reply
    mask, soft labels (from ``soft`` or from the states pass) and the target's states."""
    out = []
    for f in feats:
        toks = f["tokens"]
        n, p = len(toks), int(f["prompt_len"])
        if n < 3:
            continue
        x = np.array(toks[1 : n - 1], dtype=np.int32)  # t_{i+1}, i = 0..n-3
        y_tok = np.array(toks[2:n], dtype=np.int32)  # t_{i+2}
        y = lut[y_tok]
        m = np.zeros(n - 2, dtype=np.float32)
        m[max(p - 2, 0):] = 1.0
        m[y < 0] = 0.0
        sid = np.zeros((n - 2, SOFT_K), dtype=np.int32)
        sp = np.zeros((n - 2, SOFT_K), dtype=np.float32)
        rec = soft.get(f["key"], {})
        if not rec.get("topk_ids") and "topk_ids" in f:  # computed with the states
            rec = {"topk_ids": np.array(f["topk_ids"]),
                   "topk_lp": np.array(f["topk_lp"].astype(mx.float32))}
        tk = rec.get("topk_ids")
        if tk is not None and len(tk) and soft_weight > 0:
            # reply token j sits at position p + j; its label row is i = p + j - 2
            start = p - 2
            cnt = min(len(tk), n - 2 - start)
            if start >= 0 and cnt > 0:
                t_ids = np.array(tk[:cnt], dtype=np.int64)[:, :SOFT_K]
                t_lp = np.array(rec["topk_lp"][:cnt], dtype=np.float32)[:, :SOFT_K]
                hh = lut[t_ids]
                pr = np.exp(t_lp) * (hh >= 0)
                tot = pr.sum(axis=1, keepdims=True)
                pr = np.where(tot > 0, pr / np.maximum(tot, 1e-9), 0.0)
                sid[start : start + cnt, : t_ids.shape[1]] = np.maximum(hh, 0)
                sp[start : start + cnt, : t_ids.shape[1]] = pr
        out.append({"key": f["key"], "start": max(p - 2, 0), "x": x,
                    "y": np.maximum(y, 0), "y_tok": y_tok, "mask": m, "sid": sid, "sp": sp, "hidden": f["hidden"][: n - 2]})
    return out


def batches(examples: list[dict], rng: random.Random, *, batch_tokens: int,
            chat_weight: float = 1.0) -> Iterator[list[dict]]:
    """An epoch of padded batches of about ``batch_tokens``, similar lengths together; a reply
    to a self-sampled request comes ``chat_weight`` times (a fraction: that often on average)."""
    order = []
    for i, e in enumerate(examples):
        times = chat_weight if is_chat(e["key"]) else 1.0
        order += [i] * (int(times) + (rng.random() < times - int(times)))
    rng.shuffle(order)
    out = length_batches(order, lambda i: len(examples[i]["x"]), batch_tokens=batch_tokens,
                         multiple=64, rng=rng)
    for b in out:
        yield [examples[i] for i in b]


def collate(exs: list[dict], state: Callable[[mx.array], mx.array]) -> tuple:
    """Padded arrays of a batch: X, H (``state`` of the stored rows), Y, M, SI, SP, X2."""
    L = pad(max(len(e["x"]) for e in exs))
    B = len(exs)
    X = np.zeros((B, L), np.int32)
    X2 = np.zeros((B, L), np.int32)
    Y = np.zeros((B, L), np.int32)
    M = np.zeros((B, L), np.float32)
    SI = np.zeros((B, L, SOFT_K), np.int32)
    SP = np.zeros((B, L, SOFT_K), np.float32)
    hs = []
    for r, e in enumerate(exs):
        n = len(e["x"])
        X[r, :n], Y[r, :n], M[r, :n] = e["x"], e["y"], e["mask"]
        X2[r, :n] = e["y_tok"]
        SI[r, :n], SP[r, :n] = e["sid"], e["sp"]
        h = state(e["hidden"])
        hs.append(mx.pad(h, [(0, L - n), (0, 0)]))
    H = mx.stack(hs)
    return (mx.array(X), H, mx.array(Y), mx.array(M), mx.array(SI), mx.array(SP),
            mx.array(X2))
