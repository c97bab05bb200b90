"""Suffix decoding trees: where the earlier occurrences disagree on what came next, the less
frequent continuations join the chain as a tree. The index's tree (spine = the chain, reach =
the share product, parents first, paths within the match's limit), and in the engine a round
that accepts the less frequent continuation the chain missed, the reply identical to plain;
sampled replies keep the target's distribution (chi-square against enumeration)."""

from __future__ import annotations

from app.engine import verify_step
from app.engine.suffix_index import SuffixIndex
from app.engine.tree import depths
from tests.test_suffix_engine import run, session, suffix_kind  # noqa: F401 - the fixture

COMMON = [5, 6, 7, 8]  # the text the occurrences share


def test_the_index_keeps_every_continuation_as_a_tree():
    index = SuffixIndex()
    index.add([*COMMON, 20, 21, 22, 23])  # twice: the most frequent continuation
    index.add([*COMMON, 20, 21, 22, 23])
    index.add([*COMMON, 30, 31, 32, 33])  # once
    index.add([*COMMON, 20, 21, 40, 41])  # agrees for two tokens, then leaves
    context = [1, 2, *COMMON]
    chain = index.speculate(context, 8)
    tree = index.speculate_tree(context, 8, spine=len(chain.tokens), max_nodes=16)
    assert tree.spine == len(chain.tokens) == 4
    assert tree.tokens[: tree.spine] == chain.tokens == (20, 21, 22, 23)
    assert tree.parents[: tree.spine] == (-1, 0, 1, 2)
    assert abs(tree.reach[0] - 0.75) < 1e-9 and abs(tree.reach[2] - 0.75 * 2 / 3) < 1e-9
    # the runner-ups, each followed along its own occurrences
    paths = {}
    for i, p in enumerate(tree.parents):
        paths[i] = ((*paths[p], tree.tokens[i]) if p >= 0 else (tree.tokens[i],))
    assert {(30, 31, 32, 33), (20, 21, 40, 41)} <= set(paths.values())
    assert all(p < i for i, p in enumerate(tree.parents))  # parents first
    assert list(tree.reach[tree.spine:]) == sorted(tree.reach[tree.spine:], reverse=True)
    assert abs(tree.reach[tree.tokens.index(30)] - 0.25) < 1e-9
    # paths stay within the match's limit, the node count within its cap
    short = index.speculate_tree(context, 2, spine=2, max_nodes=16)
    assert max(depths(short.parents)) <= 2 and set(short.tokens) == {20, 21, 30, 31}
    small = index.speculate_tree(context, 8, spine=4, max_nodes=5)
    assert len(small.tokens) == 5 and small.tokens[4] == 30
    # no branch point and no match: a chain, and nothing
    lone = SuffixIndex()
    lone.add([*COMMON, 20, 21])
    assert lone.speculate_tree(context, 8, spine=2, max_nodes=16).tokens == (20, 21)
    assert index.speculate_tree([9, 9], 8, spine=4, max_nodes=16).tokens == ()


