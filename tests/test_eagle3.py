"""EAGLE-3 drafters: both published layouts recognised and read alike, proposals equal to
mlx-vlm's drafter on the same weights, greedy output identical to plain decoding, sampled
proposals carrying q over the target's vocabulary, and pairing refusals in one sentence."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from tests import builders_eagle3 as be
from tests import eagle3_scenario as sc

GOLDEN = Path(__file__).parent / "golden" / "eagle3_golden.npz"


@pytest.fixture(scope="module")
def root(tmp_path_factory) -> Path:
    return tmp_path_factory.mktemp("eagle3")


@pytest.fixture(scope="module")
def pairs(root) -> dict[str, Path]:
    target, orig = be.make_pair(root, "original")
    _, spec = be.make_pair(root, "speculators")
    return {"target": target, "original": orig, "speculators": spec}


# -- folders ----------------------------------------------------------------------------

@pytest.mark.parametrize("layout", ["original", "speculators"])
def test_both_layouts_are_recognised(pairs, layout):
    from app import kinds
    from app.checkpoints.inspect import KIND_EAGLE3, inspect_checkpoint

    cfg = json.loads((pairs[layout] / "config.json").read_text())
    plugin = kinds.for_folder(cfg)
    assert plugin is not None and plugin.technical == "EAGLE-3"
    assert inspect_checkpoint(pairs[layout]).kind == KIND_EAGLE3


def test_both_layouts_read_alike(pairs):
    from dataclasses import asdict

    from app.engine.drafters.eagle3_model import read_config

    a = asdict(read_config(json.loads((pairs["original"] / "config.json").read_text())))
    b = asdict(read_config(json.loads((pairs["speculators"] / "config.json").read_text())))
    assert (a.pop("layout"), b.pop("layout")) == ("original", "speculators")
    assert b.pop("layer_ids") == tuple(be.PAPER_IDS) and a.pop("layer_ids") is None
    assert b.pop("verifier_archs") == ("Qwen3ForCausalLM",) and a.pop("verifier_archs") == ()
    b.pop("verifier_name"), a.pop("verifier_name")
    assert a == b


# -- proposals equal to mlx-vlm's -------------------------------------------------------

@pytest.fixture(scope="module")
def golden() -> dict[str, np.ndarray]:
    return dict(np.load(GOLDEN))


@pytest.mark.parametrize("name,layout,reduced,opts", sc.VARIANTS, ids=[v[0] for v in sc.VARIANTS])
def test_proposals_equal_mlx_vlm_golden(root, golden, name, layout, reduced, opts):
    target, drafter = be.make_pair(root, layout, reduced=reduced, **opts)
    got = sc.ours(target, drafter)
    assert got == golden[name].tolist()
    assert len({t for r in got for t in r}) > 3  # the scenario is not degenerate


def test_original_layout_drafts_as_the_speculators_one(pairs, golden):
    """Same numbers, the other layout: the paper's layers stand in for the written ids."""
    assert sc.ours(pairs["target"], pairs["original"]) == golden["speculators-reduced"].tolist()


@pytest.mark.skipif(not (sc.REF / "mlx_vlm").is_dir(), reason="mlx-vlm 0.7.10 not unpacked")
def test_proposals_equal_mlx_vlm_live(root):
    target, drafter = be.make_pair(root, "speculators", seed=8)
    assert sc.ours(target, drafter) == sc.mlx_vlm(target, drafter)


# -- in the round loop ------------------------------------------------------------------

def _session(pairs, key):
    from app.engine.session import Session

    s = Session()
    s.load_target(pairs["target"])
    s.load_draft(pairs[key])
    return s


def _generate(s, kind, *, width=3, max_tokens=40, sampling=None):
    from app.engine.events import DoneEvent, GenerationRequest, SamplingParams

    req = GenerationRequest(prompt_tokens=sc.PROMPT, chat=False, draft_kind=kind,
                            draft_width=width, max_tokens=max_tokens, allow_fallback=False,
                            sampling=sampling or SamplingParams())
    done = list(s.generate(req))[-1]
    assert isinstance(done, DoneEvent) and done.finish_reason != "error", done.error
    return done


