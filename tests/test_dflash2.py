"""DFlash 2 drafters: recognised as their own kind, blocks equal to mlx-vlm's drafter on the
same weights, greedy output identical to plain decoding, deterministic proposals verified
exactly when sampling, and a drafter that does not fit refused in one sentence."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from tests import builders_dflash2 as b2
from tests import dflash2_scenario as sc

GOLDEN = Path(__file__).parent / "golden" / "dflash2_golden.npz"
VARIANTS = {"block4": {}, "block6": {"block_size": 6}, "layers25": {"target_layer_ids": (2, 5)}}


@pytest.fixture(scope="module")
def root(tmp_path_factory) -> Path:
    return tmp_path_factory.mktemp("dflash2")


@pytest.fixture(scope="module")
def pair(root) -> tuple[Path, Path]:
    return b2.make_pair(root)


def test_recognised_as_its_own_kind(pair):
    from app import kinds

    cfg = json.loads((pair[1] / "config.json").read_text())
    plugin = kinds.for_folder(cfg)
    assert plugin is not None and plugin.technical == "DFlash 2"
    bd_cfg = dict(cfg, model_type="qwen3", architectures=["DFlashDraftModel"])
    del bd_cfg["dflash_config"]["selector_top_k"]
    other = kinds.for_folder(bd_cfg)
    assert other is not None and other.technical == "DFlash"


@pytest.mark.parametrize("name", list(VARIANTS))
def test_blocks_equal_mlx_vlm_golden(root, name):
    target, drafter = b2.make_pair(root, **VARIANTS[name])
    got = sc.ours(target, drafter)
    assert got == np.load(GOLDEN)[name].tolist()


@pytest.mark.skipif(not (sc.REF / "mlx_vlm").is_dir(), reason="mlx-vlm 0.7.10 not unpacked")
def test_blocks_equal_mlx_vlm_live(root):
    target, drafter = b2.make_pair(root, seed=12)
    assert sc.ours(target, drafter) == sc.mlx_vlm(target, drafter)


def test_the_selector_is_not_the_plain_argmax(pair):
    """The pair scores change picks on these weights (so the cross-check tests the selector)."""
    import mlx.core as mx

    from app.engine.drafters.dflash2 import DFlash2Drafter, load
    from app.engine.models import load_model

    t = load_model(pair[0])
    assets = load(pair[1], t)
    d = DFlash2Drafter(t, assets)
    sel = d.net2.candidate_selector
    rng = np.random.default_rng(0)
    states = mx.array(rng.standard_normal((3, b2.bd.HIDDEN)).astype(np.float32))
    logits = d.logits(states)
    picks = [int(x) for x in sel.select(states, logits, 40).tolist()]
    plain = [int(x) for x in mx.argmax(logits, axis=-1).tolist()]
    assert picks != plain


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
    assert name is not None and kinds.get(name).technical == "DFlash 2"
    plain = _generate(s, kinds.OFF)
    spec = _generate(s, name)
    assert spec.token_ids == plain.token_ids
    assert spec.timings.fallback is None and spec.timings.draft_rounds > 0
    sampled = _generate(s, name, sampling=SamplingParams(temperature=0.7, seed=2),
                        max_tokens=16)
    assert sampled.timings.fallback is None and len(sampled.token_ids) == 16


def test_a_drafter_for_another_layout_is_refused(root, pair):
    from app.checkpoints.pairing import check
    from app.engine.session import Session
    from app.errors import DraftPairError

    vocab = json.loads((pair[0] / "config.json").read_text())["vocab_size"]
    cfg = b2.config(vocab, b2.bd.mask_token(pair[0]), target_layer_ids=(1, 9))
    bad = b2.bd.make_dflash_folder(root / "bad-layers", cfg, weights=b2.weights(cfg))
    report = check(pair[0], bad)
    assert not report.works and "dflash.layers_mismatch" in {f.code for f in report.blockers}
    s = Session()
    s.load_target(pair[0])
    with pytest.raises(DraftPairError) as err:
        s.load_draft(bad)
    assert "DFlash 2" in str(err.value) and "\n" not in str(err.value)
