"""The auto kind's choice: which source proposes each round, how wide, or a plain step."""

from __future__ import annotations

from app.engine.auto_costs import HostWork, catch_up_cost
from app.engine.auto_evidence import Evidence, copy_key, copy_match, expected_tokens
from app.engine.auto_memory import Memory
from app.engine.auto_policy import AutoPolicy
from app.engine.events import SamplingParams


def flat(n: int, context: int) -> float:
    """A GPU-like table: a pass over up to 16 tokens costs about one plain step."""
    return 1.0 if n <= 16 else n / 16


def cpu_like(n: int, context: int) -> float:
    """A CPU-like table: every verified token adds a third of a step (more with context)."""
    return 1.0 + (0.33 + context / 100_000) * (n - 1)


def taught(rate: float, rounds: int = 30, width: int = 16) -> Evidence:
    """Evidence of a source whose every proposal is accepted with ``rate`` (given the ones
    before it): the expected counts per depth."""
    ev = Evidence(seen=rounds, seen_hits=rounds * rate)
    reach = 1.0
    ev.reached = [0.0] * width
    ev.hits = [0.0] * width
    for j in range(width):
        ev.reached[j] = rounds * reach
        ev.hits[j] = rounds * reach * rate
        reach *= rate
    return ev


def policy(table, rates: dict[str, float], widths: dict[str, int] | None = None,
           draft_cost: dict | None = None) -> AutoPolicy:
    widths = widths or {name: 16 for name in rates}
    return AutoPolicy(widths, verify_cost=table, draft_cost=draft_cost,
                      evidence={n: taught(r) for n, r in rates.items()})


def test_flat_table_drafts_wide_and_cpu_table_narrow():
    on_gpu = policy(flat, {"dflash": 0.8}).choose(room=64, context=100)
    on_cpu = policy(cpu_like, {"dflash": 0.8}).choose(room=64, context=100)
    assert on_gpu is not None and on_cpu is not None
    assert on_gpu.width >= 10  # almost free to verify: as wide as acceptance carries
    assert on_cpu.width <= 4  # each verified token costs: only the likely ones
    assert on_gpu.width > on_cpu.width


def test_weak_source_decodes_plainly_on_cpu_but_drafts_on_flat_table():
    assert policy(cpu_like, {"mtp": 0.25}).choose(room=64, context=100) is None
    gpu = policy(flat, {"mtp": 0.25}).choose(room=64, context=100)
    assert gpu is not None and gpu.source == "mtp"


def test_longer_context_makes_rounds_narrower_or_plain():
    p = policy(cpu_like, {"mtp": 0.6})
    short = p.choose(room=64, context=100)
    long = p.choose(room=64, context=60_000)
    assert short is not None
    assert long is None or long.width <= short.width


def test_source_with_better_acceptance_wins():
    p = policy(cpu_like, {"mtp": 0.5, "full-model": 0.85})
    c = p.choose(room=64, context=100)
    assert c is not None and c.source == "full-model"


def test_drafting_cost_counts():
    costly = {"full-model": lambda k: 0.5 * k, "mtp": lambda k: 0.02 * k}
    p = policy(cpu_like, {"mtp": 0.7, "full-model": 0.75}, draft_cost=costly)
    c = p.choose(room=64, context=100)
    assert c is not None and c.source == "mtp"


def test_copy_is_valued_up_to_its_length_and_absent_sources_are_skipped():
    c = policy(flat, {"prompt-lookup": 0.95, "mtp": 0.6}).choose(
        room=64, context=100, fixed={"prompt-lookup": 12})
    assert c is not None and (c.source, c.width) == ("prompt-lookup", 12)  # never past it
    p = policy(cpu_like, {"prompt-lookup": 0.95, "mtp": 0.6})
    c = p.choose(room=64, context=100, fixed={"prompt-lookup": 12})
    assert c is not None and c.source == "prompt-lookup" and 4 <= c.width < 12
    c = p.choose(room=64, context=100, absent=frozenset({"prompt-lookup"}))
    assert c is not None and c.source == "mtp"


def test_plain_steps_probe_again_and_back_off_after_failed_probes():
    p = policy(cpu_like, {"mtp": 0.05})
    choices = [p.choose(room=64, context=100) for _ in range(16)]
    assert choices[:15] == [None] * 15
    probe = choices[15]
    assert probe is not None and probe.probe and probe.width == 1
    p.observe("mtp", 1, 0)  # the probe failed: the next one waits twice as long
    assert p.probe_interval == 32
    choices = [p.choose(room=64, context=100) for _ in range(32)]
    assert all(c is None for c in choices[:31]) and choices[31] is not None


