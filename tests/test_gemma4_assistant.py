"""Gemma 4 MTP assistants: recognised as their own kind, proposals equal to mlx-vlm's
drafter on the same weights and the same target state (the target's shared K/V read through
the taps, its sliding window shorter than the conversation), greedy output identical to
plain decoding, sampling exact, and a drafter for another target refused in one sentence."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from tests import builders_gemma4 as bg
from tests import gemma4_scenario as sc

GOLDEN = Path(__file__).parent / "golden" / "gemma4_assistant_golden.npz"
VARIANTS = {"window8": {}, "window32": {"window": 32}, "seed3": {"seed": 3}}


@pytest.fixture(scope="module")
def root(tmp_path_factory) -> Path:
    return tmp_path_factory.mktemp("gemma4")


@pytest.fixture(scope="module")
def pair(root) -> tuple[Path, Path]:
    return bg.make_pair(root)


def test_recognised_as_its_own_kind(pair):
    from app import kinds
    from app.checkpoints.inspect import KIND_GEMMA4_ASSISTANT, inspect_checkpoint

    plugin = kinds.for_folder(json.loads((pair[1] / "config.json").read_text()))
    assert plugin is not None and plugin.technical == "Gemma 4 MTP assistant"
    assert inspect_checkpoint(pair[1]).kind == KIND_GEMMA4_ASSISTANT


@pytest.mark.parametrize("name", list(VARIANTS))
def test_proposals_equal_mlx_vlm_golden(root, name):
    target, drafter = bg.make_pair(root, **VARIANTS[name])
    assert sc.ours(target, drafter) == np.load(GOLDEN)[name].tolist()


@pytest.mark.skipif(not (sc.REF / "mlx_vlm").is_dir(), reason="mlx-vlm 0.7.10 not unpacked")
def test_proposals_equal_mlx_vlm_live(root):
    """In a fresh process: mlx-vlm's Gemma 4 package must be imported before transformers."""
    target, drafter = bg.make_pair(root, seed=14)
    code = ("import json, importlib, sys; from pathlib import Path; "
            "from tests import gemma4_scenario as sc; sc._stub_images(); "
            "sc.e3.import_mlx_vlm(); "
            "importlib.import_module('mlx_vlm.speculative.drafters.gemma4_assistant'); "
            f"print(json.dumps(sc.mlx_vlm(Path({str(target)!r}), Path({str(drafter)!r}))))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         cwd=Path(__file__).resolve().parents[1], timeout=600, check=True)
    ref = json.loads(out.stdout.strip().splitlines()[-1])
    assert sc.ours(target, drafter) == ref


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
    assert name is not None and kinds.get(name).technical == "Gemma 4 MTP assistant"
    plain = _generate(s, kinds.OFF)
    spec = _generate(s, name)
    assert spec.token_ids == plain.token_ids
    assert spec.timings.fallback is None and spec.timings.draft_rounds > 0
    sampled = _generate(s, name, sampling=SamplingParams(temperature=0.7, seed=2),
                        max_tokens=16)
    assert sampled.timings.fallback is None and len(sampled.token_ids) == 16


def test_another_target_is_refused_in_one_sentence(root, pair):
    from app.checkpoints.pairing import check
    from app.engine.session import Session
    from app.errors import DraftPairError
    from tests import builders_dflash as bd

    qwen = bd.make_qwen3_target(root / "qwen3")
    report = check(qwen, pair[1])
    assert not report.works
    assert "gemma4_assistant.other_family" in {f.code for f in report.blockers}
    wide = bg.make_assistant(root / "wide", bg.assistant_config(
        json.loads((pair[0] / "config.json").read_text())["vocab_size"], backbone=128))
    report = check(pair[0], wide)
    assert [f.code for f in report.blockers] == ["gemma4_assistant.hidden_mismatch"]
    s = Session()
    s.load_target(pair[0])
    with pytest.raises(DraftPairError) as err:
        s.load_draft(wide)
    assert "Gemma 4 assistant" in str(err.value) and "\n" not in str(err.value)
    with pytest.raises(DraftPairError, match="Gemma 4 assistant"):
        Session().load_target(pair[1])
    assert "target.is_gemma4_assistant" in {f.code for f in check(pair[1]).blockers}
