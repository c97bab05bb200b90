"""Held-out evaluation of a demo draft (``draftpair demo eval``).

Three measurements, all greedy with the chat template, on prompts never trained on:
1. teacher-forced: agreement of the draft's argmax with the target's greedy reply, and the
   k-token acceptance that implies (exact for greedy speculative decoding when the draft sees
   the committed prefix);
2. a minimal speculative loop written here (target + draft KV caches, k proposals, one
   verify pass, cache trim), timed against plain target decoding, alternating A/B: accepted
   length, tokens per verify, speedup, and whether the outputs are identical;
3. with ``--engine``: DraftPair's own engine (``app.engine.session``) on the same prompts,
   full-model draft vs no draft.
"""

from __future__ import annotations

import json
import statistics
import time
from pathlib import Path
from typing import Any

from app.checkpoints.inspect import read_draft_head
from app.errors import DraftPairError
from app.kinds import OFF
from app.plugins.full_model import PLUGIN as _FULL

FULL = _FULL.name  # the drafter this evaluates against plain decoding


def load_draft(folder: Path):
    """(model, head ids array) of a draft folder; the head is its draft_head.json or all ids."""
    import mlx.core as mx

    from app.engine.models import load_model

    model = load_model(folder).model  # the engine's loading: precision chosen per backend
    head, problem = read_draft_head(folder)
    if problem:
        raise DraftPairError(f"{folder}: {problem}")
    if head is None:
        head = list(range(model.model.embed_tokens.weight.shape[0]))
    return model, mx.array(head)


def heldout_records(workdir: Path | None, n: int, target_model, tok) -> list[dict]:
    """Held-out prompts with the target's greedy replies (from the workdir, else generated)."""
    from app.demo import teacher

    recs = teacher.load_heldout(workdir) if workdir and (workdir / "heldout.jsonl").is_file() \
        else []
    if len(recs) >= n:
        return recs[:n]
    from app.demo.prompts import prompt_stream

    out = list(recs)
    have = {r["index"] for r in out}
    for idx, p in prompt_stream(0, 0, heldout=True):
        if len(out) >= n:
            break
        if idx in have:
            continue
        ids = teacher.encode_prompt(tok, p["messages"])
        reply = plain_greedy(target_model, ids, 256, set(tok.eos_token_ids))[0]
        out.append({"index": idx, "id": p["id"], "kind": p["kind"], "prompt_ids": ids,
                    "reply_ids": reply})
    return out


def plain_greedy(model, prompt_ids: list[int], max_tokens: int, eos: set[int]):
    import mlx.core as mx
    from mlx_lm.models.cache import make_prompt_cache

    from app.engine.mlx_types import item_int

    cache = make_prompt_cache(model)
    t0 = time.perf_counter()
    logits = model(mx.array(prompt_ids)[None], cache=cache)
    y = item_int(mx.argmax(logits[0, -1]))
    t1 = time.perf_counter()
    out = [y]
    while len(out) < max_tokens and y not in eos:
        logits = model(mx.array([[y]]), cache=cache)
        y = item_int(mx.argmax(logits[0, -1]))
        out.append(y)
    t2 = time.perf_counter()
    return out, {"prefill_s": t1 - t0, "decode_s": t2 - t1, "n": len(out)}


