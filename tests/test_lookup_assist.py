"""Prompt lookup beside a model drafter: copy rounds where the reply repeats the context.

Real tiny checkpoints (a trained llama pair, a Qwen3.5 target with random ``mtp.*``), the real
round loop. Copy rounds must keep outputs exact (greedy identity, the sampled distribution),
must not be taken for the model drafter's own evidence, and must stay off when switched off.
"""

from __future__ import annotations

from collections import Counter
from types import SimpleNamespace

import pytest

from app.engine import verify_step
from app.engine.drafters import lookup_assist
from app.engine.events import RULE_SAMPLE_MATCH, DoneEvent, GenerationRequest, SamplingParams
from app.engine.session import Session
from tests.builders import make_trained_checkpoint
from tests.builders_mtp import make_qwen3_5_checkpoint
from tests.test_engine import _chi2, _chi2_sf, _exact_sequence_probs, _top1_matching_verify

# a reply of the trained target that starts by repeating what the prompt already says
REPEATING = "The cat sat on the mat. The dog sat on the log. The cat sat"


@pytest.fixture(scope="module")
def models(tmp_path_factory):
    root = tmp_path_factory.mktemp("assist-models")
    return SimpleNamespace(
        target=make_trained_checkpoint(root / "target", seed=1, steps=150),
        draft=make_trained_checkpoint(root / "draft", seed=3, hidden_size=32, num_layers=1,
                                      steps=25),
        qwen=make_qwen3_5_checkpoint(root / "q35-mtp"),
    )


@pytest.fixture(scope="module")
def pair(models) -> Session:
    s = Session()
    s.load_target(models.target)
    s.load_draft(models.draft)
    return s


def _done(session: Session, **kw) -> DoneEvent:
    events = list(session.generate(GenerationRequest(chat=False, **kw)))
    done = events[-1]
    assert isinstance(done, DoneEvent) and done.finish_reason != "error", done
    return done


@pytest.mark.parametrize("kind", ["full-model", "mtp"])
def test_copy_rounds_keep_greedy_output(models, pair, kind):
    """A prompt that repeats itself: the lookup proposes copies, the model drafter runs in
    between, and the output is plain decoding's. Switched off, no round is a copy."""
    session = pair
    prompt: dict = {"prompt": REPEATING}
    if kind == "mtp":
        session = Session()
        session.load_target(models.qwen)
        seg = [5, 17, 42, 99, 7, 150, 23, 64, 11, 90]
        prompt = {"prompt_tokens": tuple(seg + seg + seg[:4])}
    plain = _done(session, max_tokens=40, **prompt)
    on = _done(session, max_tokens=40, draft_kind=kind, draft_width=3, **prompt)
    off = _done(session, max_tokens=40, draft_kind=kind, draft_width=3, lookup_assist=False,
                **prompt)
    assert on.token_ids == plain.token_ids == off.token_ids
    copies = [r for r in on.rounds if r.copied]
    assert copies, "the repeated prompt gave the lookup nothing to copy"
    assert all(r.proposed <= lookup_assist.MAX_WIDTH for r in copies)
    assert not any(r.copied for r in off.rounds)
    assert on.timings.fallback is None


def test_copy_rounds_are_not_the_drafters_evidence(pair, monkeypatch):
    """With the width policy on (fixed to draft every step), it sees the model drafter's
    rounds only, in acceptance and in timing; the drafter observes a copy round's tokens as
    committed text (proposal None). The counts land in the timings."""
    from app.engine.drafters.full_model import FullModelDrafter
    from app.engine.width import FixedWidth

    seen_policy: list[tuple[int, int]] = []
    timed: list[int] = []
    others: list[bool] = []
    seen_drafter: list[bool] = []
    real_drafter_observe = FullModelDrafter.observe

    class Recording(FixedWidth):  # a round every step, and what the policy is told
        def observe(self, proposed, accepted):
            seen_policy.append((proposed, accepted))
            return super().observe(proposed, accepted)

        def observe_time(self, k, ms):
            timed.append(k)
            return super().observe_time(k, ms)

        def observe_other(self):
            others.append(True)
            return super().observe_other()

    def drafter_observe(self, committed, proposal, accepted, new_tokens, hidden=None):
        seen_drafter.append(proposal is not None)
        return real_drafter_observe(self, committed, proposal, accepted, new_tokens, hidden)

    monkeypatch.setattr(pair, "width_policy", Recording)
    monkeypatch.setattr(FullModelDrafter, "observe", drafter_observe)
    done = _done(pair, prompt=REPEATING, max_tokens=40, draft_kind="full-model", draft_width=3)
    own = [r for r in done.rounds if not r.copied]
    copies = [r for r in done.rounds if r.copied]
    assert copies and len(own) >= 3
    assert [(r.proposed, r.accepted) for r in own] == seen_policy
    assert len(others) == len(copies) and sum(k > 0 for k in timed) == len(own)
    # every own round is the drafter's evidence, but the last step's when the reply ended
    assert len(own) - 1 <= sum(seen_drafter) <= len(own)
    t = done.timings
    assert t.copy_rounds == len(copies) and t.draft_rounds == len(done.rounds)
    assert t.copy_n == sum(r.proposed for r in copies)
    assert t.copy_n_accepted == sum(r.accepted for r in copies) <= t.draft_n_accepted


def _sample(session, prompt_ids, sampling, n, length):
    counts: Counter = Counter()
    copied = 0
    for seed in range(n):
        req = GenerationRequest(
            prompt_tokens=tuple(prompt_ids), draft_kind="full-model", draft_width=2,
            sampling=SamplingParams(temperature=sampling.temperature, top_k=sampling.top_k,
                                    seed=seed),
            max_tokens=length, memory_interval_s=1e9, adaptive=False,
        )
        done = list(session.generate(req))[-1]
        counts[tuple(done.token_ids)] += 1
        copied += sum(r.copied for r in done.rounds)
    return counts, copied


def test_copy_rounds_keep_the_sampled_distribution(pair, monkeypatch):
    """At T > 0 the model drafter's rounds use rejection sampling and copy rounds
    sample-match; together they still sample the target's distribution exactly. The same
    test catches copy rounds verified by top-1 matching."""
    target = pair.target
    # the lookup copies " time"; at T = 2 the target gives it about 0.6, so a rule that took a
    # copy matching the target's top-1 for granted would be far off
    prompt_ids = target.tokenizer.encode("Once upon a time. Once upon a")
    sampling = SamplingParams(temperature=2.0, top_k=3)
    length, n = 3, 1200
    exact = _exact_sequence_probs(target, prompt_ids, sampling, length)
    counts, copied = _sample(pair, prompt_ids, sampling, n, length)
    assert copied > n // 2  # copy rounds really ran
    stat, df = _chi2(counts, exact, n)
    assert _chi2_sf(stat, df) > 1e-3, (stat, df)

    real_verify = verify_step.verify

    def wrong_for_copies(rows, proposal, *, sampling, rule):
        if rule == RULE_SAMPLE_MATCH:  # copy rounds only: the model drafter's stay right
            return _top1_matching_verify(rows, proposal, sampling=sampling, rule=rule)
        return real_verify(rows, proposal, sampling=sampling, rule=rule)

    monkeypatch.setattr(verify_step, "verify", wrong_for_copies)
    wrong, _ = _sample(pair, prompt_ids, sampling, n, length)
    stat_w, df_w = _chi2(wrong, exact, n)
    assert _chi2_sf(stat_w, df_w) < 1e-6, (stat_w, df_w)
