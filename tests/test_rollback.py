"""Exact rollback on recurrent, hybrid and sliding-window targets, and hidden-state taps.

Tiny checkpoints of each family are built with mlx-lm's own model classes and real tokenizer
files. Drafts: the target itself (every proposal accepted, long runs) and a perturbed copy
(rejections at varied positions)."""

from __future__ import annotations

from collections import Counter
from pathlib import Path

import mlx.core as mx
import pytest
from mlx_lm.models.cache import ArraysCache, KVCache, RotatingKVCache

from app.engine import recurrent, rollback, taps
from app.engine.decode import RoundLoop
from app.engine.drafters.full_model import FullModelDrafter
from app.engine.events import RULE_GREEDY, DoneEvent, GenerationRequest, RoundEvent
from app.engine.models import load_model, make_cache
from app.engine.session import Session
from tests.builders_hybrid import DRAFT_NOISE, make_family_checkpoint, perturbed_copy

# long enough to wrap gemma3_text's sliding window of 8 several times
PROMPT = ("The cat sat on the mat. The dog sat on the log. Once upon a time there was a "
          "tiny model")
ROLLBACK_FAMILIES = ["qwen3_5", "qwen3_next", "nemotron_h", "mamba2", "mamba", "gemma3_text", "llama",
                     "qwen3"]
METHOD = {"qwen3_5": rollback.CAPTURE, "qwen3_next": rollback.CAPTURE,
          "nemotron_h": rollback.CAPTURE,
          "mamba2": rollback.CAPTURE, "mamba": rollback.CAPTURE,
          "gemma3_text": rollback.WINDOW, "llama": rollback.TRIM, "qwen3": rollback.TRIM}


@pytest.fixture(scope="module")
def family_dirs(tmp_path_factory) -> dict[str, tuple[Path, Path]]:
    root = tmp_path_factory.mktemp("families")
    out = {}
    for fam in ROLLBACK_FAMILIES:
        target = make_family_checkpoint(root / fam, fam, seed=0)
        out[fam] = (target, perturbed_copy(target, root / f"{fam}-draft",
                                           noise=DRAFT_NOISE[fam]))
    return out


def _gen(s: Session, **kw) -> DoneEvent:
    done = list(s.generate(GenerationRequest(prompt=PROMPT, chat=False, max_tokens=40,
                                             allow_fallback=False, memory_interval_s=1e9,
                                             **kw)))[-1]
    assert done.finish_reason != "error", done.error
    return done


def _clone(cache: list) -> list:
    """An independent copy (a pass on it never touches the original's arrays)."""
    out = []
    for c in cache:
        new = type(c).__new__(type(c))
        new.__dict__.update(c.__dict__)
        if isinstance(c, ArraysCache):
            new.cache = [None if a is None else mx.array(a) for a in c.cache]
        elif getattr(c, "keys", None) is not None:
            new.keys, new.values = mx.array(c.keys), mx.array(c.values)
        out.append(new)
    return out


def _check_against_fresh_prefill(loop: RoundLoop) -> None:
    """The rewound target cache is what a fresh prefill of the fed tokens gives."""
    model = loop.target.model
    fed = loop.committed[: len(loop.committed) - len(loop.pending)]
    fresh = make_cache(loop.target)
    model(mx.array(fed)[None], cache=fresh)
    for ours, ref in zip(loop.cache, fresh, strict=True):
        if isinstance(ours, ArraysCache):
            for a, b in zip(ours.cache, ref.cache, strict=True):
                assert mx.allclose(a, b, atol=1e-4).item()
        elif isinstance(ours, KVCache):
            assert ours.offset == ref.offset == len(fed)
            n = ours.offset
            assert mx.allclose(ours.keys[..., :n, :], ref.keys[..., :n, :], atol=1e-4).item()
        elif isinstance(ours, RotatingKVCache):
            assert ours.offset == len(fed)
    # and the next logits agree (covers the sliding-window buffers, whose layout differs)
    pend = mx.array(loop.pending, dtype=mx.uint32)
    got = model(pend[None], cache=_clone(loop.cache))[0, -1]
    want = model(mx.array(loop.committed)[None])[0, -1]
    assert mx.allclose(got, want, atol=1e-4).item()


@pytest.mark.parametrize("family", ROLLBACK_FAMILIES)
def test_greedy_identity_without_fallback(family_dirs, family):
    target, perturbed = family_dirs[family]
    s = Session()
    s.load_target(target)
    assert rollback.for_target(s.target).method == METHOD[family]
    plain = _gen(s)
    accepted: Counter = Counter()
    lookup = _gen(s, draft_kind="prompt-lookup")
    assert lookup.token_ids == plain.token_ids and lookup.timings.fallback is None
    for draft in (target, perturbed):
        s.load_draft(draft)
        for width in (1, 4):
            spec = _gen(s, draft_kind="full-model", draft_width=width, adaptive=False)
            assert spec.token_ids == plain.token_ids, (draft.name, width)
            assert spec.timings.fallback is None and spec.timings.draft_rounds > 0
            if draft == target:  # the target as its own draft: all its proposals accepted
                own = [r for r in spec.rounds if not r.copied]  # (copies may miss)
                assert own and all(r.accepted == r.proposed for r in own)
            if width == 4:
                accepted.update(r.accepted for r in spec.rounds)
    assert {0, 4} <= set(accepted) and len(accepted) >= 3, accepted  # varied rejections


