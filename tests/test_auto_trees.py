"""Auto speculation weighing a tree against a chain: the policy with a flat (GPU-like) and a
CPU-like cost table, and greedy replies on tiny real models that stay identical to plain."""

from __future__ import annotations

from collections import Counter

import mlx.core as mx
import numpy as np

from app import kinds
from app.engine.auto_evidence import RUNNER_PRIOR, Evidence
from app.engine.auto_policy import AutoPolicy
from app.engine.calibration import new_table
from app.engine.events import SamplingParams
from app.engine.proposal import Proposal
from app.engine.tree_build import ONE_PASS_OVERHEAD, NodeBudget, flat_cost
from tests.test_auto import AUTO, _generate, flat_session, pair  # noqa: F401 - the fixture
from tests.test_auto_policy import taught
from tests.test_engine import _chi2, _chi2_sf, _exact_sequence_probs

DRAFTER = "full-model"
CHEAP = {DRAFTER: lambda k: 0.05 * k}  # a small draft model: a twentieth of a step a token


def flat(n: int, context: int) -> float:
    """A GPU-like table: a pass over up to 17 tokens costs one plain step."""
    return 1.0 if n <= 17 else n / 17


def cpu_like(n: int, context: int) -> float:
    """This CPU's shape: a pass over 8 tokens costs about 1.7 steps at 200 context."""
    return 1.0 + (0.1 + context / 200_000) * (n - 1)


def runner_taught(hit: float, misses: int = 30, rate: float = 0.5) -> Evidence:
    """Evidence of proposals accepted at ``rate`` whose rejected ones were the drafter's
    first runner-up ``hit`` of the time and none of its runner-ups otherwise."""
    ev = taught(rate)
    for i in range(misses):
        ev.observe_miss(0 if int((i + 1) * hit) > int(i * hit) else None)  # spread evenly
    return ev


def tree_policy(table, ev: Evidence, *, trees: bool = True, **kw) -> AutoPolicy:
    return AutoPolicy({DRAFTER: 16}, verify_cost=table, draft_cost=CHEAP,
                      evidence={DRAFTER: ev}, trees=frozenset({DRAFTER} if trees else ()),
                      tree_host=ONE_PASS_OVERHEAD, **kw)


def test_flat_table_chooses_a_tree_and_a_cpu_table_does_not():
    assert cpu_like(8, 200) == 1.0 + (0.1 + 0.001) * 7  # verify of 8 ~ 1.7 steps
    on_gpu = tree_policy(flat, runner_taught(0.7)).choose(room=64, context=200)
    assert on_gpu is not None and on_gpu.nodes > on_gpu.width  # leaves beside the chain
    assert on_gpu.nodes <= 16
    # the tree beat the best chain of the same source by the same rule
    chain_k, chain_v = tree_policy(flat, runner_taught(0.7)).best(DRAFTER, 64, 200)
    assert on_gpu.value > chain_v
    on_cpu = tree_policy(cpu_like, runner_taught(0.7)).choose(room=64, context=200)
    assert on_cpu is None or on_cpu.nodes == 0  # every node costs: a chain or plain
    assert on_cpu is not None and on_cpu.width < on_gpu.nodes


def test_trees_follow_the_runner_up_evidence_and_the_request():
    # rejected proposals were never the drafter's runner-ups: leaves would not be accepted
    never = tree_policy(flat, runner_taught(0.0, misses=60)).choose(room=64, context=200)
    assert never is not None and never.nodes == 0
    assert runner_taught(0.0, misses=60).runner_rates()[0] < 0.1
    assert runner_taught(0.7).runner_rates()[0] > 0.6
    # a source whose trees are not allowed (trees off, or its kind grows none): chains
    off = tree_policy(flat, runner_taught(0.7), trees=False).choose(room=64, context=200)
    assert off is not None and off.nodes == 0
    # the choice reads only the evidence: asked twice, it is the same
    p = tree_policy(flat, runner_taught(0.7))
    assert p.choose(room=64, context=200) == p.choose(room=64, context=200)


def test_little_room_keeps_the_tree_within_the_reply():
    c = tree_policy(flat, runner_taught(0.7)).choose(room=2, context=200)
    assert c is not None and c.width <= 2


def test_measured_tree_cost_replaces_the_estimate():
    p = tree_policy(flat, runner_taught(0.7))
    c = p.choose(room=64, context=200)
    assert c is not None and c.nodes
    assert p.tree_extra(DRAFTER, c.width, 200) == ONE_PASS_OVERHEAD  # the estimate
    p.observe_time(None, 0, 10.0, 200)  # a plain step: 10 ms
    for _ in range(20):  # tree rounds took three steps: two more than their pass
        p.observe_time(DRAFTER, c.width, 30.0 + 0.5 * c.width, 200, nodes=c.nodes)
    assert p.tree_extra(DRAFTER, c.width, 200) > 1.5
    again = p.choose(room=64, context=200)
    assert again is not None and again.nodes == 0  # dear trees: back to the chain
    # a measurement with a flat table (learn_time off) keeps to the table
    q = tree_policy(flat, runner_taught(0.7), learn_time=False)
    q.observe_time(None, 0, 10.0, 200)
    q.observe_time(DRAFTER, 4, 100.0, 200, nodes=10)
    assert not q.timing.tree_overhead and q.timing.step_ms is None


