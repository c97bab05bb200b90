"""Pairing knows DFlash drafters: what fits their target, what does not, in plain sentences."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests import builders_dflash as bd
from tests.builders import make_checkpoint


@pytest.fixture(scope="module")
def folders(tmp_path_factory) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("dflash_pairing")
    target, orig = bd.make_pair(root, "original")
    _, new = bd.make_pair(root, "2026", sliding_window=6)
    vocab = json.loads((target / "config.json").read_text())["vocab_size"]
    mask = bd.mask_token(target)

    def variant(name: str, **kw) -> Path:
        cfg = bd.dflash_config("original", vocab=kw.pop("vocab", vocab),
                               mask_token_id=kw.pop("mask", mask), **kw)
        return bd.make_dflash_folder(root / name, cfg)

    return {
        "target": target, "original": orig, "2026": new,
        # another family / size: a llama target of another width and depth
        "other_target": make_checkpoint(root / "llama", hidden_size=32, num_layers=2),
        "bad_layers": variant("bad-layers", target_layer_ids=(1, 9)),
        "bad_mask": variant("bad-mask", mask=vocab + 5),
        "bad_vocab": variant("bad-vocab", vocab=vocab + 64),
        "other_depth": variant("other-depth", num_target_layers=bd.TARGET_LAYERS + 2),
    }


def _check(target, draft, kind="dflash"):
    from app.checkpoints.pairing import check

    return check(target, draft, kind=kind)


@pytest.mark.parametrize("key", ["original", "2026"])
def test_a_drafter_made_for_the_target_pairs(folders, key):
    report = _check(folders["target"], folders[key])
    assert report.works, [f.message for f in report.blockers]
    assert "dflash.detected" in report.codes()


def test_the_kind_is_inferred_from_the_folder(folders):
    from app.checkpoints.pairing import check

    report = check(folders["target"], folders["original"])
    assert report.kind == "dflash" and report.works


@pytest.mark.parametrize("key,code", [
    ("bad_layers", "dflash.layers_mismatch"),
    ("bad_mask", "dflash.mask_out_of_range"),
    ("bad_vocab", "dflash.vocab_mismatch"),
    ("other_depth", "dflash.layers_mismatch"),
])
def test_what_does_not_fit_is_one_plain_sentence(folders, key, code):
    report = _check(folders["target"], folders[key])
    assert not report.works
    found = [f for f in report.blockers if f.code == code]
    assert found, report.codes()
    msg = found[0].message
    assert msg.endswith(".") and "\n" not in msg and "Traceback" not in msg


def test_another_family_or_size_is_refused(folders):
    report = _check(folders["other_target"], folders["original"])
    assert not report.works
    assert any("made for a different target" in f.message for f in report.blockers)


def test_a_drafter_is_neither_a_full_model_draft_nor_a_chat_model(folders):
    from app.checkpoints.pairing import check

    as_draft = _check(folders["target"], folders["original"], kind="full-model")
    assert "draft.is_dflash" in {f.code for f in as_draft.blockers}
    as_target = check(folders["original"])
    assert "target.is_dflash" in {f.code for f in as_target.blockers}


def test_loading_a_drafter_as_the_chat_model_is_refused(folders):
    from app.engine.session import Session
    from app.errors import DraftPairError

    with pytest.raises(DraftPairError, match="DFlash drafter"):
        Session().load_target(folders["original"])


def test_loading_a_drafter_for_another_target_is_refused(folders):
    from app.engine.session import Session
    from app.errors import DraftPairError

    s = Session()
    s.load_target(folders["other_target"])
    with pytest.raises(DraftPairError, match="made for a target"):
        s.load_draft(folders["original"])
