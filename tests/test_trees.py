"""Tree proposals on real tiny models: the tree verify pass gives every node the logits its
path alone gives, the kept path leaves the cache as a plain prefill would, greedy decoding with
trees is identical to plain decoding on KV, sliding-window and hybrid targets, and sampling
stays exact (chi-square against enumeration), the multi-draft rejection rule included."""

from __future__ import annotations

from collections import Counter
from pathlib import Path

import mlx.core as mx
import numpy as np
import pytest

from app.engine import tree_build, tree_pass, tree_verify
from app.engine.events import (
    RULE_REJECTION,
    RULE_SAMPLE_MATCH,
    DoneEvent,
    GenerationRequest,
    SamplingParams,
)
from app.engine.models import load_model, make_cache
from app.engine.proposal import Proposal
from app.engine.session import Session
from tests.builders_hybrid import DRAFT_NOISE, make_family_checkpoint, perturbed_copy
from tests.test_engine import _chi2, _chi2_sf, _exact_sequence_probs

PROMPT = ("The cat sat on the mat. The dog sat on the log. Once upon a time there was a "
          "tiny model")
FAMILIES = ["llama", "qwen3", "gemma3_text", "qwen3_5"]
# a tree with branches at several depths and a chain inside it
PARENTS = (-1, 0, 0, 1, -1, 4, 3, 2)


@pytest.fixture(scope="module")
def family_dirs(tmp_path_factory) -> dict[str, tuple[Path, Path]]:
    root = tmp_path_factory.mktemp("tree_families")
    out = {}
    for fam in FAMILIES:
        target = make_family_checkpoint(root / fam, fam, seed=0)
        out[fam] = (target, perturbed_copy(target, root / f"{fam}-draft",
                                           noise=DRAFT_NOISE[fam]))
    return out


def _path_tokens(tokens: list[int], parents: tuple[int, ...], node: int) -> list[int]:
    from app.engine.tree import ancestors

    return [tokens[i] for i in ancestors(parents, node)]


@pytest.mark.parametrize("family", FAMILIES)
def test_tree_pass_gives_each_node_its_paths_logits(family_dirs, family):
    target = load_model(family_dirs[family][0])
    model = target.model
    ids = target.tokenizer.encode(PROMPT)
    rng = np.random.default_rng(0)
    tokens = [int(t) for t in rng.integers(3, 200, size=len(PARENTS))]
    cache = make_cache(target)
    model(mx.array(ids[:-1])[None], cache=cache)
    want_method = tree_pass.ONE_PASS if family in ("llama", "qwen3") else tree_pass.PATHS
    assert tree_pass.method(model, cache) == want_method
    if want_method == tree_pass.ONE_PASS:
        inputs = mx.array([ids[-1], *tokens], dtype=mx.uint32)
        logits, _ = tree_pass.forward_one_pass(model, inputs, PARENTS, 1, cache, None)
        rows = logits  # row 0: after the pending token; row 1 + i: after node i
    else:
        rows = tree_pass.forward_paths(model, [ids[-1]], tokens, PARENTS, cache)
    want_root = model(mx.array(ids)[None])[0, -1]
    assert mx.allclose(rows[0], want_root, atol=1e-4).item()
    for i in range(len(PARENTS)):
        seq = ids + _path_tokens(tokens, PARENTS, i)
        want = model(mx.array(seq)[None])[0, -1]
        assert mx.allclose(rows[1 + i], want, atol=1e-4).item(), (family, i)
    if want_method == tree_pass.ONE_PASS:
        # keep the path to node 6 (0 -> 1 -> 3 -> 6): the cache is a plain prefill of it
        path = (0, 1, 3, 6)
        tree_pass.keep_path(cache, 1, len(PARENTS), path)
        seq = ids + [tokens[i] for i in path]
        assert cache[0].offset == len(seq)
        nxt = 7
        got = model(mx.array([nxt])[None], cache=cache)[0, -1]
        want = model(mx.array([*seq, nxt])[None])[0, -1]
        assert mx.allclose(got, want, atol=1e-4).item()


