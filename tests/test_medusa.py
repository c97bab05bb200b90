"""Medusa heads: the same logits as the reference math on shared random weights (golden
arrays from tests/golden/make_medusa_golden.py), and greedy decoding with their trees is
identical to plain decoding."""

from __future__ import annotations

import json
from pathlib import Path
from types import SimpleNamespace

import mlx.core as mx
import numpy as np
import pytest

from app.engine.drafters import medusa
from app.engine.events import DoneEvent, GenerationRequest
from app.engine.session import Session
from tests.builders_hybrid import make_family_checkpoint

GOLDEN = Path(__file__).parent / "golden" / "medusa_golden.npz"


def write_heads(folder: Path, weights: dict[str, np.ndarray], heads: int, layers: int) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "config.json").write_text(json.dumps(
        {"medusa_num_heads": heads, "medusa_num_layers": layers}))
    mx.save_safetensors(str(folder / "model.safetensors"),
                        {k: mx.array(v) for k, v in weights.items()})
    return folder


def test_heads_match_the_reference_math(tmp_path):
    g = dict(np.load(GOLDEN))
    heads, vocab = g["logits"].shape[1:]
    layers = sum(1 for k in g if k.startswith("medusa_head.0.") and k.endswith("linear.weight"))
    folder = write_heads(tmp_path / "medusa",
                         {k: v for k, v in g.items() if k.startswith("medusa_head.")},
                         heads, layers)
    assets = medusa.load(folder, SimpleNamespace(vocab_size=vocab))
    assert (assets.num_heads, assets.num_layers) == (heads, layers)
    for r, h in enumerate(g["input"]):
        got = assets.heads(mx.array(h))
        assert np.allclose(np.array(got), g["logits"][r], atol=1e-4), r


@pytest.fixture(scope="module")
def target_and_heads(tmp_path_factory):
    root = tmp_path_factory.mktemp("medusa")
    target = make_family_checkpoint(root / "llama", "llama", seed=0)
    from app.engine.models import load_model

    t = load_model(target)
    embed = np.array(t.model.model.embed_tokens.weight)  # (V, H), tied
    v, h = embed.shape
    rng = np.random.default_rng(0)
    weights = {}
    for i in range(3):
        weights[f"medusa_head.{i}.0.linear.weight"] = (0.05 * rng.normal(size=(h, h))).astype(
            np.float32)
        weights[f"medusa_head.{i}.0.linear.bias"] = np.zeros(h, np.float32)
        # the target's own head, a little disturbed: guesses that agree now and then
        weights[f"medusa_head.{i}.1.weight"] = (embed + 0.02 * rng.normal(size=embed.shape)
                                               ).astype(np.float32)
    return target, write_heads(root / "heads", weights, 3, 1)


PROMPT = "The cat sat on the mat. The dog sat on the log. The cat sat on the"


def _gen(s: Session, **kw) -> DoneEvent:
    done = list(s.generate(GenerationRequest(prompt=PROMPT, chat=False, max_tokens=40,
                                             allow_fallback=False, memory_interval_s=1e9,
                                             **kw)))[-1]
    assert isinstance(done, DoneEvent)
    assert done.finish_reason != "error", done.error
    return done


def test_medusa_trees_greedy_identical_to_plain(target_and_heads):
    target, heads = target_and_heads
    s = Session()
    s.load_target(target)
    plain = _gen(s)
    s.load_draft(heads)
    spec = _gen(s, draft_kind="medusa", lookup_assist=False)  # sized by this CPU's costs
    assert spec.token_ids == plain.token_ids
    assert spec.timings.fallback is None and spec.timings.draft_rounds > 0
    # priced as on flat hardware, every candidate pays: whole trees every round
    flat = _gen(s, draft_kind="medusa", lookup_assist=False, trees="flat")
    assert flat.token_ids == plain.token_ids
    trees = [r for r in flat.rounds if r.tree_nodes]
    assert len(trees) >= len(flat.rounds) // 2 and max(r.tree_nodes for r in trees) > 8
    assert sum(r.accepted for r in flat.rounds) > 0