def test_evidence_learns_online_and_ages_toward_its_long_run_rate():
    good, bad = Evidence(), Evidence()
    assert good.rates(1)[0] == good.prior  # nothing seen: the prior
    for _ in range(20):
        good.observe(4, 4)
        bad.observe(4, 0)
    assert good.rates(4)[0] > 0.9 and bad.rates(1)[0] < 0.15
    for _ in range(300):
        good.age()
        bad.age()
    # the recent counts fade toward what each did over the reply, not toward the prior
    assert good.rates(1)[0] > 0.85 and bad.rates(1)[0] < 0.15
    assert good.rounds < 1e-3  # while a new round weighs as much as it did at the start
    good.observe(1, 0)
    assert good.rates(1)[0] < 0.7


def test_memory_keeps_a_chats_evidence_and_forgets_the_oldest():
    mem = Memory(size=2)
    chat = mem.for_chat("a")
    chat["mtp"] = Evidence(prior=0.9)
    assert mem.for_chat("a")["mtp"].prior == 0.9
    assert mem.for_chat(None) == {}
    mem.for_chat("b")
    mem.for_chat("c")
    assert mem.for_chat("a") == {}


def test_expected_tokens():
    assert expected_tokens([0.5, 0.5], 2) == 1.75
    assert expected_tokens([], 0) == 1.0


def test_one_missed_round_does_not_shut_a_source_out():
    p = policy(flat, {"dflash": 0.45})
    p.evidence["mtp"] = Evidence()
    p.widths["mtp"] = 4
    p.observe("mtp", 2, 0)  # its only round missed
    c = p.choose(room=64, context=100)
    assert c is not None and c.source == "mtp"  # thin evidence: tried again
    for _ in range(10):
        p.observe("mtp", 2, 0)
    c = p.choose(room=64, context=100)
    assert c is not None and c.source == "dflash"  # missed again and again: dropped


def test_overhead_is_measured_per_source():
    p = policy(cpu_like, {"mtp": 0.6, "dflash": 0.6})
    p.observe_time(None, 0, 100.0, 100)  # a plain step: 100 ms
    p.observe_time("dflash", 3, 400.0, 100)  # a dear round: more than its model says
    assert p.timing.overhead["dflash"] > 0 and "mtp" not in p.timing.overhead
    assert p.round_cost("dflash", 3, 100) > p.round_cost("mtp", 3, 100)


def test_a_source_not_yet_tried_is_priced_with_what_other_rounds_took():
    """Rounds of any source that cost more than the table's pass (the verdict, the host's
    work) price the sources the reply has not tried yet too; one round that met a pause
    moves that shared figure not at all."""
    p = policy(cpu_like, {"mtp": 0.6, "dflash": 0.6})
    bare = p.round_cost("mtp", 1, 100)
    p.observe_time(None, 0, 100.0, 100)  # a plain step: 100 ms
    p.observe_time("dflash", 1, 100.0 * (p.round_cost("dflash", 1, 100) + 3.0), 100)  # a pause
    assert p.timing.excess == 0.0 and p.round_cost("mtp", 1, 100) == bare
    for _ in range(4):  # every round a fifth of a step dearer than its model
        model = p.round_cost("dflash", 1, 100) - p.overhead_of("dflash")
        p.observe_time("dflash", 1, 100.0 * (model + 0.2), 100)
    assert abs(p.timing.excess - 0.2) < 1e-6
    assert abs(p.round_cost("mtp", 1, 100) - (bare + 0.2)) < 1e-6
    p.observe_time("mtp", 1, 100.0 * bare, 100)  # its own round, as the table says
    assert p.timing.overhead["mtp"] < 0.2  # its own rounds take over from the shared figure


