"""``draftpair demo eval-dflash``: plain vs DFlash on held-out chat prompts, one run.

Both conditions run on every prompt through DraftPair's engine (greedy), in alternating
order (plain first on even prompts, DFlash first on odd ones) so drift in machine load hits
both alike; the figure is the median of the per-prompt tok/s ratios, and every reply must be
identical to the plain one. Prompts are the held-out prompt set (never trained on), without
the ones the training run used to pick its checkpoint.
"""

from __future__ import annotations

import statistics
from collections.abc import Callable
from collections.abc import Set as AbstractSet
from pathlib import Path

from app.kinds import OFF
from app.plugins.dflash import PLUGIN as _DFLASH

DFLASH = _DFLASH.name


def heldout_prompts(n: int, exclude: set[str]) -> list[dict]:
    from app.demo.prompts import prompt_stream

    out = []
    for _idx, p in prompt_stream(0, 0, heldout=True):
        if p["id"] in exclude:
            continue
        out.append(p)
        if len(out) >= n:
            break
    return out


def selection_ids(workdir: Path | None) -> set[str]:
    """Held-out prompts a training run used to pick its checkpoint."""
    from app.demo.dflash_features import FeatureStore

    if workdir is None or not (Path(workdir) / "heldout" / "index.jsonl").exists():
        return set()
    return FeatureStore(Path(workdir) / "heldout").done_ids()


def compare(drafter: Path | None, *, prompts: int = 12, exclude: AbstractSet[str] = frozenset(),
            max_tokens: int = 128,
            width: int | None = None, log: Callable[[str], None] = print) -> dict:
    from app.demo.target import ensure_demo_target
    from app.engine.events import DoneEvent, GenerationRequest
    from app.engine.session import Session

    s = Session()
    s.load_target(str(ensure_demo_target(log)))
    if drafter is not None:
        s.load_draft(str(drafter))

    def run(msgs, kind):
        req = GenerationRequest(messages=tuple(msgs), max_tokens=max_tokens, draft_kind=kind,
                                draft_width=width if kind != OFF else None,
                                allow_fallback=False)
        done = None
        for ev in s.generate(req):
            if isinstance(ev, DoneEvent):
                done = ev
        if done is None or done.finish_reason == "error":
            raise RuntimeError(done.error if done else "no result")
        return done

    todo = heldout_prompts(prompts, set(exclude))
    run(todo[0]["messages"], OFF)  # warm-up (and the drafter's cost measurement)
    run(todo[0]["messages"], DFLASH)
    ratios, rows, same = [], [], 0
    for i, p in enumerate(todo):
        order = (OFF, DFLASH) if i % 2 == 0 else (DFLASH, OFF)
        res = {k: run(p["messages"], k) for k in order}
        a, b = res[OFF].timings, res[DFLASH].timings
        ratio = b.predicted_per_second / max(a.predicted_per_second, 1e-9)
        identical = res[OFF].token_ids == res[DFLASH].token_ids
        same += identical
        ratios.append(ratio)
        rows.append({"id": p["id"], "kind": p["kind"], "tokens": b.predicted_n,
                     "plain_tps": a.predicted_per_second, "dflash_tps": b.predicted_per_second,
                     "accept_len_mean": b.accept_len_mean, "ratio": ratio,
                     "identical": identical})
        log(f"[{i + 1}/{len(todo)}] {p['kind']:10s} n={b.predicted_n:3d} "
            f"accepted/round {b.accept_len_mean:.2f} plain {a.predicted_per_second:5.1f} "
            f"dflash {b.predicted_per_second:5.1f} tok/s x{ratio:.2f} "
            f"{'same' if identical else 'DIFFERENT'}")
    out = {"prompts": len(todo), "median": statistics.median(ratios),
           "mean": statistics.fmean(ratios), "identical": same, "rows": rows}
    log(f"dflash vs plain: median x{out['median']:.3f}, mean x{out['mean']:.3f}, "
        f"identical {same}/{len(todo)}")
    return out
