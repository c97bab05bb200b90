"""``draftpair demo status``: what a training folder holds."""

from __future__ import annotations

import json
from pathlib import Path

from app.demo import teacher


def status_lines(workdir: Path) -> list[str]:
    lines = [f"workdir:     {workdir}"]
    if not workdir.is_dir():
        return lines + ["             (no training run here)"]
    n_rec, n_tok = teacher.count_tokens(workdir)
    lines.append(f"teacher:     {n_rec} replies, {n_tok} tokens; "
                 f"{len(teacher.load_heldout(workdir))} held-out")
    for name in ("checkpoint", "best"):
        mp = workdir / name / "meta.json"
        if mp.is_file():
            m = json.loads(mp.read_text())
            extra = ""
            if "eval" in m:
                e = m["eval"]
                extra = (f", agreement {e['agreement']:.3f}, sim accept/round "
                         f"{e['sim_accept_mean']:.3f}")
            lines.append(f"{name + ':':12s} step {m['step']}, "
                         f"{float(m['train_seconds']) / 60:.1f} min trained{extra} ({m['time']})")
    log = workdir / "train.log"
    if log.is_file():
        text = log.read_text().splitlines()
        curve = [t for t in text if "] eval: " in t]
        if curve:
            lines += ["curve (held-out, teacher-forced):"] + [f"  {t}" for t in curve]
        lines += ["log:"] + [f"  {t}" for t in text[-3:]]
    return lines
