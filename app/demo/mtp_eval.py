"""Held-out evaluation of the demo MTP head (``draftpair demo mtp-eval``).

1. Teacher-forced: on held-out teacher replies (prompts the training never saw), how often
   the head's first proposal equals the target's own greedy token, once with the post-norm
   state and once with the pre-norm state as input. The setting the head was trained with
   must win by far; that is how the per-family setting is shown to be the one used.
2. With ``--engine``: DraftPair's engine on chat prompts, plain vs ``mtp`` vs ``full-model``
   (the shipped demo draft), greedy, the order of the three rotated per prompt; median
   speedup over plain and whether every output is identical to plain. The prompts are the
   hand-written ``chat_prompts.CHAT_PROMPTS`` (none from the training generator), or with
   ``--prompt-set heldout`` the generator's held-out prompts. Beside the engine's figures,
   the head's teacher-forced agreement on each plain reply (``mtp_replay``): what the head
   gets right on that very text, whatever the loop then makes of it.
"""

from __future__ import annotations

import json
import statistics
from pathlib import Path
from typing import Any

from app.engine.drafters.mtp_head import POSTNORM, PRENORM
from app.kinds import OFF
from app.kinds.shares import shares_line
from app.plugins.auto import PLUGIN as _AUTO
from app.plugins.full_model import PLUGIN as _FULL
from app.plugins.mtp import PLUGIN as _MTP

MTP, FULL = _MTP.name, _FULL.name  # the two drafters compared with plain decoding
AUTO = _AUTO.name  # and auto speculation, which may use either (and the copies)

RUN_ALONE = "/drafters-alone"  # the key suffix of a run without prompt lookup beside them


def teacher_forced(workdir: Path, teacher_dir: Path, head: Path | None, log=print) -> dict:
    from app.demo.mtp_train import MTPTrainer
    from app.demo.target import ensure_demo_target
    from app.engine.mlx_types import load_lm

    target, tok = load_lm(str(ensure_demo_target(log)))
    tr = MTPTrainer(workdir, teacher_dir, target, tok, lambda m: None)
    weights = (head / "model.safetensors") if head else (tr.best / "weights.safetensors")
    if head is not None:
        tr.set_head(json.loads((head / "draft_head.json").read_text())["token_ids"])
    tr.module.load_weights(str(weights))
    held, _ = _teacher_items(teacher_dir)
    tr.soft = dict(held)
    tr.store.extract(target, held, log=log, max_len=tr.cfg.max_len)
    tr.heldout = tr._examples(tr.store.load("heldout"))
    out: dict[str, Any] = {"trained_with": tr.cfg.hidden_state}
    for setting in (POSTNORM, PRENORM):
        ev = tr.evaluate(setting=setting)
        out[setting] = ev
        log(f"teacher-forced, head reads {setting}: first-proposal agreement "
            f"{ev['agreement']:.3f} on {ev['positions']} held-out positions")
    return out


def _teacher_items(teacher_dir: Path):
    from app.demo.features import teacher_items

    return teacher_items(teacher_dir)


def prompt_set(name: str, teacher_dir: Path, count: int) -> list[tuple[str, list[dict]]]:
    """(label, messages) of the prompts an engine comparison runs."""
    if name == "chat":
        from app.demo.chat_prompts import CHAT_PROMPTS, chat_messages

        return [("chat", chat_messages(p)) for p in CHAT_PROMPTS[:count]]
    from app.demo import teacher
    from app.demo.prompts import make_prompt

    return [(r.get("kind", "?"), make_prompt(int(r["index"]))["messages"])
            for r in teacher.load_heldout(teacher_dir)[:count]]


