"""DFlash block drafter: config schemas, the network against two public implementations,
the round loop (greedy output identical to plain, proposals identical to z-lab's loop), and
a drafter trained here (so proposals get accepted) staying exact.

The reference figures come from tests/golden/dflash_golden.npz, written by
tests/golden/make_dflash_golden.py from z-lab/dflash's model_mlx.py and mlx-vlm 0.7.10's
qwen3_dflash drafter on the same random-weight folders tests/builders_dflash.py builds here.
"""

from __future__ import annotations

import json
import random
from pathlib import Path

import numpy as np
import pytest

from tests import builders_dflash as bd
from tests.demo_gate import needs_demo

GOLDEN = Path(__file__).parent / "golden" / "dflash_golden.npz"


@pytest.fixture(scope="module")
def pairs(tmp_path_factory) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("dflash")
    target, orig = bd.make_pair(root, "original")
    _, new = bd.make_pair(root, "2026")
    _, slide = bd.make_pair(root, "2026", sliding_window=6)
    return {"target": target, "original": orig, "2026": new, "2026-sw6": slide}


@pytest.fixture(scope="module")
def golden() -> dict[str, np.ndarray]:
    return dict(np.load(GOLDEN))


@pytest.fixture(scope="module")
def target(pairs):
    from mlx_lm import load

    return load(str(pairs["target"]))[0]


# -- config ---------------------------------------------------------------------------


def test_both_schemas_read_alike(pairs):
    from app.engine.drafters.dflash_model import read_config_file

    old, new, slide = (read_config_file(pairs[k]) for k in ("original", "2026", "2026-sw6"))
    assert (old.schema, new.schema) == ("original", "2026")
    for c in (old, new, slide):
        assert c.block_size == 4 and c.target_layer_ids == (1, 3)
        assert c.num_target_layers == bd.TARGET_LAYERS and c.rope_theta == 10000.0
        assert c.mask_token_id == bd.mask_token(pairs["target"]) and c.rope_scaling is None
    assert old.window(0) is None and new.window(0) is None
    assert slide.layer_types == ("sliding_attention", "full_attention")
    assert (slide.window(0), slide.window(1)) == (5, None)


@pytest.mark.parametrize("drop", ["mask_token_id", "block_size", "target_layer_ids"])
def test_incomplete_config_is_a_plain_sentence(pairs, drop):
    from app.engine.drafters.dflash_model import read_config
    from app.errors import DraftPairError

    cfg = json.loads((pairs["2026"] / "config.json").read_text())
    cfg["dflash_config"].pop(drop)
    with pytest.raises(DraftPairError, match=drop):
        read_config(cfg)


# -- the network against the references ------------------------------------------------


def _my_net(folder: Path, target, key: str) -> np.ndarray:
    import mlx.core as mx

    from app.engine.drafters.dflash_model import load_model

    model = load_model(folder)
    cfg = json.loads((folder / "config.json").read_text())
    embed = target.model.embed_tokens
    c = model.config
    cache = model.make_cache()
    out = []
    for feats, first in bd.net_inputs(cfg, bd.NET_STEPS[key]):
        block = mx.array([[first] + [c.mask_token_id] * (c.block_size - 1)])
        h = model(embed(block), mx.array(feats), cache)
        out.append(np.array(embed.as_linear(h[0, 1:])))
    return np.stack(out)


@pytest.mark.parametrize("ref,key", [("zlab", "original"), ("mlxvlm", "original"),
                                     ("mlxvlm", "2026"), ("mlxvlm", "2026-sw6")])
def test_network_matches_reference(pairs, target, golden, ref, key):
    mine = _my_net(pairs[key], target, key)
    theirs = golden[f"net_{ref}_{key}"]
    np.testing.assert_allclose(mine, theirs, atol=2e-4, rtol=1e-4)
    assert (mine.argmax(-1) == theirs.argmax(-1)).all()


def test_sliding_layer_changes_the_result(golden):
    """The sliding scenario is not the full-attention one under another name."""
    a, b = golden["net_mlxvlm_2026-sw6"], golden["net_mlxvlm_2026"]
    assert a.shape == b.shape and not np.allclose(a, b, atol=1e-3)


