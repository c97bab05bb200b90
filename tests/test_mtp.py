"""MTP heads as a draft kind: real Qwen3.5 layout, the engine's loop, the pairing check.

The targets are tiny Qwen3.5 checkpoints in the Hugging Face layout (``builders_mtp``) with
random ``mtp.*`` weights; the demo tests use the real demo target and the shipped head.
"""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace

import mlx.core as mx
import pytest

from app.engine.events import DoneEvent, GenerationRequest, SamplingParams
from app.errors import DraftPairError
from tests.builders_mtp import make_qwen3_5_checkpoint
from tests.demo_gate import needs_demo


@pytest.fixture(scope="module")
def qwen(tmp_path_factory):
    root = tmp_path_factory.mktemp("mtp-models")
    return SimpleNamespace(
        with_mtp=make_qwen3_5_checkpoint(root / "q35-mtp"),
        dropped=make_qwen3_5_checkpoint(root / "q35-dropped", with_mtp=False),
        wrong=make_qwen3_5_checkpoint(root / "q35-wrong", mtp_hidden=32),
    )


def _generate(session, **kw) -> DoneEvent:
    events = list(session.generate(GenerationRequest(chat=False, **kw)))
    done = events[-1]
    assert isinstance(done, DoneEvent), events[-1]
    assert done.finish_reason != "error", done.error
    return done


def test_head_reads_the_qwen_layout(qwen):
    """``mtp.*`` come from the target's own file (mlx-lm dropped them), norms as 1 + w."""
    from app.engine.drafters.mtp import load
    from app.engine.models import load_model

    target = load_model(qwen.with_mtp, precision="float32")
    head = load(qwen.with_mtp, target)
    raw = mx.load(str(qwen.with_mtp / "model.safetensors"))
    assert not any("mtp" in k for k in dict(target.model.parameters()))
    assert head.layout == "qwen3_5" and head.hidden_state == "postnorm"
    assert mx.allclose(head.module.norm.weight, raw["mtp.norm.weight"] + 1.0).item()
    assert mx.array_equal(head.module.fc.weight, raw["mtp.fc.weight"]).item()


@pytest.mark.parametrize("width", [1, 3])
def test_greedy_mtp_identical_to_plain(qwen, width):
    """Every step a round (fixed width): rejections, rollback of the hybrid target's cache
    and the head's own bookkeeping, and still plain decoding's output, without fallback."""
    from app.engine.decode import RoundLoop
    from app.engine.session import Session

    s = Session()
    s.load_target(qwen.with_mtp)
    prompt = [5, 17, 42, 99, 7, 150, 23, 64]
    plain = _generate(s, prompt_tokens=tuple(prompt), max_tokens=24, draft_kind="none")
    req = GenerationRequest(prompt_tokens=tuple(prompt), max_tokens=24, draft_kind="mtp",
                            chat=False)
    drafter = s.make_drafter(req)  # the session loads the head through the kind's plugin
    drafter.adaptive_width = False
    loop = RoundLoop.with_drafter(target=s.target, drafter=drafter, prompt=prompt, request=req,
                     rule="greedy", width=width, cancel=None)
    done = [e for e in loop.run() if isinstance(e, DoneEvent)][-1]
    assert done.token_ids == plain.token_ids
    assert done.timings.fallback is None
    assert done.timings.draft_rounds >= len(plain.token_ids) // (width + 1)


def test_session_runs_mtp_kind_without_fallback(qwen):
    from app.engine.session import Session

    s = Session()
    s.load_target(qwen.with_mtp)
    plain = _generate(s, prompt_tokens=(5, 17, 42, 99), max_tokens=16, draft_kind="none")
    done = _generate(s, prompt_tokens=(5, 17, 42, 99), max_tokens=16, draft_kind="mtp",
                     allow_fallback=False)
    assert done.token_ids == plain.token_ids
    assert done.timings.fallback is None and done.timings.draft_kind == "mtp"
    assert s.assets.get("mtp") is not None


