"""The demo EAGLE-3 drafter: its trainer learns (training-time test over the target's low /
middle / high layers), what it writes is a speculators-layout folder DraftPair loads and
drafts with exactly, and the shipped one is the demo target's EAGLE-3 drafter with no flag."""

from __future__ import annotations

import json
import random
from pathlib import Path

import numpy as np
import pytest

from tests.builders_dflash import make_qwen3_target
from tests.demo_gate import needs_demo

LAYERS = 8


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    """A tiny target, its greedy replies to a few prompts as teacher sequences, with the
    layer features the trainer reads."""
    import mlx.core as mx
    from mlx_lm.generate import generate_step

    from app.demo.dflash_features import Sequence, layer_features
    from app.demo.eagle3_train import capture_layers
    from app.engine.mlx_types import load_lm

    root = tmp_path_factory.mktemp("demo-eagle3")
    path = make_qwen3_target(root / "target", num_layers=LAYERS)
    target, _ = load_lm(str(path))
    cfg = json.loads((path / "config.json").read_text())
    rng = random.Random(0)
    seqs = []
    replies: set[int] = set()
    for i in range(6):
        prompt = [rng.randrange(20, cfg["vocab_size"] - 20) for _ in range(8)]
        reply = [int(t) for t, _ in generate_step(mx.array(prompt), target, max_tokens=48,
                                                  sampler=lambda x: mx.argmax(x, axis=-1))]
        replies.update(reply)
        tokens = prompt + reply
        feats = np.array(layer_features(target, tokens, capture_layers(LAYERS))
                         .astype(mx.float16))
        seqs.append(Sequence(str(i), np.asarray(tokens, dtype=np.int32), len(prompt), feats))
    # the reduced vocabulary: every reply token and some others, as the demo's frequent list
    head = sorted(replies | set(rng.sample(range(cfg["vocab_size"]), 16)))
    return {"root": root, "path": path, "target": target, "cfg": cfg, "seqs": seqs,
            "head": head}


@pytest.fixture(scope="module")
def trained(tiny):
    """A few hundred steps on six replies, with the held-out figures before and after."""
    from app.demo.eagle3_train import Recipe, Trainer

    recipe = Recipe(depth=4, lr=3e-3, warmup=5, minutes=1.0, seqs=2, max_len=64, mlp_from=3)
    tr = Trainer(tiny["root"] / "run", tiny["target"], tiny["cfg"], tiny["head"], recipe,
                 log=lambda m: None)
    before = tr.evaluate(tiny["seqs"])
    tr.train(tiny["seqs"], seconds=600, max_steps=150)
    after = tr.evaluate(tiny["seqs"])
    tr.save(after)
    return {"recipe": recipe, "before": before, "after": after,
            "weights": tiny["root"] / "run" / "latest.safetensors"}


def test_trainer_learns_replies_with_training_time_test(tiny, trained):
    """Every step of the chain gets better, and a chain of four keeps far more proposals
    than the untrained drafter's (which starts from the target's own head rows); a restart
    resumes from the checkpoint."""
    from app.demo.eagle3_train import Trainer

    before, after = trained["before"], trained["after"]
    assert after["chains"] == before["chains"] > 100
    assert after["accepted"] > before["accepted"] + 1.0, (before, after)
    assert all(a > b for a, b in zip(after["step_acc"], before["step_acc"], strict=True))
    state = json.loads((tiny["root"] / "run" / "state.json").read_text())
    assert state["step"] == 150 and state["best_accepted"] == after["accepted"]
    again = Trainer(tiny["root"] / "run", tiny["target"], tiny["cfg"], tiny["head"],
                    trained["recipe"], log=lambda m: None)
    assert again.evaluate(tiny["seqs"])["accepted"] == pytest.approx(after["accepted"],
                                                                     abs=1e-6)


def test_a_token_the_drafter_cannot_say_counts_as_a_miss(tiny, trained):
    """Held-out acceptance as drafting sees it: without some reply tokens in its
    vocabulary the same drafter keeps fewer, over the same chains."""
    import mlx.core as mx

    from app.demo.eagle3_train import Batcher, Recipe, acceptance, demo_config
    from app.engine.drafters.eagle3_model import Eagle3Model
    from app.engine.mlx_types import load_arrays

    cfg = demo_config(tiny["cfg"], len(tiny["head"]))
    model = Eagle3Model(cfg)
    model.load_weights(list(load_arrays(trained["weights"]).items()))
    embed = tiny["target"].model.embed_tokens.weight.astype(mx.float32)
    full = acceptance(model, Batcher(embed, tiny["head"], cfg.vocab_size, Recipe()),
                      tiny["seqs"])
    said = sorted(set(int(t) for s in tiny["seqs"] for t in s.tokens[s.prompt_len:]))
    batcher = Batcher(embed, tiny["head"], cfg.vocab_size, Recipe())
    batcher.lut[said[::3]] = -1  # a third of the reply tokens leave its vocabulary
    less = acceptance(model, batcher, tiny["seqs"])
    assert less["chains"] == full["chains"]
    assert less["accepted"] < full["accepted"]