def test_training_pass_is_the_drafting_pass(pairs):
    """Many blocks at once under the training mask == one block at a time with a cache."""
    import mlx.core as mx
    import mlx.nn as nn

    from app.engine.drafters.dflash_model import load_model, rope_at

    x = mx.random.normal((1, 2, 5, 16))
    pos = mx.broadcast_to(mx.arange(7, 12)[None], (1, 5))
    assert mx.abs(rope_at(x, pos, 10000.0) - nn.RoPE(16, base=10000.0)(x, offset=7)).max() < 1e-5
    model = load_model(pairs["original"])
    b, t = model.config.block_size, 10
    feats = mx.random.normal((1, t, 2 * bd.HIDDEN))
    emb = mx.random.normal((1, b, bd.HIDDEN))
    cache = model.make_cache()
    model(emb, feats[:, :6], cache)
    late = model(emb, feats[:, 6:], cache)  # block at position 10, context 0..9
    early = model(emb, feats[:, :6], model.make_cache())  # block at 6, context 0..5
    mask = np.zeros((1, 1, 2 * b, t + 2 * b), bool)
    mask[0, 0, :b, :10] = mask[0, 0, :b, t: t + b] = True
    mask[0, 0, b:, :6] = mask[0, 0, b:, t + b:] = True
    both = model.train_states(mx.concatenate([emb, emb], axis=1),
                              mx.array([list(range(10, 10 + b)) + list(range(6, 6 + b))]),
                              model.context(feats), mx.array(mask))
    assert mx.abs(both[:, :b] - late).max() < 1e-4
    assert mx.abs(both[:, b:] - early).max() < 1e-4
    assert mx.abs(late - early).max() > 1e-2  # the context matters


# -- the round loop ---------------------------------------------------------------------


def _session(pairs, draft_key: str):
    from app.engine.session import Session

    s = Session()
    s.load_target(pairs["target"])
    s.load_draft(pairs[draft_key])
    return s


def _generate(s, kind: str, *, width: int | None = None, max_tokens=bd.LOOP_MAX_TOKENS,
              prompt=bd.PROMPT, sampling=None, adaptive: bool = False,
              lookup_assist: bool = False):
    from app.engine.events import DoneEvent, GenerationRequest, SamplingParams

    req = GenerationRequest(prompt_tokens=tuple(prompt), chat=False, draft_kind=kind,
                            draft_width=width, max_tokens=max_tokens, allow_fallback=False,
                            sampling=sampling or SamplingParams(), adaptive=adaptive,
                            lookup_assist=lookup_assist)  # default: the drafter's own rounds
    events = list(s.generate(req))
    done = events[-1]
    assert isinstance(done, DoneEvent) and done.finish_reason != "error", done.error
    return done


@pytest.fixture
def recorded(monkeypatch):
    """Every block the drafter drafts: (start position, first token, proposals)."""
    from app.engine.drafters.dflash import DFlashDrafter

    seen: list[tuple[int, int, list[int]]] = []
    inner = DFlashDrafter.propose

    def propose(self, committed, k):
        p = inner(self, committed, k)
        if p is not None:
            seen.append((len(committed) - 1, committed[-1], [int(t) for t in p.tokens.tolist()]))
        return p

    monkeypatch.setattr(DFlashDrafter, "propose", propose)
    return seen


def test_loop_drafts_what_zlab_drafts(pairs, golden, recorded):
    s = _session(pairs, "original")
    done = _generate(s, "dflash", width=3)
    assert done.timings.fallback is None and done.timings.draft_kind == "dflash"
    assert list(done.token_ids) == golden["loop_tokens"].tolist()
    ref = {int(st): (int(f), golden["loop_logits"][i, : golden["loop_widths"][i]].argmax(-1))
           for i, (st, f) in enumerate(zip(golden["loop_starts"], golden["loop_firsts"], strict=True))}
    common = [r for r in recorded if r[0] in ref]
    assert len(common) >= len(ref) - 2 > 10
    for start, first, tokens in common:
        want_first, want = ref[start]
        assert first == want_first
        n = min(len(tokens), len(want))
        assert tokens[:n] == want[:n].tolist(), start


