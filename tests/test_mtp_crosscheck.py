"""DraftPair's MTP drafter against mlx-vlm's ``qwen3_5_mtp`` on the same random weights.

The golden file ``tests/golden/mtp_qwen3_5.json`` holds mlx-vlm's proposals for scripted
rounds on the checkpoint of ``tests/builders_mtp.py``; ``tests/golden/make_mtp_golden.py``
regenerates it from an mlx-vlm source tree. Here the same rounds are replayed with
DraftPair's drafter (``reuse_draft_kv=True``, mlx-vlm's cache policy) and every proposal must
be identical. A second test checks the default policy (chained entries dropped, every kept
entry reads the target's state) against a drafter rebuilt from scratch at every round.
"""

from __future__ import annotations

import json
from pathlib import Path
from types import SimpleNamespace

import pytest

GOLDEN = Path(__file__).parent / "golden" / "mtp_qwen3_5.json"


@pytest.fixture(scope="module")
def qwen_mtp(tmp_path_factory):
    from app.engine.drafters.mtp import load
    from app.engine.models import load_model
    from tests.builders_mtp import make_qwen3_5_checkpoint

    folder = make_qwen3_5_checkpoint(tmp_path_factory.mktemp("q35") / "q35")
    target = load_model(folder, precision="float32")
    return SimpleNamespace(folder=folder, target=target, head=load(folder, target))


def _states(target, tokens):
    import mlx.core as mx

    return target.model.language_model.model(mx.array(tokens, dtype=mx.uint32)[None])[0]


def _rows(rows):
    return SimpleNamespace(final_postnorm=rows, final_prenorm=None)


def _drafter(env, **kw):
    from app.engine.drafters.mtp import MTPDrafter
    from app.engine.events import SamplingParams

    d = MTPDrafter(env.head, env.target.model, target_vocab=env.target.vocab_size, **kw)
    return d, SamplingParams()


def test_weights_match_the_golden_checkpoint(qwen_mtp):
    import mlx.core as mx

    golden = json.loads(GOLDEN.read_text())
    raw = mx.load(str(qwen_mtp.folder / "model.safetensors"))
    checksum = sum(mx.sum(v * v).item() for k, v in raw.items() if k.startswith("mtp."))
    assert checksum == pytest.approx(golden["mtp_checksum"], rel=1e-6), (
        "tests/builders_mtp.py changed: regenerate tests/golden/mtp_qwen3_5.json")


def test_proposals_equal_mlx_vlm_qwen3_5_mtp(qwen_mtp):
    golden = json.loads(GOLDEN.read_text())
    d, sp = _drafter(qwen_mtp, reuse_draft_kv=True)
    prompt, width = golden["prompt"], golden["width"]
    d.begin(prompt, sp)
    d.prefill(prompt, _rows(_states(qwen_mtp.target, prompt)))
    committed = prompt + [golden["first_bonus"]]  # the target's token, not fed yet
    for i, r in enumerate(golden["rounds"]):
        prop = d.propose(committed, width)
        assert prop is not None
        assert prop.tokens.tolist() == r["proposals"], f"round {i}"
        a = r["accepted"]
        full = _states(qwen_mtp.target, committed + r["proposals"])
        rows = full[len(committed) - 1 : len(committed) + a]  # pending + accepted
        new = r["proposals"][:a] + [r["token"]]
        committed = committed + new
        d.observe(committed, prop, a, new, _rows(rows))
    assert committed == golden["sequence"]


def test_incremental_state_equals_a_fresh_drafter(qwen_mtp):
    """Default policy: after any history of rounds the proposals are those of a drafter that
    is given the whole committed sequence at once."""
    golden = json.loads(GOLDEN.read_text())
    d, sp = _drafter(qwen_mtp)
    prompt, width = golden["prompt"], golden["width"]
    d.begin(prompt, sp)
    d.prefill(prompt, _rows(_states(qwen_mtp.target, prompt)))
    committed = prompt + [golden["first_bonus"]]
    for i, r in enumerate(golden["rounds"]):
        prop = d.propose(committed, width)
        fresh, _ = _drafter(qwen_mtp)
        fresh.begin(committed, sp)
        fresh.prefill(committed[:-1], _rows(_states(qwen_mtp.target, committed[:-1])))
        ref = fresh.propose(committed, width)
        assert prop.tokens.tolist() == ref.tokens.tolist(), f"round {i}"
        a = r["accepted"]
        proposals = prop.tokens.tolist()
        full = _states(qwen_mtp.target, committed + proposals)
        rows = full[len(committed) - 1 : len(committed) + a]
        new = proposals[:a] + [r["token"]]
        committed = committed + new
        d.observe(committed, prop, a, new, _rows(rows))


def test_plain_steps_keep_the_rows_in_step(qwen_mtp):
    """After plain steps (token fed at once, its row arrives before the next token is known)
    the head still proposes from the state of the newest known token."""
    d, sp = _drafter(qwen_mtp)
    prompt = [5, 17, 42, 99, 7, 150]
    d.begin(prompt, sp)
    d.prefill(prompt, _rows(_states(qwen_mtp.target, prompt)))
    committed = list(prompt)
    for tok in (31, 8, 77):  # three plain steps
        committed.append(tok)
        full = _states(qwen_mtp.target, committed)
        d.observe(committed, None, 0, [tok], _rows(full[-1:]))
    prop = d.propose(committed, 2)
    fresh, _ = _drafter(qwen_mtp)
    fresh.begin(committed, sp)
    fresh.prefill(committed, _rows(_states(qwen_mtp.target, committed)))
    assert prop.tokens.tolist() == fresh.propose(committed, 2).tokens.tolist()