def _write_drafter(tiny, trained) -> Path:
    import mlx.core as mx

    from app.demo.eagle3_train import config_json, demo_config, drafter_arrays
    from app.engine.mlx_types import load_arrays

    cfg = demo_config(tiny["cfg"], len(tiny["head"]))
    out = tiny["root"] / "drafter"
    out.mkdir(exist_ok=True)
    (out / "config.json").write_text(json.dumps(config_json(cfg, tiny["cfg"], "tiny/target")))
    arrays = drafter_arrays(load_arrays(trained["weights"]), tiny["head"], cfg.vocab_size)
    mx.save_safetensors(str(out / "model.safetensors"), arrays)
    return out


def test_written_drafter_is_a_speculators_eagle3_folder_that_drafts_exactly(tiny, trained):
    from app import kinds
    from app.engine.events import DoneEvent, GenerationRequest
    from app.engine.session import Session
    from app.plugins.eagle3 import PLUGIN as EAGLE3

    folder = _write_drafter(tiny, trained)
    config = json.loads((folder / "config.json").read_text())
    assert kinds.for_folder(config) is EAGLE3
    s = Session()
    s.load_target(str(tiny["path"]))
    s.load_draft(str(folder))
    assert s.draft_kind == EAGLE3.name
    prompt = tuple(int(t) for t in tiny["seqs"][0].tokens[:8])

    def run(kind):
        req = GenerationRequest(prompt_tokens=prompt, chat=False, draft_kind=kind,
                                draft_width=4, max_tokens=40, allow_fallback=False)
        done = list(s.generate(req))[-1]
        assert isinstance(done, DoneEvent) and done.finish_reason != "error", done.error
        return done

    plain, spec = run(kinds.OFF), run(EAGLE3.name)
    assert spec.token_ids == plain.token_ids
    t = spec.timings
    assert t.fallback is None and t.draft_rounds > 0
    # a reply it was trained on: most proposals are kept
    assert t.draft_n_accepted > 0.5 * t.draft_n, (t.draft_n_accepted, t.draft_n)


# -- the shipped drafter, when this build has one -----------------------------------------


def _demo_eagle3_ready() -> bool:
    from app.demo.target import demo_target_ready
    from app.engine.drafters.eagle3 import DEMO_FOLDER
    from app.resources import resource_path

    return demo_target_ready() and (resource_path(DEMO_FOLDER) / "config.json").is_file()


@needs_demo(_demo_eagle3_ready(), "The demo target or the shipped EAGLE-3 drafter")
def test_demo_eagle3_uses_the_shipped_drafter_with_no_flag():
    from app.demo.builtins import register_demo_models
    from app.engine.events import DoneEvent, GenerationRequest
    from app.engine.session import Session
    from app.engine.width import FixedWidth
    from app.plugins.eagle3 import PLUGIN as EAGLE3
    from app.resources import resource_path

    register_demo_models()
    s = Session(width_policy=FixedWidth)
    s.load_target("demo")
    req = dict(prompt="Write a message to a neighbor asking them to water my plants while "
                      "I am away.", max_tokens=48, chat=True)
    plain = list(s.generate(GenerationRequest(**req, draft_kind="none")))[-1]
    done = list(s.generate(GenerationRequest(**req, draft_kind=EAGLE3.name,
                                             allow_fallback=False)))[-1]
    assert isinstance(done, DoneEvent) and done.finish_reason != "error", done.error
    assert s.assets[EAGLE3.name].path == resource_path("demo-eagle3")
    assert done.token_ids == plain.token_ids and done.timings.fallback is None
    assert done.timings.draft_n_accepted > 0  # a trained drafter: some proposals are right


@needs_demo(_demo_eagle3_ready(), "The demo target or the shipped EAGLE-3 drafter")
def test_demo_eagle3_is_checked_by_name_and_named_when_used(capsys):
    from app.cli import main
    from app.demo.builtins import EAGLE3_NOTE, register_demo_models
    from app.plugins.eagle3 import PLUGIN as EAGLE3

    register_demo_models()
    assert main(["check", "demo", "demo-eagle3", "--kind", EAGLE3.name]) == 0
    capsys.readouterr()
    assert main(["generate", "--model", "demo", "--draft-kind", EAGLE3.name, "--prompt",
                 "Explain rainbows", "--max-tokens", "8", "-v"]) == 0
    err = capsys.readouterr().err
    assert f"[{EAGLE3.name}] drafter: demo-eagle3 ({EAGLE3_NOTE})" in err


def test_compare_drafters_refuses_an_unknown_kind_in_one_line(capsys):
    from app.cli import main

    assert main(["demo", "compare-drafters", "--kinds", "warp-drive"]) == 2
    out = capsys.readouterr().out
    assert "not a draft kind: warp-drive" in out and "mtp" in out


@needs_demo(_demo_eagle3_ready(), "The demo target or the shipped EAGLE-3 drafter")
def test_compare_drafters_measures_trees_beside_their_chains_in_one_sitting():
    from app.demo import drafter_compare
    from app.plugins.eagle3 import PLUGIN as EAGLE3

    lines: list[str] = []
    out = drafter_compare.compare([EAGLE3.name], prompts=1, max_tokens=8,
                                  trees=("off", "on"), log=lines.append)
    chain, tree = out["kinds"][EAGLE3.name], out["kinds"][f"{EAGLE3.name} trees on"]
    assert chain["vs_chain"] is None and tree["vs_chain"] > 0
    assert chain["identical"] == tree["identical"] == 1  # greedy: both exact
    assert any("of its chains" in line for line in lines)