def _gen(s: Session, **kw) -> DoneEvent:
    done = list(s.generate(GenerationRequest(prompt=PROMPT, chat=False, max_tokens=40,
                                             allow_fallback=False, memory_interval_s=1e9,
                                             **kw)))[-1]
    assert isinstance(done, DoneEvent)
    assert done.finish_reason != "error", done.error
    return done


@pytest.mark.parametrize("family", FAMILIES)
def test_greedy_trees_identical_to_plain(family_dirs, family):
    target, perturbed = family_dirs[family]
    s = Session()
    s.load_target(target)
    plain = _gen(s)
    s.load_draft(perturbed)
    trees = 0
    depths: Counter = Counter()
    for width in (2, 4):
        spec = _gen(s, draft_kind="full-model", draft_width=width, adaptive=False,
                    lookup_assist=False, trees="flat")
        assert spec.token_ids == plain.token_ids, width
        tree_rounds = [r for r in spec.rounds if r.tree_nodes]
        trees += len(tree_rounds)
        depths.update(r.accepted for r in tree_rounds)
        assert all(r.tree_nodes > r.proposed for r in tree_rounds)
    assert trees > 0  # trees really ran
    assert len(depths) >= 2, depths  # and were accepted to varied depths


def test_sampled_trees_keep_the_distribution(family_dirs, monkeypatch):
    target, perturbed = family_dirs["llama"]
    s = Session()
    s.load_target(target)
    s.load_draft(perturbed)
    prompt_ids = s.target.tokenizer.encode("The dog sat")
    sampling = SamplingParams(temperature=1.0, top_k=3)
    length, n = 3, 800
    exact = _exact_sequence_probs(s.target, prompt_ids, sampling, length)

    def sample(n: int) -> tuple[Counter, int]:
        counts: Counter = Counter()
        tree_rounds = 0
        for seed in range(n):
            req = GenerationRequest(
                prompt_tokens=tuple(prompt_ids), draft_kind="full-model", draft_width=2,
                sampling=SamplingParams(temperature=1.0, top_k=3, seed=seed),
                max_tokens=length, memory_interval_s=1e9, adaptive=False,
                lookup_assist=False, trees="flat")
            done = list(s.generate(req))[-1]
            counts[tuple(done.token_ids)] += 1
            tree_rounds += sum(1 for r in done.rounds if r.tree_nodes)
        return counts, tree_rounds

    counts, tree_rounds = sample(n)
    assert tree_rounds >= n // 2
    stat, df = _chi2(counts, exact, n)
    assert _chi2_sf(stat, df) > 1e-3, (stat, df)

    # the same test catches a wrong walk: following the child with the target's top token
    real = tree_verify.sm.sample

    def argmax_rows(rows, sampling, positions=None):
        return real(rows, SamplingParams(temperature=0.0)) if rows.shape[0] > 1 else \
            real(rows, sampling, positions)

    monkeypatch.setattr(tree_verify.sm, "sample", argmax_rows)
    wrong, _ = sample(n // 2)
    stat_w, df_w = _chi2(wrong, exact, n // 2)
    assert _chi2_sf(stat_w, df_w) < 1e-6, (stat_w, df_w)


# -- the multi-draft rejection rule, on its own -------------------------------------------


def _probs(rng: np.random.Generator, v: int) -> np.ndarray:
    p = rng.random(v) ** 3
    return p / p.sum()


def _multi_draft_counts(n: int, *, stated_q_root: np.ndarray | None = None):
    v = 6
    rng = np.random.default_rng(3)
    p_root = _probs(rng, v)
    p_after = np.stack([_probs(rng, v) for _ in range(v)])  # the target after token x
    q_root, q_child = _probs(rng, v), _probs(rng, v)
    said = q_root if stated_q_root is None else stated_q_root
    sampling = SamplingParams(temperature=1.0)
    parents = (-1, -1, -1, 0, 0, 1, 1, 2, 2)  # three root children, two under each
    first: Counter = Counter()
    second: dict[int, Counter] = {x: Counter() for x in range(v)}
    mx.random.seed(0)
    for _ in range(n):
        top = rng.choice(v, size=3, p=q_root)
        low = rng.choice(v, size=6, p=q_child)
        toks = [int(t) for t in (*top, *low)]
        q = np.stack([said] * 3 + [q_child] * 6)
        rows = np.log(np.stack([p_root, *(p_after[t] for t in toks)]))
        verdict = tree_verify.verify_tree(
            mx.array(rows.astype(np.float32)),
            Proposal(tokens=mx.array(toks, dtype=mx.uint32),
                     q=mx.array(q.astype(np.float32)), parents=parents),
            sampling=sampling, rule=RULE_REJECTION)
        kept = verdict.kept
        first[(kept[0],)] += 1
        if len(kept) > 1:
            second[kept[0]][(kept[1],)] += 1
    return p_root, p_after, first, second


def test_multi_draft_rejection_is_exact():
    """Children drawn i.i.d. from ``q``, two levels: the first emitted token follows ``p``
    at the root and the second ``p`` after the first (chi-square against the exact values)."""
    n = 6000
    p_root, p_after, first, second = _multi_draft_counts(n)
    v = len(p_root)
    stat, df = _chi2(first, {(x,): float(p_root[x]) for x in range(v)}, n)
    assert _chi2_sf(stat, df) > 1e-3, (stat, df)
    checked = 0
    for x in range(v):
        m = sum(second[x].values())
        if m < 200:
            continue
        checked += 1
        stat, df = _chi2(second[x], {(y,): float(p_after[x][y]) for y in range(v)}, m)
        assert _chi2_sf(stat, df) > 1e-3, (x, stat, df)
    assert checked >= 2
    # the same test catches a rule told the wrong q (the children are not draws from it)
    _, _, wrong, _ = _multi_draft_counts(n, stated_q_root=np.full(v, 1.0 / v))
    stat_w, df_w = _chi2(wrong, {(x,): float(p_root[x]) for x in range(v)}, n)
    assert _chi2_sf(stat_w, df_w) < 1e-6, (stat_w, df_w)


def test_deterministic_walk_follows_the_drawn_token():
    rows = mx.log(mx.array([[0.0, 1, 0], [0, 0, 1], [1, 0, 0], [0, 1, 0]]) + 1e-9)
    prop = Proposal(tokens=mx.array([2, 1, 0], dtype=mx.uint32), parents=(-1, -1, 1))
    v = tree_verify.verify_tree(rows, prop, sampling=SamplingParams(temperature=0.0),
                                rule=RULE_SAMPLE_MATCH)
    # root draws 1 -> node 1; node 1's row draws 0 -> node 2; node 2's row draws 1: emitted
    assert v.path == (1, 2) and v.kept == [1, 0, 1]


# -- the node budget ---------------------------------------------------------------------


def test_budget_grows_trees_only_where_they_pay():
    probs = np.full((4, 50), 0.001)
    spine = [5, 6, 7, 8]
    for d, t in enumerate(spine):
        probs[d, t] = 0.5
        probs[d, 10 + d] = 0.15  # a runner-up at every depth
    probs /= probs.sum(axis=1, keepdims=True)
    prop = Proposal(tokens=mx.array(spine, dtype=mx.uint32), dist=mx.array(probs))
    flat = tree_build.NodeBudget(tree_build.flat_cost()).grow(prop)
    assert not flat.is_chain and flat.spine == 4 and flat.k > 4
    steep = tree_build.NodeBudget(tree_build.linear_cost(0.5)).grow(prop)
    assert steep is prop  # a verify that grows half a step per token: no leaf pays
    # flat, but a tree round costs a whole step more than its pass: the chain stays
    dear = tree_build.NodeBudget(tree_build.flat_cost(), tree_overhead=1.0).grow(prop)
    assert dear is prop
    chain_v = tree_build.expected_tokens_per_cost(
        [0.5] * 4, [], verify_cost=lambda n: 1.0, draft_cost=0.2)
    tree_v = tree_build.expected_tokens_per_cost(
        [0.5] * 4, [tree_build.Leaf(0, 10, 0.4)], verify_cost=lambda n: 1.0, draft_cost=0.2)
    assert tree_v > chain_v


def test_a_patient_budget_looks_less_while_trees_do_not_pay_and_every_round_once_they_do():
    """On a steep table a patient budget passes more and more rounds as chains unread (each
    look reads the drafter's whole distribution); when the costs turn flat it finds a tree
    within ``MAX_PATIENCE`` rounds and then looks at every round."""
    probs = np.full((4, 50), 0.001)
    for d, t in enumerate([5, 6, 7, 8]):
        probs[d, t], probs[d, 10 + d] = 0.5, 0.15
    probs /= probs.sum(axis=1, keepdims=True)
    prop = Proposal(tokens=mx.array([5, 6, 7, 8], dtype=mx.uint32), dist=mx.array(probs))
    table = {"slope": 0.5}
    budget = tree_build.NodeBudget(
        lambda n, ctx: tree_build.linear_cost(table["slope"])(n, ctx)
        if table["slope"] else tree_build.flat_cost()(n, ctx), patient=True)
    looks = []
    real = budget._grown

    def counted(*a, **kw):
        looks.append(True)
        return real(*a, **kw)

    budget._grown = counted  # type: ignore[method-assign]
    for _ in range(40):
        assert budget.grow(prop) is prop
    assert 4 <= len(looks) <= 8  # 1, 2, 4, 8, 16, 16 rounds apart: not 40 looks
    table["slope"] = 0.0
    grown = [budget.grow(prop) for _ in range(tree_build.MAX_PATIENCE + 1)]
    first = next(i for i, g in enumerate(grown) if g is not prop)
    assert all(g is not prop for g in grown[first:])  # every round once trees pay
    impatient = tree_build.NodeBudget(tree_build.linear_cost(0.5))
    for _ in range(5):
        impatient.grow(prop)
    assert impatient.chains == 5 and impatient.idle == 0  # the auto kind's: looks when asked


# -- trees from the MTP head and from DFlash's block pass ----------------------------------


def _tree_run(s: Session, prompt: tuple[int, ...], kind: str, trees: str) -> DoneEvent:
    done = list(s.generate(GenerationRequest(
        prompt_tokens=prompt, chat=False, max_tokens=24, draft_kind=kind, trees=trees,
        allow_fallback=False, lookup_assist=False, adaptive=False, memory_interval_s=1e9)))[-1]
    assert isinstance(done, DoneEvent) and done.finish_reason != "error", done.error
    return done


def test_mtp_head_trees_greedy_identical_to_plain(tmp_path):
    """A hybrid (Gated DeltaNet) target with its MTP head: trees verified paths side by side,
    the head's own state kept along its chain."""
    from tests.builders_mtp import make_qwen3_5_checkpoint

    s = Session()
    s.load_target(make_qwen3_5_checkpoint(tmp_path / "q35"))
    prompt = (5, 17, 42, 99, 7, 150, 23, 64)
    plain = _tree_run(s, prompt, "none", "off")
    flat = _tree_run(s, prompt, "mtp", "flat")
    assert flat.token_ids == plain.token_ids
    assert flat.timings.fallback is None and flat.timings.tree_rounds > 0


def test_dflash_trees_branch_at_any_depth_and_stay_exact(tmp_path):
    """DFlash's per-position distributions grow best-first trees (DDTree): nodes under the
    runner-ups too, not only beside the chain."""
    from app.engine import proposals
    from tests import builders_dflash as bd

    target, drafter = bd.make_pair(tmp_path, "2026")
    s = Session()
    s.load_target(target)
    s.load_draft(drafter)
    seen: list[Proposal] = []
    real = proposals.NodeBudget.grow

    def grow(self, proposal, *a, **kw):
        out = real(self, proposal, *a, **kw)
        seen.append(out)
        return out

    proposals.NodeBudget.grow = grow  # type: ignore[method-assign]
    try:
        plain = _tree_run(s, bd.PROMPT, "none", "off")
        flat = _tree_run(s, bd.PROMPT, "dflash", "flat")
    finally:
        proposals.NodeBudget.grow = real  # type: ignore[method-assign]
    assert flat.token_ids == plain.token_ids
    assert flat.timings.tree_rounds > 0
    trees = [p for p in seen if p.parents is not None]
    deep = [p for p in trees if any(par >= (p.spine or 0) for par in p.parents)]
    assert deep, "some node hangs under a node off the chain"
