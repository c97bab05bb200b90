"""Teacher-forced evaluation of a draft on held-out replies: agreement, simulated rounds,
calibration of its confidence."""

from __future__ import annotations


def teacher_forced_eval(model, head_arr, records: list[dict], *, k: int = 3,
                        max_len: int = 512) -> dict:
    """Agreement of the draft's argmax with the teacher's greedy reply, and simulated rounds.

    With the teacher's own greedy reply as context, a k-wide greedy draft round starting at
    reply position i accepts the run of consecutive positions where the draft's argmax equals
    the teacher token (capped at k); the round emits that run plus one target token.
    """
    import mlx.core as mx
    import numpy as np

    from app.engine.models import dequantized_weight

    w = dequantized_weight(model.model.embed_tokens, head_arr)
    agree = total = 0
    oks: list = []
    confs: list = []
    for r in records:
        ids = (list(r["prompt_ids"]) + list(r["reply_ids"]))[: max_len + 1]
        p = len(r["prompt_ids"])
        x = mx.array(ids[:-1])[None]
        h = model.model(x)
        logits = (h @ w.T)[0].astype(mx.float32)
        pred = np.array(head_arr[mx.argmax(logits, axis=-1)])
        conf = np.array(mx.max(mx.softmax(logits, axis=-1), axis=-1))[p - 1:]
        tgt = np.array(ids[1:])
        ok = (pred == tgt)[p - 1:]
        agree += int(ok.sum())
        total += len(ok)
        oks.append(ok)
        confs.append(conf)

    def simulate(kk: int) -> tuple[float, float]:
        rounds = accepted = emitted = 0
        for ok in oks:
            i, n = 0, len(ok)
            while i < n:
                a = 0
                while a < kk and i + a < n and ok[i + a]:
                    a += 1
                rounds += 1
                accepted += a
                emitted += min(a + 1, n - i)
                i += a + 1
        return accepted / max(rounds, 1), emitted / max(rounds, 1)

    acc, tpr = simulate(k)
    return {
        "agreement": agree / max(total, 1),
        "k": k,
        "sim_accept_mean": acc,
        "sim_tokens_per_round": tpr,
        "sim_by_k": {kk: simulate(kk) for kk in (1, 2, 3, 4, 6)},
        "calibration": _calibration(oks, confs),
        "tokens": total,
        "prompts": len(records),
    }


def _calibration(oks: list, confs: list) -> list[dict]:
    """Agreement with the teacher by the draft's own confidence (its top probability)."""
    import numpy as np

    if not oks:
        return []
    ok, conf = np.concatenate(oks), np.concatenate(confs)
    rows = []
    for lo, hi in ((0.0, 0.2), (0.2, 0.4), (0.4, 0.6), (0.6, 0.8), (0.8, 1.01)):
        m = (conf >= lo) & (conf < hi)
        rows.append({"confidence": f"{lo:.1f}-{min(hi, 1.0):.1f}", "share": float(m.mean()),
                     "agreement": float(ok[m].mean()) if m.any() else 0.0})
    return rows
