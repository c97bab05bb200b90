"""What the demo drafters' training jobs share: the learning-rate schedule and saving a run
(weights, optimizer, state; the best checkpoint by held-out acceptance), each file written
whole before it replaces the last, so a job stopped at any moment resumes."""

from __future__ import annotations

import json
import math
import os
from pathlib import Path
from typing import Any


def cosine_lr(peak: float, warmup: int, minutes: float, step: int, elapsed: float) -> float:
    """Linear warm-up over ``warmup`` steps, then a cosine over the planned ``minutes`` of
    training down to a tenth of ``peak``."""
    warm = min(1.0, (step + 1) / warmup)
    frac = min(1.0, elapsed / max(minutes * 60.0, 1.0))
    return peak * warm * (0.1 + 0.9 * 0.5 * (1 + math.cos(math.pi * frac)))


def save_run(workdir: Path, model: Any, opt: Any, state: dict, accepted: float | None) -> None:
    """``latest`` weights and the optimizer; ``best`` weights when ``accepted`` (held-out)
    beats every earlier point; then ``state.json``."""
    import mlx.core as mx
    from mlx.utils import tree_flatten

    w = Path(workdir)
    params = dict(tree_flatten(model.parameters()))
    _replace(w / "latest.safetensors", lambda p: mx.save_safetensors(p, params))
    opt_state = dict(tree_flatten(opt.state))
    _replace(w / "optimizer.safetensors", lambda p: mx.save_safetensors(p, opt_state))
    if accepted is not None and accepted > state.get("best_accepted", -1.0):
        state["best_accepted"] = accepted
        state["best_step"] = state["step"]
        _replace(w / "best.safetensors", lambda p: mx.save_safetensors(p, params))
    text = json.dumps(state, indent=1)
    _replace(w / "state.json", lambda p: Path(p).write_text(text))


def _replace(path: Path, write: Any) -> None:
    tmp = path.with_name(path.stem + ".tmp" + path.suffix)
    write(str(tmp))
    os.replace(tmp, path)
