"""Suffix decoding in the engine: exact, proposing from earlier replies of its own scope only,
within the session's cap."""

from __future__ import annotations

import pytest

from app import kinds
from app.engine.events import (
    RULE_GREEDY,
    RULE_SAMPLE_MATCH,
    DoneEvent,
    GenerationRequest,
    SamplingParams,
)
from app.engine.session import Session
from app.engine.suffix_memory import scope_for_key
from tests.builders import make_trained_checkpoint

PROMPTS = ["The cat sat on", "def add(a", "Once upon a time", "Hello! How can"]


def suffix_kind() -> str:
    return next(p.name for p in kinds.drafting() if p.keeps_replies)


@pytest.fixture(scope="module")
def session(tmp_path_factory) -> Session:
    root = tmp_path_factory.mktemp("suffix_models")
    s = Session()
    s.load_target(make_trained_checkpoint(root / "target", seed=1, steps=150))
    return s


def run(session: Session, **kw) -> DoneEvent:
    done = list(session.generate(GenerationRequest(chat=False, **kw)))[-1]
    assert isinstance(done, DoneEvent) and done.finish_reason != "error", done
    return done


def test_greedy_identity_first_use_and_warmed(session):
    kind = suffix_kind()
    warm_accepted = first_accepted = 0
    for i, prompt in enumerate(PROMPTS):
        scope = f"test/identity/{i}"
        plain = run(session, prompt=prompt, max_tokens=40)
        first = run(session, prompt=prompt, max_tokens=40, draft_kind=kind, reply_scope=scope)
        warmed = run(session, prompt=prompt, max_tokens=40, draft_kind=kind, reply_scope=scope)
        assert first.token_ids == plain.token_ids, prompt
        assert warmed.token_ids == plain.token_ids, prompt
        assert warmed.timings.acceptance_rule == RULE_GREEDY
        first_accepted += first.timings.draft_n_accepted
        warm_accepted += warmed.timings.draft_n_accepted
    # the kept reply is proposed back: a repeat is where a kept store shows
    assert warm_accepted > first_accepted


def test_sampled_replies_use_the_exact_rule_for_deterministic_proposals(session):
    done = run(session, prompt=PROMPTS[0], max_tokens=16, draft_kind=suffix_kind(),
               reply_scope="test/sampled", sampling=SamplingParams(temperature=0.7, seed=3))
    assert done.timings.acceptance_rule == RULE_SAMPLE_MATCH


def test_one_keys_replies_are_never_proposed_to_another_key(session):
    kind = suffix_kind()
    a, b = scope_for_key("key-a"), scope_for_key("key-b")
    secret = run(session, prompt=PROMPTS[2], max_tokens=40, draft_kind=kind, reply_scope=a)
    reply = list(secret.token_ids)
    kept = session.replies.index(a)
    assert kept is not None and len(reply) >= 8
    # the whole reply is kept, its last step's tokens included
    assert [list(seq) for seq in kept.seqs.values()] == [reply]

    half = reply[: len(reply) // 2]

    def proposals(scope: str | None) -> list[int]:
        """What the drafter proposes after the reply's first half, in ``scope``."""
        request = GenerationRequest(prompt="x", draft_kind=kind, reply_scope=scope,
                                    adaptive=False)
        drafter = session.make_drafter(request)
        assert drafter is not None
        drafter.begin(half, request.sampling)
        proposal = drafter.propose(half, 8)
        drafter.memory = None  # a probe: keeps nothing
        return [int(t) for t in proposal.tokens.tolist()] if proposal is not None else []

    own_text_only = proposals(None)  # what the half alone gives
    assert proposals(a) != own_text_only  # its own key's kept reply continues it
    assert proposals(a)[:2] == reply[len(half):][:2]
    assert proposals(b) == own_text_only  # another key's reply never does


def test_a_chats_earlier_replies_are_kept_from_its_messages(session):
    kind = suffix_kind()
    earlier = "The answer is forty two, and it is always forty two."
    messages = ({"role": "user", "content": "What is it?"},
                {"role": "assistant", "content": earlier},
                {"role": "user", "content": "Again?"})
    done = list(session.generate(GenerationRequest(messages=messages, chat=False,
                                                   draft_kind=kind, max_tokens=4,
                                                   reply_scope="chat:seeded")))[-1]
    assert done.finish_reason != "error", done.error
    kept = session.replies.index("chat:seeded")
    assert kept is not None
    encoded = list(session.target.tokenizer.encode(earlier, add_special_tokens=False))
    assert any(list(seq) == encoded for seq in kept.seqs.values())


def test_unloading_the_target_forgets_the_replies(tmp_path):
    s = Session(reply_memory_bytes=1_000_000)
    s.load_target(make_trained_checkpoint(tmp_path / "t", seed=1, steps=5))
    run(s, prompt="Hi", max_tokens=8, draft_kind=suffix_kind(), reply_scope="x")
    assert s.replies.stats().replies == 1 and s.replies.cap_bytes == 1_000_000
    s.unload()
    assert s.replies.stats().replies == 0