def test_rounds_that_run_cheaper_than_the_table_says_lower_its_price():
    """The table is measured once, at another moment; where the reply's rounds take less
    than it says against the reply's own plain steps, the rounds are priced as they ran, and
    a source whose rounds paid by that margin only is chosen over a plain step."""
    p = policy(cpu_like, {"mtp": 0.25})
    assert p.choose(room=64, context=100) is None or p.probing  # at the table's price: plain
    bare = p.round_cost("mtp", 1, 100)
    p.observe_time(None, 0, 100.0, 100)  # a plain step: 100 ms
    for _ in range(6):
        p.observe_time("mtp", 1, 100.0 * (bare - 0.15), 100)  # each round 0.15 steps cheaper
    assert p.round_cost("mtp", 1, 100) < bare - 0.1
    assert p.timing.excess < -0.1  # and a source not tried yet is priced so too
    c = p.choose(room=64, context=100)
    assert c is not None and c.source == "mtp"


def test_a_copy_that_was_not_chosen_still_teaches():
    p = policy(cpu_like, {"mtp": 0.6})
    p.evidence["prompt-lookup"] = Evidence()
    p.widths["prompt-lookup"] = 8
    for _ in range(10):
        p.observe_unused("prompt-lookup", 3, 0)  # its copies disagreed with what was committed
    assert p.evidence["prompt-lookup"].rates(1)[0] < 0.2
    for _ in range(20):
        p.observe_unused("prompt-lookup", 2, 2)  # agreed with every token committed
    assert p.evidence["prompt-lookup"].rates(2)[1] > 0.8


def test_plain_steps_do_not_bring_a_losing_source_back_to_full_rounds():
    """A source that lost in every round is left to the probes: however long the plain
    stretch, its evidence does not drift back to the hopeful prior and reopen wide rounds."""
    p = AutoPolicy({"dflash": 16}, verify_cost=cpu_like, draft_cost={"dflash": lambda k: 0.1})
    for _ in range(12):
        p.observe("dflash", 7, 0)
    rounds = [c for c in (p.choose(room=256, context=100) for _ in range(400)) if c]
    assert rounds and all(c.probe and c.width == 1 for c in rounds)


def test_a_guess_is_tried_narrow():
    """Optimism picks which source to try, its evidence how wide: a source known only by its
    prior, valued above plain only with the optimism, is tried with one proposal."""
    p = AutoPolicy({"mtp": 16}, verify_cost=cpu_like, priors={"mtp": 0.4})
    c = p.choose(room=64, context=100)
    assert c is not None and c.source == "mtp" and c.width == 1


def test_catch_up_counts_when_switching():
    """A drafter that must first feed what it missed is dearer to switch to the longer it sat
    out; once it has proposed it is even again."""
    feed = {"full-model": lambda n, context: 0.05 * n}
    p = AutoPolicy({"full-model": 4, "mtp": 4}, verify_cost=cpu_like, catch_up=feed,
                   evidence={"full-model": taught(0.7), "mtp": taught(0.6)})
    c = p.choose(room=64, context=100)
    assert c is not None and c.source == "full-model"
    p.committed(3, "full-model")
    for _ in range(20):
        p.committed(2, "mtp")  # rounds of the MTP head: the draft model falls behind
    assert p.missed["full-model"] == 40 and p.owed("full-model", 100) == 2.0
    c = p.choose(room=64, context=100)
    assert c is not None and c.source == "mtp"  # catching up 40 tokens costs more than 0.1
    near_end = p.value("full-model", 2, 100, room=3)
    assert near_end < p.value("full-model", 2, 100, room=64)  # fewer rounds to share it
    p.committed(2, "full-model")
    assert p.owed("full-model", 100) == 0.0


def test_catch_up_paid_is_not_taken_for_overhead():
    feed = {"mtp": lambda n, context: 0.02 * n}
    p = AutoPolicy({"mtp": 4}, verify_cost=cpu_like, catch_up=feed,
                   evidence={"mtp": taught(0.9)})
    p.observe_time(None, 0, 100.0, 100)
    p.committed(50, None)  # a plain stretch: one more pass to feed at the next proposal
    c = p.choose(room=64, context=100)
    assert c is not None
    modelled = p.round_cost("mtp", c.width, 100) + 1.0  # the round and its catch-up
    p.observe_time("mtp", c.width, 100.0 * modelled, 100)
    assert p.timing.overhead["mtp"] < 0.01


def test_catch_up_cost_follows_the_pass_shape():
    cost = catch_up_cost(0.1, 1, cpu_like, widest=17)
    assert cost(0, 100) == 0.0
    assert 0 < cost(4, 100) < cost(16, 100) < cost(64, 100)
    # past the widest pass measured a pass grows with its tokens, never flat
    assert cost(64, 100) > 3 * cost(16, 100)



