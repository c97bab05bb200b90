"""Teacher replies kept with the project: real generation on a tiny target, packed to ids
only, restored into an empty work folder with soft labels recomputed by a teacher-forced pass
that agrees with the ones recorded while generating."""

from __future__ import annotations

import numpy as np
import pytest

from app.demo import teacher
from app.demo.teacher_archive import pack, read_archive, restore
from tests.builders import make_teacher_replies


@pytest.fixture(scope="module")
def generated(tmp_path_factory, tiny_models):
    work = tmp_path_factory.mktemp("teacher")
    model, _ = make_teacher_replies(work, tiny_models.target, heldout=2, records=5,
                                    max_tokens=10)
    return work, model


def test_pack_then_restore_gives_the_same_replies_and_soft_labels(generated, tmp_path):
    work, model = generated
    original = {("train", r["index"]): r for r in teacher.load_records(work)}
    original |= {("heldout", r["index"]): r for r in teacher.load_heldout(work)}
    assert len(original) == 7 and all("topk_ids" in r for r in original.values())

    archive = tmp_path / "teacher.jsonl.xz"
    n, tokens = pack(work, archive)
    assert n == 7 and tokens == sum(len(r["reply_ids"]) for r in original.values())
    assert all("topk_ids" not in r for r in read_archive(archive))

    fresh = tmp_path / "fresh"
    logs: list[str] = []
    assert restore(archive, fresh, model, log=logs.append) == (7, tokens)
    back = {("train", r["index"]): r for r in teacher.load_records(fresh)}
    back |= {("heldout", r["index"]): r for r in teacher.load_heldout(fresh)}
    assert back.keys() == original.keys()
    for key, rec in original.items():
        got = back[key]
        assert got["prompt_ids"] == rec["prompt_ids"] and got["reply_ids"] == rec["reply_ids"]
        assert len(got["topk_lp"]) == len(rec["topk_lp"]) == len(rec["reply_ids"])
        want_lp = np.sort(np.array(rec["topk_lp"]), axis=-1)
        got_lp = np.sort(np.array(got["topk_lp"]), axis=-1)
        assert np.allclose(want_lp, got_lp, atol=0.02), key
        for w_ids, w_lp, g_ids, g_lp in zip(rec["topk_ids"], rec["topk_lp"],
                                            got["topk_ids"], got["topk_lp"], strict=True):
            ranked = sorted(w_lp)
            if ranked[-1] - ranked[-2] > 0.05:  # a clear winner is found again
                assert w_ids[int(np.argmax(w_lp))] == g_ids[int(np.argmax(g_lp))]

    assert restore(archive, fresh, model, log=logs.append) == (0, 0)  # resumable: nothing twice
    assert "nothing to do" in logs[-1]


def test_restore_without_soft_labels_then_states_pass_computes_them(generated, tmp_path):
    """Replies restored without soft labels get them from the pass that reads the target's
    states: the same top-k as recorded while generating, renormalised over those k."""
    from app.demo.features import FeatureStore, teacher_items

    work, model = generated
    archive = tmp_path / "teacher.jsonl.xz"
    pack(work, archive)
    fresh = tmp_path / "fresh"
    n, _ = restore(archive, fresh, None, log=lambda m: None)
    assert n == 7
    assert all("topk_ids" not in r for r in teacher.load_records(fresh))

    held, train = teacher_items(fresh)
    store = FeatureStore(tmp_path / "mtp")
    assert store.extract(model, held + train, log=lambda m: None) == 7
    original = {f"train:{r['index']}": r for r in teacher.load_records(work)}
    original |= {f"heldout:{r['index']}": r for r in teacher.load_heldout(work)}
    feats = store.load()
    assert {f["key"] for f in feats} == original.keys()
    for f in feats:
        rec = original[f["key"]]
        ids, lp = np.array(f["topk_ids"]), np.array(f["topk_lp"]).astype(np.float32)
        assert ids.shape == (len(rec["reply_ids"]), 8)
        assert np.allclose(np.exp(lp).sum(-1), 1.0, atol=0.01)  # renormalised over the k
        want = np.array(rec["topk_lp"])
        want_p = np.sort(np.exp(want) / np.exp(want).sum(-1, keepdims=True), axis=-1)
        assert np.allclose(np.sort(np.exp(lp), axis=-1), want_p, atol=0.02), f["key"]
        for w_ids, w_lp, g_ids, g_lp in zip(rec["topk_ids"], rec["topk_lp"], ids, lp,
                                            strict=True):
            ranked = sorted(w_lp)
            if ranked[-1] - ranked[-2] > 0.05:
                assert w_ids[int(np.argmax(w_lp))] == g_ids[int(np.argmax(g_lp))]


@pytest.mark.parametrize("vocab", [49152, 49000, 3000])
def test_top_ids_by_blocks_equals_a_full_partition(vocab):
    import mlx.core as mx

    from app.demo.features import top_ids

    logits = mx.random.normal((40, vocab), key=mx.random.key(vocab)) * 3
    want = np.sort(np.array(mx.argpartition(-logits, kth=7, axis=-1)[:, :8]), axis=-1)
    assert (np.sort(np.array(top_ids(logits, 8)), axis=-1) == want).all()
