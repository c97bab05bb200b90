"""The EAGLE-3 cross-check scenario, driven the same way for DraftPair's drafter and for
mlx-vlm's ``Eagle3DraftModel`` (mlx-vlm 0.7.10, ``mlx_vlm/speculative/drafters/eagle3/``):
the target's rows come from one pass of the tiny target over the whole sequence (the three
layers the drafter reads, through DraftPair's taps), so both sides get the same arrays.

Rounds: the prompt's rows and a bonus token, then a round per ``(accepted, new token)`` in
``ROUNDS`` (the target kept the pending token's row and the accepted proposals' rows). Each
round records the ``K`` greedy proposals (target ids)."""

from __future__ import annotations

import sys
import types
from pathlib import Path
from typing import Any

import numpy as np

PROMPT = tuple(range(20, 36))
BONUS = 40
K = 4
ROUNDS = ((2, 77), (0, 91), (4, 55))  # (accepted proposals, the target's own next token)
REF = Path("/work/ref/mlxvlm")  # mlx-vlm 0.7.10 unpacked (not a dependency)


def _target(target: Path) -> Any:
    from mlx_lm import load

    return load(str(target))[0]


def rows_for(model: Any, tokens: list[int], capture: tuple[int, ...]) -> np.ndarray:
    """(n, 3H) the concatenated rows of the layers the drafter reads, in layer order."""
    import mlx.core as mx

    from app.engine.taps import TapRequest, forward

    _, hidden = forward(model, mx.array(tokens, dtype=mx.uint32), None,
                        TapRequest(layers=capture))
    assert hidden is not None
    out = mx.concatenate([hidden.layers[i] for i in capture], axis=-1)
    return np.array(out.astype(mx.float32))


def ours(target: Path, drafter: Path) -> list[list[int]]:
    import mlx.core as mx

    from app.engine.drafters.eagle3 import Eagle3Drafter, load
    from app.engine.events import SamplingParams
    from app.engine.models import load_model
    from app.engine.taps import Hidden

    t = load_model(target)
    assets = load(drafter, t)
    d = Eagle3Drafter(assets, target_vocab=t.vocab_size)
    cap = assets.capture

    def hidden(rows: np.ndarray) -> Hidden:
        h = t.model.model.embed_tokens.weight.shape[1]
        a = mx.array(rows)
        return Hidden(layers={c: a[:, j * h:(j + 1) * h] for j, c in enumerate(cap)})

    committed = list(PROMPT)
    d.begin(committed, SamplingParams())
    d.prefill(committed, hidden(rows_for(t.model, committed, cap)))
    committed.append(BONUS)
    out: list[list[int]] = []
    p = d.propose(committed, K)
    for step in (*ROUNDS, None):
        assert p is not None
        props = [int(x) for x in p.tokens.tolist()]
        out.append(props)
        if step is None:
            break
        accepted, new = step
        allrows = rows_for(t.model, committed + props, cap)
        kept = allrows[len(committed) - 1: len(committed) + accepted]
        committed = committed + props[:accepted] + [new]
        d.observe(committed, p, accepted, props[:accepted] + [new], hidden(kept))
        p = d.propose(committed, K)
    return out


def import_mlx_vlm(ref: Path = REF) -> Any:
    """mlx-vlm's EAGLE-3 drafter module without its package's image dependencies (its
    ``__init__`` imports PIL; the drafter itself needs only mlx)."""
    root = ref / "mlx_vlm"
    for name, path in (("mlx_vlm", root), ("mlx_vlm.models", root / "models"),
                       ("mlx_vlm.speculative", root / "speculative"),
                       ("mlx_vlm.speculative.drafters", root / "speculative" / "drafters")):
        if name not in sys.modules:
            m = types.ModuleType(name)
            m.__path__ = [str(path)]
            sys.modules[name] = m
    if "PIL" not in sys.modules:
        pil = types.ModuleType("PIL")
        for sub in ("Image", "ImageOps"):
            setattr(pil, sub, types.ModuleType(f"PIL.{sub}"))
            sys.modules[f"PIL.{sub}"] = getattr(pil, sub)
        sys.modules["PIL"] = pil
    import importlib

    return importlib.import_module("mlx_vlm.speculative.drafters.eagle3")


def mlx_vlm(target: Path, drafter: Path, ref: Path = REF) -> list[list[int]]:
    import json

    import mlx.core as mx

    mod = import_mlx_vlm(ref)
    cfg = mod.ModelConfig.from_dict(json.loads((drafter / "config.json").read_text()))
    m = mod.Model(cfg)
    weights = m.sanitize(dict(mx.load(str(drafter / "model.safetensors"))))
    m.load_weights(list(weights.items()), strict=False)
    model = _target(target)
    m.reset(model)  # binds the target's embedding
    cap = tuple(cfg.capture_layer_ids)
    committed = list(PROMPT)
    hidden = mx.array(rows_for(model, committed, cap))[None]
    m.prefill_from_target_hidden(mx.array([committed]), hidden, BONUS, None, greedy=True)
    committed.append(BONUS)
    out = []
    draft = m.draft_block(BONUS, hidden[:, -1:], None, K + 1, None, greedy=True)
    out.append([int(x) for x in draft[0].tolist()])
    for accepted, new in ROUNDS:
        props = out[-1]
        allrows = rows_for(model, committed + props, cap)
        verify = mx.array(allrows[len(committed) - 1:])[None]
        m.accept_verified_tokens(verify, draft, accepted, props[:accepted] + [new], None,
                                 greedy=True)
        committed = committed + props[:accepted] + [new]
        draft = m.draft_block(new, verify[:, accepted: accepted + 1], None, K + 1, None,
                              greedy=True)
        out.append([int(x) for x in draft[0].tolist()])
    return out


# the cross-checked drafters: (name, layout, reduced vocabulary, speculators options)
VARIANTS = (
    ("speculators-reduced", "speculators", True, {}),
    ("speculators-full", "speculators", False, {}),
    ("speculators-normres", "speculators", True, {"norm_before_residual": True}),
    ("speculators-ids136", "speculators", True, {"layer_ids": (1, 3, 6)}),
)