def test_a_copy_is_cut_where_its_evidence_says_the_rest_would_not_pay():
    """A copy is known before the choice; it is sent whole where its tokens are often right
    and cut short where they seldom are (each token verified costs on this table)."""
    on_gpu = policy(flat, {"prompt-lookup": 0.9}).choose(room=64, context=100,
                                                        fixed={"prompt-lookup": 16})
    good = policy(cpu_like, {"prompt-lookup": 0.9}).choose(room=64, context=100,
                                                          fixed={"prompt-lookup": 16})
    poor = policy(cpu_like, {"prompt-lookup": 0.45}).choose(room=64, context=100,
                                                           fixed={"prompt-lookup": 16})
    assert on_gpu is not None and on_gpu.width >= 15  # verifying is nearly free: (near) whole
    assert good is not None and 4 <= good.width < 16
    assert poor is not None and poor.width <= 2
    short = policy(cpu_like, {"prompt-lookup": 0.9}).choose(room=3, context=100,
                                                           fixed={"prompt-lookup": 16})
    assert short is not None and short.width <= 3  # the reply's room


def test_copies_are_judged_by_how_far_their_match_runs():
    """A copy after a long match is right far more often than one after a two-token match of
    the same source (the bench suite's plain replies: first token right 0.48-0.54 after 2-3
    tokens, 0.86-0.99 after 16 or more): each match class learns apart, so a poor copy after
    a short match is not sent where one after a long match would be. A match of the prompt's
    text alone counts as none: the reply has not begun repeating."""
    p = AutoPolicy({"prompt-lookup": 16}, verify_cost=cpu_like)
    for _ in range(20):
        p.observe("prompt-lookup", 2, 0, matched=2)  # after short matches: wrong
        p.observe_unused("prompt-lookup", 8, 8, matched=20)  # after long ones: right
    short = p.choose(room=64, context=100, fixed={"prompt-lookup": 16},
                     matched={"prompt-lookup": 3})
    long = p.choose(room=64, context=100, fixed={"prompt-lookup": 16},
                    matched={"prompt-lookup": 20})
    assert short is None  # a plain step pays more than this copy
    assert long is not None and long.width >= 4
    assert copy_key("prompt-lookup", 2) != copy_key("prompt-lookup", 20)
    assert copy_key("suffix", 4) == copy_key("suffix", 7)
    # the chat's turn opening matches an earlier turn's: a class of its own, apart from the
    # copies whose match is the reply's own text (a separator shared with the copied text
    # still counts as the reply's match)
    assert copy_match(7, reply=30) == 7 and copy_match(2, reply=1) == 1
    opening = copy_key("prompt-lookup", copy_match(7, reply=0))
    assert opening == copy_key("prompt-lookup", copy_match(9, reply=2))
    assert opening not in {copy_key("prompt-lookup", m) for m in (0, 1, 2, 7)}
    for _ in range(10):  # the pair's replies do not open as the last one did
        p.observe_unused("prompt-lookup", 4, 0, matched=copy_match(7, reply=0))
    assert p.choose(room=64, context=100, fixed={"prompt-lookup": 16},
                    matched={"prompt-lookup": copy_match(7, reply=0)}) is None
    early = p.choose(room=64, context=100, fixed={"prompt-lookup": 16},
                     matched={"prompt-lookup": copy_match(1, reply=1)})
    assert early is not None  # a copy after the reply's first token is judged as before


def test_a_round_is_timed_against_a_whole_step_not_the_tables_pass_alone():
    """What a round takes beyond its price is its source's overhead; the step it is divided
    by is a whole plain step (the table's pass and the host work), so a round that costs
    exactly its price shows none. Before any plain step was ever timed, the first round's
    time beyond its pass is taken for the host work (a source's overhead is guessed as none)."""
    table_ms, host_ms = 60.0, 15.0
    round_ms = table_ms * cpu_like(2, 100) + host_ms  # a round of one: its pass + host work
    known = HostWork()
    known.ms = host_ms  # the pair's earlier request timed it
    for host in (known, HostWork()):
        p = AutoPolicy({"mtp": 16}, verify_cost=cpu_like, evidence={"mtp": taught(0.5)},
                       step_ms_at=lambda context: table_ms, host=host)
        for _ in range(5):
            p.observe_time("mtp", 1, round_ms, 100)
        assert host.ms is not None and abs(host.ms - host_ms) < 1e-6
        assert abs(p.overhead_of("mtp")) < 1e-6 and abs(p.timing.excess) < 1e-6
        assert abs(p.round_cost("mtp", 1, 100) - round_ms / (table_ms + host_ms)) < 1e-6
        # a round that really takes more shows it
        p.observe_time("mtp", 1, round_ms + 0.5 * (table_ms + host_ms), 100)
        assert 0.05 < p.overhead_of("mtp") < 0.5


