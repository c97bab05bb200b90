"""The MTP head's training data with replies to self-sampled requests: they are weighted in
an epoch as asked, and held-out agreement is reported per kind of request (real replies of a
tiny target, real states)."""

from __future__ import annotations

import json
import random
import shutil
from collections import Counter

import numpy as np
import pytest

from app.demo import self_requests as sr
from app.demo.mtp_data import batches
from app.demo.mtp_train import MTPTrainConfig, MTPTrainer
from tests.builders import make_teacher_replies


@pytest.fixture(scope="module")
def mixed_teacher(tmp_path_factory, tiny_models):
    """Generator prompts and self-sampled requests, both answered by the tiny target."""
    work = tmp_path_factory.mktemp("mixed-teacher")
    model, tok = make_teacher_replies(work, tiny_models.target, heldout=3, records=8,
                                      max_tokens=16)
    with open(work / sr.FILE, "w", encoding="utf-8") as fh:
        for i in range(50):
            fh.write(json.dumps({"n": i, "text": f"Request {i}: how do I fix a bike?"}) + "\n")
    sr.generate(model, tok, work, minutes=5, batch=4, max_tokens=16, max_requests=50,
                log=lambda m: None)
    return work, model, tok


def _cfg(**kw) -> MTPTrainConfig:
    return MTPTrainConfig(head_size=64, batch_tokens=256, warmup_steps=2, lr=3e-3,
                          eval_minutes=10, checkpoint_minutes=10, **kw)


@pytest.mark.parametrize("weight", [0.0, 1.0, 3.0])
def test_replies_to_sampled_requests_come_as_often_as_weighted(mixed_teacher, tmp_path, weight):
    work, model, tok = mixed_teacher
    tr = MTPTrainer(tmp_path, work, model, tok, lambda m: None, cfg=_cfg())
    tr.refresh_data()
    seen = Counter(e["key"] for b in batches(tr.train, random.Random(0), batch_tokens=256,
                                               chat_weight=weight) for e in b)
    chat = [e["key"] for e in tr.train if sr.is_self_key(e["key"])]
    other = [e["key"] for e in tr.train if not sr.is_self_key(e["key"])]
    assert len(chat) == 48 and len(other) == 8
    assert all(seen[k] == 1 for k in other)
    assert all(seen[k] == int(weight) for k in chat)


def test_a_fractional_weight_is_kept_on_average(mixed_teacher, tmp_path):
    work, model, tok = mixed_teacher
    tr = MTPTrainer(tmp_path, work, model, tok, lambda m: None, cfg=_cfg())
    tr.refresh_data()
    rng = random.Random(1)
    counts = [sum(sr.is_self_key(e["key"]) for b in batches(tr.train, rng, batch_tokens=256,
                                                             chat_weight=1.5) for e in b)
              for _ in range(20)]
    assert 1.3 * 48 < np.mean(counts) < 1.7 * 48


def test_held_out_agreement_is_reported_per_kind_and_scored_alike(mixed_teacher, tmp_path):
    work, model, tok = mixed_teacher
    tr = MTPTrainer(tmp_path, work, model, tok, lambda m: None, cfg=_cfg())
    tr.refresh_data()
    assert sum(sr.is_self_key(e["key"]) for e in tr.heldout) == 2  # requests 24 and 49
    tr.train_for(2.0)
    ev = tr.evaluate()
    gen, chat = ev["generator"], ev["chat"]
    assert gen["positions"] + chat["positions"] == ev["positions"]
    mixed = (gen["agreement"] * gen["positions"] + chat["agreement"] * chat["positions"])
    assert ev["agreement"] == pytest.approx(mixed / ev["positions"])
    assert tr.score(ev) == pytest.approx((gen["agreement"] + gen["both"]
                                          + chat["agreement"] + chat["both"]) / 2)
    # without replies to sampled requests the score is that of the one kind
    only = tmp_path / "only-generator"
    shutil.copytree(work, only, ignore=shutil.ignore_patterns("self-*", sr.FILE))
    (only / "heldout.jsonl").write_text("".join(
        line for line in (work / "heldout.jsonl").read_text().splitlines(keepends=True)
        if '"kind":"self"' not in line))
    plain = MTPTrainer(tmp_path / "p", only, model, tok, lambda m: None, cfg=_cfg())
    plain.refresh_data()
    ev2 = plain.evaluate()
    assert "chat" not in ev2 and plain.score(ev2) == pytest.approx(ev2["agreement"] + ev2["both"])