@pytest.mark.parametrize("key", ["original", "speculators"])
def test_greedy_output_identical_to_plain(pairs, key):
    from app import kinds

    s = _session(pairs, key)
    name = s.draft_kind
    assert name is not None and kinds.get(name).technical == "EAGLE-3"
    plain = _generate(s, kinds.OFF)
    spec = _generate(s, name)
    assert spec.token_ids == plain.token_ids
    assert spec.timings.fallback is None and spec.timings.draft_rounds > 0
    assert spec.timings.draft_kind == name


def test_sampled_proposals_carry_q_over_the_target_vocabulary(pairs):
    import mlx.core as mx

    from app.engine.drafters.eagle3 import Eagle3Drafter, load
    from app.engine.events import SamplingParams
    from app.engine.models import load_model

    t = load_model(pairs["target"])
    assets = load(pairs["speculators"], t)
    d = Eagle3Drafter(assets, target_vocab=t.vocab_size)
    prompt = list(sc.PROMPT)
    d.begin(prompt, SamplingParams(temperature=0.8, seed=1, shared_draws=False))
    rows = sc.rows_for(t.model, prompt, assets.capture)
    from app.engine.taps import Hidden

    h = be.HIDDEN
    d.prefill(prompt, Hidden(layers={c: mx.array(rows[:, j * h:(j + 1) * h])
                                     for j, c in enumerate(assets.capture)}))
    p = d.propose(prompt + [sc.BONUS], 4)
    assert p is not None and p.q is not None and p.q.shape == (4, t.vocab_size)
    q = np.array(p.q)
    mapped = np.zeros(t.vocab_size, bool)
    assert assets.weights.d2t is not None
    mapped[np.arange(assets.config.draft_vocab_size) + np.array(assets.weights.d2t)] = True
    assert np.allclose(q.sum(-1), 1.0, atol=1e-4) and not q[:, ~mapped].any()
    toks = [int(x) for x in p.tokens.tolist()]
    assert all(mapped[x] and q[i, x] > 0 for i, x in enumerate(toks))


def test_sampling_runs_exactly_through_the_loop(pairs):
    from app.engine.events import SamplingParams

    s = _session(pairs, "speculators")
    assert s.draft_kind is not None
    hot = SamplingParams(temperature=0.7, seed=3)
    done = _generate(s, s.draft_kind, sampling=hot, max_tokens=20)
    assert done.timings.fallback is None and len(done.token_ids) == 20
    # shared draws: the drafter draws over its short vocabulary with the noise of each
    # target token id, and the reply is plain's of the same seed
    assert done.timings.draft_rounds > 0 and done.timings.acceptance_rule == "sample-match"
    plain = _generate(s, "none", sampling=hot, max_tokens=20)
    assert done.token_ids == plain.token_ids


# -- pairing ----------------------------------------------------------------------------

