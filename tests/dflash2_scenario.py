"""The DFlash 2 cross-check scenario, driven alike for DraftPair's drafter and for mlx-vlm's
``DFlash2DraftModel`` (mlx-vlm 0.7.10, ``mlx_vlm/speculative/drafters/dflash2/``, greedy
``draft_block``): the prompt's rows and a bonus token, then a round per ``(accepted, new
token)`` in ``ROUNDS`` (the target kept the pending token's row and the accepted proposals'
rows). Each round records the block's proposals."""

from __future__ import annotations

import importlib
import json
from pathlib import Path
from typing import Any

import numpy as np

from tests import eagle3_scenario as e3

PROMPT = e3.PROMPT
BONUS = 40
ROUNDS = ((2, 77), (0, 91), (3, 55))
REF = e3.REF


def _hidden(t: Any, rows: np.ndarray, ids: tuple[int, ...]) -> Any:
    import mlx.core as mx

    from app.engine.taps import Hidden

    h = rows.shape[1] // len(ids)
    a = mx.array(rows)
    return Hidden(layers={c: a[:, j * h:(j + 1) * h] for j, c in enumerate(ids)})


def ours(target: Path, drafter: Path, engine: str = "dflash2") -> list[list[int]]:
    """DraftPair's drafter of the engine module ``app.engine.drafters.<engine>``."""
    from app.engine.events import SamplingParams
    from app.engine.models import load_model

    mod = importlib.import_module(f"app.engine.drafters.{engine}")
    t = load_model(target)
    assets = mod.load(drafter, t)
    d = mod.make(_Ctx(t, assets))
    ids = tuple(assets.config.target_layer_ids)
    k = getattr(d, "proposals", assets.config.block_size - 1)
    committed = list(PROMPT)
    d.begin(committed, SamplingParams())
    d.prefill(committed, _hidden(t, e3.rows_for(t.model, committed, ids), ids))
    committed.append(BONUS)
    out: list[list[int]] = []
    p = d.propose(committed, k)
    for step in (*ROUNDS, None):
        assert p is not None
        props = [int(x) for x in p.tokens.tolist()]
        out.append(props)
        if step is None:
            break
        accepted, new = step
        allrows = e3.rows_for(t.model, committed + props, ids)
        kept = allrows[len(committed) - 1: len(committed) + accepted]
        committed = committed + props[:accepted] + [new]
        d.observe(committed, p, accepted, props[:accepted] + [new], _hidden(t, kept, ids))
        p = d.propose(committed, k)
    return out


class _Ctx:
    def __init__(self, target: Any, asset: Any):
        self.target, self.asset, self.request = target, asset, None


def mlx_vlm(target: Path, drafter: Path, ref: Path = REF, family: str = "dflash2"
            ) -> list[list[int]]:
    """mlx-vlm's drafter of ``mlx_vlm.speculative.drafters.<family>``, greedy."""
    import mlx.core as mx

    e3.import_mlx_vlm(ref)
    mod = importlib.import_module(f"mlx_vlm.speculative.drafters.{family}")
    cfg = mod.ModelConfig.from_dict(json.loads((drafter / "config.json").read_text()))
    m = mod.Model(cfg)
    m.load_weights(list(m.sanitize(dict(mx.load(str(drafter / "model.safetensors")))).items()),
                   strict=True)
    model = e3._target(target)
    # its bind first checks the target is one of mlx-vlm's own models (which can roll back
    # their caches); the drafter's own binding is DFlash's, called directly
    super(mod.Model, m).bind(model)
    cache = m.make_cache()
    ids = tuple(cfg.target_layer_ids)
    bs = cfg.block_size
    committed = list(PROMPT)
    hidden = mx.array(e3.rows_for(model, committed, ids))[None]
    committed.append(BONUS)
    def greedy(x: Any) -> Any:
        return mx.argmax(x, axis=-1)

    draft = m.draft_block(BONUS, hidden, cache, bs, greedy)
    out = [[int(x) for x in draft[0].tolist()]]
    for accepted, new in ROUNDS:
        props = out[-1]
        allrows = e3.rows_for(model, committed + props, ids)
        kept = mx.array(allrows[len(committed) - 1: len(committed) + accepted])[None]
        committed = committed + props[:accepted] + [new]
        draft = m.draft_block(new, kept, cache, bs, greedy)
        out.append([int(x) for x in draft[0].tolist()])
    return out