@pytest.mark.parametrize(("family", "method"), [
    ("qwen3_5", None), ("nemotron_h", None), ("mamba2", None), ("mamba", None),
    ("gemma3_text", None), ("llama", None),
    # the generic strategy other recurrent families (RWKV-7, LFM2...) get
    ("qwen3_5", rollback.REPLAY), ("mamba", rollback.REPLAY),
])
def test_rewound_cache_equals_fresh_prefill(family_dirs, family, method):
    target_dir, draft_dir = family_dirs[family]
    target, draft = load_model(target_dir), load_model(draft_dir)
    if method is not None:
        target.extra["rollback"] = rollback.Rollback(target.model, make_cache(target),
                                                     method=method)
    assert rollback.for_target(target).method == (method or METHOD[family])
    prompt = target.tokenizer.encode(PROMPT)
    loop = RoundLoop.with_drafter(target=target, prompt=prompt,
                     drafter=FullModelDrafter(draft, target_vocab=target.vocab_size),
                     request=GenerationRequest(max_tokens=32, memory_interval_s=1e9),
                     rule=RULE_GREEDY, width=4, cancel=None)
    checked = 0
    for ev in loop.run():
        partial = isinstance(ev, RoundEvent) and ev.record.accepted < ev.record.proposed
        if partial and loop.finish_reason is None:  # (the last round may stop mid-way)
            _check_against_fresh_prefill(loop)
            checked += 1
    assert checked >= 2
    plain = RoundLoop.with_drafter(target=target, prompt=prompt, drafter=None,
                      request=GenerationRequest(max_tokens=32, memory_interval_s=1e9),
                      rule=RULE_GREEDY, width=0, cancel=None)
    list(plain.run())
    assert loop.output == plain.output


def test_check_catches_a_missing_rebuild(family_dirs, monkeypatch):
    """The state comparison above fails when the recurrent state is not rewound."""
    target_dir, draft_dir = family_dirs["qwen3_5"]
    target, draft = load_model(target_dir), load_model(draft_dir)
    rollback.for_target(target)
    monkeypatch.setattr(recurrent, "rebuild", lambda states, rec, fed, keep: [])
    loop = RoundLoop.with_drafter(target=target, prompt=target.tokenizer.encode(PROMPT),
                     drafter=FullModelDrafter(draft, target_vocab=target.vocab_size),
                     request=GenerationRequest(max_tokens=32, memory_interval_s=1e9),
                     rule=RULE_GREEDY, width=4, cancel=None)
    with pytest.raises(AssertionError):
        for ev in loop.run():
            partial = isinstance(ev, RoundEvent) and ev.record.accepted < ev.record.proposed
            if partial and loop.finish_reason is None:
                _check_against_fresh_prefill(loop)


def test_nothing_is_rewound_when_everything_is_accepted(family_dirs, monkeypatch):
    target_dir, _ = family_dirs["qwen3_5"]
    s = Session()
    s.load_target(target_dir)
    s.load_draft(target_dir)
    _gen(s, draft_kind="full-model", draft_width=4, adaptive=False)  # warm-up rewinds too
    calls = []
    monkeypatch.setattr(recurrent, "rebuild", lambda *a: calls.append(a) or [])
    done = _gen(s, draft_kind="full-model", draft_width=4, adaptive=False)
    assert done.timings.draft_n_accepted == done.timings.draft_n > 0 and not calls


def test_unknown_cache_kind_gets_a_plain_reason():
    from mlx_lm.models.deepseek_v41 import LayerCache

    from app.checkpoints.rewind_rules import config_problem

    why = rollback.problem([KVCache(), LayerCache(8)])
    assert why == "the model's LayerCache cache cannot be rewound after a rejected draft"
    assert config_problem({"model_type": "deepseek_v41"}) == why
    assert rollback.problem([KVCache(), RotatingKVCache(8), ArraysCache(2)]) is None
    assert config_problem({"model_type": "qwen3_5", "text_config": {}}) is None


# -- sampling stays exact on a hybrid target ----------------------------------------------