def spec_greedy(target, draft, head, prompt_ids: list[int], max_tokens: int, eos: set[int],
                k: int = 3):
    """Minimal greedy speculative decoding: exact (same tokens as plain greedy)."""
    import mlx.core as mx
    from mlx_lm.models.cache import make_prompt_cache, trim_prompt_cache

    from app.engine.mlx_types import int_list, item_int

    tc = make_prompt_cache(target)
    dc = make_prompt_cache(draft)
    from app.engine.models import dequantized_weight

    w = dequantized_weight(draft.model.embed_tokens, head)
    t0 = time.perf_counter()
    logits = target(mx.array(prompt_ids)[None], cache=tc)
    y = item_int(mx.argmax(logits[0, -1]))
    draft.model(mx.array(prompt_ids)[None], cache=dc)
    mx.eval([c.state for c in dc])
    t1 = time.perf_counter()
    out = [y]
    pending = [y]  # tokens the draft has not consumed yet
    rounds = accepted = 0
    while len(out) < max_tokens and y not in eos:
        kk = min(k, max_tokens - len(out))
        props: list[int] = []
        inp = pending
        for _ in range(kk):
            h = draft.model(mx.array([inp]), cache=dc)
            t = item_int(head[mx.argmax(h[0, -1] @ w.T)])
            props.append(t)
            inp = [t]
        v = target(mx.array([[y, *props]]), cache=tc)
        tt = int_list(mx.argmax(v[0], axis=-1))
        n = 0
        while n < kk and props[n] == tt[n]:
            n += 1
        new = props[:n] + [tt[n]]
        rounds += 1
        accepted += n
        trim_prompt_cache(tc, kk - n)
        if n < kk:
            trim_prompt_cache(dc, kk - 1 - n)
            pending = [tt[n]]
        else:
            pending = [props[-1], tt[n]]
        for t in new:
            out.append(t)
            if t in eos or len(out) >= max_tokens:
                break
        y = out[-1]
    t2 = time.perf_counter()
    return out, {"prefill_s": t1 - t0, "decode_s": t2 - t1, "n": len(out), "rounds": rounds,
                 "accepted": accepted}


def own_loop_eval(target, draft, head, records: list[dict], eos: set[int], *, k: int,
                  max_tokens: int, log=print) -> dict:
    import mlx.core as mx

    # warm-up (compile paths, allocate)
    r0 = records[0]
    plain_greedy(target, r0["prompt_ids"], 8, eos)
    spec_greedy(target, draft, head, r0["prompt_ids"], 8, eos, k)
    mx.clear_cache()
    ratios, same = [], 0
    rounds = accepted = n_tok = 0
    plain_tps, spec_tps = [], []
    for i, r in enumerate(records):
        order = ("plain", "spec") if i % 2 == 0 else ("spec", "plain")
        res = {}
        for which in order:
            if which == "plain":
                res[which] = plain_greedy(target, r["prompt_ids"], max_tokens, eos)
            else:
                res[which] = spec_greedy(target, draft, head, r["prompt_ids"], max_tokens, eos,
                                         k)
        (po, ps), (so, ss) = res["plain"], res["spec"]
        same += int(po == so)
        # decode time only (the prefill is the same target pass in both)
        p_rate = (ps["n"] - 1) / max(ps["decode_s"], 1e-9)
        s_rate = (ss["n"] - 1) / max(ss["decode_s"], 1e-9)
        plain_tps.append(p_rate)
        spec_tps.append(s_rate)
        ratios.append(s_rate / max(p_rate, 1e-9))
        rounds += ss["rounds"]
        accepted += ss["accepted"]
        n_tok += ss["n"] - 1
        log(f"  [{i + 1}/{len(records)}] {r.get('kind', '?'):10s} n={ss['n']:3d} "
            f"accept/round {ss['accepted'] / max(ss['rounds'], 1):.2f} "
            f"plain {p_rate:5.1f} tok/s spec {s_rate:5.1f} tok/s x{ratios[-1]:.2f} "
            f"{'same' if po == so else 'DIFFERENT'}")
    return {
        "k": k,
        "prompts": len(records),
        "accept_len_mean": accepted / max(rounds, 1),
        "tokens_per_verify": n_tok / max(rounds, 1),
        "speedup_median": statistics.median(ratios),
        "speedup_mean": statistics.fmean(ratios),
        "plain_tok_s_median": statistics.median(plain_tps),
        "spec_tok_s_median": statistics.median(spec_tps),
        "identical": same,
    }