def test_the_model_card_tells_the_data_and_the_agreement_per_kind(mixed_teacher, tmp_path):
    from mlx.utils import tree_flatten

    from app.demo.mtp_export import _read_jsonl, model_card

    work, model, tok = mixed_teacher
    tr = MTPTrainer(tmp_path, work, model, tok, lambda m: None, cfg=_cfg(chat_weight=2.0))
    tr.refresh_data()
    tr.train_for(1.0)
    run = json.loads((tmp_path / "mtp" / "run.json").read_text())
    meta = json.loads((tmp_path / "mtp" / "best" / "meta.json").read_text())
    curve = _read_jsonl(tmp_path / "mtp" / "curve.jsonl")
    card = model_card(run, meta, curve, dict(tree_flatten(tr.module.parameters())), {}, 64)
    chat = meta["eval"]["chat"]["agreement"]
    assert f"sampled requests alone **{chat:.3f}**" in card
    assert "draftpair demo teacher-self" in card and "each seen 2 times per epoch" in card
    assert "--chat-weight 2" in card and "--init-from" not in card
    assert f"| {curve[-1]['agreement_chat']:.3f} |" in card  # the curve has the chat column
    kind = {"speedup_median": 1.1, "speedup_min": 0.9, "speedup_max": 1.3,
            "accept_len_mean": 0.4, "tokens_per_verify": 1.3, "identical": 2}
    run_eval = {"prompts": 2, "max_tokens": 32, "mtp": kind, "full-model": kind,
                "head_agreement": 0.3681, "head_positions": 2008}
    card = model_card(run, meta, curve, dict(tree_flatten(tr.module.parameters())),
                      {"engine_runs": {"chat": run_eval,
                                       "chat/drafters-alone": {**run_eval, "lookup_assist": False}}},
                      64)
    assert "agreement on these plain replies: 0.368 (2,008 positions)" in card
    # both runs, each with the command that reproduces it
    assert card.count("--prompt-set chat`") == 1
    assert card.count("--prompt-set chat --no-lookup-assist`") == 1


def test_no_training_positions_is_said_plainly(mixed_teacher, tmp_path):
    from app.errors import DraftPairError

    work, model, tok = mixed_teacher
    only_chat = tmp_path / "teacher"
    shutil.copytree(work, only_chat, ignore=shutil.ignore_patterns("gen-*"))
    tr = MTPTrainer(tmp_path / "run", only_chat, model, tok, lambda m: None,
                    cfg=_cfg(chat_weight=0.0))
    tr.refresh_data()
    with pytest.raises(DraftPairError, match="--chat-weight 0"):
        tr.train_for(5.0)


def test_a_changed_held_out_set_scores_the_best_checkpoint_again(mixed_teacher, tmp_path):
    work, model, tok = mixed_teacher
    teacher_dir = tmp_path / "teacher"
    shutil.copytree(work, teacher_dir)
    logs: list[str] = []
    tr = MTPTrainer(tmp_path / "run", teacher_dir, model, tok, logs.append, cfg=_cfg())
    tr.refresh_data()
    tr.train_for(1.0)
    old = tr.best_score
    # one more held-out reply, one the target would not give (random tokens), so the same
    # head scores lower on the new set
    rec = json.loads(next(iter((teacher_dir / "shards").glob("self-*"))).read_text()
                     .splitlines()[0])
    rec["index"] = sr.INDEX_BASE + 99
    rng = random.Random(3)
    rec["reply_ids"] = [rng.randrange(3, 300) for _ in range(40)]
    with open(teacher_dir / "heldout.jsonl", "a", encoding="utf-8") as fh:
        fh.write(json.dumps(rec) + "\n")
    tr.refresh_data()
    assert any("held-out set changed" in m for m in logs)
    from app.demo.mtp_train import init_demo_module

    best = init_demo_module(model)
    best.load_weights(str(tmp_path / "run" / "mtp" / "best" / "weights.safetensors"))
    assert tr.best_score == pytest.approx(tr.score(tr.evaluate(best)))
    assert tr.best_score < old