def test_second_pass_of_path_by_path_trees_is_priced_from_the_table():
    one = tree_policy(cpu_like, Evidence())
    paths = tree_policy(cpu_like, Evidence(), second_pass=True)
    assert paths.tree_extra(DRAFTER, 4, 200) == ONE_PASS_OVERHEAD + cpu_like(5, 200)
    assert one.tree_extra(DRAFTER, 4, 200) == ONE_PASS_OVERHEAD
    # the node budget prices it the same way: on a flat table the second pass is one step
    probs = np.full((4, 50), 0.001)
    for d, t in enumerate([5, 6, 7, 8]):
        probs[d, t], probs[d, 10 + d] = 0.5, 0.15
    prop = Proposal(tokens=mx.array([5, 6, 7, 8], dtype=mx.uint32),
                    dist=mx.array(probs / probs.sum(axis=1, keepdims=True)))
    assert not NodeBudget(flat_cost()).grow(prop).is_chain
    assert NodeBudget(flat_cost(), second_pass=True).grow(prop) is prop


def test_runner_evidence_ages_and_starts_at_its_prior():
    ev = Evidence()
    assert ev.runner_rates() == list(RUNNER_PRIOR)
    for _ in range(20):
        ev.observe_miss(1)
    assert ev.runner_rates()[1] > 0.8
    for _ in range(300):
        ev.age()
    assert abs(ev.runner_rates()[1] - RUNNER_PRIOR[1]) < 0.05


# -- end to end on tiny real models ---------------------------------------------------------


def test_greedy_auto_with_trees_on_a_flat_table_is_identical_to_plain(pair):  # noqa: F811
    s = flat_session(pair)
    trees = 0
    for prompt in ["The cat sat on", "Once upon a time", "the the the the the"]:
        plain, _ = _generate(s, prompt=prompt, max_tokens=24, draft_kind=kinds.OFF)
        for mode in ("flat", "on"):
            auto, _ = _generate(s, prompt=prompt, max_tokens=24, draft_kind=AUTO, trees=mode)
            assert auto.token_ids == plain.token_ids, (prompt, mode)
            t = auto.timings
            assert t.tree_rounds == sum(v.get("trees", 0) for v in t.sources.values())
            assert all(r.source == DRAFTER for r in auto.rounds if r.tree_nodes)
            assert all(r.tree_nodes > r.proposed for r in auto.rounds if r.tree_nodes)
            if mode == "flat":
                trees += t.tree_rounds
        off, _ = _generate(s, prompt=prompt, max_tokens=24, draft_kind=AUTO)  # trees off
        assert off.token_ids == plain.token_ids and off.timings.tree_rounds == 0
    assert trees > 0  # auto chose trees and they ran


def test_auto_on_a_cpu_like_table_keeps_to_chains(pair):  # noqa: F811
    s = flat_session(pair)
    assert s.target is not None
    # verify of 8 tokens ~ 1.7 steps, of 17 ~ 2.6: what this CPU measured
    s.calibration = new_table(s.target.path, {}, [0], [[1, 8, 17]], [[10.0, 17.0, 26.0]], 0.0)
    plain, _ = _generate(s, prompt="Once upon a time", max_tokens=24, draft_kind=kinds.OFF)
    auto, _ = _generate(s, prompt="Once upon a time", max_tokens=24, draft_kind=AUTO,
                        trees="on")
    assert auto.token_ids == plain.token_ids
    assert auto.timings.tree_rounds == 0


def test_sampled_auto_with_trees_keeps_the_target_distribution(pair):  # noqa: F811
    """At temperature 2 the draft model's tree rounds are verified by the walk rule
    (sample-match: its leaves are not draws from its distribution), its chains by rejection
    sampling, copies by sample-match: the sequences follow the target's own distribution."""
    s = flat_session(pair)
    assert s.target is not None
    prompt_ids = s.target.tokenizer.encode("The dog sat")
    length, n = 3, 800
    exact = _exact_sequence_probs(s.target, prompt_ids, SamplingParams(temperature=2.0,
                                                                       top_k=3), length)
    counts: Counter = Counter()
    trees = 0
    for seed in range(n):
        done, _ = _generate(s, prompt_tokens=tuple(prompt_ids), draft_kind=AUTO, trees="flat",
                            max_tokens=length, memory_interval_s=1e9,
                            sampling=SamplingParams(temperature=2.0, top_k=3, seed=seed))
        counts[tuple(done.token_ids)] += 1
        trees += done.timings.tree_rounds
    stat, df = _chi2(counts, exact, n)
    assert _chi2_sf(stat, df) > 1e-3, (stat, df)
    assert trees > 100, trees  # tree rounds were tested
