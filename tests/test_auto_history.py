"""The pair's history: a request that starts a chat begins from what each drafter did before."""

from __future__ import annotations

import pytest

from app.engine.auto_evidence import PRIOR_RATE
from app.engine.auto_memory import HISTORY_WEIGHT, History, Memory
from app.engine.auto_policy import AutoPolicy
from app.engine.events import SamplingParams
from tests.test_auto_policy import cpu_like


def _run(policy: AutoPolicy, source: str, rounds: int, proposed: int, accepted: int) -> None:
    for _ in range(rounds):
        policy.observe(source, proposed, accepted)


def test_a_request_starts_from_the_pairs_record_weighed_as_a_few_rounds():
    history = History()
    first = AutoPolicy({"mtp": 4, "dflash": 4}, verify_cost=cpu_like, history=history)
    assert first.evidence["mtp"].rates(1)[0] == pytest.approx(PRIOR_RATE)  # nothing yet
    _run(first, "mtp", 40, 4, 0)  # the head never agreed with this target
    _run(first, "dflash", 40, 4, 3)  # the drafter mostly did
    nxt = AutoPolicy({"mtp": 4, "dflash": 4}, verify_cost=cpu_like, history=history)
    mtp, dflash = nxt.evidence["mtp"], nxt.evidence["dflash"]
    assert mtp.rates(1)[0] < 0.3 < PRIOR_RATE and dflash.rates(3)[2] > 0.7
    assert mtp.rounds == pytest.approx(HISTORY_WEIGHT)  # a few rounds of its own overrule it
    assert mtp.seen == 0  # and they are not its tries in this request: it is still hoped for
    for _ in range(3):
        mtp.observe(4, 4)
    assert 0.35 < mtp.rates(1)[0] < 0.65  # three of its own weigh about as much


def test_a_long_record_is_the_starting_guess_not_the_bare_prior():
    """A drafter the pair has watched for many rounds starts a request near what it did there,
    not between that and the bare prior's guess: one that seldom agreed is not given its first
    round again at every request on a CPU's costs, one that mostly agreed drafts at once."""
    history = History()
    teach = AutoPolicy({"eagle3": 4, "mtp": 4}, verify_cost=cpu_like, history=history)
    for i in range(60):
        teach.observe("eagle3", 1, 1 if i % 10 == 0 else 0)  # one round in ten agreed
        teach.observe("mtp", 1, 0 if i % 10 == 0 else 1)  # nine in ten
    nxt = AutoPolicy({"eagle3": 4, "mtp": 4}, verify_cost=cpu_like, history=history)
    assert nxt.evidence["eagle3"].rates(1)[0] < 0.15
    assert nxt.evidence["mtp"].rates(1)[0] > 0.85
    weak = AutoPolicy({"eagle3": 4}, verify_cost=cpu_like, history=history)
    assert weak.choose(room=64, context=100) is None  # a plain step, not another try
    strong = AutoPolicy({"mtp": 4}, verify_cost=cpu_like, history=history).choose(
        room=64, context=100)
    assert strong is not None and strong.width >= 2


def test_a_short_bad_record_does_not_shut_a_drafter_out_of_the_next_request():
    """Three missed rounds are a hint, not a verdict: each round of the record counts once,
    so the next request still gives the drafter a try (a record counted twice, as counts and
    again in the prior, would leave it plain for good: it would never run to learn more)."""
    history = History()
    _run(AutoPolicy({"mtp": 4}, verify_cost=cpu_like, history=history), "mtp", 3, 1, 0)
    nxt = AutoPolicy({"mtp": 4}, verify_cost=cpu_like, history=history)
    assert nxt.evidence["mtp"].prior == pytest.approx(PRIOR_RATE)
    assert nxt.choose(room=64, context=100) is not None


