"""DSpark drafters: recognised as their own kind, blocks equal to mlx-vlm's drafter on the
same weights (with and without the anchor's own proposal), greedy output identical to plain
decoding, sampled proposals carrying q over the target's vocabulary, and a drafter that does
not fit refused in one sentence."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from tests import builders_dspark as bs
from tests import dflash2_scenario as sc

GOLDEN = Path(__file__).parent / "golden" / "dspark_golden.npz"
VARIANTS = {"anchor": {}, "no-anchor": {"sample_from_anchor": False},
            "confidence6": {"confidence": True, "proposals": 6}}


@pytest.fixture(scope="module")
def root(tmp_path_factory) -> Path:
    return tmp_path_factory.mktemp("dspark")


@pytest.fixture(scope="module")
def pair(root) -> tuple[Path, Path]:
    return bs.make_pair(root)


def test_recognised_as_its_own_kind(pair):
    from app import kinds
    from app.checkpoints.inspect import KIND_DFLASH, inspect_checkpoint

    cfg = json.loads((pair[1] / "config.json").read_text())
    plugin = kinds.for_folder(cfg)
    assert plugin is not None and plugin.technical == "DSpark"
    assert inspect_checkpoint(pair[1]).kind == KIND_DFLASH  # a block drafter, not a chat model


@pytest.mark.parametrize("name", list(VARIANTS))
def test_blocks_equal_mlx_vlm_golden(root, name):
    target, drafter = bs.make_pair(root, **VARIANTS[name])
    assert sc.ours(target, drafter, engine="dspark") == np.load(GOLDEN)[name].tolist()


@pytest.mark.skipif(not (sc.REF / "mlx_vlm").is_dir(), reason="mlx-vlm 0.7.10 not unpacked")
def test_blocks_equal_mlx_vlm_live(root):
    target, drafter = bs.make_pair(root, seed=13)
    assert sc.ours(target, drafter, engine="dspark") == sc.mlx_vlm(target, drafter,
                                                                    family="dspark")


def _generate(s, kind, *, sampling=None, max_tokens=40):
    from app.engine.events import DoneEvent, GenerationRequest, SamplingParams

    req = GenerationRequest(prompt_tokens=sc.PROMPT, chat=False, draft_kind=kind,
                            draft_width=3, max_tokens=max_tokens, allow_fallback=False,
                            sampling=sampling or SamplingParams())
    done = list(s.generate(req))[-1]
    assert isinstance(done, DoneEvent) and done.finish_reason != "error", done.error
    return done


def test_greedy_identical_to_plain_and_sampling_exact(pair):
    from app import kinds
    from app.engine.events import SamplingParams
    from app.engine.session import Session

    s = Session()
    s.load_target(pair[0])
    s.load_draft(pair[1])
    name = s.draft_kind
    assert name is not None and kinds.get(name).technical == "DSpark"
    plain = _generate(s, kinds.OFF)
    spec = _generate(s, name)
    assert spec.token_ids == plain.token_ids
    assert spec.timings.fallback is None and spec.timings.draft_rounds > 0
    sampled = _generate(s, name, sampling=SamplingParams(temperature=0.7, seed=2),
                        max_tokens=16)
    assert sampled.timings.fallback is None and len(sampled.token_ids) == 16


def test_sampled_proposals_carry_q(pair):
    import mlx.core as mx

    from app.engine.drafters.dspark import DSparkDrafter, load
    from app.engine.events import SamplingParams
    from app.engine.models import load_model

    t = load_model(pair[0])
    d = DSparkDrafter(t, load(pair[1], t))
    prompt = list(sc.PROMPT)
    d.begin(prompt, SamplingParams(temperature=0.8, seed=1, shared_draws=False))
    ids = tuple(d.cfg.target_layer_ids)
    d.prefill(prompt, sc._hidden(t, sc.e3.rows_for(t.model, prompt, ids), ids))
    p = d.propose(prompt + [sc.BONUS], 4)
    assert p is not None and p.q is not None and p.q.shape == (4, t.vocab_size)
    q = np.array(p.q.astype(mx.float32))
    assert np.allclose(q.sum(-1), 1.0, atol=1e-4)
    assert all(q[i, int(x)] > 0 for i, x in enumerate(p.tokens.tolist()))


def test_a_drafter_for_another_layout_is_refused(root, pair):
    from app.checkpoints.pairing import check
    from app.engine.session import Session
    from app.errors import DraftPairError

    vocab = json.loads((pair[0] / "config.json").read_text())["vocab_size"]
    cfg = bs.config(vocab, bs.bd.mask_token(pair[0]), target_layer_ids=(1, 9))
    bad = bs.bd.make_dflash_folder(root / "bad-layers", cfg, weights=bs.weights(cfg))
    report = check(pair[0], bad)
    assert not report.works and "dflash.layers_mismatch" in {f.code for f in report.blockers}
    s = Session()
    s.load_target(pair[0])
    with pytest.raises(DraftPairError) as err:
        s.load_draft(bad)
    assert "DSpark" in str(err.value) and "\n" not in str(err.value)