def test_rejection_sampling_exact_on_hybrid_target(family_dirs):
    from tests.test_engine import _chi2, _chi2_sf, _exact_sequence_probs, _sample_sequences

    target_dir, draft_dir = family_dirs["qwen3_5"]
    s = Session()
    s.load_target(target_dir)
    s.load_draft(draft_dir)
    from app.engine.events import SamplingParams

    prompt_ids = s.target.tokenizer.encode("The dog sat")
    sampling = SamplingParams(temperature=1.0, top_k=3)
    length, n = 2, 400
    exact = _exact_sequence_probs(s.target, prompt_ids, sampling, length)
    proposed: Counter = Counter()
    counts = _sample_sequences(s, prompt_ids, sampling, n, length, width=2, proposed=proposed)
    stat, df = _chi2(counts, exact, n)
    assert _chi2_sf(stat, df) > 1e-3, (stat, df)
    assert sum(proposed.values()) >= n  # speculation really ran


# -- hidden-state taps ----------------------------------------------------------------------


@pytest.mark.parametrize("family", ["llama", "qwen3", "qwen3_5", "gemma3_text", "deepseek_v3",
                                    "nemotron_h"])
def test_taps_are_what_the_model_computes(tmp_path, family):
    target = load_model(make_family_checkpoint(tmp_path / family, family, seed=0))
    model = target.model
    tokens = mx.array(target.tokenizer.encode(PROMPT), dtype=mx.uint32)
    want = model(tokens[None])[0]
    n_layers = taps.num_layers(model)
    req = taps.TapRequest(final_prenorm=True, final_postnorm=True, layers=(0, n_layers - 1))
    logits, hidden = taps.forward(model, tokens, make_cache(target), req)
    assert mx.array_equal(logits, want).item()
    assert hidden.n == tokens.shape[0] and set(hidden.layers) == {0, n_layers - 1}
    assert mx.allclose(taps.head(model, hidden.final_postnorm), want, atol=1e-5).item()
    assert mx.array_equal(hidden.layers[n_layers - 1], hidden.final_prenorm).item()
    assert not mx.array_equal(hidden.layers[0], hidden.final_prenorm).item()
    plain, none = taps.forward(model, tokens, make_cache(target), None)
    assert none is None and mx.array_equal(plain, want).item()


class _RowRecorder(FullModelDrafter):
    """The full-model drafter, also reading taps: keeps every row the loop hands it."""

    taps = taps.TapRequest(final_postnorm=True, layers=(0,))

    def begin(self, prompt, sampling):
        self.rows: list = []
        return super().begin(prompt, sampling)

    def prefill(self, tokens, hidden):
        assert hidden.n == len(tokens)
        self.rows.append(hidden)

    def observe(self, committed, proposal, accepted, new_tokens, hidden=None):
        self.rows.append(hidden)
        super().observe(committed, proposal, accepted, new_tokens, hidden)


@pytest.mark.parametrize("family", ["qwen3_5", "gemma3_text"])
def test_drafter_receives_one_row_per_cached_position(family_dirs, family):
    target_dir, draft_dir = family_dirs[family]
    target, draft = load_model(target_dir), load_model(draft_dir)
    drafter = _RowRecorder(draft, target_vocab=target.vocab_size)
    loop = RoundLoop.with_drafter(target=target, prompt=target.tokenizer.encode(PROMPT), drafter=drafter,
                     request=GenerationRequest(max_tokens=30, memory_interval_s=1e9),
                     rule=RULE_GREEDY, width=3, cancel=None)
    rejected = 0
    for ev in loop.run():
        if isinstance(ev, RoundEvent) and loop.finish_reason is None:
            rows = taps.Hidden.concat(drafter.rows)
            assert rows.n == len(loop.committed) - len(loop.pending)
            rejected += ev.record.accepted < ev.record.proposed
    assert rejected >= 1
    rows = taps.Hidden.concat(drafter.rows)
    fed = mx.array(loop.committed[: rows.n], dtype=mx.uint32)
    _, want = taps.forward(target.model, fed, make_cache(target), drafter.taps)
    assert mx.allclose(rows.final_postnorm, want.final_postnorm, atol=1e-4).item()
    assert mx.allclose(rows.layers[0], want.layers[0], atol=1e-4).item()


def test_bench_reports_rollback_cost(family_dirs, tmp_path, capsys):
    from app.cli import main

    target_dir, _ = family_dirs["qwen3_5"]
    assert main(["bench", "--rollback", "--model", str(target_dir), "--out",
                 str(tmp_path / "out")]) == 0
    import json

    data = json.loads((tmp_path / "out" / "rollback.json").read_text())
    assert data["model_type"] == "qwen3_5" and data["plain_step_ms"] > 0
    methods = [s["method"] for s in data["strategies"]]
    assert methods == [rollback.CAPTURE, rollback.REPLAY]
    for row in data["strategies"]:
        assert sorted(int(k) for k in row["rollback_ms_by_keep"]) == [0, 1, 2, 3, 4]
        assert row["fraction_of_plain_step"] == pytest.approx(
            row["rollback_ms"] / data["plain_step_ms"])
    assert "of a plain step" in capsys.readouterr().err