@pytest.fixture(scope="module")
def bad(root, pairs) -> dict[str, Path]:
    vocab = be.target_vocab(pairs["target"])
    w = be.weights(vocab, vocab // 2)
    no_d2t = {k: v for k, v in w.items() if k not in ("d2t", "t2d")}

    def spec(name: str, cfg: dict, weights=w) -> Path:
        return be.write_folder(root / name, cfg, weights)

    wide = be.speculators_config(vocab, vocab // 2)
    wide["target_hidden_size"] = 2 * be.HIDDEN
    return {
        "hidden": spec("bad-hidden", wide, be.weights(vocab, vocab // 2,
                                                      target_hidden=2 * be.HIDDEN)),
        "layers": spec("bad-layers", be.speculators_config(vocab, vocab // 2,
                                                           layer_ids=(2, 4, 9))),
        "d2t": spec("no-d2t", be.speculators_config(vocab, vocab // 2), no_d2t),
        "family": spec("other-family", be.speculators_config(
            vocab, vocab // 2, verifier_arch="LlamaForCausalLM")),
    }


def test_a_drafter_made_for_the_target_pairs(pairs):
    from app.checkpoints.pairing import check

    for key in ("original", "speculators"):
        report = check(pairs["target"], pairs[key])
        assert report.works, [f.message for f in report.blockers]
        assert "eagle3.detected" in report.codes()


@pytest.mark.parametrize("key,code,words", [
    ("hidden", "eagle3.hidden_mismatch", "another width"),
    ("layers", "eagle3.layers_mismatch", "layers this model does not have"),
    ("d2t", "eagle3.no_d2t", "no table (d2t)"),
    ("family", "eagle3.other_family", "made for a LlamaForCausalLM model"),
])
def test_what_does_not_fit_is_refused_in_one_sentence(pairs, bad, key, code, words):
    from app.checkpoints.pairing import check
    from app.engine.session import Session
    from app.errors import DraftPairError

    report = check(pairs["target"], bad[key])
    assert not report.works
    assert [f.code for f in report.blockers] == [code], report.codes()
    msg = report.blockers[0].message
    assert words in msg and msg.endswith(".") and msg.count(". ") == 0 and "\n" not in msg
    s = Session()
    s.load_target(pairs["target"])
    with pytest.raises(DraftPairError) as err:
        s.load_draft(bad[key])
    text = str(err.value)
    assert "EAGLE-3" in text and text.endswith(".") and "\n" not in text


def test_a_drafter_is_not_a_chat_model(pairs):
    from app.checkpoints.pairing import check
    from app.engine.session import Session
    from app.errors import DraftPairError

    assert "target.is_eagle3" in {f.code for f in check(pairs["speculators"]).blockers}
    with pytest.raises(DraftPairError, match="EAGLE-3 drafter"):
        Session().load_target(pairs["original"])


# -- a drafter trained on the tiny target: proposals get accepted -----------------------

@pytest.fixture(scope="module")
def trained(root, pairs) -> Path:
    """A full-vocabulary speculators drafter trained with the training-time test (two steps)
    on the tiny target's own greedy replies."""
    import random

    import mlx.core as mx
    import mlx.nn as nn
    import mlx.optimizers as optim
    from mlx.utils import tree_flatten
    from mlx_lm.generate import generate_step

    from app.engine.drafters.eagle3_model import load_model as load_net
    from app.engine.models import load_model

    _, folder = be.make_pair(root, "speculators", reduced=False, seed=21)
    t = load_model(pairs["target"])
    net = load_net(folder).model
    cap = tuple(i - 1 for i in be.PAPER_IDS)
    embed = t.model.model.embed_tokens
    rng = random.Random(0)
    seqs = []
    for i in range(10):
        prompt = list(sc.PROMPT) if i == 0 else [rng.randrange(20, t.vocab_size - 20)
                                                 for _ in range(8)]
        reply = []
        for tok, _ in generate_step(mx.array(prompt), t.model, max_tokens=40,
                                    sampler=lambda x: mx.argmax(x, axis=-1)):
            reply.append(int(tok))
        ids = prompt + reply
        seqs.append((ids, mx.array(sc.rows_for(t.model, ids, cap))))

    depth = 2  # the paper's training-time test: the second step reads the first's output

    def loss_fn(m, ids, rows):
        n = len(ids) - 1 - depth
        embeds = [embed(mx.array(ids[1 + j: n + 1 + j])) for j in range(depth)]
        steps = m.train_steps(embeds, rows[:n])
        # row p of step j predicts the token at position p + 2 + j
        return sum(nn.losses.cross_entropy(m.logits(st), mx.array(ids[2 + j: n + 2 + j]),
                                           reduction="mean") for j, st in enumerate(steps))

    grad = nn.value_and_grad(net, loss_fn)
    opt = optim.Adam(learning_rate=3e-3)
    first = last = None
    for step in range(200):
        ids, rows = seqs[step % len(seqs)]
        loss, g = grad(net, ids, rows)
        opt.update(net, g)
        mx.eval(loss, net.parameters(), opt.state)
        first = float(loss) if first is None else first
        last = float(loss)
    assert last < 0.5 * first, (first, last)
    out = root / "eagle3-trained"
    out.mkdir()
    (out / "config.json").write_text((folder / "config.json").read_text())
    mx.save_safetensors(str(out / "model.safetensors"), dict(tree_flatten(net.parameters())))
    return out


def test_trained_drafter_gets_accepted_and_stays_exact(pairs, trained):
    from app import kinds
    from app.engine.session import Session

    s = Session()
    s.load_target(pairs["target"])
    s.load_draft(trained)
    assert s.draft_kind is not None
    plain = _generate(s, kinds.OFF, max_tokens=48)
    spec = _generate(s, s.draft_kind, width=4, max_tokens=48)
    assert spec.token_ids == plain.token_ids
    t = spec.timings
    assert t.fallback is None and t.draft_rounds > 0
    assert t.draft_n_accepted > 0, (t.draft_rounds, t.draft_n)


def test_memory_counts_the_drafters_own_cache(pairs):
    from app import kinds
    from app.checkpoints.inspect import inspect_checkpoint
    from app.checkpoints.memory_estimate import estimate_memory

    t = inspect_checkpoint(pairs["target"])
    per_token = 2 * 1 * be.KV_HEADS * be.HEAD_DIM * 4  # one layer, float32
    for key in ("original", "speculators"):
        d = inspect_checkpoint(pairs[key])
        plugin = kinds.for_folder(d.config or {})
        assert plugin is not None
        e = estimate_memory(t, d, context=1000, draft_kind=plugin.name)
        assert e.draft_kv == per_token * 1000, key


def test_a_gemma4_target_drafts_exactly(root):
    """The speculators layout names Gemma 4 targets too (RedHatAI's gemma-4 speculator):
    the taps read a Gemma 4 text model's layers (KV-shared layers, per-layer inputs)."""
    from app import kinds
    from app.engine.session import Session

    target = be.make_gemma4_target(root / "gemma4")
    vocab = be.target_vocab(target)
    drafter = be.write_folder(root / "eagle3-gemma4", be.speculators_config(
        vocab, vocab // 2, layer_ids=(1, 3, 5), verifier_arch="Gemma4ForCausalLM"),
        be.weights(vocab, vocab // 2, seed=5))
    s = Session()
    s.load_target(target)
    s.load_draft(drafter)
    assert s.draft_kind is not None
    plain = _generate(s, kinds.OFF, max_tokens=30)
    spec = _generate(s, s.draft_kind, max_tokens=30)
    assert spec.token_ids == plain.token_ids
    assert spec.timings.fallback is None and spec.timings.draft_rounds > 0


def test_training_time_test_is_the_drafting_pass(pairs):
    """Step j of the training pass for the chain started at the end of the prompt computes
    what j chained drafting steps compute (with the true tokens as the chain's inputs)."""
    import mlx.core as mx

    from app.engine.drafters.eagle3 import Eagle3Drafter, load
    from app.engine.events import SamplingParams
    from app.engine.models import load_model
    from app.engine.taps import Hidden

    t = load_model(pairs["target"])
    assets = load(pairs["speculators"], t)
    net = assets.weights.model
    seq = list(sc.PROMPT) + [40, 77, 91, 12]
    rows = mx.array(sc.rows_for(t.model, seq, assets.capture))
    embed = t.model.model.embed_tokens
    n = len(seq) - 3  # chains of three steps fit
    embeds = [embed(mx.array(seq[1 + j: n + 1 + j])) for j in range(3)]
    steps = net.train_steps(embeds, rows[:n])
    # drafting: the pairs of positions 1..m (rows 0..m-1), then chained steps fed true tokens;
    # the last chain, and one in the middle (which must not see the pairs after its start)
    h = be.HIDDEN
    for m in (n, n - 4):
        d = Eagle3Drafter(assets, target_vocab=t.vocab_size)
        d.begin(seq[:m], SamplingParams())
        d.prefill(seq[:m], Hidden(layers={c: rows[:m, j * h:(j + 1) * h]
                                          for j, c in enumerate(assets.capture)}))
        d._pair(seq[: m + 1])
        assert d.seed is not None
        state = d.seed
        assert np.allclose(np.array(state[0]), np.array(steps[0][m - 1]), atol=1e-4), m
        for j in (1, 2):
            state = d._step(mx.array([seq[m + j]], dtype=mx.uint32), state)
            assert np.allclose(np.array(state[0]), np.array(steps[j][m - 1]), atol=1e-4), (m, j)
