"""``draftpair demo compare-drafters``: the demo target's drafters side by side, one sitting.

Plain decoding and each drafter kind asked for (by default every kind with a drafter shipped
for the demo target, and auto) run every hand-written chat request of ``chat_prompts`` through
DraftPair's engine, the order rotated per prompt so drift in machine load hits all alike. Per
kind: the median of the per-prompt tok/s ratios over plain, the range, accepted tokens per
round, tokens per verify pass, and how many replies were identical to plain (at temperature 0
every one must be; sampled replies differ run to run, as they do without speculation).
With several tree modes (``trees=("off", "on")``) each kind that grows or shapes trees also
runs as trees in the same rotation, and its row gives the median per-prompt ratio to its own
chains (``vs_chain``): trees and chains measured in one sitting, prompt by prompt.
"""

from __future__ import annotations

import statistics
from collections.abc import Callable, Sequence
from typing import Any

from app.kinds import OFF


def default_kinds() -> list[str]:
    from app import kinds

    shipped = [p.name for p in kinds.drafting() if p.demo_draft]
    auto = [p.name for p in kinds.drafting() if p.combines]
    return shipped + auto


def label(kind: str, trees: str) -> str:
    return kind if trees == "off" else f"{kind} trees {trees}"


def compare(kinds_: Sequence[str], *, prompts: int = 12, max_tokens: int = 128,
            temperature: float = 0.0, seed: int = 0, trees: Sequence[str] = ("off",),
            log: Callable[[str], None] = print) -> dict[str, Any]:
    from app import kinds
    from app.demo.chat_prompts import CHAT_PROMPTS, chat_messages
    from app.engine.events import DoneEvent, GenerationRequest, SamplingParams
    from app.engine.session import Session
    from app.kinds.shares import shares_line
    from app.resources import resource_path

    s = Session()
    s.load_target("demo")
    for name in kinds_:
        plugin = kinds.get(name)
        if plugin is not None and plugin.draft_is_lm and plugin.demo_draft:
            s.load_draft(str(resource_path(plugin.demo_draft)))

    conds: dict[str, tuple[str, str]] = {}  # label -> (kind, tree mode)
    for name in kinds_:
        plugin = kinds.get(name)
        for mode in trees:
            if mode == "off" or plugin.grows_trees or plugin.shapes_trees or plugin.combines:
                conds[label(name, mode)] = (name, mode)

    def run(msgs: list[dict], cond: str) -> DoneEvent:
        kind, mode = conds.get(cond, (OFF, "off"))
        req = GenerationRequest(messages=tuple(msgs), max_tokens=max_tokens, draft_kind=kind,
                                sampling=SamplingParams(temperature=temperature, seed=seed),
                                allow_fallback=False, trees=mode)
        done = None
        for event in s.generate(req):
            if isinstance(event, DoneEvent):
                done = event
        if done is None or done.finish_reason == "error":
            raise RuntimeError(done.error if done else "no result")
        return done

    labels = list(conds)
    order0 = [OFF, *labels]
    warm = [{"role": "user", "content": "Say hello."}]
    for kind in order0:  # loading and this machine's measurements, outside the figures
        run(warm, kind)
    ratios: dict[str, list[float]] = {k: [] for k in labels}
    vs_chain: dict[str, list[float]] = {k: [] for k in labels if conds[k][1] != "off"}
    same = dict.fromkeys(labels, 0)
    sums = {k: {"acc": 0, "rounds": 0, "n": 0, "verifies": 0, "trees": 0} for k in labels}
    shares: dict[str, dict[str, int]] = {k: {} for k in labels}
    todo = [chat_messages(p) for p in CHAT_PROMPTS[:prompts]]
    for i, msgs in enumerate(todo):
        order = order0[i % len(order0):] + order0[: i % len(order0)]
        res = {kind: run(msgs, kind) for kind in order}
        plain = res[OFF]
        parts = []
        for kind in labels:
            t = res[kind].timings
            ratio = t.predicted_per_second / max(plain.timings.predicted_per_second, 1e-9)
            chain = label(conds[kind][0], "off")
            if kind in vs_chain and chain in res:
                vs_chain[kind].append(t.predicted_per_second / max(
                    res[chain].timings.predicted_per_second, 1e-9))
            ratios[kind].append(ratio)
            ident = tuple(res[kind].token_ids) == tuple(plain.token_ids)
            same[kind] += int(ident)
            st = sums[kind]
            st["acc"] += t.draft_n_accepted
            st["rounds"] += t.draft_rounds
            st["n"] += t.predicted_n
            st["verifies"] += t.verify_passes
            st["trees"] += t.tree_rounds
            for src, counts in (t.sources or {}).items():
                shares[kind][src] = shares[kind].get(src, 0) + int(counts.get("rounds", 0))
            parts.append(f"{kind} x{ratio:.2f}{'' if ident else ' DIFFERENT'}"
                         + (f" ({shares_line(t.sources)})" if t.sources else ""))
        log(f"  [{i + 1}/{len(todo)}] n={plain.timings.predicted_n:3d} plain "
            f"{plain.timings.predicted_per_second:5.1f} tok/s | " + " | ".join(parts))
    out: dict[str, Any] = {"prompts": len(todo), "max_tokens": max_tokens,
                           "temperature": temperature, "trees": list(trees), "kinds": {}}
    for kind in labels:
        st, r = sums[kind], ratios[kind]
        row: dict[str, Any] = {
            "speedup_median": statistics.median(r), "speedup_min": min(r),
            "speedup_max": max(r), "at_or_above_plain": sum(x >= 1.0 for x in r),
            "accept_len_mean": st["acc"] / max(st["rounds"], 1),
            "tokens_per_verify": st["n"] / max(st["verifies"], 1),
            "identical": same[kind], "source_rounds": shares[kind],
            "tree_rounds": st["trees"],
            "vs_chain": statistics.median(vs_chain[kind]) if vs_chain.get(kind) else None}
        out["kinds"][kind] = row
        log(f"{kind}: median x{row['speedup_median']:.3f} (range {row['speedup_min']:.2f}-"
            f"{row['speedup_max']:.2f}, >= plain on {row['at_or_above_plain']}/{len(todo)}), "
            f"accepted/round {row['accept_len_mean']:.2f}, tokens/verify "
            f"{row['tokens_per_verify']:.2f}, identical {row['identical']}/{len(todo)}"
            + (f", {row['tree_rounds']} of {st['rounds']} rounds as trees, x"
               f"{row['vs_chain']:.3f} of its chains (median per prompt)"
               if row["vs_chain"] is not None else ""))
    return out