@pytest.mark.parametrize("key", ["original", "2026", "2026-sw6"])
def test_greedy_output_identical_to_plain(pairs, key, recorded):
    s = _session(pairs, key)
    plain = _generate(s, "none", max_tokens=40)
    spec = _generate(s, "dflash", max_tokens=40)
    assert spec.token_ids == plain.token_ids
    assert spec.timings.fallback is None and spec.timings.draft_rounds > 0
    assert recorded and all(len(t) <= 3 for *_, t in recorded)  # block_size - 1


# -- a drafter trained on the tiny target: proposals get accepted -----------------------


@pytest.fixture(scope="module")
def trained(pairs, target, tmp_path_factory) -> Path:
    """The demo trainer's recipe on the tiny target's own greedy replies."""
    import mlx.core as mx
    import mlx.optimizers as optim
    from mlx.utils import tree_flatten
    from mlx_lm import load
    from mlx_lm.generate import stream_generate

    from app.demo import dflash_features as feat
    from app.demo.dflash_train import Batcher, loss_fn
    from app.engine.drafters.dflash_model import load_model
    model = load_model(pairs["original"])
    c = model.config
    _, tok = load(str(pairs["target"]))
    rng = random.Random(0)
    seqs = []
    for i in range(12):
        prompt = [rng.randrange(20, c.vocab_size - 20) for _ in range(8)]
        reply = [r.token for r in stream_generate(target, tok, prompt, max_tokens=40)]
        ids = prompt + [int(t) for t in reply]
        f = np.array(feat.layer_features(target, ids, c.target_layer_ids))
        seqs.append(feat.Sequence(str(i), np.array(ids, np.int32), len(prompt), f))
    embed = target.model.embed_tokens.weight
    batcher = Batcher(c, embed, list(range(c.vocab_size)), gamma=4.0)
    opt = optim.Adam(learning_rate=3e-3)
    grad = __import__("mlx.nn", fromlist=["nn"]).value_and_grad(model, loss_fn)
    first = last = None
    for _ in range(150):
        batch = batcher.make(rng.sample(seqs, 4), 12, rng)
        loss, g = grad(model, embed, *batch)
        opt.update(model, g)
        mx.eval(loss, model.parameters(), opt.state)
        first = float(loss) if first is None else first
        last = float(loss)
    assert last < 0.7 * first, (first, last)
    out = tmp_path_factory.mktemp("trained") / "dflash-trained"
    out.mkdir()
    (out / "config.json").write_text((pairs["original"] / "config.json").read_text())
    mx.save_safetensors(str(out / "model.safetensors"), dict(tree_flatten(model.parameters())))
    return out


@pytest.mark.parametrize("adaptive", [False, True])
def test_trained_drafter_gets_accepted_and_stays_exact(pairs, trained, adaptive, recorded):
    """Fixed width: every round drafts the whole block, and training shows in acceptance.
    Adaptive: the loop's width policy and the drafter's confidence size the rounds (this
    barely trained drafter is mostly left out), the output stays the same."""
    from app.engine.session import Session

    s = Session()
    s.load_target(pairs["target"])
    accepted, rounds = {}, 0
    for name, folder in (("random", pairs["original"]), ("trained", trained)):
        s.load_draft(folder)
        accepted[name] = 0
        for prompt in ([40, 41, 42, 43, 44], [100, 7, 250, 31], list(bd.PROMPT)):
            plain = _generate(s, "none", prompt=prompt, max_tokens=48)
            spec = _generate(s, "dflash", prompt=prompt, max_tokens=48, adaptive=adaptive)
            assert spec.token_ids == plain.token_ids
            assert spec.timings.fallback is None
            accepted[name] += spec.timings.draft_n_accepted
            rounds += spec.timings.draft_rounds
    assert rounds > 0
    if not adaptive:
        assert accepted["trained"] >= max(5, 3 * accepted["random"]), accepted
        widths = [len(t) for *_, t in recorded]
        assert sum(w == 3 for w in widths) > 0.9 * len(widths)  # the block (but at the end)