def test_sampling_proposals_carry_q(qwen):
    from app.engine.drafters.mtp import MTPDrafter, load
    from app.engine.models import load_model

    target = load_model(qwen.with_mtp, precision="float32")
    d = MTPDrafter(load(qwen.with_mtp, target), target.model, target_vocab=target.vocab_size)
    prompt = [5, 17, 42, 99, 7]
    d.begin(prompt, SamplingParams(temperature=0.8, top_p=0.9))
    states = target.model.language_model.model(mx.array(prompt)[None])[0]
    d.prefill(prompt, SimpleNamespace(final_postnorm=states, final_prenorm=None))
    prop = d.propose(prompt, 3)
    assert prop.q is not None and prop.q.shape == (3, target.vocab_size)
    assert mx.allclose(prop.q.sum(axis=-1), mx.ones(3), atol=1e-4).item()
    picked = prop.q[mx.arange(3), prop.tokens]
    assert (picked > 0).all().item()  # each proposal was drawn from its own q


def test_dropped_weights_refused_with_the_reason(qwen, capsys):
    from app.cli import main

    code = main(["check", str(qwen.dropped), "--kind", "mtp"])
    out = capsys.readouterr().out
    assert code == 3
    assert "multi-token-prediction head" in out or "MTP" in out
    from app.engine.drafters.mtp_load import problem_for
    from app.engine.models import load_model

    why = problem_for(load_model(qwen.dropped, precision="float32"))
    assert why and "dropped" in why


def test_wrong_shapes_are_a_plain_error(qwen):
    from app.engine.drafters.mtp import load
    from app.engine.models import load_model

    target = load_model(qwen.wrong, precision="float32")
    with pytest.raises(DraftPairError, match="do not fit the target"):
        load(qwen.wrong, target)


def test_split_drafter_folder(qwen, tmp_path):
    """mlx-vlm's split layout: no ``mtp.`` prefix, norms already 1 + w, format mlx."""
    import json

    from app.engine.drafters.mtp import load
    from app.engine.models import load_model

    raw = mx.load(str(qwen.with_mtp / "model.safetensors"))
    split = {}
    for k, v in raw.items():
        if k.startswith("mtp."):
            name = k[4:]
            if name.endswith(("norm.weight", "norm_embedding.weight", "norm_hidden.weight")):
                v = v + 1.0
            split[name] = v
    folder = tmp_path / "mtp"
    folder.mkdir()
    mx.save_safetensors(str(folder / "model.safetensors"), split, metadata={"format": "mlx"})
    cfg = json.loads((qwen.with_mtp / "config.json").read_text())
    (folder / "config.json").write_text(json.dumps(
        {"model_type": "qwen3_5_mtp", "text_config": cfg["text_config"], "block_size": 3}))
    target = load_model(qwen.with_mtp, precision="float32")
    a, b = load(folder, target), load(qwen.with_mtp, target)
    assert a.layout == "split" and a.hidden_state == "postnorm"
    for (ka, va), (kb, vb) in zip(sorted(_flat(a.module)), sorted(_flat(b.module)), strict=True):
        assert ka == kb and mx.allclose(va, vb).item(), ka


def _flat(module):
    from mlx.utils import tree_flatten

    return tree_flatten(module.parameters())


# -- the demo head ----------------------------------------------------------------------------
def _demo_ready() -> bool:
    from app.demo.mtp_paths import shipped_head_available
    from app.demo.target import demo_target_ready

    return demo_target_ready() and shipped_head_available()