def engine_eval(target_path: Path, draft_path: Path, records: list[dict], *, k: int,
                max_tokens: int, log=print) -> dict | None:
    """Run DraftPair's engine (if present) with and without the draft on the same prompts."""
    try:
        from app.engine.events import DoneEvent, GenerationRequest
        from app.engine.session import Session
    except ImportError as exc:
        log(f"engine: not available ({exc})")
        return None
    from app.demo.prompts import make_prompt

    s = Session()
    s.load_target(str(target_path))
    s.load_draft(str(draft_path))

    def run(msgs, kind):
        req = GenerationRequest(messages=tuple(msgs), max_tokens=max_tokens, draft_kind=kind,
                                draft_width=k if kind != OFF else None)
        done = None
        for event in s.generate(req):
            if isinstance(event, DoneEvent):
                done = event
        return done

    run(make_prompt(int(records[0]["index"]))["messages"], OFF)  # warm-up
    run(make_prompt(int(records[0]["index"]))["messages"], FULL)
    ratios, same, rows = [], 0, []
    acc = rnd = emitted = verifies = 0
    for i, r in enumerate(records):
        msgs = make_prompt(int(r["index"]))["messages"]
        kinds = (OFF, FULL) if i % 2 == 0 else (FULL, OFF)
        res = {kind: run(msgs, kind) for kind in kinds}
        a, b = res[OFF], res[FULL]
        ta, tb = a.timings, b.timings
        ratio = tb.predicted_per_second / max(ta.predicted_per_second, 1e-9)
        ratios.append(ratio)
        same += int(tuple(a.token_ids) == tuple(b.token_ids))
        acc += tb.draft_n_accepted
        rnd += tb.draft_rounds
        emitted += tb.predicted_n
        verifies += tb.verify_passes
        rows.append({"kind": r.get("kind"), "plain": ta.to_dict(), "draft": tb.to_dict(),
                     "identical": tuple(a.token_ids) == tuple(b.token_ids)})
        log(f"  engine [{i + 1}/{len(records)}] {r.get('kind', '?'):10s} n={tb.predicted_n:3d} "
            f"accept/round {tb.accept_len_mean:.2f} tok/verify {tb.tokens_per_verify:.2f} "
            f"plain {ta.predicted_per_second:5.1f} draft {tb.predicted_per_second:5.1f} tok/s "
            f"x{ratio:.2f} {'same' if rows[-1]['identical'] else 'DIFFERENT'}"
            + (f" fallback={tb.fallback}" if tb.fallback else ""))
    out = {
        "k": k, "prompts": len(records), "accept_len_mean": acc / max(rnd, 1),
        "tokens_per_verify": emitted / max(verifies, 1),
        "speedup_median": statistics.median(ratios), "speedup_mean": statistics.fmean(ratios),
        "identical": same, "rows": rows,
    }
    log(f"engine k={k}: accepted/round {out['accept_len_mean']:.3f}, tokens/verify "
        f"{out['tokens_per_verify']:.3f}, speedup median x{out['speedup_median']:.3f}, "
        f"identical {same}/{len(records)}")
    return out


def main(draft: Path, workdir: Path | None, args) -> dict:
    import mlx.core as mx

    from app.demo.target import ensure_demo_target
    from app.demo.train import teacher_forced_eval
    from app.engine.mlx_types import load_lm

    tpath = ensure_demo_target(print)
    target, tok = load_lm(str(tpath))
    dmodel, head = load_draft(Path(draft))
    eos = set(int(e) for e in tok.eos_token_ids)
    say = (lambda *_: None) if args.json else print
    records = heldout_records(workdir, args.prompts, target, tok)
    tf = teacher_forced_eval(dmodel, head, records, k=args.k)
    say(f"teacher-forced on {tf['prompts']} held-out prompts ({tf['tokens']} reply tokens): "
        f"agreement {tf['agreement']:.3f}, simulated k={args.k} accepted/round "
        f"{tf['sim_accept_mean']:.3f}, tokens/round {tf['sim_tokens_per_round']:.3f}")
    mx.clear_cache()
    own = own_loop_eval(target, dmodel, head, records, eos, k=args.k,
                        max_tokens=args.max_tokens, log=say)
    say(f"own loop k={args.k}: accepted/round {own['accept_len_mean']:.3f}, tokens/verify "
        f"{own['tokens_per_verify']:.3f}, speedup median x{own['speedup_median']:.3f} "
        f"(plain {own['plain_tok_s_median']:.1f} tok/s, spec {own['spec_tok_s_median']:.1f} "
        f"tok/s), identical {own['identical']}/{own['prompts']}")
    result: dict[str, Any] = {"draft": str(draft), "teacher_forced": tf, "own_loop": own}
    if args.engine:
        result["engine"] = engine_eval(tpath, Path(draft), records, k=args.k,
                                       max_tokens=args.max_tokens, log=say)
    if args.json:
        print(json.dumps(result, indent=2))
    if workdir is not None and workdir.is_dir():
        (workdir / "eval-last.json").write_text(json.dumps(result, indent=2) + "\n")
    return result