def test_host_work_of_every_step_makes_a_wide_pass_cheaper_and_is_kept_for_the_pair():
    """The table times the target's pass alone; a reply's step also does the host's work
    (sampling, bookkeeping) once, however wide. Timed from the plain steps, it prices a pass
    in the reply's own steps, (T(k+1) + h) / (T(1) + h): rounds grow wider, and the pair's
    next request that samples the same way starts from it."""
    memory = Memory()
    greedy = SamplingParams()

    def request(sampling: SamplingParams = greedy) -> AutoPolicy:
        return AutoPolicy({"dflash": 16}, verify_cost=cpu_like,
                          evidence={"dflash": taught(0.7)}, step_ms_at=lambda context: 60.0,
                          host=memory.host(sampling))

    p = request()
    before = p.choose(room=64, context=100)
    assert p.pass_cost(9, 100) == cpu_like(9, 100)  # nothing timed: the table as it is
    for _ in range(10):
        p.observe_time(None, 0, 90.0, 100)  # plain steps of 90 ms: 30 beyond the table's pass
    timed = memory.host(greedy).ms
    assert timed is not None and abs(timed - 30.0) < 1e-6
    assert abs(p.pass_cost(9, 100) - (cpu_like(9, 100) * 60.0 + 30.0) / 90.0) < 1e-9
    assert p.pass_cost(1, 100) == 1.0
    after = p.choose(room=64, context=100)
    assert before is not None and after is not None and after.width > before.width
    first = request().choose(room=64, context=100)  # the next request, before any step of its own
    assert first is not None and first.width == after.width
    sampled = request(SamplingParams(temperature=0.7))  # drawing tokens: its own host work
    assert sampled.pass_cost(9, 100) == cpu_like(9, 100)


def test_plain_steps_time_the_host_work_when_only_a_rounds_guess_stands_for_it():
    """A round's time beyond its pass holds its own costs too (sampling every position, the
    verdict), so the host work guessed from it prices a plain step too dear and every round
    looks cheaper than it is: a source whose rounds lose to plain steps seems to pay, and a
    reply that drafts at every step would never find out. The reply takes its second and
    third steps plain while the host work has been timed from fewer than two; what they show
    replaces the guess, the source is priced honestly and plain steps win; a reply of a pair
    whose host work was timed takes no such step."""
    table_ms, host_ms, round_extra_ms = 60.0, 10.0, 14.0

    def table(n: int, context: int) -> float:  # a pass over two tokens: 1.1 of one
        return 1.0 + 0.1 * (n - 1)

    # a round of one that the target accepts 15% of the time, whose own work beyond the
    # pass and the host work takes 14 ms: 1.15 tokens for (66 + 10 + 14) / 70 = 1.29 steps
    round_ms = table_ms * table(2, 100) + host_ms + round_extra_ms
    host = HostWork()
    p = AutoPolicy({"eagle3": 1}, verify_cost=table, evidence={"eagle3": taught(0.15)},
                   step_ms_at=lambda context: table_ms, host=host)
    first = p.choose(room=64, context=100)
    assert first is not None and first.source == "eagle3"
    p.observe_time("eagle3", 1, round_ms, 100)  # a fresh start: the round's time is a guess
    assert host.ms is not None and host.ms > host_ms + round_extra_ms / 2 and host.timed == 0
    assert p.value("eagle3", 1, 100) > 1.0  # the guess makes the losing round look paying
    for _ in range(2):  # the reply's second and third steps time a plain step
        assert p.choose(room=64, context=100) is None
        p.observe_time(None, 0, table_ms + host_ms, 100)
    assert host.timed == 2 and abs(host.ms - host_ms) < 1e-6
    for _ in range(6):
        p.observe_time("eagle3", 1, round_ms, 100)
    assert p.value("eagle3", 1, 100) < 1.0
    assert p.choose(room=64, context=100) is None  # plain steps pay more
    # the next request of the pair starts from the timed host work: no timing steps
    again = AutoPolicy({"eagle3": 1}, verify_cost=table, evidence={"eagle3": taught(0.5)},
                       step_ms_at=lambda context: table_ms, host=host)
    assert all(again.choose(room=64, context=100) is not None for _ in range(4))