def engine_compare(teacher_dir: Path, *, prompts: int, max_tokens: int, head: Path | None = None,
                   log=print, which: str = "chat", lookup_assist: bool = True) -> dict:
    from app.demo.target import demo_draft_path
    from app.engine.drafters.mtp_replay import agreement, head_predictions
    from app.engine.events import DoneEvent, GenerationRequest
    from app.engine.session import Session

    records = prompt_set(which, teacher_dir, prompts)
    s = Session()
    target = s.load_target("demo")
    if head is not None:  # this head folder instead of the shipped one
        s.load_for(MTP, head)
    s.load_draft(str(demo_draft_path()))
    kinds = (OFF, AUTO, MTP, FULL)

    def run(msgs, kind):
        req = GenerationRequest(messages=tuple(msgs), max_tokens=max_tokens, draft_kind=kind,
                                lookup_assist=lookup_assist)
        done = None
        for event in s.generate(req):
            if isinstance(event, DoneEvent):
                done = event
        return done

    warm = [{"role": "user", "content": "Say hello."}]
    for kind in kinds:
        run(warm, kind)
    ratios: dict[str, list[float]] = {AUTO: [], MTP: [], FULL: []}
    same = {AUTO: 0, MTP: 0, FULL: 0}
    stats = {k: {"acc": 0, "rounds": 0, "n": 0, "verifies": 0} for k in ratios}
    fallbacks = []
    hits = positions = 0
    for i, (label, msgs) in enumerate(records):
        order = kinds[i % len(kinds):] + kinds[: i % len(kinds)]
        res = {kind: run(msgs, kind) for kind in order}
        plain = res[OFF]
        prompt = s.encode(GenerationRequest(messages=tuple(msgs)))
        tokens = prompt + list(plain.token_ids)
        h, n = agreement(head_predictions(target.model, s.assets[MTP], tokens), tokens,
                         len(prompt))
        hits, positions = hits + h, positions + n
        parts = [f"head {h / max(n, 1):.2f}"]
        for kind in ratios:
            t = res[kind].timings
            ratio = t.predicted_per_second / max(plain.timings.predicted_per_second, 1e-9)
            ratios[kind].append(ratio)
            ident = tuple(res[kind].token_ids) == tuple(plain.token_ids)
            same[kind] += int(ident)
            st = stats[kind]
            st["acc"] += t.draft_n_accepted
            st["rounds"] += t.draft_rounds
            st["n"] += t.predicted_n
            st["verifies"] += t.verify_passes
            if t.fallback:
                fallbacks.append(f"{kind}: {t.fallback}")
            parts.append(f"{kind} {t.predicted_per_second:5.1f} tok/s x{ratio:.2f} "
                         f"acc/round {t.accept_len_mean:.2f}{'' if ident else ' DIFFERENT'}"
                         + (f" ({shares_line(t.sources)})" if t.sources else ""))
        log(f"  [{i + 1}/{len(records)}] {label:10s} n={plain.timings.predicted_n:3d}"
            f" plain {plain.timings.predicted_per_second:5.1f} tok/s | " + " | ".join(parts))
    out: dict[str, Any] = {"prompts": len(records), "prompt_set": which, "max_tokens": max_tokens,
           "lookup_assist": lookup_assist,
           "fallbacks": fallbacks, "ratios": ratios,
           "head_agreement": hits / max(positions, 1), "head_positions": positions}
    for kind in ratios:
        st = stats[kind]
        out[kind] = {
            "speedup_median": statistics.median(ratios[kind]),
            "speedup_min": min(ratios[kind]), "speedup_max": max(ratios[kind]),
            "at_or_above_plain": sum(x >= 1.0 for x in ratios[kind]),
            "accept_len_mean": st["acc"] / max(st["rounds"], 1),
            "tokens_per_verify": st["n"] / max(st["verifies"], 1),
            "identical": same[kind],
        }
        o = out[kind]
        log(f"{kind}: median x{o['speedup_median']:.3f} (range {o['speedup_min']:.2f}-"
            f"{o['speedup_max']:.2f}, >= plain on {o['at_or_above_plain']}/{len(records)}), "
            f"accepted/round {o['accept_len_mean']:.2f}, tokens/verify "
            f"{o['tokens_per_verify']:.2f}, identical {o['identical']}/{len(records)}")
    log(f"head, teacher-forced on the plain replies: first-proposal agreement "
        f"{out['head_agreement']:.3f} over {positions} positions")
    return out


def main(workdir: Path, teacher_dir: Path, args) -> dict:
    """Evaluate, print, and keep the results in ``WORKDIR/mtp/eval.json``: the engine figures
    per prompt set (``engine_runs``), so a run on one set keeps the other's for the card."""
    out = {"teacher_forced": teacher_forced(workdir, teacher_dir, args.head)}
    if args.engine:
        out["engine"] = engine_compare(teacher_dir, prompts=args.prompts,
                                       max_tokens=args.max_tokens, head=args.head,
                                       which=args.prompt_set,
                                       lookup_assist=getattr(args, "lookup_assist", True))
    if args.json:
        print(json.dumps(out, indent=1))
    path = workdir / "mtp" / "eval.json"
    path.parent.mkdir(parents=True, exist_ok=True)
    kept = json.loads(path.read_text()) if path.exists() else {}
    runs = dict(kept.get("engine_runs") or {})
    if args.engine:
        key = args.prompt_set + ("" if out["engine"]["lookup_assist"] else RUN_ALONE)
        runs[key] = out["engine"]
    saved = {"teacher_forced": out["teacher_forced"], "engine_runs": runs}
    path.write_text(json.dumps(saved, indent=1) + "\n")
    return out