def test_a_tree_accepts_the_less_frequent_continuation(session, monkeypatch):  # noqa: F811
    """Earlier replies: the target's own reply once, and two replies that agreed with it for
    a few tokens and then went elsewhere, the same way for their first few tokens. The chain follows the frequent one and is rejected
    where it leaves; the tree carries the target's continuation too."""
    kind = suffix_kind()
    prompt, n = "Once upon a time", 40
    plain = run(session, prompt=prompt, max_tokens=n)
    reply = list(plain.token_ids)
    # where a chain round proposes several tokens when the reply alone was kept: the decoy
    # leaves the reply right after that round's first token (the rounds before are the same)
    session.replies.remember("test/suffix-trees/probe", reply)
    probe = run(session, prompt=prompt, max_tokens=n, draft_kind=kind,
                reply_scope="test/suffix-trees/probe", adaptive=False)
    starts = [r.total_tokens - r.emitted for r in probe.rounds if r.proposed >= 3]
    j = next(s for s in starts if s >= 2) + 1
    vocab = session.target.vocab_size
    decoys = [reply[:j] + [(t + shift) % vocab for t in reply[j: j + 12]] for shift in (7, 9)]
    decoys[1][j] = decoys[0][j]  # two replies (a store keeps one of each) that agree there
    assert decoys[0][j] != reply[j]

    off_chain: list[tuple[int, ...]] = []
    real_verify = verify_step.verify_tree

    def verify(rows, proposal, **kw):
        verdict = real_verify(rows, proposal, **kw)
        if verdict.path and verdict.path[-1] >= (proposal.spine or proposal.k):
            off_chain.append(verdict.path)
        return verdict

    monkeypatch.setattr(verify_step, "verify_tree", verify)
    done = {}
    for trees in ("off", "flat"):
        scope = f"test/suffix-trees/{trees}"
        for seq in (reply, *decoys):
            session.replies.remember(scope, seq)
        done[trees] = run(session, prompt=prompt, max_tokens=n, draft_kind=kind,
                          reply_scope=scope, trees=trees, adaptive=False)
        assert done[trees].token_ids == plain.token_ids, trees
    chain, tree = done["off"].timings, done["flat"].timings
    assert chain.tree_rounds == 0 and tree.tree_rounds > 0
    assert off_chain, "a round accepted the less frequent continuation"
    # the round that started where the chain round was rejected went further
    chain_at = {r.total_tokens - r.emitted: r.accepted for r in done["off"].rounds}
    assert any(r.tree_nodes and r.accepted > chain_at.get(r.total_tokens - r.emitted, r.accepted)
               for r in done["flat"].rounds)
    # with the width and the pause adapting (a path off the chain counts as deep as it went)
    scope = "test/suffix-trees/adaptive"
    for seq in (reply, *decoys):
        session.replies.remember(scope, seq)
    adaptive = run(session, prompt=prompt, max_tokens=n, draft_kind=kind, reply_scope=scope,
                   trees="flat")
    assert adaptive.token_ids == plain.token_ids and adaptive.timings.tree_rounds > 0


def test_sampled_trees_keep_the_distribution(session, monkeypatch):  # noqa: F811
    """Kept replies that continue the prompt's end the ways the target most often does: the
    first round is a tree of them, verified by the walk rule; the replies' distribution is
    the target's (chi-square against enumeration; a wrong walk fails the same test)."""
    from collections import Counter

    from app.engine import tree_verify
    from app.engine.events import SamplingParams
    from tests.test_engine import _chi2, _chi2_sf, _exact_sequence_probs

    kind = suffix_kind()
    prompt = tuple(session.target.tokenizer.encode("The cat sat on"))
    sampling = SamplingParams(temperature=1.0, top_k=3)
    length, n = 3, 1200
    exact = _exact_sequence_probs(session.target, list(prompt), sampling, length)
    likely = sorted(exact, key=lambda seq: -exact[seq])[:6]
    off_chain: list[tuple[int, ...]] = []
    real_verify = verify_step.verify_tree

    def verify(rows, proposal, **kw):
        verdict = real_verify(rows, proposal, **kw)
        if verdict.path and verdict.path[-1] >= (proposal.spine or proposal.k):
            off_chain.append(verdict.path)
        return verdict

    monkeypatch.setattr(verify_step, "verify_tree", verify)

    def sample(n: int) -> tuple[Counter, int]:
        counts: Counter = Counter()
        tree_rounds = 0
        for seed in range(n):
            scope = "test/suffix-trees/sampled"
            session.replies.forget(scope)
            for seq in likely:
                session.replies.remember(scope, [*prompt[-2:], *seq])
            done = run(session, prompt_tokens=prompt, max_tokens=length, draft_kind=kind,
                       reply_scope=scope, trees="flat", adaptive=False, lookup_assist=False,
                       sampling=SamplingParams(temperature=1.0, top_k=3, seed=seed),
                       memory_interval_s=1e9)
            counts[tuple(done.token_ids)] += 1
            tree_rounds += done.timings.tree_rounds
        return counts, tree_rounds

    counts, tree_rounds = sample(n)
    assert tree_rounds >= n // 2 and len(off_chain) >= n // 20, (tree_rounds, len(off_chain))
    stat, df = _chi2(counts, exact, n)
    assert _chi2_sf(stat, df) > 1e-3, (stat, df)

    real = tree_verify.sm.sample  # a wrong walk: the child with the target's top token

    def argmax_rows(rows, sampling, positions=None):
        return real(rows, SamplingParams(temperature=0.0)) if rows.shape[0] > 1 else \
            real(rows, sampling, positions)

    monkeypatch.setattr(tree_verify.sm, "sample", argmax_rows)
    wrong, _ = sample(n // 2)
    stat_w, df_w = _chi2(wrong, exact, n // 2)
    assert _chi2_sf(stat_w, df_w) < 1e-6, (stat_w, df_w)
