"""The Gemma 4 assistant cross-check scenario, driven alike for DraftPair's drafter and for
mlx-vlm's ``Gemma4AssistantDraftModel`` (mlx-vlm 0.7.10,
``mlx_vlm/speculative/drafters/gemma4_assistant/``, greedy ``draft_block`` after
``set_shared_kv`` as its MTP loop calls it). The tiny Gemma 4 target reads the prompt, then
each round's bonus token and accepted proposals, into one cache (its sliding layers' window
is smaller than the conversation); both drafters get the same final states and the same
shared K/V (DraftPair's taps read them)."""

from __future__ import annotations

import importlib
import json
import sys
import types
from pathlib import Path
from typing import Any

from tests import eagle3_scenario as e3

PROMPT = e3.PROMPT
BONUS = 40
K = 3
ROUNDS = ((2, 77), (0, 91), (3, 55), (1, 12))
REF = e3.REF


def _pass(model: Any, tokens: list[int], cache: list[Any]) -> Any:
    import mlx.core as mx

    from app.engine.taps import TapRequest, forward

    _, hidden = forward(model, mx.array(tokens, dtype=mx.uint32), cache,
                        TapRequest(final_postnorm=True, shared_kv=True))
    return hidden


def _rounds(target_model: Any, draft: Any) -> list[list[int]]:
    """``draft(committed, hidden)`` -> proposals, for the prompt and every round."""
    cache = target_model.make_cache()
    committed = list(PROMPT)
    hidden = _pass(target_model, committed, cache)
    committed.append(BONUS)
    out = [draft(committed, hidden)]
    for accepted, new in ROUNDS:
        props = out[-1]
        hidden = _pass(target_model, [committed[-1], *props[:accepted]], cache)
        committed = committed + props[:accepted] + [new]
        out.append(draft(committed, hidden, props, accepted))
    return out


def ours(target: Path, drafter: Path) -> list[list[int]]:
    from app.engine.drafters.gemma4_assistant import Gemma4AssistantDrafter, load
    from app.engine.events import SamplingParams
    from app.engine.models import load_model

    t = load_model(target)
    d = Gemma4AssistantDrafter(load(drafter, t), t)
    d.begin(list(PROMPT), SamplingParams())
    first = [True]

    def draft(committed, hidden, props=None, accepted=0):
        if first[0]:
            d.prefill(list(PROMPT), hidden)
            first[0] = False
        else:
            d.observe(committed, None, accepted, [], hidden)
        p = d.propose(committed, K)
        assert p is not None
        return [int(x) for x in p.tokens.tolist()]

    return _rounds(t.model, draft)


def _stub_images() -> None:
    """mlx-vlm's Gemma 4 module imports transformers' image code, which imports PIL; the
    drafter needs none of it."""
    class _Any:
        def __init__(self, *a: Any, **k: Any) -> None: ...
        def __getattr__(self, n: str) -> Any: return _Any()
        def __call__(self, *a: Any, **k: Any) -> Any: return _Any()

    class _Meta(type):
        def __getattr__(cls, n: str) -> Any:
            if n.startswith("__"):
                raise AttributeError(n)
            return _Any()

    class _Mod(types.ModuleType):
        def __getattr__(self, n: str) -> Any:
            if n.startswith("__"):
                raise AttributeError(n)
            return _Meta(n, (), {})

    for name in ("PIL", "PIL.Image", "PIL.ImageOps"):
        if not isinstance(sys.modules.get(name), _Mod):
            sys.modules[name] = _Mod(name)
    sys.modules["PIL"].Image = sys.modules["PIL.Image"]  # type: ignore[attr-defined]


def mlx_vlm(target: Path, drafter: Path, ref: Path = REF) -> list[list[int]]:
    import mlx.core as mx

    from app.engine.models import load_model

    _stub_images()
    e3.import_mlx_vlm(ref)
    mod = importlib.import_module("mlx_vlm.speculative.drafters.gemma4_assistant")
    m = mod.Model(mod.ModelConfig.from_dict(json.loads((drafter / "config.json").read_text())))
    m.load_weights(list(m.sanitize(dict(mx.load(str(drafter / "model.safetensors")))).items()),
                   strict=True)
    t = load_model(target)
    m.bind(t.model)

    def greedy(x: Any) -> Any:
        return mx.argmax(x, axis=-1)

    state: dict[str, Any] = {}

    def draft(committed, hidden, props=None, accepted=0):
        rows = hidden.final_postnorm
        last = rows[-1:][None]
        valid = len(committed) - 1
        kv = {k: (v.keys, v.values) for k, v in hidden.shared_kv.items()}
        m.set_shared_kv(kv, valid, position=valid - 1, kv_valid_len=valid)
        tokens = m.draft_block(committed[-1], last, None, K + 1, greedy, greedy=True)
        state["last"] = tokens
        return [int(x) for x in tokens[0].tolist()]

    return _rounds(t.model, draft)
