"""The engine on real (tiny) MLX models: identity, peer agreement, exact sampling, rollback,
timings, stop conditions, cancellation and fallbacks."""

from __future__ import annotations

import dataclasses
import math
import threading
from collections import Counter
from pathlib import Path

import mlx.core as mx
import pytest

from app.engine import sampling as sm
from app.engine import verify_step
from app.engine.decode import RoundLoop
from app.engine.drafters.full_model import FullModelDrafter
from app.engine.drafters.prompt_lookup import NgramIndex, PromptLookupDrafter
from app.engine.events import (
    RULE_GREEDY,
    RULE_REJECTION,
    RULE_SAMPLE_MATCH,
    DoneEvent,
    GenerationRequest,
    NoticeEvent,
    RoundEvent,
    SamplingParams,
    TokenEvent,
)
from app.engine.session import Session
from app.engine.stopping import StopMatcher
from app.engine.verify import Verdict
from tests.builders import make_checkpoint, make_trained_checkpoint

PROMPTS = ["The cat sat on", "def add(a", "Once upon a time", "Hello! How can"]


@pytest.fixture(scope="module")
def pair_dirs(tmp_path_factory) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("engine_models")
    return {
        "target": make_trained_checkpoint(root / "target", seed=1, steps=150),
        "good": make_trained_checkpoint(
            root / "good", seed=2, hidden_size=32, num_layers=1, steps=150
        ),
        # barely trained: agrees with the target on some tokens, not all -> rejections
        "weak": make_trained_checkpoint(
            root / "weak", seed=3, hidden_size=32, num_layers=1, steps=25
        ),
    }


@pytest.fixture(scope="module")
def session(pair_dirs) -> Session:
    s = Session()
    s.load_target(pair_dirs["target"])
    s.load_draft(pair_dirs["weak"])
    return s


def run(session: Session, **kw) -> tuple[DoneEvent, list]:
    events = list(session.generate(GenerationRequest(chat=False, **kw)))
    done = events[-1]
    assert isinstance(done, DoneEvent), events[-1]
    assert done.finish_reason != "error", done.error
    return done, events


# -- greedy identity ------------------------------------------------------------------


@pytest.mark.parametrize("draft", ["weak", "good"])
@pytest.mark.parametrize("width", [1, 3, 6])
def test_full_model_greedy_identity(session, pair_dirs, draft, width):
    session.load_draft(pair_dirs[draft])
    for prompt in PROMPTS:
        plain, _ = run(session, prompt=prompt, max_tokens=40)
        for adaptive in (False, True):
            spec, _ = run(session, prompt=prompt, max_tokens=40, draft_kind="full-model",
                          draft_width=width, adaptive=adaptive)
            assert spec.token_ids == plain.token_ids, (prompt, adaptive)
        assert spec.token_ids == plain.token_ids, prompt
        assert spec.text == plain.text
        assert spec.timings.acceptance_rule == RULE_GREEDY
        assert spec.timings.draft_rounds > 0
    session.load_draft(pair_dirs["weak"])