def test_sampling_proposes_with_distributions(pairs, trained, monkeypatch):
    """At T > 0 with independent draws the drafter samples and hands the loop its
    distributions (rejection rule); with shared draws it proposes with the target's noise and
    the reply is plain's of the same seed."""
    from app.engine.drafters.dflash import DFlashDrafter
    from app.engine.events import SamplingParams
    from app.engine.session import Session

    seen = []
    inner = DFlashDrafter.propose

    def propose(self, committed, k):
        p = inner(self, committed, k)
        if p is not None:
            seen.append(p)
        return p

    monkeypatch.setattr(DFlashDrafter, "propose", propose)
    s = Session()
    s.load_target(pairs["target"])
    s.load_draft(trained)
    done = _generate(s, "dflash", max_tokens=32, adaptive=True,
                     sampling=SamplingParams(temperature=0.8, seed=3, shared_draws=False))
    assert done.timings.fallback is None and done.timings.draft_rounds > 0
    assert done.timings.acceptance_rule == "rejection-sampling"
    vocab = json.loads((pairs["target"] / "config.json").read_text())["vocab_size"]
    assert seen and all(p.q is not None and p.q.shape == (p.k, vocab) for p in seen)
    rows = np.array(seen[0].q.sum(axis=-1))
    np.testing.assert_allclose(rows, 1.0, atol=1e-4)
    assert done.token_ids != _generate(s, "none", max_tokens=32).token_ids  # not greedy
    seen.clear()
    hot = SamplingParams(temperature=0.8, seed=3)
    shared = _generate(s, "dflash", max_tokens=32, adaptive=True, sampling=hot)
    assert shared.timings.acceptance_rule == "sample-match" and shared.timings.draft_rounds > 0
    assert seen and all(p.q is None for p in seen)
    assert shared.token_ids == _generate(s, "none", max_tokens=32, sampling=hot).token_ids


def test_width_follows_confidence_and_verify_cost():
    from app.engine.drafters.dflash import DFlashDrafter

    d = DFlashDrafter.__new__(DFlashDrafter)  # the rule alone: no model needed
    d.calibration = 1.0
    d._verify = {1: 1.0, 2: 1.02, 3: 1.04, 4: 1.06, 5: 1.4, 6: 1.5}
    assert d.choose_width([0.95, 0.9, 0.9, 0.9, 0.9], pending=False) == 4  # 5 tokens: 1.4 steps
    assert d.choose_width([0.95, 0.9, 0.9, 0.9, 0.9], pending=True) == 3
    assert d.choose_width([0.9, 0.01, 0.9], pending=True) == 1  # the run breaks at the second
    assert d.choose_width([0.01, 0.01], pending=True) == 1  # the loop decides about drafting
    d._verify = {}
    assert d.verify_cost(1) == 1.0 and d.verify_cost(3) > d.verify_cost(2) > 1.0
    d._verify = {n: 1.0 for n in range(1, 8)}  # flat timings (a busy machine)
    assert d.choose_width([0.1] * 6, pending=True) == 1


# -- a hybrid target (Gated DeltaNet + attention): rounds rewind its recurrent state ----------


def test_hybrid_target_greedy_identical_to_plain(tmp_path, recorded):
    """A Qwen3.5-layout target, as z-lab's Qwen3.5 drafters pair with: every rejected block
    rewinds the recurrent layers exactly, so the output is plain decoding's."""
    from app.engine.session import Session
    from tests.builders_mtp import make_qwen3_5_checkpoint

    target = make_qwen3_5_checkpoint(tmp_path / "q35", with_mtp=False)
    cfg = json.loads((target / "config.json").read_text())["text_config"]
    drafter = bd.make_dflash_folder(tmp_path / "dflash-q35", bd.dflash_config(
        "2026", vocab=cfg["vocab_size"], mask_token_id=bd.mask_token(target),
        target_layer_ids=(1, 2), num_target_layers=cfg["num_hidden_layers"]))
    s = Session()
    s.load_target(target)
    s.load_draft(drafter)
    plain = _generate(s, "none", max_tokens=32)
    for width in (None, 3):
        spec = _generate(s, "dflash", max_tokens=32, width=width)
        assert spec.token_ids == plain.token_ids
        assert spec.timings.fallback is None and spec.timings.draft_rounds > 0
    assert recorded
    from app.cli import main

    assert main(["check", str(target), str(drafter), "--kind", "dflash"]) == 0  # same verdict


# -- the demo drafter, when this build ships one ----------------------------------------------


