"""Training an MTP head on a target's own states (the demo pipeline, on a tiny target and
teacher replies it generated itself): held-out loss falls, a run resumes where it stopped,
a new run can start from a head folder, and the chained proposal trains too."""

from __future__ import annotations

import json

import mlx.core as mx
import numpy as np
import pytest
from mlx.utils import tree_flatten

from app.demo.mtp_train import MTPTrainConfig, MTPTrainer
from tests.builders import make_teacher_replies


@pytest.fixture(scope="module")
def tiny_teacher(tmp_path_factory, tiny_models):
    work = tmp_path_factory.mktemp("mtp-teacher")
    model, tok = make_teacher_replies(work, tiny_models.target, heldout=3, records=12,
                                      max_tokens=24)
    return work, model, tok


def _cfg(**kw) -> MTPTrainConfig:
    return MTPTrainConfig(head_size=64, batch_tokens=256, warmup_steps=2, lr=3e-3,
                          eval_minutes=10, checkpoint_minutes=10, **kw)


def _weights(tr: MTPTrainer) -> dict[str, np.ndarray]:
    return {k: np.array(v) for k, v in tree_flatten(tr.module.parameters())}


@pytest.mark.parametrize("chain", [0.0, 0.5])
def test_training_lowers_the_held_out_loss_and_resumes(tiny_teacher, tmp_path, chain):
    work, model, tok = tiny_teacher
    tr = MTPTrainer(tmp_path, work, model, tok, lambda m: None, cfg=_cfg(chain_weight=chain))
    tr.refresh_data()
    assert tr.train and tr.heldout
    before = tr.evaluate()
    assert 0.0 <= before["chained"] <= 1.0
    tr.train_for(4.0)
    after = tr.evaluate()
    assert tr.step > 3
    assert after["loss"] < before["loss"] - 0.1

    again = MTPTrainer(tmp_path, work, model, tok, lambda m: None)
    assert again.cfg.chain_weight == chain and again.step == tr.step
    mine, theirs = _weights(tr), _weights(again)
    assert all(np.array_equal(mine[k], theirs[k]) for k in mine)


def test_a_new_run_starts_from_a_head_folder(tiny_teacher, tmp_path):
    work, model, tok = tiny_teacher
    first = MTPTrainer(tmp_path / "a", work, model, tok, lambda m: None, cfg=_cfg())
    first.refresh_data()
    first.train_for(2.0)
    head = tmp_path / "head"
    head.mkdir()
    mx.save_safetensors(str(head / "model.safetensors"),
                        {k: v.astype(mx.float16) for k, v in
                         tree_flatten(first.module.parameters())})
    (head / "draft_head.json").write_text(json.dumps({"token_ids": first.head_ids[::-1]}))

    warm = MTPTrainer(tmp_path / "b", work, model, tok, lambda m: None, cfg=_cfg(),
                      init_from=head)
    assert warm.head_ids == first.head_ids[::-1]  # the head's own output tokens
    mine, theirs = _weights(first), _weights(warm)
    assert all(np.allclose(mine[k], theirs[k], atol=2e-3) for k in mine)
    fresh = _weights(MTPTrainer(tmp_path / "c", work, model, tok, lambda m: None, cfg=_cfg()))
    assert not all(np.allclose(mine[k], fresh[k], atol=2e-3) for k in mine)
    run = json.loads((tmp_path / "b" / "mtp" / "run.json").read_text())
    assert run["init_from"]["path"] == str(head)
    # the output rows chosen from this run's data instead; the weights still the head's
    rows = MTPTrainer(tmp_path / "d", work, model, tok, lambda m: None, cfg=_cfg(),
                      init_from=head, new_head_ids=True)
    assert rows.head_ids == first.head_ids != warm.head_ids
    assert all(np.allclose(mine[k], v, atol=2e-3) for k, v in _weights(rows).items())


def test_a_warm_start_from_a_folder_that_is_no_head_is_refused_plainly(tiny_teacher, tmp_path):
    from app.errors import DraftPairError

    work, model, tok = tiny_teacher
    empty = tmp_path / "not-a-head"
    empty.mkdir()
    (empty / "draft_head.json").write_text(json.dumps({"token_ids": [1, 2, 3]}))
    with pytest.raises(DraftPairError, match="no model.safetensors"):
        MTPTrainer(tmp_path / "run", work, model, tok, lambda m: None, cfg=_cfg(),
                   init_from=empty)
    mx.save_safetensors(str(empty / "model.safetensors"), {"fc.weight": mx.zeros((3, 3))})
    with pytest.raises(DraftPairError, match="does not fit"):
        MTPTrainer(tmp_path / "run", work, model, tok, lambda m: None, cfg=_cfg(),
                   init_from=empty)
    assert not (tmp_path / "run" / "mtp" / "run.json").exists()
    assert not (tmp_path / "run" / "mtp" / "draft_head.json").exists()


def test_an_existing_run_resumes_and_ignores_a_warm_start(tiny_teacher, tmp_path):
    work, model, tok = tiny_teacher
    first = MTPTrainer(tmp_path, work, model, tok, lambda m: None, cfg=_cfg())
    first.save_checkpoint()
    logs: list[str] = []
    again = MTPTrainer(tmp_path, work, model, tok, logs.append, init_from=tmp_path / "nowhere")
    assert any("--init-from is for new runs" in m for m in logs)
    mine, theirs = _weights(first), _weights(again)
    assert all(np.array_equal(mine[k], theirs[k]) for k in mine)