def test_reduced_draft_head_is_gathered_once_per_loaded_draft(session, pair_dirs, tmp_path):
    """A draft that ships a reduced output layer (draft_head.json) has its rows gathered when
    the first request makes its drafter, not again at every request; replies stay identical."""
    import json
    import shutil

    folder = tmp_path / "head_draft"
    shutil.copytree(pair_dirs["good"], folder)
    vocab = session.target.vocab_size
    (folder / "draft_head.json").write_text(json.dumps({"format": 1,
                                                         "token_ids": list(range(vocab // 2))}))
    session.load_draft(folder)
    try:
        first = FullModelDrafter(session.draft, target_vocab=vocab)
        again = FullModelDrafter(session.draft, target_vocab=vocab)
        assert first.head.reduced and first.head.size == vocab // 2
        assert again.head.weight is first.head.weight and again.head.ids is first.head.ids
        plain, _ = run(session, prompt=PROMPTS[0], max_tokens=24)
        spec, _ = run(session, prompt=PROMPTS[0], max_tokens=24, draft_kind="full-model")
        assert spec.token_ids == plain.token_ids and spec.timings.draft_rounds > 0
    finally:
        session.load_draft(pair_dirs["weak"])


@pytest.mark.parametrize("adaptive", [True, False])
def test_prompt_lookup_greedy_identity(session, adaptive):
    accepted = 0
    for prompt in PROMPTS + ["The cat sat on the mat. The dog sat on the log. The cat sat"]:
        plain, _ = run(session, prompt=prompt, max_tokens=48)
        spec, _ = run(session, prompt=prompt, max_tokens=48, draft_kind="prompt-lookup",
                      adaptive=adaptive)
        assert spec.token_ids == plain.token_ids, prompt
        accepted += spec.timings.draft_n_accepted
    assert accepted > 0  # lookups really ran and were accepted somewhere


def test_weak_draft_really_rejects(session):
    done, _ = run(session, prompt=PROMPTS[0], max_tokens=40, draft_kind="full-model",
                  draft_width=4, adaptive=False)
    t = done.timings
    assert 0 < t.draft_n_accepted < t.draft_n  # both accept and reject paths exercised


# -- peer: mlx-lm's own speculative decoding ---------------------------------------------


def test_full_model_matches_mlx_lm_speculative(session, pair_dirs):
    from mlx_lm.generate import speculative_generate_step

    target = session.target
    draft = session.draft
    for prompt in PROMPTS[:3]:
        ids = target.tokenizer.encode(prompt)
        theirs = [
            tok
            for tok, _, _ in speculative_generate_step(
                mx.array(ids), target.model, draft.model, num_draft_tokens=3, max_tokens=30
            )
        ]
        ours, _ = run(session, prompt=prompt, max_tokens=30, draft_kind="full-model",
                      draft_width=3)
        eos = target.eos_token_ids
        theirs = [t for t in theirs[: len(ours.token_ids) + 1]]
        if any(t in eos for t in theirs):
            theirs = theirs[: next(i for i, t in enumerate(theirs) if t in eos)]
        assert list(ours.token_ids) == theirs[: len(ours.token_ids)]
        assert len(ours.token_ids) == len(theirs)


# -- sampling: the rejection rule preserves the target's distribution --------------------


def _chi2_sf(x: float, df: int) -> float:
    """Survival function of chi-square (Wilson-Hilferty), good enough for a test threshold."""
    z = ((x / df) ** (1 / 3) - (1 - 2 / (9 * df))) / math.sqrt(2 / (9 * df))
    return 0.5 * math.erfc(z / math.sqrt(2))


def _exact_sequence_probs(target, prompt_ids, sampling, length):
    """P(t_1..t_length) under plain sampling, enumerated over the top-k support."""
    probs = {(): 1.0}
    for _ in range(length):
        nxt = {}
        for seq, p in probs.items():
            x = mx.array([*prompt_ids, *seq])[None]
            logits = target.model(x)[0, -1:]
            dist = sm.probabilities(logits, sampling)[0]
            mx.eval(dist)
            for tok, q in enumerate(dist.tolist()):
                if q > 1e-9:
                    nxt[(*seq, tok)] = p * q
        probs = nxt
    return probs


def _sample_sequences(session, prompt_ids, sampling, n, length, width, *, adaptive=False,
                      proposed: Counter | None = None):
    counts: Counter = Counter()
    for seed in range(n):
        req = GenerationRequest(
            prompt_tokens=tuple(prompt_ids),
            draft_kind="full-model",
            draft_width=width,
            sampling=SamplingParams(temperature=sampling.temperature, top_k=sampling.top_k,
                                    seed=seed),
            max_tokens=length,
            memory_interval_s=1e9,
            adaptive=adaptive,  # off: verify at every position, the rule is under test
        )
        done = list(session.generate(req))[-1]
        counts[tuple(done.token_ids)] += 1
        if proposed is not None:
            proposed.update(r.proposed for r in done.rounds)
    return counts


def _chi2(counts: Counter, exact: dict, n: int) -> tuple[float, int]:
    stat, df, pooled_obs, pooled_exp = 0.0, 0, 0, 0.0
    for seq, p in exact.items():
        e = p * n
        if e < 5:
            pooled_obs += counts.get(seq, 0)
            pooled_exp += e
            continue
        stat += (counts.get(seq, 0) - e) ** 2 / e
        df += 1
    other = n - sum(counts.get(s, 0) for s in exact)  # sequences outside the support
    pooled_obs += other
    if pooled_exp >= 1:
        stat += (pooled_obs - pooled_exp) ** 2 / pooled_exp
        df += 1
    elif other:
        stat += 1e6  # mass where the target has none
    return stat, max(df - 1, 1)


def _top1_matching_verify(rows, proposal, *, sampling, rule):
    """The wrong rule: accept a sampled draft token when it equals the target's top-1."""
    proposals = proposal.tokens
    target = mx.argmax(rows, axis=-1)
    sampled = sm.sample(rows, sampling)
    mx.eval(target, sampled, proposals)
    t, s, d = target.tolist(), sampled.tolist(), proposals.tolist()
    n = 0
    while n < len(d) and d[n] == t[n]:
        n += 1
    return Verdict(n, s[n], tuple(d))


def test_rejection_sampling_preserves_distribution(session, pair_dirs, monkeypatch):
    session.load_draft(pair_dirs["weak"])
    target = session.target
    prompt_ids = target.tokenizer.encode("The dog sat")
    sampling = SamplingParams(temperature=1.0, top_k=3)
    length, n = 3, 1500
    exact = _exact_sequence_probs(target, prompt_ids, sampling, length)
    assert abs(sum(exact.values()) - 1) < 1e-3

    counts = _sample_sequences(session, prompt_ids, sampling, n, length, width=2)
    stat, df = _chi2(counts, exact, n)
    assert _chi2_sf(stat, df) > 1e-3, (stat, df)

    # the same test must catch a wrong rule (top-1 matching of sampled drafts)
    monkeypatch.setattr(verify_step, "verify", _top1_matching_verify)
    wrong = _sample_sequences(session, prompt_ids, sampling, n, length, width=2)
    stat_w, df_w = _chi2(wrong, exact, n)
    assert _chi2_sf(stat_w, df_w) < 1e-6, (stat_w, df_w)


def test_confidence_stop_keeps_sampling_exact(session, pair_dirs, monkeypatch):
    """Stopping a round when the draft doubts its own token (adaptive drafting) must not
    change the output distribution."""
    from app.engine.drafters import full_model
    from app.engine.width import FixedWidth

    session.load_draft(pair_dirs["weak"])
    monkeypatch.setattr(full_model, "CONFIDENCE_STOP", 0.5)
    monkeypatch.setattr(session, "width_policy", FixedWidth)  # width fixed
    target = session.target
    prompt_ids = target.tokenizer.encode("The dog sat")
    sampling = SamplingParams(temperature=1.0, top_k=3)
    length, n = 3, 1500
    exact = _exact_sequence_probs(target, prompt_ids, sampling, length)
    proposed: Counter = Counter()
    counts = _sample_sequences(session, prompt_ids, sampling, n, length, width=3,
                               adaptive=True, proposed=proposed)
    stat, df = _chi2(counts, exact, n)
    assert _chi2_sf(stat, df) > 1e-3, (stat, df)
    assert proposed[1] > 50 and proposed[2] + proposed[3] > 50, proposed  # both paths ran


def test_sampling_rules_reported(session):
    hot = SamplingParams(temperature=0.8, seed=1)
    independent = dataclasses.replace(hot, shared_draws=False)
    done, _ = run(session, prompt=PROMPTS[0], max_tokens=12, draft_kind="full-model",
                  sampling=independent)
    assert done.timings.acceptance_rule == RULE_REJECTION
    for kind in ("full-model", "prompt-lookup"):  # shared draws: proposals are fixed tokens
        done, _ = run(session, prompt=PROMPTS[0], max_tokens=12, draft_kind=kind, sampling=hot)
        assert done.timings.acceptance_rule == RULE_SAMPLE_MATCH, kind


def test_shared_draws_give_the_plain_reply_of_the_seed_with_every_kind(session):
    """At temperature > 0 the reply depends on the seed alone: plain decoding, prompt lookup
    and the draft model draw the same tokens (each position's noise is shared); another seed
    draws another reply, and independent draws leave the draft model's reply to chance."""
    replies = {}
    prompt = "The cat sat on the mat. The cat sat on the mat. The cat sat on the"
    rounds: Counter = Counter()
    for seed in (1, 2, 3):
        hot = SamplingParams(temperature=0.9, seed=seed)
        plain, _ = run(session, prompt=prompt, max_tokens=24, sampling=hot)
        assert plain.timings.seed == seed
        replies[seed] = plain.token_ids
        for kind in ("prompt-lookup", "full-model"):
            spec, _ = run(session, prompt=prompt, max_tokens=24, draft_kind=kind,
                          sampling=hot, adaptive=False)
            rounds[kind] += spec.timings.draft_rounds
            assert spec.token_ids == plain.token_ids, (kind, seed)
    assert rounds["prompt-lookup"] > 0 and rounds["full-model"] > 0, rounds
    assert len(set(replies.values())) == 3
    unseeded, _ = run(session, prompt=prompt, max_tokens=24,
                      sampling=SamplingParams(temperature=0.9))
    assert unseeded.timings.seed is not None  # a seed is chosen and reported
    again, _ = run(session, prompt=prompt, max_tokens=24, draft_kind="full-model",
                   sampling=SamplingParams(temperature=0.9, seed=unseeded.timings.seed))
    assert again.token_ids == unseeded.token_ids
    differ = 0
    for seed in (1, 2, 3):
        hot = SamplingParams(temperature=0.9, seed=seed, shared_draws=False)
        spec, _ = run(session, prompt=prompt, max_tokens=24, draft_kind="full-model",
                      sampling=hot)
        differ += spec.token_ids != replies[seed]
    assert differ >= 1


def test_processors_apply_to_every_verified_row(session):
    # repetition penalty changes plain greedy output; speculation must follow it exactly
    rp = SamplingParams(temperature=0.0, repetition_penalty=30.0)
    prompt = "The cat sat on the mat. The cat sat on the"
    plain_free, _ = run(session, prompt=prompt, max_tokens=30)
    plain, _ = run(session, prompt=prompt, max_tokens=30, sampling=rp)
    assert plain.token_ids != plain_free.token_ids
    for kind in ("prompt-lookup", "full-model"):
        spec, _ = run(session, prompt=prompt, max_tokens=30, sampling=rp, draft_kind=kind)
        assert spec.token_ids == plain.token_ids, kind


# -- rollback ---------------------------------------------------------------------------


def test_rollback_leaves_caches_equal_to_plain_prefill(session):
    target = session.target
    prompt = target.tokenizer.encode(PROMPTS[1])
    drafter = FullModelDrafter(session.draft, target_vocab=target.vocab_size)
    loop = RoundLoop.with_drafter(
        target=target, drafter=drafter, prompt=prompt,
        request=GenerationRequest(max_tokens=40, memory_interval_s=1e9),
        rule=RULE_GREEDY, width=4, cancel=None,
    )
    checked = 0
    for ev in loop.run():
        if not isinstance(ev, RoundEvent) or ev.record.accepted == ev.record.proposed:
            continue
        # target: cache holds committed minus pending
        assert loop.cache[0].offset == len(loop.committed) - len(loop.pending)
        pend = mx.array(loop.pending, dtype=mx.uint32)
        ours = target.model(pend[None], cache=loop.cache)[0, -1]
        for c in loop.cache:
            c.trim(len(loop.pending))
        ref = target.model(mx.array(loop.committed)[None])[0, -1]
        assert mx.allclose(ours, ref, atol=1e-4).item()
        # draft: cache holds committed minus the drafter's pending tokens
        dp = drafter.pending
        assert drafter.cache[0].offset == len(loop.committed) - len(dp)
        d_ours = drafter.draft.model(mx.array(dp)[None], cache=drafter.cache)[0, -1]
        for c in drafter.cache:
            c.trim(len(dp))
        d_ref = drafter.draft.model(mx.array(loop.committed)[None])[0, -1]
        assert mx.allclose(d_ours, d_ref, atol=1e-4).item()
        checked += 1
    assert checked >= 2


# -- timings ----------------------------------------------------------------------------


@pytest.mark.parametrize("kind", ["none", "prompt-lookup", "full-model"])
def test_timings_add_up(session, kind):
    done, events = run(session, prompt=PROMPTS[0] + " the mat. The", max_tokens=40,
                       draft_kind=kind)
    t = done.timings
    tokens = [e for e in events if isinstance(e, TokenEvent) and e.token_id >= 0]
    rounds = [e.record for e in events if isinstance(e, RoundEvent)]
    assert t.predicted_n == len(done.token_ids) == len(tokens)
    assert [e.token_id for e in tokens] == list(done.token_ids)
    assert "".join(e.text for e in events if isinstance(e, TokenEvent)) == done.text
    assert 0 <= t.draft_n_accepted <= t.draft_n
    assert t.draft_rounds == len(rounds) == len(done.rounds)
    assert sum(r.proposed for r in rounds) == t.draft_n
    assert sum(r.accepted for r in rounds) == t.draft_n_accepted
    assert sum(e.from_draft for e in tokens) == t.draft_n_accepted
    assert t.verify_passes >= t.draft_rounds
    eos = done.finish_reason == "stop"
    assert t.tokens_per_verify == pytest.approx((t.predicted_n + eos) / t.verify_passes)
    assert t.tokens_per_verify >= 1.0 or t.draft_rounds == 0
    assert t.predicted_per_second > 0 and t.prompt_n == len(session.encode(
        GenerationRequest(prompt=PROMPTS[0] + " the mat. The", chat=False)))
    if kind == "none":
        assert t.draft_n == 0 and not rounds
    else:
        assert t.accept_len_mean == pytest.approx(t.draft_n_accepted / t.draft_rounds)


# -- stop conditions and cancellation -------------------------------------------------------


def test_stop_matcher_across_boundaries():
    m = StopMatcher(("STOP",))
    shown = m.feed("abc ST") + m.feed("O") + m.feed("P tail")
    assert shown == "abc " and m.stopped and m.final_text == "abc "
    m = StopMatcher(("STOP",))
    shown = m.feed("a ST") + m.feed("ar") + m.flush()
    assert shown == "a STar" and not m.stopped


@pytest.mark.parametrize("kind", ["none", "prompt-lookup", "full-model"])
def test_stop_string_across_tokens(session, kind):
    plain, _ = run(session, prompt=PROMPTS[0], max_tokens=40)
    text = plain.text
    stop = text[10:14]  # four characters somewhere inside the output
    done, events = run(session, prompt=PROMPTS[0], max_tokens=40, stop=(stop,),
                       draft_kind=kind)
    assert done.finish_reason == "stop"
    assert done.text == text[: text.index(stop)]
    assert "".join(e.text for e in events if isinstance(e, TokenEvent)) == done.text


@pytest.mark.parametrize("kind", ["none", "prompt-lookup", "full-model"])
def test_eos_and_max_tokens(pair_dirs, kind):
    s = Session()
    s.load_target(pair_dirs["target"])
    s.load_draft(pair_dirs["good"])
    plain, _ = run(s, prompt=PROMPTS[0], max_tokens=30)
    assert plain.finish_reason == "length" and len(plain.token_ids) == 30
    eos_tok = plain.token_ids[12]
    first = plain.token_ids.index(eos_tok)
    s.target.tokenizer._eos_token_ids.add(eos_tok)
    done, _ = run(s, prompt=PROMPTS[0], max_tokens=30, draft_kind=kind)
    assert done.finish_reason == "stop"
    assert done.token_ids == plain.token_ids[:first]
    short, _ = run(s, prompt=PROMPTS[1], max_tokens=5, draft_kind=kind)
    assert len(short.token_ids) <= 5


@pytest.mark.parametrize("kind", ["none", "full-model"])
def test_cancel_mid_generation(session, kind):
    cancel = threading.Event()
    seen = 0
    done = None
    for ev in session.generate(
        GenerationRequest(prompt=PROMPTS[2], chat=False, max_tokens=200, draft_kind=kind),
        cancel=cancel,
    ):
        if isinstance(ev, TokenEvent):
            seen += 1
            if seen == 5:
                cancel.set()
        if isinstance(ev, DoneEvent):
            done = ev
    assert done is not None and done.finish_reason == "cancelled"
    assert 5 <= len(done.token_ids) < 5 + 8  # stopped within one round
    # the session still works afterwards
    again, _ = run(session, prompt=PROMPTS[2], max_tokens=8, draft_kind=kind)
    assert again.finish_reason == "length"


# -- fallbacks and bad input ---------------------------------------------------------------


def test_full_model_without_draft_falls_back_loudly(pair_dirs):
    s = Session()
    s.load_target(pair_dirs["target"])
    done, events = run(s, prompt=PROMPTS[0], max_tokens=8, draft_kind="full-model")
    notices = [e for e in events if isinstance(e, NoticeEvent)]
    assert notices and "draft" in notices[0].message
    assert done.timings.fallback and done.timings.draft_kind == "none"
    strict = list(s.generate(GenerationRequest(prompt="x", chat=False, draft_kind="full-model",
                                               allow_fallback=False)))
    assert strict[-1].finish_reason == "error" and "draft" in strict[-1].error


def test_recurrent_target_speculates_exactly(tmp_path):
    """A Mamba target (recurrent state, no trim) used to fall back; it now rewinds exactly."""
    from mlx_lm.models import mamba
    from mlx_lm.utils import save_config, save_model

    from tests.builders import write_tokenizer

    n = write_tokenizer(tmp_path)
    cfg = {"model_type": "mamba", "vocab_size": n, "hidden_size": 32, "intermediate_size": 64,
           "state_size": 8, "num_hidden_layers": 1, "conv_kernel": 4, "use_bias": False,
           "use_conv_bias": True, "time_step_rank": 4, "tie_word_embeddings": True}
    model = mamba.Model(mamba.ModelArgs.from_dict(cfg))
    save_model(tmp_path, model)
    save_config(cfg, config_path=tmp_path / "config.json")
    s = Session()
    s.load_target(tmp_path)
    plain, _ = run(s, prompt="Hello Hello Hello", max_tokens=12)
    done, events = run(s, prompt="Hello Hello Hello", max_tokens=12, draft_kind="prompt-lookup",
                       allow_fallback=False)
    assert done.timings.fallback is None and not any(isinstance(e, NoticeEvent) for e in events)
    assert done.token_ids == plain.token_ids and done.timings.draft_n > 0


def test_incompatible_draft_is_refused(pair_dirs, tmp_path):
    s = Session()
    s.load_target(pair_dirs["target"])
    bad = make_checkpoint(tmp_path / "perm", tokenizer_kwargs={"permute_seed": 7})
    from app.errors import ModelLoadError

    with pytest.raises(ModelLoadError, match="number their tokens differently"):
        s.load_draft(bad)


def test_chat_template_applied(session):
    ids = session.encode(GenerationRequest(prompt="hi", chat=True, system_prompt="Be brief."))
    text = session.target.tokenizer.decode(ids)
    assert text.startswith("<|im_start|>system\nBe brief.<|im_end|>")
    assert text.endswith("<|im_start|>assistant\n")


# -- prompt lookup internals ------------------------------------------------------------------


def test_ngram_index_finds_latest_earlier_occurrence():
    idx = NgramIndex(2, 3)
    idx.extend([1, 2, 3, 4, 9, 1, 2, 3, 5, 7, 1, 2, 3])
    cont, n = idx.lookup(3)
    assert n == 3 and cont == [5, 7, 1]
    # the match is measured back past the n-gram while the tokens before both agree
    idx3 = NgramIndex(2, 3)
    idx3.extend([8, 6, 4, 1, 2, 3, 5, 9, 6, 4, 1, 2, 3])
    assert idx3.lookup(2) == ([5, 9], 5)
    idx2 = NgramIndex(2, 3)
    idx2.extend([1, 2, 3, 4])
    assert idx2.lookup(3) == ([], 0)


def test_prompt_lookup_adaptive_pauses_and_resumes():
    d = PromptLookupDrafter(ngram_min=1, ngram_max=2, pause_after=2)
    d.begin([1, 2, 1, 2, 1, 2], SamplingParams())
    for _ in range(2):
        p = d.propose([], 4)
        assert p is not None and p.k > 0
        d.observe([], p, 0, [1])  # nothing accepted
    assert d.paused and d.n_pauses == 1
    # while paused nothing is proposed, but the lookup keeps running in the shadow
    assert d.propose([], 4) is None and d.shadow
    d.observe([], None, 0, [d.shadow[0] + 100])  # the lookup would have been wrong
    assert d.paused
    d.observe([], None, 0, [1])
    assert d.propose([], 4) is None and d.shadow
    d.observe([], None, 0, [d.shadow[0]])  # it would have been right: resume
    assert not d.paused and d.n_resumes == 1
    assert d.propose([], 4) is not None
