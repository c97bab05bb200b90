"""The auto kind's choice: which source proposes each round, how wide, or a plain step."""

from __future__ import annotations

from app.engine.auto_policy import AutoPolicy, Evidence, Memory, expected_tokens


def flat(n: int, context: int) -> float:
    """A GPU-like table: a pass over up to 16 tokens costs about one plain step."""
    return 1.0 if n <= 16 else n / 16


def cpu_like(n: int, context: int) -> float:
    """A CPU-like table: every verified token adds a third of a step (more with context)."""
    return 1.0 + (0.33 + context / 100_000) * (n - 1)


def taught(rate: float, rounds: int = 30, width: int = 16) -> Evidence:
    """Evidence of a source whose every proposal is accepted with ``rate`` (given the ones
    before it): the expected counts per depth."""
    ev = Evidence()
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


def test_copy_is_valued_at_its_length_and_absent_sources_are_skipped():
    p = policy(cpu_like, {"prompt-lookup": 0.95, "mtp": 0.6})
    c = p.choose(room=64, context=100, fixed={"prompt-lookup": 12})
    assert c is not None and (c.source, c.width) == ("prompt-lookup", 12)
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


def test_evidence_learns_online_and_ages_toward_its_prior():
    ev = Evidence()
    for _ in range(20):
        ev.observe(4, 4)
    assert ev.rates(4)[0] > 0.9
    for _ in range(300):
        ev.age()
    assert abs(ev.rates(1)[0] - ev.prior) < 0.05


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
    assert p.overhead["dflash"] > 0 and "mtp" not in p.overhead
    assert p.round_cost("dflash", 3, 100) > p.round_cost("mtp", 3, 100)


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