def _record_that_condemned_mtp():
    """A pair's record of four MTP head rounds, all wrong (on a rewrite, where copies had taken
    the easy places), and forty draft-model rounds right half the time."""
    history = Memory().history(SamplingParams())
    for _ in range(4):
        history.observe("mtp", 1, 0)
    for _ in range(40):
        history.observe("full-model", 2, 1)
    return history


def test_a_source_the_pairs_record_condemned_on_other_text_gets_one_narrow_try():
    """The pair's record held four rounds of the MTP head, all wrong (on a rewrite, where
    copies had taken the easy places), so a request starts it far below the draft model and
    its value never beats the draft model's: without a try it is never chosen, though on this
    text it is the better one. Once a few steps have run, each model source the reply has not
    tried gets one round of one proposal, not while a copy is on offer, and once only."""
    history = _record_that_condemned_mtp()
    p = AutoPolicy({"mtp": 4, "full-model": 4, "prompt-lookup": 16},
                   verify_cost=lambda n, c: 1.0 + 0.05 * (n - 1), history=history)
    assert p.value("mtp", 1, 100, p.hopeful_rates("mtp", 1)) < p.best("full-model", 4, 100)[1]
    for _ in range(3):
        pick = p.choose(room=64, context=100, absent=frozenset({"prompt-lookup"}))
        assert pick is not None and pick.source == "full-model"
        p.observe("full-model", pick.width, 1)
    copy = p.choose(room=64, context=100, fixed={"prompt-lookup": 8},
                    matched={"prompt-lookup": 20})
    assert copy is not None and copy.source == "prompt-lookup"  # a copy on offer: no try now
    tried = p.choose(room=64, context=100, absent=frozenset({"prompt-lookup"}))
    assert tried is not None and tried.source == "mtp" and tried.width == 1
    p.observe("mtp", 1, 1)  # right this time: its own evidence now speaks for it
    assert p.evidence["mtp"].rates(1)[0] > history.start("mtp").rates(1)[0]
    later = [p.choose(room=64, context=100, absent=frozenset({"prompt-lookup"}))
             for _ in range(3)]
    assert all(c is not None and not c.probe for c in later)  # one try, not one per step


def test_a_cheap_drafter_is_scored_beside_other_rounds_until_its_evidence_speaks():
    """The MTP head's one try may miss by bad luck, and then the draft model, a little ahead on
    the record's hope, is chosen at every step. A drafter whose one proposal costs one cheap
    step is scored beside the chosen round instead (a peek, against the committed token):
    while it has seen few rounds, never when it is the one chosen; what it scores moves its
    rates as a round of one would, and it is even again with the tokens it fed."""
    from app.engine.auto_policy import PEEK_SEEN

    history = _record_that_condemned_mtp()
    p = AutoPolicy({"mtp": 4, "full-model": 4},
                   verify_cost=lambda n, c: 1.0 + 0.05 * (n - 1), history=history,
                   catch_up={"mtp": lambda missed, c: 0.01 * missed})
    start = p.evidence["mtp"].rates(1)[0]
    assert p.to_peek(["mtp"], chosen="mtp") == []
    peeks = 0
    for step in range(3 * PEEK_SEEN):
        pick = p.choose(room=64, context=100)
        chosen = pick.source if pick is not None else None
        asked = p.to_peek(["mtp"], chosen)
        if asked:
            peeks += 1
            p.observe_peek("mtp", True)  # right at every peek: the head fits this text
        if pick is not None:
            # on this text the head is right every time, the draft model half the time
            p.observe(pick.source, pick.width, pick.width if pick.source == "mtp" else step % 2)
        p.committed(2, chosen, peeked=frozenset(asked))
        if asked:
            assert p.missed["mtp"] == 0
    assert 0 < peeks <= PEEK_SEEN  # only while its evidence was thin
    assert p.evidence["mtp"].rates(1)[0] > max(start, p.evidence["full-model"].rates(1)[0])
    assert p.choose(room=64, context=100).source == "mtp"  # type: ignore[union-attr]