def _rounds_given(policy: AutoPolicy, steps: int = 60) -> int:
    """Steps of a reply whose only drafter never agrees: the rounds it was given."""
    given = 0
    for _ in range(steps):
        c = policy.choose(room=64, context=100)
        if c is not None:
            given += 1
            policy.observe(c.source, c.width, 0)
        policy.committed(1, c.source if c is not None else None)
    return given


def test_history_spares_a_request_the_rounds_that_relearn_a_weak_drafter():
    """A request that starts from a record where the drafter never agreed gives it fewer
    rounds than one that starts from the prior's hope (CPU-like costs)."""
    fresh = _rounds_given(AutoPolicy({"mtp": 4}, verify_cost=cpu_like))
    history = History()
    _rounds_given(AutoPolicy({"mtp": 4}, verify_cost=cpu_like, history=history))
    _rounds_given(AutoPolicy({"mtp": 4}, verify_cost=cpu_like, history=history))
    taught = _rounds_given(AutoPolicy({"mtp": 4}, verify_cost=cpu_like, history=history))
    assert fresh >= 2 and taught < fresh


def test_one_slow_round_does_not_shut_a_source_out_nor_follow_it_to_the_next_request():
    history = History()
    first = AutoPolicy({"mtp": 4}, verify_cost=cpu_like, history=history)
    first.observe_time(None, 0, 10.0, 100)  # a plain step: 10 ms
    first.observe_time("mtp", 2, 300.0, 100)  # a round that met a pause
    assert 0 < first.timing.overhead["mtp"] <= 0.5  # learnt from nothing, not taken whole
    nxt = AutoPolicy({"mtp": 4}, verify_cost=cpu_like, history=history)
    assert nxt.timing.overhead == {}  # costs are each request's own measurement
    _run(nxt, "mtp", 5, 2, 2)
    history.forget("mtp")
    assert "mtp" not in history.evidence
    assert AutoPolicy({"mtp": 4}, verify_cost=cpu_like,
                      history=history).evidence["mtp"].rates(1)[0] == pytest.approx(PRIOR_RATE)


def test_a_chat_keeps_its_own_evidence_over_the_history():
    mem = Memory()
    record = mem.history(SamplingParams())
    chat = mem.for_chat("a")
    AutoPolicy({"mtp": 4}, verify_cost=cpu_like, evidence=chat, history=record)
    _run(AutoPolicy({"mtp": 4}, verify_cost=cpu_like, evidence={}, history=record),
         "mtp", 30, 2, 0)  # other requests found the head poor
    chat["mtp"].observe(2, 2)
    again = AutoPolicy({"mtp": 4}, verify_cost=cpu_like, evidence=mem.for_chat("a"),
                       history=record)
    assert again.evidence["mtp"] is chat["mtp"]  # the chat's own, not the record's
    assert again.evidence["mtp"].rates(1)[0] > 0.6


def test_greedy_and_sampled_requests_keep_their_own_records():
    """What drafters did at temperature 0 is not where a request sampling at 0.7 starts:
    proposals are accepted far less often when the target samples."""
    mem = Memory()
    greedy = mem.history(SamplingParams(temperature=0.0))
    _run(AutoPolicy({"mtp": 4}, verify_cost=cpu_like, history=greedy), "mtp", 30, 4, 4)
    assert mem.history(SamplingParams()) is greedy
    again = AutoPolicy({"mtp": 4}, verify_cost=cpu_like, history=mem.history(SamplingParams()))
    assert again.evidence["mtp"].rates(1)[0] > 0.8  # a greedy request starts from it
    hot = mem.history(SamplingParams(temperature=0.7))
    assert hot is not greedy and mem.history(SamplingParams(temperature=0.7)) is hot
    sampled = AutoPolicy({"mtp": 4}, verify_cost=cpu_like, history=hot)
    assert sampled.evidence["mtp"].rates(1)[0] == pytest.approx(PRIOR_RATE)
    mem.forget("mtp")  # another drafter loaded: forgotten under every way of sampling
    assert "mtp" not in greedy.evidence