@needs_demo(_demo_ready(), "The demo target or the shipped MTP head")
def test_demo_mtp_uses_the_shipped_head_and_its_setting(monkeypatch):
    from app.engine.session import Session
    from app.engine.width import FixedWidth

    # every round proposes: whether the policy drafts at all depends on timings measured at
    # warm-up, and the head's proposals are what is under test here
    s = Session(width_policy=FixedWidth)
    s.load_target("demo")
    req = dict(prompt="Explain in two sentences why the sky is blue.", max_tokens=32, chat=True)
    plain = [e for e in s.generate(GenerationRequest(**req, draft_kind="none"))][-1]
    done = [e for e in s.generate(GenerationRequest(**req, draft_kind="mtp",
                                                    allow_fallback=False))][-1]
    head = s.assets["mtp"]
    assert head.layout == "demo" and head.head_ids is not None
    assert head.hidden_state == head.info["config"]["hidden_state"]
    assert done.token_ids == plain.token_ids and done.timings.fallback is None
    assert done.timings.draft_n_accepted > 0  # a trained head: some proposals are right


def test_demo_head_location_without_shipped_folder(monkeypatch):
    """No shipped head: the reason names the command that builds one."""
    from app.engine.drafters import mtp_load

    monkeypatch.setattr(mtp_load, "_builtin_head", lambda t: (True, None))
    target = SimpleNamespace(path=Path("/nonexistent"), config={"model_type": "llama"})
    found, why = mtp_load.locate(Path("/nonexistent"), target)
    assert found is None and "demo mtp-train" in why


def test_nextn_layout_names(tmp_path):
    """DeepSeek-V3 / GLM NextN: ``model.layers.{N}`` with enorm / hnorm / eh_proj /
    shared_head, per-expert MoE tensors stacked like mlx-lm does; shared embedding and
    head skipped (the target's own are used); plain norms (no 1 + w)."""
    import json

    from app.engine.drafters import mtp_weights as mw

    n = 3
    H = 8
    t = {f"model.layers.{i}.input_layernorm.weight": mx.ones((H,)) for i in range(n)}
    p = f"model.layers.{n}."
    t.update({
        p + "enorm.weight": mx.full((H,), 0.5), p + "hnorm.weight": mx.full((H,), 0.25),
        p + "eh_proj.weight": mx.ones((H, 2 * H)), p + "shared_head.norm.weight": mx.ones((H,)),
        p + "shared_head.head.weight": mx.zeros((32, H)), p + "embed_tokens.weight": mx.zeros((32, H)),
        p + "input_layernorm.weight": mx.full((H,), 2.0),
        p + "self_attn.o_proj.weight": mx.ones((H, H)),
    })
    for e in range(4):
        t[p + f"mlp.experts.{e}.gate_proj.weight"] = mx.full((4, H), float(e))
    mx.save_safetensors(str(tmp_path / "model.safetensors"), t)
    cfg = {"model_type": "deepseek_v3", "num_hidden_layers": n, "num_nextn_predict_layers": 1}
    (tmp_path / "config.json").write_text(json.dumps(cfg))
    found = mw.find_in_target(tmp_path, cfg)
    assert found is not None and found.layout == "nextn" and mw.declared_depth(cfg) == 1
    w = mw.load_tensors(found)
    assert set(w) == {"pre_fc_norm_embedding.weight", "pre_fc_norm_hidden.weight", "fc.weight",
                      "norm.weight", "layers.0.input_layernorm.weight",
                      "layers.0.self_attn.o_proj.weight", "layers.0.mlp.switch_mlp.gate_proj.weight"}
    assert w["pre_fc_norm_embedding.weight"][0].item() == 0.5  # not shifted by 1
    stacked = w["layers.0.mlp.switch_mlp.gate_proj.weight"]
    assert stacked.shape == (4, 4, H) and stacked[:, 0, 0].tolist() == [0.0, 1.0, 2.0, 3.0]