def _demo_dflash_ready() -> bool:
    from app.demo.target import demo_target_ready
    from app.engine.drafters.dflash import DEMO_FOLDER
    from app.resources import resource_path

    return demo_target_ready() and (resource_path(DEMO_FOLDER) / "config.json").is_file()


@needs_demo(_demo_dflash_ready(), "The demo target or the shipped DFlash drafter")
def test_demo_dflash_uses_the_shipped_drafter_with_no_flag(monkeypatch):
    from app.demo.builtins import register_demo_models
    from app.engine.events import DoneEvent, GenerationRequest
    from app.engine.session import Session
    from app.engine.width import FixedWidth
    from app.resources import resource_path

    # every round drafts: the drafter's proposals are under test, not the warm-up timings
    # the width policy would otherwise weigh them against
    register_demo_models()
    s = Session(width_policy=FixedWidth)
    s.load_target("demo")
    req = dict(prompt="Write a message to a neighbor asking them to water my plants while "
                      "I am away.", max_tokens=48, chat=True)
    plain = list(s.generate(GenerationRequest(**req, draft_kind="none")))[-1]
    done = list(s.generate(GenerationRequest(**req, draft_kind="dflash",
                                             allow_fallback=False)))[-1]
    assert isinstance(done, DoneEvent) and done.finish_reason != "error", done.error
    assert s.assets["dflash"].path == resource_path("demo-dflash")
    assert done.token_ids == plain.token_ids and done.timings.fallback is None
    assert done.timings.draft_n_accepted > 0  # a trained drafter: some proposals are right


@needs_demo(_demo_dflash_ready(), "The demo target or the shipped DFlash drafter")
def test_demo_dflash_is_offered_by_name_and_labelled_as_the_demo_drafter(qtbot, tmp_path,
                                                                        tiny_models):
    """The shipped drafter is a listed built-in: the check takes it by name, the pairing
    suggestions rank it for the demo target with its own line, and the Chat picker offers it
    enabled; for another target it is excluded with a reason."""
    from app.checkpoints.pairing import suggest_drafts
    from app.checkpoints.resolve import resolve_model
    from app.checkpoints.store import Store
    from app.cli import main
    from app.demo.builtins import DFLASH_NOTE, register_demo_models
    from app.ui.draft_picker import DraftPicker, options_from

    register_demo_models()
    assert main(["check", "demo", "demo-dflash", "--kind", "dflash"]) == 0
    store = Store(data_dir=tmp_path / "data", hf_cache=tmp_path / "hf")
    sugg = suggest_drafts(resolve_model("demo"), store=store)
    mine = [s for s in sugg.ranked if s.name == "demo-dflash"]
    assert mine and mine[0].kind == "dflash" and mine[0].reason == DFLASH_NOTE
    picker = DraftPicker()
    qtbot.addWidget(picker)
    picker.set_options(options_from(sugg, {"dflash": None, "full-model": None}), kind="none")
    opt = next(o for o in picker.options if o.title.startswith("demo-dflash"))
    assert opt.enabled and opt.kind == "dflash" and "trained for the demo" in opt.reason
    # the chat bar switched to DFlash while the demo draft model is loaded: the built-in
    # drafter is shown, not Off
    draft = next(o for o in picker.options if o.kind == "full-model")
    assert not picker.select("dflash", draft.path)
    assert picker.select("dflash", draft.path, any_path=True)
    assert picker.current() == opt
    other = suggest_drafts(tiny_models.target, store=store)
    assert not any(s.name == "demo-dflash" for s in other.ranked)
    assert any(x.name == "demo-dflash" and x.reason for x in other.excluded)


@needs_demo(_demo_dflash_ready(), "The demo target or the shipped DFlash drafter")
def test_generate_names_the_demo_dflash_drafter_it_used(capsys):
    from app.cli import main
    from app.demo.builtins import DFLASH_NOTE, register_demo_models

    register_demo_models()
    assert main(["generate", "--model", "demo", "--draft-kind", "dflash", "--prompt",
                 "Explain rainbows", "--max-tokens", "8", "-v"]) == 0
    err = capsys.readouterr().err
    assert f"[dflash] drafter: demo-dflash ({DFLASH_NOTE})" in err