@needs_demo(_demo_ready(), "The demo target or the shipped MTP head")
def test_demo_head_is_offered_and_labelled_as_trained_for_the_demo(qtbot, tmp_path, capsys):
    """The check says which head is used, the pairing suggestions and the Chat picker offer
    MTP for the demo target with that line, and generate -v names the head it used."""
    from app.checkpoints.pairing import suggest_drafts
    from app.checkpoints.resolve import resolve_model
    from app.checkpoints.store import Store
    from app.cli import main
    from app.demo.builtins import register_demo_models
    from app.ui.draft_picker import DraftPicker, options_from

    register_demo_models()
    assert main(["check", "demo", "--kind", "mtp"]) == 0
    assert "trained for the demo" in capsys.readouterr().out
    store = Store(data_dir=tmp_path / "data", hf_cache=tmp_path / "hf")
    sugg = suggest_drafts(resolve_model("demo"), store=store)
    mtp = [s for s in sugg.no_model_options if s.kind == "mtp"]
    assert mtp and "trained for the demo" in mtp[0].reason
    picker = DraftPicker()
    qtbot.addWidget(picker)
    picker.set_options(options_from(sugg, {"mtp": None}), kind="mtp")
    assert picker.current().kind == "mtp" and picker.current().enabled
    assert "trained for the demo" in picker.current().reason
    assert main(["generate", "--model", "demo", "--draft-kind", "mtp", "--prompt",
                 "Explain rainbows", "--max-tokens", "8", "-v"]) == 0
    from app.demo.builtins import MTP_NOTE

    assert f"[mtp] drafter: demo-mtp ({MTP_NOTE})" in capsys.readouterr().err


def test_width1_replay_follows_accepts_and_rejects():
    from app.engine.drafters.mtp_replay import agreement, replay_width1

    tokens = [1, 2, 10, 11, 12, 13, 14]  # a 2-token prompt, reply 10..14
    # pred[p] guesses tokens[p + 2]; right for 10 and 13, wrong for 11, 12 and 14
    pred = [10, 0, 0, 13, 0]
    assert agreement(pred, tokens, 2) == (2, 5)
    # round 1 accepts 10 (+ bonus 11); round 2 proposes 12: wrong; round 3 proposes 13:
    # right (+ bonus 14); nothing left
    assert replay_width1(pred, tokens, 2) == [1, 0, 1]


@needs_demo(_demo_ready(), "The demo target or the shipped MTP head")
def test_engine_accepts_exactly_what_the_head_predicts_on_the_reply():
    """Greedy, one proposal per round: every round's verdict equals the head's teacher-forced
    prediction on the final reply, so the loop (pairing, the head's cache, rollback, the
    target's states from verify passes) loses nothing the head got right."""
    from app.engine.decode import RoundLoop
    from app.engine.drafters.mtp_replay import agreement, head_predictions, replay_width1
    from app.engine.session import Session

    s = Session()
    s.load_target("demo")
    req = GenerationRequest(prompt="Tell me a few fun facts about octopuses.", max_tokens=48,
                            chat=True, draft_kind="mtp", lookup_assist=False)  # head rounds only
    prompt = s.encode(req)
    drafter = s.make_drafter(req)  # the session loads the head through the kind's plugin
    drafter.adaptive_width = False  # every step a round
    loop = RoundLoop.with_drafter(target=s.target, drafter=drafter, prompt=prompt, request=req,
                     rule="greedy", width=1, cancel=None)
    done = [e for e in loop.run() if isinstance(e, DoneEvent)][-1]
    engine = [r.accepted for r in done.rounds]
    tokens = prompt + list(done.token_ids)
    pred = head_predictions(s.target.model, s.assets["mtp"], tokens)
    replay = replay_width1(pred, tokens, len(prompt))
    assert all(r.proposed == 1 for r in done.rounds)
    assert len(replay) - 1 <= len(engine) <= len(replay)
    assert engine == replay[: len(engine)]
    assert 0 < sum(engine) < len(engine)  # both verdicts occur: the comparison means something
    hits, n = agreement(pred, tokens, len(prompt))
    assert n == len(done.token_ids) and hits >= sum(engine)
